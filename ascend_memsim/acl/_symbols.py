"""acl.rt's device variable calls (the vendor chapter 11-11).

pyacl binds none of them (hicann/runtime ``python/pyACL/rt/pyrt_methods.cpp`` has no
aclrtGetSymbol* or aclrtMemcpy*Symbol* entry): the simulator offers them under the
pyacl-style names, each marked **not in pyacl**, so that a program can be tested against the
C API's rules; on hardware such a call meets an AttributeError. A symbol is the int a
:func:`~ascend_memsim.compute.symbols.device_variable` declaration gives (it stands for the
address of the variable's host shadow, ``&var`` in C). Out-values first, the code last.
"""

from __future__ import annotations

from ..compute.symbols import symbols as _symbols
from ..runtime.active import current_runtime
from ._face import face as _face

__all__ = ["get_symbol_address", "get_symbol_size", "memcpy_from_symbol",
           "memcpy_from_symbol_async", "memcpy_to_symbol", "memcpy_to_symbol_async"]

#: The functions pyacl does not bind: all of them.
NOT_IN_PYACL = tuple(__all__)


def _table():
    return _symbols(current_runtime())


@_face(0)
def get_symbol_address(symbol: int) -> int:
    """aclrtGetSymbolAddress (not in pyacl): ``dev_ptr, ret``, the variable's address on the
    current device (loaded there on first use)."""
    return _table().address(symbol)


@_face(0)
def get_symbol_size(symbol: int) -> int:
    """aclrtGetSymbolSize (not in pyacl): ``size, ret``."""
    return _table().size(symbol)


@_face()
def memcpy_from_symbol(dst: int, dst_max: int, symbol: int, count: int, offset: int,
                       kind: int) -> None:
    """aclrtMemcpyFromSymbol (not in pyacl): ``ret``; kind ACL_MEMCPY_DEVICE_TO_HOST (2) or
    ACL_MEMCPY_DEFAULT (4); ``offset + count`` within the variable."""
    _table().copy_from(dst, dst_max, symbol, count, offset, kind)


@_face()
def memcpy_from_symbol_async(dst: int, dst_max: int, symbol: int, count: int, offset: int,
                             kind: int, stream: int) -> None:
    """aclrtMemcpyFromSymbolAsync (not in pyacl): ``ret``; queued on ``stream``."""
    _table().copy_from(dst, dst_max, symbol, count, offset, kind, stream)


@_face()
def memcpy_to_symbol(symbol: int, src: int, count: int, offset: int, kind: int) -> None:
    """aclrtMemcpyToSymbol (not in pyacl): ``ret``; kind ACL_MEMCPY_HOST_TO_DEVICE (1) or
    ACL_MEMCPY_DEFAULT (4); ``offset + count`` within the variable."""
    _table().copy_to(symbol, src, count, offset, kind)


@_face()
def memcpy_to_symbol_async(symbol: int, src: int, count: int, offset: int, kind: int,
                           stream: int) -> None:
    """aclrtMemcpyToSymbolAsync (not in pyacl): ``ret``; queued on ``stream``."""
    _table().copy_to(symbol, src, count, offset, kind, stream)
