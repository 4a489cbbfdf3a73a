"""What every test pays: a runtime's life, the pytest fixture, a Hypothesis example.

Run: ``python benchmarks/bench_lifecycle.py`` (about half a minute). Prints one table, all
figures from this run:

1. ``with Runtime("A2") as rt: rt.set_device(0)`` (create, set a device, tear down), in
   microseconds (target <= 100 us);
2. a generated file of 500 trivial tests run by pytest in a subprocess, each asking for the
   ``memsim`` fixture, against the same file without it (target <= 1.3x);
3. examples per second of a Hypothesis ``@given`` test that makes a runtime and does five
   malloc/free pairs, against a test that only draws the same data (target >= 0.5x).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ascend_memsim import MiB, Runtime

TESTS = 500


def lifecycle(rounds: int = 5000) -> float:
    """Microseconds per create + set_device + teardown, best of 5."""
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(rounds):
            with Runtime("A2") as rt:
                rt.set_device(0)
        best = min(best, time.perf_counter() - t0)
    return best / rounds * 1e6


def _pytest_seconds(runs: int = 5) -> tuple[float, float]:
    """Best wall time of pytest on a generated file of TESTS trivial tests, with the memsim
    fixture and without; the two alternate, so a busy machine slows both alike."""
    best = {True: float("inf"), False: float("inf")}
    with tempfile.TemporaryDirectory() as tmp:
        paths = {}
        for fixture in (True, False):
            arg = "memsim" if fixture else ""
            name = f"test_trivial_{'memsim' if fixture else 'plain'}.py"
            paths[fixture] = os.path.join(tmp, name)
            with open(paths[fixture], "w") as f:
                f.write("".join(f"def test_{i}({arg}):\n    pass\n\n\n" for i in range(TESTS)))
        for _ in range(runs):
            for fixture in (True, False):
                command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           paths[fixture]]
                t0 = time.perf_counter()
                done = subprocess.run(command, cwd=tmp, capture_output=True, text=True)
                best[fixture] = min(best[fixture], time.perf_counter() - t0)
                if done.returncode:
                    raise SystemExit(f"pytest failed:\n{done.stdout}\n{done.stderr}")
    return best[True], best[False]


_DATA = st.lists(st.tuples(st.integers(1, 4 * MiB), st.sampled_from([0, 1, 2])),
                 min_size=5, max_size=5)
_SETTINGS = settings(max_examples=600, database=None, deadline=None,
                     suppress_health_check=list(HealthCheck))


@_SETTINGS
@given(_DATA)
def _draw_only(calls):
    pass


@_SETTINGS
@given(_DATA)
def _five_pairs(calls):
    with Runtime("A2", hbm_bytes=256 * MiB) as rt:
        rt.set_device(0)
        for size, policy in calls:
            rt.free(rt.malloc(size, policy))


def _examples_per_second(runs: int = 5) -> tuple[float, float]:
    """Best examples/s of the two tests (runtime + five pairs, drawing alone), alternated."""
    best = {_five_pairs: float("inf"), _draw_only: float("inf")}
    for _ in range(runs):
        for test in best:
            t0 = time.perf_counter()
            test()
            best[test] = min(best[test], time.perf_counter() - t0)
    return (_SETTINGS.max_examples / best[_five_pairs],
            _SETTINGS.max_examples / best[_draw_only])


def main() -> None:
    life = lifecycle()
    with_fixture, without = _pytest_seconds()
    full, drawn = _examples_per_second()
    print("per-test cost (one run; best of 5, the compared pairs alternating)")
    print(f"{'measure':<58}{'figure':>16}{'ratio':>8}{'target':>9}")
    print(f"{'Runtime create + set_device + teardown':<58}{life:>13.1f} us{'':>8}"
          f"{'<= 100us':>9}")
    print(f"{f'{TESTS} trivial tests, memsim fixture / none (pytest)':<58}"
          f"{with_fixture:>7.2f}/{without:.2f} s{with_fixture / without:>7.2f}x{'<= 1.3x':>9}")
    print(f"{'Hypothesis, runtime + 5 malloc/free / drawing alone':<58}"
          f"{full:>6,.0f}/{drawn:,.0f}/s{full / drawn:>7.2f}x{'>= 0.5x':>9}")


if __name__ == "__main__":
    main()
