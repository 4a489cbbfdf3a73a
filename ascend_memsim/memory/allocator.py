"""Exact first-fit with per-request alignment over one address range.

The allocator knows nothing of products, policies or pages: it places ``size`` bytes at the
lowest address, aligned to ``align``, where a free run can hold them, and gives them back.

Free runs live in address-ordered *chunks*: chunk ``k`` is two ``array('q')``, the starts
``_S[k]`` and the lengths ``_L[k]`` of up to 64 consecutive runs (a chunk splits in two halves
of 32 when it passes 64, and is dropped when it empties). Beside them, per chunk:

* ``_smax[k]``: its last run start (an ``array('q')``), so an address bisects to its chunk;
* ``_cmax[k]``: its longest run;
* ``_T``: a binary max-tree over ``_cmax`` in one ``array('q')`` (leaves at ``_P + k``, ``_P``
  a power of two, padding leaves 0, the root ``_T[1]`` the longest free run).

First fit of ``size`` descends the tree to the leftmost chunk whose longest run holds it,
then takes the first run there at least that long (``filter`` over the array, in C). Runs
start on granule boundaries, so aligning to ``align`` wastes at most ``align - granule``
bytes: a run of ``sure = size + align - granule`` bytes always fits, but a shorter one of at
least ``size`` may fit or not. An aligned request therefore finds B, the leftmost run of at
least ``sure``, by the same descent, then walks the runs of at least ``size`` that lie
before B (chunk by chunk, from the leftmost chunk that could hold one, each next chunk found
by the tree) and takes the first whose aligned start fits; B when none does. For an
alignment up to the granule, ``sure == size`` and the walk is empty.

Release bisects ``_smax`` to the chunk, then the chunk to the run, and coalesces with the
runs before and after (which may lie in the neighbouring chunk). The arrays hold machine
integers, so a heap of 100,000 runs is a few MB of contiguous memory instead of tens of MB
of dict entries and ``SortedList`` nodes; that, and doing the scans in C, is what makes
this faster than a class-indexed first-fit at every heap size. Costs, with n free runs in
c = O(n / 32) chunks:

* :meth:`allocate`: O(log c + 64) plain (tree descent plus a C scan of one chunk and an
  ``array`` insert or delete). Aligned: the same plus one O(64 + log c) step per chunk
  holding a run of at least ``size`` before B, and one Python step per such run:
  O(m + c' log c) for m such runs in c' chunks, O(n) at worst (a heap full of runs just
  too short to hold the request at its alignment). Huge-page requests are the aligned ones.
* :meth:`release`: O(log c + 64).
* both: a chunk that splits or empties rebuilds the tree, O(c) (mostly in C). A chunk
  splits only after 32 run insertions into it since it was made and empties at most once,
  so that is at most about two rebuilds per 32 run insertions: amortised O(c / 16).
* construction: O(1) (one chunk with one run, a one-leaf tree).

>>> a = Allocator(1 << 20)
>>> a.allocate(100, 64), a.allocate(64, 4096)
(0, 4096)
>>> a.release(0)
100
>>> a.check_invariants()
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Iterable, Iterator

__all__ = ["Allocator"]


class Allocator:
    """First-fit allocator over ``[base, base + capacity)``.

    All sizes, alignments and the base must be multiples of ``granule`` (64 bytes by
    default); alignments are powers of two.

    Size: longer than 350 lines because every method keeps the same chunk arrays, their summaries
    and the tree in step; a third of it is docstrings and :meth:`check_invariants`.
    """

    __slots__ = ("base", "capacity", "granule", "_S", "_L", "_smax", "_cmax", "_P", "_T",
                 "_live", "_free_bytes")

    #: a chunk holds _LOAD to 2 * _LOAD runs after a split (fewer as runs go); tests may
    #: set a small value on a subclass to exercise chunk boundaries in tiny heaps
    _LOAD = 32

    def __init__(self, capacity: int, *, base: int = 0, granule: int = 64) -> None:
        """O(1): one chunk holding the one free run."""
        if capacity < 0 or capacity % granule or base % granule:
            raise ValueError("capacity and base must be non-negative multiples of the granule")
        self.base = base
        self.capacity = capacity
        self.granule = granule
        #: per chunk: run starts and run lengths, address-ordered
        self._S: list[array[int]] = [array("q", (base,))] if capacity else []
        self._L: list[array[int]] = [array("q", (capacity,))] if capacity else []
        #: per chunk: its last run start
        self._smax = array("q", (base,) if capacity else ())
        #: per chunk: its longest run
        self._cmax: list[int] = [capacity] if capacity else []
        #: leaves in the tree (a power of two, at least the number of chunks)
        self._P = 1
        #: max-tree: node i has children 2i and 2i + 1; leaf k at _P + k; root at 1
        self._T: array[int] = array("q", (0, capacity))
        #: live extents: start -> length
        self._live: dict[int, int] = {}
        self._free_bytes = capacity

    # -- chunk and tree bookkeeping ---------------------------------------------------------

    def _rebuild(self) -> None:
        """Remake the tree after the number of chunks changed. O(c)."""
        c = len(self._cmax)
        p = 1
        while p < c:
            p *= 2
        t = array("q", bytes(16 * p))
        t[p:p + c] = array("q", self._cmax)
        n = p
        while n > 1:
            h = n // 2
            t[h:n] = array("q", map(max, t[n:2 * n:2], t[n + 1:2 * n:2]))
            n = h
        self._P = p
        self._T = t

    def _setmax(self, k: int, m: int) -> None:
        """Chunk ``k``'s longest run is now ``m``: update its leaf and the path up."""
        self._cmax[k] = m
        t = self._T
        i = self._P + k
        t[i] = m
        i >>= 1
        while i:
            a = t[2 * i]
            b = t[2 * i + 1]
            v = a if a > b else b
            if t[i] == v:
                break
            t[i] = v
            i >>= 1

    def _split(self, k: int) -> None:
        h = self._LOAD
        for chunks in (self._S, self._L):
            a = chunks[k]
            chunks[k:k + 1] = [a[:h], a[h:]]
        self._smax[k:k + 1] = array("q", (self._S[k][-1], self._S[k + 1][-1]))
        self._cmax[k:k + 1] = [max(self._L[k]), max(self._L[k + 1])]
        self._rebuild()

    def _drop(self, k: int) -> None:
        del self._S[k], self._L[k], self._smax[k], self._cmax[k]
        self._rebuild()

    def _descend(self, size: int) -> int:
        """The leftmost chunk holding a run of at least ``size`` (the root must hold one)."""
        t = self._T
        p = self._P
        i = 1
        while i < p:
            i += i
            if t[i] < size:
                i += 1
        return i - p

    def _next_chunk(self, k: int, size: int) -> int | None:
        """The first chunk after ``k`` holding a run of at least ``size``, or None."""
        t = self._T
        p = self._P
        i = p + k
        while i > 1:
            if not i & 1 and t[i + 1] >= size:
                i += 1
                while i < p:
                    i += i
                    if t[i] < size:
                        i += 1
                return i - p
            i >>= 1
        return None

    def _carve(self, k: int, j: int, placed: int, size: int) -> None:
        """Take ``[placed, placed + size)`` out of run ``j`` of chunk ``k`` (which holds it)."""
        sk = self._S[k]
        lk = self._L[k]
        s = sk[j]
        v = lk[j]
        head = placed - s
        tail = v - head - size
        if head:
            lk[j] = head
            if tail:
                j += 1
                sk.insert(j, placed + size)
                lk.insert(j, tail)
                if j == len(sk) - 1:
                    self._smax[k] = placed + size
                if v == self._cmax[k]:
                    self._setmax(k, max(lk))
                if len(sk) > 2 * self._LOAD:
                    self._split(k)
                return
        elif tail:
            sk[j] = placed + size
            lk[j] = tail
            if j == len(sk) - 1:
                self._smax[k] = placed + size
        else:
            del sk[j], lk[j]
            if not sk:
                self._drop(k)
                return
            if j == len(sk):
                self._smax[k] = sk[-1]
        if v == self._cmax[k]:
            self._setmax(k, max(lk))

    def _locate(self, start: int) -> tuple[int, int]:
        """(chunk, index) where a run starting at ``start`` is or would be inserted."""
        k = bisect_left(self._smax, start)
        if k == len(self._smax):
            if not k:
                return 0, 0
            k -= 1
            return k, len(self._S[k])
        return k, bisect_left(self._S[k], start)

    def _free(self, start: int, size: int) -> tuple[int, int]:
        """Return ``[start, start + size)`` to the free runs; the run it became part of."""
        end = start + size
        S, L, smax = self._S, self._L, self._smax
        if not S:
            S.append(array("q", (start,)))
            L.append(array("q", (size,)))
            smax.append(start)
            self._cmax.append(size)
            self._rebuild()
            return start, end
        k, j = self._locate(start)
        sk = S[k]
        lk = L[k]
        if j:
            pk, pj, plk = k, j - 1, lk
            prev = sk[pj]
        elif k:
            pk = k - 1
            plk = L[pk]
            pj = len(plk) - 1
            prev = S[pk][pj]
        else:
            prev = None
        joins_next = j < len(sk) and sk[j] == end
        if prev is not None and prev + plk[pj] == start:
            if joins_next:
                old = lk[j]
                nl = plk[pj] + size + old
                plk[pj] = nl
                del sk[j], lk[j]
                if pk == k:
                    if j == len(sk):
                        smax[k] = sk[-1]
                    if nl > self._cmax[k]:
                        self._setmax(k, nl)
                else:
                    if nl > self._cmax[pk]:
                        self._setmax(pk, nl)
                    if not sk:
                        self._drop(k)
                    elif old == self._cmax[k]:
                        self._setmax(k, max(lk))
                return prev, prev + nl
            nl = plk[pj] + size
            plk[pj] = nl
            if nl > self._cmax[pk]:
                self._setmax(pk, nl)
            return prev, prev + nl
        if joins_next:
            sk[j] = start
            nl = lk[j] + size
            lk[j] = nl
            if j == len(sk) - 1:
                smax[k] = start
            if nl > self._cmax[k]:
                self._setmax(k, nl)
            return start, start + nl
        sk.insert(j, start)
        lk.insert(j, size)
        if j == len(sk) - 1:
            smax[k] = start
        if size > self._cmax[k]:
            self._setmax(k, size)
        if len(sk) > 2 * self._LOAD:
            self._split(k)
        return start, end

    # -- the two hot operations -------------------------------------------------------------

    def find(self, size: int, align: int) -> int | None:
        """The address first-fit would give ``size`` bytes aligned to ``align``, or None.

        Changes nothing. Complexity as :meth:`allocate`.
        """
        found = self._search(size, align)
        return None if found is None else found[2]

    def _search(self, size: int, align: int) -> tuple[int, int, int] | None:
        """(chunk, run index, aligned address) of the first fit, or None."""
        t = self._T
        if t[1] < size or not self._S:
            return None
        sure = size + align - self.granule if align > self.granule else size
        if t[1] >= sure:
            p = self._P  # the descent of _descend, inlined: this is every malloc's path
            i = 1
            while i < p:
                i += i
                if t[i] < sure:
                    i += 1
            kb = i - p
            lk = self._L[kb]
            jb = lk.index(next(filter(sure.__le__, lk)))
            if sure == size:
                return kb, jb, self._S[kb][jb]
        else:
            kb = len(self._S)
            jb = 0
        # Runs of [size, sure) bytes before B may fit at their aligned start: walk them.
        k: int | None = self._descend(size)
        while k is not None and k <= kb:
            sk = self._S[k]
            lk = self._L[k]
            stop = jb if k == kb else len(lk)
            j = 0
            for v in filter(size.__le__, lk):
                j = lk.index(v, j)
                if j >= stop:
                    break
                s = sk[j]
                placed = -(-s // align) * align
                if placed + size <= s + v:
                    return k, j, placed
                j += 1
            k = self._next_chunk(k, size)
        if kb == len(self._S):
            return None
        return kb, jb, -(-self._S[kb][jb] // align) * align

    def allocate(self, size: int, align: int = 64) -> int | None:
        """Place ``size`` bytes at the lowest address aligned to ``align``; None when none fits.

        A failed call changes nothing. Complexity: see the module doc.
        """
        found = self._search(size, align)
        if found is None:
            return None
        k, j, placed = found
        self._carve(k, j, placed, size)
        self._live[placed] = size
        self._free_bytes -= size
        return placed

    def release(self, start: int) -> int | None:
        """Give back the extent that begins at ``start``; its size, or None if none begins there.

        Coalesces with the free neighbours. O(log c + 64), see the module doc.
        """
        size = self._live.pop(start, None)
        if size is None:
            return None
        self._free_bytes += size
        self._free(start, size)
        return size

    def release_tentatively(self, starts: Iterable[int]) -> list[tuple[int, int, int, int]]:
        """Release the extents at ``starts``; a journal that :meth:`undo_release` reverts
        (as long as nothing was allocated or released in between). O(k log n)."""
        journal = []
        for start in starts:
            size = self._live.pop(start, None)
            if size is None:
                continue
            self._free_bytes += size
            lo, hi = self._free(start, size)
            journal.append((start, start + size, lo, hi))
        return journal

    def undo_release(self, journal: list[tuple[int, int, int, int]]) -> None:
        """Take back the extents :meth:`release_tentatively` released, newest first, leaving
        the free runs exactly as they were. O(k log n)."""
        for start, end, lo, _hi in reversed(journal):
            k, j = self._locate(lo)
            self._carve(k, j, start, end - start)
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
        """Free runs ``(start, end)`` in address order. O(n)."""
        return iter([(s, s + n) for sk, lk in zip(self._S, self._L) for s, n in zip(sk, lk)])

    def live_extents(self) -> Iterator[tuple[int, int]]:
        """Live extents ``(start, end)`` in address order. O(m log m)."""
        return iter(sorted((start, start + size) for start, size in self._live.items()))

    def top_free_start(self) -> int:
        """Where the free run that reaches the end of the range starts (the end itself when
        the last byte is taken): an address above every live extent. O(1).

        >>> a = Allocator(1 << 20); a.allocate(4096), a.top_free_start()
        (0, 4096)
        """
        end = self.base + self.capacity
        if self._S:
            start, length = self._S[-1][-1], self._L[-1][-1]
            if start + length == end:
                return start
        return end

    def largest_free_run(self) -> int:
        """Length of the longest free run (0 when full). O(1): the tree's root."""
        return self._T[1]

    def free_aligned_pages(self, page: int, also_free: Iterable[tuple[int, int]] = ()) -> int:
        """How many whole, ``page``-aligned pages lie in free runs. O(n).

        This is what a huge-page figure of aclrtGetMemInfo counts. ``also_free`` extents
        (live ones the caller counts as free) join the runs they touch. O(n log n) then.
        """
        runs: Iterable[tuple[int, int]] | list[list[int]] = self.free_runs()
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
        """Assert the free runs are sorted, disjoint, coalesced, aligned and account for all,
        and that the chunks, their summaries and the tree agree with them.

        For tests; production never calls it. Raises AssertionError on the first breach.
        """
        g = self.granule
        S, L = self._S, self._L
        c = len(S)
        assert len(L) == len(self._smax) == len(self._cmax) == c, "chunk lists out of step"
        for k in range(c):
            assert S[k].typecode == L[k].typecode == "q", "chunk not an array of int64"
            assert 0 < len(S[k]) == len(L[k]) <= 2 * self._LOAD, f"chunk {k} size wrong"
            assert self._smax[k] == S[k][-1], f"chunk {k}: last start stale"
            assert self._cmax[k] == max(L[k]), f"chunk {k}: longest run stale"
        p, t = self._P, self._T
        assert p >= max(c, 1) and p & (p - 1) == 0 and (p == 1 or p < 2 * c), "tree size wrong"
        assert len(t) == 2 * p, "tree length wrong"
        assert list(t[p:]) == list(self._cmax) + [0] * (p - c), "tree leaves stale"
        for i in range(1, p):
            assert t[i] == max(t[2 * i], t[2 * i + 1]), f"tree node {i} stale"
        runs = list(self.free_runs())
        free = 0
        prev_end = None
        for start, end in runs:
            assert self.base <= start < end <= self.base + self.capacity, "run out of range"
            assert start % g == 0 and end % g == 0, "run not on the granule"
            if prev_end is not None:
                assert start > prev_end, "free runs overlap, are unsorted or not coalesced"
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
