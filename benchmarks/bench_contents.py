"""Device bytes: sparse device-to-device copies and the first touch of a fresh block.

Run: ``python benchmarks/bench_contents.py`` (needs numpy; under a minute). Prints one table,
each figure from this run:

1. host memory (RSS growth) of copying a never-written 2 GiB block to another block, device
   to device (target <= 50 MiB);
2. a 64 MiB host-to-device copy into a block never written before (its pages are touched
   for the first time), against numpy copying the same array into a fresh ``np.empty`` of
   its own (numpy advises huge pages on large buffers; the simulator does on writes of
   2 MiB or more), best of 5 fresh targets each (target <= 2x);
3. the same 64 MiB copy into the now warm block, for scale.
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np

from ascend_memsim import GiB, MallocPolicy, MiB, Runtime

H2D, D2D = 1, 3


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def sparse_copy() -> float:
    with Runtime("A2", hbm_bytes=8 * GiB, sanitizer="off") as rt:
        rt.set_device(0)
        a = rt.malloc(2 * GiB, MallocPolicy.NORMAL_ONLY)
        b = rt.malloc(2 * GiB, MallocPolicy.NORMAL_ONLY)
        before = rss_mib()
        rt.memcpy(b, 2 * GiB, a, 2 * GiB, D2D)
        grew = rss_mib() - before
        rt.free(a)
        rt.free(b)
    return grew


def first_touch(size: int = 64 * MiB, runs: int = 5) -> tuple[float, float, float]:
    src = np.random.default_rng(1).integers(0, 255, size, dtype=np.uint8)
    best_np = best_sim = best_warm = float("inf")
    with Runtime("A2", hbm_bytes=4 * GiB, sanitizer="off") as rt:
        rt.set_device(0)
        host = rt.host.register(src).ptr
        for _ in range(runs):
            t0 = time.perf_counter()
            dst = np.empty_like(src)
            np.copyto(dst, src)
            best_np = min(best_np, time.perf_counter() - t0)
            del dst
            block = rt.malloc(size, MallocPolicy.NORMAL_ONLY)
            t0 = time.perf_counter()
            rt.memcpy(block, size, host, size, H2D)
            best_sim = min(best_sim, time.perf_counter() - t0)
            t0 = time.perf_counter()
            rt.memcpy(block, size, host, size, H2D)
            best_warm = min(best_warm, time.perf_counter() - t0)
            rt.free(block)
    return best_sim, best_np, best_warm


def main() -> None:
    grew = sparse_copy()
    sim, numpy_first, warm = first_touch()
    print("device bytes (one run)")
    print(f"{'measure':<62}{'figure':>12}{'target':>9}")
    print(f"{'D2D copy of a never-written 2 GiB block: RSS growth':<62}{grew:>8.1f} MiB"
          f"{'<= 50':>9}")
    print(f"{'64 MiB first-touch copy, simulator / numpy (best of 5)':<62}"
          f"{sim / numpy_first:>10.2f}x{'<= 2x':>9}")
    print(f"{'  simulator, numpy: ms':<62}{sim * 1e3:>6.1f}/{numpy_first * 1e3:.1f}")
    print(f"{'64 MiB copy into the warm block / numpy first touch':<62}"
          f"{warm / numpy_first:>10.2f}x")


if __name__ == "__main__":
    main()
