"""Host memory: aclrtMallocHost blocks, the host buffers user code hands in, and raw host
addresses the process has mapped.

Three kinds of host address, one rule each:

* **aclrtMallocHost blocks** are real host memory the simulator owns, at their real address,
  so ``ctypes.memmove``, ``ctypes.string_at`` and ``numpy.ctypeslib.as_array`` work on them as
  on hardware, and what they write is what ``memcpy`` reads. Each block is an anonymous
  memory map of its own between two inaccessible guard pages (:func:`raw.guarded_map`), so a
  pointer that strays off a block lands in a guard page or in the map's slack, which the
  simulator refuses, never in the interpreter's heap. DECISION: a fresh block holds a fixed
  64-byte poison pattern (hardware gives whatever was there), and bytes never written by a
  simulated call count as written once they differ from the poison: a ``ctypes`` write is
  invisible to the simulator, so the initcheck compares the bytes (writing exactly the
  poison through ctypes and reading it back is reported as uninitialised). A block over
  :data:`EAGER_POISON` bytes is poisoned lazily, as device memory is made on first write:
  when a simulated call first touches a page that no one has touched yet (``pagemap``), so
  ``malloc_host(2**32)`` costs no time and no memory; ctypes reads such a page as zeros
  until then (and where pagemap cannot be read, a big block is never poisoned and the
  initcheck counts its bytes as written). Freed host blocks are kept mapped (up to
  :data:`FREED_KEEP_BYTES`, oldest dropped first), so a stale access soon after ``free_host``
  is a use after free, not a write into someone else's memory.

* **Registered buffers**: DECISION: a buffer handed in with ``bytes_to_ptr`` or
  ``numpy_to_ptr`` gets a *simulated* address in the registered window ``[REGISTERED_BASE,
  DEVICE_SPAN)`` (less managed memory's range, :data:`~ascend_memsim.memory.rules.UVM_BASE`),
  not its real one, so its life can be followed (see below); it is read and
  written through the buffer protocol, as numpy reads it, except an array over a memory map,
  whose bytes move as raw ones do (:mod:`ascend_memsim.data.registered`).

* **Raw addresses**: any other host address (``arr.ctypes.data``, a ctypes buffer, a tensor's
  ``data_ptr()``) is accepted by memcpy and memset, as hardware accepts it, when the whole
  range lies in memory the process has mapped with the access needed (read, or write),
  checked in ``/proc/self/maps``, and outside the storage the simulator keeps for host blocks
  (their slack and guard pages, freed blocks still kept). Anonymous private memory (the
  heap, numpy's and ctypes' buffers) is read directly, since a readable page there is
  always backed; any other mapping is reached only through ``/proc/self/mem``
  (:mod:`ascend_memsim.data.raw`), so a page that would fault (``[vvar]``, a file mapping
  past the end of a truncated file) is the runtime's code, never a crash; a write there is
  probed first, so a refused one changes nothing. Where ``/proc/self/maps`` does not
  exist, raw addresses are refused. The sanitizer notes each copy through such memory
  (``Sanitizer.notes``): it cannot see its bounds. Known memory is looked up first: host
  blocks and registrations, then live device blocks, and only then the process's mappings,
  so a real address that falls inside a device's simulated window still works. What the
  simulator cannot do is tell a raw address inside the program's buffer from one inside the
  interpreter's own objects: a wrong raw pointer into mapped, writable memory is written, as
  on hardware. ``acl.util.ptr_to_bytes`` / ``ptr_to_numpy`` take only the first two kinds.

A registration holds the buffer object, keeping it alive. When user code has dropped every
reference of its own (the registration holds the last one), the buffer counts as freed: the
next access through its address is a use after free and the registration is dropped.

The vendor's samples copy device data into an immutable ``bytes`` object reached through
``bytes_to_ptr`` and read it back with ``np.frombuffer``; real pyacl writes there, so the
simulator does too, through ctypes at the object's verified data address.
"""

from __future__ import annotations

import collections
import ctypes
import mmap
import threading
from dataclasses import dataclass, field
from typing import Any

from sortedcontainers import SortedList

from ..memory.args import as_size
from ..memory.errors import (
    InvalidArgumentType,
    InvalidPointer,
    OutOfHostMemory,
)
from ..memory.rules import DEVICE_SPAN, UVM_BASE, UVM_END
from ..memory.sites import capture_site
from . import raw
from .contents import HostRegion, Runs, fill_view, zeroed_buffer
from .raw import ForeignRegion
from .registered import Registration, bytes_address, in_a_memory_map

__all__ = [
    "HOST_ALIGN",
    "REGISTERED_BASE",
    "FREED_KEEP_BYTES",
    "FREED_KEEP_BLOCKS",
    "EAGER_POISON",
    "POISON",
    "HostBlock",
    "HostMemory",
    "Registration",
]

#: First registered-buffer address; the window runs up to the first device (2**44).
REGISTERED_BASE = 1 << 43
#: Freed aclrtMallocHost memory kept mapped (not given back), at most this many bytes...
FREED_KEEP_BYTES = 64 << 20
#: ... and at most this many blocks (each map costs the process a few of its mappings).
FREED_KEEP_BLOCKS = 1024
#: What a fresh aclrtMallocHost block holds, repeated from its first byte.
POISON = bytes((0xA5 ^ (i * 37)) & 0xFF for i in range(64))
#: Blocks up to this footprint are poisoned whole at aclrtMallocHost; bigger ones lazily.
EAGER_POISON = 1 << 20
#: aclrtMallocHost memory is 64-byte aligned (hicann/runtime
#: docs/zh/api_ref/11-02_host_memory_management.md, aclrtMallocHost).
HOST_ALIGN = 64
# Registered buffers start on a page and are kept a page apart, so an overrun lands nowhere.
_REG_ALIGN = 4096
_MADV_NOHUGEPAGE = getattr(mmap, "MADV_NOHUGEPAGE", None)
# Held while pages of a lazily poisoned block are settled (each page once, so rarely).
_SETTLE_LOCK = threading.Lock()


def _poison(start: int, count: int) -> bytes:
    """The poison bytes of offsets ``[start, start + count)`` of a host block."""
    skip = start % len(POISON)
    return (POISON * ((skip + count) // len(POISON) + 1))[skip:skip + count]


def _fill_poison(view: memoryview) -> None:
    """Poison ``view``, which starts at a block offset that is a multiple of 64."""
    if not len(view):
        return
    slab = POISON * min(16384, -(-len(view) // len(POISON)))  # at most 1 MiB
    for at in range(0, len(view), len(slab)):
        piece = view[at:at + len(slab)]
        piece[:] = slab[:len(piece)]


@dataclass(eq=False)
class HostBlock(HostRegion):
    """An aclrtMallocHost block: real host bytes, 64-byte aligned.

    ``buf`` is the block's own anonymous memory map between guard pages (a plain zeroed
    buffer where no guarded map can be made); the OS backs it page by page on first touch.
    """

    ptr: int
    size: int
    footprint: int
    serial: int
    buf: bytearray | mmap.mmap = field(repr=False)
    #: where the block starts in ``buf``
    skew: int = 0
    written: Runs = field(default_factory=Runs, repr=False)
    extra: dict[str, Any] | None = field(default=None, repr=False)
    #: the ctypes view that pins ``buf`` (a buffer with an export cannot move or close)
    pin: object = field(default=None, repr=False)
    #: ``[start, end)`` addresses the simulator keeps for the block (guard pages included)
    storage: tuple[int, int] = (0, 0)
    #: offsets whose pages were poisoned if no one had touched them; None: all settled
    settled: Runs | None = field(default=None, repr=False)
    #: False: a big block whose untouched pages cannot be found, never poisoned
    poisoned: bool = True

    @property
    def limit(self) -> int:
        return self.footprint

    def describe(self) -> str:
        return f"{self.size}-byte host block at {self.ptr:#x} (aclrtMallocHost)"

    def _memory(self) -> memoryview:
        return memoryview(self.buf)[self.skew:self.skew + self.footprint]

    def settle(self, offset: int, count: int, *, written: bool = False) -> None:
        """Poison the pages of ``[offset, offset + count)`` that no one has touched yet
        (a lazily poisoned block; each page once). ``written``: the range is about to count
        as written, so only its partly covered end pages need the poison.
        O(pages not yet settled)."""
        settled = self.settled
        if settled is None or count <= 0:
            return
        page = raw.PAGE
        # the whole pages inside the range (none when first >= last)
        first = -(-offset // page) * page if written else 0
        last = (offset + count) // page * page if written else 0
        with _SETTLE_LOCK:
            while True:
                gap = settled.first_gap(offset, offset + count)
                if gap is None:
                    return
                lo = gap[0] // page * page
                hi = min(-(-gap[1] // page) * page, self.footprint)
                memory = self._memory()
                for start, end in raw.untouched(self.ptr + lo, hi - lo) or ():
                    a, b = start - self.ptr, min(end - self.ptr, self.footprint)
                    if first < last:
                        _fill_poison(memory[a:max(a, min(b, first))])
                        a = max(a, last)
                    _fill_poison(memory[a:max(a, b)])
                settled.add(lo, hi)

    def view(self, offset: int, count: int) -> memoryview:
        self.settle(offset, count, written=True)
        self.written.add(offset, offset + count)
        return self._memory()[offset:offset + count]

    def source(self, offset: int, count: int) -> memoryview:
        self.settle(offset, count)
        return self._memory()[offset:offset + count]

    def write(self, offset: int, data: memoryview) -> None:
        self.view(offset, len(data))[:] = data

    def fill(self, offset: int, count: int, value: int) -> None:
        fill_view(self.view(offset, count), value)

    def first_gap(self, offset: int, count: int) -> tuple[int, int] | None:
        """The first run never written, by the simulator or (non-zero bytes) through ctypes."""
        if not self.poisoned:
            return None
        self.settle(offset, count)
        while True:
            gap = self.written.first_gap(offset, offset + count)
            if gap is None:
                return None
            start, end = gap
            if self._memory()[start:end] == _poison(start, end - start):
                return gap
            self.written.add(start, end)


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
        self._starts: SortedList[int] = SortedList()
        #: storage start -> host block (live or freed and kept), for refusing raw accesses
        self._stores: dict[int, HostBlock] = {}
        self._store_starts: SortedList[int] = SortedList()
        self._by_id: dict[int, Registration] = {}
        self._next_reg = REGISTERED_BASE
        self._serial = 0
        self._sweep_at = 64
        #: keep each block's allocation site in ``extra["site"]`` (the sanitizer turns it on)
        self.record_sites = False
        #: called with each registration dropped because user code let go of its buffer
        self.on_forget = None
        #: False: raw host addresses are refused (a worker process's calls run in another
        #: Python process, whose memory is not the worker's: ascend_memsim.remote)
        self.raw_access = True

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
            block = self._make_block(size, footprint)
            self._serial += 1
            block.serial = self._serial
            if self.record_sites:
                block.extra = {"site": capture_site()}
            self._add(block)
            self._add_store(block)
            return block

    @staticmethod
    def _make_block(size: int, footprint: int) -> HostBlock:
        """A fresh block in its own guarded map (else a plain buffer), poisoned whole when
        small, lazily when big.

        Raises:
            OutOfHostMemory: the process is out of memory.
        """
        made = raw.guarded_map(footprint)
        buf: bytearray | mmap.mmap
        if made is not None:
            buf, pin, ptr = made
            skew = raw.PAGE
            storage = (ptr - raw.PAGE, ptr - raw.PAGE + len(buf))
        else:
            try:
                buf = zeroed_buffer(footprint + HOST_ALIGN)
                pin = (ctypes.c_char * (footprint + HOST_ALIGN)).from_buffer(buf)
            except (MemoryError, OverflowError, OSError, ValueError):
                raise OutOfHostMemory(f"cannot allocate {size} bytes of host memory") from None
            base = ctypes.addressof(pin)
            skew = -base % HOST_ALIGN
            ptr = base + skew
            storage = (base, base + len(buf))
        block = HostBlock(ptr, size, footprint, 0, buf, skew, pin=pin, storage=storage)
        if footprint <= EAGER_POISON:
            _fill_poison(block._memory())
        elif made is not None and raw.untouched(ptr, raw.PAGE) is not None:
            if _MADV_NOHUGEPAGE is not None:
                # One touch must not make a whole huge page present: pages are poisoned
                # lazily by whether anyone touched them.
                try:
                    made[0].madvise(_MADV_NOHUGEPAGE)  # buf
                except (OSError, ValueError):
                    pass
            block.settled = Runs()
        else:
            # DECISION: no way to find the untouched pages: never poisoned (the initcheck
            # counts its bytes as written) rather than fill gigabytes in one call.
            block.poisoned = False
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
            self._freed_bytes += block.storage[1] - block.storage[0]
            while (self._freed_bytes > FREED_KEEP_BYTES
                   or len(self._freed) > FREED_KEEP_BLOCKS):
                old = self._freed.popleft()
                self._freed_bytes -= old.storage[1] - old.storage[0]
                self._remove_store(old)
            return block

    # -- registered buffers --------------------------------------------------------------------

    def register(self, obj: Any) -> Registration:  # numpy is optional: duck-typed
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
            bytes_address(obj)
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
            if ptr + span > UVM_BASE and ptr < UVM_END:
                # managed memory's range (11-05) lies inside the registered window: skip it
                ptr = UVM_END
            self._next_reg = ptr + -(-span // _REG_ALIGN) * _REG_ALIGN + _REG_ALIGN
            if self._next_reg >= DEVICE_SPAN:
                raise OutOfHostMemory("the registered host window is used up")
            self._serial += 1
            reg = Registration(ptr, size, obj, kind, self._serial,
                               raw_io=kind == "ndarray" and in_a_memory_map(obj))
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

        An access that touches the storage the simulator keeps for a host block (its guard
        pages and slack, or a freed block still kept) is None: not the program's memory.
        O(log blocks) plus reading the maps.
        """
        if not self.raw_access or self.store_at(addr, count) is not None:
            return None
        kind = raw.mapping(addr, count, write)
        if kind is None:
            return None
        return ForeignRegion(addr, count, write, direct=kind == "anonymous")

    def store_at(self, addr: int, count: int) -> HostBlock | None:
        """The host block (live, or freed and kept) whose storage overlaps the access."""
        with self.lock:
            starts = self._store_starts
            i = starts.bisect_left(addr + count)
            if not i:
                return None
            block = self._stores[starts[i - 1]]
            # Storages are disjoint, so the last one starting before the access's end is
            # the only one that can reach back into it.
            return block if block.storage[1] > addr else None

    def refusal(self, addr: int, count: int, write: bool) -> str:
        """Why a raw access of ``count`` bytes at ``addr`` is refused (for the message)."""
        block = self.store_at(addr, count)
        if block is not None:
            with self.lock:
                freed = self._regions.get(block.ptr) is not block
            if freed and addr < block.end and block.ptr < addr + count:
                return f"is in the {block.describe()}, which was freed (a use after free)"
            state = "freed " if freed else ""
            return (f"touches memory the simulator keeps for the {state}{block.describe()}, "
                    f"outside the block (its guard pages or slack): a raw access there is "
                    f"refused, so a stray pointer cannot corrupt the simulator")
        access = "writable" if write else "readable"
        if not self.raw_access:
            return ("is not in any live block or registered host buffer (raw host addresses "
                    "are refused in a worker process: its memory is not the owner's)")
        return (f"is not in any live block or registered host buffer, nor in {access} memory "
                f"of the process")

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
            self.__init__()  # type: ignore[misc]  # start afresh; no subclass exists
            self.record_sites, self.on_forget = record_sites, on_forget
            return live

    def _add(self, region: HostBlock | Registration) -> None:
        self._regions[region.ptr] = region
        self._starts.add(region.ptr)

    def _remove(self, region: HostBlock | Registration) -> None:
        del self._regions[region.ptr]
        self._starts.remove(region.ptr)

    def _add_store(self, block: HostBlock) -> None:
        self._stores[block.storage[0]] = block
        self._store_starts.add(block.storage[0])

    def _remove_store(self, block: HostBlock) -> None:
        if self._stores.get(block.storage[0]) is block:
            del self._stores[block.storage[0]]
            self._store_starts.remove(block.storage[0])
