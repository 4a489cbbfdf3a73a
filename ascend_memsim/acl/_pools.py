"""acl.rt's stream-ordered memory pool calls (the vendor chapter 11-10).

pyacl binds none of them (hicann/runtime ``python/pyACL/rt/pyrt_methods.cpp`` has no
aclrtMemPool* entry): the simulator offers them under the pyacl-style names, each marked
**not in pyacl**, so that a program can be tested against the C API's rules; on hardware
such a call meets an AttributeError. Shapes follow pyacl's conventions: out-values first,
the code last; a struct (aclrtMemPoolProps) is a dict with the C field names.
"""

from __future__ import annotations

from typing import Any

from ..runtime.active import current_runtime
from ._face import face as _face

__all__ = ["mem_pool_create", "mem_pool_destroy", "mem_pool_set_attr", "mem_pool_get_attr",
           "mem_pool_malloc_async", "mem_pool_free_async", "mem_pool_trim_to"]

#: The functions pyacl does not bind: all of them.
NOT_IN_PYACL = tuple(__all__)


def _pools():
    return current_runtime().pools


@_face(0)
def mem_pool_create(pool_props: Any) -> int:
    """aclrtMemPoolCreate (not in pyacl): ``mem_pool, ret``; ``pool_props`` a dict
    ``{"allocType", "handleType", "location": {"id", "type"}, "maxSize", "reserved"}``."""
    return _pools().create(pool_props)


@_face()
def mem_pool_destroy(mem_pool: int) -> None:
    """aclrtMemPoolDestroy (not in pyacl): ``ret``."""
    _pools().destroy(mem_pool)


@_face()
def mem_pool_set_attr(mem_pool: int, attr: int, value: int) -> None:
    """aclrtMemPoolSetAttr (not in pyacl): ``ret``; ``value`` the attribute's integer (the C
    call's ``void *value`` points at a uint32_t or uint64_t)."""
    _pools().set_attr(mem_pool, attr, value)


@_face(0)
def mem_pool_get_attr(mem_pool: int, attr: int) -> int:
    """aclrtMemPoolGetAttr (not in pyacl): ``value, ret``."""
    return _pools().get_attr(mem_pool, attr)


@_face(0)
def mem_pool_malloc_async(size: int, mem_pool: int, stream: int) -> int:
    """aclrtMemPoolMallocAsync (not in pyacl): ``ptr, ret`` (the C order: ptr, size, memPool,
    stream)."""
    return _pools().malloc_async(size, mem_pool, stream)


@_face()
def mem_pool_free_async(ptr: int, stream: int) -> None:
    """aclrtMemPoolFreeAsync (not in pyacl): ``ret``."""
    _pools().free_async(ptr, stream)


@_face()
def mem_pool_trim_to(mem_pool: int, min_bytes_to_keep: int) -> None:
    """aclrtMemPoolTrimTo (not in pyacl): ``ret``."""
    _pools().trim_to(mem_pool, min_bytes_to_keep)
