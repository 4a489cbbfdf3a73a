"""Raw host memory: reaching process memory by address without ever faulting the process.

What host memory the simulator itself reaches by address, and how (Linux):

* :func:`mapping` reads ``/proc/self/maps``: is a range mapped readable (and writable), and
  only in anonymous private memory? The kernel's own bookkeeping, so nothing is touched.
  A readable page of anonymous private memory (the heap, stacks, numpy's and ctypes'
  buffers) is always backed, so it is read and written directly, at full speed.
* Any other memory (a file mapping, shared memory, ``[vvar]``, device memory) is reached
  only through ``/proc/self/mem`` by :func:`read`, :func:`write`, :func:`fill` and
  :func:`probe` (``os.preadv`` / ``os.pwritev``): a page with nothing behind it (the
  ``[vvar]`` page, a file mapping past the end of a file truncated since) makes the kernel
  answer EIO or a short count where a load or store would deliver SIGBUS and kill the
  interpreter; the call then fails with :class:`InvalidPointer`. ``/proc/self/mem`` ignores
  page protections (the kernel's ``FOLL_FORCE``), so callers check :func:`mapping` first.
* :func:`untouched` reads ``/proc/self/pagemap``: which pages of an anonymous mapping no one
  has touched yet (not present, not swapped), so a big aclrtMallocHost block can be poisoned
  lazily, page by page, without overwriting what ``ctypes`` wrote.
* :func:`guarded_map` makes an anonymous mapping with an inaccessible page on each side
  (``mprotect(PROT_NONE)``), as Electric Fence and the sanitizers do: an access that strays
  off an aclrtMallocHost block lands there, and :func:`mapping` refuses it.

Where these files do not exist (not Linux), :func:`mapping` is None (raw addresses are
refused), :func:`untouched` is None, and :func:`guarded_map` is None (no guard pages).
"""

from __future__ import annotations

import ctypes
import mmap
import os
import struct
import threading
from collections.abc import Callable

from ..memory.errors import InvalidPointer
from .contents import HostRegion, Region, fill_view

__all__ = ["PAGE", "ForeignRegion", "guarded_map", "mapping", "probe", "read", "write",
           "fill", "untouched"]

#: The host page size.
PAGE = mmap.PAGESIZE
_MAPS = "/proc/self/maps"
_MEM = "/proc/self/mem"
_PAGEMAP = "/proc/self/pagemap"
# One transfer moves at most this many bytes (a syscall stays short); probes read in slabs.
_STEP = 64 << 20
_SLAB = 1 << 20
# pagemap entry bits (Documentation/admin-guide/mm/pagemap.rst): page present, swapped.
_PRESENT_OR_SWAPPED = (1 << 63) | (1 << 62)


#: Names /proc/self/maps gives anonymous memory (besides none at all), and prefixes
#: (``[stack:tid]`` on old kernels, ``[anon:name]`` for memory named with prctl).
_ANONYMOUS_NAMES = ("[heap]", "[stack]")
_ANONYMOUS_PREFIXES = ("[stack:", "[anon:")


def mapping(addr: int, count: int, write: bool) -> str | None:
    """How ``[addr, addr + count)`` is mapped, from ``/proc/self/maps``: None when some of it
    is not mapped readable (and writable, for ``write``); ``"anonymous"`` when it lies only in
    anonymous private memory (the heap, a thread's stack, an anonymous map: a readable page
    there is always backed, so it is read directly); ``"other"`` when any of it is a file
    mapping, shared memory or a special mapping such as ``[vvar]``, whose pages can be
    missing (a file truncated since) and must be reached through ``/proc/self/mem``.
    O(mappings)."""
    if addr <= 0 or count <= 0:
        return None
    try:
        with open(_MAPS, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    at, end = addr, addr + count
    kind = "anonymous"
    for line in lines:
        fields = line.split(None, 5)
        lo, hi = (int(x, 16) for x in fields[0].split("-"))
        if hi <= at:
            continue
        perms = fields[1]
        if lo > at or perms[0] != "r" or (write and perms[1] != "w"):
            return None  # a hole before the range is covered, or the access is not allowed
        name = fields[5].strip() if len(fields) > 5 else ""
        if perms[3] != "p" or (name and name not in _ANONYMOUS_NAMES
                               and not name.startswith(_ANONYMOUS_PREFIXES)):
            kind = "other"
        at = hi
        if at >= end:
            return kind
    return None


class _Files:
    """This process's ``/proc/self/mem`` and ``pagemap`` descriptors, opened once per
    process (a descriptor inherited through ``fork`` would name the parent's memory)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pid: int | None = None
        self.fds: dict[tuple[str, int], int] = {}

    def fd(self, path: str, flags: int) -> int:
        with self.lock:
            if self.pid != os.getpid():
                self.pid, self.fds = os.getpid(), {}
            fd = self.fds.get((path, flags))
            if fd is None:
                fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0))
                self.fds[path, flags] = fd
            return fd


_files = _Files()


def _fault(addr: int, what: str) -> InvalidPointer:
    return InvalidPointer(f"{addr:#x} faults when {what}: mapped memory with nothing behind "
                          f"it (the [vvar] page, a file mapping past the end of its file, "
                          f"device memory); refused, where a real load would crash")


def _transfer(writing: bool, addr: int, view: memoryview) -> None:
    """Move ``view`` from (or to) process memory at ``addr`` through ``/proc/self/mem``.

    Raises:
        InvalidPointer: a page faults (nothing past it is moved), or the file cannot be used.
    """
    what = "written" if writing else "read"
    try:
        fd = _files.fd(_MEM, os.O_RDWR if writing else os.O_RDONLY)
    except OSError as error:
        raise InvalidPointer(f"raw host memory cannot be reached here ({_MEM}: "
                             f"{error.strerror})") from None
    op = os.pwritev if writing else os.preadv
    done, n = 0, len(view)
    while done < n:
        try:
            moved = op(fd, [view[done:done + _STEP]], addr + done)
        except OSError:
            moved = 0
        if moved <= 0:
            raise _fault(addr + done, what)
        done += moved


def read(addr: int, count: int) -> bytearray:
    """``count`` bytes of process memory at ``addr`` (all or nothing).

    Raises:
        InvalidPointer: a page of the range faults.
    """
    out = bytearray(count)
    _transfer(False, addr, memoryview(out))
    return out


def probe(addr: int, count: int) -> None:
    """Read the whole range (in slabs, into a scratch buffer) to find a page that faults.

    Raises:
        InvalidPointer: a page of the range faults.
    """
    scratch = memoryview(bytearray(min(count, _SLAB)))
    for at in range(0, count, _SLAB):
        _transfer(False, addr + at, scratch[:min(_SLAB, count - at)])


def write(addr: int, data: memoryview) -> None:
    """Store ``data`` at ``addr``: the range is probed first, so a range with a faulting page
    is refused before a byte changes.

    Raises:
        InvalidPointer: a page of the range faults.
    """
    probe(addr, len(data))
    _transfer(True, addr, data)


def fill(addr: int, count: int, value: int) -> None:
    """Set ``count`` bytes at ``addr`` to ``value`` (probed first, as :func:`write`).

    Raises:
        InvalidPointer: a page of the range faults.
    """
    probe(addr, count)
    slab = bytes((value,)) * min(count, _SLAB)
    for at in range(0, count, _SLAB):
        _transfer(True, addr + at, memoryview(slab)[:min(_SLAB, count - at)])


def untouched(addr: int, count: int) -> list[tuple[int, int]] | None:
    """The page-aligned ``[start, end)`` address runs of ``[addr, addr + count)`` (rounded
    out to pages) that no one has touched: neither present nor swapped in
    ``/proc/self/pagemap``. None where pagemap cannot be read. O(pages)."""
    first = addr // PAGE
    pages = -(-(addr + count) // PAGE) - first
    try:
        raw = os.pread(_files.fd(_PAGEMAP, os.O_RDONLY), 8 * pages, 8 * first)
    except OSError:
        return None
    if len(raw) != 8 * pages:
        return None
    runs: list[tuple[int, int]] = []
    for i, entry in enumerate(struct.unpack(f"{pages}Q", raw)):
        if entry & _PRESENT_OR_SWAPPED:
            continue
        start = (first + i) * PAGE
        if runs and runs[-1][1] == start:
            runs[-1] = (runs[-1][0], start + PAGE)
        else:
            runs.append((start, start + PAGE))
    return runs


def _mprotect() -> Callable[[int, int, int], int] | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        protect = libc.mprotect
    except (OSError, AttributeError):
        return None
    protect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    protect.restype = ctypes.c_int
    found: Callable[[int, int, int], int] = protect
    return found


_protect = _mprotect() if hasattr(mmap, "MAP_ANONYMOUS") else None


def guarded_map(size: int) -> tuple[mmap.mmap, object, int] | None:
    """An anonymous private mapping of ``size`` bytes (rounded up to pages) between two
    inaccessible guard pages: ``(map, pin, address of the first usable byte)``, where
    ``pin`` is the ctypes view that holds the map's buffer exported (so it cannot be closed
    under a view). None when it cannot be made (not Linux, no ``mprotect``, or the process
    may map no more: vm.max_map_count).

    The kernel backs the usable pages on first touch, so an untouched block costs nothing.
    """
    if _protect is None:
        return None
    span = -(-size // PAGE) * PAGE
    try:
        area = mmap.mmap(-1, span + 2 * PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    except (OSError, OverflowError, ValueError):
        return None
    pin = (ctypes.c_char * (span + 2 * PAGE)).from_buffer(area)
    base = ctypes.addressof(pin)
    if _protect(base, PAGE, 0) or _protect(base + PAGE + span, PAGE, 0):
        del pin
        area.close()
        return None
    return area, pin, base + PAGE


class ForeignRegion(HostRegion):
    """Host memory the simulator did not hand out, at its real address (checked mapped).

    Its bounds are unknown: the region is exactly the access. In anonymous private memory
    (``direct``: the heap, numpy's and ctypes' buffers) it is read and written directly, as
    a load would; anywhere else its bytes move only through ``/proc/self/mem``, so a page
    that faults is an :class:`InvalidPointer` and nothing is moved (no view is given).
    """

    def __init__(self, addr: int, count: int, writable: bool, direct: bool = False) -> None:
        self.ptr = addr
        self.size = count
        self.writable = writable
        self.direct = direct

    @property
    def limit(self) -> int:
        return self.size

    def describe(self) -> str:
        return (f"{self.size}-byte range of unregistered host memory at {self.ptr:#x} "
                f"(mapped by the process; its bounds are not known to the simulator)")

    def _check_writable(self) -> None:
        if not self.writable:
            raise InvalidPointer(f"the {self.describe()} is not writable")

    def _memory(self, offset: int, count: int) -> memoryview:
        array = (ctypes.c_char * count).from_address(self.ptr + offset)
        return memoryview(array).cast("B")

    def view(self, offset: int, count: int) -> memoryview | None:
        """A view of anonymous memory; None elsewhere (writes go through :meth:`write`,
        which cannot fault)."""
        if not self.direct:
            return None
        self._check_writable()
        return self._memory(offset, count)

    def source(self, offset: int, count: int) -> memoryview:
        if self.direct:
            return self._memory(offset, count)
        return memoryview(read(self.ptr + offset, count))

    def write(self, offset: int, data: memoryview) -> None:
        self._check_writable()
        if self.direct:
            self._memory(offset, len(data))[:] = data
        else:
            write(self.ptr + offset, data)

    def fill(self, offset: int, count: int, value: int) -> None:
        self._check_writable()
        if self.direct:
            fill_view(self._memory(offset, count), value)
        else:
            fill(self.ptr + offset, count, value)

    def copy_from(self, source: Region, src_off: int, dst_off: int, count: int) -> None:
        """Copy from a region that gives no view either (device memory)."""
        self.write(dst_off, memoryview(source.read(src_off, count)))

    def first_gap(self, offset: int, count: int) -> None:
        return
