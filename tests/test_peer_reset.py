"""Peer access ends when a device is reset (its last reference); aclrtDevicePeerAccessStatus."""

import pytest

from ascend_memsim import MiB, Runtime, acl, aclrt
from ascend_memsim.memory.constants import ErrorCode as E

P2P = acl.ACL_MEM_MALLOC_HUGE_FIRST_P2P
D2D = acl.ACL_MEMCPY_DEVICE_TO_DEVICE


@pytest.fixture(params=["A2", "A3", "950PR"])
def two(request):
    with Runtime(request.param, hbm_bytes=64 * MiB, device_count=2, sanitizer="off") as rt:
        acl.init()
        yield rt
        acl.finalize()


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
