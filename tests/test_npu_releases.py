"""torch_npu releases (ascend_memsim/allocators/releases.py): the allocator behaviours that
changed between them, each read from its branch of Ascend/pytorch."""

import pytest

from ascend_memsim import GiB, MiB, Runtime
from ascend_memsim.allocators import NpuCachingAllocator
from ascend_memsim.allocators.conf import alloc_conf_from_env, parse_alloc_conf
from ascend_memsim.allocators.releases import NEWEST, release
from ascend_memsim.memory.errors import AllocatorConfigError


def test_versions_name_their_release_line_and_others_are_refused():
    assert release("2.6").branch == "v2.6.0" and release("2.7.1.post2").branch == "v2.7.1"
    assert release("v2.9.0").version == "2.9" and release("2.14.0").branch == "master"
    assert NEWEST.version == "2.15"
    for bad in ("2.0", "3.1", "x", "\uff12.\uff16", "2.6" + "1" * 200 + "x", ""):
        with pytest.raises(ValueError, match="the model knows the release lines") as e:
            release(bad)
        assert len(str(e.value)) < 250          # a long input is cut, not echoed


def test_a_setting_a_release_does_not_know_is_refused_with_that_releases_message():
    # NPUAllocatorConfig::parseArgs of v2.9.0: "Unrecognized CachingAllocator option";
    # per_process_memory_fraction came in 2.10 (PR-34238), large_segment_size_mb in 2.11
    with pytest.raises(AllocatorConfigError, match="Unrecognized CachingAllocator option: "
                                                   "per_process_memory_fraction"):
        parse_alloc_conf("per_process_memory_fraction:0.5", release("2.9"))
    assert parse_alloc_conf("per_process_memory_fraction:0.5", release("2.10")) \
        .per_process_memory_fraction == 0.5
    with pytest.raises(AllocatorConfigError, match="Unrecognized key 'large_segment_size_mb'"):
        parse_alloc_conf("large_segment_size_mb:64", release("2.10"))
    # 2.2's branch knows three settings; page_size came back in 2.3
    with pytest.raises(AllocatorConfigError, match="option: page_size"):
        parse_alloc_conf("page_size:1g", release("2.2"))
    assert parse_alloc_conf("page_size:1g", release("2.3")).page_size_1g
    # the newest: today's messages, as without a release
    with pytest.raises(AllocatorConfigError, match="torch_npu not support key 'backend'"):
        parse_alloc_conf("backend:native", NEWEST)


def test_pytorch_alloc_conf_is_read_from_2_10_only():
    env = {"PYTORCH_ALLOC_CONF": "expandable_segments:True"}
    assert alloc_conf_from_env(env, release("2.9")) == (None, "")
    assert alloc_conf_from_env(env, release("2.10")) == ("PYTORCH_ALLOC_CONF",
                                                         "expandable_segments:True")
    both = {**env, "PYTORCH_NPU_ALLOC_CONF": ""}
    assert alloc_conf_from_env(both, release("2.9")) == ("PYTORCH_NPU_ALLOC_CONF", "")
    with pytest.raises(AllocatorConfigError, match="Both"):
        alloc_conf_from_env(both)


@pytest.mark.parametrize("version, gc", [("2.6", True), ("2.15", False)])
def test_a_fraction_of_1_caps_and_collects_garbage_up_to_2_9_only(version, gc):
    # setMemoryFraction: v2.9.0 and before, allowed = fraction * total and set_fraction, so
    # garbage_collection_threshold acts; from 2.10 a fraction of 1.0 removes the cap.
    # By hand: 600 MiB + 32 rounds to 600 MiB + 512, its segment to 602 MiB (2 MiB steps
    # above 10 MiB); 700 MiB likewise 702 MiB. The threshold is 0.1 of 4 GiB (409.6 MiB):
    # with a cap, the cached 602 MiB segment is over it and goes before the 702 MiB one is
    # made; without, both are held.
    with Runtime("A2", hbm_bytes=4 * GiB) as rt:
        alloc = NpuCachingAllocator(rt, conf="garbage_collection_threshold:0.1",
                                    torch_npu=release(version))
        assert alloc.allowed_memory_maximum is None          # no cap before the call
        alloc.set_memory_fraction(1.0)
        assert (alloc.allowed_memory_maximum == 4 * GiB) is gc
        alloc.free(alloc.malloc(600 * MiB))
        alloc.malloc(700 * MiB)
        stats = alloc.memory_stats()
        assert stats["reserved_bytes.all.current"] == (702 if gc else 602 + 702) * MiB
        assert stats["reserved_bytes.all.peak"] == (702 if gc else 602 + 702) * MiB
