"""torch_npu's caching allocator: its malloc/free pair against the runtime's own ``acl.rt`` pair.

Run: ``python benchmarks/bench_caching_allocator.py [pairs]`` (default 20,000; under a minute).
Prints one table, all figures from this run, each the best of three alternating rounds (a busy
machine slows them alike), for the sanitizer in its default mode and off:

1. ``acl.rt.malloc(512)`` + ``acl.rt.free``, the baseline (1.00x);
2. ``NpuCachingAllocator.malloc(512)`` + ``free``, a cache hit in the small pool, with 1 and
   with 10,000 other free blocks cached in the pool (best fit is a ``SortedList`` bisect:
   O(log n) in the pool's free blocks);
3. the same for 4 MiB, a cache hit in the large pool;
4. ``malloc`` + ``free`` + ``empty_cache`` of 512 B and of 4 MiB: every pair takes a new
   segment from the runtime (``aclrtMallocAlign32``, 2 MiB or 4 MiB) and gives it back
   (``aclrtFree``), after the device synchronisation ``empty_cache`` does first.

The ratio is time per pair over the baseline's in the same round.
"""

from __future__ import annotations

import os
import sys
import time

# Use the checkout this file lives in, not an installed copy.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from ascend_memsim import GiB, MiB, Runtime, acl
from ascend_memsim.allocators import NpuCachingAllocator

ROUNDS = 3


def per_pair(fn, n: int) -> float:
    """Microseconds per call of ``fn`` over ``n`` calls."""
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n * 1e6


def rows(rt: Runtime, pairs: int) -> list[tuple[str, object, int]]:
    """(name, one pair, calls) for every row, all on the runtime's device 0."""
    malloc, free = acl.rt.malloc, acl.rt.free

    def acl_pair() -> None:
        free(malloc(512, 0)[0])

    alone = NpuCachingAllocator(rt)
    alone.free(alone.malloc(512))  # its first segment, then a cache hit every pair
    alone.free(alone.malloc(4 * MiB))
    crowded = NpuCachingAllocator(rt)
    held = [crowded.malloc(512) for _ in range(20_000)]
    for ptr in held[1::2]:  # 10,000 free 512 B blocks, none of them mergeable
        crowded.free(ptr)
    fresh = NpuCachingAllocator(rt)

    def hit(alloc: NpuCachingAllocator, size: int):
        a_malloc, a_free = alloc.malloc, alloc.free
        return lambda: a_free(a_malloc(size))

    def segment(size: int):
        f_malloc, f_free, empty = fresh.malloc, fresh.free, fresh.empty_cache

        def pair() -> None:
            f_free(f_malloc(size))
            empty()
        return pair

    few = max(pairs // 10, 200)
    return [("acl.rt malloc(512) + free", acl_pair, pairs),
            ("caching 512 B, cache hit, 1 cached", hit(alone, 512), pairs),
            ("caching 512 B, cache hit, 10,000 cached", hit(crowded, 512), pairs),
            ("caching 4 MiB, cache hit", hit(alone, 4 * MiB), pairs),
            ("caching 512 B + empty_cache (new segment)", segment(512), few),
            ("caching 4 MiB + empty_cache (new segment)", segment(4 * MiB), few)]


def main(pairs: int = 20_000) -> None:
    print(f"malloc/free pairs, NpuCachingAllocator against acl.rt ({pairs:,} pairs per row, "
          f"best of {ROUNDS} alternating rounds, one process)")
    print(f"{'sanitizer':<10}{'pair':<44}{'us/pair':>9}{'x acl.rt':>10}")
    for mode in ("report", "off"):
        with Runtime("A2", hbm_bytes=64 * GiB,
                     sanitizer={"mode": mode, "leaks": False, "output": None}) as rt:
            acl.rt.set_device(0)
            table = rows(rt, pairs)
            best: dict[str, float] = {}
            for _ in range(ROUNDS):
                for name, fn, n in table:
                    us = per_pair(fn, n)
                    best[name] = min(us, best.get(name, us))
            base = best[table[0][0]]
            label = "default" if mode == "report" else "off"
            for name, _, _ in table:
                print(f"{label:<10}{name:<44}{best[name]:>9.2f}{best[name] / base:>9.2f}x")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:]))
