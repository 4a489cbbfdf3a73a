"""Fault injection reaches aclrtMallocPhysical: the faults, their filters, exhaustive().

A failed aclrtMallocPhysical returns ACL_ERROR_RT_MEMORY_ALLOCATION (or the fault's error) and
changes nothing.
"""

import pytest
from test_vmm import OOM, prop, refused, state

import ascend_memsim.acl as acl
from ascend_memsim import MiB, OutOfDeviceMemory, Runtime
from ascend_memsim.checks.faults import (
    FailNth,
    FailRandomly,
    FailWhen,
    HugePagesExhausted,
    parse_fault,
)
from ascend_memsim.memory.constants import MallocPolicy
from ascend_memsim.testing.exhaustive import exhaustive

HUGE1G = acl.ACL_HBM_MEM_HUGE1G


@pytest.fixture
def a2():
    with Runtime("A2", hbm_bytes=4 * 1024 * MiB, sanitizer="off") as rt:
        rt.set_device(0)
        yield rt


def malloc_physical(size=2 * MiB, attr=acl.ACL_HBM_MEM_HUGE):
    return acl.rt.malloc_physical(size, prop(attr), 0)


def test_fail_nth_fails_the_second_physical_allocation_with_oom_and_changes_nothing(a2):
    with FailNth(2, api="malloc_physical").installed(a2) as fault:
        first, ret = malloc_physical()
        assert ret == 0
        refused(a2, malloc_physical, code=OOM)
        assert "injected fault" in acl.get_recent_err_msg()
        assert "aclrtMallocPhysical(size=2097152, huge pages)" in acl.get_recent_err_msg()
        third, ret = malloc_physical()
        assert ret == 0
    assert fault.calls == 3 and [r.size for r in fault.injected] == [2 * MiB]
    assert acl.rt.free_physical(first) == 0 and acl.rt.free_physical(third) == 0


def test_the_c_name_and_a_spec_name_physical_allocation_too(a2):
    fault = parse_fault({"nth": 1, "api": "aclrtMallocPhysical", "error": 107000})
    assert repr(fault) == "FailNth(1, api=['malloc_physical'], error=InvalidRuntimeParam)"
    with fault.installed(a2):
        refused(a2, malloc_physical, code=acl.ACL_ERROR_RT_PARAM_INVALID)


def test_an_api_filter_for_malloc_leaves_physical_memory_alone_and_back(a2):
    with FailWhen(api="malloc").installed(a2) as fault:
        handle, ret = malloc_physical()
        assert ret == 0 and fault.calls == 0
        assert acl.rt.malloc(100, 0)[1] == OOM
    with FailWhen(api=["malloc_physical"]).installed(a2):
        ptr, ret = acl.rt.malloc(100, 0)
        assert ret == 0
        refused(a2, malloc_physical, code=OOM)
    assert acl.rt.free(ptr) == 0 and acl.rt.free_physical(handle) == 0


def test_a_fault_without_an_api_filter_sees_every_allocation(a2):
    with FailWhen(size=(4 * MiB, None)).installed(a2) as fault:
        assert malloc_physical(2 * MiB)[1] == 0
        refused(a2, malloc_physical, 4 * MiB, code=OOM)
        assert acl.rt.malloc(4 * MiB, 0)[1] == OOM
    assert fault.calls == 2


def test_the_policy_filter_sees_the_policy_asking_for_the_same_pages(a2):
    with FailWhen(policy=int(MallocPolicy.HUGE1G_ONLY)).installed(a2) as fault:
        handle, ret = malloc_physical()
        assert ret == 0
        refused(a2, malloc_physical, 1024 * MiB, HUGE1G, code=OOM)
    assert fault.calls == 1 and fault.injected[0].pages[0].value == "huge1g"
    assert acl.rt.free_physical(handle) == 0


def test_huge_pages_exhausted_fails_physical_memory_it_has_no_fallback(a2):
    with HugePagesExhausted().installed(a2) as fault:
        # ACL_HBM_MEM_NORMAL is allocated as huge pages (11-04), so it is refused as well
        refused(a2, malloc_physical, code=OOM)
        refused(a2, malloc_physical, 2 * MiB, acl.ACL_HBM_MEM_NORMAL, code=OOM)
        assert "refused by fault injection" in acl.get_recent_err_msg()
        handle, ret = malloc_physical(1024 * MiB, HUGE1G)   # 1 GB pages are not refused
        assert ret == 0
    assert len(fault.injected) == 2
    assert acl.rt.free_physical(handle) == 0
    with HugePagesExhausted(pages=["huge1g"]).installed(a2):
        refused(a2, malloc_physical, 1024 * MiB, HUGE1G, code=OOM)
        handle, ret = malloc_physical()
        assert ret == 0 and acl.rt.free_physical(handle) == 0


def test_fail_randomly_is_seeded_over_physical_allocations(a2):
    def outcomes():
        with FailRandomly(0.5, seed=3, api="malloc_physical").installed(a2):
            results = [malloc_physical() for _ in range(12)]
        for handle, ret in results:
            if ret == 0:
                assert acl.rt.free_physical(handle) == 0
        return [ret for _, ret in results]

    first = outcomes()
    assert first == outcomes() and {0, OOM} == set(first)


def test_a_failed_physical_allocation_leaves_memory_and_state_as_they_were(a2):
    before = state(a2), a2.get_mem_info(1)
    with FailNth(1, api="malloc_physical"):
        with pytest.raises(OutOfDeviceMemory):
            a2.vmm.malloc_physical(2 * MiB, prop())
    assert (state(a2), a2.get_mem_info(1)) == before


def map_two_pages(rt):
    """Careful code: each failure undoes what came before it."""
    granule = 2 * MiB
    va = rt.vmm.reserve_mem_address(2 * granule, 0, 0, 0)
    handles = []
    try:
        for i in range(2):
            handles.append(rt.vmm.malloc_physical(granule, prop()))
            rt.vmm.map_mem(va + i * granule, granule, 0, handles[-1], 0)
    except OutOfDeviceMemory:
        pass
    for i in range(len(handles)):
        rt.vmm.unmap_mem(va + i * granule)
        rt.vmm.free_physical(handles[i])
    rt.vmm.release_mem_address(va)


def map_two_pages_carelessly(rt):
    granule = 2 * MiB
    va = rt.vmm.reserve_mem_address(2 * granule, 0, 0, 0)
    first = rt.vmm.malloc_physical(granule, prop())
    rt.vmm.map_mem(va, granule, 0, first, 0)
    second = rt.vmm.malloc_physical(granule, prop())  # if this fails, `first` leaks
    rt.vmm.map_mem(va + granule, granule, 0, second, 0)
    for i, handle in enumerate((first, second)):
        rt.vmm.unmap_mem(va + i * granule)
        rt.vmm.free_physical(handle)
    rt.vmm.release_mem_address(va)


def test_exhaustive_visits_each_physical_allocation():
    report = exhaustive(map_two_pages, hbm_bytes=64 * MiB, sanitizer="off")
    assert [(o.request.api.value, o.occurrence, o.outcome) for o in report.outcomes] == [
        ("aclrtMallocPhysical", 1, "handled"), ("aclrtMallocPhysical", 2, "handled")]


def test_exhaustive_finds_a_physical_handle_leaked_on_the_error_path():
    report = exhaustive(map_two_pages_carelessly, hbm_bytes=64 * MiB, sanitizer="off")
    assert [o.outcome for o in report.outcomes] == ["handled", "leaked"]
    leak = report.failures[0]
    assert [h.size for h in leak.leaked] == [2 * MiB]
    text = str(report)
    assert "leaked: aclrtMallocPhysical(size=2097152, huge pages)" in text
    assert "leaked physical handle" in text and "in map_two_pages_carelessly" in text


def test_exhaustive_refuses_a_callable_that_leaks_a_handle_without_faults():
    def leaky(rt):
        rt.vmm.malloc_physical(2 * MiB, prop())

    with pytest.raises(AssertionError, match=r"1 block\(s\) or handle\(s\) live"):
        exhaustive(leaky, hbm_bytes=64 * MiB, sanitizer="off")
