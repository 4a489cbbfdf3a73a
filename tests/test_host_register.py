"""Host memory chapter (11-02): malloc_host_with_cfg, free_host_with_dev_sync, host_register /
host_register_v2 / host_unregister, host_get_device_pointer, host_mem_map_capabilities."""

import ctypes
import mmap

import numpy as np
import pytest

from ascend_memsim import MiB, Runtime, acl, aclrt
from ascend_memsim.data.pinned import MAPPED_BASE, pinned_host
from ascend_memsim.memory.constants import ErrorCode as E

MAPPED, PINNED = acl.ACL_HOST_REG_MAPPED, acl.ACL_HOST_REG_PINNED


@pytest.fixture
def rt():
    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer="off") as runtime:
        acl.init()
        assert acl.rt.set_device(0) == 0
        yield runtime
        acl.finalize()


_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]


@pytest.fixture
def page():
    """Two pages of process memory that no simulator call handed out (as malloc gives), with
    the page after them unmapped."""
    prot = mmap.PROT_READ | mmap.PROT_WRITE
    addr = _libc.mmap(None, 3 * 4096, prot, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    assert addr not in (None, ctypes.c_void_p(-1).value)
    assert _libc.munmap(addr + 2 * 4096, 4096) == 0
    yield addr, None
    _libc.munmap(addr, 2 * 4096)


def _state(rt):
    plane = rt.extension("pinned")
    return (plane.snapshot() if plane else [], [(b.ptr, b.size) for b in rt.host.blocks()])


def test_the_vendor_zero_copy_example(rt):
    """example/3_memory_advanced/host_register/0_simple_zero_copy, its memory calls in Python:
    three aclrtMallocHost buffers registered MAPPED, each with its own device address, the
    host fills them through the host pointers, then unregister and free. (Its AscendC
    kernel, aclrtBinaryLoadFromFile and aclrtLaunchKernelWithConfig, is not simulated; the
    addition is checked on the host bytes the kernel would read.)"""
    count = 8 * 2048
    size = count * 2
    stream, ret = acl.rt.create_stream()
    assert ret == 0
    buffers = []
    for _ in range(3):
        host, ret = acl.rt.malloc_host(size)
        assert ret == 0
        assert acl.rt.host_register_v2(host, size, MAPPED) == 0
        device, ret = acl.rt.host_get_device_pointer(host, 0)
        assert ret == 0 and device != 0
        buffers.append((host, device))
    print("Registered three Host buffers and obtained their Device mapping addresses.")
    assert len({d for _, d in buffers}) == 3
    a, b, out = (np.ctypeslib.as_array((ctypes.c_uint16 * count).from_address(h))
                 for h, _ in buffers)
    a[:], b[:], out[:] = 0x3C00, 0x4000, 0                     # 1.0, 2.0, 0.0 in FP16
    out[:] = (a.view(np.float16) + b.view(np.float16)).view(np.uint16)
    assert acl.rt.synchronize_stream(stream) == 0
    assert (out == 0x4200).all()                                # 3.0
    print(f"Verified {count} FP16 additions through mapped Host memory.")
    for host, _ in reversed(buffers):
        assert acl.rt.host_unregister(host) == 0
        assert acl.rt.free_host(host) == 0
    assert acl.rt.destroy_stream(stream) == 0
    assert _state(rt) == ([], [])


def test_a_mapped_device_address_is_not_memory_for_copies(rt):
    """11-02: the device address "cannot be used for memory operations such as copies"."""
    host, _ = acl.rt.malloc_host(4096)
    dev, ret = acl.rt.host_register(host, 4096, acl.ACL_HOST_REGISTER_MAPPED)
    assert ret == 0 and dev >= MAPPED_BASE
    block, _ = acl.rt.malloc(4096, 0)
    assert acl.rt.memcpy(block, 4096, dev, 4096, acl.ACL_MEMCPY_DEVICE_TO_DEVICE) == \
        E.RT_PARAM_INVALID
    # the host address still works for copies
    assert acl.rt.memcpy(block, 4096, host, 4096, acl.ACL_MEMCPY_HOST_TO_DEVICE) == 0


def test_raw_process_memory_registers_pinned_and_mapped(rt, page):
    addr, _ = page
    assert acl.rt.host_register_v2(addr, 8192, MAPPED | PINNED) == 0
    dev, ret = acl.rt.host_get_device_pointer(addr, 0)
    assert ret == 0 and dev == MAPPED_BASE + addr
    # async copies take registered memory (as any host memory)
    block, _ = acl.rt.malloc(8192, 0)
    assert acl.rt.memcpy_async(block, 8192, addr, 8192, acl.ACL_MEMCPY_HOST_TO_DEVICE, 0) == 0
    assert acl.rt.synchronize_stream(0) == 0
    assert acl.rt.host_unregister(addr) == 0


def test_pinned_only_has_no_device_address(rt, page):
    addr, _ = page
    assert acl.rt.host_register_v2(addr, 4096, PINNED) == 0
    assert acl.rt.host_get_device_pointer(addr, 0) == (0, E.RT_PARAM_INVALID)
    assert acl.rt.host_unregister(addr) == 0


def test_double_registration_and_unknown_unregistration(rt, page):
    """register_memory.cc: an overlapping range is 507910; Unregister of anything but a
    registered base is 507911; both change nothing."""
    addr, _ = page
    assert acl.rt.host_register_v2(addr, 8192, MAPPED) == 0
    before = _state(rt)
    assert acl.rt.host_register_v2(addr + 4096, 4096, PINNED) == E.HOST_MEMORY_ALREADY_REGISTERED
    assert acl.rt.host_register(addr, 4096, 0) == (0, E.HOST_MEMORY_ALREADY_REGISTERED)
    assert acl.rt.host_unregister(addr + 4096) == E.HOST_MEMORY_NOT_REGISTERED
    assert _state(rt) == before
    assert acl.rt.host_unregister(addr) == 0
    assert acl.rt.host_unregister(addr) == E.HOST_MEMORY_NOT_REGISTERED
    # the device address answers for the base only (register_memory.cc GetMappedDevicePointer)
    assert acl.rt.host_register_v2(addr, 8192, MAPPED) == 0
    assert acl.rt.host_get_device_pointer(addr + 64, 0) == (0, E.RT_PARAM_INVALID)


@pytest.mark.parametrize("call, code", [
    (lambda a: acl.rt.host_register(0, 4096, 0), (0, E.INVALID_PARAM)),          # memory.cpp
    (lambda a: acl.rt.host_register(a, 0, 0), (0, E.INVALID_PARAM)),
    (lambda a: acl.rt.host_register(a, 4096, 1), (0, E.RT_FEATURE_NOT_SUPPORT)),  # api_error.cc
    (lambda a: acl.rt.host_register(a, 4096, acl.ACL_HOST_REGISTER_IOMEMORY),
     (0, E.RT_FEATURE_NOT_SUPPORT)),                                             # reserved
    (lambda a: acl.rt.host_register(a + 64, 4096, 0), (0, E.RT_PARAM_INVALID)),   # 4 KB rule
    (lambda a: acl.rt.host_register(a, 3 * 4096, 0), (0, E.RT_PARAM_INVALID)),   # unmapped end
    (lambda a: acl.rt.host_register(0x1000, 4096, 0), (0, E.RT_PARAM_INVALID)),  # not memory
    (lambda a: acl.rt.host_register_v2(a, 4096, 0), E.RT_PARAM_INVALID),          # api_error.cc
    (lambda a: acl.rt.host_register_v2(a, 4096, 0x1), E.RT_PARAM_INVALID),
    (lambda a: acl.rt.host_register_v2(a, 4096, MAPPED | 0x100), E.RT_PARAM_INVALID),
    (lambda a: acl.rt.host_register_v2(a, 4096, acl.ACL_HOST_REG_READONLY),
     E.RT_FEATURE_NOT_SUPPORT),
    (lambda a: acl.rt.host_register_v2(None, 4096, MAPPED), E.INVALID_PARAM),
    (lambda a: acl.rt.host_register_v2(a, 4096.0, MAPPED), E.INVALID_PARAM),
    (lambda a: acl.rt.host_unregister(0), E.INVALID_PARAM),
    (lambda a: acl.rt.host_get_device_pointer(0, 0), (0, E.INVALID_PARAM)),
    (lambda a: acl.rt.host_get_device_pointer(a, 1), (0, E.INVALID_PARAM)),       # reserved flag
    (lambda a: acl.rt.host_get_device_pointer(a, 0), (0, E.RT_PARAM_INVALID)),     # unregistered
    (lambda a: acl.rt.host_mem_map_capabilities(0, 10), (0, E.RT_PARAM_INVALID)),
    (lambda a: acl.rt.host_mem_map_capabilities(1, 0), (0, E.RT_INVALID_DEVICEID)),
    (lambda a: acl.rt.malloc_host_with_cfg(64, None), (0, E.INVALID_PARAM)),
    (lambda a: acl.rt.malloc_host_with_cfg(0, {}), (0, E.INVALID_PARAM)),
    (lambda a: acl.rt.malloc_host_with_cfg(64, {"numAttrs": 2, "attrs": [
        {"attr": 1, "value": {"moduleId": 33}}]}), (0, E.INVALID_PARAM)),
    (lambda a: acl.rt.malloc_host_with_cfg(64, {"numAttrs": 1, "attrs": [
        {"attr": 2, "value": {"deviceId": 0}}]}), (0, E.RT_PARAM_INVALID)),     # api_impl.cc
    (lambda a: acl.rt.free_host_with_dev_sync(0), E.INVALID_PARAM),
    (lambda a: acl.rt.free_host_with_dev_sync(a), E.RT_PARAM_INVALID),
])
def test_misuse_returns_the_documented_code_and_changes_nothing(rt, page, call, code):
    addr, _ = page
    host, _ = acl.rt.malloc_host(100)
    before = _state(rt)
    assert call(addr) == code
    assert _state(rt) == before
    assert acl.rt.free_host(host) == 0


def test_a_freed_malloc_host_block_cannot_be_registered(rt):
    """Registration checks a range as every raw host access does: the storage the simulator
    keeps for a freed aclrtMallocHost block is no longer the program's (it was accepted)."""
    host, _ = acl.rt.malloc_host(8192)
    assert acl.rt.free_host(host) == 0
    assert acl.rt.host_register(host, 4096, 0) == (0, E.RT_PARAM_INVALID)
    assert "which was freed" in acl.get_recent_err_msg()
    assert acl.rt.host_register_v2(host, 4096, PINNED) == E.RT_PARAM_INVALID
    assert acl.rt.host_unregister(host) == E.HOST_MEMORY_NOT_REGISTERED


def test_registering_malloc_host_memory(rt):
    host, _ = acl.rt.malloc_host(10000)
    # DECISION (data/pinned.py): the start of an aclrtMallocHost block is accepted
    assert acl.rt.host_register_v2(host, 10000, MAPPED) == 0
    assert acl.rt.host_unregister(host) == 0
    # 11-02: PINNED on page-locked memory is an error
    assert acl.rt.host_register_v2(host, 100, PINNED) == E.RT_PARAM_INVALID
    # past the block's footprint
    assert acl.rt.host_register_v2(host, 10000 + 64, MAPPED) == E.RT_PARAM_INVALID


def test_calls_need_a_current_device():
    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer="off"):
        acl.init()
        assert acl.rt.host_register_v2(0x1000, 4096, MAPPED) == E.RT_CONTEXT_NULL
        assert acl.rt.host_unregister(0x1000) == E.RT_CONTEXT_NULL
        assert acl.rt.malloc_host_with_cfg(64, {}) == (0, E.RT_CONTEXT_NULL)
        acl.finalize()


def test_registration_is_not_supported_on_310p():
    with Runtime("310P", ddr_bytes=64 * MiB, sanitizer="off"):
        acl.init()
        acl.rt.set_device(0)
        host, _ = acl.rt.malloc_host(4096)
        assert acl.rt.host_register_v2(host, 4096, MAPPED) == E.RT_FEATURE_NOT_SUPPORT
        assert acl.rt.host_mem_map_capabilities(0, acl.ACL_RT_HAC_TYPE_AIC) == (0, 0)
        acl.finalize()


def test_map_capabilities_on_a2(rt):
    assert acl.rt.host_mem_map_capabilities(0, acl.ACL_RT_HAC_TYPE_SDMA) == \
        (acl.ACL_RT_HOST_MEM_MAP_SUPPORTED, 0)


def test_malloc_host_with_cfg_takes_pyacl_configs(rt):
    ptr, ret = acl.rt.malloc_host_with_cfg(100, {})
    assert ret == 0 and ptr % 64 == 0
    cfg = {"numAttrs": 1, "attrs": [{"attr": acl.ACL_RT_MEM_ATTR_MODULE_ID,
                                     "value": {"moduleId": 33}}]}
    ptr2, ret = acl.rt.malloc_host_with_cfg(100, cfg)
    assert ret == 0
    assert acl.rt.free_host(ptr) == 0 and acl.rt.free_host(ptr2) == 0


def test_free_host_with_dev_sync_runs_queued_work_first(rt):
    host, _ = acl.rt.malloc_host(64)
    block, _ = acl.rt.malloc(64, 0)
    stream, _ = acl.rt.create_stream()
    assert acl.rt.memset(block, 64, 9, 64) == 0
    assert acl.rt.memcpy_async(host, 64, block, 64, acl.ACL_MEMCPY_DEVICE_TO_HOST, stream) == 0
    assert rt.streams.pending == 1
    assert acl.rt.free_host_with_dev_sync(host) == 0
    assert rt.streams.pending == 0
    assert rt.host.blocks() == []


def test_the_c_names(rt, page):
    addr, _ = page
    assert aclrt.aclrtHostRegisterV2(addr, 4096, MAPPED) == 0
    assert aclrt.aclrtHostGetDevicePointer(addr, 0)[1] == 0
    assert aclrt.aclrtHostUnregister(addr) == 0
    assert pinned_host(rt).registrations() == []


def test_freeing_a_registered_block_leaves_its_registration(rt):
    """DECISION (data/pinned.py): ApiImpl::HostFree leaves register_memory.cc's maps."""
    host, _ = acl.rt.malloc_host(4096)
    assert acl.rt.host_register_v2(host, 4096, MAPPED) == 0
    assert acl.rt.free_host(host) == 0
    assert acl.rt.host_get_device_pointer(host, 0)[1] == 0
    assert acl.rt.host_unregister(host) == 0


def test_pointer_attributes_tell_registered_host_memory_from_the_programs_own(rt, page):
    """npu_driver_mem.cc NpuDriver::PtrGetAttributes: aclrtMallocHost memory is HOST; the
    program's own memory is HOST only while aclrtHostRegister covers it
    (register_memory.cc IsRegisteredMemory), else ACL_MEM_LOCATION_TYPE_UNREGISTERED (2)."""
    HOST, UNREGISTERED = acl.ACL_MEM_LOCATION_TYPE_HOST, acl.ACL_MEM_LOCATION_TYPE_UNREGISTERED
    assert (HOST, UNREGISTERED) == (0, 2)                         # acl_rt.h aclrtMemLocationType

    def where(ptr):
        out, ret = acl.rt.pointer_get_attributes(ptr)
        assert ret == 0
        return out["location"]["type"], out["location"]["id"], out["page_size"]

    data = bytes(64)
    array = np.zeros(16, np.float32)
    assert where(acl.util.bytes_to_ptr(data)) == (UNREGISTERED, 0, 0)
    assert where(acl.util.numpy_to_ptr(array) + 8) == (UNREGISTERED, 0, 0)
    host, _ = acl.rt.malloc_host(64)
    assert where(host + 10) == (HOST, 0, 4096)
    addr, _ = page
    assert where(addr + 100) == (UNREGISTERED, 0, 0)
    assert acl.rt.host_register_v2(addr, 4096, PINNED) == 0
    assert where(addr + 100) == (HOST, 0, 4096)
    assert where(addr + 4096) == (UNREGISTERED, 0, 0)             # past the registered range
    assert acl.rt.host_unregister(addr) == 0
    assert where(addr + 100) == (UNREGISTERED, 0, 0)
    acl.rt.free_host(host)
