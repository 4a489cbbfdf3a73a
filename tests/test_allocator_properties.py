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
