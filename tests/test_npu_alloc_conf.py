"""PYTORCH_NPU_ALLOC_CONF: keys, defaults, incompatibilities and error texts of
``Ascend/pytorch`` ``torch_npu/csrc/core/npu/NPUAllocatorConfig.cpp`` and ``pytorch/pytorch``
``c10/core/AllocatorConfig.{h,cpp}``."""

import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ascend_memsim import MiB, Runtime
from ascend_memsim.allocators import (
    AllocatorConfig,
    AllocatorConfigError,
    NpuCachingAllocator,
    parse_alloc_conf,
)
from ascend_memsim.allocators.conf import SIZE_MAX, alloc_conf_from_env
from ascend_memsim.cli import main
from ascend_memsim.memory.errors import InvalidArgumentType


def test_defaults_are_torch_npus():
    conf = parse_alloc_conf("")
    assert conf == AllocatorConfig()
    assert conf.max_split_size == SIZE_MAX                 # unlimited
    assert conf.max_non_split_rounding_size == 20 * MiB    # kLargeBuffer
    assert conf.large_segment_size == 20 * MiB
    assert conf.base_addr_aligned_size == 16384            # kAlignRoundLarge
    assert conf.per_process_memory_fraction == 1.0
    assert conf.roundup_power2_divisions == (0,) * 16
    assert not conf.expandable_segments and not conf.page_size_1g


def test_every_key_parses():
    conf = parse_alloc_conf(
        "max_split_size_mb:64, max_non_split_rounding_mb:32,garbage_collection_threshold:0.7,"
        "roundup_power2_divisions:[64:8,256:4,>:1],large_segment_size_mb:40,"
        "base_addr_aligned_kb:4,page_size:1g,segment_size_mb:64,multi_stream_lazy_reclaim:True,"
        "per_process_memory_fraction:0.25,release_lock_on_npumalloc:True,"
        "throw_on_npumalloc_oom:True,pin_memory_expandable_segments:False,"
        "pinned_mem_register:False,pinned_reserve_segment_size_mb:8,"
        "pinned_use_background_threads:True,pinned_max_round_threshold_mb:4,"
        "pinned_max_cached_size_mb:64")
    assert conf.max_split_size == 64 * MiB and conf.max_non_split_rounding_size == 32 * MiB
    assert conf.garbage_collection_threshold == 0.7
    # parseRoundUpPower2Divisions: intervals below the first boundary take its value too; an
    # interval between two boundaries keeps 0 (only each boundary's own index is set)
    assert conf.roundup_power2_divisions == (8,) * 7 + (0, 4) + (1,) * 7
    assert conf.large_segment_size == 40 * MiB and conf.segment_size == 64 * MiB
    assert conf.base_addr_aligned_size == 4096 and conf.page_size_1g
    assert conf.multi_stream_lazy_reclaim and conf.release_lock_on_npumalloc
    assert conf.per_process_memory_fraction == 0.25 and conf.throw_on_npumalloc_oom
    assert conf.pinned["pinned_reserve_segment_size_mb"] == 8
    assert conf.divisions_for(100 * MiB) == 8 and conf.divisions_for(150 * MiB) == 0


@pytest.mark.parametrize(("text", "message"), [
    ("colour:blue", "Unrecognized key 'colour' in NPU allocator config"),
    ("backend:native", "torch_npu not support key 'backend' in NPU allocator config"),
    ("max_split_size_mb:10", "CachingAllocator option max_split_size_mb too small, must be >= 20"),
    ("max_non_split_rounding_mb:1",
     "CachingAllocator option max_non_split_rounding_mb too small, must be >= 20"),
    ("large_segment_size_mb:10", "CachingAllocator option large_segment_size_mb must be > 10 MB"),
    ("garbage_collection_threshold:1.0",
     "garbage_collect_threshold is invalid, set it in (0.0, 1.0)"),
    ("roundup_power2_divisions:3", "For roundups, the divisions has to be power of 2 "),
    ("roundup_power2_divisions:[64:3]",
     "For roundups, the divisions has to be power of 2 or 0 to disable roundup "),
    ("roundup_power2_divisions:[63:4]", "For roundups, the intervals have to be power of 2 "),
    ("expandable_segments:yes", "Expected 'True' or 'False' at index 2 in ConfigTokenizer but "
                                "got 'yes'"),
    ("expandable_segments:True,max_split_size_mb:64",
     "`max_split_size_mb` or `garbage_collection_threshold`, cannot be enabled with "
     "`expandable_segments`, please set `expandable_segments` to `False`."),
    ("base_addr_aligned_kb:17",
     "CachingAllocator option base_addr_aligned_kb error, must be [0~16], dtype is int"),
    ("base_addr_aligned_kb:-1", "CachingAllocator option base_addr_aligned_kb is invalid."),
    ("page_size:2m", "Unsupported page_size value: 2m"),
    # the key pass (skipKey) runs before parsePageSize, so its own message is not reached
    ("page_size", "Index out of bounds in ConfigTokenizer"),
    ("segment_size_mb:10",
     "CachingAllocator option segment_size_mb error, must be [20, 512], dtype is int"),
    ("per_process_memory_fraction:1.5",
     "per_process_memory_fraction is invalid, set it in [0.0, 1.0]"),
    ("throw_on_npumalloc_oom:1", "Expected a single True/False argument for "
                                 "throw_on_npumalloc_oom"),
    ("max_split_size_mb", "Index out of bounds in ConfigTokenizer"),
    ("roundup_power2_divisions:[64:8",
     "Expected closing bracket ']' in ConfigTokenizer but reached end of config"),
])
def test_refused_with_torch_npus_words(text, message):
    with pytest.raises(AllocatorConfigError) as info:
        parse_alloc_conf(text)
    assert str(info.value) == message
    assert isinstance(info.value, ValueError) and info.value.code == 100000


def test_not_a_string():
    with pytest.raises(InvalidArgumentType):
        parse_alloc_conf(b"max_split_size_mb:64")


@given(st.text(alphabet="abcdefgxmpilorstuz_:,[]>0123456789. TF", max_size=40))
def test_any_string_parses_or_is_refused_cleanly(text):
    try:
        conf = parse_alloc_conf(text)
    except AllocatorConfigError as e:
        assert str(e)
    else:
        assert isinstance(conf, AllocatorConfig)


@pytest.mark.parametrize(("text", "message"), [
    # torch_npu's words without the ", " its error code followed, then the closest key
    ("max_split_size:64", "Unrecognized key 'max_split_size' in NPU allocator config. "
                          "Did you mean 'max_split_size_mb'?"),
    ("expandable_segment:True", "Unrecognized key 'expandable_segment' in NPU allocator "
                                "config. Did you mean 'expandable_segments'?"),
    ("garbage_colection_threshold:0.5", "Unrecognized key 'garbage_colection_threshold' in "
     "NPU allocator config. Did you mean 'garbage_collection_threshold'?"),
    # a c10 key torch_npu refuses: its own key is suggested
    ("release_lock_on_cudamalloc:True", "torch_npu not support key "
     "'release_lock_on_cudamalloc' in NPU allocator config. Did you mean "
     "'release_lock_on_npumalloc'?"),
])
def test_a_misspelled_key_suggests_the_right_one(text, message):
    """Issue 25 item 16: the key torch_npu takes that is closest, after torch_npu's words
    (which ended "config, " before the error code torch_npu appends)."""
    with pytest.raises(AllocatorConfigError) as info:
        parse_alloc_conf(text)
    assert str(info.value) == message


@pytest.mark.parametrize(("text", "message"), [
    ("max_split_size_mb:64MB", "stoull: invalid value '64MB' for max_split_size_mb: write a "
                               "whole number, max_split_size_mb:64"),
    ("large_segment_size_mb:big", "stoull: invalid value 'big' for large_segment_size_mb: "
                                  "write a whole number"),
    ("max_split_size_mb:-64", "stoull: invalid value '-64' for max_split_size_mb: write a "
                              "whole number"),
    ("roundup_power2_divisions:[64:x]", "stoull: invalid value 'x' for "
                                        "roundup_power2_divisions: write a whole number"),
    ("garbage_collection_threshold:high", "stod: invalid value 'high' for "
                                          "garbage_collection_threshold: write a number"),
    ("max_split_size_mb:18446744073709551616", "stoull: value '18446744073709551616' out of "
     "range for max_split_size_mb (at most 18446744073709551615)"),
])
def test_a_value_that_is_no_number_names_its_key(text, message):
    """Issue 25 item 16: "stoull: invalid value '64MB'" did not say which key."""
    with pytest.raises(AllocatorConfigError) as info:
        parse_alloc_conf(text)
    assert str(info.value) == message


@pytest.mark.parametrize(("key", "message"), [
    ("base_addr_aligned_kb",
     "CachingAllocator option base_addr_aligned_kb error, must be [0~16], dtype is int"),
    ("segment_size_mb",
     "CachingAllocator option segment_size_mb error, must be [20, 512], dtype is int"),
    ("max_split_size_mb", "stoull: value '11111111111111111111...' out of range for "
                          "max_split_size_mb (at most 18446744073709551615)"),
    ("pinned_reserve_segment_size_mb", "stoull: value '11111111111111111111...' out of range "
     "for pinned_reserve_segment_size_mb (at most 18446744073709551615)"),
])
def test_a_huge_number_is_the_config_error_naming_its_key(key, message):
    """Issue 25 item 8: 5,000 digits raised Python's bare ValueError ("Exceeds the limit
    (4300 digits)") for base_addr_aligned_kb and segment_size_mb."""
    with pytest.raises(AllocatorConfigError) as info:
        parse_alloc_conf(f"{key}:{'1' * 5000}")
    assert str(info.value) == message
    # one past int's range, as torch_npu's stoi would refuse it
    if key in ("base_addr_aligned_kb", "segment_size_mb"):
        with pytest.raises(AllocatorConfigError, match=key):
            parse_alloc_conf(f"{key}:2147483648")
        with pytest.raises(AllocatorConfigError, match=key):
            parse_alloc_conf(f"{key}:{'0' * 5000}16")


def test_segment_size_mb_reads_leading_zeros_as_stoi_does():
    assert parse_alloc_conf("segment_size_mb:" + "0" * 40 + "64").segment_size == 64 * MiB


@pytest.mark.parametrize(("environ", "expected"), [
    ({}, (None, "")),
    ({"PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True"},
     ("PYTORCH_NPU_ALLOC_CONF", "expandable_segments:True")),
    ({"PYTORCH_ALLOC_CONF": "max_split_size_mb:64"},
     ("PYTORCH_ALLOC_CONF", "max_split_size_mb:64")),
    ({"PYTORCH_NPU_ALLOC_CONF": ""}, ("PYTORCH_NPU_ALLOC_CONF", "")),
    ({"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:64"}, (None, "")),   # not torch_npu's
])
def test_the_environment_as_torch_npu_reads_it(environ, expected):
    """Issue 25 item 13: NPUAllocatorConfig::instance (NPUAllocatorConfig.cpp, torch_npu 2.10
    and later) reads PYTORCH_NPU_ALLOC_CONF, else PYTORCH_ALLOC_CONF."""
    assert alloc_conf_from_env(environ) == expected


@pytest.mark.parametrize("npu", ["", "expandable_segments:True"])
def test_both_variables_set_is_refused_with_torch_npus_message(npu):
    with pytest.raises(AllocatorConfigError) as info:
        alloc_conf_from_env({"PYTORCH_NPU_ALLOC_CONF": npu,
                             "PYTORCH_ALLOC_CONF": "max_split_size_mb:64"})
    assert str(info.value) == ("Both PYTORCH_NPU_ALLOC_CONF and PYTORCH_ALLOC_CONF have been "
                               "set, please set only one of them.")


def test_replay_takes_the_settings_from_the_environment_as_torch_npu(tmp_path, monkeypatch,
                                                                     capsys):
    """Issue 25 item 13: ``replay --allocator torch-npu`` without --alloc-conf uses what
    torch_npu would read in this environment, and says so; both variables set is
    torch_npu's error, exit status 2. --alloc-conf overrides."""
    with Runtime("A2", hbm_bytes=256 * MiB, sanitizer="off") as rt:
        alloc = NpuCachingAllocator(rt)
        alloc.record_history()
        for size in (3 * MiB, 30 * MiB, 100):
            alloc.malloc(size)
        snapshot = alloc.memory_snapshot()
    path = tmp_path / "snap.pickle"
    path.write_bytes(pickle.dumps(snapshot))
    args = ["replay", str(path), "--allocator", "torch-npu", "--product", "A2",
            "--capacity", "256MiB"]
    for name in ("PYTORCH_NPU_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        monkeypatch.delenv(name, raising=False)
    assert main(args) == 0
    out, err = capsys.readouterr()
    assert "(default conf)" in out and err == ""
    monkeypatch.setenv("PYTORCH_ALLOC_CONF", "expandable_segments:True")
    assert main(args) == 0
    out, err = capsys.readouterr()
    assert "caching allocator (expandable_segments:True)" in out
    assert "from PYTORCH_ALLOC_CONF='expandable_segments:True'" in err
    assert main([*args, "--alloc-conf", ""]) == 0
    assert "(default conf)" in capsys.readouterr().out
    monkeypatch.setenv("PYTORCH_NPU_ALLOC_CONF", "max_split_size_mb:64")
    assert main(args) == 2
    assert "Both PYTORCH_NPU_ALLOC_CONF and PYTORCH_ALLOC_CONF have been set" in \
        capsys.readouterr().err
    # a misspelled key on the command line: torch_npu's words, then the suggestion
    assert main([*args, "--alloc-conf", "expandable_segment:True"]) == 2
    assert ("Unrecognized key 'expandable_segment' in NPU allocator config. Did you mean "
            "'expandable_segments'?") in capsys.readouterr().err


def test_a_huge_setting_is_shown_cut_and_once():
    """Issue 36, item 29: a 110 KB PYTORCH_NPU_ALLOC_CONF was echoed twice in full."""
    from ascend_memsim.plan import study

    huge = "x" * 110_000
    with pytest.raises(AllocatorConfigError) as caught:
        parse_alloc_conf(huge)
    assert str(caught.value) == ("Unrecognized key '" + "x" * 60 + "... (110,000 characters)' "
                                 "in NPU allocator config")
    with pytest.raises(AllocatorConfigError) as caught:
        study({"snapshots": [{"segments": []}], "settings": [huge]})
    assert len(str(caught.value)) < 300 and str(caught.value).count("110,000 characters") == 2
