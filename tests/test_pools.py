"""Stream-ordered memory pools (hicann/runtime docs/zh/api_ref/11-10_ordered_stream_memory_
allocation.md): the calls through the face, each documented misuse's code, reuse, release,
the device's accounting, the sanitizer, traces and replay."""

import pytest

from ascend_memsim import MiB, Runtime, acl, aclrt
from ascend_memsim.observe.replay import replay
from ascend_memsim.observe.stats import MemoryStats
from ascend_memsim.observe.trace import Recorder

G = 2 * MiB


def _props(max_size=16 * MiB, device=0, **extra):
    return {"allocType": 0, "handleType": 0, "location": {"id": device, "type": 1},
            "maxSize": max_size, **extra}


@pytest.fixture
def pool(rt):
    handle, ret = acl.rt.mem_pool_create(_props())
    assert ret == 0
    return handle


def _attr(pool, attr):
    value, ret = acl.rt.mem_pool_get_attr(pool, attr)
    assert ret == 0
    return value


def _free(rt):
    return rt.get_mem_info(acl.ACL_HBM_MEM)[0]


def test_the_c_names_are_the_face(rt):
    assert aclrt.aclrtMemPoolMallocAsync is acl.rt.mem_pool_malloc_async
    assert acl.ACL_RT_MEM_POOL_ATTR_USED_MEM_HIGH == 8  # acl_rt_memory_soma.h


def test_a_pool_costs_no_memory_until_it_hands_out_blocks(rt, pool, stream):
    free = _free(rt)
    assert _free(rt) == free and _attr(pool, acl.ACL_RT_MEM_POOL_ATTR_RESERVED_MEM_CURRENT) == 0
    ptr, ret = acl.rt.mem_pool_malloc_async(100, pool, stream)
    assert ret == 0 and ptr % G == 0
    # DEVICE_POOL_MIN_BLOCK_SIZE: 2 MiB, charged to the device (aclrtGetMemInfo sees it)
    assert free - _free(rt) == G
    assert _attr(pool, acl.ACL_RT_MEM_POOL_ATTR_USED_MEM_CURRENT) == G
    # the block is device memory the program can use
    assert acl.rt.memset(ptr, 100, 7, 100) == 0
    assert acl.rt.mem_pool_free_async(ptr, stream) == 0
    assert acl.rt.synchronize_stream(stream) == 0
    # release threshold 0 (default): the next synchronisation gives it back (11-10)
    assert _free(rt) == free and _attr(pool, acl.ACL_RT_MEM_POOL_ATTR_RESERVED_MEM_CURRENT) == 0
    assert _attr(pool, acl.ACL_RT_MEM_POOL_ATTR_RESERVED_MEM_HIGH) == G
    assert acl.rt.mem_pool_destroy(pool) == 0


def test_same_stream_reuse_before_the_free_ran(rt, pool, stream):
    a, _ = acl.rt.mem_pool_malloc_async(3 * MiB, pool, stream)
    acl.rt.mem_pool_free_async(a, stream)
    b, _ = acl.rt.mem_pool_malloc_async(MiB, pool, stream)
    # best fit from the cached 4 MiB, split on its left (Segment::SplitLeft)
    assert b == a
    assert _attr(pool, acl.ACL_RT_MEM_POOL_ATTR_RESERVED_MEM_CURRENT) == 4 * MiB
    assert _attr(pool, acl.ACL_RT_MEM_POOL_ATTR_USED_MEM_CURRENT) == G
    # the free ran, but the block was handed out again on the stream: still usable
    assert acl.rt.synchronize_stream(stream) == 0
    assert acl.rt.memset(b, 16, 0, 16) == 0
    assert rt.sanitizer.counts() == {}


def test_another_stream_reuses_only_by_a_rule(rt, pool, stream):
    other, _ = acl.rt.create_stream()
    a, _ = acl.rt.mem_pool_malloc_async(G, pool, stream)
    acl.rt.mem_pool_free_async(a, stream)
    b, _ = acl.rt.mem_pool_malloc_async(G, pool, other)
    assert b != a  # no switch on: only the freeing stream reuses
    acl.rt.mem_pool_free_async(b, other)
    # event dependency: the other stream waited for an event recorded after the free
    assert acl.rt.mem_pool_set_attr(pool, acl.ACL_RT_MEM_POOL_REUSE_FOLLOW_EVENT_DEPENDENCIES,
                                    1) == 0
    event, _ = acl.rt.create_event()
    acl.rt.record_event(event, stream)
    acl.rt.stream_wait_event(other, event)
    c, _ = acl.rt.mem_pool_malloc_async(G, pool, other)
    assert c in (a, b)


def test_internal_dependencies_make_the_stream_wait(rt, pool, stream):
    other, _ = acl.rt.create_stream()
    acl.rt.mem_pool_set_attr(pool, acl.ACL_RT_MEM_POOL_REUSE_ALLOW_INTERNAL_DEPENDENCIES, 1)
    a, _ = acl.rt.mem_pool_malloc_async(G, pool, stream)
    acl.rt.memset_async(a, G, 1, G, stream)
    acl.rt.mem_pool_free_async(a, stream)
    b, _ = acl.rt.mem_pool_malloc_async(G, pool, other)
    assert b == a
    acl.rt.memset_async(b, G, 2, G, other)
    # synchronising only the reusing stream runs the freeing stream's work first
    assert acl.rt.synchronize_stream(other) == 0
    assert rt.streams.pending == 0
    assert rt.sanitizer.counts() == {}


def test_opportunistic_reuse_takes_a_free_that_ran(rt, pool, stream):
    other, _ = acl.rt.create_stream()
    acl.rt.mem_pool_set_attr(pool, acl.ACL_RT_MEM_POOL_ATTR_RELEASE_THRESHOLD, 16 * MiB)
    acl.rt.mem_pool_set_attr(pool, acl.ACL_RT_MEM_POOL_REUSE_ALLOW_OPPORTUNISTIC, 1)
    a, _ = acl.rt.mem_pool_malloc_async(G, pool, stream)
    acl.rt.mem_pool_free_async(a, stream)
    b, _ = acl.rt.mem_pool_malloc_async(G, pool, other)
    assert b != a  # its free has not run yet
    acl.rt.synchronize_stream(stream)  # kept: the threshold is above the pool's memory
    c, _ = acl.rt.mem_pool_malloc_async(G, pool, other)
    assert c == a


def test_trim_to_keeps_the_bytes_asked_and_the_busy_ones(rt, pool, stream):
    acl.rt.mem_pool_set_attr(pool, acl.ACL_RT_MEM_POOL_ATTR_RELEASE_THRESHOLD, 16 * MiB)
    ptrs = [acl.rt.mem_pool_malloc_async(G, pool, stream)[0] for _ in range(4)]
    for ptr in ptrs[:3]:
        acl.rt.mem_pool_free_async(ptr, stream)
    acl.rt.synchronize_stream(stream)
    free = _free(rt)
    assert _attr(pool, acl.ACL_RT_MEM_POOL_ATTR_RESERVED_MEM_CURRENT) == 8 * MiB
    assert acl.rt.mem_pool_trim_to(pool, 4 * MiB) == 0
    assert _attr(pool, acl.ACL_RT_MEM_POOL_ATTR_RESERVED_MEM_CURRENT) == 4 * MiB
    assert _free(rt) - free == 4 * MiB
    # SegmentManager::TrimTo: less than the busy bytes, or more than the pool, is refused
    assert acl.rt.mem_pool_trim_to(pool, MiB) == acl.ACL_ERROR_RT_INTERNAL_ERROR
    assert acl.rt.mem_pool_trim_to(pool, 17 * MiB) == acl.ACL_ERROR_RT_INTERNAL_ERROR
    assert acl.rt.mem_pool_trim_to(pool, 4 * MiB) == 0  # at or above reserved: nothing


def test_the_sanitizer_reports_a_block_used_after_its_free_ran(pool, stream, rt):
    ptr, _ = acl.rt.mem_pool_malloc_async(64, pool, stream)
    acl.rt.mem_pool_set_attr(pool, acl.ACL_RT_MEM_POOL_ATTR_RELEASE_THRESHOLD, 16 * MiB)
    acl.rt.mem_pool_free_async(ptr, stream)
    # before the free runs the block is still the stream's
    assert acl.rt.memset(ptr, 64, 0, 64) == 0
    acl.rt.synchronize_stream(stream)
    assert acl.rt.memset(ptr, 64, 0, 64) == acl.ACL_ERROR_RT_PARAM_INVALID
    (report,) = rt.sanitizer.reports
    assert report.kind == "use-after-free" and "aclrtMemPoolFreeAsync" in report.where


def test_free_async_of_an_ordinary_block_frees_it_in_stream_order(rt, stream):
    ptr, _ = acl.rt.malloc(100, 0)
    free = _free(rt)
    assert acl.rt.mem_pool_free_async(ptr, stream) == 0  # api_impl_soma.cc: DevFreeStatic
    assert _free(rt) == free
    acl.rt.synchronize_stream(stream)
    assert rt.block(ptr) is None and _free(rt) > free


@pytest.mark.parametrize("props, code", [
    # memory.cpp aclrtMemPoolCreateImpl
    (None, acl.ACL_ERROR_INVALID_PARAM),
    (_props(allocType=1), acl.ACL_ERROR_INVALID_PARAM),
    ({**_props(), "location": {"id": 0, "type": 0}}, acl.ACL_ERROR_INVALID_PARAM),
    (_props(reserved=[0, 1]), acl.ACL_ERROR_INVALID_PARAM),
    # soma.cc AlignAndValidatePoolSize: past the device's memory
    (_props(max_size=65 * MiB), acl.ACL_ERROR_RT_PARAM_INVALID),
    (_props(device=7), acl.ACL_ERROR_RT_INVALID_DEVICEID),
])
def test_create_refuses_bad_props(rt, props, code):
    assert acl.rt.mem_pool_create(props) == (0, code)
    assert rt.pools.pools() == []


def test_pools_are_an_atlas_a2_feature():
    with Runtime("A3", hbm_bytes=64 * MiB):
        acl.rt.set_device(0)
        assert acl.rt.mem_pool_create(_props()) == (0, acl.ACL_ERROR_RT_FEATURE_NOT_SUPPORT)


def test_each_misuse_returns_its_code_and_changes_nothing(rt, pool, stream):
    ptr, _ = acl.rt.mem_pool_malloc_async(G, pool, stream)
    before = (_free(rt), [(s.ptr, s.size, s.busy) for s in rt.pools.pools()[0].segments
                          .segments.values()], rt.streams.pending)
    misuses = [
        # memory.cpp: NULL pool, NULL stream (the default stream is NULL)
        (acl.rt.mem_pool_malloc_async, (G, 0, stream), acl.ACL_ERROR_INVALID_PARAM),
        (acl.rt.mem_pool_malloc_async, (G, pool, 0), acl.ACL_ERROR_INVALID_PARAM),
        # RT_ERROR_MEM_POOL_NULL / RT_ERROR_MEM_POOL_ALLOC: ACL_ERROR_RT_INTERNAL_ERROR
        (acl.rt.mem_pool_malloc_async, (G, pool + 64, stream), acl.ACL_ERROR_RT_INTERNAL_ERROR),
        (acl.rt.mem_pool_malloc_async, (32 * MiB, pool, stream),
         acl.ACL_ERROR_RT_INTERNAL_ERROR),
        (acl.rt.mem_pool_malloc_async, (2**64 - 1, pool, stream), acl.ACL_ERROR_RT_PARAM_INVALID),
        (acl.rt.mem_pool_free_async, (0, stream), acl.ACL_ERROR_INVALID_PARAM),
        (acl.rt.mem_pool_free_async, (ptr, 0), acl.ACL_ERROR_RT_INTERNAL_ERROR),
        # soma.cc: an address inside a block has no allocation size
        (acl.rt.mem_pool_free_async, (ptr + 64, stream), acl.ACL_ERROR_RT_PARAM_INVALID),
        (acl.rt.mem_pool_set_attr, (0, 4, 0), acl.ACL_ERROR_INVALID_PARAM),
        # SomaApi::StreamMemPoolSetAttr: read-only; SetAttribute: out of range
        (acl.rt.mem_pool_set_attr, (pool, acl.ACL_RT_MEM_POOL_ATTR_USED_MEM_CURRENT, 0),
         acl.ACL_ERROR_RT_PARAM_INVALID),
        (acl.rt.mem_pool_set_attr, (pool, acl.ACL_RT_MEM_POOL_ATTR_RELEASE_THRESHOLD,
                                    32 * MiB), acl.ACL_ERROR_RT_INTERNAL_ERROR),
        (acl.rt.mem_pool_set_attr, (pool, acl.ACL_RT_MEM_POOL_ATTR_USED_MEM_HIGH, 1),
         acl.ACL_ERROR_RT_INTERNAL_ERROR),
        (acl.rt.mem_pool_set_attr, (pool, 9, 0), acl.ACL_ERROR_RT_INTERNAL_ERROR),
        (acl.rt.mem_pool_set_attr, (pool, 4, None), acl.ACL_ERROR_RT_PARAM_INVALID),
        (acl.rt.mem_pool_destroy, (0,), acl.ACL_ERROR_INVALID_PARAM),
        (acl.rt.mem_pool_destroy, (pool + 64,), acl.ACL_ERROR_RT_INTERNAL_ERROR),
        (acl.rt.mem_pool_trim_to, (0, 0), acl.ACL_ERROR_INVALID_PARAM),
    ]
    for fn, args, code in misuses:
        result = fn(*args)
        got = result[-1] if isinstance(result, tuple) else result
        assert got == code, (fn.__name__, args, result, acl.get_recent_err_msg())
        after = (_free(rt), [(s.ptr, s.size, s.busy) for s in rt.pools.pools()[0].segments
                             .segments.values()], rt.streams.pending)
        assert after == before, fn.__name__
    assert acl.rt.mem_pool_get_attr(pool, 0) == (0, acl.ACL_ERROR_RT_INTERNAL_ERROR)
    # double free: the block is no longer the pool's to give back
    assert acl.rt.mem_pool_free_async(ptr, stream) == 0
    assert acl.rt.mem_pool_free_async(ptr, stream) == acl.ACL_ERROR_RT_PARAM_INVALID
    # size 0 succeeds doing nothing (memory.cpp)
    assert acl.rt.mem_pool_malloc_async(0, pool, stream) == (0, 0)


def test_destroy_and_reset_release_everything(rt, stream):
    free = _free(rt)
    pool, _ = acl.rt.mem_pool_create(_props())
    acl.rt.mem_pool_malloc_async(G, pool, stream)
    assert acl.rt.mem_pool_destroy(pool) == 0
    assert _free(rt) == free and rt.vmm.handles() == []
    assert [r.kind for r in rt.sanitizer.reports] == ["leak"]
    pool, _ = acl.rt.mem_pool_create(_props(max_size=0))  # 0: the whole device
    assert rt.pools.pools()[0].segments.size == 64 * MiB
    acl.rt.mem_pool_malloc_async(G, pool, stream)
    acl.rt.reset_device(0)
    assert rt.pools.pools() == [] and rt.vmm.space.reservations == {}


def test_traced_counted_and_replayed(rt, pool, stream):
    stats = MemoryStats.attach(rt)
    recorder = Recorder(rt)
    recorder.start()
    a, _ = acl.rt.mem_pool_malloc_async(3 * MiB, pool, stream)
    b, _ = acl.rt.mem_pool_malloc_async(G, pool, stream)
    acl.rt.mem_pool_free_async(a, stream)
    acl.rt.synchronize_stream(stream)
    acl.rt.mem_pool_free_async(b, stream)
    acl.rt.mem_pool_trim_to(pool, 0)
    # b's free has not run: trimming leaves its granule (memory the device may still use)
    assert _attr(pool, acl.ACL_RT_MEM_POOL_ATTR_RESERVED_MEM_CURRENT) == G
    acl.rt.synchronize_stream(stream)
    recorder.stop()
    kinds = [e["event"] for e in recorder.trace.events]
    assert kinds.count("mem_pool_malloc") == 2 and kinds.count("mem_pool_free") == 2
    assert kinds.count("malloc_physical") == 3 and "mem_pool_trim" in kinds
    counts = stats.snapshot(0)
    assert counts["allocation.mem_pool.peak"] == 2
    assert counts["allocation.mem_pool.current"] == 0
    assert counts["requested_bytes.mem_pool.peak"] == 5 * MiB
    assert counts["footprint_bytes.physical.peak"] == 6 * MiB
    assert counts["footprint_bytes.physical.current"] == 0
    # the replay places and gives back the pool's granules as the program did
    result = replay(recorder.trace, "A2", capacity=64 * MiB)
    assert result.problems == [] and result.failures == 0
    assert result.peak_bytes == 6 * MiB


def test_resetting_the_default_device_drops_its_pools():
    # Regression: the last reset of a default device dropped the pool, then failed with
    # ACL_ERROR_RT_CONTEXT_NULL (the device was no longer current) and left its addresses.
    with Runtime("A2", hbm_bytes=64 * MiB, default_device=0) as rt:
        _, ret = acl.rt.mem_pool_create(_props())
        assert ret == 0
        assert acl.rt.reset_device(0) == 0
        assert rt.pools.pools() == [] and rt.vmm.space.reservations == {}


def test_a_split_merged_segment_is_released_once_its_frees_ran(rt, pool, stream):
    # Regression: two blocks freed on one stream merged; reusing the left half left the right
    # half marked by a free whose range it was outside of, so it was never released.
    a, _ = acl.rt.mem_pool_malloc_async(1, pool, stream)
    b, _ = acl.rt.mem_pool_malloc_async(1, pool, stream)
    acl.rt.mem_pool_free_async(b, stream)
    acl.rt.mem_pool_free_async(a, stream)
    c, _ = acl.rt.mem_pool_malloc_async(1, pool, stream)
    assert acl.rt.synchronize_device() == 0
    assert _attr(pool, acl.ACL_RT_MEM_POOL_ATTR_RESERVED_MEM_CURRENT) == G  # c's only
    acl.rt.mem_pool_free_async(c, stream)


def test_a_wait_for_an_event_runs_only_the_work_before_its_record(rt, pool, stream):
    # Regression: aclrtStreamWaitEvent ran all of the recording stream's work, so a free
    # queued there after a wait in the other direction ran before the work it waited for,
    # and that work met a block already given back.
    other, _ = acl.rt.create_stream()
    a, _ = acl.rt.mem_pool_malloc_async(1, pool, stream)
    first, _ = acl.rt.create_event()
    acl.rt.record_event(first, stream)
    acl.rt.stream_wait_event(other, first)
    acl.rt.mem_pool_free_async(a, other)
    b, _ = acl.rt.mem_pool_malloc_async(1, pool, other)  # the same block, reused on other
    assert b == a
    acl.rt.memset_async(b, 1, 0, 1, other)
    second, _ = acl.rt.create_event()
    acl.rt.record_event(second, other)
    acl.rt.stream_wait_event(stream, second)
    acl.rt.mem_pool_free_async(b, stream)
    assert acl.rt.synchronize_stream(other) == 0, acl.get_recent_err_msg()
    assert rt.sanitizer.counts() == {}


def test_threads_share_a_pool(rt, pool):
    import threading

    streams = [acl.rt.create_stream()[0] for _ in range(4)]
    errors = []

    def work(stream):
        acl.rt.set_device(0)
        try:
            for _ in range(50):
                ptr, ret = acl.rt.mem_pool_malloc_async(1, pool, stream)
                assert ret in (0, acl.ACL_ERROR_RT_INTERNAL_ERROR)  # 8 granules for 4 threads
                if ret == 0:
                    assert acl.rt.memset_async(ptr, 1, 0, 1, stream) == 0
                    assert acl.rt.mem_pool_free_async(ptr, stream) == 0
                assert acl.rt.synchronize_stream(stream) == 0
        except AssertionError as error:  # pragma: no cover - reported below
            errors.append(error)
        finally:
            acl.rt.reset_device(0)

    threads = [threading.Thread(target=work, args=(s,)) for s in streams]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    acl.rt.synchronize_device()
    pools = rt.pools.pools()
    pools[0].segments.check_invariants()
    assert _attr(pool, acl.ACL_RT_MEM_POOL_ATTR_USED_MEM_CURRENT) == 0
    assert _attr(pool, acl.ACL_RT_MEM_POOL_ATTR_RESERVED_MEM_CURRENT) == 0
    assert rt.sanitizer.counts() == {}


def test_the_event_tables_stay_bounded_over_many_cycles(rt, pool, stream):
    # Regression: every recorded event and every (waiting, recording) stream pair stayed in
    # the pools' tables after aclrtDestroyEvent / aclrtDestroyStream: memory grew with the
    # run's length (200 cycles left 200 entries in each).
    acl.rt.mem_pool_set_attr(pool, acl.ACL_RT_MEM_POOL_REUSE_FOLLOW_EVENT_DEPENDENCIES, 1)
    for _ in range(200):
        other, _ = acl.rt.create_stream()
        event, _ = acl.rt.create_event()
        for waiting, recording in ((other, stream), (stream, other)):
            ptr, _ = acl.rt.mem_pool_malloc_async(100, pool, recording)
            assert acl.rt.mem_pool_free_async(ptr, recording) == 0
            assert acl.rt.record_event(event, recording) == 0
            assert acl.rt.stream_wait_event(waiting, event) == 0
            # the event-ordered reuse still works: the waiting stream takes the block back
            again, _ = acl.rt.mem_pool_malloc_async(100, pool, waiting)
            assert again == ptr
            assert acl.rt.mem_pool_free_async(again, waiting) == 0
        assert acl.rt.synchronize_stream(other) == 0
        assert acl.rt.destroy_event(event) == 0
        assert acl.rt.destroy_stream(other) == 0
    assert len(rt.pools.order.records) == 0
    assert len(rt.pools.order.waited) <= 2
    assert _attr(pool, acl.ACL_RT_MEM_POOL_ATTR_USED_MEM_CURRENT) == 0


def test_address_range_and_attributes_of_a_pool_block(rt, pool, stream):
    # 11-04 aclrtMemGetAddressRange: "待查询地址所属内存块的起始地址以及内存块大小": the pool
    # block, as for aclrtMalloc memory. Regression: it reported the 2 MiB granule mapped there.
    ptr, _ = acl.rt.mem_pool_malloc_async(3 * MiB + 5, pool, stream)
    assert acl.rt.mem_get_address_range(ptr + 2 * MiB + 7) == (ptr, 3 * MiB + 5, 0)
    assert acl.rt.mem_get_address_range(ptr) == (ptr, 3 * MiB + 5, 0)
    # 11-05 aclrtPointerGetAttributes has only the location and page size: a granule's and
    # its block's are the same (device 0, 2 MiB pages)
    attrs, ret = acl.rt.pointer_get_attributes(ptr + 2 * MiB + 7)
    assert ret == 0 and attrs["location"] == {"id": 0, "type": 1}
    assert attrs["page_size"] == 2 * MiB
    acl.rt.mem_pool_set_attr(pool, acl.ACL_RT_MEM_POOL_ATTR_RELEASE_THRESHOLD, 16 * MiB)
    acl.rt.mem_pool_free_async(ptr, stream)
    # given back: in no block (its granules stay mapped in the pool, cached)
    assert acl.rt.mem_get_address_range(ptr)[2] == acl.ACL_ERROR_RT_PARAM_INVALID
    assert _attr(pool, acl.ACL_RT_MEM_POOL_ATTR_RESERVED_MEM_CURRENT) == 4 * MiB
