"""acl.rt's custom allocator calls (the vendor chapter 11-08 and its descriptor calls).

pyacl binds every call but aclrtAllocatorGetByStream (hicann/runtime
``python/pyACL/rt/pyrt_methods.cpp``), through ``python/pyACL/rt/rt_allocator.cpp``, whose
behaviour this face keeps: the functions given to the ``allocator_set_*_func_to_desc`` calls
are called with the documented arguments (the size cut to 32 bits, the object the address of
a local variable), but what they return is discarded and the runtime gets NULL, so an
operator or model that takes workspace on a stream with such an allocator fails with
ACL_ERROR_RT_MEMORY_ALLOCATION 207001 and a message naming rt_allocator.cpp; and a function
set on one descriptor replaces that kind's function for every descriptor. The runtime layer
(``Runtime.custom_allocators``) offers the C semantics, return values honoured.
"""

from __future__ import annotations

from typing import Any

from ..runtime.active import current_runtime
from ._face import face as _face

__all__ = ["allocator_create_desc", "allocator_destroy_desc", "allocator_set_obj_to_desc",
           "allocator_set_alloc_func_to_desc", "allocator_set_free_func_to_desc",
           "allocator_set_alloc_advise_func_to_desc",
           "allocator_set_get_addr_from_block_func_to_desc", "allocator_register",
           "allocator_get_by_stream", "allocator_unregister"]

#: The functions pyacl does not bind.
NOT_IN_PYACL = ("allocator_get_by_stream",)


def _allocators():
    return current_runtime().custom_allocators


@_face(0, bare=True)
def allocator_create_desc() -> int:
    """aclrtAllocatorCreateDesc: the descriptor (pyacl returns just the handle)."""
    return _allocators().create_desc()


@_face()
def allocator_destroy_desc(allocator_desc: int) -> None:
    """aclrtAllocatorDestroyDesc: ``ret``."""
    _allocators().destroy_desc(allocator_desc)


@_face()
def allocator_set_obj_to_desc(allocator_desc: int, allocator: int) -> None:
    """aclrtAllocatorSetObjToDesc: ``ret``. As pyacl: the callbacks receive the address of
    the binding's local variable, not ``allocator`` (so 0 is accepted too)."""
    _allocators().set_pyacl_obj(allocator_desc, allocator)


@_face()
def allocator_set_alloc_func_to_desc(allocator_desc: int, func: Any) -> None:
    """aclrtAllocatorSetAllocFuncToDesc: ``ret``; ``func(allocator, size)`` is called, what
    it returns is discarded (pyacl)."""
    _allocators().set_pyacl_func(allocator_desc, "alloc", func)


@_face()
def allocator_set_free_func_to_desc(allocator_desc: int, func: Any) -> None:
    """aclrtAllocatorSetFreeFuncToDesc: ``ret``; ``func(allocator, block)``."""
    _allocators().set_pyacl_func(allocator_desc, "free", func)


@_face()
def allocator_set_alloc_advise_func_to_desc(allocator_desc: int, func: Any) -> None:
    """aclrtAllocatorSetAllocAdviseFuncToDesc: ``ret``; ``func(allocator, size, addr)``, what
    it returns is discarded (pyacl)."""
    _allocators().set_pyacl_func(allocator_desc, "alloc_advise", func)


@_face()
def allocator_set_get_addr_from_block_func_to_desc(allocator_desc: int, func: Any) -> None:
    """aclrtAllocatorSetGetAddrFromBlockFuncToDesc: ``ret``; ``func(block)``, what it returns
    is discarded (pyacl)."""
    _allocators().set_pyacl_func(allocator_desc, "get_addr", func)


@_face()
def allocator_register(stream: int, allocator_desc: int) -> None:
    """aclrtAllocatorRegister: ``ret``."""
    _allocators().register(stream, allocator_desc)


@_face(0, 0, None, None, None, None)
def allocator_get_by_stream(stream: int) -> tuple:
    """aclrtAllocatorGetByStream (not in pyacl): ``allocator_desc, allocator, alloc_func,
    free_func, alloc_advise_func, get_addr_from_block_func, ret`` (the functions as the
    runtime holds them: for a descriptor set through this face, pyacl's trampolines)."""
    return _allocators().get_by_stream(stream)


@_face()
def allocator_unregister(stream: int) -> None:
    """aclrtAllocatorUnregister: ``ret``."""
    _allocators().unregister(stream)
