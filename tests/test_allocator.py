"""Example tests of the first-fit allocator: placement, alignment, splitting, coalescing."""

import pytest

from ascend_memsim.memory.allocator import Allocator


def test_first_fit_takes_the_lowest_hole_that_fits():
    a = Allocator(64 * 1024)
    p = [a.allocate(1024) for _ in range(4)]
    assert p == [0, 1024, 2048, 3072]
    a.release(p[0])  # a 1 KiB hole at 0
    a.release(p[2])  # a 1 KiB hole at 2048
    assert a.allocate(2048) == 4096  # neither hole holds 2 KiB
    assert a.allocate(512) == 0  # the lowest hole wins
    assert a.allocate(1024) == 2048
    a.check_invariants()


def test_alignment_leaves_the_gap_before_the_block_free():
    a = Allocator(8 * 4096)
    assert a.allocate(64) == 0
    assert a.allocate(64, 4096) == 4096
    assert list(a.free_runs())[0] == (64, 4096)
    assert a.allocate(4096 - 64) == 64  # the gap is usable
    a.check_invariants()


def test_release_coalesces_both_neighbours():
    a = Allocator(4096)
    x, y, z = a.allocate(64), a.allocate(64), a.allocate(64)
    a.release(x)
    a.release(z)
    assert len(list(a.free_runs())) == 2
    a.release(y)
    assert list(a.free_runs()) == [(0, 4096)]
    assert a.free_bytes == 4096
    a.check_invariants()


def test_failed_allocation_changes_nothing():
    a = Allocator(4096)
    a.allocate(64)
    before = (list(a.free_runs()), list(a.live_extents()), a.free_bytes)
    assert a.allocate(8192) is None
    assert a.allocate(64, 8192) is None
    assert (list(a.free_runs()), list(a.live_extents()), a.free_bytes) == before


def test_release_of_an_unknown_start_returns_none():
    a = Allocator(4096)
    p = a.allocate(128)
    assert a.release(p + 64) is None
    assert a.release(p) == 128
    assert a.release(p) is None
    a.check_invariants()


def test_base_offsets_every_address():
    a = Allocator(1 << 20, base=1 << 40)
    assert a.allocate(64) == 1 << 40
    assert a.allocate(64, 1 << 16) == (1 << 40) + (1 << 16)
    a.check_invariants()


def test_huge_alignment_skips_small_misaligned_runs():
    # Free runs of 2 MiB that are misaligned cannot host an aligned 2 MiB page.
    mib = 1 << 20
    a = Allocator(16 * mib)
    a.allocate(mib)  # [0, 1M)
    hole = a.allocate(2 * mib)  # [1M, 3M)
    a.allocate(mib)  # [3M, 4M)
    a.release(hole)
    assert a.find(2 * mib, 2 * mib) == 4 * mib
    assert a.find(2 * mib, 64) == hole


def test_largest_free_run_and_free_aligned_pages():
    mib = 1 << 20
    a = Allocator(8 * mib)
    a.allocate(64)
    assert a.largest_free_run() == 8 * mib - 64
    assert a.free_aligned_pages(2 * mib) == 3
    full = Allocator(128)
    full.allocate(128)
    assert full.largest_free_run() == 0


def test_an_empty_range_holds_nothing_and_a_full_one_refills():
    empty = Allocator(0, base=1 << 20)
    assert empty.allocate(64) is None and empty.release(1 << 20) is None
    assert empty.largest_free_run() == 0 and list(empty.free_runs()) == []
    empty.check_invariants()
    full = Allocator(4 * 64)
    blocks = [full.allocate(64) for _ in range(4)]
    assert list(full.free_runs()) == [] and full.allocate(64) is None
    full.release(blocks[3])  # no free run left anywhere: the first one comes back
    full.release(blocks[1])
    assert list(full.free_runs()) == [(64, 128), (192, 256)]
    assert full.largest_free_run() == 64
    full.check_invariants()


@pytest.mark.parametrize("bad", [dict(capacity=100), dict(capacity=-64), dict(capacity=64, base=1)])
def test_constructor_rejects_unaligned_ranges(bad):
    with pytest.raises(ValueError):
        Allocator(**bad)


def test_many_too_short_holes_in_front_stay_first_fit():
    # 200 holes of 4096 bytes, then holes of 4096 + 64k (k < 8), spread over several chunks
    # of runs; a request just longer than the first ones must skip them all. Every answer
    # must still be the lowest hole that fits, and stay so as the holes change.
    a = Allocator(1 << 24)
    holes = []
    for i in range(240):
        holes.append(a.allocate(4096 if i < 200 else 4096 + 64 * (i % 8)))
        a.allocate(64)  # keeps the holes apart
    for p in holes:
        a.release(p)
    for want in (4096 + 64 * 7, 4096 + 64 * 5, 4096 + 64 * 6, 4096 + 64 * 7, 4096):
        runs = list(a.free_runs())
        expected = next(s for s, e in runs if e - s >= want)
        assert a.allocate(want) == expected
        a.check_invariants()
    for p in holes[:50]:
        if a.extent(p):
            a.release(p)
        a.check_invariants()
    expected = next(s for s, e in a.free_runs() if e - s >= 4288)
    assert a.allocate(4096 + 64 * 3) == expected


def test_undo_release_restores_the_free_runs_exactly():
    alloc = Allocator(64 * 64)
    starts = [alloc.allocate(64 * n) for n in (1, 2, 1, 3, 1)]
    alloc.release(starts[1])
    runs, free = list(alloc.free_runs()), alloc.free_bytes
    journal = alloc.release_tentatively([starts[0], starts[2], starts[4], 12345])
    assert len(journal) == 3 and alloc.free_bytes == free + 3 * 64
    alloc.check_invariants()
    alloc.undo_release(journal)
    assert list(alloc.free_runs()) == runs and alloc.free_bytes == free
    alloc.check_invariants()
