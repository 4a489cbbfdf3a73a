"""Peer access between devices: aclrtDeviceCanAccessPeer / EnablePeerAccess / DisablePeerAccess /
PeerAccessStatus.

The rules, from hicann/runtime ``src/acl/aclrt_impl/memory.cpp``
(``aclrtDeviceCanAccessPeerImpl``, ``aclrtDeviceEnablePeerAccessImpl``,
``aclrtDeviceDisablePeerAccessImpl``) and ``docs/zh/api_ref/04_device_management.md``:

* ``deviceId == peerDeviceId`` is ACL_ERROR_INVALID_PARAM in all three;
* EnablePeerAccess's ``flags`` is reserved: anything but 0 is ACL_ERROR_FEATURE_UNSUPPORTED,
  checked first; Enable and Disable act for the calling thread's current device (``rtGetDevice``:
  none is ACL_ERROR_RT_CONTEXT_NULL); a device id outside ``[0, count)`` is refused when the
  runtime converts it (``rtGetDevicePhyIdByIndex``), ACL_ERROR_RT_INVALID_DEVICEID here;
* every simulated product has the chip feature ``RT_FEATURE_DEVICE_P2P`` (``src/runtime/config``:
  910_B_93 for A2/A3, 950, dc), so CanAccessPeer answers 1 for two different devices.
  DECISION: the simulated devices sit behind one switch (the documented condition), so
  every pair can; CanAccessPeer needs no current device (``ApiImpl::DeviceCanAccessPeer``
  checks the context only when a default device is configured, and then makes it).
* Enabling is one-way and per device (04_device_management.md, aclrtDeviceEnablePeerAccess).

Which copies it allows: the vendor's pages disagree on the direction (04_device_management.md
says device 0 enabling peer 1 makes "device 0 to device 1" work; ``docs/zh/dev_guide/
02-01_data_copy.md`` has the destination device enable the source). DECISION: a copy between
two devices is allowed when either device enabled the other; the FAQ "跨DeviceP2P数据交互配置失败"
shows the copy failing when neither did. DECISION: enabling twice, and disabling a pair never
enabled, succeed and change nothing (the driver's halDeviceEnableP2P is not public); access
lasts until disabled, until either device is reset, or until aclFinalize. DECISION: the vendor's
aclrtResetDevice says it releases "Device上的资源" and names no peer state; enabling is
"Device级的" (per device), so the reset that really releases a device (its last reference)
ends the access it enabled and the access others enabled to it, as a fresh device has none.

aclrtDevicePeerAccessStatus (``status``, 1 when enabled): memory.cpp passes it to
``rtsGetP2PStatus``; the runtime converts ``deviceId`` (an unknown one is
ACL_ERROR_RT_INVALID_DEVICEID), refuses a ``peerDeviceId`` at or above RT_MAX_DEV_NUM
(``api_error.cc``, RT_ERROR_INVALID_VALUE: ACL_ERROR_RT_PARAM_INVALID) and needs a current
context (``api_impl.cc`` CheckCurCtxValid: ACL_ERROR_RT_CONTEXT_NULL). DECISION: a peer that
is no device of this machine is ACL_ERROR_RT_PARAM_INVALID too (the driver's answer is not
public), and equal ids answer 0 (a device never enables itself); the status follows
:meth:`PeerAccess.allows`, the rule copies obey.
"""

from __future__ import annotations

import threading
from typing import Any

from ..memory.args import as_int
from ..memory.errors import InvalidArgument, InvalidRuntimeParam, ReservedFlagSet

__all__ = ["PeerAccess", "peer_access"]

_INT32 = (-(1 << 31), (1 << 31) - 1)


class PeerAccess:
    """The peer-access table of one runtime: which device enabled which. Thread-safe."""

    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime
        self.lock = threading.Lock()
        #: (device, peer) pairs: device enabled access to peer
        self.enabled: set[tuple[int, int]] = set()

    def _device_id(self, value: object, name: str) -> int:
        number = as_int(value, name, *_INT32)
        checked: int = self.runtime._table.check_id(number)
        return checked

    def can_access_peer(self, device_id: object, peer_device_id: object) -> int:
        """aclrtDeviceCanAccessPeer: 1 when the two devices can exchange data (always, see
        the module docstring).

        Raises:
            InvalidArgument, InvalidArgumentType: equal ids, or not int32.
            InvalidDevice: an id outside ``[0, device_count)``.
        """
        device = as_int(device_id, "device_id", *_INT32)
        peer = as_int(peer_device_id, "peer_device_id", *_INT32)
        if device == peer:
            # memory.cpp aclrtDeviceCanAccessPeerImpl: "deviceId cannot be equal to peerDeviceId"
            raise InvalidArgument(f"device_id {device} cannot be equal to peer_device_id {peer}")
        self._device_id(peer, "peer_device_id")  # rtGetDevicePhyIdByIndex(peer)
        self._device_id(device, "device_id")      # ChgUserDevIdToDeviceId(device)
        return 1

    def _pair(self, peer_device_id: object, call: str) -> tuple[int, int]:
        device = self.runtime.current_device().device_id  # rtGetDevice
        peer = as_int(peer_device_id, "peer_device_id", *_INT32)
        if device == peer:
            raise InvalidArgument(f"{call}: peer_device_id {peer} is the current device")
        return device, self._device_id(peer, "peer_device_id")

    def enable(self, peer_device_id: object, flags: object) -> None:
        """aclrtDeviceEnablePeerAccess: the current device may exchange data with the peer.

        Raises:
            ReservedFlagSet: ``flags`` is not 0 (checked first, memory.cpp).
            DeviceNotSet: no current device. InvalidArgument: the peer is the current device.
            InvalidDevice: a peer outside ``[0, device_count)``.
        """
        flags = as_int(flags, "flags", 0, (1 << 32) - 1)
        if flags != 0:
            raise ReservedFlagSet(f"flags={flags:#x}: reserved, must be 0")
        pair = self._pair(peer_device_id, "aclrtDeviceEnablePeerAccess")
        with self.lock:
            self.enabled.add(pair)

    def disable(self, peer_device_id: object) -> None:
        """aclrtDeviceDisablePeerAccess: undo :meth:`enable` for the current device.

        Raises:
            DeviceNotSet, InvalidArgument, InvalidDevice: as :meth:`enable`.
        """
        pair = self._pair(peer_device_id, "aclrtDeviceDisablePeerAccess")
        with self.lock:
            self.enabled.discard(pair)

    def status(self, device_id: object, peer_device_id: object) -> int:
        """aclrtDevicePeerAccessStatus: 1 when copies between the two devices are allowed,
        else 0 (see the module docstring).

        Raises:
            InvalidArgumentType, InvalidArgument: not int32.
            InvalidDevice: ``device_id`` outside ``[0, device_count)``.
            InvalidRuntimeParam: ``peer_device_id`` outside ``[0, device_count)``.
            DeviceNotSet: no current device.
        """
        device = self._device_id(device_id, "device_id")
        peer = as_int(peer_device_id, "peer_device_id", *_INT32)
        if not 0 <= peer < self.runtime.device_count:
            raise InvalidRuntimeParam(f"aclrtDevicePeerAccessStatus: peer_device_id {peer} is "
                                      f"not a device (0 to {self.runtime.device_count - 1})")
        self.runtime.current_device()
        with self.lock:
            return int(self.allows(device, peer))

    def forget_device(self, device_id: int) -> None:
        """The device was reset (its last reference): the access it enabled and the access
        enabled to it end (DECISION, see the module docstring)."""
        with self.lock:
            self.enabled = {pair for pair in self.enabled if device_id not in pair}

    def allows(self, device: int, peer: int) -> bool:
        """True when a copy between ``device`` and ``peer`` is allowed (either enabled the
        other, see the module docstring)."""
        enabled = self.enabled
        return (device, peer) in enabled or (peer, device) in enabled

    def close(self) -> list[object]:
        """aclFinalize: nothing to report (peer access is no resource the program leaks)."""
        return []


def peer_access(runtime: Any) -> PeerAccess:
    """The runtime's :class:`PeerAccess`, made on first use (``Runtime.extension``)."""
    found: PeerAccess = runtime.extension("peer", PeerAccess)
    return found
