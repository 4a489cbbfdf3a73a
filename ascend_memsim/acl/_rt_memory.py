"""acl.rt, continued: the rest of the runtime's memory chapter a single process uses.

Host memory registration (11-02), the 2D, batch, descriptor and offset copies and the 32-bit
memset (11-03), and peer access between devices (04_device_management.md). Each function
here is exported from :mod:`ascend_memsim.acl.rt`. Signatures and return shapes follow
hicann/runtime ``python/pyACL/rt/rt_memory.cpp``; a function whose docstring says "not in
pyacl" has no binding in pyacl's method table (``pyrt_methods.cpp``) and is offered for
teaching under the name pyacl would give it.
"""

from __future__ import annotations

from ..data.pinned import pinned_host
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


# -- host memory (11-02_host_memory_management.md; pyacl: rt_memory.cpp) -----------------------

@_face(0)
def malloc_host_with_cfg(size: int, cfg: dict) -> int:
    """aclrtMallocHostWithCfg: ``ptr, ret``. ``cfg`` as pyacl takes it: ``{}`` or
    ``{"numAttrs": n, "attrs": [{"attr": 1, "value": {"moduleId": m}}]}`` (1: MODULE_ID)."""
    return pinned_host(current_runtime()).malloc_host_with_cfg(size, cfg)


@_face()
def free_host_with_dev_sync(host_ptr: int) -> None:
    """aclrtFreeHostWithDevSync: synchronise the current device, then free. Not in pyacl
    (pyrt_methods.cpp binds no such function): for teaching."""
    pinned_host(current_runtime()).free_host_with_dev_sync(host_ptr)


@_face(0)
def host_register(ptr: int, size: int, register_type: int) -> int:
    """aclrtHostRegister: ``dev_ptr, ret`` (an address only the device may use)."""
    return pinned_host(current_runtime()).register(ptr, size, register_type)


@_face()
def host_register_v2(ptr: int, size: int, flag: int) -> None:
    """aclrtHostRegisterV2: ``ret``; ``flag`` an OR of ACL_HOST_REG_MAPPED / PINNED / ..."""
    pinned_host(current_runtime()).register_v2(ptr, size, flag)


@_face()
def host_unregister(ptr: int) -> None:
    """aclrtHostUnregister."""
    pinned_host(current_runtime()).unregister(ptr)


@_face(0)
def host_get_device_pointer(host_ptr: int, flag: int) -> int:
    """aclrtHostGetDevicePointer: ``dev_ptr, ret``; ``flag`` is reserved (0)."""
    return pinned_host(current_runtime()).device_pointer(host_ptr, flag)


@_face(0)
def host_mem_map_capabilities(device_id: int, hac_type: int) -> int:
    """aclrtHostMemMapCapabilities: ``capability, ret`` (ACL_RT_HOST_MEM_MAP_SUPPORTED 1 or
    NOT_SUPPORTED 0). Not in pyacl (pyrt_methods.cpp binds no such function): for teaching."""
    return pinned_host(current_runtime()).map_capabilities(device_id, hac_type)


__all__ += [
    "malloc_host_with_cfg", "free_host_with_dev_sync", "host_register", "host_register_v2",
    "host_unregister", "host_get_device_pointer", "host_mem_map_capabilities",
]
