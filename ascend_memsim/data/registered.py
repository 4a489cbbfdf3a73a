"""Registered host buffers: the bytes, bytearray and numpy arrays user code hands in
(``acl.util.bytes_to_ptr`` / ``numpy_to_ptr``), each known by a simulated address.

A registration holds the buffer object, keeping it alive; :meth:`Registration.orphaned` tells
when user code has let go of it. Its bytes are read and written through the buffer protocol,
as numpy does, except for a buffer that lies in a memory map (numpy over ``mmap``): a file
mapping's pages vanish when the file shrinks, so those bytes move through
:mod:`ascend_memsim.data.raw` and a vanished page is an error, never a SIGBUS.
"""

from __future__ import annotations

import ctypes
import mmap
import sys
from dataclasses import dataclass, field
from typing import Any, cast

from ..memory.errors import InternalError, InvalidPointer
from . import raw
from .contents import HostRegion, Region, fill_view

__all__ = ["Registration", "bytes_address", "in_a_memory_map"]

_BYTES_DATA_OFFSET = bytes.__basicsize__ - 1


@dataclass(eq=False)
class Registration(HostRegion):
    """A host buffer (bytes, bytearray, numpy array) that user code handed in.

    ``span`` is the buffer's length when it was registered (the addresses reserved for it);
    ``size`` is what of it still exists: a bytearray can shrink after registration, and an
    access past its current length is out of bounds.
    """

    ptr: int
    span: int
    #: bytes, a bytearray or a numpy array (optional, so duck-typed: Any)
    obj: Any = field(repr=False)
    kind: str = "bytes"
    serial: int = 0
    extra: dict[str, Any] | None = field(default=None, repr=False)
    #: the buffer lies in a memory map (numpy over ``mmap``): a file mapping's pages vanish
    #: when the file shrinks, so its bytes move through :mod:`raw`, never by a load
    raw_io: bool = False

    @property
    def size(self) -> int:
        obj = self.obj
        if obj is None:
            return self.span
        now = len(obj) if isinstance(obj, (bytes, bytearray)) else obj.nbytes
        return min(now, self.span)

    @property
    def limit(self) -> int:
        return self.size

    def describe(self) -> str:
        size = self.size
        now = f", now {size} bytes long" if size != self.span else ""
        return f"{self.span}-byte registered host buffer at {self.ptr:#x} ({self.kind}{now})"

    def orphaned(self) -> bool:
        """True when nothing but the registration keeps the buffer's memory alive.

        Walks from the registered object to the object that owns the memory (a numpy view's
        ``base``, a memoryview's ``obj``): each link is held once by the link before it (the
        first by ``obj``), so any further reference (user code, another view of the same
        array) means the memory is still held (views of one array registered separately
        hold its owner for each other: a missed report, never a false one). Counts per
        link: the holder, the local variable, and getrefcount's own argument. Immortal
        objects (CPython 3.12+) never look orphaned.
        """
        obj = self.obj
        while obj is not None:
            if sys.getrefcount(obj) > 3:
                return False
            obj = _memory_owner(obj)
        return True

    def _memory(self) -> memoryview:
        obj = self.obj
        if type(obj) is bytes:
            # Real pyacl writes into the bytes object's buffer; so do we (bounds: self.span).
            # The ctypes array holds the bytes object, so a view made from it (ptr_to_numpy)
            # keeps the object alive, and the registration is not orphaned while it lives.
            array = (ctypes.c_char * self.span).from_address(id(obj) + _BYTES_DATA_OFFSET)
            array.keep = obj  # type: ignore[attr-defined]  # a ctypes instance takes attributes
            return memoryview(array).cast("B")
        return memoryview(obj).cast("B")

    def view(self, offset: int, count: int) -> memoryview | None:
        """A writable view of the bytes; None for a memory-mapped buffer (see ``raw_io``)."""
        view = self._memory()
        if view.readonly:
            raise InvalidPointer(f"the {self.describe()} is read-only")
        return None if self.raw_io else view[offset:offset + count]

    def direct_view(self, offset: int, count: int) -> memoryview:
        """The buffer's own bytes (ptr_to_numpy: as safe as the user's buffer itself)."""
        view = self._memory()
        if view.readonly:
            raise InvalidPointer(f"the {self.describe()} is read-only")
        return view[offset:offset + count]

    def source(self, offset: int, count: int) -> memoryview:
        if self.raw_io:
            return memoryview(raw.read(self._address() + offset, count))
        return self._memory()[offset:offset + count]

    def write(self, offset: int, data: memoryview) -> None:
        if self.raw_io:
            self.view(offset, len(data))  # refuses a read-only buffer
            raw.write(self._address() + offset, data)
        else:
            self.direct_view(offset, len(data))[:] = data

    def fill(self, offset: int, count: int, value: int) -> None:
        if self.raw_io:
            self.view(offset, count)
            raw.fill(self._address() + offset, count, value)
        else:
            fill_view(self.direct_view(offset, count), value)

    def copy_from(self, source: Region, src_off: int, dst_off: int, count: int) -> None:
        """Copy from a region that gives no view (device memory) into a mapped buffer."""
        self.write(dst_off, memoryview(source.read(src_off, count)))

    def _address(self) -> int:
        """The real address of a memory-mapped numpy buffer's data."""
        return int(self.obj.__array_interface__["data"][0])

    def first_gap(self, offset: int, count: int) -> None:
        """A buffer user code made counts as written throughout."""
        return


def in_a_memory_map(obj: object) -> bool:
    """True when the memory ``obj`` views belongs to an ``mmap.mmap`` (numpy.frombuffer
    over a map)."""
    while obj is not None:
        if isinstance(obj, mmap.mmap):
            return True
        obj = _memory_owner(obj)
    return False


def _memory_owner(obj: object) -> object:
    """The object a numpy view or memoryview takes its memory from, or None."""
    if isinstance(obj, memoryview):
        try:
            return obj.obj
        except ValueError:  # released
            return None
    if type(obj).__name__ == "ndarray":
        return cast(Any, obj).base
    return None


def bytes_address(obj: bytes) -> int:
    """The data address of a bytes object, checked two ways.

    Raises:
        InternalError: the interpreter lays bytes out differently than expected.
    """
    by_ctypes = ctypes.cast(ctypes.c_char_p(obj), ctypes.c_void_p).value
    by_layout = id(obj) + _BYTES_DATA_OFFSET
    if by_ctypes != by_layout:
        raise InternalError("cannot locate the data of a bytes object on this interpreter "
                            f"({by_ctypes:#x} != {by_layout:#x})")
    return by_layout
