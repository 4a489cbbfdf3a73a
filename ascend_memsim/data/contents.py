"""What device memory holds: sparse byte storage per block.

A device block's bytes live in a :class:`Contents`, made on the first write: one chunk for a
block of up to 1 GiB (so a memcpy of a whole block is one copy), 64 MiB chunks beyond that.
Big chunks are anonymous memory maps, which the operating system backs page by page on first
touch, so a 60 GB allocation with a few MB written costs the host about what was written. A
chunk filled whole by ``memset`` is kept as one int (the fill byte) until partly overwritten.
Each :class:`Contents` also keeps the :class:`Runs` of bytes ever written, which the
sanitizer's initcheck reads. A :class:`DeviceRegion` is a device block as the data plane
(:mod:`ascend_memsim.data.plane`) sees it.
"""

from __future__ import annotations

import mmap
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from ..memory.device import Block
from ..memory.errors import InvalidPointer
from ..memory.physical import PhysicalHandle
from ..memory.sites import Site

__all__ = [
    "CHUNK_BYTES",
    "DENSE_LIMIT",
    "Contents",
    "DeviceRegion",
    "HostRegion",
    "Runs",
    "contents_of",
    "fill_view",
    "zeroed_buffer",
]

#: A chunk of a block's contents: its bytes, or an int when every byte of it is that value.
Chunk = bytearray | mmap.mmap | int

#: A region: a device block's contents, a host block or registered buffer, a mapped virtual
#: range, a managed allocation. Classes of one duck-typed face (base, size, limit, host,
#: read, write, fill, ...), with no common base, so Any to the type checker.
Region = Any

#: Blocks up to this footprint keep their bytes in one chunk (one copy per memcpy: one big
#: copy is markedly faster than the same bytes in 64 MiB pieces).
DENSE_LIMIT = 1 << 30
#: Larger blocks are cut into chunks of this many bytes, each made on first write.
CHUNK_BYTES = 1 << 26
_CHUNK_SHIFT = CHUNK_BYTES.bit_length() - 1
#: Fills and zeroings go in slabs of this many bytes (one pattern buffer per call), so no
#: temporary grows with the size of the access.
SLAB_BYTES = 1 << 20
# Chunks up to this size are bytearrays; larger ones are anonymous memory maps, which the
# operating system backs page by page on first touch (so an untouched page costs nothing).
_MAP_FROM = 256 << 10

class Runs:
    """Disjoint, coalesced ``[start, end)`` runs of offsets: the bytes ever written.

    Adding and querying are O(log r + merged runs) in the number of runs r.

    >>> r = Runs(); r.add(0, 10); r.add(20, 30); r.add(10, 20)
    >>> r.runs(), r.first_gap(0, 30), r.first_gap(25, 40)
    ([(0, 30)], None, (30, 40))
    """

    __slots__ = ("ends", "starts")

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []

    def add(self, start: int, end: int) -> None:
        """Mark ``[start, end)`` as covered."""
        starts, ends = self.starts, self.ends
        i = bisect_left(ends, start)
        j = bisect_right(starts, end)
        if i < j:
            start = min(start, starts[i])
            end = max(end, ends[j - 1])
        starts[i:j] = [start]
        ends[i:j] = [end]

    def first_gap(self, start: int, end: int) -> tuple[int, int] | None:
        """The first uncovered sub-range of ``[start, end)``, or None if all is covered."""
        starts, ends = self.starts, self.ends
        i = bisect_right(starts, start) - 1
        gap = start
        if i >= 0 and ends[i] > start:
            if ends[i] >= end:
                return None
            gap = ends[i]
        nxt = i + 1
        stop = min(starts[nxt], end) if nxt < len(starts) else end
        return gap, stop

    def covered(self) -> int:
        """Total bytes covered."""
        return sum(e - s for s, e in zip(self.starts, self.ends, strict=True))

    def runs(self) -> list[tuple[int, int]]:
        return list(zip(self.starts, self.ends, strict=True))


class Contents:
    """The bytes of one block: sparse chunks, zero where never written.

    A block whose footprint is at most :data:`DENSE_LIMIT` is one chunk; a larger one is cut
    into :data:`CHUNK_BYTES` chunks. Chunks are made on the first write that touches them;
    big ones are anonymous memory maps, so even inside a chunk only touched pages cost host
    memory. A chunk that a memset fills whole is kept as one int until partly overwritten
    (a one-chunk block bigger than a chunk is cut into chunks first, see :meth:`fill`), and
    fills go in slabs, so no temporary grows with the block. DECISION: bytes never written
    read as zeros (the hardware gives whatever was there; the sanitizer's initcheck reports
    such reads).
    """

    __slots__ = ("chunks", "limit", "shift", "written")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.shift = (max(limit - 1, 1).bit_length() if limit <= DENSE_LIMIT
                      else _CHUNK_SHIFT)
        #: chunk index -> buffer (bytearray or mmap), or an int: the chunk is that byte
        self.chunks: dict[int, Chunk] = {}
        self.written = Runs()

    def _chunk_len(self, index: int) -> int:
        return min(1 << self.shift, self.limit - (index << self.shift))

    def materialised_bytes(self) -> int:
        """Bytes of the chunks made so far (an int chunk costs nothing; a map's untouched
        pages cost nothing either, so this is an upper bound on host memory)."""
        return sum(len(c) for c in self.chunks.values() if not isinstance(c, int))

    def _pieces(self, offset: int, count: int) -> Iterator[tuple[int, int, int, int]]:
        """(position in the access, chunk index, offset in the chunk, bytes) per chunk."""
        shift = self.shift
        mask = (1 << shift) - 1
        pos = 0
        while pos < count:
            at = offset + pos
            lo = at & mask
            take = min((1 << shift) - lo, count - pos)
            yield pos, at >> shift, lo, take
            pos += take

    def read_into(self, offset: int, out: memoryview) -> None:
        """Copy ``len(out)`` bytes from ``offset`` into ``out``. O(bytes / chunk) steps."""
        chunks = self.chunks
        for pos, index, lo, take in self._pieces(offset, len(out)):
            chunk = chunks.get(index)
            if chunk is None or isinstance(chunk, int):
                fill_view(out[pos:pos + take], chunk or 0)
            else:
                out[pos:pos + take] = memoryview(chunk)[lo:lo + take]

    def read(self, offset: int, count: int) -> bytearray:
        """``count`` bytes from ``offset`` as a new bytearray."""
        out = bytearray(count)
        self.read_into(offset, memoryview(out))
        return out

    def _materialise(self, index: int) -> memoryview:
        chunk = self.chunks.get(index)
        if chunk is None or isinstance(chunk, int):
            size = self._chunk_len(index)
            fresh = zeroed_buffer(size)
            if chunk:
                fill_view(memoryview(fresh), chunk)
            self.chunks[index] = chunk = fresh
        return memoryview(chunk)

    def write(self, offset: int, data: memoryview) -> None:
        """Store ``data`` at ``offset``. O(bytes / chunk) steps.

        All or nothing: the chunks it needs are made first (a MemoryError changes nothing).
        """
        pieces = list(self._pieces(offset, len(data)))
        self._make_all(index for _, index, _, _ in pieces)
        for pos, index, lo, take in pieces:
            out = self._materialise(index)
            _advise_huge(self.chunks[index], lo, take)
            out[lo:lo + take] = data[pos:pos + take]
        if len(data):
            self.written.add(offset, offset + len(data))

    def _make_all(self, indices: Iterable[int]) -> None:
        """Make every chunk of ``indices`` not yet a buffer, all before any is installed."""
        chunks = self.chunks
        fresh: dict[int, Chunk] = {}
        for index in indices:
            chunk = chunks.get(index)
            if (chunk is None or chunk.__class__ is int) and index not in fresh:
                buffer = zeroed_buffer(self._chunk_len(index))  # may raise MemoryError
                if chunk:
                    fill_view(memoryview(buffer), chunk)
                fresh[index] = buffer
        chunks.update(fresh)

    def fill(self, offset: int, count: int, value: int) -> None:
        """Set ``count`` bytes from ``offset`` to ``value`` (0..255); whole chunks stay ints.

        O(bytes / chunk) steps plus the bytes of partly filled chunks.
        """
        if value and count >= CHUNK_BYTES and self.shift > _CHUNK_SHIFT:
            self._split()
        chunks = self.chunks
        for _, index, lo, take in self._pieces(offset, count):
            chunk = chunks.get(index)
            if lo == 0 and take == self._chunk_len(index):
                chunks[index] = value
            elif (chunk is None or isinstance(chunk, int)) and (chunk or 0) == value:
                continue  # the chunk already reads as value
            else:
                fill_view(self._materialise(index)[lo:lo + take], value)
        if count:
            self.written.add(offset, offset + count)

    def _split(self) -> None:
        """Cut a one-chunk block not yet made into a buffer into :data:`CHUNK_BYTES` chunks.

        DECISION: a big non-zero fill of a one-chunk block bigger than a chunk leaves whole
        64 MiB chunks as ints, so it (and a later small write) costs at most two partly
        filled chunks, not the block. A block already made into a buffer stays one chunk.
        """
        chunk = self.chunks.get(0)
        if chunk is not None and not isinstance(chunk, int):
            return
        self.shift = _CHUNK_SHIFT
        count = -(-self.limit >> _CHUNK_SHIFT)
        self.chunks = {} if chunk is None else dict.fromkeys(range(count), chunk)

    def uniform(self, offset: int, count: int) -> int | None:
        """The byte every one of ``count`` bytes from ``offset`` reads as, when no chunk over
        them holds real bytes (never made: 0; filled whole: its int); else None.
        O(chunks covered)."""
        value = None
        chunks = self.chunks
        for _, index, _, _ in self._pieces(offset, count):
            chunk = chunks.get(index, 0)
            if chunk.__class__ is not int or (value is not None and chunk != value):
                return None
            value = chunk
        return 0 if value is None else value

    def copy_from(self, source: Contents | None, src_off: int, dst_off: int,
                  count: int) -> None:
        """Copy ``count`` bytes at ``src_off`` of ``source`` (None: a block never written,
        all zeros) to ``dst_off``, chunk to chunk without a whole-size temporary.

        Sparse stays sparse: a piece whose source holds no real bytes (never written, or
        filled whole) becomes an int chunk or a fill, not a copy, so copying a never-written
        block makes nothing. All or nothing: every buffer the copy needs is made before a
        byte moves, so running out of host memory (MemoryError) leaves the destination as it
        was. Overlapping ranges of one block behave as memmove (through one temporary).
        O(bytes / chunk) steps.
        """
        if source is self and src_off < dst_off + count and dst_off < src_off + count:
            self.write(dst_off, memoryview(self.read(src_off, count)))
            return
        pieces: list[tuple[int, int, int, int, int | None, bool]] = []
        fresh: dict[int, Chunk] = {}
        chunks = self.chunks
        for pos, index, lo, take in self._pieces(dst_off, count):
            value = 0 if source is None else source.uniform(src_off + pos, take)
            chunk = chunks.get(index)
            whole = lo == 0 and take == self._chunk_len(index)
            made = chunk is not None and chunk.__class__ is not int
            if value is not None and (whole or (not made and (chunk or 0) == value)):
                pieces.append((pos, index, lo, take, value, False))
                continue
            if not made and index not in fresh:
                buffer = zeroed_buffer(self._chunk_len(index))  # may raise MemoryError
                if chunk:  # not made: an int
                    fill_view(memoryview(buffer), chunk)  # type: ignore[arg-type]
                fresh[index] = buffer
            pieces.append((pos, index, lo, take, value, True))
        chunks.update(fresh)
        # a piece not buffered has a value; a buffered one a buffer chunk, and a source
        # when it has no value
        for pos, index, lo, take, value, buffered in pieces:
            if not buffered:
                if lo == 0 and take == self._chunk_len(index):
                    chunks[index] = value  # type: ignore[assignment]
                continue
            _advise_huge(chunks[index], lo, take)
            out = memoryview(chunks[index])[lo:lo + take]  # type: ignore[arg-type]
            if value is not None:
                fill_view(out, value)
            else:
                source.read_into(src_off + pos, out)  # type: ignore[union-attr]
        if count:
            self.written.add(dst_off, dst_off + count)


#: Writes of this many bytes or more ask the OS for huge pages on the range they cover.
HUGE_ADVICE_BYTES = 2 << 20
_MADV_HUGEPAGE = getattr(mmap, "MADV_HUGEPAGE", None)


def _advise_huge(chunk: Chunk, lo: int, take: int) -> None:
    """madvise(MADV_HUGEPAGE) the whole 2 MiB pages of ``[lo, lo + take)`` of a mapped chunk
    when the write covers at least :data:`HUGE_ADVICE_BYTES` (fewer page faults on first
    touch, as numpy does for its large buffers). Only the written range is advised, so a
    sparse block stays sparse. Linux only; elsewhere, or if refused, nothing happens."""
    if take < HUGE_ADVICE_BYTES or _MADV_HUGEPAGE is None or chunk.__class__ is not mmap.mmap:
        return
    start = -(-lo // HUGE_ADVICE_BYTES) * HUGE_ADVICE_BYTES
    end = (lo + take) // HUGE_ADVICE_BYTES * HUGE_ADVICE_BYTES
    if end > start:
        try:
            chunk.madvise(_MADV_HUGEPAGE, start, end - start)
        except (OSError, ValueError):
            pass  # transparent huge pages off or unsupported: 4 KiB pages it is


def fill_view(out: memoryview, value: int) -> None:
    """Set every byte of ``out`` to ``value`` (0..255), in slabs of :data:`SLAB_BYTES`."""
    n = len(out)
    if n <= SLAB_BYTES:
        out[:] = bytes((value,)) * n if value else bytes(n)
        return
    pattern = bytes((value,)) * SLAB_BYTES if value else bytes(SLAB_BYTES)
    for at in range(0, n - SLAB_BYTES, SLAB_BYTES):
        out[at:at + SLAB_BYTES] = pattern
    at = (n - 1) // SLAB_BYTES * SLAB_BYTES
    out[at:] = pattern[:n - at]


def zeroed_buffer(size: int) -> bytearray | mmap.mmap:
    """``size`` zero bytes: a bytearray when small, else an anonymous memory map (which the
    OS backs page by page on first touch, so untouched pages cost no host memory)."""
    return _anonymous_map(size) if size > _MAP_FROM else bytearray(size)


def _anonymous_map(size: int) -> bytearray | mmap.mmap:
    """``size`` zero bytes that the OS backs page by page on first touch.

    Falls back to a bytearray when the process may map no more (vm.max_map_count).
    """
    try:
        if hasattr(mmap, "MAP_PRIVATE"):
            return mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        return mmap.mmap(-1, size)
    except OSError:
        return bytearray(size)


def contents_of(block: Block | PhysicalHandle) -> Contents:
    """The block's :class:`Contents`, made on first use (kept in ``block.extra``)."""
    extra = block.extra
    if extra is None:
        extra = block.extra = {}
    contents = extra.get("contents")
    if contents is None:
        contents = extra["contents"] = Contents(block.footprint)
    return contents


def _contents_if_any(block: Block) -> Contents | None:
    """The block's :class:`Contents`, or None when nothing was ever written to it."""
    extra = block.extra
    return None if extra is None else extra.get("contents")


class HostRegion:
    """What every host region has in common (an aclrtMallocHost block, a registered buffer,
    a raw range of the process): it starts at ``ptr``; a subclass gives ``limit`` (the bytes
    it owns), ``extra`` (where its alloc site is kept), ``describe`` and ``source`` (a view
    of its bytes to read)."""

    __slots__ = ()
    host = True
    readonly = False
    extra: dict[str, Any] | None = None
    # given by each subclass
    ptr: int
    if TYPE_CHECKING:
        @property
        def limit(self) -> int: ...

        def source(self, offset: int, count: int) -> memoryview: ...

    @property
    def base(self) -> int:
        return self.ptr

    @property
    def end(self) -> int:
        return self.ptr + self.limit

    def site(self) -> Site | None:
        return None if self.extra is None else self.extra.get("site")

    def read_into(self, offset: int, out: memoryview) -> None:
        out[:] = self.source(offset, len(out))

    def read(self, offset: int, count: int) -> bytes:
        return bytes(self.source(offset, count))


class DeviceRegion:
    """A device block seen as a region: what the data plane and the sanitizer need."""

    __slots__ = ("block",)
    host = False

    def __init__(self, block: Block) -> None:
        self.block = block

    @property
    def base(self) -> int:
        return self.block.ptr

    @property
    def size(self) -> int:
        return self.block.size

    @property
    def limit(self) -> int:
        return self.block.footprint

    @property
    def readonly(self) -> bool:
        return self.block.readonly

    def describe(self) -> str:
        return self.block.describe()

    def site(self) -> Site | None:
        return self.block.alloc_site

    def view(self, offset: int, count: int) -> None:
        """Device bytes are not directly addressable (see :meth:`write`)."""
        return

    def source(self, offset: int, count: int) -> None:
        """Device bytes are not directly addressable (see :meth:`read`)."""
        return

    def direct_view(self, offset: int, count: int) -> memoryview:
        """The block's bytes themselves (ACL_DEVICE run mode: the host may address device
        memory), counted as written. A block over :data:`DENSE_LIMIT` is refused.

        Raises:
            InvalidPointer: a block stored in chunks.
        """
        contents = contents_of(self.block)
        if self.block.footprint > DENSE_LIMIT:
            raise InvalidPointer(f"the {self.block.describe()} is too big to view directly")
        contents.written.add(offset, offset + count)
        return contents._materialise(0)[offset:offset + count]

    def read_into(self, offset: int, out: memoryview) -> None:
        contents = _contents_if_any(self.block)
        if contents is None:
            fill_view(out, 0)
        else:
            contents.read_into(offset, out)

    def read(self, offset: int, count: int) -> bytearray:
        out = bytearray(count)
        self.read_into(offset, memoryview(out))
        return out

    def write(self, offset: int, data: memoryview) -> None:
        contents_of(self.block).write(offset, data)

    def fill(self, offset: int, count: int, value: int) -> None:
        contents_of(self.block).fill(offset, count, value)

    def copy_from(self, source: DeviceRegion, src_off: int, dst_off: int, count: int) -> None:
        """Copy device bytes from another (or this) device block, chunk to chunk."""
        contents_of(self.block).copy_from(_contents_if_any(source.block), src_off, dst_off,
                                          count)

    def first_gap(self, offset: int, count: int) -> tuple[int, int] | None:
        contents = _contents_if_any(self.block)
        if contents is None:
            return offset, offset + count
        return contents.written.first_gap(offset, offset + count)
