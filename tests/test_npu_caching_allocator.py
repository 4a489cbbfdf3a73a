"""torch_npu's caching allocator over the simulated device: golden cases from the source.

Each case cites ``Ascend/pytorch`` ``torch_npu/csrc/core/npu/NPUCachingAllocator.cpp`` ("the
source") by function.
"""

import warnings

import pytest

from ascend_memsim import MiB, Runtime
from ascend_memsim.allocators import NpuCachingAllocator, NpuOutOfMemoryError
from ascend_memsim.memory.errors import InvalidArgument, InvalidArgumentType


def check(alloc: NpuCachingAllocator) -> None:
    """The allocator's books agree with its segments and with the device."""
    segs = alloc.segments()
    stats = alloc.memory_stats()
    for seg in segs:
        addr = seg["address"]
        for b in seg["blocks"]:
            assert b["address"] == addr
            addr += b["size"]
        assert addr == seg["address"] + seg["total_size"]
        # no two neighbouring free blocks: they are always merged (try_merge_blocks)
        states = [b["state"] for b in seg["blocks"]]
        assert all(not (a == b == "inactive") for a, b in zip(states, states[1:]))
    reserved = sum(s["total_size"] for s in segs)
    allocated = sum(b["size"] for s in segs for b in s["blocks"]
                    if b["state"] == "active_allocated")
    assert stats["reserved_bytes.all.current"] == reserved == alloc.total_allocated_memory
    assert stats["allocated_bytes.all.current"] == allocated
    if alloc.conf.expandable_segments:
        # map_block / unmap_block move reserved bytes only; pages are whole handles mapped
        # in the runtime's virtual memory
        for seg in segs:
            mapping = alloc.runtime.vmm.mapping_at(seg["address"])
            assert mapping is not None
        return
    assert stats["segment.all.current"] == len(segs)
    assert stats["inactive_split.all.current"] == sum(
        1 for s in segs for b in s["blocks"] if b["state"] == "inactive" and len(s["blocks"]) > 1)
    live = {b.ptr: b.size for b in alloc.runtime.blocks()}
    for seg in segs:
        assert live.get(seg["address"], 0) >= seg["total_size"]


@pytest.fixture
def rt():
    with Runtime("A2", hbm_bytes=256 * MiB) as runtime:
        yield runtime


def only_segment(alloc):
    (seg,) = alloc.segments()
    return seg


def test_1mib_on_a2_is_a_1049088_byte_block_in_a_20mib_segment(rt):
    # round_size: 1 MiB + AddPadSize() 32 = 1048608 -> 512-byte steps -> 1049088 > kSmallSize,
    # so the large pool; get_allocation_size: below kMinLargeAlloc -> large_segment_size 20 MiB
    alloc = NpuCachingAllocator(rt)
    ptr = alloc.malloc(1 * MiB)
    assert alloc.block_size(ptr) == 1049088
    seg = only_segment(alloc)
    assert seg["total_size"] == 20 * MiB and not seg["small"]
    # should_split (large pool): the rest, > kSmallSize, is split off and cached
    assert [b["size"] for b in seg["blocks"]] == [1049088, 20 * MiB - 1049088]
    check(alloc)


def test_10mib_gets_a_12mib_segment(rt):
    # get_allocation_size: from kMinLargeAlloc, kRoundLarge (2 MiB) multiples of the rounded size
    alloc = NpuCachingAllocator(rt)
    ptr = alloc.malloc(10 * MiB)
    assert alloc.block_size(ptr) == 10 * MiB + 512
    assert only_segment(alloc)["total_size"] == 12 * MiB
    check(alloc)


def test_64mib_gets_66mib_and_a_2mib_tail_split(rt):
    alloc = NpuCachingAllocator(rt)
    ptr = alloc.malloc(64 * MiB)
    seg = only_segment(alloc)
    assert seg["total_size"] == 66 * MiB
    # should_split: remaining 2 MiB - 512 > kSmallSize
    assert [b["size"] for b in seg["blocks"]] == [64 * MiB + 512, 2 * MiB - 512]
    assert alloc.memory_stats()["inactive_split_bytes.all.current"] == 2 * MiB - 512
    alloc.free(ptr)
    # free_block: merged back into one free block of the whole segment
    assert [b["state"] for b in only_segment(alloc)["blocks"]] == ["inactive"]
    check(alloc)


def test_no_pad_on_950_with_cann_9_1():
    # AddPadSize: SocVersion >= Ascend950 and CANN >= kMinDel32PaddingSizeCannVersion (9.1.0)
    with Runtime("950PR", hbm_bytes=256 * MiB) as rt:
        alloc = NpuCachingAllocator(rt)
        ptr = alloc.malloc(1 * MiB)
        assert alloc.block_size(ptr) == 1 * MiB
        seg = only_segment(alloc)
        assert seg["small"] and seg["total_size"] == 2 * MiB   # kSmallBuffer
        older = NpuCachingAllocator(rt, cann="8.5.0")
        assert older.block_size(older.malloc(1 * MiB)) == 1049088
        check(alloc)
        for bad in ("", "9", "newest", "9.1.0; rm", "v9.1.0"):
            with pytest.raises(InvalidArgument, match="CANN version"):
                NpuCachingAllocator(rt, cann=bad)
        assert NpuCachingAllocator(rt, cann="8.0.RC3.alpha002").pad == 32


def test_small_pool_packs_2mib_segments_and_splits_from_512_bytes(rt):
    alloc = NpuCachingAllocator(rt)
    a = alloc.malloc(1)          # 1 + 32 -> kMinBlockSize 512
    b = alloc.malloc(1000)       # 1032 -> 1536
    assert (alloc.block_size(a), alloc.block_size(b)) == (512, 1536)
    assert b == a + 512
    seg = only_segment(alloc)
    assert seg["small"] and seg["total_size"] == 2 * MiB
    assert alloc.memory_stats()["segment.small_pool.current"] == 1
    alloc.free(a)
    c = alloc.malloc(100)        # best fit: the freed 512-byte block
    assert c == a
    check(alloc)


def test_best_fit_is_per_stream(rt):
    alloc = NpuCachingAllocator(rt)
    s1 = rt.streams.create_stream()
    p = alloc.malloc(4 * MiB)
    alloc.free(p)
    q = alloc.malloc(4 * MiB, stream=s1)
    # BlockComparatorSize orders by stream first: the cached block of stream 0 is not used
    assert q != p and alloc.memory_stats()["segment.all.current"] == 2
    assert alloc.malloc(4 * MiB) == p
    check(alloc)


def test_max_split_size_release_and_retry():
    # get_free_block: a request below max_split_size never takes an oversize cached block;
    # release_available_cached_blocks frees one, and alloc_block is tried again (no retry count)
    with Runtime("A2", hbm_bytes=48 * MiB) as rt:
        alloc = NpuCachingAllocator(rt, conf="max_split_size_mb:20")
        big = alloc.malloc(40 * MiB)
        assert alloc.memory_stats()["oversize_allocations.current"] == 1
        alloc.free(big)
        ptr = alloc.malloc(10 * MiB)
        stats = alloc.memory_stats()
        assert stats["num_device_free"] == 1 and stats["num_alloc_retries"] == 0
        assert only_segment(alloc)["total_size"] == 12 * MiB
        assert alloc.block_size(ptr) == 10 * MiB + 512
        check(alloc)


def test_retry_after_emptying_the_cache():
    # malloc: alloc_block fails, so release_cached_blocks (after npuSynchronizeDevice) and
    # alloc_block(isRetry=true): num_alloc_retries counts it
    with Runtime("A2", hbm_bytes=48 * MiB) as rt:
        alloc = NpuCachingAllocator(rt)
        alloc.free(alloc.malloc(30 * MiB))
        assert alloc.memory_stats()["reserved_bytes.all.current"] == 32 * MiB
        alloc.malloc(40 * MiB)           # 42 MiB: does not fit beside the cached 32 MiB
        stats = alloc.memory_stats()
        assert stats["num_alloc_retries"] == 1 and stats["num_ooms"] == 0
        assert stats["reserved_bytes.all.current"] == 42 * MiB
        check(alloc)


def test_out_of_memory_carries_torch_npus_figures():
    with Runtime("A2", hbm_bytes=48 * MiB) as rt:
        alloc = NpuCachingAllocator(rt)
        keep = alloc.malloc(1 * MiB)        # 20 MiB segment, 1 MiB-ish allocated
        with pytest.raises(NpuOutOfMemoryError) as info:
            alloc.malloc(40 * MiB)
        e = info.value
        assert e.tried == 42 * MiB and e.total_capacity == 48 * MiB
        assert e.allocated == 1049088 and e.reserved == 20 * MiB
        assert e.reserved_unallocated == 20 * MiB - 1049088
        assert e.free == rt.get_mem_info(1)[0]
        assert str(e).startswith("NPU out of memory. Tried to allocate 42.00 MiB (NPU 0; "
                                 "48.00 MiB total capacity; 1.00 MiB already allocated; ")
        assert "20.00 MiB reserved in total by PyTorch)" in str(e)
        assert e.code == 207001
        stats = alloc.memory_stats()
        assert stats["num_ooms"] == 1 and stats["num_alloc_retries"] == 1
        # the failed call changed nothing else
        assert alloc.block_size(keep) == 1049088
        check(alloc)


def test_per_process_memory_fraction_caps_the_segments():
    with Runtime("A2", hbm_bytes=100 * MiB) as rt:
        alloc = NpuCachingAllocator(rt, conf="per_process_memory_fraction:0.5")
        assert alloc.allowed_memory_maximum == 50 * MiB
        alloc.malloc(30 * MiB)
        with pytest.raises(NpuOutOfMemoryError) as info:
            alloc.malloc(30 * MiB)
        assert info.value.allowed == 50 * MiB and "50.00 MiB allowed; " in str(info.value)


def test_throw_on_npumalloc_oom_rejects_without_retry():
    with Runtime("A2", hbm_bytes=100 * MiB) as rt:
        alloc = NpuCachingAllocator(
            rt, conf="throw_on_npumalloc_oom:True,per_process_memory_fraction:0.5")
        alloc.set_memory_fraction(1.0)
        alloc.malloc(30 * MiB)
        with pytest.raises(NpuOutOfMemoryError, match="preemptively rejected") as info:
            alloc.malloc(30 * MiB)
        assert info.value.rejected
        stats = alloc.memory_stats()
        assert stats["num_oom_rejections"] == 1 and stats["num_ooms"] == 0


def test_garbage_collection_frees_old_cached_segments():
    # garbage_collect_cached_blocks: with a fraction set and usage above the threshold, unsplit
    # cached large blocks at least as old as the average go back before a new segment is
    # asked for, so no retry is needed; without it the retry chain empties the cache
    for conf, retries in (("garbage_collection_threshold:0.5,per_process_memory_fraction:0.9", 0),
                          ("per_process_memory_fraction:0.9", 1)):
        with Runtime("A2", hbm_bytes=100 * MiB) as rt:
            alloc = NpuCachingAllocator(rt, conf=conf)
            alloc.malloc(10 * MiB)                 # 12 MiB segment, kept
            alloc.free(alloc.malloc(40 * MiB))     # 42 MiB segment, cached
            alloc.malloc(50 * MiB)                 # 52 MiB: 12 + 42 + 52 > 90 allowed
            stats = alloc.memory_stats()
            assert stats["num_device_free"] == 1
            assert stats["num_alloc_retries"] == retries
            assert stats["reserved_bytes.all.current"] == 64 * MiB
            check(alloc)


def test_empty_cache_returns_whole_free_segments(rt):
    alloc = NpuCachingAllocator(rt)
    a = alloc.malloc(1 * MiB)
    b = alloc.malloc(30 * MiB)
    alloc.free(b)
    alloc.empty_cache()
    assert [s["total_size"] for s in alloc.segments()] == [20 * MiB]
    assert rt.get_mem_info(1)[0] == 256 * MiB - 20 * MiB
    alloc.free(a)
    alloc.empty_cache()
    assert alloc.segments() == [] and rt.blocks() == []
    assert alloc.memory_stats()["num_device_free"] == 2


def test_record_stream_delays_reuse_until_the_stream_has_run(rt):
    alloc = NpuCachingAllocator(rt)
    side = rt.streams.create_stream()
    p = alloc.malloc(4 * MiB)
    alloc.record_stream(p, side)
    alloc.free(p)
    states = [b["state"] for b in only_segment(alloc)["blocks"]]
    assert states[0] == "active_pending_free"
    q = alloc.malloc(4 * MiB)        # the event on `side` has not completed: not reused
    assert q != p
    rt.streams.synchronize_stream(side)
    alloc.free(q)
    r = alloc.malloc(4 * MiB)        # process_events freed p's block first
    assert r in (p, q)
    check(alloc)


def test_erase_stream_undoes_record_stream_on_the_blocks_own_stream(rt):
    # eraseStream (the source): the stream leaves the block's uses, so its free does not wait;
    # the allocator-wide wrapper keeps the uses of a block made on another than the current
    alloc = NpuCachingAllocator(rt)
    side = rt.streams.create_stream()
    p = alloc.malloc(4 * MiB)
    alloc.record_stream(p, side)
    alloc.erase_stream(p, side, current=0)
    alloc.free(p)
    assert [b["state"] for b in only_segment(alloc)["blocks"]] == ["inactive"]
    q = alloc.malloc(4 * MiB, stream=side)
    alloc.record_stream(q, 0)
    alloc.erase_stream(q, 0, current=0)             # made on `side`, not the current: kept
    alloc.free(q)
    assert "active_pending_free" in [b["state"] for s in alloc.segments() for b in s["blocks"]]
    with pytest.raises(InvalidArgument, match="invalid device pointer"):
        alloc.erase_stream(q, side)
    check(alloc)


def test_roundup_power2_divisions():
    # round_size / roundup_power2_next_division: 4 divisions between 16 and 32 MiB
    with Runtime("A2", hbm_bytes=256 * MiB) as rt:
        alloc = NpuCachingAllocator(rt, conf="roundup_power2_divisions:4")
        assert alloc.block_size(alloc.malloc(17 * MiB)) == 20 * MiB
        alloc2 = NpuCachingAllocator(rt, conf="roundup_power2_divisions:[16:4,>:0]")
        assert alloc2.block_size(alloc2.malloc(17 * MiB)) == 20 * MiB
        assert alloc.block_size(alloc.malloc(33 * MiB)) == 40 * MiB
        # [16:4,>:0]: no divisions from 32 MiB on; 33 MiB + 512 in a 34 MiB segment, the
        # 1 MiB - 512 rest not split off (should_split: not > kSmallSize)
        assert alloc2.block_size(alloc2.malloc(33 * MiB)) == 34 * MiB


def test_bad_arguments_change_nothing(rt):
    alloc = NpuCachingAllocator(rt)
    with pytest.raises(InvalidArgumentType):
        alloc.malloc(1.5)
    with pytest.raises(InvalidArgumentType):
        alloc.malloc(True)
    with pytest.raises(InvalidArgument):
        alloc.malloc(-1)
    with pytest.raises(InvalidArgument, match="invalid device pointer"):
        alloc.free(12345)
    assert alloc.malloc(0) == 0
    alloc.free(0)
    assert alloc.segments() == [] and alloc.memory_stats()["allocation.all.allocated"] == 0


def test_memory_stats_has_torch_npus_keys(rt):
    alloc = NpuCachingAllocator(rt)
    stats = alloc.memory_stats()
    for key in ("allocated_bytes.all.current", "reserved_bytes.all.peak", "num_alloc_retries",
                "num_ooms", "active_bytes.large_pool.freed", "inactive_split.small_pool.peak",
                "requested_bytes.all.allocated", "oversize_segments.current", "max_split_size",
                "num_device_alloc", "num_device_free", "num_sync_all_streams",
                "num_oom_rejections", "segment.small_pool.current"):
        assert key in stats
    assert list(stats) == sorted(stats)
    p = alloc.malloc(3 * MiB)
    alloc.free(p)
    stats = alloc.memory_stats()
    assert stats["allocated_bytes.all.peak"] == 3 * MiB + 512
    assert stats["allocated_bytes.all.freed"] == 3 * MiB + 512
    assert stats["reserved_bytes.large_pool.current"] == 20 * MiB
    assert stats["requested_bytes.all.allocated"] == 3 * MiB


def test_expandable_segments_grow_and_shrink_by_whole_pages(rt):
    # find_expandable_block, map_block, try_allocate_expandable_block, unmap_block; large-pool
    # pages are large_segment_size (20 MiB, get_custom_expandable_segment_size)
    alloc = NpuCachingAllocator(rt, conf="expandable_segments:True")
    p = alloc.malloc(1 * MiB)
    (seg,) = alloc.segments()
    assert seg["expandable"] and seg["total_size"] == 20 * MiB
    q = alloc.malloc(30 * MiB)
    # the same segment grew by one page; base_addr_aligned_kb (16 KiB) moved q's start
    (seg,) = alloc.segments()
    assert seg["total_size"] == 40 * MiB and q % 16384 == 0 and q - p == 1064960
    assert [b["state"] for b in seg["blocks"]] == ["active_allocated", "inactive",
                                                   "active_allocated", "inactive"]
    assert alloc.memory_stats()["reserved_bytes.all.current"] == 40 * MiB
    check(alloc)
    alloc.free(q)
    alloc.empty_cache()                   # the second page is wholly free: unmapped
    assert [s["total_size"] for s in alloc.segments()] == [20 * MiB]
    assert rt.get_mem_info(1)[0] == 236 * MiB
    alloc.free(p)
    alloc.empty_cache()                   # the whole segment: unmapped, its range released
    assert alloc.segments() == [] and alloc.memory_stats()["reserved_bytes.all.current"] == 0
    assert rt.get_mem_info(1)[0] == 256 * MiB
    check(alloc)


def test_expandable_small_pool_pages_are_2mib(rt):
    alloc = NpuCachingAllocator(rt, conf="expandable_segments:True")
    ptrs = [alloc.malloc(512 * 1024) for _ in range(5)]   # 524800 bytes each
    (seg,) = alloc.segments()
    assert seg["small"] and seg["total_size"] == 4 * MiB    # grew 2 MiB at a time
    assert ptrs == sorted(ptrs) and ptrs[1] - ptrs[0] == 524800
    check(alloc)


def test_expandable_out_of_memory_unmaps_free_pages_and_retries():
    with Runtime("A2", hbm_bytes=48 * MiB) as rt:
        alloc = NpuCachingAllocator(rt, conf="expandable_segments:True")
        s1 = rt.streams.create_stream()
        alloc.free(alloc.malloc(15 * MiB, stream=s1))    # one 20 MiB page cached on s1
        ptr = alloc.malloc(25 * MiB)       # two pages on stream 0: only after s1's goes
        stats = alloc.memory_stats()
        assert stats["num_alloc_retries"] == 1 and stats["num_ooms"] == 0
        assert [s["total_size"] for s in alloc.segments()] == [40 * MiB]
        assert alloc.block_size(ptr) == 25 * MiB + 512
        with pytest.raises(NpuOutOfMemoryError):
            alloc.malloc(25 * MiB)
        check(alloc)


def test_memory_snapshot_has_torch_npus_format_and_history(rt):
    # csrc/npu/Module.cpp memorySnapshot (segmentInfoToDict, the trace entries)
    from ascend_memsim.observe.snapshot import read_snapshot

    alloc = NpuCachingAllocator(rt)
    alloc.record_history(max_entries=100)
    a = alloc.malloc(1 * MiB)
    b = alloc.malloc(100)
    alloc.free(a)
    snap = alloc.memory_snapshot()
    large, small = sorted(snap["segments"], key=lambda s: s["segment_type"])
    assert large["segment_type"] == "large" and small["segment_type"] == "small"
    assert large["total_size"] == 20 * MiB and large["allocated_size"] == 0
    assert small["allocated_size"] == small["active_size"] == 512
    assert small["requested_size"] == 100
    assert set(small) >= {"device", "address", "total_size", "allocated_size", "active_size",
                          "requested_size", "stream", "segment_pool_id", "segment_type",
                          "is_expandable", "frames", "blocks"}
    assert small["blocks"][0] == {"address": b, "size": 512, "requested_size": 100,
                                  "state": "active_allocated", "frames": []}
    (trace,) = snap["device_traces"]
    assert [e["action"] for e in trace] == ["segment_alloc", "alloc", "segment_alloc", "alloc",
                                            "free_requested", "free_completed"]
    assert trace[1] == {"action": "alloc", "addr": a, "size": 1 * MiB, "stream": 0,
                        "pool_id": (0, 0), "frames": []}
    events, _header, problems = read_snapshot(snap)
    assert problems == [] and events


def test_history_is_a_ring_buffer_and_off_by_default(rt):
    alloc = NpuCachingAllocator(rt)
    alloc.malloc(100)
    assert alloc.memory_snapshot()["device_traces"] == [[]]
    alloc.record_history(max_entries=2)
    for _ in range(3):
        alloc.free(alloc.malloc(100))
    assert [e["action"] for e in alloc.memory_snapshot()["device_traces"][0]] == [
        "free_requested", "free_completed"]
    with pytest.raises(InvalidArgument):
        alloc.record_history(max_entries=0)


def test_bad_streams_are_refused_before_anything_changes(rt):
    from ascend_memsim.memory.errors import InvalidHandle

    alloc = NpuCachingAllocator(rt)
    with pytest.raises(InvalidArgumentType):
        alloc.malloc(100, stream=1.0)
    p = alloc.malloc(100)
    with pytest.raises(InvalidHandle):
        alloc.record_stream(p, 987654)
    alloc.free(p)                    # no event to record: back in the pool at once
    assert alloc.malloc(100) == p
    check(alloc)


def test_threads_share_one_allocator(rt):
    import threading

    alloc = NpuCachingAllocator(rt)
    errors = []

    def work(seed):
        try:
            live = []
            for i in range(60):
                size = (seed * 7919 + i * 104729) % (3 * MiB) + 1
                live.append(alloc.malloc(size))
                if i % 3 == 2:
                    alloc.free(live.pop(0))
            for p in live:
                alloc.free(p)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert alloc.memory_stats()["allocated_bytes.all.current"] == 0
    check(alloc)
    alloc.empty_cache()
    assert alloc.segments() == []


def test_page_size_1g_and_its_fallback_before_cann_8_1():
    # malloc / IsMallocPage1GMem: the large pool takes 1 GiB multiples with HUGE1G_ONLY; a
    # CANN older than kMinCannVersion (8.1.RC1) falls back to the usual sizes and HUGE_FIRST
    from ascend_memsim import GiB

    with Runtime("A2", hbm_bytes=4 * GiB, sanitizer="off") as rt:
        alloc = NpuCachingAllocator(rt, conf="page_size:1g")
        ptr = alloc.malloc(30 * MiB)
        assert [s["total_size"] for s in alloc.segments()] == [1 * GiB]
        assert rt.block(ptr).page.name == "HUGE1G"
        alloc.malloc(100)                      # the small pool keeps its 2 MiB segments
        assert sorted(s["total_size"] for s in alloc.segments()) == [2 * MiB, 1 * GiB]
        old = NpuCachingAllocator(rt, conf="page_size:1g", cann="8.0.0")
        old.malloc(30 * MiB)
        assert [s["total_size"] for s in old.segments()] == [32 * MiB]


def test_page_size_1g_falls_back_to_2mib_pages_with_torch_npus_warning():
    """Issue 25 item 12: torch_npu's AclrtMallocAlign32 wrapper (AclInterface.cpp) asks again
    with HUGE_FIRST, same size, after any HUGE1G_ONLY failure, and warns; the simulator raised
    FeatureNotSupported on 950PR and gave up when the 1 GiB pages ran out."""
    from ascend_memsim import GiB
    from ascend_memsim.allocators.rules import PAGE_1G_FALLBACK_WARNING
    from ascend_memsim.checks.faults import HugePagesExhausted, inject

    # a part without 1 GiB pages (950PR in the simulator): the segment keeps its 1 GiB size
    with Runtime("950PR", hbm_bytes=4 * GiB, sanitizer="off") as rt:
        alloc = NpuCachingAllocator(rt, conf="page_size:1g")
        with pytest.warns(UserWarning) as caught:
            ptr = alloc.malloc(30 * MiB)
        assert [str(w.message) for w in caught] == [PAGE_1G_FALLBACK_WARNING]
        assert "page_size:1g" in PAGE_1G_FALLBACK_WARNING
        assert [s["total_size"] for s in alloc.segments()] == [1 * GiB]
        assert rt.block(ptr).page.name == "HUGE" and alloc.memory_stats()["num_ooms"] == 0
        check(alloc)
    # 1 GiB pages used up on A2: the next segment is taken on 2 MiB pages
    with Runtime("A2", hbm_bytes=4 * GiB, sanitizer="off") as rt:
        alloc = NpuCachingAllocator(rt, conf="page_size:1g")
        first = alloc.malloc(600 * MiB)
        with inject(HugePagesExhausted(pages=["huge1g"]), runtime=rt), \
                pytest.warns(UserWarning, match="The malloc 1G large-page physical memory"):
            second = alloc.malloc(600 * MiB)
        assert rt.block(first).page.name == "HUGE1G" and rt.block(second).page.name == "HUGE"
        assert [s["total_size"] for s in alloc.segments()] == [1 * GiB, 1 * GiB]
        check(alloc)
    # expandable segments: 1 GiB handles (ACL_HBM_MEM_HUGE1G, 10; the simulator asked with
    # 6, DDR_MEM_P2P_HUGE, refused as host memory)...
    with Runtime("A2", hbm_bytes=4 * GiB, sanitizer="off") as rt:
        alloc = NpuCachingAllocator(rt, conf="expandable_segments:True,page_size:1g")
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            alloc.malloc(30 * MiB)
        assert [(size, page.name) for size, page in rt.device(0).physical_info.values()] == \
            [(1 * GiB, "HUGE1G")]
        check(alloc)
    # ... and torch_npu's AclrtMallocPhysical wrapper does the same as AclrtMallocAlign32's
    # when one fails, asking again with ACL_HBM_MEM_HUGE
    with Runtime("950PR", hbm_bytes=4 * GiB, sanitizer="off") as rt:
        alloc = NpuCachingAllocator(rt, conf="expandable_segments:True,page_size:1g")
        with pytest.warns(UserWarning, match="The malloc 1G large-page physical memory"):
            alloc.malloc(30 * MiB)
        assert [s["total_size"] for s in alloc.segments()] == [1 * GiB]
        assert [(size, page.name) for size, page in rt.device(0).physical_info.values()] == \
            [(1 * GiB, "HUGE")]
        check(alloc)
    # the small pool never asks for 1 GiB pages, so never warns
    with Runtime("950PR", hbm_bytes=4 * GiB, sanitizer="off") as rt:
        alloc = NpuCachingAllocator(rt, conf="page_size:1g")
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            alloc.malloc(100)


def test_reset_peak_makes_every_peak_the_current_value(rt):
    # resetPeakStats (the source), torch_npu.npu.reset_peak_memory_stats
    alloc = NpuCachingAllocator(rt)
    big = alloc.malloc(4 * MiB)
    small = alloc.malloc(1000)
    alloc.free(big)
    stats = alloc.memory_stats()
    assert stats["allocated_bytes.all.peak"] > stats["allocated_bytes.all.current"]
    alloc.stats.reset_peak()
    stats = alloc.memory_stats()
    for key, value in stats.items():
        if key.endswith(".peak"):
            assert value == stats[key[:-len("peak")] + "current"], key
    assert stats["allocated_bytes.all.peak"] == alloc.block_size(small)
    check(alloc)


def test_trace_frames_fill_the_frames_of_each_trace_entry(rt):
    alloc = NpuCachingAllocator(rt)
    alloc.record_history(True)
    frames = [{"filename": "train.py", "line": 7, "name": "<module>"}]
    alloc.trace_frames = lambda: list(frames)
    alloc.free(alloc.malloc(1000))
    entries = alloc.memory_snapshot()["device_traces"][0]
    assert [e["action"] for e in entries] == ["segment_alloc", "alloc", "free_requested",
                                              "free_completed"]
    assert all(e["frames"] == frames for e in entries)
    alloc.trace_frames = None
    alloc.malloc(1000)
    assert alloc.memory_snapshot()["device_traces"][0][-1]["frames"] == []
