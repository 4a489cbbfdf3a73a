"""Cost of the sanitizer on malloc/free: off, report (the default), strict, report + quarantine.

Run: python benchmarks/bench_sanitizer.py [pairs]. Prints a table; target: report <= 2x off.
"""

from __future__ import annotations

import os
import sys
import time

# Use the checkout this file lives in, not an installed copy.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from ascend_memsim import MiB, Runtime
from ascend_memsim.checks.sanitizer import Sanitizer


def run(spec, pairs: int) -> float:
    """Seconds per malloc+free pair over a mixed workload with 64 blocks live."""
    with Runtime("A2", hbm_bytes=1024 * MiB, sanitizer=spec) as rt:
        rt.set_device(0)
        live = [rt.malloc(64 + 37 * i) for i in range(64)]
        sizes = [100, 4096, 70_000, 3 * MiB, 512]
        best = float("inf")
        for _ in range(3):
            start = time.perf_counter()
            for i in range(pairs):
                j = i & 63
                rt.free(live[j])
                live[j] = rt.malloc(sizes[i % 5])
            best = min(best, time.perf_counter() - start)
        for ptr in live:
            rt.free(ptr)
    return best / pairs


def main(pairs: int = 20_000) -> None:
    rows = [("off", "off"), ("report (default)", Sanitizer("report", output=None)),
            ("strict", Sanitizer("strict", output=None)),
            ("report, no sites", Sanitizer("report", output=None, record_sites=False)),
            ("report + 64 MiB quarantine",
             Sanitizer("report", output=None, quarantine_bytes=64 * MiB))]
    results = [(name, run(spec, pairs)) for name, spec in rows]
    base = results[0][1]
    print(f"malloc+free pairs: {pairs} (best of 3), 64 blocks live")
    print(f"{'sanitizer':28} {'us/pair':>8} {'x off':>6}")
    for name, seconds in results:
        print(f"{name:28} {seconds * 1e6:8.2f} {seconds / base:6.2f}")
    print(f"\nreport / off = {results[1][1] / base:.2f} (target <= 2.00)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20_000)
