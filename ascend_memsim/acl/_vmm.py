"""acl.rt's virtual-memory calls (the vendor chapter 11-04) and pointer_get_attributes (11-05).

pyacl binds reserve_mem_address, release_mem_address, malloc_physical, free_physical,
map_mem, unmap_mem, mem_get_allocation_granularity and pointer_get_attributes (hicann/runtime
python/pyACL/rt/pyrt_methods.cpp), with the shapes of rt_memory.cpp: a prop is a dict
``{"handleType", "allocationType", "memAttr", "location": {"id", "type"}, "reserve"}``.
The others here are **not in pyacl**: the simulator offers them under the pyacl-style name
for teaching (and for the C names in ``ascend_memsim.aclrt``); a program that calls them
meets an AttributeError on hardware.
"""

from __future__ import annotations

from typing import Any

from ..runtime.active import current_runtime
from ._face import face as _face

__all__ = [
    "reserve_mem_address", "release_mem_address", "malloc_physical", "free_physical",
    "map_mem", "unmap_mem", "mem_get_allocation_granularity", "pointer_get_attributes",
    "reserve_mem_address_no_uc_memory", "mem_map_no_access", "mem_set_access",
    "mem_get_access", "mem_retain_allocation_handle",
    "mem_get_allocation_properties_from_handle", "mem_get_address_range",
]

#: The functions pyacl does not bind (pyrt_methods.cpp has no entry for them).
NOT_IN_PYACL = ("reserve_mem_address_no_uc_memory", "mem_map_no_access", "mem_set_access",
                "mem_get_access", "mem_retain_allocation_handle",
                "mem_get_allocation_properties_from_handle", "mem_get_address_range")


def _vmm():
    return current_runtime().vmm


@_face(0)
def reserve_mem_address(size: int, alignment: int, expect_ptr: int, flags: int) -> int:
    """aclrtReserveMemAddress: ``vir_ptr, ret`` (rt_memory.cpp: ``"kkkK"``)."""
    return _vmm().reserve_mem_address(size, alignment, expect_ptr, flags)


@_face()
def release_mem_address(vir_ptr: int) -> None:
    """aclrtReleaseMemAddress: ``ret``."""
    _vmm().release_mem_address(vir_ptr)


@_face(0)
def malloc_physical(size: int, prop: Any, flags: int) -> int:
    """aclrtMallocPhysical: ``handle, ret``; ``prop`` a dict (aclrtPhysicalMemProp)."""
    return _vmm().malloc_physical(size, prop, flags)


@_face()
def free_physical(handle: int) -> None:
    """aclrtFreePhysical: ``ret``."""
    _vmm().free_physical(handle)


@_face()
def map_mem(vir_ptr: int, size: int, offset: int, handle: int, flags: int) -> None:
    """aclrtMapMem: ``ret`` (rt_memory.cpp: ``"kkkkK"``)."""
    _vmm().map_mem(vir_ptr, size, offset, handle, flags)


@_face()
def unmap_mem(vir_ptr: int) -> None:
    """aclrtUnmapMem: ``ret``."""
    _vmm().unmap_mem(vir_ptr)


@_face(0)
def mem_get_allocation_granularity(prop: Any, option: int) -> int:
    """aclrtMemGetAllocationGranularity: ``granularity, ret`` (rt_memory.cpp: ``"Oi"``)."""
    return _vmm().mem_get_allocation_granularity(prop, option)


class _NoAttributes(dict):
    """The attributes a failed call returns: rt_memory.cpp builds the dict from the zeroed
    struct whatever the code (the face makes a fresh one per failed call, by calling the
    default's type)."""

    def __init__(self) -> None:
        super().__init__(location={"id": 0, "type": 0}, page_size=0, rsv=[0, 0, 0, 0])


@_face(_NoAttributes())
def pointer_get_attributes(ptr: int) -> dict:
    """aclrtPointerGetAttributes: ``attributes, ret`` with attributes a dict
    ``{"location": {"id", "type"}, "page_size", "rsv"}`` (rt_memory.cpp builds it even when
    the call fails: then its fields are 0)."""
    return _vmm().pointer_get_attributes(ptr)


@_face(0)
def reserve_mem_address_no_uc_memory(size: int, alignment: int, expect_ptr: int,
                                     flags: int) -> int:
    """aclrtReserveMemAddressNoUCMemory (not in pyacl; Atlas A3 only): ``vir_ptr, ret``."""
    return _vmm().reserve_mem_address_no_uc_memory(size, alignment, expect_ptr, flags)


@_face()
def mem_map_no_access(vir_ptr: int, size: int, offset: int, handle: int, flags: int) -> None:
    """aclrtMemMapNoAccess (not in pyacl): ``ret``; access needs mem_set_access first."""
    _vmm().mem_map_no_access(vir_ptr, size, offset, handle, flags)


@_face()
def mem_set_access(vir_ptr: int, size: int, desc: Any, count: int) -> None:
    """aclrtMemSetAccess (not in pyacl): ``ret``; ``desc`` a list of
    ``{"flags", "location": {"id", "type"}}`` (aclrtMemAccessDesc)."""
    _vmm().mem_set_access(vir_ptr, size, desc, count)


@_face(0)
def mem_get_access(vir_ptr: int, location: Any) -> int:
    """aclrtMemGetAccess (not in pyacl): ``flags, ret``; ``location`` ``{"id", "type"}``."""
    return _vmm().mem_get_access(vir_ptr, location)


@_face(0)
def mem_retain_allocation_handle(vir_ptr: int) -> int:
    """aclrtMemRetainAllocationHandle (not in pyacl): ``handle, ret`` (free it once more)."""
    return _vmm().mem_retain_allocation_handle(vir_ptr)


@_face(None)
def mem_get_allocation_properties_from_handle(handle: int) -> dict:
    """aclrtMemGetAllocationPropertiesFromHandle (not in pyacl): ``prop, ret``."""
    return _vmm().mem_get_allocation_properties_from_handle(handle)


@_face(0, 0)
def mem_get_address_range(ptr: int) -> tuple[int, int]:
    """aclrtMemGetAddressRange (not in pyacl): ``base, size, ret``."""
    return _vmm().mem_get_address_range(ptr)
