"""What device memory holds: sparse byte storage per block, and the copies that move bytes.

A device block's bytes live in a :class:`Contents`, made on the first write: one chunk for a
block of up to 1 GiB (so a memcpy of a whole block is one copy), 64 MiB chunks beyond that.
Big chunks are anonymous memory maps, which the operating system backs page by page on first
touch, so a 60 GB allocation with a few MB written costs the host about what was written. A
chunk filled whole by ``memset`` is kept as one int (the fill byte) until partly overwritten.
Each :class:`Contents` also keeps the :class:`Runs` of bytes ever written, which the
sanitizer's initcheck reads.

:class:`DataPlane` carries out ``memcpy`` and ``memset`` for a runtime: it checks the
arguments (the rules of aclrtMemcpy / aclrtMemset in the runtime's memory.cpp and
api_error.cc), resolves each address to a *region* (a device block here, a host block or a
registered host buffer in :mod:`ascend_memsim.data.host`), lets the sanitizer look at the access,
and only then moves bytes. A failed call changes nothing. Copies move memoryview slices,
never single bytes in Python.

Size: over 600 lines, on purpose: Contents (sparse chunks, fills, all-or-nothing copies) and
the DataPlane that checks and routes each copy read the same chunk layout; they change
together.
"""

from __future__ import annotations

import mmap
import threading
from bisect import bisect_left, bisect_right

from ..memory.args import as_int
from ..memory.constants import MemcpyKind
from ..memory.device import Block
from ..memory.errors import InvalidArgument, InvalidPointer, InvalidRuntimeParam

__all__ = [
    "CHUNK_BYTES",
    "DENSE_LIMIT",
    "Contents",
    "DataPlane",
    "DeviceRegion",
    "Runs",
    "contents_of",
    "fill_view",
    "zeroed_buffer",
]

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

#: aclrtMemcpyKind values aclrtMemcpy accepts: memory.cpp MemcpyKindTranslate maps 0..5 only.
_MEMCPY_KINDS = range(6)
#: The direction each directed kind names, as (source is host, destination is host);
#: ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE is a host-to-device copy through a buffer. DEFAULT (4)
#: names none: the runtime infers it.
KIND_ENDS = {0: (True, True), 1: (True, False), 2: (False, True), 3: (False, False),
             5: (True, False)}


def kind_of(src_host: bool, dst_host: bool) -> MemcpyKind:
    """The kind that the two ends of a copy make (what ACL_MEMCPY_DEFAULT infers)."""
    return MemcpyKind(2 * (not src_host) + (not dst_host))


def overrun(region, offset: int, count: int) -> str:
    """How far an access of ``count`` bytes at ``offset`` into ``region`` runs past it, in
    one wording for the error message and the sanitizer: past the requested size, and past
    the footprint (the bytes the region owns)."""
    end = offset + count

    def nbytes(n: int) -> str:
        return f"{n} byte" if n == 1 else f"{n} bytes"

    return (f"{nbytes(end - region.size)} past the end of the {region.describe()}, "
            f"{nbytes(end - region.limit)} past its {region.limit}-byte footprint")


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
        self.chunks: dict[int, object] = {}
        self.written = Runs()

    def _chunk_len(self, index: int) -> int:
        return min(1 << self.shift, self.limit - (index << self.shift))

    def materialised_bytes(self) -> int:
        """Bytes of the chunks made so far (an int chunk costs nothing; a map's untouched
        pages cost nothing either, so this is an upper bound on host memory)."""
        return sum(len(c) for c in self.chunks.values() if not isinstance(c, int))

    def _pieces(self, offset: int, count: int):
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

    def _make_all(self, indices) -> None:
        """Make every chunk of ``indices`` not yet a buffer, all before any is installed."""
        chunks = self.chunks
        fresh: dict[int, object] = {}
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
        pieces = []
        fresh: dict[int, object] = {}
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
                if chunk:
                    fill_view(memoryview(buffer), chunk)
                fresh[index] = buffer
            pieces.append((pos, index, lo, take, value, True))
        chunks.update(fresh)
        for pos, index, lo, take, value, buffered in pieces:
            if not buffered:
                if lo == 0 and take == self._chunk_len(index):
                    chunks[index] = value
                continue
            _advise_huge(chunks[index], lo, take)
            out = memoryview(chunks[index])[lo:lo + take]
            if value is not None:
                fill_view(out, value)
            else:
                source.read_into(src_off + pos, out)
        if count:
            self.written.add(dst_off, dst_off + count)


#: Writes of this many bytes or more ask the OS for huge pages on the range they cover.
HUGE_ADVICE_BYTES = 2 << 20
_MADV_HUGEPAGE = getattr(mmap, "MADV_HUGEPAGE", None)


def _advise_huge(chunk: object, lo: int, take: int) -> None:
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


def _anonymous_map(size: int) -> object:
    """``size`` zero bytes that the OS backs page by page on first touch.

    Falls back to a bytearray when the process may map no more (vm.max_map_count).
    """
    try:
        if hasattr(mmap, "MAP_PRIVATE"):
            return mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        return mmap.mmap(-1, size)
    except OSError:
        return bytearray(size)


def contents_of(block: Block) -> Contents:
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

    def site(self):
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


class DataPlane:
    """memcpy / memset for one runtime: checks, address resolution, then the byte moves.

    The runtime supplies ``host`` (a :class:`~ascend_memsim.data.host.HostMemory`), its devices
    and its ``sanitizer``. Thread-safe: one lock serialises the byte moves.
    """

    def __init__(self, runtime) -> None:
        self.runtime = runtime
        self.lock = threading.RLock()

    # -- argument checks (vendor rules) ---------------------------------------------------------

    @staticmethod
    def check_memcpy(dst: object, dest_max: object, src: object, count: object,
                     kind: object) -> tuple[int, int, int, int] | None:
        """Checked (dst, src, count, kind), or None when there is nothing to do.

        Rules (runtime memory.cpp and api_error.cc): count 0 succeeds before any other
        check; NULL dst/src and kinds outside 0..5 are ACL_ERROR_INVALID_PARAM; count past
        dest_max is ACL_ERROR_RT_PARAM_INVALID. dst == src is returned too: :meth:`copy`
        checks its range and moves nothing.

        Raises:
            InvalidArgument, InvalidArgumentType: NULL pointer, bad kind, bad types.
            InvalidRuntimeParam: count > dest_max.
        """
        count = as_int(count, "count")
        if count == 0:
            return None
        dst = as_int(dst, "dst")
        src = as_int(src, "src")
        if dst == 0 or src == 0:
            raise InvalidArgument(f"{'dst' if dst == 0 else 'src'} is NULL")
        kind = as_int(kind, "kind", -(1 << 31), (1 << 32) - 1)
        if kind not in _MEMCPY_KINDS:
            names = ", ".join(f"{k.name}={k.value}" for k in MemcpyKind if k.value in _MEMCPY_KINDS)
            raise InvalidArgument(f"kind={kind} is not a kind aclrtMemcpy accepts ({names})")
        dest_max = as_int(dest_max, "dest_max")
        if count > dest_max:
            raise InvalidRuntimeParam(f"count={count} is more than dest_max={dest_max}")
        return dst, src, count, kind

    @staticmethod
    def check_memset(ptr: object, max_count: object, value: object,
                     count: object) -> tuple[int, int, int] | None:
        """Checked (ptr, count, low byte of value), or None when count is 0.

        Raises:
            InvalidArgument, InvalidArgumentType: NULL ptr, a value outside int32, bad types.
            InvalidRuntimeParam: count > max_count (DECISION: 107000, as memcpy; the runtime
                check was not found, its unit-test stub refuses it as an invalid value).
        """
        count = as_int(count, "count")
        if count == 0:
            return None
        ptr = as_int(ptr, "ptr")
        if ptr == 0:
            raise InvalidArgument("ptr is NULL")
        # aclrtMemset's value is an int32_t (pyacl parses it with "i": a larger int raises)
        value = as_int(value, "value", -(1 << 31), (1 << 31) - 1)
        max_count = as_int(max_count, "max_count")
        if count > max_count:
            raise InvalidRuntimeParam(f"count={count} is more than max_count={max_count}")
        return ptr, count, value & 0xFF

    # -- resolution ---------------------------------------------------------------------------

    def region_at(self, addr: int, count: int = 1):
        """The region (host block, registered buffer, device block, mapped virtual range)
        holding ``addr``, or None; a mapped range reaches as far as ``count`` bytes need.

        A live device block first, then host memory: aclrtMallocHost blocks sit at real
        process addresses, which may fall inside a device's simulated window.
        """
        runtime = self.runtime
        vmm = runtime.vmm
        if vmm.space is not None:
            mapped = vmm.region_at(addr, count)  # data/mapped.py
            if mapped is not None:
                return mapped
        if addr >= runtime.host_limit:
            device = runtime.device_holding(addr)
            block = None if device is None else device.block_at(addr)
            if block is not None:
                return DeviceRegion(block)
        return runtime.host.region_at(addr)

    def resolve(self, call: str, addr: int, count: int, write: bool, *,
                deferred: bool = False):
        """(region, offset) for an access of ``count`` bytes at ``addr``, after the checks.

        ``deferred``: the access is queued, not done now; only check that the address is live
        and the access stays in its footprint (the rest is checked when it runs).

        Raises:
            InvalidPointer: no live region holds ``addr``, or the access leaves its footprint.
            SanitizerError: a finding the strict sanitizer refuses.
        """
        region = self.region_at(addr, count)
        sanitizer = self.runtime.sanitizer
        if region is None:
            foreign = self.runtime.host.foreign(addr, count, write)
            if foreign is not None:
                # Host memory the process mapped, passed raw (ndarray.ctypes.data, ...).
                if sanitizer.on:
                    sanitizer.unchecked_host(call, addr, count, write)
                return foreign, 0
            sanitizer.bad_address(call, addr, count, write)
            why = self.runtime.host.refusal(addr, count, write)
            raise InvalidPointer(f"{call}: {addr:#x} {why}")
        offset = addr - region.base
        end = offset + count
        if end > region.size:
            if end > region.limit:
                sanitizer.out_of_bounds(call, addr, count, write, region)
                raise InvalidPointer(f"{call}: {count} bytes at {addr:#x} run "
                                     f"{overrun(region, offset, count)}")
            if sanitizer.on and not deferred:
                sanitizer.padding_access(call, addr, count, write, region)
        if sanitizer.on and not deferred:
            if write and region.readonly:
                sanitizer.readonly_write(call, addr, count, region)
            if not write and sanitizer.initcheck:
                gap = region.first_gap(offset, count)
                if gap is not None:
                    sanitizer.uninitialized_read(call, addr, count, region, gap)
        return region, offset

    def check_p2p(self, call: str, src_region, dst_region) -> None:
        """Refuse a copy between two devices unless both blocks are P2P memory and peer
        access is enabled between the devices.

        Raises:
            InvalidRuntimeParam: DECISION: copies between devices need P2P blocks at both
                ends (107000), for aclrtMemcpy and aclrtMemcpyAsync alike; and peer access
                (aclrtDeviceEnablePeerAccess, either device for the other: see
                :mod:`ascend_memsim.runtime.peer`): the vendor FAQ "跨DeviceP2P数据交互配置失败"
                names both as causes of a failed copy between devices.
        """
        if src_region.host or dst_region.host:
            return
        a, b = src_region.block, dst_region.block
        if a.device_id == b.device_id:
            return
        if not (a.p2p and b.p2p):
            raise InvalidRuntimeParam(
                f"{call}: device {a.device_id} to device {b.device_id} needs P2P memory "
                f"at both ends (a *_P2P policy); got {a.describe()} and {b.describe()}")
        peer = self.runtime.extension("peer")
        if peer is None or not peer.allows(a.device_id, b.device_id):
            raise InvalidRuntimeParam(
                f"{call}: device {a.device_id} to device {b.device_id} needs peer access: "
                f"call device_enable_peer_access first")

    # -- operations ---------------------------------------------------------------------------

    def memcpy(self, dst: object, dest_max: object, src: object, count: object, kind: object,
               *, call: str = "aclrtMemcpy", stream: object = None) -> None:
        """aclrtMemcpy: copy ``count`` bytes from ``src`` to ``dst``, direction from the addresses.

        The kind is checked (0..5) but the direction comes from the addresses, as the
        runtime does: a kind that contradicts the pointers (a host-to-device copy passed as
        DEVICE_TO_HOST, as the vendor's own samples and ModelZoo scripts do) still copies.
        hicann/runtime: aclrtMemcpy passes the kind to rtMemcpy (memory.cpp), whose
        ApiErrorDecorator::MemCopySync (api_error.cc) checks only its range, and the driver
        copies by address (NpuDriver::MemCopySync, npu_driver_mem.cc: drvMemcpy takes no
        kind); aclrtMemcpyAsync corrects the kind between pinned host memory and device memory
        (MemcpyKindAutoCorrect, api_error.cc). DECISION: the refusal that function gives for
        unregistered (pageable) host memory with a contradicting kind, which needs a driver
        that reports user memory attributes, is not modelled. The sanitizer reports the
        contradiction (``wrong-memcpy-kind``, a warning).

        Raises:
            InvalidArgument, InvalidRuntimeParam, InvalidPointer: see :meth:`check_memcpy`
            and :meth:`resolve`.
        """
        checked = self.check_memcpy(dst, dest_max, src, count, kind)
        if checked is None:
            return
        self.copy(*checked, call=call, stream=stream)

    def copy(self, dst: int, src: int, count: int, kind: int, *, call: str = "aclrtMemcpy",
             stream: object = None) -> None:
        """A checked copy (see :meth:`memcpy`): resolve both ends, then move the bytes."""
        if dst == src:
            # api_error.cc (MemCopySync): after the argument checks, dst == src returns
            # RT_ERROR_NONE without touching memory. DECISION: the simulator still checks
            # that the range lies in live memory, as for every copy (an unknown or overrunning
            # pointer is refused with 107000 and reported), and moves and reads nothing (so no
            # padding, read-only or initcheck finding).
            with self.lock:
                self.resolve(call, src, count, write=False, deferred=True)
            return
        with self.lock:
            src_region, src_off = self.resolve(call, src, count, write=False)
            dst_region, dst_off = self.resolve(call, dst, count, write=True)
            self.check_p2p(call, src_region, dst_region)
            ends = KIND_ENDS.get(kind)
            if ends is not None and ends != (src_region.host, dst_region.host):
                sanitizer = self.runtime.sanitizer
                if sanitizer.on:
                    sanitizer.wrong_memcpy_kind(call, dst, src, count, MemcpyKind(kind),
                                                kind_of(src_region.host, dst_region.host),
                                                src_region, dst_region)
            out = dst_region.view(dst_off, count)
            if out is not None:
                src_region.read_into(src_off, out)
            else:
                source = src_region.source(src_off, count)
                if source is not None:
                    dst_region.write(dst_off, source)
                else:
                    dst_region.copy_from(src_region, src_off, dst_off, count)
        self._emit((dst_region, src_region), "memcpy", dst=dst, src=src, count=count,
                   kind=kind, stream=stream)

    def memset(self, ptr: object, max_count: object, value: object, count: object, *,
               call: str = "aclrtMemset", stream: object = None) -> None:
        """aclrtMemset: set ``count`` bytes at ``ptr`` to the low byte of ``value``.

        Raises:
            InvalidArgument, InvalidRuntimeParam, InvalidPointer: see :meth:`check_memset`.
        """
        checked = self.check_memset(ptr, max_count, value, count)
        if checked is None:
            return
        self.fill(*checked, call=call, stream=stream)

    def fill(self, ptr: int, count: int, value: int, *, call: str = "aclrtMemset",
             stream: object = None) -> None:
        """A checked memset (see :meth:`memset`)."""
        with self.lock:
            region, offset = self.resolve(call, ptr, count, write=True)
            region.fill(offset, count, value)
        self._emit((region,), "memset", ptr=ptr, count=count, value=value, stream=stream)

    def _emit(self, regions: tuple, event: str, **info: object) -> None:
        """Tell the observers of the device involved (for host-only moves: the current one)."""
        runtime = self.runtime
        device = None
        for region in regions:
            if not region.host:
                device = runtime.device(region.block.device_id)
                break
        else:
            device = runtime.current_device_or_none()
        if device is not None and (device.observers or event in device.subscribers):
            for observer in [*device.observers, *device.subscribers.get(event, ())]:
                observer(event, device, info)
