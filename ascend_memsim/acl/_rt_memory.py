"""acl.rt, continued: the rest of the runtime's memory chapter a single process uses.

Host memory registration (11-02), the 2D, batch, descriptor and offset copies and the 32-bit
memset (11-03), and peer access between devices (04_device_management.md). Each function
here is exported from :mod:`ascend_memsim.acl.rt`. Signatures and return shapes follow
hicann/runtime ``python/pyACL/rt/rt_memory.cpp``; a function whose docstring says "not in
pyacl" has no binding in pyacl's method table (``pyrt_methods.cpp``) and is offered for
teaching under the name pyacl would give it.
"""

from __future__ import annotations

from ..runtime.active import current_runtime
from ..runtime.peer import peer_access
from ._face import face as _face

# -- peer access (04_device_management.md; pyacl: rt_memory.cpp) ------------------------------

@_face(0)
def device_can_access_peer(device_id: int, peer_device_id: int) -> int:
    """aclrtDeviceCanAccessPeer: ``can_access_peer, ret`` (1: the devices can exchange data)."""
    return peer_access(current_runtime()).can_access_peer(device_id, peer_device_id)


@_face()
def device_enable_peer_access(peer_device_id: int, flags: int) -> None:
    """aclrtDeviceEnablePeerAccess: the current device may copy to and from the peer."""
    peer_access(current_runtime()).enable(peer_device_id, flags)


@_face()
def device_disable_peer_access(peer_device_id: int) -> None:
    """aclrtDeviceDisablePeerAccess."""
    peer_access(current_runtime()).disable(peer_device_id)


__all__ = [
    "device_can_access_peer", "device_enable_peer_access", "device_disable_peer_access",
]
