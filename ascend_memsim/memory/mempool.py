"""Stream-ordered memory pools (the vendor chapter 11-10): one pool's segments and accounting.

A pool is a range of virtual addresses, ``size`` bytes (aclrtMemPoolProps.maxSize rounded up
to 2 MiB), cut into **segments** of whole 2 MiB granules, as the runtime's ``SegmentManager``
does (``hicann/runtime`` ``src/runtime/feature/soma/stream_mem_pool.cc``):

* **free**: addresses with no memory behind them (``free_runs``, coalesced);
* **busy**: handed out by aclrtMemPoolMallocAsync, not yet given back;
* **cached**: given back by aclrtMemPoolFreeAsync: still backed by device memory, kept for
  reuse, until a trim (aclrtMemPoolTrimTo, or the release threshold at a synchronisation)
  returns it to free.

``used`` is the busy bytes (the runtime's ``busySize_``), ``reserved`` busy plus cached
(``reserveSize_``), each with its high-water mark. A request is rounded up to 2 MiB
(``DEVICE_POOL_MIN_BLOCK_SIZE``, stream_mem_pool.hpp) and placed best-fit: the smallest
cached segment that the caller's reuse rule accepts, else the smallest free run (lowest
address on ties: the runtime's ``SegmentComparator`` orders by size, then address). A
segment taken in part is split on its left, as ``Segment::SplitLeft`` does.

This module knows nothing of streams or device memory: the runtime's plane
(:mod:`ascend_memsim.runtime.pools`) decides which cached segments a stream may reuse, backs
new granules with device memory and gives back what a trim releases. Not thread-safe by
itself: the plane holds its lock around every call. O(s) per call in the segments.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from sortedcontainers import SortedDict

from .constants import MiB, PoolAttr
from .errors import InvalidArgument

__all__ = ["GRANULE", "PoolAttr", "Segment", "SegmentPool", "check_reserved"]

#: DEVICE_POOL_MIN_BLOCK_SIZE and DEVICE_POOL_ALIGN_SIZE (stream_mem_pool.hpp): 2 MiB.
GRANULE = 2 * MiB


#: The three reuse switches (uint32_t values, 25-02 aclrtMemPoolAttr).
REUSE_ATTRS = (PoolAttr.REUSE_FOLLOW_EVENT_DEPENDENCIES, PoolAttr.REUSE_ALLOW_OPPORTUNISTIC,
               PoolAttr.REUSE_ALLOW_INTERNAL_DEPENDENCIES)


@dataclass(eq=False, slots=True)
class Segment:
    """Granules of a pool, busy or cached. ``stream`` allocated it (busy) or freed it
    (cached); ``free_seq`` is the free's place in submission order, ``done`` whether that
    free has run."""

    ptr: int
    size: int
    busy: bool = True
    stream: object = None
    #: the bytes asked for (busy), for reports and traces
    asked: int = 0
    free_seq: int = 0
    done: bool = False
    alloc_site: object = field(default=None, repr=False)

    @property
    def end(self) -> int:
        return self.ptr + self.size


class SegmentPool:
    """The segments of one pool: ``size`` bytes of addresses from ``base``."""

    def __init__(self, base: int, size: int) -> None:
        self.base = base
        self.size = size
        #: free address runs, start -> end, coalesced
        self.free_runs: SortedDict[int, int] = SortedDict({base: base + size})
        #: busy and cached segments by start
        self.segments: SortedDict[int, Segment] = SortedDict()
        self.used = self.reserved = self.used_high = self.reserved_high = 0
        #: the reuse switches (0 or 1) and the release threshold (bytes)
        self.reuse: dict[int, int] = dict.fromkeys(REUSE_ATTRS, 0)
        self.threshold = 0

    # -- lookups ------------------------------------------------------------------------------

    def segment_at(self, addr: int) -> Segment | None:
        """The busy or cached segment holding ``addr``, or None. O(log s)."""
        segments = self.segments
        i = segments.bisect_right(addr)
        if not i:
            return None
        seg = segments.peekitem(i - 1)[1]
        return seg if addr < seg.end else None

    def busy(self) -> list[Segment]:
        return [s for s in self.segments.values() if s.busy]

    def cached(self) -> list[Segment]:
        return [s for s in self.segments.values() if not s.busy]

    # -- allocation ---------------------------------------------------------------------------

    def best_cached(self, size: int, accept: Callable[[Segment], bool]) -> Segment | None:
        """The smallest cached segment of at least ``size`` bytes that ``accept`` takes
        (lowest address on ties), or None. O(s)."""
        best = None
        for seg in self.segments.values():
            if (not seg.busy and seg.size >= size and (best is None or seg.size < best.size)
                    and accept(seg)):
                best = seg
        return best

    def best_free(self, size: int) -> int | None:
        """The start of the smallest free run of at least ``size`` bytes, or None. O(r)."""
        best = None
        for start, end in self.free_runs.items():
            span = end - start
            if span >= size and (best is None or span < best[1]):
                best = (start, span)
        return None if best is None else best[0]

    def reuse_cached(self, seg: Segment, size: int, stream: object, asked: int) -> Segment:
        """Hand out the left ``size`` bytes of cached ``seg`` to ``stream``; the rest stays
        cached. ``used`` grows; ``reserved`` does not."""
        if seg.size > size:
            rest = Segment(seg.ptr + size, seg.size - size, False, seg.stream,
                           free_seq=seg.free_seq, done=seg.done)
            self.segments[rest.ptr] = rest
            seg.size = size
        seg.busy, seg.stream, seg.asked, seg.free_seq, seg.done = True, stream, asked, 0, False
        self._grew(size, 0)
        return seg

    def take_free(self, ptr: int, size: int, stream: object, asked: int) -> Segment:
        """Hand out ``size`` bytes at ``ptr``, the start of a free run (see
        :meth:`best_free`). ``used`` and ``reserved`` grow."""
        end = self.free_runs.pop(ptr)
        if ptr + size < end:
            self.free_runs[ptr + size] = end
        seg = self.segments[ptr] = Segment(ptr, size, True, stream, asked)
        self._grew(size, size)
        return seg

    def _grew(self, used: int, reserved: int) -> None:
        self.used += used
        self.reserved += reserved
        self.used_high = max(self.used_high, self.used)
        self.reserved_high = max(self.reserved_high, self.reserved)

    # -- giving back --------------------------------------------------------------------------

    def give_back(self, seg: Segment, stream: object, seq: int) -> Segment:
        """Busy ``seg`` becomes cached, freed by ``stream`` at submission ``seq``; merged with
        cached neighbours freed by the same stream and still pending alike
        (``MergeIntoCachedSegs``, which merges on the same stream and sequence). The merged
        segment carries the latest free. O(log s)."""
        self.used -= seg.size
        seg.busy, seg.stream, seg.free_seq, seg.done = False, stream, seq, False
        return self._merge(seg)

    def _merge(self, seg: Segment) -> Segment:
        segments = self.segments
        left = self.segment_at(seg.ptr - 1) if seg.ptr > self.base else None
        if left is not None and self._mergeable(left, seg):
            del segments[seg.ptr]
            left.size += seg.size
            left.free_seq = max(left.free_seq, seg.free_seq)
            seg = left
        right = segments.get(seg.end)
        if right is not None and self._mergeable(seg, right):
            del segments[right.ptr]
            seg.size += right.size
            seg.free_seq = max(seg.free_seq, right.free_seq)
        return seg

    @staticmethod
    def _mergeable(a: Segment, b: Segment) -> bool:
        return (not a.busy and not b.busy and a.stream is b.stream and a.done == b.done)

    def freed_ran(self, stream: object, seq: int) -> list[Segment]:
        """The free submitted at ``seq`` on ``stream`` has run, and so every earlier free on
        that stream (a stream runs its work in order): mark the cached segments they gave
        back done (a merged or split segment carries its latest free); those segments.
        O(s)."""
        done = [s for s in self.segments.values()
                if not s.busy and not s.done and s.stream is stream and s.free_seq <= seq]
        for seg in done:
            seg.done = True
        for seg in done:
            if self.segments.get(seg.ptr) is seg:
                self._merge(seg)
        return done

    def trim(self, keep: int) -> list[tuple[int, int]]:
        """Release cached segments whose free has run, smallest first, until ``reserved`` is
        at most ``keep`` (``TrimCachedSegs``; the last one split on its left, to whole
        granules: DECISION, memory comes back in 2 MiB granules). The released ranges."""
        out: list[tuple[int, int]] = []
        candidates = sorted((s for s in self.segments.values() if not s.busy and s.done),
                            key=lambda s: (s.size, s.ptr))
        for seg in candidates:
            excess = self.reserved - keep
            if excess < GRANULE:
                break
            take = min(seg.size, excess - excess % GRANULE)
            del self.segments[seg.ptr]
            if take < seg.size:
                rest = Segment(seg.ptr + take, seg.size - take, False, seg.stream,
                               free_seq=seg.free_seq, done=True)
                self.segments[rest.ptr] = rest
            self._free(seg.ptr, take)
            self.reserved -= take
            out.append((seg.ptr, take))
        return out

    def release_all(self) -> list[tuple[int, int]]:
        """Every busy and cached range (the pool is being destroyed)."""
        out = [(s.ptr, s.size) for s in self.segments.values()]
        self.segments.clear()
        self.free_runs = SortedDict({self.base: self.base + self.size})
        self.used = self.reserved = 0
        return out

    def _free(self, ptr: int, size: int) -> None:
        runs = self.free_runs
        end = ptr + size
        following = runs.pop(end, None)
        if following is not None:
            end = following
        i = runs.bisect_left(ptr)
        if i:
            start, stop = runs.peekitem(i - 1)
            if stop == ptr:
                ptr = start
        runs[ptr] = end

    # -- checking -----------------------------------------------------------------------------

    def check_invariants(self) -> None:
        """Segments and free runs tile the pool without overlap; free runs are coalesced;
        every boundary is on a granule; the tallies match the segments."""
        pieces = [(s.ptr, s.end, "seg") for s in self.segments.values()]
        pieces += [(a, b, "free") for a, b in self.free_runs.items()]
        pieces.sort()
        at = self.base
        last = None
        for start, end, kind in pieces:
            assert start == at, f"gap or overlap at {start:#x} (expected {at:#x})"
            assert end > start and start % GRANULE == 0 and end % GRANULE == 0
            assert not (kind == "free" and last == "free"), f"free runs not coalesced at {start:#x}"
            at, last = end, kind
        assert at == self.base + self.size, "the pieces do not reach the pool's end"
        used = sum(s.size for s in self.segments.values() if s.busy)
        reserved = sum(s.size for s in self.segments.values())
        assert (used, reserved) == (self.used, self.reserved), (used, reserved, self.used,
                                                                 self.reserved)
        assert self.used_high >= self.used and self.reserved_high >= self.reserved


def check_reserved(reserved: object) -> None:
    """aclrtMemPoolProps.reserved: "当前必须为全0" (25-04); 0, or up to 32 zero bytes."""
    if type(reserved) is int and reserved == 0:
        return
    if isinstance(reserved, (bytes, bytearray, list, tuple)) and len(reserved) <= 32 and all(
            type(b) is int and b == 0 for b in reserved):
        return
    raise InvalidArgument("aclrtMemPoolCreate: poolProps->reserved must be all zero "
                          "(0, or up to 32 zero bytes)")
