"""The allocator against a naive model: a bytearray occupancy map of a tiny address range.

The model's first fit is the lowest aligned address whose whole range is free; the real
allocator must give exactly that address, and refuse exactly when the model finds none.
"""

from hypothesis import example, given
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, invariant, rule

from ascend_memsim.memory.allocator import Allocator

G = 64
UNITS = 256  # a 16 KiB range in 64-byte units keeps the model cheap
BASE = 1 << 20


class Model:
    """Occupancy per 64-byte unit; first fit by scanning every aligned start."""

    def __init__(self) -> None:
        self.used = bytearray(UNITS)

    def first_fit(self, size: int, align: int) -> int | None:
        n, step = size // G, align // G
        for unit in range(0, UNITS - n + 1, step):
            if not any(self.used[unit:unit + n]):
                return BASE + unit * G
        return None

    def mark(self, ptr: int, size: int, value: int) -> None:
        unit = (ptr - BASE) // G
        self.used[unit:unit + size // G] = bytes([value]) * (size // G)


sizes = st.integers(1, 40).map(lambda n: n * G)
aligns = st.sampled_from([64, 128, 256, 1024, 4096])


class AllocatorMachine(RuleBasedStateMachine):
    blocks = Bundle("blocks")

    def __init__(self) -> None:
        super().__init__()
        self.alloc = Allocator(UNITS * G, base=BASE)
        self.model = Model()

    @rule(target=blocks, size=sizes, align=aligns)
    def allocate(self, size, align):
        expected = self.model.first_fit(size, align)
        got = self.alloc.allocate(size, align)
        assert got == expected
        if got is None:
            return None
        self.model.mark(got, size, 1)
        return (got, size)

    @rule(block=consumes(blocks))
    def release(self, block):
        if block is None:
            return
        ptr, size = block
        assert self.alloc.release(ptr) == size
        self.model.mark(ptr, size, 0)

    @rule(block=blocks)
    def release_twice_is_refused(self, block):
        if block is not None and self.alloc.extent(block[0]) is None:
            assert self.alloc.release(block[0]) is None

    @invariant()
    def sound(self):
        self.alloc.check_invariants()
        assert self.alloc.free_bytes == self.model.used.count(0) * G


TestAllocatorMachine = AllocatorMachine.TestCase


@given(st.lists(st.tuples(st.booleans(), sizes, aligns), max_size=60))
@example([(True, 64, 64), (True, 128, 4096), (False, 64, 64), (True, 64, 1024)])
def test_first_fit_matches_the_model(program):
    alloc = Allocator(UNITS * G, base=BASE)
    model = Model()
    live: list[tuple[int, int]] = []
    for release, size, align in program:
        if release and live:
            ptr, n = live.pop(size // G % len(live))
            alloc.release(ptr)
            model.mark(ptr, n, 0)
            continue
        got = alloc.allocate(size, align)
        assert got == model.first_fit(size, align)
        if got is not None:
            assert got % align == 0
            model.mark(got, size, 1)
            live.append((got, size))
    alloc.check_invariants()


@given(st.lists(sizes, min_size=1, max_size=30))
def test_free_everything_gives_one_run(sizes_list):
    alloc = Allocator(UNITS * G, base=BASE)
    ptrs = [p for p in (alloc.allocate(s) for s in sizes_list) if p is not None]
    for p in reversed(ptrs[::2]):
        alloc.release(p)
    for p in ptrs[1::2]:
        alloc.release(p)
    assert list(alloc.free_runs()) == [(BASE, BASE + UNITS * G)]
    alloc.check_invariants()


MiB = 1 << 20


class RunListModel:
    """The free runs as a sorted list of [start, end); first fit walks them in order."""

    def __init__(self, base: int, capacity: int) -> None:
        self.runs = [[base, base + capacity]]

    def first_fit(self, size: int, align: int) -> int | None:
        for start, end in self.runs:
            placed = -(-start // align) * align
            if placed + size <= end:
                return placed
        return None

    def take(self, ptr: int, size: int) -> None:
        i = next(i for i, (s, e) in enumerate(self.runs) if s <= ptr and ptr + size <= e)
        s, e = self.runs[i]
        self.runs[i:i + 1] = [r for r in ([s, ptr], [ptr + size, e]) if r[0] < r[1]]

    def give(self, ptr: int, size: int) -> None:
        self.runs.append([ptr, ptr + size])
        self.runs.sort()
        merged = [self.runs[0]]
        for s, e in self.runs[1:]:
            if merged[-1][1] == s:
                merged[-1][1] = e
            else:
                merged.append([s, e])
        self.runs = merged


class TinyChunks(Allocator):
    """Two to four runs a chunk, so a small heap crosses chunk boundaries all the time."""

    _LOAD = 2


# sizes from one granule to a few huge pages; the heap is 24 MiB so 2 MiB alignment matters
big_sizes = st.one_of(st.integers(1, 64).map(lambda n: n * G),
                      st.integers(1, 48).map(lambda n: n * 64 * 1024))
big_aligns = st.sampled_from([64, 4096, 2 * MiB])
steps = st.lists(st.tuples(st.sampled_from(["alloc", "alloc", "free", "tentative"]),
                           big_sizes, big_aligns, st.integers(0, 1 << 16)), max_size=120)


@given(steps, st.sampled_from([Allocator, TinyChunks]), st.sampled_from([4 * MiB, 24 * MiB]))
@example([("alloc", 64, 64, 0), ("alloc", 2 * MiB, 2 * MiB, 0), ("free", 0, 64, 0),
          ("alloc", MiB, 2 * MiB, 0)], TinyChunks, 24 * MiB)
@example([("alloc", 64 * 1024 * n, 64, 0) for n in (8, 16, 8, 16, 16)]
         + [("free", 0, 64, p) for p in (1, 3, 0, 0, 0)], TinyChunks, 4 * MiB)
def test_aligned_first_fit_matches_a_run_list_model(program, kind, capacity):
    # The small heap fills up, so blocks are freed after the last free run and with none.
    base = 3 * MiB  # not huge-page aligned: the first fit of a 2 MiB page is not at the base
    alloc = kind(capacity, base=base)
    model = RunListModel(base, capacity)
    live: list[tuple[int, int]] = []
    for op, size, align, pick in program:
        if op == "alloc" or not live:
            expected = model.first_fit(size, align)
            assert alloc.find(size, align) == expected
            got = alloc.allocate(size, align)
            assert got == expected
            if got is not None:
                model.take(got, size)
                live.append((got, size))
        elif op == "free":
            ptr, size = live.pop(pick % len(live))
            assert alloc.release(ptr) == size
            model.give(ptr, size)
        else:
            # release a few blocks tentatively, then take them back: nothing may change
            before = list(alloc.free_runs())
            chosen = {live[(pick + i * 7) % len(live)][0] for i in range(3)}
            journal = alloc.release_tentatively([*chosen, 1])
            assert len(journal) == len(chosen)
            alloc.check_invariants()
            alloc.undo_release(journal)
            assert list(alloc.free_runs()) == before
        assert [list(r) for r in alloc.free_runs()] == model.runs
        assert alloc.largest_free_run() == max((e - s for s, e in model.runs), default=0)
        alloc.check_invariants()
