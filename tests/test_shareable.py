"""Two simulated processes share physical memory by a shareable handle (hicann/runtime
docs/zh/api_ref/11-04_virtual_memory_management.md, aclrtMemExportToShareableHandle and
the calls around it); every documented misuse returns its code, a failed call changes nothing,
and the memory goes back exactly when the last process lets go."""

from hypothesis import given
from hypothesis import strategies as st

from ascend_memsim import MiB, Runtime, acl
from ascend_memsim.memory.constants import ErrorCode

SEG = 2 * MiB
PARAM = ErrorCode.INVALID_PARAM
RT_PARAM = ErrorCode.RT_PARAM_INVALID
NO_PID_CHECK = acl.ACL_RT_VMM_EXPORT_FLAG_DISABLE_PID_VALIDATION


def _prop(device=0):
    return {"handleType": 0, "allocationType": 0, "memAttr": acl.ACL_HBM_MEM_HUGE,
            "location": {"id": device, "type": acl.ACL_MEM_LOCATION_TYPE_DEVICE}, "reserve": 0}


def _free():
    return acl.rt.get_mem_info(acl.ACL_HBM_MEM)[0]


def _map(handle, size=SEG):
    base, ret = acl.rt.reserve_mem_address(size, 0, 0, 0)
    assert ret == 0
    assert acl.rt.map_mem(base, size, 0, handle, 0) == 0
    return base


def _unmap(base):
    assert acl.rt.unmap_mem(base) == 0
    assert acl.rt.release_mem_address(base) == 0


def test_two_processes_share_a_handle_and_each_others_bytes(procs):
    a, b = procs
    before = _free()
    handle, _ = acl.rt.malloc_physical(SEG, _prop(), 0)
    shared, ret = acl.rt.mem_export_to_shareable_handle(handle, 0, 0)
    assert ret == 0 and shared != 0
    with b.as_current():
        pid, _ = acl.rt.device_get_bare_tgid()
    assert acl.rt.mem_set_pid_to_shareable_handle(shared, [pid]) == 0
    base = _map(handle)
    data = b"written by A"
    acl.rt.memcpy(base, len(data), acl.util.bytes_to_ptr(data), len(data), 1)
    with b.as_current():
        mine, ret = acl.rt.mem_import_from_shareable_handle(shared, 0)
        assert ret == 0 and mine != 0
        other = _map(mine)
        host, _ = acl.rt.malloc_host(64)
        acl.rt.memcpy(host, len(data), other, len(data), 2)
        assert acl.util.ptr_to_bytes(host, len(data)) == data
        acl.rt.memcpy(other + 64, 3, acl.util.bytes_to_ptr(b"B!!"), 3, 1)
        acl.rt.free_host(host)
    host, _ = acl.rt.malloc_host(64)
    acl.rt.memcpy(host, 3, base + 64, 3, 2)
    assert acl.util.ptr_to_bytes(host, 3) == b"B!!"
    acl.rt.free_host(host)
    # the exporter lets go first: the memory stays for B (11-04: freed when all have freed)
    _unmap(base)
    assert acl.rt.free_physical(handle) == 0
    assert _free() == before - SEG
    with b.as_current():
        _unmap(other)
        assert acl.rt.free_physical(mine) == 0
    assert _free() == before
    assert a.sanitizer.reports == [] and b.sanitizer.reports == []


def test_one_shareable_handle_per_handle(procs):
    # 11-04: "handle与shareableHandle是一一对应 ... 重复调用本接口导出时则会返回报错"
    _a, b = procs
    handle, _ = acl.rt.malloc_physical(SEG, _prop(), 0)
    shared, _ = acl.rt.mem_export_to_shareable_handle(handle, 0, NO_PID_CHECK)
    assert acl.rt.mem_export_to_shareable_handle(handle, 0, NO_PID_CHECK) == (0, RT_PARAM)
    assert acl.rt.mem_export_to_shareable_handle_v2(handle, 0, 1) == (0, RT_PARAM)
    with b.as_current():
        mine, _ = acl.rt.mem_import_from_shareable_handle(shared, 0)
        # one handle per shareable handle in a process
        assert acl.rt.mem_import_from_shareable_handle(shared, 0) == (0, RT_PARAM)
        # an imported handle is not exported again
        assert acl.rt.mem_export_to_shareable_handle(mine, 0, 0) == (0, RT_PARAM)
        acl.rt.free_physical(mine)
    acl.rt.free_physical(handle)


def test_import_only_in_another_process(procs):
    # 11-04: "不支持同一个进程中调用 ... 这两个接口, 只支持跨进程调用"
    handle, _ = acl.rt.malloc_physical(SEG, _prop(), 0)
    shared, _ = acl.rt.mem_export_to_shareable_handle(handle, 0, NO_PID_CHECK)
    assert acl.rt.mem_import_from_shareable_handle(shared, 0) == (0, RT_PARAM)
    acl.rt.free_physical(handle)


def test_the_whitelist(procs):
    # 11-04 flags: DEFAULT "启用进程白名单校验" (DECISION: 207006 for a pid not on it)
    _a, b = procs
    handle, _ = acl.rt.malloc_physical(SEG, _prop(), 0)
    shared, _ = acl.rt.mem_export_to_shareable_handle(handle, 0, 0)
    with b.as_current():
        assert acl.rt.mem_import_from_shareable_handle(shared, 0) == (
            0, ErrorCode.RT_NO_PERMISSION)
        # only the exporting process sets the whitelist ("在调用 ... 的进程中, 调用本接口")
        assert acl.rt.mem_set_pid_to_shareable_handle(shared, [b.pid]) == RT_PARAM
    # memory.cpp aclrtMemSetPidToShareableHandleImpl: pid NULL, pidNum 0 -> 100000
    assert acl.rt.mem_set_pid_to_shareable_handle(shared, []) == PARAM
    assert acl.rt.mem_set_pid_to_shareable_handle(shared, "4243") == PARAM
    assert acl.rt.mem_set_pid_to_shareable_handle(shared + 1, [b.pid]) == RT_PARAM
    with b.as_current():
        assert acl.rt.mem_import_from_shareable_handle(shared, 0)[1] == ErrorCode.RT_NO_PERMISSION
    assert acl.rt.mem_set_pid_to_shareable_handle(shared, [b.pid]) == 0
    with b.as_current():
        mine, ret = acl.rt.mem_import_from_shareable_handle(shared, 0)
        assert ret == 0
        acl.rt.free_physical(mine)
    acl.rt.free_physical(handle)


def test_export_argument_rules(procs):
    a, _b = procs
    handle, _ = acl.rt.malloc_physical(SEG, _prop(), 0)
    # memory.cpp aclrtMemExportToShareableHandleImpl: NULL handle, handleType != NONE -> 100000
    assert acl.rt.mem_export_to_shareable_handle(0, 0, 0) == (0, PARAM)
    assert acl.rt.mem_export_to_shareable_handle(handle, 2, 0) == (0, PARAM)
    # api_error.cc ExportToShareableHandle: flags above DISABLE_PID_VALIDATION -> 107000
    assert acl.rt.mem_export_to_shareable_handle(handle, 0, 2) == (0, RT_PARAM)
    # a handle never made -> 107017
    assert acl.rt.mem_export_to_shareable_handle(handle + 0x100, 0, 0) == (
        0, ErrorCode.RT_INVALID_HANDLE)
    # api_error.cc ExportToShareableHandleV2: shareType not DEFAULT or FABRIC -> 107000
    assert acl.rt.mem_export_to_shareable_handle_v2(handle, 0, 3) == (0, RT_PARAM)
    # FABRIC (between AI servers): Atlas A3 only
    assert acl.rt.mem_export_to_shareable_handle_v2(handle, 0, 2) == (
        0, ErrorCode.RT_FEATURE_NOT_SUPPORT)
    assert a.machine.shareable == {} and a.vmm.space.handles[handle].shared is None
    acl.rt.free_physical(handle)
    # a freed handle -> 107017
    assert acl.rt.mem_export_to_shareable_handle(handle, 0, 0) == (0, ErrorCode.RT_INVALID_HANDLE)


def test_v2_calls_and_their_flags(procs):
    _a, b = procs
    handle, _ = acl.rt.malloc_physical(SEG, _prop(), 0)
    shared, ret = acl.rt.mem_export_to_shareable_handle_v2(handle, 0, 1)
    assert ret == 0
    assert acl.rt.mem_set_pid_to_shareable_handle_v2(shared, 5, [b.pid]) == RT_PARAM
    assert acl.rt.mem_set_pid_to_shareable_handle_v2(shared, 1, []) == PARAM
    assert acl.rt.mem_set_pid_to_shareable_handle_v2(shared, 1, [b.pid]) == 0
    with b.as_current():
        # memory.cpp aclrtMemImportFromShareableHandleV2Impl: flags reserved (0) -> 100000
        assert acl.rt.mem_import_from_shareable_handle_v2(shared, 1, 1) == (0, PARAM)
        assert acl.rt.mem_import_from_shareable_handle_v2(shared, 7, 0) == (0, RT_PARAM)
        mine, ret = acl.rt.mem_import_from_shareable_handle_v2(shared, 1, 0)
        assert ret == 0
        props, _ = acl.rt.mem_get_allocation_properties_from_handle(mine)
        assert props["location"]["id"] == 0
        acl.rt.free_physical(mine)
    acl.rt.free_physical(handle)


def test_fabric_handles_on_a3():
    with Runtime("A3", hbm_bytes=64 * MiB) as a:
        b = a.spawn_process()
        acl.rt.set_device(0)
        handle, _ = acl.rt.malloc_physical(SEG, _prop(), 0)
        fabric, ret = acl.rt.mem_export_to_shareable_handle_v2(handle, NO_PID_CHECK, 2)
        assert ret == 0 and isinstance(fabric, bytes) and len(fabric) == 128
        with b.as_current():
            acl.rt.set_device(0)
            assert acl.rt.mem_import_from_shareable_handle_v2(fabric[:64], 2, 0) == (0, PARAM)
            mine, ret = acl.rt.mem_import_from_shareable_handle_v2(fabric, 2, 0)
            assert ret == 0
            acl.rt.free_physical(mine)
        acl.rt.free_physical(handle)
        b.close()


def test_import_onto_another_device_needs_peer_access(procs):
    # 11-04: "支持 ... 生成另一个Device上的handle"; "若跨Device, 则还需配合
    # aclrtDeviceEnablePeerAccess接口使用"
    _a, b = procs
    handle, _ = acl.rt.malloc_physical(SEG, _prop(), 0)
    shared, _ = acl.rt.mem_export_to_shareable_handle(handle, 0, NO_PID_CHECK)
    with b.as_current():
        assert acl.rt.mem_import_from_shareable_handle(shared, 2) == (
            0, ErrorCode.RT_INVALID_DEVICEID)
        assert acl.rt.mem_import_from_shareable_handle(shared, 1) == (0, RT_PARAM)
        acl.rt.device_enable_peer_access(1, 0)
        mine, ret = acl.rt.mem_import_from_shareable_handle(shared, 1)
        assert ret == 0
        props, _ = acl.rt.mem_get_allocation_properties_from_handle(mine)
        assert props["location"]["id"] == 1
        acl.rt.free_physical(mine)
    acl.rt.free_physical(handle)


def test_after_the_exporter_freed_no_new_import(procs):
    # 11-04: the exporter's aclrtFreePhysical "实现销毁shareableHandle"
    _a, b = procs
    before = _free()
    handle, _ = acl.rt.malloc_physical(SEG, _prop(), 0)
    shared, _ = acl.rt.mem_export_to_shareable_handle(handle, 0, NO_PID_CHECK)
    acl.rt.free_physical(handle)
    assert _free() == before
    with b.as_current():
        assert acl.rt.mem_import_from_shareable_handle(shared, 0) == (0, RT_PARAM)


def test_an_importer_that_ends_lets_go(procs):
    _a, b = procs
    before = _free()
    handle, _ = acl.rt.malloc_physical(SEG, _prop(), 0)
    shared, _ = acl.rt.mem_export_to_shareable_handle(handle, 0, NO_PID_CHECK)
    with b.as_current():
        acl.rt.mem_import_from_shareable_handle(shared, 0)
    acl.rt.free_physical(handle)
    assert _free() == before - SEG
    b.close()    # aclFinalize in B: its handle goes (reported there as a leak)
    assert _free() == before
    assert [r.kind for r in b.sanitizer.reports] == ["leak"]


def test_the_exporters_reset_ends_the_memory_but_not_the_importers_bytes(procs):
    a, b = procs
    handle, _ = acl.rt.malloc_physical(SEG, _prop(), 0)
    shared, _ = acl.rt.mem_export_to_shareable_handle(handle, 0, NO_PID_CHECK)
    with b.as_current():
        mine, _ = acl.rt.mem_import_from_shareable_handle(shared, 0)
    acl.rt.reset_device(0)           # A's device goes, with its heap (a leak in A)
    acl.rt.set_device(0)
    with b.as_current():
        other = _map(mine)
        acl.rt.memset(other, SEG, 7, 16)
        _unmap(other)
        assert acl.rt.free_physical(mine) == 0   # gives nothing back to A's new heap
    a.device(0).check_invariants()
    assert _free() == acl.rt.get_mem_info(acl.ACL_HBM_MEM)[1]


@given(st.lists(st.tuples(st.sampled_from("ab"), st.sampled_from(["map", "unmap", "free"])),
                max_size=12), st.integers(1, 3))
def test_memory_goes_back_exactly_when_the_last_holder_lets_go(steps, importers):
    """Reference counting of a shared handle: the exporter and every importer hold it until
    each has freed its handle and unmapped it; the device's figure moves only then."""
    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer="off") as a:
        acl.rt.set_device(0)
        others = [a.spawn_process(sanitizer="off") for _ in range(importers)]
        before = _free()
        handle, _ = acl.rt.malloc_physical(SEG, _prop(), 0)
        shared, _ = acl.rt.mem_export_to_shareable_handle(handle, 0, NO_PID_CHECK)
        holders = {a.pid: [a, handle, None, False]}      # runtime, handle, mapped at, freed
        for rt in others:
            with rt.as_current():
                acl.rt.set_device(0)
                mine, ret = acl.rt.mem_import_from_shareable_handle(shared, 0)
                assert ret == 0
                holders[rt.pid] = [rt, mine, None, False]
        order = [a.pid] + [rt.pid for rt in others]
        for which, action in steps + [(p, s) for p in order for s in ("unmap", "free")]:
            pid = order[0] if which == "a" else order[-1] if which == "b" else which
            rt, value, mapped, freed = holders[pid]
            with rt.as_current():
                if action == "map" and mapped is None and not freed:
                    holders[pid][2] = _map(value)
                elif action == "unmap" and mapped is not None:
                    _unmap(mapped)
                    holders[pid][2] = None
                elif action == "free" and not freed:
                    assert acl.rt.free_physical(value) == 0
                    holders[pid][3] = True
            alive = any(m is not None or not f for _, _, m, f in holders.values())
            assert _free() == (before - SEG if alive else before)
        a.device(0).check_invariants()
        for rt in others:
            rt.close()


def test_statistics_count_shared_memory_once_in_the_exporter(procs):
    from ascend_memsim.observe.stats import MemoryStats

    a, b = procs
    stats_a, stats_b = MemoryStats.attach(a), MemoryStats.attach(b)
    handle, _ = acl.rt.malloc_physical(SEG, _prop(), 0)
    shared, _ = acl.rt.mem_export_to_shareable_handle(handle, 0, NO_PID_CHECK)
    with b.as_current():
        mine, _ = acl.rt.mem_import_from_shareable_handle(shared, 0)
    acl.rt.free_physical(handle)
    assert stats_a.snapshot(0)["footprint_bytes.physical.current"] == SEG   # B still holds it
    snap_b = stats_b.snapshot(0)
    assert snap_b["imported_bytes.current"] == SEG and snap_b["num_shareable_imports"] == 1
    assert snap_b["footprint_bytes.all.current"] == 0
    with b.as_current():
        acl.rt.free_physical(mine)
    assert stats_a.snapshot(0)["footprint_bytes.physical.current"] == 0
    assert stats_a.snapshot(0)["num_shareable_exports"] == 1
    assert stats_b.snapshot(0)["imported_bytes.current"] == 0
