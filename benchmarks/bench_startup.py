"""Start-up: ``ascend-memsim --help`` against a bare ``python -c pass``.

Run: ``python benchmarks/bench_startup.py [runs]``. Both are started as fresh processes by the
same interpreter; the figure is the best of ``runs`` (default 15) wall times, so a loaded
machine's noise does not decide it. Target: --help <= 2x.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def best(command: list[str], runs: int) -> float:
    env = {**os.environ, "PYTHONPATH": ROOT}
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(command, env=env, capture_output=True, check=True)
        times.append(time.perf_counter() - t0)
    return min(times)


def main(runs: int = 15) -> None:
    bare = best([sys.executable, "-c", "pass"], runs)
    help_ = best([sys.executable, "-c", "import sys; from ascend_memsim.cli import main; "
                  "sys.exit(main(['--help']))"], runs)
    full = best([sys.executable, "-c", "import ascend_memsim; ascend_memsim.Runtime"], runs)
    print(f"start-up (best of {runs} fresh processes)")
    print(f"{'command':<44}{'ms':>8}{'x bare':>9}{'target':>9}")
    print(f"{'python -c pass':<44}{bare * 1e3:>8.1f}{1:>8.2f}x")
    print(f"{'ascend-memsim --help':<44}{help_ * 1e3:>8.1f}{help_ / bare:>8.2f}x{'<= 2x':>9}")
    print(f"{'import ascend_memsim; ascend_memsim.Runtime':<44}{full * 1e3:>8.1f}"
          f"{full / bare:>8.2f}x")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:]))
