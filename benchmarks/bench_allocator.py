"""First-fit speed: the simulator's first-fit against a plain linear scan, and at scale.

Run: ``python benchmarks/bench_allocator.py`` (about half a minute). Prints two tables:

1. 1 MiB malloc/free pairs through ``acl.rt`` with 10,000 small holes in front of the first
   run that fits, against the same pairs on :class:`LinearFirstFit` (an address-ordered
   list scanned from the front: the textbook first-fit) with the same holes.
2. malloc/free throughput through ``acl.rt`` in a fragmented heap holding 1,000 and 100,000
   live blocks.

Ratios come from one run on one machine, so they compare like with like.
"""

from __future__ import annotations

import bisect
import time

from ascend_memsim import GiB, MiB, Runtime, acl

NORMAL_ONLY = 2


class LinearFirstFit:
    """The baseline: free runs in an address-ordered list, scanned from the front."""

    def __init__(self, capacity: int) -> None:
        self.starts = [0]
        self.ends = [capacity]
        self.live: dict[int, int] = {}

    def allocate(self, size: int) -> int | None:
        for i, (start, end) in enumerate(zip(self.starts, self.ends)):
            if end - start >= size:
                if end - start == size:
                    del self.starts[i], self.ends[i]
                else:
                    self.starts[i] = start + size
                self.live[start] = start + size
                return start
        return None

    def release(self, start: int) -> None:
        end = self.live.pop(start)
        i = bisect.bisect_left(self.starts, start)
        if i > 0 and self.ends[i - 1] == start:
            start = self.starts[i - 1]
            del self.starts[i - 1], self.ends[i - 1]
            i -= 1
        if i < len(self.starts) and self.starts[i] == end:
            end = self.ends[i]
            del self.starts[i], self.ends[i]
        self.starts.insert(i, start)
        self.ends.insert(i, end)


def _rate(fn, pairs: int) -> float:
    """Pairs per second of ``fn(pairs)``, best of three."""
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        fn(pairs)
        best = min(best, time.perf_counter() - t0)
    return pairs / best


def holes_in_front(sanitizer: str, holes: int = 10_000, pairs: int = 2_000) -> float:
    """Simulator pairs/s with ``holes`` small holes in front of the first run that fits."""
    with Runtime("A2", hbm_bytes=16 * GiB, sanitizer={"mode": sanitizer, "leaks": False}):
        acl.rt.set_device(0)
        ptrs = [acl.rt.malloc(64, NORMAL_ONLY)[0] for _ in range(2 * holes)]
        for p in ptrs[::2]:
            acl.rt.free(p)  # 10,000 holes of 128 bytes, each too small for 1 MiB

        def sim(n: int) -> None:
            malloc, free = acl.rt.malloc, acl.rt.free
            for _ in range(n):
                ptr, _ = malloc(MiB, NORMAL_ONLY)
                free(ptr)

        return _rate(sim, pairs)


def linear_holes_in_front(holes: int = 10_000, pairs: int = 100) -> float:
    """The same on the linear-scan baseline."""
    base = LinearFirstFit(16 * GiB)
    blocks = [base.allocate(128) for _ in range(2 * holes)]
    for p in blocks[::2]:
        base.release(p)

    def linear(n: int) -> None:
        for _ in range(n):
            base.release(base.allocate(MiB + 64))

    return _rate(linear, pairs)


def fragmented(live: int, pairs: int = 5_000) -> float:
    """malloc/free pairs per second with ``live`` blocks of mixed sizes and holes between."""
    with Runtime("A2", hbm_bytes=64 * GiB, sanitizer="off"):
        acl.rt.set_device(0)
        sizes = [100, 4096, 70_000, 300_000]
        ptrs = [acl.rt.malloc(sizes[i % 4], NORMAL_ONLY)[0] for i in range(2 * live)]
        for p in ptrs[1::2]:
            acl.rt.free(p)

        def churn(n: int) -> None:
            malloc, free = acl.rt.malloc, acl.rt.free
            for i in range(n):
                ptr, _ = malloc(sizes[i % 4] + 32 * (i % 7), NORMAL_ONLY)
                free(ptr)

        return _rate(churn, pairs)


def main() -> None:
    baseline = linear_holes_in_front()
    print("1 MiB malloc/free pairs with 10,000 small holes in front")
    print(f"{'allocator':<44}{'pairs/s':>12}{'ratio':>9}")
    for label, mode in (("acl.rt, sanitizer off", "off"), ("acl.rt, sanitizer report (default)",
                                                             "report")):
        rate = holes_in_front(mode)
        print(f"{label:<44}{rate:>12,.0f}{rate / baseline:>8.1f}x")
    print(f"{'linear-scan first-fit (baseline)':<44}{baseline:>12,.0f}{1:>8.1f}x")
    print()
    small, large = fragmented(1_000), fragmented(100_000)
    print("malloc/free pairs through acl.rt in a fragmented heap")
    print(f"{'live blocks (sanitizer off)':<44}{'pairs/s':>12}{'ratio':>9}")
    print(f"{'1,000':<44}{small:>12,.0f}{1:>8.2f}")
    print(f"{'100,000':<44}{large:>12,.0f}{large / small:>8.2f}")


if __name__ == "__main__":
    main()
