"""acl.rt's cache operations beyond aclrtCmoAsync (the vendor chapter 11-06).

pyacl binds aclrtCmoAsync only (hicann/runtime ``python/pyACL/rt/pyrt_methods.cpp``): the
simulator offers the barrier and descriptor calls under the pyacl-style names, each marked
**not in pyacl**, so that a program can be tested against the C API's rules; on hardware
such a call meets an AttributeError. Shapes follow pyacl's conventions: out-values first,
the code last; a struct (aclrtBarrierTaskInfo) is a dict with the C field names. The
simulator models no cache: none of them changes data; each checks its range as an access.
"""

from __future__ import annotations

from typing import Any

from ..runtime.active import current_runtime
from ..runtime.cmo import cache_ops
from ._face import face as _face

__all__ = ["cmo_async_with_barrier", "cmo_wait_barrier", "cmo_get_desc_size", "cmo_set_desc",
           "cmo_async_with_desc"]

#: The functions pyacl does not bind: all of them.
NOT_IN_PYACL = tuple(__all__)


def _ops():
    return cache_ops(current_runtime())


@_face()
def cmo_async_with_barrier(src: int, size: int, cmo_type: int, barrier_id: int,
                           stream: int) -> None:
    """aclrtCmoAsyncWithBarrier (not in pyacl): ``ret``; an ACL_RT_CMO_TYPE_INVALID (2)
    operation carries a ``barrier_id`` above 0, every other type 0. Atlas 200I/500 A2 only."""
    _ops().cmo_async_with_barrier(src, size, cmo_type, barrier_id, stream)


@_face()
def cmo_wait_barrier(task_info: Any, stream: int, flag: int) -> None:
    """aclrtCmoWaitBarrier (not in pyacl): ``ret``; ``task_info`` a dict ``{"barrierNum": n,
    "cmoInfo": [{"cmoType": 2, "barrierId": id}, ...]}``, ``flag`` reserved (0)."""
    _ops().cmo_wait_barrier(task_info, stream, flag)


@_face(0)
def cmo_get_desc_size() -> int:
    """aclrtCmoGetDescSize (not in pyacl): ``size, ret``, the bytes of a CMO descriptor."""
    return _ops().desc_size()


@_face()
def cmo_set_desc(cmo_desc: int, src: int, size: int) -> None:
    """aclrtCmoSetDesc (not in pyacl): ``ret``; records ``src`` and ``size`` in the
    descriptor at ``cmo_desc`` (device memory of cmo_get_desc_size bytes)."""
    _ops().set_desc(cmo_desc, src, size)


@_face()
def cmo_async_with_desc(cmo_desc: int, cmo_type: int, stream: int, reserve: int) -> None:
    """aclrtCmoAsyncWithDesc (not in pyacl): ``ret``; the operation the descriptor names,
    read when the stream runs; ``reserve`` must be 0 (NULL)."""
    _ops().async_with_desc(cmo_desc, cmo_type, stream, reserve)
