"""What the pytest plugin costs a run that uses none of it.

Installing ascend-memsim enables its pytest plugin (the ``pytest11`` entry point) in every
pytest run of the environment, including other projects' runs. This times a fresh
``pytest -q`` of one empty test with the plugin and with ``-p no:ascend_memsim``, alternating
the two so a busy machine slows both alike, and prints the median of the differences and of
the ratios, and the plugin's import time (``python -X importtime``). Target: the plugin adds
at most 0.1 s to such a run.

Run: ``python benchmarks/bench_plugin.py [pairs]`` (default 9) in an environment where the
package is installed (``pip install -e .``), so that the entry point exists.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from importlib.metadata import entry_points


def _session(folder: str, *args: str) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                    "-p", "no:xdist", *args, "test_empty.py"], cwd=folder, check=True,
                   capture_output=True)
    return time.perf_counter() - t0


def _import_ms() -> float:
    run = subprocess.run([sys.executable, "-X", "importtime", "-c",
                          "import pytest; import ascend_memsim.testing.plugin"],
                         capture_output=True, text=True, check=True)
    line = next(x for x in run.stderr.splitlines() if x.rstrip().endswith(
        "ascend_memsim.testing.plugin"))
    return int(line.split("|")[1]) / 1000


def main(pairs: int = 9) -> None:
    if not any(ep.value == "ascend_memsim.testing.plugin"
               for ep in entry_points(group="pytest11")):
        sys.exit("the package is not installed here (pip install -e .): no plugin to time")
    with tempfile.TemporaryDirectory() as folder:
        with open(os.path.join(folder, "test_empty.py"), "w") as f:
            f.write("def test_empty():\n    pass\n")
        _session(folder)                    # warm the file system and the bytecode caches
        with_, without = [], []
        for _ in range(pairs):
            with_.append(_session(folder))
            without.append(_session(folder, "-p", "no:ascend_memsim"))
    diffs = [a - b for a, b in zip(with_, without)]
    print(f"pytest -q on one empty test, {pairs} alternating pairs (medians)")
    print(f"{'run':<34}{'s':>9}{'x without':>11}{'target':>10}")
    print(f"{'without the plugin':<34}{statistics.median(without):>9.3f}{1:>10.2f}x")
    print(f"{'with the plugin':<34}{statistics.median(with_):>9.3f}"
          f"{statistics.median(a / b for a, b in zip(with_, without)):>10.2f}x")
    print(f"{'added by the plugin':<34}{statistics.median(diffs):>9.3f}{'':>11}"
          f"{'<= 0.1 s':>10}")
    print(f"{'the plugin module import (ms)':<34}{_import_ms():>9.1f}")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:]))
