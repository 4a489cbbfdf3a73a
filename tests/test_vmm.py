"""Virtual memory (11-04): reservations, physical handles, mappings, their rules and misuse.

Each misuse returns the documented (or decided) code and leaves everything as it was.
"""

import ctypes
import types

import numpy as np
import pytest

import ascend_memsim.acl as acl
from ascend_memsim import GiB, MiB, Runtime
from ascend_memsim.memory.vmm import VA_BASE, VA_END

HUGE = acl.ACL_HBM_MEM_HUGE
INVALID_PARAM = acl.ACL_ERROR_INVALID_PARAM
RT_PARAM = acl.ACL_ERROR_RT_PARAM_INVALID
BAD_HANDLE = acl.ACL_ERROR_RT_INVALID_HANDLE
OOM = acl.ACL_ERROR_RT_MEMORY_ALLOCATION
NOT_SUPPORTED = acl.ACL_ERROR_RT_FEATURE_NOT_SUPPORT


def prop(attr=HUGE, device=0, **over):
    p = {"handleType": 0, "allocationType": 0, "memAttr": attr,
         "location": {"id": device, "type": acl.ACL_MEM_LOCATION_TYPE_DEVICE}, "reserve": 0}
    p.update(over)
    return p


def state(rt):
    """Everything a failed call must leave as it was."""
    space = rt.vmm.space
    vmm = ([], []) if space is None else (
        [(r.ptr, r.size, r.flags, [(m.ptr, m.handle.handle, dict(m.access))
                                   for m in r.maps.values()])
         for r in space.reservations.values()],
        sorted((h.handle, h.refs, tuple(sorted(h.maps)), h.phys) for h in space.handles.values()))
    devices = [(d.device_id, [d.mem_info(a) for a in (1, 4, 5)], d.usage(), dict(d.physical))
               for d in rt.devices()]
    return vmm, devices


def check(rt):
    for device in rt.devices():
        device.check_invariants()
    if rt.vmm.space is not None:
        rt.vmm.space.check_invariants()


def refused(rt, call, *args, code):
    """``call(*args)`` returns ``code`` and changes nothing."""
    before = state(rt)
    result = call(*args)
    ret = result[-1] if isinstance(result, tuple) else result
    assert ret == code, (call.__name__, args, result, acl.get_recent_err_msg())
    assert state(rt) == before
    check(rt)


@pytest.fixture
def a2():
    with Runtime("A2", hbm_bytes=256 * MiB, sanitizer="off") as rt:
        rt.set_device(0)
        yield rt


def reserve(size, expect=0, flags=0):
    va, ret = acl.rt.reserve_mem_address(size, 0, expect, flags)
    assert ret == 0, acl.get_recent_err_msg()
    return va


def physical(size, attr=HUGE, device=0):
    handle, ret = acl.rt.malloc_physical(size, prop(attr, device), 0)
    assert ret == 0, acl.get_recent_err_msg()
    return handle


# -- reservations -----------------------------------------------------------------------------

def test_reserve_costs_no_device_memory_and_lies_in_the_window(a2):
    before = acl.rt.get_mem_info(acl.ACL_HBM_MEM)
    va = reserve(100 * MiB)
    assert VA_BASE <= va < VA_END and va % (2 * MiB) == 0
    assert acl.rt.get_mem_info(acl.ACL_HBM_MEM) == before
    # the window's bottom holds device 0's heap here: the range lies above it
    assert va >= VA_BASE + 256 * MiB
    big = reserve(3 * GiB)
    assert big % GiB == 0 and big >= va + 100 * MiB
    assert acl.rt.release_mem_address(va) == 0
    assert acl.rt.release_mem_address(big) == 0
    check(a2)


def test_reserve_flags_one_is_accepted_for_compatibility(a2):
    # memory.cpp: "flags参数取1, 为了早期接口兼容性保留" (torch_npu passes 1)
    va = reserve(2 * MiB, flags=1)
    assert acl.rt.release_mem_address(va) == 0


@pytest.mark.parametrize("size, alignment, expect, flags, code", [
    (0, 0, 0, 0, INVALID_PARAM),             # size 0 (memory.cpp)
    (2 * MiB, 0, 0, 2, INVALID_PARAM),       # flags other than 0 and 1
    (2 * MiB, 4096, 0, 0, RT_PARAM),         # alignment is reserved: 0 only (11-04)
    (2 * MiB, 0, VA_BASE - 2 * MiB, 0, RT_PARAM),  # below the 16T-24T window
    (2 * MiB, 0, VA_END, 0, RT_PARAM),       # past it
    (2 * MiB, 0, VA_BASE, 0, RT_PARAM),      # inside device 0's heap (DECISION)
    (3 * MiB, 0, VA_BASE + GiB + 2 * MiB, 0, RT_PARAM),  # not aligned to 4 MiB (2^n >= size)
    (2 * GiB, 0, VA_BASE + GiB + 512 * MiB, 0, RT_PARAM),  # >= 1 GiB: 1 GiB aligned
])
def test_reserve_misuse(a2, size, alignment, expect, flags, code):
    reserve(2 * MiB)  # something to leave as it was
    refused(a2, acl.rt.reserve_mem_address, size, alignment, expect, flags, code=code)


def test_reserve_at_a_chosen_address_then_not_again(a2):
    at = VA_BASE + 4 * GiB
    assert reserve(4 * MiB, expect=at) == at
    refused(a2, acl.rt.reserve_mem_address, 2 * MiB, 0, at + 2 * MiB, 0, code=RT_PARAM)
    # the next system-placed range does not land on it
    other = reserve(8 * GiB)
    assert not at <= other < at + 4 * MiB


def test_950_takes_no_chosen_address():
    with Runtime("950PR", hbm_bytes=256 * MiB, sanitizer="off") as rt:
        rt.set_device(0)
        refused(rt, acl.rt.reserve_mem_address, 2 * MiB, 0, VA_BASE + 4 * GiB, 0, code=RT_PARAM)
        assert acl.rt.reserve_mem_address(2 * MiB, 0, 0, 0)[1] == 0


def test_no_uc_memory_is_a3_only_with_a_chosen_start():
    with Runtime("A3", hbm_bytes=256 * MiB, sanitizer="off") as rt:
        rt.set_device(0)
        at = VA_BASE + 4 * GiB
        refused(rt, acl.rt.reserve_mem_address_no_uc_memory, GiB, 0, 0, 0, code=RT_PARAM)
        refused(rt, acl.rt.reserve_mem_address_no_uc_memory, GiB + 1, 0, at, 0, code=RT_PARAM)
        assert acl.rt.reserve_mem_address_no_uc_memory(GiB, 0, at, 0) == (at, 0)
    with Runtime("A2", hbm_bytes=256 * MiB, sanitizer="off") as rt:
        rt.set_device(0)
        refused(rt, acl.rt.reserve_mem_address_no_uc_memory, GiB, 0, VA_BASE + 4 * GiB, 0,
                code=NOT_SUPPORTED)


def test_release_misuse(a2):
    va = reserve(8 * MiB)
    refused(a2, acl.rt.release_mem_address, 0, code=INVALID_PARAM)
    refused(a2, acl.rt.release_mem_address, va + 2 * MiB, code=RT_PARAM)   # interior
    h = physical(2 * MiB)
    assert acl.rt.map_mem(va, 2 * MiB, 0, h, 0) == 0
    # 11-04: unmap before releasing
    refused(a2, acl.rt.release_mem_address, va, code=RT_PARAM)
    assert acl.rt.unmap_mem(va) == 0
    assert acl.rt.release_mem_address(va) == 0
    refused(a2, acl.rt.release_mem_address, va, code=RT_PARAM)            # twice


def test_every_call_needs_a_current_device():
    with Runtime("A2", hbm_bytes=256 * MiB, sanitizer="off"):
        assert acl.rt.reserve_mem_address(2 * MiB, 0, 0, 0) == (0, acl.ACL_ERROR_RT_CONTEXT_NULL)
        assert acl.rt.malloc_physical(2 * MiB, prop(), 0)[1] == acl.ACL_ERROR_RT_CONTEXT_NULL


# -- physical memory ----------------------------------------------------------------------------

def test_physical_memory_is_charged_to_the_device(a2):
    free0, total = acl.rt.get_mem_info(acl.ACL_HBM_MEM)[:2]
    h = physical(3 * MiB)    # rounded up to the 2 MiB granularity: 4 MiB
    assert acl.rt.get_mem_info(acl.ACL_HBM_MEM)[:2] == (free0 - 4 * MiB, total)
    assert acl.rt.get_mem_info(acl.ACL_HBM_MEM_HUGE)[0] == free0 - 4 * MiB
    assert acl.rt.get_mem_usage_info(0, 4)[0][0].cur_mem_size == 4 * MiB
    # it competes with aclrtMalloc blocks in the same first-fit
    ptr, ret = acl.rt.malloc(MiB, acl.ACL_MEM_MALLOC_HUGE_ONLY)
    assert ret == 0 and ptr == a2.device(0).allocators[a2.device(0).profile.main_memory].base \
        + 4 * MiB
    assert acl.rt.free_physical(h) == 0
    assert acl.rt.get_mem_info(acl.ACL_HBM_MEM)[0] == free0 - 2 * MiB
    assert acl.rt.free(ptr) == 0
    check(a2)


def test_normal_attributes_are_allocated_as_huge(a2):
    free0 = acl.rt.get_mem_info(acl.ACL_HBM_MEM)[0]
    h = physical(100, acl.ACL_HBM_MEM_NORMAL)
    assert acl.rt.get_mem_info(acl.ACL_HBM_MEM)[0] == free0 - 2 * MiB
    assert acl.rt.mem_get_allocation_properties_from_handle(h) == (
        prop(acl.ACL_HBM_MEM_NORMAL), 0)
    assert acl.rt.mem_get_allocation_granularity(prop(acl.ACL_MEM_NORMAL), 0) == (2 * MiB, 0)


def test_granularity(a2):
    assert acl.rt.mem_get_allocation_granularity(prop(), 0) == (2 * MiB, 0)
    assert acl.rt.mem_get_allocation_granularity(prop(), 1) == (2 * MiB, 0)
    assert acl.rt.mem_get_allocation_granularity(prop(acl.ACL_HBM_MEM_HUGE1G), 0) == (GiB, 0)
    assert acl.rt.mem_get_allocation_granularity(prop(), 0xFFFF)[1] == RT_PARAM
    assert acl.rt.mem_get_allocation_granularity(prop(acl.ACL_DDR_MEM_HUGE), 0)[1] == \
        INVALID_PARAM
    assert acl.rt.mem_get_allocation_granularity("prop", 0)[1] == INVALID_PARAM


def test_granularity_of_a_device_that_does_not_exist(a2):
    # api_error.cc ApiErrorDecorator::GetAllocationGranularity converts and checks the id of a
    # device location: RT_ERROR_DEVICE_ID, ACL_ERROR_RT_INVALID_DEVICEID (107001).
    count = acl.rt.get_device_count()[0]
    for device in (count, 1 << 20):
        assert acl.rt.mem_get_allocation_granularity(prop(device=device), 0) == (
            0, acl.ACL_ERROR_RT_INVALID_DEVICEID)
        assert "device id" in acl.get_recent_err_msg()
    # the attribute is checked before the id (memory.cpp), the id before the option (driver)
    assert acl.rt.mem_get_allocation_granularity(prop(acl.ACL_DDR_MEM_HUGE, device=count),
                                                 0)[1] == INVALID_PARAM
    assert acl.rt.mem_get_allocation_granularity(prop(device=count), 0xFFFF)[1] == \
        acl.ACL_ERROR_RT_INVALID_DEVICEID


@pytest.mark.parametrize("size, p, flags, code", [
    (0, prop(), 0, INVALID_PARAM),                                   # size 0
    (2 * MiB, prop(), 1, INVALID_PARAM),                             # flags reserved
    (2 * MiB, prop(handleType=2), 0, INVALID_PARAM),                 # handle type NONE only
    (2 * MiB, prop(allocationType=1), 0, INVALID_PARAM),             # PINNED only
    (2 * MiB, prop(location={"id": 0, "type": 2}), 0, INVALID_PARAM),  # UNREGISTERED
    (2 * MiB, prop(location={"id": 0, "type": 3}), 0, INVALID_PARAM),  # MANAGED
    (2 * MiB, prop(acl.ACL_DDR_MEM_HUGE), 0, INVALID_PARAM),         # DDR: host only
    (2 * MiB, prop(acl.ACL_HBM_MEM_P2P_HUGE), 0, INVALID_PARAM),     # not in memAttrHandlers
    (2 * MiB, prop(acl.ACL_HBM_MEM), 0, INVALID_PARAM),
    (2 * MiB, prop(device=5), 0, acl.ACL_ERROR_RT_INVALID_DEVICEID),  # no such device
    (2 * MiB, prop(location={"id": 0, "type": 0}), 0, NOT_SUPPORTED),  # host: not simulated
    (2 * MiB, [], 0, INVALID_PARAM),                                  # not a dict
    # pyacl reads a dict (PyDict_Check) and int fields; a mapping proxy raises there, and a
    # numpy integer is ignored (the field stays 0): the simulator refuses both
    (2 * MiB, types.MappingProxyType(prop()), 0, INVALID_PARAM),
    (2 * MiB, prop(memAttr=np.int64(HUGE)), 0, INVALID_PARAM),
    (512 * MiB, prop(), 0, OOM),                                      # more than the device
])
def test_malloc_physical_misuse(a2, size, p, flags, code):
    physical(2 * MiB)
    refused(a2, acl.rt.malloc_physical, size, p, flags, code=code)


def test_huge1g_only_on_a2_a3():
    with Runtime("950PR", hbm_bytes=4 * GiB, sanitizer="off") as rt:
        rt.set_device(0)
        refused(rt, acl.rt.malloc_physical, GiB, prop(acl.ACL_HBM_MEM_HUGE1G), 0,
                code=NOT_SUPPORTED)
    with Runtime("A2", hbm_bytes=4 * GiB, sanitizer="off") as rt:
        rt.set_device(0)
        h, ret = acl.rt.malloc_physical(GiB, prop(acl.ACL_MEM_P2P_HUGE1G), 0)
        assert ret == 0
        assert acl.rt.mem_get_allocation_properties_from_handle(h)[0]["memAttr"] == \
            acl.ACL_MEM_P2P_HUGE1G
        assert acl.rt.get_mem_info(acl.ACL_HBM_MEM_HUGE1G)[0] == 3 * GiB


def test_free_physical_misuse(a2):
    h = physical(2 * MiB)
    refused(a2, acl.rt.free_physical, 0, code=INVALID_PARAM)
    refused(a2, acl.rt.free_physical, h + 1, code=BAD_HANDLE)
    assert acl.rt.free_physical(h) == 0
    refused(a2, acl.rt.free_physical, h, code=BAD_HANDLE)     # twice
    refused(a2, acl.rt.mem_get_allocation_properties_from_handle, h, code=BAD_HANDLE)


# -- mappings -----------------------------------------------------------------------------------

def test_one_handle_at_two_addresses_shows_the_same_bytes(a2):
    va = reserve(8 * MiB)
    h = physical(2 * MiB)
    assert acl.rt.map_mem(va, 2 * MiB, 0, h, 0) == 0
    assert acl.rt.map_mem(va + 4 * MiB, 2 * MiB, 0, h, 0) == 0
    assert acl.rt.memset(va + 100, 50, 0xAB, 50) == 0
    host, _ = acl.rt.malloc_host(50)
    assert acl.rt.memcpy(host, 50, va + 4 * MiB + 100, 50, acl.ACL_MEMCPY_DEVICE_TO_HOST) == 0
    assert ctypes.string_at(host, 50) == b"\xab" * 50
    acl.rt.free_host(host)


def test_bytes_survive_unmap_and_a_new_mapping(a2):
    va = reserve(8 * MiB)
    h = physical(2 * MiB)
    acl.rt.map_mem(va, 2 * MiB, 0, h, 0)
    data = bytes(range(256)) * 4
    src = acl.util.bytes_to_ptr(data)
    assert acl.rt.memcpy(va + 4096, 1024, src, 1024, acl.ACL_MEMCPY_HOST_TO_DEVICE) == 0
    assert acl.rt.unmap_mem(va) == 0
    assert acl.rt.map_mem(va + 6 * MiB, 2 * MiB, 0, h, 0) == 0
    out = np.zeros(1024, np.uint8)
    assert acl.rt.memcpy(acl.util.numpy_to_ptr(out), 1024, va + 6 * MiB + 4096, 1024, 2) == 0
    assert out.tobytes() == data


def test_copies_cross_consecutive_mappings_and_device_blocks(a2):
    va = reserve(8 * MiB)
    h1, h2 = physical(2 * MiB), physical(2 * MiB)
    acl.rt.map_mem(va, 2 * MiB, 0, h1, 0)
    acl.rt.map_mem(va + 2 * MiB, 2 * MiB, 0, h2, 0)
    block, _ = acl.rt.malloc(4096, 0)
    acl.rt.memset(block, 4096, 7, 4096)
    # device block -> two mappings, then the mappings -> device block, async on a stream
    assert acl.rt.memcpy(va + 2 * MiB - 1000, 4096, block, 4096, 3) == 0
    stream, _ = acl.rt.create_stream()
    assert acl.rt.memset_async(block, 4096, 0, 4096, stream) == 0
    assert acl.rt.memcpy_async(block, 4096, va + 2 * MiB - 1000, 4096, 3, stream) == 0
    assert acl.rt.synchronize_stream(stream) == 0
    out = np.zeros(4096, np.uint8)
    assert acl.rt.memcpy(acl.util.numpy_to_ptr(out), 4096, block, 4096, 2) == 0
    assert out.tobytes() == b"\x07" * 4096
    # the bytes are per handle: the second one holds the tail
    space = a2.vmm.space
    assert space.handles[h2].extra["contents"].read(0, 3096) == b"\x07" * 3096
    acl.rt.destroy_stream(stream)


@pytest.mark.parametrize("case", ["offset", "flags", "size", "unaligned size", "past end",
                                  "overlap", "not reserved", "null", "freed handle",
                                  "unaligned address", "other device"])
def test_map_misuse(case):
    with Runtime("A3", hbm_bytes=256 * MiB, sanitizer="off") as rt:
        rt.set_device(0)
        va = reserve(8 * MiB)
        h = physical(4 * MiB)
        odd = physical(3 * MiB)
        acl.rt.map_mem(va + 4 * MiB, 4 * MiB, 0, h, 0)
        other = physical(2 * MiB, device=1)
        args, code = {
            "offset": ((va, 4 * MiB, 2 * MiB, h, 0), RT_PARAM),
            "flags": ((va, 4 * MiB, 0, h, 1), INVALID_PARAM),
            "size": ((va, 2 * MiB, 0, h, 0), RT_PARAM),
            "unaligned size": ((va, 3 * MiB, 0, odd, 0), RT_PARAM),
            "past end": ((va + 6 * MiB, 4 * MiB, 0, h, 0), RT_PARAM),
            "overlap": ((va + 2 * MiB, 4 * MiB, 0, h, 0), RT_PARAM),
            "not reserved": ((VA_BASE + 20 * GiB, 4 * MiB, 0, h, 0), RT_PARAM),
            "null": ((0, 4 * MiB, 0, h, 0), INVALID_PARAM),
            "freed handle": ((va, 4 * MiB, 0, h + 7 * 0x100, 0), BAD_HANDLE),
            "unaligned address": ((va + MiB, 4 * MiB, 0, h, 0), RT_PARAM),
            # 11-04: one reservation never maps two devices' memory
            "other device": ((va, 2 * MiB, 0, other, 0), RT_PARAM),
        }[case]
        refused(rt, acl.rt.map_mem, *args, code=code)


def test_unmap_misuse(a2):
    va = reserve(8 * MiB)
    h = physical(2 * MiB)
    acl.rt.map_mem(va, 2 * MiB, 0, h, 0)
    refused(a2, acl.rt.unmap_mem, 0, code=INVALID_PARAM)
    refused(a2, acl.rt.unmap_mem, va + 2 * MiB, code=RT_PARAM)   # never mapped
    refused(a2, acl.rt.unmap_mem, va + 4096, code=RT_PARAM)      # inside a mapping
    assert acl.rt.unmap_mem(va) == 0
    refused(a2, acl.rt.unmap_mem, va, code=RT_PARAM)             # twice


def test_freeing_a_mapped_handle_frees_memory_at_the_last_unmap(a2):
    free0 = acl.rt.get_mem_info(acl.ACL_HBM_MEM)[0]
    va = reserve(8 * MiB)
    h = physical(2 * MiB)
    acl.rt.map_mem(va, 2 * MiB, 0, h, 0)
    acl.rt.map_mem(va + 2 * MiB, 2 * MiB, 0, h, 0)
    assert acl.rt.free_physical(h) == 0
    assert acl.rt.get_mem_info(acl.ACL_HBM_MEM)[0] == free0 - 2 * MiB   # still mapped
    refused(a2, acl.rt.map_mem, va + 4 * MiB, 2 * MiB, 0, h, 0, code=BAD_HANDLE)
    acl.rt.memset(va, 16, 1, 16)                                         # still usable
    assert acl.rt.unmap_mem(va) == 0
    assert acl.rt.get_mem_info(acl.ACL_HBM_MEM)[0] == free0 - 2 * MiB
    assert acl.rt.unmap_mem(va + 2 * MiB) == 0
    assert acl.rt.get_mem_info(acl.ACL_HBM_MEM)[0] == free0
    check(a2)


def test_retain_needs_one_more_free(a2):
    free0 = acl.rt.get_mem_info(acl.ACL_HBM_MEM)[0]
    va = reserve(4 * MiB)
    h = physical(2 * MiB)
    acl.rt.map_mem(va, 2 * MiB, 0, h, 0)
    assert acl.rt.mem_retain_allocation_handle(va) == (h, 0)
    refused(a2, acl.rt.mem_retain_allocation_handle, va + 64, code=RT_PARAM)
    acl.rt.unmap_mem(va)
    assert acl.rt.free_physical(h) == 0
    assert acl.rt.get_mem_info(acl.ACL_HBM_MEM)[0] == free0 - 2 * MiB
    assert acl.rt.free_physical(h) == 0
    assert acl.rt.get_mem_info(acl.ACL_HBM_MEM)[0] == free0


def test_access_flags(a2):
    va = reserve(4 * MiB)
    h = physical(2 * MiB)
    device = {"id": 0, "type": acl.ACL_MEM_LOCATION_TYPE_DEVICE}
    assert acl.rt.mem_map_no_access(va, 2 * MiB, 0, h, 0) == 0
    assert acl.rt.mem_get_access(va, device) == (acl.ACL_RT_MEM_ACCESS_FLAGS_NONE, 0)
    # not accessible until mem_set_access (11-04, aclrtMemMapNoAccess)
    assert acl.rt.memset(va, 16, 0, 16) == RT_PARAM
    desc = [{"flags": acl.ACL_RT_MEM_ACCESS_FLAGS_READWRITE, "location": device}]
    refused(a2, acl.rt.mem_set_access, va, 4 * MiB, desc, 1, code=RT_PARAM)   # wrong size
    refused(a2, acl.rt.mem_set_access, va, 2 * MiB, desc, 2, code=RT_PARAM)   # wrong count
    refused(a2, acl.rt.mem_set_access, va, 2 * MiB, [{"flags": 2, "location": device}], 1,
            code=RT_PARAM)
    assert acl.rt.mem_set_access(va, 2 * MiB, desc, 1) == 0
    assert acl.rt.mem_get_access(va, device) == (acl.ACL_RT_MEM_ACCESS_FLAGS_READWRITE, 0)
    assert acl.rt.memset(va, 16, 0, 16) == 0
    assert acl.rt.mem_get_access(va, {"id": 0, "type": 3})[1] == RT_PARAM


@pytest.mark.parametrize("flags", [acl.ACL_RT_MEM_ACCESS_FLAGS_READ,
                                   acl.ACL_RT_MEM_ACCESS_FLAGS_NONE])
def test_access_flags_other_than_readwrite_are_not_supported(a2, flags):
    # 25-04 Structs aclrtMemAccessDesc: only READWRITE is supported today; the driver's
    # halMemSetAccess (hicann/driver devmm_access_desc_check) answers NONE and READ with
    # DRV_ERROR_NOT_SUPPORT, RT_ERROR_FEATURE_NOT_SUPPORT (npu_driver_mem.cc), 207000
    va = reserve(4 * MiB)
    h = physical(2 * MiB)
    device = {"id": 0, "type": acl.ACL_MEM_LOCATION_TYPE_DEVICE}
    host = {"id": 0, "type": acl.ACL_MEM_LOCATION_TYPE_HOST}
    acl.rt.mem_map_no_access(va, 2 * MiB, 0, h, 0)
    rw = {"flags": acl.ACL_RT_MEM_ACCESS_FLAGS_READWRITE, "location": host}
    for desc in ([{"flags": flags, "location": device}],
                 [rw, {"flags": flags, "location": device}]):
        refused(a2, acl.rt.mem_set_access, va, 2 * MiB, desc, len(desc), code=NOT_SUPPORTED)
        assert "READWRITE" in acl.get_recent_err_msg()
    assert acl.rt.mem_get_access(va, device) == (acl.ACL_RT_MEM_ACCESS_FLAGS_NONE, 0)
    assert acl.rt.memset(va, 16, 0, 16) == RT_PARAM
    # the driver checks the entries before it looks the address up
    refused(a2, acl.rt.mem_set_access, va, 4 * MiB, [{"flags": flags, "location": device}], 1,
            code=NOT_SUPPORTED)


def test_address_range_and_pointer_attributes(a2):
    va = reserve(8 * MiB)
    h = physical(2 * MiB)
    acl.rt.map_mem(va + 2 * MiB, 2 * MiB, 0, h, 0)
    block, _ = acl.rt.malloc(100, acl.ACL_MEM_MALLOC_NORMAL_ONLY)
    big, _ = acl.rt.malloc(3 * MiB, acl.ACL_MEM_MALLOC_HUGE_ONLY)
    host, _ = acl.rt.malloc_host(64)
    assert acl.rt.mem_get_address_range(va + 2 * MiB + 5) == (va + 2 * MiB, 2 * MiB, 0)
    assert acl.rt.mem_get_address_range(block + 10) == (block, 100, 0)
    assert acl.rt.mem_get_address_range(host + 1) == (host, 64, 0)
    assert acl.rt.mem_get_address_range(va)[2] == RT_PARAM
    assert acl.rt.mem_get_address_range(0)[2] == INVALID_PARAM

    def attrs(ptr):
        out, ret = acl.rt.pointer_get_attributes(ptr)
        assert ret == 0
        return out["location"]["type"], out["location"]["id"], out["page_size"]

    dev, hst, unreg = (acl.ACL_MEM_LOCATION_TYPE_DEVICE, acl.ACL_MEM_LOCATION_TYPE_HOST,
                       acl.ACL_MEM_LOCATION_TYPE_UNREGISTERED)
    assert attrs(va + 2 * MiB + 7) == (dev, 0, 2 * MiB)
    assert attrs(block) == (dev, 0, 4096)
    assert attrs(big + MiB) == (dev, 0, 2 * MiB)
    assert attrs(host) == (hst, 0, 4096)
    assert attrs(va) == (unreg, 0, 0)               # reserved, nothing mapped
    assert attrs(0x1234) == (unreg, 0, 0)
    out, ret = acl.rt.pointer_get_attributes(0)
    assert ret == INVALID_PARAM and out["page_size"] == 0
    acl.rt.free_host(host)


def test_reset_device_takes_its_physical_memory_and_mappings():
    with Runtime("A2", hbm_bytes=256 * MiB, sanitizer="off") as rt:
        rt.set_device(0)
        va = reserve(4 * MiB)
        h = physical(2 * MiB)
        acl.rt.map_mem(va, 2 * MiB, 0, h, 0)
        rt.set_device(0)
        rt.reset_device(0)
        rt.reset_device(0)
        rt.set_device(0)
        assert acl.rt.get_mem_info(acl.ACL_HBM_MEM)[0] == 256 * MiB
        assert acl.rt.unmap_mem(va) == RT_PARAM
        assert acl.rt.free_physical(h) == BAD_HANDLE
        assert acl.rt.release_mem_address(va) == 0
        check(rt)


def test_c_names():
    from ascend_memsim import aclrt
    assert aclrt.aclrtMapMem is acl.rt.map_mem
    assert aclrt.aclrtMemGetAddressRange is acl.rt.mem_get_address_range
    assert aclrt.aclrtPointerGetAttributes is acl.rt.pointer_get_attributes


def test_statistics_and_traces_count_physical_memory(a2):
    from ascend_memsim.observe.stats import MemoryStats
    from ascend_memsim.observe.trace import Recorder

    stats = MemoryStats.attach(a2)
    with Recorder(a2) as rec:
        h = physical(3 * MiB)
        snap = stats.snapshot(0)
        assert snap["footprint_bytes.physical.current"] == 4 * MiB
        assert snap["requested_bytes.all.current"] == 3 * MiB
        assert snap["footprint_bytes.component.APP.current"] == 4 * MiB
        assert acl.rt.free_physical(h) == 0
        physical(2 * MiB)                      # left for the reset
    events = [e for e in rec.trace.events if "physical" in e["event"]]
    assert [(e["event"], e["size"], e["footprint"], e["page"]) for e in events] == [
        ("malloc_physical", 3 * MiB, 4 * MiB, "huge"),
        ("free_physical", 3 * MiB, 4 * MiB, "huge"),
        ("malloc_physical", 2 * MiB, 2 * MiB, "huge")]
    a2.reset_device(0)
    snap = stats.snapshot(0)
    assert snap["footprint_bytes.physical.current"] == 0
    assert snap["footprint_bytes.physical.peak"] == 4 * MiB


def test_replay_places_physical_memory_in_the_same_heap(a2):
    from ascend_memsim.observe.replay import replay
    from ascend_memsim.observe.trace import Recorder

    with Recorder(a2) as rec:
        h = physical(20 * MiB)
        ptr, _ = acl.rt.malloc(100, 0)
        acl.rt.free(ptr)
        acl.rt.free_physical(h)
    result = replay(rec.trace)
    assert result.skipped == {} and result.failures == 0
    assert result.peak_bytes == 20 * MiB + 192            # the handle and the block, together
    small = replay(rec.trace, capacity=16 * MiB)
    assert small.failures == 1 and "aclrtMallocPhysical" in str(small.first_failure)
    # a hostile trace: a footprint that is not whole pages is a problem, not a crash
    event = next(e for e in rec.trace.events if e["event"] == "malloc_physical")
    event["footprint"] = 3
    assert "cannot be replayed" in replay(rec.trace).problems[0]


def test_a_buffer_through_bytes_to_ptr_is_unregistered_to_pointer_attributes(a2):
    # not aclrtMallocHost memory, not aclrtHostRegister'ed: npu_driver_mem.cc PtrGetAttributes
    # (more in test_host_register.py)
    buf = bytes(100)
    ptr = acl.util.bytes_to_ptr(buf)
    attrs, ret = acl.rt.pointer_get_attributes(ptr + 10)
    assert ret == 0 and attrs["location"]["type"] == acl.ACL_MEM_LOCATION_TYPE_UNREGISTERED


def test_a_ddr_only_part_takes_physical_memory_from_ddr():
    with Runtime("310P", ddr_bytes=256 * MiB, sanitizer="off") as rt:
        rt.set_device(0)
        free0 = acl.rt.get_mem_info(acl.ACL_DDR_MEM)[0]
        h = physical(4 * MiB)
        assert acl.rt.get_mem_info(acl.ACL_DDR_MEM)[0] == free0 - 4 * MiB
        va = reserve(4 * MiB)
        assert acl.rt.map_mem(va, 4 * MiB, 0, h, 0) == 0
        assert acl.rt.memset(va, 8, 1, 8) == 0
        check(rt)


def test_threads_map_and_unmap_concurrently():
    import threading

    with Runtime("A2", hbm_bytes=256 * MiB, sanitizer="off") as rt:
        rt.set_device(0)
        errors = []

        def work(seed):
            try:
                acl.rt.set_device(0)
                for i in range(20):
                    va = reserve(4 * MiB)
                    h = physical(2 * MiB)
                    assert acl.rt.map_mem(va + 2 * MiB, 2 * MiB, 0, h, 0) == 0
                    data = bytes([seed, i]) * 512
                    assert acl.rt.memcpy(va + 2 * MiB, 1024, acl.util.bytes_to_ptr(data),
                                         1024, 1) == 0
                    out = np.zeros(1024, np.uint8)
                    assert acl.rt.memcpy(acl.util.numpy_to_ptr(out), 1024, va + 2 * MiB,
                                         1024, 2) == 0
                    assert out.tobytes() == data
                    assert acl.rt.free_physical(h) == 0
                    assert acl.rt.unmap_mem(va + 2 * MiB) == 0
                    assert acl.rt.release_mem_address(va) == 0
            except BaseException as error:
                errors.append(error)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert acl.rt.get_mem_info(acl.ACL_HBM_MEM)[0] == 256 * MiB
        assert not rt.vmm.space.reservations and not rt.vmm.space.handles
        check(rt)


# hicann/runtime python/pyACL/rt/pyrt_methods.cpp: the virtual-memory entries pyacl binds
PYACL_BINDS = {"reserve_mem_address", "release_mem_address", "malloc_physical", "free_physical",
               "map_mem", "unmap_mem", "mem_get_allocation_granularity", "pointer_get_attributes"}


def test_functions_pyacl_does_not_bind_say_so():
    from ascend_memsim.acl import _vmm

    assert set(_vmm.__all__) - set(_vmm.NOT_IN_PYACL) == PYACL_BINDS
    for name in _vmm.__all__:
        doc = getattr(acl.rt, name).__doc__
        assert ("not in pyacl" in doc) == (name in _vmm.NOT_IN_PYACL), name
    with open(__file__.replace("tests/test_vmm.py", "docs/reference/c-api.md"),
              encoding="utf-8") as f:
        table = f.read()
    for name in _vmm.NOT_IN_PYACL:
        row = next(line for line in table.splitlines() if f"`{name}(" in line)
        assert "(not in pyacl)" in row, name


def test_a_dict_subclass_is_read_as_the_c_api_reads_it(a2):
    class Hostile(dict):
        def get(self, *args):
            raise RuntimeError("never called")

        def __getitem__(self, key):
            raise RuntimeError("never called")

    handle, ret = acl.rt.malloc_physical(2 * MiB, Hostile(prop()), 0)
    assert ret == 0 and acl.rt.free_physical(handle) == 0
