"""Two simulated processes share device memory by an IPC key (hicann/runtime
docs/zh/api_ref/11-07_IPC_memory_sharing.md); every documented misuse returns its code and a
failed call changes nothing."""


from ascend_memsim import MiB, Runtime, acl
from ascend_memsim.memory.constants import ErrorCode

DEFAULT, NO_PID_CHECK = 0, 1
PARAM = ErrorCode.INVALID_PARAM            # 100000, the ACL layer (memory.cpp)
RT_PARAM = ErrorCode.RT_PARAM_INVALID      # 107000, api_error.cc and the driver
NO_PERMISSION = ErrorCode.RT_NO_PERMISSION  # 207006


def _write(ptr, data):
    assert acl.rt.memcpy(ptr, len(data), acl.util.bytes_to_ptr(data), len(data), 1) == 0


def _read(ptr, count):
    host, _ = acl.rt.malloc_host(count)
    assert acl.rt.memcpy(host, count, ptr, count, 2) == 0
    data = acl.util.ptr_to_bytes(host, count)
    acl.rt.free_host(host)
    return data


def _export(size=4096, flags=DEFAULT):
    ptr, ret = acl.rt.malloc(size, acl.ACL_MEM_MALLOC_HUGE_FIRST)
    assert ret == 0
    key, ret = acl.rt.ipc_mem_get_export_key(ptr, size, 65, flags)
    assert ret == 0 and isinstance(key, str) and 0 < len(key) < 65
    return ptr, key


def test_two_processes_write_and_read_each_others_bytes(procs):
    a, b = procs
    ptr, key = _export()
    with b.as_current():
        pid, ret = acl.rt.device_get_bare_tgid()
        assert (pid, ret) == (b.pid, 0) and pid != a.pid
    assert acl.rt.ipc_mem_set_import_pid(key, [pid]) == 0
    _write(ptr, b"from A")
    with b.as_current():
        mine, ret = acl.rt.ipc_mem_import_by_key(key, 0)
        assert ret == 0 and mine != 0
        assert _read(mine, 6) == b"from A"
        _write(mine + 100, b"from B")
    assert _read(ptr + 100, 6) == b"from B"
    with b.as_current():
        assert acl.rt.ipc_mem_close(key) == 0
    assert acl.rt.ipc_mem_close(key) == 0
    assert acl.rt.free(ptr) == 0
    assert a.sanitizer.reports == [] and b.sanitizer.reports == []


def test_bare_tgid_is_each_process_pid_and_needs_no_device(procs):
    a, b = procs
    assert acl.rt.device_get_bare_tgid() == (a.pid, 0)
    c = a.spawn_process()
    with c.as_current():
        assert acl.rt.device_get_bare_tgid() == (c.pid, 0)   # no set_device in c
    assert len({a.pid, b.pid, c.pid}) == 3
    assert a.machine.process(c.pid) is c
    c.close()


def test_pid_validation_off_lets_any_process_import(procs):
    # 11-07 flags: ACL_RT_IPC_MEM_EXPORT_FLAG_DISABLE_PID_VALIDATION "则无需调用 ... SetImportPid"
    _a, b = procs
    _ptr, key = _export(flags=NO_PID_CHECK)
    with b.as_current():
        _mine, ret = acl.rt.ipc_mem_import_by_key(key, 0)
        assert ret == 0
        assert acl.rt.ipc_mem_close(key) == 0


def test_a_process_not_on_the_whitelist_is_refused(procs):
    # 11-07 flags: DEFAULT "启用进程白名单校验"; the driver's refusal: DECISION 207006
    _a, b = procs
    _ptr, key = _export()
    with b.as_current():
        assert acl.rt.ipc_mem_import_by_key(key, 0) == (0, NO_PERMISSION)
        assert acl.rt.ipc_mem_close(key) == RT_PARAM   # nothing was opened
    assert acl.rt.ipc_mem_set_import_pid(key, [b.pid + 100]) == 0
    with b.as_current():
        assert acl.rt.ipc_mem_import_by_key(key, 0) == (0, NO_PERMISSION)


def test_only_the_exporter_sets_the_whitelist(procs):
    _a, b = procs
    _ptr, key = _export()
    with b.as_current():
        assert acl.rt.ipc_mem_set_import_pid(key, [b.pid]) == RT_PARAM
        assert acl.rt.ipc_mem_import_by_key(key, 0) == (0, NO_PERMISSION)


def test_set_import_pid_argument_rules(procs):
    _a, b = procs
    _ptr, key = _export()
    # memory.cpp aclrtIpcMemSetImportPidImpl: pid NULL (an empty list) -> 100000
    assert acl.rt.ipc_mem_set_import_pid(key, []) == PARAM
    assert acl.rt.ipc_mem_set_import_pid(key, (b.pid,)) == PARAM     # pyacl: a list only
    assert acl.rt.ipc_mem_set_import_pid(key, [2 ** 31]) == PARAM    # int32_t
    assert acl.rt.ipc_mem_set_import_pid(123, [b.pid]) == PARAM      # pyacl "s": a str
    assert acl.rt.ipc_mem_set_import_pid("no-such-key", [b.pid]) == RT_PARAM
    with b.as_current():   # the failed calls granted nothing
        assert acl.rt.ipc_mem_import_by_key(key, 0) == (0, NO_PERMISSION)


def test_export_argument_rules(procs):
    a, _b = procs
    ptr, _ = acl.rt.malloc(4096, 0)
    free_before = acl.rt.get_mem_info(acl.ACL_HBM_MEM)[0]
    # memory.cpp aclrtIpcMemGetExportKeyImpl: devPtr NULL -> 100000
    assert acl.rt.ipc_mem_get_export_key(0, 4096, 65, 0) == ("", PARAM)
    # api_error.cc IpcSetMemoryName: byteCount 0, len 0, flags > 1 -> 107000
    assert acl.rt.ipc_mem_get_export_key(ptr, 0, 65, 0) == ("", RT_PARAM)
    assert acl.rt.ipc_mem_get_export_key(ptr, 4096, 0, 0) == ("", RT_PARAM)
    assert acl.rt.ipc_mem_get_export_key(ptr, 4096, 65, 2) == ("", RT_PARAM)
    # pyacl WrapAclRtIpcMemGetExportKey: "key len should be less than 1024"
    assert acl.rt.ipc_mem_get_export_key(ptr, 4096, 1024, 0) == ("", PARAM)
    # DECISIONs: the key does not fit; not a block's start; more than the block
    assert acl.rt.ipc_mem_get_export_key(ptr, 4096, 64, 0) == ("", RT_PARAM)
    assert acl.rt.ipc_mem_get_export_key(ptr + 64, 64, 65, 0) == ("", RT_PARAM)
    assert acl.rt.ipc_mem_get_export_key(ptr, 4097, 65, 0) == ("", RT_PARAM)
    assert acl.rt.ipc_mem_get_export_key(ptr, 4096, 65, 0.5)[1] == PARAM
    assert a.machine.ipc_keys == {}
    assert acl.rt.get_mem_info(acl.ACL_HBM_MEM)[0] == free_before
    acl.rt.free(ptr)


def test_calls_need_a_current_device(procs):
    a, _b = procs
    _ptr, key = _export(flags=NO_PID_CHECK)
    c = a.spawn_process()
    with c.as_current():
        assert acl.rt.ipc_mem_import_by_key(key, 0) == (0, ErrorCode.RT_CONTEXT_NULL)
        assert acl.rt.ipc_mem_close(key) == ErrorCode.RT_CONTEXT_NULL
    c.close()


def test_import_rules(procs):
    a, b = procs
    _ptr, key = _export()
    acl.rt.ipc_mem_set_import_pid(key, [b.pid, a.pid])
    # only across processes (11-07: A exports, B imports): DECISION 107000 in A itself
    assert acl.rt.ipc_mem_import_by_key(key, 0) == (0, RT_PARAM)
    with b.as_current():
        # api_error.cc IpcOpenMemory: flags above ENABLE_PEER_ACCESS -> 107000
        assert acl.rt.ipc_mem_import_by_key(key, 2) == (0, RT_PARAM)
        assert acl.rt.ipc_mem_import_by_key("memsim-ipc-0-0", 0) == (0, RT_PARAM)
        assert acl.rt.ipc_mem_import_by_key(None, 0) == (0, PARAM)
        assert b.vmm.space is None or not b.vmm.space.reservations
        # a process may open a key twice (the runtime keeps a list of addresses per key)
        first, _ = acl.rt.ipc_mem_import_by_key(key, 0)
        second, _ = acl.rt.ipc_mem_import_by_key(key, 0)
        assert first != second
        _write(first, b"same")
        assert _read(second, 4) == b"same"
        assert acl.rt.ipc_mem_close(key) == 0 and acl.rt.ipc_mem_close(key) == 0
        assert acl.rt.ipc_mem_close(key) == RT_PARAM
        assert not b.vmm.space.reservations   # both imports gave their range back


def test_exporter_close_destroys_the_key(procs):
    a, b = procs
    ptr, key = _export(flags=NO_PID_CHECK)
    assert acl.rt.ipc_mem_close(key) == 0
    assert acl.rt.ipc_mem_close(key) == RT_PARAM
    with b.as_current():
        assert acl.rt.ipc_mem_import_by_key(key, 0) == (0, RT_PARAM)
    assert a.sanitizer.reports == []
    acl.rt.free(ptr)


def test_exporter_closing_before_an_importer_is_a_finding(procs):
    # 11-07 aclrtIpcMemClose: every importer closes first, "否则可能导致异常"
    a, b = procs
    ptr, key = _export(flags=NO_PID_CHECK)
    with b.as_current():
        mine, _ = acl.rt.ipc_mem_import_by_key(key, 0)
    assert acl.rt.ipc_mem_close(key) == 0
    [report] = a.sanitizer.reports
    assert report.kind == "ipc-close-order" and report.call == "aclrtIpcMemClose"
    assert str(b.pid) in report.where
    with b.as_current():
        _write(mine, b"still mapped")     # the block is live: the bytes still reach it
        assert acl.rt.ipc_mem_close(key) == 0
    assert a.machine.ipc_keys == {}
    acl.rt.free(ptr)


def test_strict_mode_refuses_the_close_and_changes_nothing():
    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer={"mode": "strict", "output": None}) as a:
        b = a.spawn_process(sanitizer={"output": None})
        acl.rt.set_device(0)
        ptr, key = _export(flags=NO_PID_CHECK)
        with b.as_current():
            acl.rt.set_device(0)
            acl.rt.ipc_mem_import_by_key(key, 0)
        assert acl.rt.ipc_mem_close(key) == RT_PARAM   # SanitizerError: 107000
        assert key in a.machine.ipc_keys and not a.machine.ipc_keys[key].closed
        with b.as_current():
            assert acl.rt.ipc_mem_close(key) == 0
        assert acl.rt.ipc_mem_close(key) == 0
        acl.rt.free(ptr)
        b.close()


def test_use_after_the_exporter_freed_is_reported(procs):
    a, b = procs
    ptr, key = _export(flags=NO_PID_CHECK)
    with b.as_current():
        mine, _ = acl.rt.ipc_mem_import_by_key(key, 0)
    assert acl.rt.free(ptr) == 0
    assert [r.kind for r in a.sanitizer.reports] == ["ipc-close-order"]
    assert a.sanitizer.reports[0].call == "aclrtFree"
    with b.as_current():
        assert acl.rt.memset(mine, 16, 0, 16) != 0
        [report] = b.sanitizer.reports
        assert report.kind == "use-after-free" and "exporting process freed it" in report.where
        assert acl.rt.ipc_mem_import_by_key(key, 0) == (0, RT_PARAM)   # the block is gone
        assert acl.rt.ipc_mem_close(key) == 0


def test_set_attr_rules():
    # 11-07 aclrtIpcMemSetAttr: Atlas A3 only; api_error.cc IpcSetMemoryAttr: type and attr
    with Runtime("A3", hbm_bytes=64 * MiB) as a:
        acl.rt.set_device(0)
        ptr, key = _export(flags=NO_PID_CHECK)
        assert acl.rt.ipc_mem_set_attr(key, acl.ACL_RT_IPC_MEM_ATTR_ACCESS_LINK,
                                       acl.ACL_RT_IPC_MEM_ATTR_ACCESS_LINK_HCCS) == 0
        assert a.machine.ipc_keys[key].link == 1
        assert acl.rt.ipc_mem_set_attr(key, 1, 0) == RT_PARAM
        assert acl.rt.ipc_mem_set_attr(key, 0, 4) == RT_PARAM
        assert a.machine.ipc_keys[key].link == 1
        acl.rt.ipc_mem_close(key)
        acl.rt.free(ptr)
    with Runtime("A2", hbm_bytes=64 * MiB) as a:
        acl.rt.set_device(0)
        ptr, key = _export(flags=NO_PID_CHECK)
        assert acl.rt.ipc_mem_set_attr(key, 0, 1) == ErrorCode.RT_FEATURE_NOT_SUPPORT
        acl.rt.ipc_mem_close(key)
        acl.rt.free(ptr)


def test_a_copy_from_another_device_needs_p2p_memory_and_peer_access():
    # 11-07 constraints: B on device 1 uses A's device-0 memory; 04 aclrtDeviceEnablePeerAccess
    with Runtime("A2", hbm_bytes=64 * MiB, device_count=2, sanitizer={"output": None}) as a:
        b = a.spawn_process(sanitizer={"output": None})
        acl.rt.set_device(0)
        ptr, _ = acl.rt.malloc(4096, acl.ACL_MEM_MALLOC_HUGE_FIRST_P2P)
        key, _ = acl.rt.ipc_mem_get_export_key(ptr, 4096, 65, NO_PID_CHECK)
        _write(ptr, b"p2p")
        with b.as_current():
            acl.rt.set_device(1)
            mine, ret = acl.rt.ipc_mem_import_by_key(key, 0)
            local, _ = acl.rt.malloc(4096, acl.ACL_MEM_MALLOC_HUGE_FIRST_P2P)
            assert acl.rt.memcpy(local, 3, mine, 3, acl.ACL_MEMCPY_DEVICE_TO_DEVICE) == RT_PARAM
            acl.rt.ipc_mem_close(key)
            # ENABLE_PEER_ACCESS: the import enables it (api_impl_standard_soc.cc IpcOpenMemory)
            mine, ret = acl.rt.ipc_mem_import_by_key(
                key, acl.ACL_RT_IPC_MEM_IMPORT_FLAG_ENABLE_PEER_ACCESS)
            assert ret == 0 and acl.rt.device_peer_access_status(1, 0) == (1, 0)
            assert acl.rt.memcpy(local, 3, mine, 3, acl.ACL_MEMCPY_DEVICE_TO_DEVICE) == 0
            assert _read(local, 3) == b"p2p"
            acl.rt.ipc_mem_close(key)
            acl.rt.free(local)
        acl.rt.ipc_mem_close(key)
        acl.rt.free(ptr)
        b.close()


def test_a_process_that_ends_closes_its_imports_and_keys(procs):
    a, b = procs
    ptr, key = _export(flags=NO_PID_CHECK)
    with b.as_current():
        acl.rt.ipc_mem_import_by_key(key, 0)
    b.close()
    assert a.machine.ipc_keys[key].imports == {}
    assert not b.vmm.space.reservations    # its imports left its address space
    a_key = key
    acl.rt.ipc_mem_close(a_key)
    assert a.sanitizer.reports == []      # B's end closed its import first
    acl.rt.free(ptr)


def test_statistics_and_traces_count_sharing_per_process(procs):
    from ascend_memsim.observe.stats import MemoryStats
    from ascend_memsim.observe.trace import Recorder

    a, b = procs
    stats_a, stats_b = MemoryStats.attach(a), MemoryStats.attach(b)
    with Recorder(b) as recorder:
        ptr, key = _export(flags=NO_PID_CHECK)
        with b.as_current():
            mine, _ = acl.rt.ipc_mem_import_by_key(key, 0)
            assert stats_b.snapshot(0)["imported_bytes.current"] == 4096
            acl.rt.ipc_mem_close(key)
        acl.rt.ipc_mem_close(key)
        acl.rt.free(ptr)
    snap_a, snap_b = stats_a.snapshot(0), stats_b.snapshot(0)
    assert (snap_a["num_ipc_exports"], snap_a["num_ipc_closes"]) == (1, 1)
    assert "imported_bytes.current" not in snap_a
    # the importer's device pools never count the exporter's memory
    assert snap_b["footprint_bytes.all.current"] == 0
    assert (snap_b["num_ipc_imports"], snap_b["imported_bytes.current"],
            snap_b["imported_bytes.peak"]) == (1, 0, 4096)
    events = [(e["event"], e.get("role")) for e in recorder.trace.events]
    assert events == [("ipc_import", None), ("ipc_close", "importer")]
    assert recorder.trace.events[0]["ptr"] == mine and recorder.trace.events[0]["key"] == key


def test_copy_rules_for_memory_of_another_device():
    # 11-07 约束说明, for B on another device than A's memory: no ACL_MEMCPY_DEFAULT, no host
    # end (sync or async), no synchronous copy within one device (async allowed); on the
    # same device "不存在以下要求"
    with Runtime("A2", hbm_bytes=64 * MiB, device_count=2, sanitizer={"output": None}) as a:
        b = a.spawn_process(sanitizer={"output": None})
        acl.rt.set_device(0)
        ptr, _ = acl.rt.malloc(4096, acl.ACL_MEM_MALLOC_HUGE_FIRST_P2P)
        key, _ = acl.rt.ipc_mem_get_export_key(ptr, 4096, 65, NO_PID_CHECK)
        _write(ptr, b"abcd")
        with b.as_current():
            acl.rt.set_device(0)
            near, _ = acl.rt.malloc(4096, acl.ACL_MEM_MALLOC_HUGE_FIRST_P2P)
            acl.rt.set_device(1)
            mine, _ = acl.rt.ipc_mem_import_by_key(
                key, acl.ACL_RT_IPC_MEM_IMPORT_FLAG_ENABLE_PEER_ACCESS)
            far, _ = acl.rt.malloc(4096, acl.ACL_MEM_MALLOC_HUGE_FIRST_P2P)
            host, _ = acl.rt.malloc_host(64)
            stream, _ = acl.rt.create_stream()
            assert acl.rt.memcpy(far, 4, mine, 4, acl.ACL_MEMCPY_DEFAULT) == RT_PARAM
            assert acl.rt.memcpy(host, 4, mine, 4, acl.ACL_MEMCPY_DEVICE_TO_HOST) == RT_PARAM
            assert acl.rt.memcpy_async(host, 4, mine, 4, 2, stream) == RT_PARAM
            assert acl.rt.memcpy(near, 4, mine, 4, 3) == RT_PARAM   # both on device 0
            assert acl.rt.memcpy_async(near, 4, mine, 4, 3, 0) == 0
            assert acl.rt.memcpy(far, 4, mine, 4, acl.ACL_MEMCPY_DEVICE_TO_DEVICE) == 0
            assert acl.rt.synchronize_device() == 0
            acl.rt.memcpy(host, 4, far, 4, 2)
            assert acl.util.ptr_to_bytes(host, 4) == b"abcd"
            acl.rt.set_device(0)   # now the memory's own device: no such rule
            assert acl.rt.memcpy(host, 4, mine, 4, acl.ACL_MEMCPY_DEFAULT) == 0
            acl.rt.set_device(1)
            acl.rt.destroy_stream(stream)
            acl.rt.ipc_mem_close(key)
        acl.rt.ipc_mem_close(key)
        acl.rt.free(ptr)
        b.close()


def test_an_import_is_closed_by_ipc_mem_close_not_unmapped(procs):
    # DECISION: aclrtIpcMemClose ends an import; aclrtUnmapMem and retain refuse its address
    _a, b = procs
    ptr, key = _export(flags=NO_PID_CHECK)
    with b.as_current():
        mine, _ = acl.rt.ipc_mem_import_by_key(key, 0)
        assert acl.rt.unmap_mem(mine) == RT_PARAM
        assert acl.rt.mem_retain_allocation_handle(mine) == (0, RT_PARAM)
        assert acl.rt.pointer_get_attributes(mine)[0]["location"]["type"] == 1
        b.vmm.space.check_invariants()
        assert acl.rt.ipc_mem_close(key) == 0
        assert acl.rt.pointer_get_attributes(mine)[0]["location"]["type"] == 2
    acl.rt.ipc_mem_close(key)
    acl.rt.free(ptr)


def test_processes_share_memory_from_several_threads_without_a_deadlock():
    """The exporter frees IPC blocks (device lock, then the importer's address space) while
    the importer lets go of shared physical handles (its address space, then the exporter's
    device): each keeps one order of locks, so neither waits for the other for ever."""
    import threading

    from ascend_memsim.runtime.ipc import ipc_memory
    from ascend_memsim.runtime.shareable import shareable

    with Runtime("A2", hbm_bytes=256 * MiB, sanitizer="off") as a:
        b = a.spawn_process(sanitizer="off")
        prop = {"handleType": 0, "allocationType": 0, "memAttr": acl.ACL_HBM_MEM_HUGE,
                "location": {"id": 0, "type": 1}, "reserve": 0}
        rounds = 60
        keys, shared = [], []
        a.set_device(0)
        b.set_device(0)
        for _ in range(rounds):
            ptr = a.malloc(4096)
            key = ipc_memory(a).get_export_key(ptr, 4096, 65, 1)
            ipc_memory(b).import_by_key(key, 0)
            keys.append((ptr, key))
            handle = a.vmm.malloc_physical(2 * MiB, prop, 0)
            value = shareable(a).export(handle, 0, 1)
            shared.append(shareable(b).import_(value, 0))
            a.vmm.free_physical(handle)        # B's import keeps the memory
        errors = []

        def exporter():
            try:
                a.set_device(0)
                for ptr, _ in keys:
                    a.free(ptr)
            except Exception as error:  # pragma: no cover - reported below
                errors.append(error)

        def importer():
            try:
                b.set_device(0)
                for handle in shared:
                    b.vmm.free_physical(handle)
            except Exception as error:  # pragma: no cover - reported below
                errors.append(error)

        threads = [threading.Thread(target=exporter), threading.Thread(target=importer)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert not any(t.is_alive() for t in threads), "deadlock"
        assert errors == []
        assert a.get_mem_info(acl.ACL_HBM_MEM)[0] == a.get_mem_info(acl.ACL_HBM_MEM)[1]
        a.device(0).check_invariants()
        b.close()


def test_the_exporters_reset_ends_its_exports(procs):
    a, b = procs
    _ptr, key = _export(flags=NO_PID_CHECK)
    with b.as_current():
        mine, _ = acl.rt.ipc_mem_import_by_key(key, 0)
    acl.rt.reset_device(0)      # A's block goes with its device (a leak in A)
    acl.rt.set_device(0)
    with b.as_current():
        assert acl.rt.memset(mine, 16, 0, 16) == RT_PARAM
        assert [r.kind for r in b.sanitizer.reports] == ["use-after-free"]
        assert acl.rt.ipc_mem_import_by_key(key, 0) == (0, RT_PARAM)
        assert acl.rt.ipc_mem_close(key) == 0
    assert acl.rt.ipc_mem_close(key) == 0
    assert a.machine.ipc_keys == {}


def test_an_exported_block_is_named_in_reports_and_pictures(procs):
    from ascend_memsim.observe.viz import MapSnapshot, map_svg

    a, _b = procs
    ptr, key = _export(size=1 << 20, flags=NO_PID_CHECK)
    block = a.block(ptr)
    assert block.describe().endswith(f"exported by IPC key {key}")
    picture = map_svg(MapSnapshot.of(a.device(0)))
    assert "IPC export" in picture and key in picture
    acl.rt.ipc_mem_close(key)
    assert "IPC" not in block.describe()
    assert "IPC" not in map_svg(MapSnapshot.of(a.device(0)))
    acl.rt.free(ptr)


def test_an_importers_reset_leaves_its_imports_open(procs):
    a, b = procs
    ptr, key = _export(flags=NO_PID_CHECK)
    _write(ptr, b"kept")
    with b.as_current():
        mine, _ = acl.rt.ipc_mem_import_by_key(key, 0)
        acl.rt.reset_device(0)
        acl.rt.set_device(0)
        assert _read(mine, 4) == b"kept"
        assert acl.rt.ipc_mem_close(key) == 0
    acl.rt.ipc_mem_close(key)
    acl.rt.free(ptr)
    assert a.sanitizer.reports == [] and b.sanitizer.reports == []


def test_use_after_the_importers_own_close_is_reported(procs):
    # Regression: an access after the importer's aclrtIpcMemClose was an "invalid-address"
    # (not near any live allocation); it is a use after free of the import it closed.
    a, b = procs
    ptr, key = _export(flags=NO_PID_CHECK)
    with b.as_current():
        mine, _ = acl.rt.ipc_mem_import_by_key(key, 0)
        assert acl.rt.ipc_mem_close(key) == 0
        assert acl.rt.memset(mine, 16, 0, 16) == RT_PARAM
        [report] = b.sanitizer.reports
        assert report.kind == "use-after-free" and "aclrtIpcMemClose closed" in report.where
        # a new import may take the same addresses: it is live again
        again, _ = acl.rt.ipc_mem_import_by_key(key, 0)
        _write(again, b"fresh")
        assert len(b.sanitizer.reports) == 1
        assert acl.rt.ipc_mem_close(key) == 0
    assert acl.rt.ipc_mem_close(key) == 0
    assert a.sanitizer.reports == []
    acl.rt.free(ptr)
