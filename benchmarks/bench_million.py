"""A million live blocks: ``acl.rt.malloc(8)`` a million times with the sanitizer on.

Run: ``python benchmarks/bench_million.py [blocks]``. The allocations run in a fresh process
(so its peak RSS is theirs alone), in the sanitizer's default mode, every block kept live
until the end, then the runtime is torn down. Prints the time and the peak RSS of that
process, and the same process's start (imports, no allocation) for scale. Targets for a
million: <= 15 s and <= 400 MiB.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_CHILD = """
import sys, time
from ascend_memsim import Runtime, acl
count = int(sys.argv[1])
t0 = time.perf_counter()
with Runtime("A2", sanitizer={"mode": "report", "leaks": False, "output": None}):
    acl.rt.set_device(0)
    malloc = acl.rt.malloc
    ptrs = [malloc(8, 0)[0] for _ in range(count)]
    assert ptrs[-1] - ptrs[0] == 64 * (count - 1)  # first-fit: packed, 64-byte footprints
    made = time.perf_counter() - t0
print(made, time.perf_counter() - t0)
"""


def run(count: int) -> tuple[float, float, float]:
    """(seconds to make them, seconds including teardown, peak RSS MiB) in a fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    done = subprocess.run([sys.executable, "-c", _CHILD, str(count)], capture_output=True,
                          text=True, check=True, env={**os.environ, "PYTHONPATH": ROOT})
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    made, total = map(float, done.stdout.split())
    return made, total, max(peak, before) / 1024


def main(count: int = 1_000_000) -> None:
    _, _, idle = run(1)
    made, total, peak = run(count)
    print(f"{count:,} live malloc(8) blocks through acl.rt, sanitizer default (one process)")
    print(f"{'measure':<44}{'figure':>12}{'target':>10}")
    print(f"{'time to make them':<44}{made:>10.1f} s{'<= 15 s':>10}")
    print(f"{'time including teardown':<44}{total:>10.1f} s")
    print(f"{'peak RSS':<44}{peak:>8.0f} MiB{'<= 400':>10}")
    print(f"{'peak RSS of the same process, one block':<44}{idle:>8.0f} MiB")
    print(f"{'bytes per live block (peak RSS over count)':<44}"
          f"{(peak - idle) * (1 << 20) / count:>10.0f} B")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:]))
