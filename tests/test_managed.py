"""Managed (unified) memory and aclrtMemP2PMap (hicann/runtime docs/zh/api_ref/
11-05_unified_addressing.md): the calls through the face, each documented misuse's code, the
bytes the host and the devices share, the device's accounting, the sanitizer, statistics,
traces and replay."""

import pytest

from ascend_memsim import MiB, Runtime, acl, aclrt
from ascend_memsim.memory.rules import UVM_BASE, UVM_END
from ascend_memsim.observe.replay import replay
from ascend_memsim.observe.stats import MemoryStats
from ascend_memsim.observe.trace import Recorder

G = 2 * MiB
GLOBAL = acl.ACL_RT_MEM_ATTACH_GLOBAL
DEVICE = {"type": acl.ACL_MEM_LOCATIONTYPE_DEVICE, "id": 0}
HOST = {"type": acl.ACL_MEM_LOCATIONTYPE_HOST, "id": 0}
NONE = {"type": 0, "id": -1}


def _free(rt):
    return rt.get_mem_info(acl.ACL_HBM_MEM)[0]


def _alloc(size=100):
    ptr, ret = acl.rt.mem_alloc_managed(size, GLOBAL)
    assert ret == 0
    return ptr


def _get(attr, ptr, size=1, data_size=8):
    value, ret = acl.rt.mem_managed_get_attr(attr, ptr, size, data_size)
    assert ret == 0
    return value


def test_the_c_names_and_the_constants(rt):
    assert aclrt.aclrtMemAllocManaged is acl.rt.mem_alloc_managed
    assert aclrt.aclrtMemP2PMap is acl.rt.mem_p2p_map
    # acl_rt.h: "#define ACL_RT_MEM_ATTACH_GLOBAL 0x01U", the enums
    assert (GLOBAL, acl.ACL_MEM_ADVISE_UNSET_ACCESSED_BY, acl.ACL_MEM_LOCATIONTYPE_HOST,
            acl.ACL_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_ID) == (1, 5, 2, 8)


def test_an_allocation_is_2_mib_pages_of_the_current_device_in_the_managed_range(rt):
    free = _free(rt)
    ptr = _alloc(100)
    # 11-05: "[0x90000000000ULL, 0x90000000000ULL+3TB)", "向上按2M对齐"
    assert ptr == UVM_BASE and UVM_BASE <= ptr < UVM_END
    assert _free(rt) == free - G
    assert _alloc(G + 1) == UVM_BASE + G
    assert _free(rt) == free - 3 * G
    assert acl.rt.pointer_get_attributes(ptr) == (
        {"location": {"id": 0, "type": acl.ACL_MEM_LOCATION_TYPE_MANAGED},
         "page_size": G, "rsv": [0, 0, 0, 0]}, 0)
    # 11-05: "需调用aclrtFree接口"
    assert acl.rt.free(ptr) == 0
    assert _free(rt) == free - 2 * G
    assert acl.rt.free(ptr) == acl.ACL_ERROR_RT_PARAM_INVALID


@pytest.mark.parametrize("size, flag, code", [
    (100, 0, acl.ACL_ERROR_INVALID_PARAM),       # memory.cpp: flag == ACL_RT_MEM_ATTACH_GLOBAL
    (100, 2, acl.ACL_ERROR_INVALID_PARAM),
    (0, GLOBAL, acl.ACL_ERROR_RT_PARAM_INVALID),  # api_error.cc ManagedMemAlloc: size 0
    (66 * MiB, GLOBAL, acl.ACL_ERROR_RT_MEMORY_ALLOCATION),   # past the device
    (4 << 40, GLOBAL, acl.ACL_ERROR_RT_MEMORY_ALLOCATION),    # past the 3 TB of 11-05
    (-1, GLOBAL, acl.ACL_ERROR_INVALID_PARAM),
    (1.5, GLOBAL, acl.ACL_ERROR_INVALID_PARAM),
])
def test_a_refused_allocation_changes_nothing(rt, size, flag, code):
    free = _free(rt)
    assert acl.rt.mem_alloc_managed(size, flag) == (0, code)
    assert _free(rt) == free and rt.managed.allocations() == []


def test_products_without_managed_memory_refuse_it():
    # 11-05, 产品支持情况: Atlas A2 and A3 only
    with Runtime("950PR", hbm_bytes=64 * MiB):
        acl.rt.set_device(0)
        assert acl.rt.mem_alloc_managed(100, GLOBAL) == (
            0, acl.ACL_ERROR_RT_FEATURE_NOT_SUPPORT)
    with Runtime("A3", hbm_bytes=64 * MiB):
        acl.rt.set_device(0)
        assert acl.rt.mem_alloc_managed(100, GLOBAL)[1] == 0


def test_no_current_device_is_a_context_error():
    with Runtime("A2", hbm_bytes=64 * MiB):
        assert acl.rt.mem_alloc_managed(100, GLOBAL) == (0, acl.ACL_ERROR_RT_CONTEXT_NULL)


def test_the_host_and_the_devices_see_the_same_bytes(rt):
    ptr = _alloc(64)
    text = b"managed bytes!"
    src = acl.util.bytes_to_ptr(text)
    assert acl.rt.memcpy(ptr, 64, src, 14, acl.ACL_MEMCPY_HOST_TO_DEVICE) == 0
    assert acl.util.ptr_to_bytes(ptr, 14) == b"managed bytes!"
    # a host write through a numpy view reaches a device copy
    np = pytest.importorskip("numpy")
    view = acl.util.ptr_to_numpy(ptr, (4,), np.dtype(np.uint8).num)
    view[:] = [1, 2, 3, 4]
    dev, _ = acl.rt.malloc(64, 0)
    assert acl.rt.memcpy(dev, 64, ptr, 4, acl.ACL_MEMCPY_DEVICE_TO_DEVICE) == 0
    back = bytes(4)
    assert acl.rt.memcpy(acl.util.bytes_to_ptr(back), 4, dev, 4, 2) == 0
    assert back == acl.util.ptr_to_bytes(ptr, 4) == bytes([1, 2, 3, 4])
    # another device copies to and from it without peer access (DECISION: it migrates)
    acl.rt.set_device(1)
    other, _ = acl.rt.malloc(64, 0)
    assert acl.rt.memcpy(other, 64, ptr, 14, acl.ACL_MEMCPY_DEVICE_TO_DEVICE) == 0
    assert acl.rt.memcpy(ptr + 20, 44, other, 4, acl.ACL_MEMCPY_DEVICE_TO_DEVICE) == 0
    assert acl.util.ptr_to_bytes(ptr + 20, 4) == bytes([1, 2, 3, 4])


def test_advice_is_kept_per_page_and_read_back(rt):
    ptr = _alloc(3 * G)
    assert _get(acl.ACL_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, ptr) == NONE
    assert acl.rt.mem_managed_advise(ptr, G, acl.ACL_MEM_ADVISE_SET_PREFERRED_LOCATION,
                                     DEVICE) == 0
    assert acl.rt.mem_managed_advise(ptr, 2 * G, acl.ACL_MEM_ADVISE_SET_READ_MOSTLY, HOST) == 0
    assert acl.rt.mem_managed_advise(ptr + G, G, acl.ACL_MEM_ADVISE_SET_ACCESSED_BY,
                                     {"type": 1, "id": 1}) == 0
    assert _get(acl.ACL_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, ptr, G) == {"type": 1, "id": 0}
    assert _get(acl.ACL_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, ptr, 2 * G, 4) == 1
    assert _get(acl.ACL_MEM_RANGE_ATTRIBUTE_ACCESSED_BY, ptr + G, 10, 16) == [
        {"type": 1, "id": 1}]
    # 11-05: "策略属性值不一致 ... 查询结果为无效值"
    assert _get(acl.ACL_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, ptr, 2 * G) == NONE
    assert _get(acl.ACL_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, ptr, 3 * G, 4) == 0
    assert acl.rt.mem_managed_get_attrs(
        [acl.ACL_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE,
         acl.ACL_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_ID,
         acl.ACL_MEM_RANGE_ATTRIBUTE_READ_MOSTLY], ptr, G, [4, 4, 4]) == ([1, 0, 1], 0)
    assert acl.rt.mem_managed_advise(ptr, G, acl.ACL_MEM_ADVISE_UNSET_PREFERRED_LOCATION,
                                     DEVICE) == 0
    assert _get(acl.ACL_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE, ptr, G, 4) == 0


@pytest.mark.parametrize("args, code", [
    ((0, G, 0, DEVICE), acl.ACL_ERROR_INVALID_PARAM),         # memory.cpp: NULL
    ((None, 0, 0, DEVICE), acl.ACL_ERROR_INVALID_PARAM),      # size 0
    ((None, G, 6, DEVICE), acl.ACL_ERROR_RT_PARAM_INVALID),   # api_error_uvm.cc: past 5
    ((None, G, 2, {"type": 1, "id": 2}), acl.ACL_ERROR_RT_PARAM_INVALID),  # no device 2
    ((None, G, 2, NONE), acl.ACL_ERROR_RT_PARAM_INVALID),      # a location is needed
    ((None, 100, 0, DEVICE), acl.ACL_ERROR_RT_PARAM_INVALID),  # 11-05: "要求2MB对齐"
    ((None, 4 * G, 0, DEVICE), acl.ACL_ERROR_RT_PARAM_INVALID),  # past the allocation
    ((UVM_END, G, 0, DEVICE), acl.ACL_ERROR_RT_PARAM_INVALID),   # outside the range
    ((None, G, 0, "device"), acl.ACL_ERROR_INVALID_PARAM),     # not a dict
])
def test_refused_advice_changes_nothing(rt, args, code):
    ptr = _alloc(G)
    args = (ptr if args[0] is None else args[0], *args[1:])
    assert acl.rt.mem_managed_advise(*args) == code
    assert rt.managed.allocs[ptr].pages == {}


@pytest.mark.parametrize("attr, size, data_size, code", [
    (0, 1, 8, acl.ACL_ERROR_RT_PARAM_INVALID),   # api_error_uvm.cc: attribute in [1, 8]
    (9, 1, 8, acl.ACL_ERROR_RT_PARAM_INVALID),
    (2, 0, 8, acl.ACL_ERROR_INVALID_PARAM),      # memory.cpp: size > 0
    (2, 1, 4, acl.ACL_ERROR_RT_PARAM_INVALID),   # a location takes 8 bytes (DECISION)
    (2, 3 * G, 8, acl.ACL_ERROR_RT_PARAM_INVALID),
])
def test_refused_queries(rt, attr, size, data_size, code):
    ptr = _alloc(G)
    assert acl.rt.mem_managed_get_attr(attr, ptr, size, data_size) == (None, code)


def test_a_query_needs_no_current_device(rt):
    # api_impl_uvm.cc MemManagedGetAttr: without a context it asks the driver directly
    import threading

    ptr = _alloc(G)
    acl.rt.mem_managed_advise(ptr, G, acl.ACL_MEM_ADVISE_SET_READ_MOSTLY, DEVICE)
    out = []
    thread = threading.Thread(target=lambda: out.append(acl.rt.mem_managed_get_attr(
        acl.ACL_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, ptr, G, 4)))
    thread.start()
    thread.join()
    assert out == [(1, 0)]
    # an advice needs one (api_impl_uvm.cc MemManagedAdvise: CHECK_CONTEXT_VALID)
    thread = threading.Thread(target=lambda: out.append(acl.rt.mem_managed_advise(
        ptr, G, acl.ACL_MEM_ADVISE_UNSET_READ_MOSTLY, DEVICE)))
    thread.start()
    thread.join()
    assert out[1] == acl.ACL_ERROR_RT_CONTEXT_NULL


def test_get_attrs_checks_its_lists(rt):
    ptr = _alloc(G)
    assert acl.rt.mem_managed_get_attrs([], ptr, 1, []) == ([], acl.ACL_ERROR_INVALID_PARAM)
    assert acl.rt.mem_managed_get_attrs([1, 2], ptr, 1, [4]) == (
        [], acl.ACL_ERROR_INVALID_PARAM)
    assert acl.rt.mem_managed_get_attrs((1,), ptr, 1, [4]) == (
        [], acl.ACL_ERROR_INVALID_PARAM)


def test_a_prefetch_moves_the_location_when_the_stream_runs(rt, stream):
    ptr = _alloc(2 * G)
    assert acl.rt.mem_managed_prefetch_async(ptr, G, HOST, 0, stream) == 0
    last = acl.ACL_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION
    assert _get(last, ptr) == NONE  # queued, not run (11-05: 异步接口)
    assert acl.rt.synchronize_stream(stream) == 0
    assert _get(last, ptr) == {"type": 2, "id": 0}
    assert _get(last, ptr, 2 * G) == NONE  # the second page was not prefetched


@pytest.mark.parametrize("args, code", [
    ((None, G, HOST, 1), acl.ACL_ERROR_INVALID_PARAM),   # memory.cpp: flags reserved
    ((None, 0, HOST, 0), acl.ACL_ERROR_INVALID_PARAM),
    ((None, 100, HOST, 0), acl.ACL_ERROR_RT_PARAM_INVALID),
    ((None, G, {"type": 1, "id": 7}, 0), acl.ACL_ERROR_RT_PARAM_INVALID),
    ((None, G, NONE, 0), acl.ACL_ERROR_RT_PARAM_INVALID),
    ((None, G, {"type": 9, "id": 0}, 0), acl.ACL_ERROR_RT_PARAM_INVALID),
])
def test_a_refused_prefetch_queues_nothing(rt, stream, args, code):
    ptr = _alloc(G)
    assert acl.rt.mem_managed_prefetch_async(
        ptr if args[0] is None else args[0], *args[1:], stream) == code
    assert rt.streams.pending == 0
    assert acl.rt.mem_managed_prefetch_async(ptr, G, HOST, 0, 1 << 40) == (
        acl.ACL_ERROR_RT_INVALID_HANDLE)


def test_free_with_dev_sync_runs_the_queued_prefetch_first(rt, stream):
    ptr = _alloc(G)
    assert acl.rt.mem_managed_prefetch_async(ptr, G, DEVICE, 0, stream) == 0
    assert acl.rt.free_with_dev_sync(ptr) == 0
    assert rt.streams.pending == 0 and rt.sanitizer.reports == []


def test_a_prefetch_of_memory_freed_before_the_stream_runs_fails_there(rt, stream):
    ptr = _alloc(G)
    assert acl.rt.mem_managed_prefetch_async(ptr, G, DEVICE, 0, stream) == 0
    assert acl.rt.free(ptr) == 0
    assert acl.rt.synchronize_stream(stream) == acl.ACL_ERROR_RT_PARAM_INVALID
    assert [r.kind for r in rt.sanitizer.reports] == ["use-after-free"]


def test_a_batch_prefetch_sends_each_group_to_its_location(rt, stream):
    a, b, c = _alloc(G), _alloc(G), _alloc(G)
    # 11-05 约束说明: prefetchLocs[k] takes ptrs[prefetchLocIdxs[k]] up to the next index
    assert acl.rt.mem_managed_prefetch_batch_async(
        [a, b, c], [G, G, G], 3, [HOST, DEVICE], [0, 2], 2, 0, stream) == 0
    acl.rt.synchronize_stream(stream)
    last = acl.ACL_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_TYPE
    assert [_get(last, p, 1, 4) for p in (a, b, c)] == [2, 2, 1]


@pytest.mark.parametrize("ptrs, sizes, count, idxs, num, code", [
    ([None], [G], 0, [0], 1, acl.ACL_ERROR_INVALID_PARAM),      # count 0
    ([None], [G], 1, [0, 1], 2, acl.ACL_ERROR_INVALID_PARAM),   # count < numPrefetchLocs
    ([None, None], [G], 2, [0], 1, acl.ACL_ERROR_INVALID_PARAM),  # sizes not count long
    ([None, None], [G, G], 2, [1], 1, acl.ACL_ERROR_RT_PARAM_INVALID),  # idxs[0] != 0
    ([None, None], [G, G], 2, [0, 0], 2, acl.ACL_ERROR_RT_PARAM_INVALID),  # not increasing
    ([None, 0], [G, G], 2, [0], 1, acl.ACL_ERROR_RT_PARAM_INVALID),   # a NULL address
    ([None, None], [G, 100], 2, [0], 1, acl.ACL_ERROR_RT_PARAM_INVALID),  # not 2 MiB
])
def test_a_refused_batch_queues_nothing(rt, stream, ptrs, sizes, count, idxs, num, code):
    ptr = _alloc(G)
    ptrs = [ptr if p is None else p for p in ptrs]
    assert acl.rt.mem_managed_prefetch_batch_async(
        ptrs, sizes, count, [HOST] * len(idxs), idxs, num, 0, stream) == code
    assert rt.streams.pending == 0


def test_the_sanitizer_sees_managed_memory_as_device_memory(rt):
    ptr = _alloc(100)
    buffer = bytes(16)
    src = acl.util.bytes_to_ptr(buffer)
    # past the 2 MiB footprint: out of bounds, refused
    assert acl.rt.memcpy(ptr + G - 8, 16, src, 16, 1) == acl.ACL_ERROR_RT_PARAM_INVALID
    acl.rt.free(ptr)
    assert acl.rt.memcpy(ptr, 16, src, 16, 1) == acl.ACL_ERROR_RT_PARAM_INVALID
    assert acl.rt.free(ptr) == acl.ACL_ERROR_RT_PARAM_INVALID
    leaked = _alloc(100)
    acl.rt.reset_device(0)
    kinds = [r.kind for r in rt.sanitizer.reports]
    assert kinds == ["out-of-bounds", "use-after-free", "double-free", "leak"]
    assert f"managed allocation at {leaked:#x}" in rt.sanitizer.reports[-1].where


def test_a_reset_takes_the_memory_back_and_finalize_reports_a_leak():
    with Runtime("A2", hbm_bytes=64 * MiB) as rt:
        acl.rt.set_device(0)
        free = _free(rt)
        _alloc(100)
        acl.rt.reset_device(0)
        acl.rt.set_device(0)
        assert _free(rt) == free and rt.managed.allocations() == []
        _alloc(100)
    assert [r.kind for r in rt.sanitizer.reports] == ["leak", "leak"]


def test_statistics_traces_and_replay(rt, stream):
    stats = MemoryStats.attach(rt)
    recorder = Recorder(rt)
    recorder.start()
    a = _alloc(100)
    b = _alloc(3 * G)
    acl.rt.mem_managed_advise(a, G, acl.ACL_MEM_ADVISE_SET_READ_MOSTLY, DEVICE)
    acl.rt.mem_managed_prefetch_async(b, G, HOST, 0, stream)
    acl.rt.mem_managed_prefetch_batch_async([a], [G], 1, [HOST], [0], 1, 0, stream)
    acl.rt.synchronize_stream(stream)
    acl.rt.free(a)
    recorder.stop()
    snap = stats.snapshot(0)
    assert (snap["num_managed_allocs"], snap["num_managed_frees"], snap["num_managed_advises"],
            snap["num_managed_prefetches"], snap["num_managed_prefetch_batches"]) == (
        2, 1, 1, 1, 1)
    assert snap["managed_bytes.current"] == 3 * G and snap["managed_bytes.peak"] == 4 * G
    assert snap["footprint_bytes.physical.current"] == 3 * G
    events = [e["event"] for e in recorder.trace.events]
    assert events[:2] == ["malloc_physical", "managed_alloc"]
    assert "managed_prefetch_batch" in events and events[-1] == "free_physical"
    # replay places the memory charged to the device as physical memory
    result = replay(recorder.trace, "A2", capacity=64 * MiB)
    assert result.problems == [] and result.failures == 0 and result.peak_bytes == 4 * G


def test_p2p_map_needs_peer_access(rt):
    stats = MemoryStats.attach(rt)
    dev, _ = acl.rt.malloc(G, acl.ACL_MEM_MALLOC_HUGE_ONLY_P2P)
    # 11-05: "需先调用aclrtDeviceEnablePeerAccess接口"
    assert acl.rt.mem_p2p_map(dev, G, 1, 0) == acl.ACL_ERROR_RT_PARAM_INVALID
    assert acl.rt.device_enable_peer_access(1, 0) == 0
    assert acl.rt.mem_p2p_map(dev, G, 1, 0) == 0
    assert rt.managed.p2p_maps == {(0, dev, 1)} and stats.snapshot(0)["num_p2p_maps"] == 1
    assert acl.rt.mem_p2p_map(dev, G, 0, 0) == 0   # its own device: nothing to map
    assert acl.rt.mem_p2p_map(dev, G, 1, 1) == acl.ACL_ERROR_INVALID_PARAM   # memory.cpp
    assert acl.rt.mem_p2p_map(0, G, 1, 0) == acl.ACL_ERROR_INVALID_PARAM
    assert acl.rt.mem_p2p_map(dev, 0, 1, 0) == acl.ACL_ERROR_INVALID_PARAM
    assert acl.rt.mem_p2p_map(dev, G, 2, 0) == acl.ACL_ERROR_RT_INVALID_DEVICEID
    assert acl.rt.mem_p2p_map(dev, 3 * G, 1, 0) == acl.ACL_ERROR_RT_PARAM_INVALID
    host, _ = acl.rt.malloc_host(64)
    assert acl.rt.mem_p2p_map(host, 64, 1, 0) == acl.ACL_ERROR_RT_PARAM_INVALID
    assert acl.rt.mem_p2p_map(_alloc(), 64, 1, 0) == acl.ACL_ERROR_RT_PARAM_INVALID
    assert rt.managed.p2p_maps == {(0, dev, 1)} and stats.snapshot(0)["num_p2p_maps"] == 1
    # a reset of either device ends the mapping
    acl.rt.set_device(1)
    acl.rt.reset_device(1)
    assert rt.managed.p2p_maps == set()


def test_registered_buffers_skip_the_managed_range(rt):
    # Regression: the registered window [2**43, 2**44) holds the managed range; a buffer
    # registered when the window reached it got an address inside it.
    rt.host._next_reg = UVM_BASE - 4096
    data = b"x" * 8192
    ptr = acl.util.bytes_to_ptr(data)
    assert ptr + len(data) <= UVM_BASE or ptr >= UVM_END
    assert acl.util.ptr_to_bytes(ptr + 6000, 2) == b"xx"


def test_threads_allocating_and_freeing_keep_the_accounting_exact(rt):
    import threading

    free = _free(rt)
    errors = []

    def work():
        acl.rt.set_device(0)
        for _ in range(50):
            ptr, ret = acl.rt.mem_alloc_managed(3 * MiB, GLOBAL)
            if ret or acl.rt.memset(ptr, 64, 1, 64) or acl.rt.free(ptr):
                errors.append(ret)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and _free(rt) == free and rt.managed.allocations() == []
    rt.device(0).check_invariants()


def test_an_operator_on_another_device_computes_in_managed_memory():
    np = pytest.importorskip("numpy")
    with Runtime("A2", hbm_bytes=64 * MiB, device_count=2) as rt:
        acl.rt.set_device(0)
        a = np.arange(16, dtype=np.int32)
        ptrs = [_alloc(64) for _ in range(3)]
        for ptr, value in zip(ptrs, (a, a * 10)):
            view = acl.util.ptr_to_numpy(ptr, (16,), np.dtype(np.int32).num)
            view[:] = value
        acl.rt.set_device(1)   # the memory is charged to device 0; device 1 uses it
        descs = [acl.create_tensor_desc(acl.ACL_INT32, [16], acl.ACL_FORMAT_ND)
                 for _ in range(3)]
        bufs = [acl.create_data_buffer(p, 64) for p in ptrs]
        assert acl.op.execute_v2("Add", descs[:2], bufs[:2], descs[2:], bufs[2:], 0, 0) == 0, (
            acl.get_recent_err_msg())
        assert acl.rt.synchronize_stream(0) == 0
        out = np.frombuffer(acl.util.ptr_to_bytes(ptrs[2], 64), np.int32)
        assert (out == a * 11).all()
        for buf, desc in zip(bufs, descs):
            acl.destroy_data_buffer(buf)
            acl.destroy_tensor_desc(desc)
        for ptr in ptrs:
            assert acl.rt.free(ptr) == 0
        assert rt.managed.allocations() == []
