"""torch_npu's workspace allocator and the caching allocator's out-of-memory hooks over the
simulated device: golden cases from the source.

Each case cites ``Ascend/pytorch`` ``torch_npu/csrc/core/npu/NPUWorkspaceAllocator.cpp`` ("the
source") by function, and ``NPUCachingAllocator.cpp`` / ``csrc/npu/Module.cpp`` where the
caching allocator and the snapshot reach it.
"""

import pytest

from ascend_memsim import MiB, Runtime
from ascend_memsim.allocators import NpuCachingAllocator, NpuOutOfMemoryError
from ascend_memsim.allocators.workspace import workspace_block_size
from ascend_memsim.memory.constants import MallocPolicy
from ascend_memsim.memory.errors import InvalidArgument, InvalidArgumentType


@pytest.fixture
def rt():
    with Runtime("A2", hbm_bytes=256 * MiB, sanitizer="off") as runtime:
        yield runtime


def test_block_sizes_are_size_plus_32_in_2mib_steps():
    # DeviceWorkspaceAllocator::malloc: alloc_size = size + 32; block->size = kRoundLarge *
    # ((alloc_size + kRoundLarge - 1) / kRoundLarge), kRoundLarge = 2097152
    assert workspace_block_size(1) == 2 * MiB
    assert workspace_block_size(2 * MiB - 32) == 2 * MiB
    assert workspace_block_size(2 * MiB - 31) == 4 * MiB
    assert workspace_block_size(3 * MiB) == 4 * MiB


def test_one_block_per_stream_grown_when_too_small(rt):
    ws = NpuCachingAllocator(rt).workspace
    s1 = rt.streams.create_stream()
    p = ws.malloc(3 * MiB)
    # AclrtMallocAlign32(..., ACL_MEM_MALLOC_HUGE_ONLY): huge pages, no +32 on the segment
    block = rt.block_at(p)
    assert block.policy == MallocPolicy.HUGE_ONLY and block.size == 4 * MiB
    assert ws.block_size(0) == 4 * MiB
    ws.free(p)
    assert ws.malloc(4 * MiB - 32) == p           # fits: the same block, no runtime call
    q = ws.malloc(1, stream=s1)                    # another stream: its own block
    assert q != p and ws.block_size(s1) == 2 * MiB
    used = rt.device(0).allocators[rt.profile.main_memory].used_bytes
    ws.malloc(4 * MiB - 31)                        # too small: freed, a 6 MiB block taken
    assert ws.block_size(0) == 6 * MiB
    assert rt.block_at(p) is None or rt.block_at(p).size == 6 * MiB
    assert rt.device(0).allocators[rt.profile.main_memory].used_bytes == used + 2 * MiB
    stats = ws.memory_stats()
    assert stats["reserved_bytes.current"] == 8 * MiB
    assert stats["reserved_bytes.peak"] == 8 * MiB      # 4 + 2, then 4 freed before 6 taken
    assert stats["reserved_bytes.freed"] == 4 * MiB


def test_free_uncounts_the_last_block_and_keeps_it(rt):
    ws = NpuCachingAllocator(rt).workspace
    s1 = rt.streams.create_stream()
    p = ws.malloc(1 * MiB)                        # 2 MiB block
    q = ws.malloc(5 * MiB, stream=s1)             # 6 MiB block, the last handed out
    # NpuWorkspaceAllocator::free -> DeviceWorkspaceAllocator::free: allocated_bytes less
    # allocated_size (the last malloc's block), whichever pointer
    ws.free(p)
    stats = ws.memory_stats()
    assert stats["allocated_bytes.current"] == 2 * MiB + 6 * MiB - 6 * MiB
    assert stats["reserved_bytes.current"] == 8 * MiB       # nothing given back
    ws.free(12345)                                # not handed out: ignored (device -1)
    ws.free(0)
    assert ws.memory_stats()["allocated_bytes.current"] == 2 * MiB
    assert rt.block_at(q) is not None
    # growing the stream's block forgets its old pointer (replace_allocated_ptr): freeing
    # it is ignored from then on
    p2 = ws.malloc(3 * MiB)                       # 4 MiB block, at another address
    assert p2 != p
    ws.free(p)
    assert ws.memory_stats()["allocated_bytes.current"] == 2 * MiB + 4 * MiB
    ws.free(p2)
    assert ws.memory_stats()["allocated_bytes.current"] == 2 * MiB


def test_bad_arguments_change_nothing(rt):
    ws = NpuCachingAllocator(rt).workspace
    for bad, error in ((1.0, InvalidArgumentType), (True, InvalidArgumentType),
                       (-1, InvalidArgument), (1 << 70, InvalidArgument)):
        with pytest.raises(error):
            ws.malloc(bad)
    with pytest.raises(InvalidArgumentType):
        ws.malloc(1, stream=-1)
    assert ws.malloc(0) == 0                      # allocate_with_stream: size 0, no block
    assert ws.blocks() == [] and ws.memory_stats()["reserved_bytes.current"] == 0


def test_caching_allocator_out_of_memory_empties_the_workspace_cache():
    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer="off") as rt:
        alloc = NpuCachingAllocator(rt)
        ws = alloc.workspace
        ws.free(ws.malloc(30 * MiB))              # a 32 MiB block cached
        # 40 MiB needs a 40 MiB segment: no room until the workspace cache goes
        # (NPUCachingAllocator.cpp malloc: NPUWorkspaceAllocator::emptyCache, then
        # release_cached_blocks and alloc_block again)
        ptr = alloc.malloc(40 * MiB)
        assert alloc.block_size(ptr) == 40 * MiB + 512      # in a 42 MiB segment
        assert alloc.memory_stats()["num_alloc_retries"] == 1
        assert ws.blocks() == [] and ws.memory_stats()["reserved_bytes.current"] == 0


def test_empty_cache_empties_the_workspace_cache(rt):
    alloc = NpuCachingAllocator(rt)
    ws = alloc.workspace
    ws.free(ws.malloc(1 * MiB))
    alloc.free(alloc.malloc(1 * MiB))
    # NpuCachingAllocator emptyCache: NPUWorkspaceAllocator::emptyCache, release_cached_blocks
    alloc.empty_cache()
    assert ws.blocks() == [] and alloc.segments() == []
    assert rt.device(0).allocators[rt.profile.main_memory].used_bytes == 0


def test_workspace_out_of_memory_message_and_the_older_retry():
    for retry in (False, True):
        with Runtime("A2", hbm_bytes=64 * MiB, sanitizer="off") as rt:
            alloc = NpuCachingAllocator(rt, workspace_retry_on_oom=retry)
            alloc.free(alloc.malloc(40 * MiB))    # a 40 MiB segment cached
            if not retry:
                # master: NpuWorkspaceAllocator::malloc raises at once
                with pytest.raises(NpuOutOfMemoryError) as e:
                    alloc.workspace.malloc(30 * MiB)
                assert str(e.value).startswith(
                    "NPU out of memory. NPUWorkspaceAllocator tried to allocate 30.00 MiB(NPU 0; "
                    "64.00 MiB total capacity; ")
                assert "TASK_QUEUE_ENABLE=1" in str(e.value)
                assert alloc.segments() != []     # the caching allocator's cache untouched
            else:
                # v2.1.0-6.0.0 .. 7.1.0: "Free all cached blocks and try again."
                ptr = alloc.workspace.malloc(30 * MiB)
                assert alloc.segments() == [] and rt.block_at(ptr).size == 32 * MiB


def test_snapshot_shows_workspace_segments_after_the_allocator_s():
    with Runtime("A2", hbm_bytes=256 * MiB, sanitizer="off") as rt:
        alloc = NpuCachingAllocator(rt)
        alloc.record_history()
        x = alloc.malloc(1 * MiB)
        ws_ptr = alloc.workspace.malloc(3 * MiB)
        snap = alloc.memory_snapshot()
    # Module.cpp memorySnapshot: the workspace's get_segm segments follow the caching
    # allocator's; get_segm: is_large, not expandable, the block never marked allocated
    last = snap["segments"][-1]
    assert [s["address"] for s in snap["segments"]][:-1] != [ws_ptr]
    assert last["address"] == ws_ptr and last["total_size"] == 4 * MiB
    assert last["segment_type"] == "large" and last["is_expandable"] is False
    assert last["allocated_size"] == 0
    assert last["blocks"] == [{"address": ws_ptr, "size": 4 * MiB, "requested_size": 3 * MiB,
                               "state": "inactive", "frames": []}]
    # get_trace's three entries per block, put first (device_traces[i].insert(begin(), ...))
    trace = snap["device_traces"][0]
    assert [(e["action"], e["addr"], e["size"]) for e in trace[:3]] == [
        ("workspace_snapshot", ws_ptr, 4 * MiB), ("segment_alloc", ws_ptr, 4 * MiB),
        ("alloc", ws_ptr, 4 * MiB)]
    assert trace[3]["action"] == "segment_alloc" and trace[4] == {
        "action": "alloc", "addr": x, "size": 1 * MiB, "stream": 0, "pool_id": (0, 0),
        "frames": []}


def test_free_memory_callback_runs_before_a_new_segment(rt):
    """trigger_free_memory_callbacks (NPUCachingAllocator.cpp malloc): when no cached block
    fits, the callbacks run, and if one freed memory the pool is searched again."""
    alloc = NpuCachingAllocator(rt)
    x = alloc.malloc(20 * MiB - 544)            # 20 MiB - 512: a whole 20 MiB segment
    held = [x]
    calls = []

    def release() -> bool:
        calls.append(len(held))
        if held:
            alloc.free(held.pop())
            return True
        return False

    alloc.add_free_memory_callback(release)
    q = alloc.malloc(4 * MiB)                   # nothing cached: the callback frees x
    assert calls == [1] and q == x
    assert alloc.memory_stats()["segment.all.current"] == 1
    alloc.malloc(4 * MiB)                       # the rest of x's segment: a hit, no call
    alloc.malloc(12 * MiB)                      # nothing cached, nothing freed: new segment
    assert calls == [1, 0]
    assert alloc.memory_stats()["segment.all.current"] == 2
    with pytest.raises(InvalidArgument):
        alloc.add_free_memory_callback(42)


def test_out_of_memory_observer_gets_torch_npu_s_figures():
    """attachOutOfMemoryObserver: obs(device, alloc_size, allowed or total, device_free)
    before NPU out of memory (NPUCachingAllocator.cpp malloc)."""
    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer="off") as rt:
        alloc = NpuCachingAllocator(rt)
        seen = []
        alloc.attach_out_of_memory_observer(lambda *args: seen.append(args))
        with pytest.raises(NpuOutOfMemoryError) as e:
            alloc.malloc(100 * MiB)
        assert seen == [(0, 102 * MiB, 64 * MiB, e.value.free)]    # the segment tried
        alloc.set_memory_fraction(0.5)
        with pytest.raises(NpuOutOfMemoryError):
            alloc.malloc(40 * MiB)
        assert seen[1][1:3] == (42 * MiB, 32 * MiB)
        with pytest.raises(InvalidArgument):
            alloc.attach_out_of_memory_observer(None)


def test_threads_share_the_workspace_and_the_caching_allocator(rt):
    """One lock for both (each calls into the other's cache): threads growing their streams'
    workspace blocks, allocating tensors and emptying the caches leave consistent books."""
    import threading

    alloc = NpuCachingAllocator(rt)
    ws = alloc.workspace
    streams = [rt.streams.create_stream() for _ in range(3)]
    errors = []

    def work(n):
        try:
            for i in range(40):
                size = (n * 7919 + i * 104729) % (5 * MiB) + 1
                ws.free(ws.malloc(size, stream=streams[n]))
                alloc.free(alloc.malloc(size, stream=streams[n]))
                if i % 13 == 12:
                    alloc.empty_cache()
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    held = ws.blocks()
    assert ws.memory_stats()["reserved_bytes.current"] == sum(b[1] for b in held)
    used = rt.device(0).allocators[rt.profile.main_memory].used_bytes
    assert used == alloc.memory_stats()["reserved_bytes.all.current"] + sum(b[1] for b in held)
    alloc.empty_cache()
    assert ws.blocks() == [] and alloc.segments() == []
    assert rt.device(0).allocators[rt.profile.main_memory].used_bytes == 0
