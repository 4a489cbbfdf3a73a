"""Peer access between devices (aclrtDeviceCanAccessPeer / EnablePeerAccess / DisablePeerAccess)
and the copies between devices it allows and refuses; peer access ends when a device is
reset (its last reference); aclrtDevicePeerAccessStatus."""

import pytest

from ascend_memsim import MiB, Runtime, acl, aclrt
from ascend_memsim.memory.constants import ErrorCode as E
from ascend_memsim.runtime.peer import peer_access

P2P = acl.ACL_MEM_MALLOC_HUGE_FIRST_P2P
D2D = acl.ACL_MEMCPY_DEVICE_TO_DEVICE


@pytest.fixture(params=["A2", "A3", "950PR"])
def two(request):
    with Runtime(request.param, hbm_bytes=64 * MiB, device_count=2, sanitizer="off") as rt:
        acl.init()
        yield rt
        acl.finalize()


def _block_on(device, size=1024, policy=P2P, fill=None):
    assert acl.rt.set_device(device) == 0
    ptr, ret = acl.rt.malloc(size, policy)
    assert ret == 0
    if fill is not None:
        assert acl.rt.memset(ptr, size, fill, size) == 0
    return ptr


def _read(ptr, size):
    host, ret = acl.rt.malloc_host(size)
    assert ret == 0 and acl.rt.memcpy(host, size, ptr, size, acl.ACL_MEMCPY_DEVICE_TO_HOST) == 0
    data = acl.util.ptr_to_bytes(host, size)
    acl.rt.free_host(host)
    return data


def test_the_vendor_faq_program(two):
    """The FAQ "跨DeviceP2P数据交互配置失败": a copy between devices fails before peer access
    is enabled and succeeds after; disabling it again refuses the copy."""
    dev0 = _block_on(0, fill=0x5A)
    dev1 = _block_on(1, fill=0x00)
    assert acl.rt.memcpy(dev1, 1024, dev0, 1024, D2D) == E.RT_PARAM_INVALID
    assert "peer access" in acl.get_recent_err_msg()
    assert _read(dev1, 1024) == bytes(1024)          # the failed copy moved nothing
    assert acl.rt.device_can_access_peer(0, 1) == (1, 0)
    assert acl.rt.set_device(0) == 0
    assert acl.rt.device_enable_peer_access(1, 0) == 0
    assert acl.rt.memcpy(dev1, 1024, dev0, 1024, D2D) == 0
    assert _read(dev1, 1024) == b"\x5a" * 1024
    # DECISION (runtime/peer.py): either device enabling the other allows both directions
    assert acl.rt.memcpy(dev0, 1024, dev1, 1024, D2D) == 0
    assert acl.rt.set_device(0) == 0
    assert acl.rt.device_disable_peer_access(1) == 0
    assert acl.rt.memcpy(dev1, 1024, dev0, 1024, D2D) == E.RT_PARAM_INVALID


def test_async_copies_between_devices_need_peer_access_too(two):
    dev0 = _block_on(0, fill=7)
    dev1 = _block_on(1)
    assert acl.rt.memcpy_async(dev1, 1024, dev0, 1024, D2D, 0) == E.RT_PARAM_INVALID
    assert acl.rt.device_enable_peer_access(0, 0) == 0     # current device 1 enables 0
    assert acl.rt.memcpy_async(dev1, 1024, dev0, 1024, D2D, 0) == 0
    assert acl.rt.synchronize_stream(0) == 0
    assert _read(dev1, 1024) == b"\x07" * 1024


def test_peer_access_does_not_lift_the_p2p_memory_rule(two):
    dev0 = _block_on(0, policy=acl.ACL_MEM_MALLOC_HUGE_FIRST, fill=1)
    dev1 = _block_on(1)
    assert acl.rt.device_enable_peer_access(0, 0) == 0
    assert acl.rt.memcpy(dev1, 1024, dev0, 1024, D2D) == E.RT_PARAM_INVALID
    assert "P2P memory" in acl.get_recent_err_msg()


@pytest.mark.parametrize("call, code", [
    # memory.cpp aclrtDeviceCanAccessPeerImpl: deviceId == peerDeviceId
    (lambda: acl.rt.device_can_access_peer(1, 1), (0, E.INVALID_PARAM)),
    (lambda: acl.rt.device_can_access_peer(0, 2), (0, E.RT_INVALID_DEVICEID)),
    (lambda: acl.rt.device_can_access_peer(-1, 0), (0, E.RT_INVALID_DEVICEID)),
    (lambda: acl.rt.device_can_access_peer(0, 2**31), (0, E.INVALID_PARAM)),
    (lambda: acl.rt.device_can_access_peer(0, 1.0), (0, E.INVALID_PARAM)),
    # aclrtDeviceEnablePeerAccessImpl: flags first (ACL_ERROR_FEATURE_UNSUPPORTED), then the
    # current device, then peer == current
    (lambda: acl.rt.device_enable_peer_access(1, 1), E.FEATURE_UNSUPPORTED),
    (lambda: acl.rt.device_enable_peer_access(0, 0), E.INVALID_PARAM),
    (lambda: acl.rt.device_enable_peer_access(5, 0), E.RT_INVALID_DEVICEID),
    (lambda: acl.rt.device_enable_peer_access(None, 0), E.INVALID_PARAM),
    (lambda: acl.rt.device_disable_peer_access(0), E.INVALID_PARAM),
    (lambda: acl.rt.device_disable_peer_access(2), E.RT_INVALID_DEVICEID),
])
def test_misuse_returns_the_documented_code_and_changes_nothing(two, call, code):
    assert acl.rt.set_device(0) == 0
    assert call() == code
    assert peer_access(two).enabled == set()


def test_enable_and_disable_need_a_current_device(two):
    assert acl.rt.device_enable_peer_access(1, 0) == E.RT_CONTEXT_NULL
    assert acl.rt.device_disable_peer_access(1) == E.RT_CONTEXT_NULL
    # CanAccessPeer asks for no current device (ApiImpl::DeviceCanAccessPeer)
    assert acl.rt.device_can_access_peer(1, 0) == (1, 0)


def test_enabling_twice_and_disabling_what_was_never_enabled_succeed(two):
    """DECISION (runtime/peer.py): the driver's rule is not public; both are no-ops."""
    assert acl.rt.set_device(1) == 0
    assert acl.rt.device_disable_peer_access(0) == 0
    assert acl.rt.device_enable_peer_access(0, 0) == 0
    assert acl.rt.device_enable_peer_access(0, 0) == 0
    assert peer_access(two).enabled == {(1, 0)}


def test_the_c_names(two):
    assert aclrt.aclrtDeviceCanAccessPeer(0, 1) == (1, 0)
    assert aclrt.aclrtSetDevice(0) == 0
    assert aclrt.aclrtDeviceEnablePeerAccess(1, 0) == 0
    assert aclrt.aclrtDeviceDisablePeerAccess(1) == 0


# -- peer access and device reset; aclrtDevicePeerAccessStatus ---------------------------------

def _status():
    return acl.rt.device_peer_access_status(0, 1), acl.rt.device_peer_access_status(1, 0)


@pytest.mark.parametrize("reset", [0, 1])
def test_resetting_either_device_ends_the_peer_access(two, reset):
    assert acl.rt.set_device(1) == 0
    assert acl.rt.set_device(0) == 0
    assert acl.rt.device_enable_peer_access(1, 0) == 0
    assert _status() == ((1, 0), (1, 0))
    assert acl.rt.reset_device(reset) == 0
    assert acl.rt.set_device(reset) == 0
    assert _status() == ((0, 0), (0, 0))
    # a copy between the devices is refused again
    dev0, ret = acl.rt.malloc(1024, P2P)
    assert ret == 0 and acl.rt.set_device(1 - reset) == 0
    dev1, ret = acl.rt.malloc(1024, P2P)
    assert ret == 0
    assert acl.rt.memcpy(dev1, 1024, dev0, 1024, D2D) == E.RT_PARAM_INVALID
    assert acl.rt.free(dev1) == 0 and acl.rt.set_device(reset) == 0 and acl.rt.free(dev0) == 0


def test_a_reset_that_leaves_a_reference_keeps_the_peer_access(two):
    assert acl.rt.set_device(0) == 0
    assert acl.rt.set_device(0) == 0
    assert acl.rt.device_enable_peer_access(1, 0) == 0
    assert acl.rt.reset_device(0) == 0          # one reference left: nothing is released
    assert _status() == ((1, 0), (1, 0))


def test_the_status_follows_enable_and_disable_from_either_device(two):
    assert acl.rt.set_device(1) == 0
    assert _status() == ((0, 0), (0, 0))
    assert acl.rt.device_enable_peer_access(0, 0) == 0
    assert _status() == ((1, 0), (1, 0))
    assert acl.rt.device_peer_access_status(1, 1) == (0, 0)
    assert acl.rt.device_disable_peer_access(0) == 0
    assert _status() == ((0, 0), (0, 0))
    assert aclrt.aclrtDevicePeerAccessStatus(0, 1) == (0, 0)


def test_the_status_refuses_what_the_runtime_refuses(two):
    assert acl.rt.device_peer_access_status(0, 1) == (0, E.RT_CONTEXT_NULL)
    assert acl.rt.set_device(0) == 0
    assert acl.rt.device_peer_access_status(2, 1) == (0, E.RT_INVALID_DEVICEID)
    assert acl.rt.device_peer_access_status(0, 2) == (0, E.RT_PARAM_INVALID)
    assert acl.rt.device_peer_access_status(0, -1) == (0, E.RT_PARAM_INVALID)
    assert acl.rt.device_peer_access_status("0", 1)[1] != 0
    assert acl.rt.device_peer_access_status(0, 1 << 40)[1] != 0
