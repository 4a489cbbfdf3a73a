"""Exact first-fit with per-request alignment over one address range.

The allocator knows nothing of products, policies or pages: it places ``size`` bytes at the
lowest address, aligned to ``align``, where a free run can hold them, and gives them back.

Free runs are kept four ways, all in step:

* ``_run_end[start] = end`` and ``_run_start[end] = start``: O(1) coalescing on release;
* a segregated index: runs grouped by length into classes (four per power of two, as in
  TLSF), each class a ``SortedList`` of run starts (made when a run first lands in the
  class);
* ``_heads[class]``: the lowest start in each non-empty class, kept current on every change,
  so reading a class's head is one dict lookup, not a ``SortedList`` index; with
  ``_nonempty``, the non-empty classes ascending, the lowest head of all the classes from
  one up is one ``min`` over a tail of that list, in C (a loop over the classes in Python
  cost 2-4 us a malloc in a heap with 20-40 non-empty classes);
* per class, once a search has walked 128 of its runs without an answer: the distinct run
  lengths present (a ``SortedList``), and per length the start of its one run or a
  ``SortedList`` of starts. From then on that class is searched length by length after a
  walk of its first 8 runs; a class that never needed it costs nothing to keep.

First-fit search therefore never walks small holes. A class whose shortest possible run is
at least ``size + align - 64`` always fits at its lowest run, so its head is a candidate in
O(1); only the classes that straddle the request size are searched, below the best
candidate so far: their first runs in address order (most often one of them fits), then,
for a class full of too-short runs, its length index. Costs, with n free runs, c non-empty
classes (at most four per power of two of run lengths) and L distinct run lengths in a
straddling class:

* :meth:`allocate`: O(c + log n) typical; at most O(c + 128 log n + L log n).
* :meth:`release`: O(log n), plus O(log n) for a class with a length index.
* construction: O(1); a class's length index: O(m log m) for its m runs, made once.

>>> a = Allocator(1 << 20)
>>> a.allocate(100, 64), a.allocate(64, 4096)
(0, 4096)
>>> a.release(0)
100
>>> a.check_invariants()
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable, Iterator

from sortedcontainers import SortedList

__all__ = ["Allocator", "size_class"]

_SUB_BITS = 2  # four classes per power of two
#: runs of a straddling class tried in address order before its length-by-length search
_WALK = 8
#: the same for a class with no length index yet: walking on is cheaper than making one,
#: until a class holds this many too-short runs in front
_WALK_UNINDEXED = 128


def size_class(length: int) -> int:
    """The class of a run of ``length`` bytes; classes grow with length.

    >>> [size_class(n) for n in (64, 80, 96, 112, 128)]
    [24, 25, 26, 27, 28]
    """
    top = length.bit_length() - 1
    if top < _SUB_BITS:
        return length
    return (top << _SUB_BITS) | ((length >> (top - _SUB_BITS)) & ((1 << _SUB_BITS) - 1))


def _class_floor(cls: int) -> int:
    """The shortest run length in class ``cls``."""
    top = cls >> _SUB_BITS
    if top < _SUB_BITS:
        return cls
    return ((1 << _SUB_BITS) | (cls & ((1 << _SUB_BITS) - 1))) << (top - _SUB_BITS)


class Allocator:
    """First-fit allocator over ``[base, base + capacity)``.

    All sizes, alignments and the base must be multiples of ``granule`` (64 bytes by
    default); alignments are powers of two.
    """

    __slots__ = ("base", "capacity", "granule", "_run_end", "_run_start", "_classes", "_heads",
                 "_nonempty", "_by_length", "_lengths", "_live", "_free_bytes")

    def __init__(self, capacity: int, *, base: int = 0, granule: int = 64) -> None:
        """O(1): the per-class structures are made when a run first lands in the class."""
        if capacity < 0 or capacity % granule or base % granule:
            raise ValueError("capacity and base must be non-negative multiples of the granule")
        self.base = base
        self.capacity = capacity
        self.granule = granule
        self._run_end: dict[int, int] = {}
        self._run_start: dict[int, int] = {}
        #: class -> SortedList of the starts of its runs (made on first use, kept once made)
        self._classes: dict[int, SortedList] = {}
        #: class -> the lowest start in it (the SortedList's head, read on every search)
        self._heads: dict[int, int] = {}
        #: the non-empty classes, ascending (the search takes the lowest head of a tail of it
        #: in one C-level min)
        self._nonempty: list[int] = []
        #: run length -> start of the one run that long, or a SortedList of starts if several
        self._by_length: dict[int, int | SortedList] = {}
        #: class -> the distinct run lengths present in it: made for a class the first time
        #: a search does not find its answer among the class's first runs, kept current after
        self._lengths: dict[int, SortedList] = {}
        #: live extents: start -> length (lengths repeat, so they share int objects)
        self._live: dict[int, int] = {}
        self._free_bytes = capacity
        if capacity:
            self._add_run(base, base + capacity)

    # -- free-run bookkeeping ---------------------------------------------------------------

    def _add_run(self, start: int, end: int) -> None:
        length = end - start
        self._run_end[start] = end
        self._run_start[end] = start
        top = length.bit_length() - 1
        cls = (top << 2) | ((length >> (top - 2)) & 3) if top >= 2 else length
        members = self._classes.get(cls)
        if members is None:
            members = self._classes[cls] = SortedList()
        members.add(start)
        head = self._heads.get(cls)
        if head is None:
            self._heads[cls] = start
            insort(self._nonempty, cls)
        elif start < head:
            self._heads[cls] = start
        lengths = self._lengths.get(cls)
        if lengths is not None:
            self._index_run(lengths, length, start)

    def _index_run(self, lengths: SortedList, length: int, start: int) -> None:
        # A length held by one run maps to its start (an int): most lengths are unique, and a
        # SortedList per length would cost more than the search it serves.
        starts = self._by_length.get(length)
        if starts is None:
            self._by_length[length] = start
            lengths.add(length)
        elif starts.__class__ is int:
            self._by_length[length] = SortedList((starts, start))
        else:
            starts.add(start)

    def _length_index(self, cls: int) -> SortedList:
        """The distinct run lengths of class ``cls``, its per-length index made now if the
        class has none yet (O(m log m) for its m runs, once; kept current from then on)."""
        lengths = self._lengths.get(cls)
        if lengths is None:
            lengths = self._lengths[cls] = SortedList()
            run_end = self._run_end
            for start in self._classes[cls]:
                self._index_run(lengths, run_end[start] - start, start)
        return lengths

    def _remove_run(self, start: int, end: int) -> None:
        length = end - start
        del self._run_end[start]
        del self._run_start[end]
        top = length.bit_length() - 1
        cls = (top << 2) | ((length >> (top - 2)) & 3) if top >= 2 else length
        members = self._classes[cls]
        members.remove(start)
        if self._heads[cls] == start:
            if members:
                self._heads[cls] = members[0]
            else:
                del self._heads[cls]
                self._nonempty.remove(cls)
        lengths = self._lengths.get(cls)
        if lengths is None:
            return
        starts = self._by_length[length]
        if starts.__class__ is int:
            del self._by_length[length]
            lengths.remove(length)
        else:
            starts.remove(start)
            if len(starts) == 1:
                self._by_length[length] = starts[0]

    # -- the two hot operations -------------------------------------------------------------

    def find(self, size: int, align: int) -> int | None:
        """The address first-fit would give ``size`` bytes aligned to ``align``, or None.

        Changes nothing. Complexity as :meth:`allocate`.
        """
        found = self._search(size, align)
        return None if found is None else found[0]

    def _search(self, size: int, align: int) -> tuple[int, int] | None:
        """(aligned address, start of the run holding it) of the first fit, or None."""
        heads = self._heads
        # Runs start on granule boundaries, so aligning wastes at most align - granule bytes:
        # a run at least `sure` long always fits, at its aligned start.
        sure = size + align - self.granule if align > self.granule else size
        first_sure = size_class(sure)
        if _class_floor(first_sure) < sure:
            first_sure += 1
        nonempty = self._nonempty
        cut = bisect_left(nonempty, first_sure)
        best_run = min(map(heads.__getitem__, nonempty[cut:])) if cut < len(nonempty) else None
        # The classes that straddle [size, sure): look at each run length present there.
        run_end = self._run_end
        for cls in nonempty[bisect_left(nonempty, size_class(size), 0, cut):cut]:
            if best_run is not None and heads[cls] >= best_run:
                continue
            # Most often one of the class's first few runs (in address order) fits: try them
            # before the length-by-length search, which stays the bound when they do not.
            walked = 0
            limit = _WALK if cls in self._lengths else _WALK_UNINDEXED
            members = self._classes[cls]
            for start in (members if best_run is None else
                          members.irange(maximum=best_run, inclusive=(True, False))):
                if -(-start // align) * align + size <= run_end[start]:
                    best_run = start
                    walked = -1
                    break
                walked += 1
                if walked == limit:
                    break
            if walked < limit:
                continue  # found, or every run of the class below the best looked at
            for length in self._length_index(cls).irange(minimum=size):
                starts = self._by_length[length]
                single = starts.__class__ is int
                if length >= sure:
                    head = starts if single else starts[0]
                    if best_run is None or head < best_run:
                        best_run = head
                    continue
                # Too short for some alignments: walk this length's runs in address order.
                if single:
                    starts = (starts,) if best_run is None or starts < best_run else ()
                else:
                    starts = starts.irange(maximum=best_run, inclusive=(True, False))
                for start in starts:
                    if -(-start // align) * align + size <= start + length:
                        best_run = start
                        break
        if best_run is None:
            return None
        return -(-best_run // align) * align, best_run

    def allocate(self, size: int, align: int = 64) -> int | None:
        """Place ``size`` bytes at the lowest address aligned to ``align``; None when none fits.

        A failed call changes nothing. Complexity: O(C log n) typical, see the module doc.
        """
        found = self._search(size, align)
        if found is None:
            return None
        placed, start = found
        end = self._run_end[start]
        self._remove_run(start, end)
        if placed > start:
            self._add_run(start, placed)
        if placed + size < end:
            self._add_run(placed + size, end)
        self._live[placed] = size
        self._free_bytes -= size
        return placed

    def release(self, start: int) -> int | None:
        """Give back the extent that begins at ``start``; its size, or None if none begins there.

        Coalesces with the free neighbours. O(log n).
        """
        # _release's body without its journal entry: this is every free's path
        size = self._live.pop(start, None)
        if size is None:
            return None
        end = start + size
        self._free_bytes += size
        lo, hi = start, end
        prev = self._run_start.get(lo)
        if prev is not None:
            self._remove_run(prev, lo)
            lo = prev
        nxt = self._run_end.get(hi)
        if nxt is not None:
            self._remove_run(hi, nxt)
            hi = nxt
        self._add_run(lo, hi)
        return size

    def _release(self, start: int) -> tuple[int, int, int, int] | None:
        """Release the extent at ``start``: (start, end, lo, hi) with [lo, hi) the free run
        it became part of, or None if no extent begins there."""
        size = self._live.pop(start, None)
        if size is None:
            return None
        end = start + size
        self._free_bytes += size
        run_start = self._run_start
        run_end = self._run_end
        lo, hi = start, end
        prev = run_start.get(lo)
        if prev is not None:
            self._remove_run(prev, lo)
            lo = prev
        nxt = run_end.get(hi)
        if nxt is not None:
            self._remove_run(hi, nxt)
            hi = nxt
        self._add_run(lo, hi)
        return start, end, lo, hi

    def release_tentatively(self, starts: Iterable[int]) -> list[tuple[int, int, int, int]]:
        """Release the extents at ``starts``; a journal that :meth:`undo_release` reverts
        (as long as nothing was allocated or released in between). O(k log n)."""
        journal = []
        for start in starts:
            step = self._release(start)
            if step is not None:
                journal.append(step)
        return journal

    def undo_release(self, journal: list[tuple[int, int, int, int]]) -> None:
        """Take back the extents :meth:`release_tentatively` released, newest first, leaving
        the free runs exactly as they were. O(k log n)."""
        for start, end, lo, hi in reversed(journal):
            self._remove_run(lo, hi)
            if lo < start:
                self._add_run(lo, start)
            if end < hi:
                self._add_run(end, hi)
            self._live[start] = end - start
            self._free_bytes -= end - start

    # -- queries ------------------------------------------------------------------------------

    @property
    def free_bytes(self) -> int:
        """Bytes in free runs (kept current, O(1))."""
        return self._free_bytes

    @property
    def used_bytes(self) -> int:
        """Bytes in live extents (O(1))."""
        return self.capacity - self._free_bytes

    def __len__(self) -> int:
        """The number of live extents."""
        return len(self._live)

    def extent(self, start: int) -> int | None:
        """The end of the live extent that begins at ``start``, or None."""
        size = self._live.get(start)
        return None if size is None else start + size

    def free_runs(self) -> Iterator[tuple[int, int]]:
        """Free runs ``(start, end)`` in address order. O(n log n)."""
        return iter(sorted(self._run_end.items()))

    def live_extents(self) -> Iterator[tuple[int, int]]:
        """Live extents ``(start, end)`` in address order. O(m log m)."""
        return iter(sorted((start, start + size) for start, size in self._live.items()))

    def largest_free_run(self) -> int:
        """Length of the longest free run (0 when full). O(C + runs of the top class)."""
        if not self._nonempty:
            return 0
        top = self._nonempty[-1]
        run_end = self._run_end
        return max(run_end[s] - s for s in self._classes[top])

    def free_aligned_pages(self, page: int, also_free: Iterable[tuple[int, int]] = ()) -> int:
        """How many whole, ``page``-aligned pages lie in free runs. O(n).

        This is what a huge-page figure of aclrtGetMemInfo counts. ``also_free`` extents
        (live ones the caller counts as free) join the runs they touch. O(n log n) then.
        """
        runs: Iterable[tuple[int, int]] = self._run_end.items()
        extra = list(also_free)
        if extra:
            merged: list[list[int]] = []
            for start, end in sorted([*runs, *extra]):
                if merged and merged[-1][1] == start:
                    merged[-1][1] = end
                else:
                    merged.append([start, end])
            runs = merged
        count = 0
        for start, end in runs:
            first = -(-start // page)
            last = end // page
            if last > first:
                count += last - first
        return count

    def check_invariants(self) -> None:
        """Assert the free list is sorted, disjoint, coalesced, aligned and accounts for all.

        For tests; production never calls it. Raises AssertionError on the first breach.
        """
        g = self.granule
        runs = sorted(self._run_end.items())
        assert len(runs) == len(self._run_start), "run maps out of step"
        assert self._nonempty == sorted(self._nonempty), "class list not ascending"
        indexed = 0
        for cls, members in self._classes.items():
            assert bool(members) == (cls in self._nonempty), f"class list wrong at {cls}"
            assert self._heads.get(cls) == (members[0] if members else None), "head stale"
            for start in members:
                assert size_class(self._run_end[start] - start) == cls, "run in wrong class"
            indexed += len(members)
        assert indexed == len(runs), "class index out of step with the runs"
        by_length = {n: [v] if v.__class__ is int else list(v) for n, v in self._by_length.items()}
        indexed = sum(len(self._classes[c]) for c in self._lengths)
        assert sum(len(v) for v in by_length.values()) == indexed, "length index wrong"
        for length, starts in by_length.items():
            assert starts and length in self._lengths[size_class(length)], "length index stale"
            assert len(starts) == 1 or self._by_length[length].__class__ is SortedList
            for start in starts:
                assert self._run_end[start] - start == length, "run under the wrong length"
        free = 0
        prev_end = None
        for start, end in runs:
            assert self._run_start[end] == start, "run maps disagree"
            assert self.base <= start < end <= self.base + self.capacity, "run out of range"
            assert start % g == 0 and end % g == 0, "run not on the granule"
            if prev_end is not None:
                assert start > prev_end, "free runs overlap or are not coalesced"
            prev_end = end
            free += end - start
        live = sorted((start, start + size) for start, size in self._live.items())
        used = 0
        for start, end in live:
            assert start % g == 0 and end % g == 0 and start < end, "live extent misaligned"
            used += end - start
        assert free == self._free_bytes, "free byte count wrong"
        assert free + used == self.capacity, "free + live != capacity"
        # No live extent overlaps another or a free run: merge both lists and walk them.
        merged = sorted(runs + live)
        for (_, e0), (s1, _) in zip(merged, merged[1:]):
            assert e0 <= s1, f"overlap at {s1:#x}"
