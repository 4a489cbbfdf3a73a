"""The processes of one simulated machine share each device's memory: aclrtGetMemInfo in one
reports free memory lowered by another's allocations (the driver's device-wide figure,
hicann/runtime src/runtime/driver/npu_driver_mem.cc NpuDriver::MemGetInfoEx), a malloc fails
with the out-of-memory code when another process holds the memory, and succeeds once that
process frees, resets its device or finalizes. Shared memory (IPC, shareable handles) is
counted once, where it was allocated."""

import threading

import pytest

from ascend_memsim import MiB, Runtime, acl
from ascend_memsim.memory.allocator import Allocator
from ascend_memsim.memory.constants import ErrorCode
from ascend_memsim.memory.errors import InvalidArgument, OutOfDeviceMemory
from ascend_memsim.runtime.ipc import ipc_memory
from ascend_memsim.runtime.shareable import shareable

CAPACITY = 64 * MiB
NORMAL_ONLY = acl.ACL_MEM_MALLOC_NORMAL_ONLY
OOM = ErrorCode.RT_MEMORY_ALLOCATION


def _held(rt):
    """Footprints of ``rt``'s live blocks and physical handles on device 0."""
    device = rt.device(0)
    return sum(b.footprint for b in device.blocks()) + sum(device.physical.values())


def test_get_mem_info_in_one_process_reports_what_another_holds(procs):
    a, b = procs
    ptr, ret = acl.rt.malloc(40 * MiB, NORMAL_ONLY)
    assert ret == 0
    footprint = a.block(ptr).footprint
    with b.as_current():
        assert acl.rt.get_mem_info(acl.ACL_HBM_MEM) == (CAPACITY - footprint, CAPACITY, 0)
        # the normal-page figure is the same device-wide free memory
        assert acl.rt.get_mem_info(acl.ACL_HBM_MEM_NORMAL)[0] == CAPACITY - footprint
        # whole free 2 MiB pages, at most the device's free bytes
        huge, huge_total, _ = acl.rt.get_mem_info(acl.ACL_HBM_MEM_HUGE)
        assert huge == (CAPACITY - footprint) // (2 * MiB) * 2 * MiB
        assert huge_total == CAPACITY
        mine, _ = acl.rt.malloc(4 * MiB, NORMAL_ONLY)
    # and the other way round: A sees B's block too
    assert acl.rt.get_mem_info(acl.ACL_HBM_MEM)[0] == CAPACITY - footprint - b.block(mine).footprint
    assert acl.rt.free(ptr) == 0
    with b.as_current():
        assert acl.rt.get_mem_info(acl.ACL_HBM_MEM)[0] == CAPACITY - b.block(mine).footprint
        assert acl.rt.free(mine) == 0
        assert acl.rt.get_mem_info(acl.ACL_HBM_MEM)[0] == CAPACITY


def test_usage_info_stays_per_process(procs):
    """DECISION: aclrtGetMemUsageInfo lists the calling process's components."""
    _, b = procs
    acl.rt.malloc(8 * MiB, NORMAL_ONLY)
    with b.as_current():
        acl.rt.malloc(MiB, NORMAL_ONLY)
        rows, ret = acl.rt.get_mem_usage_info(0, 8)
    assert ret == 0
    assert [(r.name, r.cur_mem_size) for r in rows] == [("APP", _held(b))]


def test_a_malloc_fails_while_another_process_holds_the_memory(procs):
    a, b = procs
    ptr, ret = acl.rt.malloc(50 * MiB, NORMAL_ONLY)
    assert ret == 0
    with b.as_current():
        _, ret = acl.rt.malloc(20 * MiB, NORMAL_ONLY)
        assert ret == OOM
        message = acl.get_recent_err_msg()
        # what a single-process out-of-memory says, and who holds the memory
        assert message.startswith("out of HBM memory on device 0: aclrtMalloc(size=20971520, "
                                  "policy=NORMAL_ONLY)")
        assert f"other processes hold {_held(a)} bytes of this device: pid {a.pid}" in message
        assert f"only {CAPACITY - _held(a)} bytes of the device are free" in message
        assert _held(b) == 0  # the failed call changed nothing
    assert acl.rt.free(ptr) == 0
    with b.as_current():
        ptr, ret = acl.rt.malloc(20 * MiB, NORMAL_ONLY)
        assert ret == 0 and acl.rt.free(ptr) == 0


def test_the_pythonic_face_raises_the_same_error(procs):
    a, b = procs
    a.malloc(60 * MiB, NORMAL_ONLY)
    with pytest.raises(OutOfDeviceMemory) as caught:
        b.malloc(10 * MiB, NORMAL_ONLY)
    assert caught.value.code == OOM


def test_finalize_and_reset_give_the_memory_back():
    with Runtime("A2", hbm_bytes=CAPACITY, sanitizer="off") as a:
        b = a.spawn_process(sanitizer="off")
        b.set_device(0)
        a.set_device(0)
        a.malloc(50 * MiB, NORMAL_ONLY)
        with pytest.raises(OutOfDeviceMemory):
            b.malloc(20 * MiB, NORMAL_ONLY)
        a.reset_device(0)  # the last reference: A's blocks go
        b.free(b.malloc(20 * MiB, NORMAL_ONLY))
        a.set_device(0)
        a.malloc(50 * MiB, NORMAL_ONLY)
        a.close()  # aclFinalize
        assert b.get_mem_info(acl.ACL_HBM_MEM) == (CAPACITY, CAPACITY)
        b.free(b.malloc(60 * MiB, NORMAL_ONLY))
        b.close()


def test_a_malloc_racing_finalize_holds_nothing_of_the_machine():
    """A thread that found its device before another thread's aclFinalize and allocates
    after it leaves no block the other processes cannot get (the process is gone); the
    runtime, used again, counts its memory again."""
    with Runtime("A2", hbm_bytes=CAPACITY, sanitizer="off") as a:
        b = a.spawn_process(sanitizer="off")
        a.set_device(0)
        b.set_device(0)
        view = a.device(0)  # what a.malloc's thread holds between current() and allocate
        a.close()
        view.malloc(20 * MiB, NORMAL_ONLY)  # the racing thread's allocation, after close
        assert b.get_mem_info(acl.ACL_HBM_MEM) == (CAPACITY, CAPACITY)
        b.free(b.malloc(60 * MiB, NORMAL_ONLY))
        a.set_device(0)  # the same runtime again: its views draw from the machine again
        a.malloc(8 * MiB, NORMAL_ONLY)
        assert b.get_mem_info(acl.ACL_HBM_MEM)[0] == CAPACITY - _held(a)
        a.close()
        b.close()


def test_processes_that_finalized_leave_the_device():
    with Runtime("A2", hbm_bytes=CAPACITY, sanitizer="off") as a:
        a.set_device(0)
        for _ in range(5):
            other = a.spawn_process(sanitizer="off")
            other.set_device(0)
            other.close()
        # each allocation sums the views: the finalized processes' are no longer among them
        assert a.machine.budgets[0].views == [a.device(0)]


def test_huge_first_falls_back_to_normal_pages_when_only_those_fit():
    with Runtime("A2", hbm_bytes=CAPACITY, sanitizer="off") as a:
        b = a.spawn_process(sanitizer="off")
        a.set_device(0)
        b.set_device(0)
        a.malloc(CAPACITY - 7 * MiB - MiB // 4 - 64, NORMAL_ONLY)  # all but 7.25 MiB
        # 5 MiB + 32 bytes: its 6 MiB of huge pages fit
        assert b.block(b.malloc(5 * MiB)).page.value == "huge"
        # 1.125 MiB + 32 on huge pages takes 2 MiB, but 1.25 MiB are left: normal pages
        block = b.block(b.malloc(MiB + MiB // 8))
        assert block.page.value == "normal" and block.fallback
        with pytest.raises(OutOfDeviceMemory):
            b.malloc(2 * MiB, acl.ACL_MEM_MALLOC_HUGE_ONLY)
        b.close()


def test_physical_memory_draws_from_the_same_device(procs):
    a, b = procs
    prop = {"handleType": 0, "allocationType": 0, "memAttr": acl.ACL_HBM_MEM_HUGE,
            "location": {"id": 0, "type": acl.ACL_MEM_LOCATION_TYPE_DEVICE}, "reserve": 0}
    handle, ret = acl.rt.malloc_physical(60 * MiB, prop, 0)
    assert ret == 0
    with b.as_current():
        _, ret = acl.rt.malloc_physical(8 * MiB, prop, 0)
        assert ret == OOM
        assert f"other processes hold pid {a.pid}: {60 * MiB} bytes" in acl.get_recent_err_msg()
        _, ret = acl.rt.malloc(8 * MiB, NORMAL_ONLY)
        assert ret == OOM
    assert acl.rt.free_physical(handle) == 0
    with b.as_current():
        handle, ret = acl.rt.malloc_physical(8 * MiB, prop, 0)
        assert ret == 0 and acl.rt.free_physical(handle) == 0


def test_memory_shared_by_ipc_key_is_counted_once(procs):
    a, b = procs
    ptr = a.malloc(8 * MiB, NORMAL_ONLY)
    key = ipc_memory(a).get_export_key(ptr, 8 * MiB, 65, 1)
    free = a.get_mem_info(acl.ACL_HBM_MEM)[0]
    ipc_memory(b).import_by_key(key, 0)
    assert b.get_mem_info(acl.ACL_HBM_MEM)[0] == a.get_mem_info(acl.ACL_HBM_MEM)[0] == free
    ipc_memory(b).close_key(key)
    ipc_memory(a).close_key(key)
    a.free(ptr)
    assert b.get_mem_info(acl.ACL_HBM_MEM)[0] == CAPACITY


def test_memory_shared_by_shareable_handle_is_counted_once(procs):
    a, b = procs
    prop = {"memAttr": acl.ACL_HBM_MEM_HUGE, "location": {"id": 0, "type": 1}}
    handle = a.vmm.malloc_physical(4 * MiB, prop)
    value = shareable(a).export(handle, 0, 1)
    free = a.get_mem_info(acl.ACL_HBM_MEM)[0]
    assert free == CAPACITY - 4 * MiB
    imported = shareable(b).import_(value, 0)
    assert b.get_mem_info(acl.ACL_HBM_MEM)[0] == free
    # the memory stays while B holds it, and is counted in A's view, where it was allocated
    a.vmm.free_physical(handle)
    assert b.get_mem_info(acl.ACL_HBM_MEM)[0] == free
    b.vmm.free_physical(imported)
    shareable_record_gone = not a.machine.shareable
    assert shareable_record_gone
    assert b.get_mem_info(acl.ACL_HBM_MEM)[0] == CAPACITY


def test_a_process_of_another_product_or_capacity_cannot_share_the_device(procs):
    a, _ = procs
    for product, capacity in (("A2", 2 * CAPACITY), ("A3", CAPACITY)):
        other = Runtime(product, hbm_bytes=capacity, machine=a.machine, sanitizer="off")
        with pytest.raises(InvalidArgument, match="or its capacities differ"):
            other.set_device(0)
        assert acl.rt.get_mem_info(acl.ACL_HBM_MEM)[:2] == (CAPACITY, CAPACITY)
        other.close()


def test_the_machine_is_its_first_process_even_when_another_uses_a_device_first():
    # Before: the first process to set a device fixed its capacities, so a spawned process
    # with other capacities took the device, and after it ended the machine's own process
    # was refused its device (100000).
    with Runtime("A2", hbm_bytes=CAPACITY, sanitizer="off") as a:
        for other in (a.spawn_process(hbm_bytes=CAPACITY // 2),
                      Runtime("A3", hbm_bytes=CAPACITY, machine=a.machine, sanitizer="off")):
            with other.as_current():
                assert acl.rt.set_device(0) == ErrorCode.INVALID_PARAM
            other.close()
        assert acl.rt.set_device(0) == 0
        assert acl.rt.get_mem_info(acl.ACL_HBM_MEM)[:2] == (CAPACITY, CAPACITY)
        with a.spawn_process() as b:
            assert acl.rt.set_device(0) == 0
            assert acl.rt.get_mem_info(acl.ACL_HBM_MEM)[:2] == (CAPACITY, CAPACITY)
        assert b.pid != a.pid


def test_processes_that_ended_leave_the_device_to_those_still_running(procs):
    # Before: every process that ever used the device stayed one of its views, so after many
    # workers came and went each malloc summed them all (19x slower after 500) and the
    # device never went back to its one-process fast path.
    a, b = procs
    budget = a.machine.budgets[0]
    for _ in range(20):
        other = a.spawn_process(sanitizer="off")
        other.set_device(0)
        other.malloc(MiB)
        other.close()
    b.close()
    assert [view is a.device(0) for view in budget.views] == [True]
    assert not a.device(0).crowded
    assert a.get_mem_info(acl.ACL_HBM_MEM)[0] == CAPACITY
    # a process used again after aclFinalize joins the device again and is counted
    b.set_device(0)
    assert b.device(0).crowded and a.device(0).crowded
    b.malloc(4 * MiB, NORMAL_ONLY)
    assert a.get_mem_info(acl.ACL_HBM_MEM)[0] < CAPACITY - 4 * MiB
    with pytest.raises(OutOfDeviceMemory, match="other processes hold"):
        a.malloc(CAPACITY - 4 * MiB, NORMAL_ONLY)


def test_a_view_holding_memory_does_not_leave_the_device(procs):
    a, b = procs
    budget = a.machine.budgets[0]
    ptr = b.malloc(4 * MiB, NORMAL_ONLY)
    assert not budget.leave(b.device(0))
    assert any(view is b.device(0) for view in budget.views)
    assert a.get_mem_info(acl.ACL_HBM_MEM)[0] < CAPACITY - 4 * MiB
    b.free(ptr)
    assert budget.leave(b.device(0))
    assert [view is a.device(0) for view in budget.views] == [True]
    assert not a.device(0).crowded


def test_a_single_process_message_names_no_other_process():
    with Runtime("A2", hbm_bytes=CAPACITY, sanitizer="off") as a:
        a.set_device(0)
        with pytest.raises(OutOfDeviceMemory) as caught:
            a.malloc(2 * CAPACITY, NORMAL_ONLY)
        assert "other processes" not in str(caught.value)
        assert not a.device(0).crowded


def _fill(rt, size, barrier, got):
    """Malloc ``size`` on device 0 of ``rt`` until it fails; the blocks made."""
    rt.set_device(0)
    barrier.wait()
    while True:
        try:
            got.append(rt.malloc(size, NORMAL_ONLY))
        except OutOfDeviceMemory:
            return


def _fill_alone(rt, size, started):
    """Malloc ``size`` on device 0 of ``rt`` until it fails, telling ``started`` first."""
    rt.set_device(0)
    started.set()
    while True:
        try:
            rt.malloc(size, NORMAL_ONLY)
        except OutOfDeviceMemory:
            return


def test_threads_of_two_processes_never_over_commit():
    size = 3 * MiB  # + 32 bytes: 3 MiB + 64 each, so 21 fit in 64 MiB
    with Runtime("A2", hbm_bytes=CAPACITY, sanitizer="off") as a:
        b = a.spawn_process(sanitizer="off")
        for rt in (a, b):
            rt.set_device(0)
        barrier = threading.Barrier(4)
        got = {a.pid: [], b.pid: []}
        threads = [threading.Thread(target=_fill, args=(rt, size, barrier, got[rt.pid]))
                   for rt in (a, b, a, b)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        footprint = a.block(got[a.pid][0]).footprint if got[a.pid] else None
        footprint = footprint or b.block(got[b.pid][0]).footprint
        assert len(got[a.pid]) + len(got[b.pid]) == CAPACITY // footprint
        assert _held(a) + _held(b) <= CAPACITY
        assert a.get_mem_info(acl.ACL_HBM_MEM)[0] == CAPACITY - _held(a) - _held(b)
        for rt in (a, b):
            rt.device(0).check_invariants()
        b.close()


def test_a_process_that_starts_while_another_allocates_never_over_commits():
    """The first process allocates alone (no budget check) while the second makes its view
    of the device and fills it: together they never hold more than the device."""
    size = 16 * 1024
    for _ in range(3):
        with Runtime("A2", hbm_bytes=CAPACITY, sanitizer="off") as a:
            a.set_device(0)
            started = threading.Event()
            runner = threading.Thread(target=_fill_alone, args=(a, size, started))
            runner.start()
            started.wait()
            b = a.spawn_process(sanitizer="off")
            _fill(b, size, threading.Barrier(1), [])
            runner.join()
            assert _held(a) + _held(b) <= CAPACITY
            assert _held(a) + _held(b) > CAPACITY - 2 * size  # each filled what was left
            a.device(0).check_invariants()
            b.close()


class _JoinDuring(Allocator):
    """An allocator that runs ``during()`` inside its first allocation: another process joins
    the device while this one allocates alone (the window the threads above may miss)."""

    __slots__ = ("during",)

    def allocate(self, size, align=64):
        during, self.during = self.during, None
        ptr = super().allocate(size, align)
        if during is not None:
            during()
        return ptr


def _hook(device, during):
    """Swap ``device``'s (still empty) main allocator for a :class:`_JoinDuring`."""
    memory = device.profile.main_memory
    old = device.allocators[memory]
    hooked = _JoinDuring(old.capacity, base=old.base)
    hooked.during = during
    device.allocators[memory] = device._main = hooked


@pytest.mark.parametrize("physical", [False, True])
def test_an_allocation_that_began_alone_gives_way_when_another_process_joined(physical):
    with Runtime("A2", hbm_bytes=CAPACITY, sanitizer="off") as a:
        b = a.spawn_process(sanitizer="off")

        def b_takes_most():
            b.set_device(0)
            b.malloc(40 * MiB, NORMAL_ONLY)

        _hook(a.set_device(0), b_takes_most)
        with pytest.raises(OutOfDeviceMemory, match=f"pid {b.pid}"):
            if physical:
                a.vmm.malloc_physical(40 * MiB, {"memAttr": acl.ACL_HBM_MEM_HUGE,
                                                 "location": {"id": 0, "type": 1}})
            else:
                a.malloc(40 * MiB, NORMAL_ONLY)
        assert _held(a) == 0 and a.device(0).usage() == []
        assert _held(b) <= CAPACITY
        a.device(0).check_invariants()
        a.free(a.malloc(20 * MiB, NORMAL_ONLY))  # what is left still fits
        b.close()
