"""Memory pools of torch_npu's caching allocator (``torch_npu.npu.MemPool`` and
``use_mem_pool``): the source's private pools, each case citing ``Ascend/pytorch``
``torch_npu/csrc/core/npu/NPUCachingAllocator.cpp`` ("the source") and ``MemPool.cpp``.

Figures by hand: a 4 MiB request is 4 MiB + 512 (the +32 pad rounded to 512 B) in the large
pool, whose segments are 20 MiB (kLargeBuffer) for requests up to 10 MiB.
"""

import threading

import pytest
from test_npu_caching_allocator import check

from ascend_memsim import MiB, Runtime
from ascend_memsim.allocators import NpuCachingAllocator, NpuOutOfMemoryError
from ascend_memsim.memory.errors import InvalidArgument

BLOCK = 4 * MiB + 512


def reserved(alloc):
    return alloc.memory_stats()["reserved_bytes.all.current"]


def test_a_pool_keeps_its_segments_apart_until_it_is_released_and_emptied():
    with Runtime("A2", hbm_bytes=256 * MiB) as rt:
        alloc = NpuCachingAllocator(rt)
        pool = alloc.create_pool()
        # MemPool.cpp: a user-created pool's id is {0, uid_++}, uid_ from 1
        assert pool == (0, 1) and alloc.pool_use_count(pool) == 1
        alloc.free(alloc.malloc(4 * MiB))                 # a free 20 MiB segment, cached
        assert reserved(alloc) == 20 * MiB
        # get_pool: the scope's pool, so the cached segment is not used: a new one
        alloc.begin_allocate_to_pool(pool)
        assert alloc.pool_use_count(pool) == 2
        inside = alloc.malloc(4 * MiB)
        alloc.end_allocate_to_pool(pool)
        alloc.release_pool(pool)                          # use_mem_pool's exit
        assert reserved(alloc) == 40 * MiB
        [seg] = alloc.segments(pool)
        assert seg["total_size"] == 20 * MiB and seg["pool_id"] == pool
        assert seg["blocks"][0]["address"] == inside
        snapshot = alloc.memory_snapshot(pool)["segments"]
        assert [s["segment_pool_id"] for s in snapshot] == [pool]
        # free_block: back to its own pool; an allocation outside takes the device's
        alloc.free(inside)
        outside = alloc.malloc(4 * MiB)
        assert alloc.segments(pool)[0]["blocks"][0]["state"] == "inactive"
        assert [s["pool_id"] for s in alloc.segments() if s["address"] == outside] == [(0, 0)]
        # release_cached_blocks: a pool still in use (use count 1: the MemPool) keeps its
        # free segment through empty_cache
        alloc.empty_cache()
        assert reserved(alloc) == 40 * MiB
        # ~MemPool: releasePool (use count 0, freeable) and emptyCache(id)
        alloc.release_pool(pool)
        alloc.empty_cache(pool)
        assert reserved(alloc) == 20 * MiB and alloc.segments(pool) == []
        with pytest.raises(InvalidArgument, match="Could not find pool"):
            alloc.pool_use_count(pool)                    # forgotten: no segment left
        check(alloc)


def test_a_released_pool_with_a_live_block_frees_its_segment_when_the_block_dies():
    with Runtime("A2", hbm_bytes=256 * MiB) as rt:
        alloc = NpuCachingAllocator(rt)
        pool = alloc.create_pool()
        alloc.begin_allocate_to_pool(pool)
        ptr = alloc.malloc(4 * MiB)
        alloc.end_allocate_to_pool(pool)
        alloc.release_pool(pool)
        alloc.release_pool(pool)                          # the MemPool is gone, the tensor not
        alloc.empty_cache(pool)
        assert reserved(alloc) == 20 * MiB                # its block is still allocated
        alloc.free(ptr)
        alloc.empty_cache()                               # a freeable pool: freed, forgotten
        assert reserved(alloc) == 0
        with pytest.raises(InvalidArgument):
            alloc.release_pool(pool)
        check(alloc)


def test_only_the_thread_that_opened_the_scope_allocates_in_the_pool():
    # _npu_beginAllocateCurrentThreadToPool (csrc/npu/Module.cpp): the filter is the thread
    with Runtime("A2", hbm_bytes=256 * MiB) as rt:
        alloc = NpuCachingAllocator(rt)
        pool = alloc.create_pool()
        alloc.begin_allocate_to_pool(pool)
        other = []
        thread = threading.Thread(target=lambda: other.append(alloc.malloc(4 * MiB)))
        thread.start()
        thread.join()
        mine = alloc.malloc(4 * MiB)
        alloc.end_allocate_to_pool(pool)
        in_pool = {b["address"] for s in alloc.segments(pool) for b in s["blocks"]}
        assert mine in in_pool and other[0] not in in_pool
        with pytest.raises(InvalidArgument, match="already recording"):
            alloc.begin_allocate_to_pool(pool)
            alloc.begin_allocate_to_pool(pool)
        check(alloc)


def test_a_no_split_pool_hands_out_whole_segments():
    # should_split: a pool in no_split_pools never splits a segment
    with Runtime("A2", hbm_bytes=256 * MiB) as rt:
        alloc = NpuCachingAllocator(rt)
        pool = alloc.create_pool(no_split=True)
        alloc.begin_allocate_to_pool(pool)
        alloc.malloc(4 * MiB)
        alloc.end_allocate_to_pool(pool)
        stats = alloc.memory_stats()
        assert stats["allocated_bytes.all.current"] == 20 * MiB
        assert stats["requested_bytes.all.current"] == 4 * MiB
        plain = alloc.create_pool()
        alloc.begin_allocate_to_pool(plain)
        alloc.malloc(4 * MiB)
        alloc.end_allocate_to_pool(plain)
        assert alloc.memory_stats()["allocated_bytes.all.current"] == 20 * MiB + BLOCK
        check(alloc)


def test_a_use_on_oom_pool_is_the_last_resort_of_an_allocation_outside_it():
    # try_mempool_fallback: before release_available_cached_blocks and the retry chain
    for use_on_oom in (True, False):
        with Runtime("A2", hbm_bytes=48 * MiB) as rt:
            alloc = NpuCachingAllocator(rt)
            pool = alloc.create_pool(use_on_oom=use_on_oom)
            alloc.begin_allocate_to_pool(pool)
            alloc.free(alloc.malloc(4 * MiB))             # a cached 20 MiB segment in the pool
            alloc.end_allocate_to_pool(pool)
            # a second 20 MiB segment (40 of the 48 MiB), filled: four blocks of 4 MiB + 512
            # leave 4 MiB - 2 KiB
            held = [alloc.malloc(4 * MiB) for _ in range(4)]
            if use_on_oom:
                borrowed = alloc.malloc(4 * MiB)          # no room for a third 20 MiB segment
                assert borrowed in {b["address"] for s in alloc.segments(pool)
                                    for b in s["blocks"]}
                alloc.free(borrowed)                      # back to the pool it came from
                assert alloc.segments(pool)[0]["blocks"][0]["state"] == "inactive"
            else:
                with pytest.raises(NpuOutOfMemoryError):
                    alloc.malloc(4 * MiB)
            for ptr in held:
                alloc.free(ptr)
            check(alloc)


def test_reset_accumulated_stats_counts_allocated_and_freed_from_zero_again():
    # resetAccumulatedStats: each Stat's allocated and freed, and the counters, go to 0;
    # current and peak stay
    with Runtime("A2", hbm_bytes=256 * MiB) as rt:
        alloc = NpuCachingAllocator(rt)
        a, b = alloc.malloc(4 * MiB), alloc.malloc(4 * MiB)
        alloc.free(a)
        alloc.reset_accumulated_stats()
        stats = alloc.memory_stats()
        assert stats["allocated_bytes.all.allocated"] == stats["allocated_bytes.all.freed"] == 0
        assert stats["allocated_bytes.all.current"] == BLOCK
        assert stats["allocated_bytes.all.peak"] == 2 * BLOCK
        assert stats["num_device_alloc"] == 0 and stats["segment.all.current"] == 1
        c = alloc.malloc(4 * MiB)
        alloc.free(b)
        alloc.free(c)
        stats = alloc.memory_stats()
        # one block allocated since, two freed: current is BLOCK - 2 * BLOCK + BLOCK = 0
        assert stats["allocated_bytes.all.allocated"] == BLOCK
        assert stats["allocated_bytes.large_pool.freed"] == 2 * BLOCK
        assert stats["allocated_bytes.all.freed"] == 2 * BLOCK
        assert stats["allocated_bytes.all.current"] == 0
        check(alloc)


def test_a_dropped_pool_is_released_at_the_allocators_next_call_not_inside_one():
    # ~MemPool runs from Python's collector, which may interrupt the allocator's own work:
    # drop_pool only notes it; the next malloc, empty_cache, statistics or snapshot does it
    with Runtime("A2", hbm_bytes=256 * MiB) as rt:
        alloc = NpuCachingAllocator(rt)
        pool = alloc.create_pool()
        alloc.begin_allocate_to_pool(pool)
        alloc.free(alloc.malloc(4 * MiB))
        alloc.end_allocate_to_pool(pool)
        alloc.release_pool(pool)
        with alloc._lock:                                # as if inside the allocator's work
            alloc.drop_pool(pool)
            assert alloc._pools[pool].use_count == 1     # nothing changed yet
        assert reserved(alloc) == 0                      # the statistics call released it
        with pytest.raises(InvalidArgument):
            alloc.pool_use_count(pool)
        check(alloc)
