"""What an estimate of each gallery script costs against the script's own start-up.

For each script of ``examples/gallery/`` (a fresh interpreter each time): the wall time and
peak RSS of ``ascend-memsim estimate --product A2 SCRIPT``, and the wall time of a plain
interpreter importing the libraries the script imports (torch, transformers, peft,
accelerate...; ``torch_npu`` left out, which needs an NPU). The ratio of the two is printed
per script and for the gallery together. The plain import is a lower bound of the script's
own run on a machine (its import time plus its steps), so the ratio is an upper bound of what
the estimate costs over a plain run. Target: the gallery together within 2x.

Run: ``python benchmarks/bench_gallery.py [repeats]`` (default 1; the median of the repeats
is shown) with the torch and stacks extras installed (``pip install -e '.[torch,stacks]'``).
"""

from __future__ import annotations

import ast
import os
import statistics
import subprocess
import sys
import tempfile
import time

GALLERY = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                       "examples", "gallery")


def _imports(path: str) -> list[str]:
    """The top-level packages the script imports (torch_npu left out)."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    names: dict[str, None] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                names[alias.name.split(".")[0]] = None
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names[node.module.split(".")[0]] = None
    return [n for n in names if n != "torch_npu" and n != "__future__"]


def _timed(command: list[str]) -> tuple[float, int]:
    """Wall seconds and peak RSS (KiB) of ``command`` run to its end, in a folder of its own
    (what a script writes, such as the Trainer's output folder, goes there)."""
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, cwd=folder)
        _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(command)} exited with {proc.returncode}")
    return seconds, usage.ru_maxrss


def main(repeats: int = 1) -> None:
    scripts = sorted(f for f in os.listdir(GALLERY) if f.endswith(".py"))
    print(f"examples/gallery: estimate --product A2 against a plain import of the script's "
          f"libraries (median of {repeats})")
    print(f"{'script':<26}{'estimate s':>11}{'import s':>10}{'ratio':>8}{'RSS MiB':>9}")
    total_est = total_imp = 0.0
    for name in scripts:
        path = os.path.join(GALLERY, name)
        code = "import " + ", ".join(_imports(path))
        est, imp, rss = [], [], []
        for _ in range(repeats):
            s, r = _timed([sys.executable, "-m", "ascend_memsim", "estimate", "--product",
                           "A2", path])
            est.append(s)
            rss.append(r)
            imp.append(_timed([sys.executable, "-c", code])[0])
        e, i = statistics.median(est), statistics.median(imp)
        total_est, total_imp = total_est + e, total_imp + i
        print(f"{name:<26}{e:>11.2f}{i:>10.2f}{e / i:>7.2f}x{max(rss) / 1024:>9.0f}")
    print(f"{'the gallery together':<26}{total_est:>11.2f}{total_imp:>10.2f}"
          f"{total_est / total_imp:>7.2f}x")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
