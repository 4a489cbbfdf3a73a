"""acl.rt's managed (unified) memory calls and aclrtMemP2PMap (the vendor chapter 11-05).

pyacl binds none of them (hicann/runtime ``python/pyACL/rt/pyrt_methods.cpp`` has no
aclrtMemAllocManaged, aclrtMemManaged* or aclrtMemP2PMap entry; it binds
``pointer_get_attributes``, see _vmm.py): the simulator offers them under the pyacl-style
names, each marked **not in pyacl**, so that a program can be tested against the C API's
rules; on hardware such a call meets an AttributeError. Shapes follow pyacl's conventions:
out-values first, the code last; a struct (aclrtMemManagedLocation) is a dict ``{"type",
"id"}``; a C array a list, its length the C call's count where it has none.
"""

from __future__ import annotations

from typing import Any

from ..runtime.active import current_runtime
from ._face import face as _face

__all__ = ["mem_alloc_managed", "mem_managed_advise", "mem_managed_get_attr",
           "mem_managed_get_attrs", "mem_managed_prefetch_async",
           "mem_managed_prefetch_batch_async", "mem_p2p_map"]

#: The functions pyacl does not bind: all of them.
NOT_IN_PYACL = tuple(__all__)


def _managed():
    return current_runtime().managed


@_face(0)
def mem_alloc_managed(size: int, flag: int) -> int:
    """aclrtMemAllocManaged (not in pyacl): ``ptr, ret``; ``flag`` ACL_RT_MEM_ATTACH_GLOBAL
    (1). Free it with ``acl.rt.free``; the host reads and writes it with
    ``acl.util.ptr_to_bytes`` / ``ptr_to_numpy``, the devices with copies and operators."""
    return _managed().alloc(size, flag)


@_face()
def mem_managed_advise(ptr: int, size: int, advise: int, location: dict) -> None:
    """aclrtMemManagedAdvise (not in pyacl): ``ret``; ``location`` ``{"type", "id"}``."""
    _managed().advise(ptr, size, advise, location)


@_face(None)
def mem_managed_get_attr(attribute: int, ptr: int, size: int, data_size: int) -> Any:
    """aclrtMemManagedGetAttr (not in pyacl): ``data, ret``: an int (READ_MOSTLY, a
    location's type or id), a location dict, or a list of them (ACCESSED_BY)."""
    return _managed().get_attr(attribute, ptr, size, data_size)


@_face([])
def mem_managed_get_attrs(attributes: list, ptr: int, size: int, data_sizes: list) -> list:
    """aclrtMemManagedGetAttrs (not in pyacl): ``data, ret``, one value per attribute
    (numAttributes is ``len(attributes)``)."""
    return _managed().get_attrs(attributes, ptr, size, data_sizes)


@_face()
def mem_managed_prefetch_async(ptr: int, size: int, location: dict, flags: int,
                               stream: int) -> None:
    """aclrtMemManagedPrefetchAsync (not in pyacl): ``ret``."""
    _managed().prefetch_async(ptr, size, location, flags, stream)


@_face()
def mem_managed_prefetch_batch_async(ptrs: list, sizes: list, count: int, prefetch_locs: list,
                                     prefetch_loc_idxs: list, num_prefetch_locs: int,
                                     flags: int, stream: int) -> None:
    """aclrtMemManagedPrefetchBatchAsync (not in pyacl): ``ret``; ``prefetch_locs`` a list of
    location dicts."""
    _managed().prefetch_batch_async(ptrs, sizes, count, prefetch_locs, prefetch_loc_idxs,
                                    num_prefetch_locs, flags, stream)


@_face()
def mem_p2p_map(dev_ptr: int, size: int, dst_dev_id: int, flags: int) -> None:
    """aclrtMemP2PMap (not in pyacl): ``ret``."""
    _managed().p2p_map(dev_ptr, size, dst_dev_id, flags)
