"""Host memory: aclrtMallocHost blocks, the host buffers user code hands in, and raw host
addresses the process has mapped.

An aclrtMallocHost block is real host memory the simulator owns, at its real address, so
``ctypes.memmove``, ``ctypes.string_at`` and ``numpy.ctypeslib.as_array`` work on it as on
hardware, and what they write is what ``memcpy`` reads. DECISION: a fresh block holds a
fixed 64-byte poison pattern (hardware gives whatever was there), and bytes never written by
a simulated call count as written once they differ from the poison: a ``ctypes`` write is
invisible to the simulator, so the initcheck compares the bytes (writing exactly the poison
through ctypes and reading it back is reported as uninitialised). Freed host blocks are
kept allocated (up to :data:`FREED_KEEP_BYTES`, oldest dropped first), so a stale ``ctypes``
write soon after ``free_host`` lands in dead memory the simulator owns, not in the
interpreter's heap.

DECISION: a buffer handed in with ``bytes_to_ptr`` or ``numpy_to_ptr`` gets a *simulated*
address in the registered window ``[REGISTERED_BASE, DEVICE_SPAN)``, not its real one, so its
life can be followed (see below). Any other host address (``arr.ctypes.data``, a ctypes
buffer, a tensor's ``data_ptr()``) is accepted by memcpy and memset, as hardware accepts it,
when the whole range lies in memory the process has mapped with the access needed (read, or
write), checked in ``/proc/self/maps`` without dereferencing; an unmapped or read-only range
is the runtime's code, never a crash (where ``/proc/self/maps`` does not exist, such
addresses are refused). The sanitizer notes each copy through such memory
(``Sanitizer.notes``): it cannot see its bounds. Known memory is looked up first: host
blocks and registrations, then live device blocks, and only then the process's mappings, so
a real address that falls inside a device's simulated window still works. DECISION: an
access into a freed aclrtMallocHost block still kept is a use after free; one that starts
past a live host block's end, in other mapped memory, is accepted with a note (the
simulator cannot tell it from a buffer of the program's own).

A registration holds the buffer object, keeping it alive. When user code has dropped every
reference of its own (the registration holds the last one), the buffer counts as freed: the
next access through its address is a use after free and the registration is dropped.

The vendor's samples copy device data into an immutable ``bytes`` object reached through
``bytes_to_ptr`` and read it back with ``np.frombuffer``; real pyacl writes there, so the
simulator does too, through ctypes at the object's verified data address.

Size: over 600 lines, on purpose: host blocks, registrations and raw mapped ranges share
_HostRegion and HostMemory's lookups; a separate module for the raw ranges would import this
one and be imported by it.
"""

from __future__ import annotations

import collections
import ctypes
import sys
import threading
from dataclasses import dataclass, field

from sortedcontainers import SortedList

from ..memory.args import as_int, as_ptr, as_size, int_or_none, shown
from ..memory.constants import RunMode
from ..memory.errors import (
    InternalError,
    InvalidArgument,
    InvalidArgumentType,
    InvalidPointer,
    OutOfHostMemory,
)
from ..memory.rules import DEVICE_SPAN
from ..memory.sites import capture_site
from .contents import Runs, fill_view, zeroed_buffer

__all__ = [
    "HOST_ALIGN",
    "REGISTERED_BASE",
    "FREED_KEEP_BYTES",
    "POISON",
    "ForeignRegion",
    "HostBlock",
    "HostMemory",
    "Registration",
    "mapped",
]

#: First registered-buffer address; the window runs up to the first device (2**44).
REGISTERED_BASE = 1 << 43
#: Freed aclrtMallocHost memory kept allocated (not given back), at most this many bytes.
FREED_KEEP_BYTES = 64 << 20
#: What a fresh aclrtMallocHost block holds, repeated from its first byte.
POISON = bytes((0xA5 ^ (i * 37)) & 0xFF for i in range(64))


def _poison(start: int, count: int) -> bytes:
    """The poison bytes of offsets ``[start, start + count)`` of a host block."""
    skip = start % len(POISON)
    return (POISON * ((skip + count) // len(POISON) + 1))[skip:skip + count]


def _fill_poison(view: memoryview) -> None:
    slab = POISON * 16384  # 1 MiB
    for at in range(0, len(view), len(slab)):
        piece = view[at:at + len(slab)]
        piece[:] = slab[:len(piece)]
#: aclrtMallocHost memory is 64-byte aligned (api_ref 11-02, aclrtMallocHost).
HOST_ALIGN = 64
# Registered buffers start on a page and are kept a page apart, so an overrun lands nowhere.
_REG_ALIGN = 4096
_BYTES_DATA_OFFSET = bytes.__basicsize__ - 1


class _HostRegion:
    """What host blocks and registered buffers share: bounds, site, reads and writes.

    Subclasses give ``ptr``, ``limit``, ``extra`` and ``_memory()`` (the bytes as a memoryview).
    """

    host = True
    readonly = False

    @property
    def base(self) -> int:
        return self.ptr

    @property
    def end(self) -> int:
        return self.ptr + self.limit

    def site(self):
        return None if self.extra is None else self.extra.get("site")

    def view(self, offset: int, count: int) -> memoryview:
        return self._memory()[offset:offset + count]

    def source(self, offset: int, count: int) -> memoryview:
        return self._memory()[offset:offset + count]

    def read_into(self, offset: int, out: memoryview) -> None:
        out[:] = self._memory()[offset:offset + len(out)]

    def read(self, offset: int, count: int) -> bytes:
        return bytes(self._memory()[offset:offset + count])

    def write(self, offset: int, data: memoryview) -> None:
        self.view(offset, len(data))[:] = data

    def fill(self, offset: int, count: int, value: int) -> None:
        fill_view(self.view(offset, count), value)


@dataclass(eq=False)
class HostBlock(_HostRegion):
    """An aclrtMallocHost block: real host bytes, 64-byte aligned.

    ``buf`` is an anonymous memory map for a big block (the OS backs it page by page on first
    touch, as device contents are), a bytearray for a small one.
    """

    ptr: int
    size: int
    footprint: int
    serial: int
    buf: bytearray | object = field(repr=False)
    #: where the 64-byte aligned block starts in ``buf``
    skew: int = 0
    written: Runs = field(default_factory=Runs, repr=False)
    extra: dict | None = field(default=None, repr=False)
    #: the ctypes view that pins ``buf`` (a bytearray with an export cannot move)
    pin: object = field(default=None, repr=False)

    @property
    def limit(self) -> int:
        return self.footprint

    def describe(self) -> str:
        return f"{self.size}-byte host block at {self.ptr:#x} (aclrtMallocHost)"

    def _memory(self) -> memoryview:
        return memoryview(self.buf)[self.skew:self.skew + self.footprint]

    def view(self, offset: int, count: int) -> memoryview:
        self.written.add(offset, offset + count)
        return self._memory()[offset:offset + count]

    def first_gap(self, offset: int, count: int) -> tuple[int, int] | None:
        """The first run never written, by the simulator or (non-zero bytes) through ctypes."""
        while True:
            gap = self.written.first_gap(offset, offset + count)
            if gap is None:
                return None
            start, end = gap
            if self._memory()[start:end] == _poison(start, end - start):
                return gap
            self.written.add(start, end)


class ForeignRegion(_HostRegion):
    """Host memory the simulator did not hand out, at its real address (checked mapped).

    Its bounds are unknown: the region is exactly the access.
    """

    extra = None

    def __init__(self, addr: int, count: int, writable: bool) -> None:
        self.ptr = addr
        self.size = count
        self.writable = writable

    @property
    def limit(self) -> int:
        return self.size

    def describe(self) -> str:
        return (f"{self.size}-byte range of unregistered host memory at {self.ptr:#x} "
                f"(mapped by the process; its bounds are not known to the simulator)")

    def _memory(self) -> memoryview:
        return memoryview((ctypes.c_char * self.size).from_address(self.ptr)).cast("B")

    def view(self, offset: int, count: int) -> memoryview:
        if not self.writable:
            raise InvalidPointer(f"the {self.describe()} is not writable")
        return self._memory()[offset:offset + count]

    def first_gap(self, offset: int, count: int) -> None:
        return


_MAPS = "/proc/self/maps"


def mapped(addr: int, count: int, write: bool) -> bool:
    """True when ``[addr, addr + count)`` lies in mappings of this process that are readable
    (and writable, for ``write``), read from ``/proc/self/maps`` (never by touching it).
    False where that file does not exist."""
    if addr <= 0 or count <= 0:
        return False
    try:
        with open(_MAPS, encoding="ascii") as f:
            lines = f.read().splitlines()
    except OSError:
        return False
    at, end = addr, addr + count
    for line in lines:
        span, perms = line.split(None, 2)[:2]
        lo, hi = (int(x, 16) for x in span.split("-"))
        if hi <= at:
            continue
        if lo > at:
            return False  # a hole before the range is covered
        if perms[0] != "r" or (write and perms[1] != "w"):
            return False
        at = hi
        if at >= end:
            return True
    return False


@dataclass(eq=False)
class Registration(_HostRegion):
    """A host buffer (bytes, bytearray, numpy array) that user code handed in.

    ``span`` is the buffer's length when it was registered (the addresses reserved for it);
    ``size`` is what of it still exists: a bytearray can shrink after registration, and an
    access past its current length is out of bounds.
    """

    ptr: int
    span: int
    obj: object = field(repr=False)
    kind: str = "bytes"
    serial: int = 0
    extra: dict | None = field(default=None, repr=False)

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
            array.keep = obj
            return memoryview(array).cast("B")
        return memoryview(obj).cast("B")

    def view(self, offset: int, count: int) -> memoryview:
        view = self._memory()
        if view.readonly:
            raise InvalidPointer(f"the {self.describe()} is read-only")
        return view[offset:offset + count]

    def first_gap(self, offset: int, count: int) -> None:
        """A buffer user code made counts as written throughout."""
        return


def _memory_owner(obj: object) -> object:
    """The object a numpy view or memoryview takes its memory from, or None."""
    if isinstance(obj, memoryview):
        try:
            return obj.obj
        except ValueError:  # released
            return None
    if type(obj).__name__ == "ndarray":
        return obj.base
    return None


def _bytes_address(obj: bytes) -> int:
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


class HostMemory:
    """The host side of one runtime: aclrtMallocHost blocks and registered buffers.

    Thread-safe (one lock). Lookups are O(log n) in the live regions.
    """

    def __init__(self) -> None:
        self.lock = threading.RLock()
        #: freed host blocks kept allocated (see FREED_KEEP_BYTES), and their bytes
        self._freed: collections.deque[HostBlock] = collections.deque()
        self._freed_bytes = 0
        self._regions: dict[int, HostBlock | Registration] = {}
        self._starts = SortedList()
        self._by_id: dict[int, Registration] = {}
        self._next_reg = REGISTERED_BASE
        self._serial = 0
        self._sweep_at = 64
        #: keep each block's allocation site in ``extra["site"]`` (the sanitizer turns it on)
        self.record_sites = False
        #: called with each registration dropped because user code let go of its buffer
        self.on_forget = None

    # -- aclrtMallocHost / aclrtFreeHost -------------------------------------------------------

    def malloc_host(self, size: object) -> HostBlock:
        """aclrtMallocHost: ``size`` bytes of host memory, 64-byte aligned.

        Raises:
            InvalidArgument, InvalidArgumentType: size 0 or not an int.
            OutOfHostMemory: the host window or the process is out of memory.
        """
        size = as_size(size)
        footprint = -(-size // HOST_ALIGN) * HOST_ALIGN
        with self.lock:
            try:
                buf = zeroed_buffer(footprint + HOST_ALIGN)
                pin = (ctypes.c_char * (footprint + HOST_ALIGN)).from_buffer(buf)
            except (MemoryError, OverflowError, OSError, ValueError):
                raise OutOfHostMemory(f"cannot allocate {size} bytes of host memory") from None
            base = ctypes.addressof(pin)
            skew = -base % HOST_ALIGN
            self._serial += 1
            block = HostBlock(base + skew, size, footprint, self._serial, buf, skew, pin=pin)
            _fill_poison(block._memory())
            if self.record_sites:
                block.extra = {"site": capture_site()}
            self._add(block)
            return block

    def free_host(self, ptr: int) -> HostBlock:
        """aclrtFreeHost: release the host block that starts at ``ptr``.

        Raises:
            InvalidPointer: not the start of a live aclrtMallocHost block.
        """
        with self.lock:
            block = self._regions.get(ptr)
            if not isinstance(block, HostBlock):
                raise InvalidPointer(f"{ptr:#x} is not the start of a live aclrtMallocHost "
                                     f"block")
            self._remove(block)
            self._freed.append(block)
            self._freed_bytes += block.footprint
            while self._freed_bytes > FREED_KEEP_BYTES:
                self._freed_bytes -= self._freed.popleft().footprint
            return block

    # -- registered buffers --------------------------------------------------------------------

    def register(self, obj: object) -> Registration:
        """The registration of a bytes, bytearray or C-contiguous numpy array (made once).

        Raises:
            InvalidArgumentType: another type, or a numpy array that is not C-contiguous.
        """
        kind = type(obj).__name__
        if type(obj) is bytes:
            size = len(obj)
            if size < 2:
                # CPython shares b"" and one-byte bytes objects: writing them would change
                # every such constant in the process.
                raise InvalidArgumentType("bytes_to_ptr needs a bytes object of at least "
                                          "2 bytes (shorter ones are shared singletons)")
            _bytes_address(obj)
        elif isinstance(obj, bytearray):
            size = len(obj)
        elif kind == "ndarray":
            if obj.dtype.hasobject:
                raise InvalidArgumentType("a numpy array of Python objects holds references, "
                                          "not data: it cannot be copied to a device")
            if not obj.flags["C_CONTIGUOUS"]:
                raise InvalidArgumentType("numpy array must be C-contiguous")
            size = obj.nbytes
        else:
            raise InvalidArgumentType(f"expected bytes, bytearray or numpy.ndarray, got {kind}")
        with self.lock:
            found = self._by_id.get(id(obj))
            if found is not None and found.obj is obj:
                if found.span == size:
                    return found
                # The buffer changed length since (a bytearray): the old registration is stale.
                self.unregister(found)
            if len(self._by_id) >= self._sweep_at:
                self.sweep()
            ptr = self._next_reg
            span = max(size, 1)
            self._next_reg = ptr + -(-span // _REG_ALIGN) * _REG_ALIGN + _REG_ALIGN
            if self._next_reg >= DEVICE_SPAN:
                raise OutOfHostMemory("the registered host window is used up")
            self._serial += 1
            reg = Registration(ptr, size, obj, kind, self._serial)
            if self.record_sites:
                reg.extra = {"site": capture_site()}
            self._by_id[id(obj)] = reg
            self._add(reg)
            return reg

    def unregister(self, reg: Registration) -> None:
        """Forget a registration (its address becomes unknown)."""
        with self.lock:
            if self._regions.get(reg.ptr) is reg:
                self._remove(reg)
            if self._by_id.get(id(reg.obj)) is reg:
                del self._by_id[id(reg.obj)]

    def sweep(self) -> list[Registration]:
        """Drop registrations whose buffer user code no longer holds; the dropped ones."""
        with self.lock:
            gone = [r for r in self._by_id.values() if r.orphaned()]
            for reg in gone:
                self.unregister(reg)
                if self.on_forget is not None:
                    self.on_forget(reg)
            self._sweep_at = max(64, 2 * len(self._by_id))
            return gone

    # -- lookups -------------------------------------------------------------------------------

    def region_at(self, addr: int) -> HostBlock | Registration | None:
        """The live host region whose footprint holds ``addr``, or None. O(log n)."""
        with self.lock:
            i = self._starts.bisect_right(addr)
            if not i:
                return None
            region = self._regions[self._starts[i - 1]]
            span = region.span if isinstance(region, Registration) else region.limit
            if addr >= region.ptr + max(span, 1):
                return None
            if isinstance(region, Registration) and region.orphaned():
                self.unregister(region)
                if self.on_forget is not None:
                    self.on_forget(region)
                return None
            return region

    def foreign(self, addr: int, count: int, write: bool) -> ForeignRegion | None:
        """The access as a :class:`ForeignRegion` when the process has that range mapped
        (readable; writable for ``write``), else None. Never touches the memory.

        An access that touches a freed aclrtMallocHost block still kept allocated is None
        (a use after free, not foreign memory). O(kept freed blocks) plus reading the maps.
        """
        with self.lock:
            for block in self._freed:
                if addr < block.ptr + block.footprint and block.ptr < addr + count:
                    return None
        return ForeignRegion(addr, count, write) if mapped(addr, count, write) else None

    def blocks(self) -> list[HostBlock]:
        """Live aclrtMallocHost blocks, by address."""
        with self.lock:
            return [r for r in (self._regions[p] for p in self._starts)
                    if isinstance(r, HostBlock)]

    def registrations(self) -> list[Registration]:
        with self.lock:
            return list(self._by_id.values())

    def clear(self) -> list[HostBlock]:
        """Forget everything (aclFinalize); the aclrtMallocHost blocks still live."""
        with self.lock:
            if not self._regions and not self._serial and self._next_reg == REGISTERED_BASE:
                return []  # never used: nothing to rebuild
            live = self.blocks()
            record_sites, on_forget = self.record_sites, self.on_forget
            self.__init__()
            self.record_sites, self.on_forget = record_sites, on_forget
            return live

    def _add(self, region: HostBlock | Registration) -> None:
        self._regions[region.ptr] = region
        self._starts.add(region.ptr)

    def _remove(self, region: HostBlock | Registration) -> None:
        del self._regions[region.ptr]
        self._starts.remove(region.ptr)


# -- pyacl's acl.util conversions ----------------------------------------------------------------

#: The largest numpy index (intp on a 64-bit host).
_INTP_MAX = (1 << 63) - 1

#: ptr_to_numpy type codes (pyacl docs, function-ptr_to_numpy) -> numpy dtype names.
NPY_TYPES = {0: "bool", 1: "int8", 2: "uint8", 3: "int16", 4: "uint16", 5: "int32",
             6: "uint32", 7: "int64", 8: "uint64", 9: "longlong", 10: "ulonglong",
             11: "float32", 12: "float64", 23: "float16"}


def bytes_to_ptr(runtime, data: object) -> int:
    """acl.util.bytes_to_ptr: the (simulated) address of a bytes or bytearray buffer.

    The buffer stays registered, and alive, while user code holds it.

    Raises:
        InvalidArgumentType: not bytes or bytearray (or a bytes object shorter than 2).
    """
    if not isinstance(data, (bytes, bytearray)):
        raise InvalidArgumentType(f"bytes_to_ptr takes bytes, got {type(data).__name__}")
    return runtime.host.register(data).ptr


def numpy_to_ptr(runtime, array: object) -> int:
    """acl.util.numpy_to_ptr: the (simulated) address of a numpy array's data.

    As pyacl does, an array that is not C-contiguous is copied first; the copy is held by
    no one, so its address dangles at once (as on hardware).

    Raises:
        InvalidArgumentType: not a numpy array, or an array of Python objects (dtype object,
            or a structured dtype with object fields).
    """
    if type(array).__name__ != "ndarray":
        raise InvalidArgumentType(f"numpy_to_ptr takes a numpy.ndarray, got "
                                  f"{type(array).__name__}")
    if array.dtype.hasobject:
        # Its bytes are PyObject pointers: copying them to or from the device corrupts the
        # interpreter (pyacl hands out the raw buffer; refusing is the simulator's check).
        raise InvalidArgumentType(f"numpy_to_ptr: an array of dtype {array.dtype} holds Python "
                                  f"objects (their pointers), not data; convert it to a "
                                  f"numeric dtype")
    if not array.flags["C_CONTIGUOUS"]:
        array = array.copy(order="C")
    return runtime.host.register(array).ptr


def _host_region(runtime, call: str, ptr: object, size: int, write: bool):
    """(region, offset) of host memory at ``ptr``; device memory is refused before the
    sanitizer looks at the access (nothing is read, so there is nothing to report)."""
    ptr = as_ptr(ptr)
    data = runtime.data
    with data.lock:
        region = data.region_at(ptr)
        if region is not None and not region.host and runtime.run_mode is not RunMode.DEVICE:
            raise InvalidPointer(f"{call}: {ptr:#x} is device memory; the host cannot read it "
                                 f"directly (copy it with memcpy first, or simulate a program "
                                 f"that runs on the device: run_mode 'device')")
        return data.resolve(call, ptr, size, write=write)


def ptr_to_bytes(runtime, ptr: object, size: object) -> bytes:
    """acl.util.ptr_to_bytes: ``size`` bytes of host memory at ``ptr``, as a new bytes object.

    Raises:
        InvalidPointer: not inside a live host block or registered buffer, or past its end.
    """
    size = as_int(size, "size")
    if size == 0:
        return b""
    region, offset = _host_region(runtime, "ptr_to_bytes", ptr, size, write=False)
    if not region.host:  # ACL_DEVICE run mode: device memory read directly
        return bytes(region.read(offset, size))
    return bytes(region.source(offset, size))


def ptr_to_numpy(runtime, ptr: object, shape: object, type_code: object):
    """acl.util.ptr_to_numpy: a numpy array over host memory at ``ptr`` (shares the memory).

    ``type_code`` is pyacl's int code (11 = float32, see :data:`NPY_TYPES`) or a dtype.
    DECISION: the returned array is writable, so the host block counts as written.

    Raises:
        InvalidArgument: an unknown type code, a dtype of Python objects, a shape that is not an
            int or a list/tuple of ints >= 0, or one numpy cannot index.
        InvalidArgumentType: a dimension that is not an int.
        InvalidPointer: as ptr_to_bytes.
    """
    import numpy  # optional: only this conversion needs it

    code = int_or_none(type_code)
    if code is not None:
        if code not in NPY_TYPES:
            raise InvalidArgument(f"type code {code} is not one of {sorted(NPY_TYPES)}")
        dtype = numpy.dtype(NPY_TYPES[code])
    else:
        try:
            dtype = numpy.dtype(type_code)
        except Exception:  # e.g. '1/0', {'x': 1}, an object whose __repr__ raises
            raise InvalidArgument(f"np_type {shown(type_code)} is not a numpy type") from None
    if dtype.hasobject:
        raise InvalidArgument(f"ptr_to_numpy: dtype {dtype} holds Python object pointers; host "
                              f"memory holds only data")
    length = int_or_none(shape)
    if length is not None:
        given: tuple = (length,)
    elif isinstance(shape, (list, tuple)):
        given = tuple(shape)
    elif type(shape).__name__ == "ndarray" and shape.ndim == 1:
        given = tuple(shape.tolist())
    else:
        raise InvalidArgument(f"shape {shown(shape)} is neither an int nor a list, tuple or 1-D "
                              f"array of ints")
    # numpy's own limit: each dimension, and the product of the non-zero ones, fit in intp
    # (numpy.empty((0, 2**63)) raises ValueError).
    dims = tuple(as_int(d, f"shape[{i}]", 0, _INTP_MAX) for i, d in enumerate(given))
    count, nonzero = 1, 1
    for d in dims:
        count *= d
        nonzero *= max(d, 1)
    if nonzero * dtype.itemsize > _INTP_MAX or len(dims) > 64:
        raise InvalidArgument(f"shape {dims} of {dtype} is larger than numpy can index "
                              f"(at most 64 dimensions, {_INTP_MAX} bytes)")
    size = count * dtype.itemsize
    if size == 0:
        return numpy.empty(dims, dtype)
    region, offset = _host_region(runtime, "ptr_to_numpy", ptr, size, write=True)
    view = region.view(offset, size) if region.host else region.direct_view(offset, size)
    return numpy.frombuffer(view, dtype=dtype).reshape(dims)


