"""What a study costs in one process and on a local Dask cluster of two workers.

Run: ``python benchmarks/bench_study.py [--rounds N] [--entries N]`` (needs the ``study`` extra;
default 3 rounds, a few minutes). Eight recorded training loops (as ``bench_fit.py`` makes
them, of about ENTRIES to ENTRIES + 3,500 entries, default 4,000) x three products (A2, A3,
950PR) x each product's default settings (7, 7 and 6: 160 cells), no cache, answered:

- in one process (``executor="inline"``);
- on a local Dask cluster of 2 single-threaded worker processes that the study starts and
  closes (``executor="dask", jobs=2``; its start, about a second, is in the time);
- on such a cluster already running (``scheduler=`` its address, as on a user's cluster; the
  workers' compiled snapshots are dropped before each round);
- in 2 local processes (``executor="processes", jobs=2``), for comparison.

Prints one table: per executor the median of the rounds' seconds and of each round's ratio
to that round's one-process time, the answers checked identical, and the load average. The
machine may be shared, and its other work slows the two-worker runs most: each round also
times a plain Python loop in one process and in two (``ceiling``), the most any two-worker
run could gain on the machine as it was at that moment.
"""

from __future__ import annotations

import os
import pickle
import statistics
import sys
import tempfile
import time
import warnings
from concurrent.futures import ProcessPoolExecutor

# Use the checkout this file lives in, not an installed copy.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_fit import snapshot, steps_for, training

from ascend_memsim.plan import study

PRODUCTS = "A2,A3,950PR"
RUNS = {
    "one process": {"executor": "inline"},
    "Dask, a local cluster of 2 workers started by the study": {"executor": "dask", "jobs": 2},
    "Dask, a running cluster of 2 workers": {"scheduler": None},
    "2 local processes": {"executor": "processes", "jobs": 2},
}


def _forget() -> None:
    """Drop a worker's compiled snapshots (each round starts cold)."""
    from ascend_memsim.plan import cells

    cells.forget()


def _burn(n: int = 10_000_000) -> int:
    total = 0
    for i in range(n):
        total += i
    return total


def ceiling() -> float:
    """Two plain loops one after the other in this process, over the two side by side in
    two processes: what two cores give a CPU-bound Python job now."""
    start = time.perf_counter()
    _burn()
    _burn()
    one = time.perf_counter() - start
    with ProcessPoolExecutor(2) as pool:
        list(pool.map(int, [0, 0]))    # the workers started, not timed
        start = time.perf_counter()
        list(pool.map(_burn, [10_000_000] * 2))
        two = time.perf_counter() - start
    return one / two


def _option(name: str, default: int) -> int:
    if name in sys.argv:
        return int(sys.argv[sys.argv.index(name) + 1])
    return default


def main() -> None:
    warnings.simplefilter("ignore")   # page_size:1g on a part without 1 GiB pages says so
    rounds, entries = _option("--rounds", 3), _option("--entries", 4000)
    folder = tempfile.mkdtemp(prefix="bench-study-")
    paths = []
    for i in range(8):
        path = os.path.join(folder, f"job{i}.pickle")
        with open(path, "wb") as f:
            pickle.dump(snapshot(training(steps_for(entries + 500 * i))), f)
        paths.append(path)
    grid = {"snapshots": paths, "products": PRODUCTS, "settings": "default"}
    seconds: dict[str, list[float]] = {}
    ratios: dict[str, list[float]] = {}
    loads = [os.getloadavg()[0]]
    answers = None
    cells = replays = 0
    from distributed import Client, LocalCluster

    cluster = LocalCluster(n_workers=2, threads_per_worker=1, host="127.0.0.1",
                           dashboard_address=":0")
    client = Client(cluster)
    for _ in range(rounds):
        ratios.setdefault("ceiling", []).append(ceiling())
        base = 0.0
        for what, run in RUNS.items():
            if "scheduler" in run:
                client.run(_forget)
                run = {"scheduler": cluster.scheduler_address}
            start = time.perf_counter()
            result = study(grid, **run)
            t = time.perf_counter() - start
            got = [(r.snapshot, r.product, r.setting, r.answer()) for r in result.rows]
            if answers is None:
                answers, cells, replays = got, len(result.rows), result.replays
            elif got != answers:
                raise SystemExit(f"{what}: answers differ from one process's")
            base = base or t
            seconds.setdefault(what, []).append(t)
            ratios.setdefault(what, []).append(base / t)
            loads.append(os.getloadavg()[0])
    client.close()
    cluster.close()
    rows = [("study", f"8 snapshots ({entries:,} to {entries + 3500:,} entries) x "
                      f"{PRODUCTS} x default settings: {cells} cells, {replays} replays")]
    for what in RUNS:
        rows.append((what, f"{statistics.median(seconds[what]):6.2f} s  "
                           f"{statistics.median(ratios[what]):4.2f}x one process "
                           f"(rounds: {', '.join(f'{t:.1f}' for t in seconds[what])} s)"))
    rows.append(("ceiling (a plain loop)", f"{statistics.median(ratios['ceiling']):.2f}x in 2 "
                                           f"processes (rounds: "
                                           f"{', '.join(f'{r:.2f}' for r in ratios['ceiling'])})"))
    rows.append(("answers", f"identical in every run ({rounds} rounds)"))
    rows.append(("load average (1 min)", f"{min(loads):.2f} to {max(loads):.2f} on "
                                         f"{os.cpu_count()} cores"))
    width = max(len(r[0]) for r in rows)
    for what, figure in rows:
        print(f"{what.ljust(width)}  {figure}", flush=True)
    for path in paths:
        os.unlink(path)
    os.rmdir(folder)


if __name__ == "__main__":
    main()
