"""acl.rt, continued: the rest of the runtime's memory chapter a single process uses.

Host memory registration (11-02), the 2D, batch, descriptor and offset copies and the 32-bit
memset (11-03), and peer access between devices (04_device_management.md). Each function
here is exported from :mod:`ascend_memsim.acl.rt`. Signatures and return shapes follow
hicann/runtime ``python/pyACL/rt/rt_memory.cpp``; a function whose docstring says "not in
pyacl" has no binding in pyacl's method table (``pyrt_methods.cpp``) and is offered for
teaching under the name pyacl would give it.
"""

from __future__ import annotations

from ..data.copies import copies
from ..data.indirect import indirect_copies
from ..data.pinned import pinned_host
from ..memory.args import SIZE_MAX, int_or_none
from ..memory.errors import AclError
from ..runtime.active import current_runtime
from ..runtime.peer import peer_access
from ._face import face as _face
from ._face import remember_error
from ._pyacl import malloc_config as _malloc_config

#: The functions of this module that pyacl does not bind (see :data:`acl.rt.NOT_IN_PYACL`).
NOT_IN_PYACL = ("free_host_with_dev_sync", "host_mem_map_capabilities", "memcpy_batch",
                "memcpy_batch_v2", "memcpy_batch_async", "memcpy_batch_async_v2",
                "memcpy_async_with_offset", "memset_d32", "memset_d32_async")


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


@_face(0)
def device_peer_access_status(device_id: int, peer_device_id: int) -> int:
    """aclrtDevicePeerAccessStatus: ``status, ret`` (1: data exchange between the two devices
    is enabled, 0: not)."""
    return peer_access(current_runtime()).status(device_id, peer_device_id)


__all__ = [
    "device_can_access_peer", "device_enable_peer_access", "device_disable_peer_access",
    "device_peer_access_status",
]


# -- host memory (11-02_host_memory_management.md; pyacl: rt_memory.cpp) -----------------------

@_face(0)
def malloc_host_with_cfg(size: int, cfg: dict) -> int:
    """aclrtMallocHostWithCfg: ``ptr, ret``. ``cfg`` as pyacl takes it: ``{}`` or
    ``{"numAttrs": n, "attrs": [{"attr": 1, "value": {"moduleId": m}}]}`` (1: MODULE_ID)."""
    return pinned_host(current_runtime()).malloc_host_with_cfg(size, _malloc_config(cfg))


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


# -- copies (11-03_memory_copy_and_set.md; pyacl: rt_memory.cpp) ------------------------------

@_face()
def memcpy2d(dst: int, dpitch: int, src: int, spitch: int, width: int, height: int,
             kind: int) -> None:
    """aclrtMemcpy2d: ``height`` rows of ``width`` bytes; host to device or device to host."""
    copies(current_runtime()).memcpy2d(dst, dpitch, src, spitch, width, height, kind)


@_face()
def memcpy2d_async(dst: int, dpitch: int, src: int, spitch: int, width: int, height: int,
                   kind: int, stream: int) -> None:
    """aclrtMemcpy2dAsync: as memcpy2d, queued on ``stream``; device to device too."""
    copies(current_runtime()).memcpy2d_async(dst, dpitch, src, spitch, width, height, kind,
                                             stream)


def _batch(args: tuple, stream: object, asynchronous: bool, fail_index: bool):
    """The batch copies' face: ``fail_index, ret`` (the failing entry, SIZE_MAX when the
    error concerns none) or just ``ret`` for the V2 calls."""
    try:
        copies(current_runtime()).memcpy_batch(*args, stream=stream, asynchronous=asynchronous)
    except AclError as error:
        remember_error(error)
        code = int(error.code)
        return (getattr(error, "fail_index", SIZE_MAX), code) if fail_index else code
    return (SIZE_MAX, 0) if fail_index else 0


def memcpy_batch(dsts: list, dest_maxs: list, srcs: list, sizes: list, num_batches: int,
                 attrs: list, attrs_indexes: list, num_attrs: int) -> tuple[int, int]:
    """aclrtMemcpyBatch: ``fail_index, ret``. Each attr is
    ``{"dstLoc": {"id": d, "type": t}, "srcLoc": {...}}`` (type: ACL_MEM_LOCATION_TYPE_HOST 0,
    DEVICE 1). Not in pyacl (pyrt_methods.cpp binds no such function): for teaching."""
    return _batch((dsts, dest_maxs, srcs, sizes, num_batches, attrs, attrs_indexes, num_attrs),
                  None, False, True)


def memcpy_batch_v2(dsts: list, dest_maxs: list, srcs: list, sizes: list, num_batches: int,
                    attrs: list, attrs_indexes: list, num_attrs: int) -> int:
    """aclrtMemcpyBatchV2: as memcpy_batch, without the fail index. Not in pyacl."""
    return _batch((dsts, dest_maxs, srcs, sizes, num_batches, attrs, attrs_indexes, num_attrs),
                  None, False, False)


def memcpy_batch_async(dsts: list, dest_maxs: list, srcs: list, sizes: list,
                       num_batches: int, attrs: list, attrs_indexes: list, num_attrs: int,
                       stream: int) -> tuple[int, int]:
    """aclrtMemcpyBatchAsync: ``fail_index, ret``, queued on ``stream``. Not in pyacl."""
    return _batch((dsts, dest_maxs, srcs, sizes, num_batches, attrs, attrs_indexes, num_attrs),
                  stream, True, True)


def memcpy_batch_async_v2(dsts: list, dest_maxs: list, srcs: list, sizes: list,
                          num_batches: int, attrs: list, attrs_indexes: list, num_attrs: int,
                          stream: int) -> int:
    """aclrtMemcpyBatchAsyncV2: as memcpy_batch_async, without the fail index. Not in pyacl."""
    return _batch((dsts, dest_maxs, srcs, sizes, num_batches, attrs, attrs_indexes, num_attrs),
                  stream, True, False)


@_face(0)
def get_memcpy_desc_size(kind: int) -> int:
    """aclrtGetMemcpyDescSize: ``desc_size, ret`` (kind: ACL_MEMCPY_INNER_DEVICE_TO_DEVICE)."""
    return indirect_copies(current_runtime()).desc_size(kind)


def set_memcpy_desc(desc_ptr: int, kind: int, src: int, dst: int, count: int,
                    config: int) -> tuple[int, int]:
    """aclrtSetMemcpyDesc: ``desc, ret``; ``desc_ptr`` is device memory of
    get_memcpy_desc_size bytes, ``config`` reserved (0). Note pyacl's order: src before dst.
    As pyacl (``rt_memory.cpp`` WrapAclRtSetMemcpyDesc), the descriptor address comes back
    whatever the code."""
    try:
        plane = indirect_copies(current_runtime())
        return plane.set_desc(desc_ptr, kind, src, dst, count, config), 0
    except AclError as error:
        remember_error(error)
        back = int_or_none(desc_ptr)
        return (back if back is not None and 0 <= back <= SIZE_MAX else 0), int(error.code)


@_face()
def memcpy_async_with_desc(desc_ptr: int, kind: int, stream: int) -> None:
    """aclrtMemcpyAsyncWithDesc: queue the copy a descriptor describes (stream not 0)."""
    indirect_copies(current_runtime()).async_with_desc(desc_ptr, kind, stream)


@_face()
def memcpy_async_with_offset(dst: int, dest_max: int, dst_offset: int, src: int, count: int,
                             src_offset: int, kind: int, stream: int) -> None:
    """aclrtMemcpyAsyncWithOffset: ``dst`` and ``src`` are device cells holding base
    addresses. Not in pyacl (pyrt_methods.cpp binds no such function): for teaching."""
    indirect_copies(current_runtime()).async_with_offset(dst, dest_max, dst_offset, src, count,
                                                src_offset, kind, stream)


@_face()
def memset_d32(ptr: int, mem_size: int, value: int, count: int) -> None:
    """aclrtMemsetD32: ``count`` (the C API's N) 32-bit values. Not in pyacl: for teaching."""
    copies(current_runtime()).memset_d32(ptr, mem_size, value, count)


@_face()
def memset_d32_async(ptr: int, mem_size: int, value: int, count: int, stream: int) -> None:
    """aclrtMemsetD32Async. Not in pyacl (pyrt_methods.cpp binds no such function)."""
    copies(current_runtime()).memset_d32_async(ptr, mem_size, value, count, stream)


@_face()
def memcpy_async_with_condition(dst: int, dest_max: int, src: int, count: int, kind: int,
                                stream: int) -> None:
    """aclrtMemcpyAsyncWithCondition (deprecated: use memcpy_async)."""
    copies(current_runtime()).async_with_condition(dst, dest_max, src, count, kind, stream)


__all__ += [
    "memcpy2d", "memcpy2d_async", "memcpy_batch", "memcpy_batch_v2", "memcpy_batch_async",
    "memcpy_batch_async_v2", "get_memcpy_desc_size", "set_memcpy_desc",
    "memcpy_async_with_desc", "memcpy_async_with_offset", "memset_d32", "memset_d32_async",
    "memcpy_async_with_condition",
]
