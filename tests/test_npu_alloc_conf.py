"""PYTORCH_NPU_ALLOC_CONF: keys, defaults, incompatibilities and error texts of
``Ascend/pytorch`` ``torch_npu/csrc/core/npu/NPUAllocatorConfig.cpp`` and ``pytorch/pytorch``
``c10/core/AllocatorConfig.{h,cpp}``."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ascend_memsim import MiB
from ascend_memsim.allocators import AllocatorConfig, AllocatorConfigError, parse_alloc_conf
from ascend_memsim.allocators.conf import SIZE_MAX
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
    ("colour:blue", "Unrecognized key 'colour' in NPU allocator config, "),
    ("backend:native", "torch_npu not support key 'backend' in NPU allocator config, "),
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
