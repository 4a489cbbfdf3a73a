"""What ``estimate --bisect`` keeps in host memory per trace entry: a script of many small
tensors (the shape that made a million-tensor bisect take 2.4 GB), traced and searched.

Run: ``python benchmarks/bench_bisect_trace.py [TENSORS ...]`` (default 10,000 and 100,000
tensors: about a minute; 1000000 takes several minutes, most of it the script's run on fake
tensors). The script makes TENSORS float32 tensors of 25 elements (100 B) one after
another, keeping one in a thousand: three trace entries each (``alloc``, ``free_requested``,
``free_completed``), every entry with the same frames. Each figure comes from a fresh
process on an A2 (its own memory, the top of the search), which reports:

1. under ``tracemalloc`` (so its seconds are not the run's: see 2), :func:`fit_script` with
   a progress callback that reads the traced bytes at each phase: the peak while the
   script ran and the snapshot was taken (the allocator's history of dicts, and the
   snapshot's copy of it made at the end), what stays once the run's state is collected
   (the snapshot), and the peak of the search over it (the compiled columns and the
   replays on top of the snapshot); and the snapshot's trace measured as
   ``bench_estimate.py`` does (every object reachable from ``device_traces``, each counted
   once: the figure ``docs/guide/estimate.md`` quotes) and the columns' arrays;
2. without it: :func:`fit_script`'s seconds (the run, then the search) and the peak RSS
   above that of ``fit_script`` of 10 tensors (importing torch, one session).

Every byte figure is divided by the run's trace entries. The table is printed at the end.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIZES = (10_000, 100_000)

SCRIPT = """\
import sys
import torch
import torch_npu

kept = []
for i in range(int(sys.argv[1])):
    t = torch.empty(25, dtype=torch.float32, device="npu")
    if i % 1000 == 0:
        kept.append(t)
    del t
"""

_PRELUDE = """
import gc, resource, sys, time
from ascend_memsim.torchsim.search import fit_script
script, tensors = sys.argv[1], sys.argv[2]
def rss():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
"""

_STEPS = {
    "traced": """
import tracemalloc
from ascend_memsim.plan.search import Source
def deep(value, seen):
    if id(value) in seen:
        return 0
    seen.add(id(value))
    n = sys.getsizeof(value)
    if isinstance(value, dict):
        n += sum(deep(k, seen) + deep(v, seen) for k, v in value.items())
    elif isinstance(value, (list, tuple)):
        n += sum(deep(v, seen) for v in value)
    return n
fit_script(script, ["10"])     # the imports and the session's first setup, not measured
gc.collect()
tracemalloc.start()
base = tracemalloc.get_traced_memory()[0]
marks = {}
def progress(phase, done, total):
    if (phase, done) == ("traced", 1):
        now, peak = tracemalloc.get_traced_memory()
        marks["run"], marks["held"] = peak - base, now - base
        tracemalloc.reset_peak()
found = fit_script(script, [tensors], progress=progress)
marks["search"] = tracemalloc.get_traced_memory()[1] - base
tracemalloc.stop()
trace = found.traced.snapshot["device_traces"][0]
columns = Source(found.traced.snapshot, "A2").columns
arrays = sum(a.itemsize * len(a) for a in (columns.op, columns.addr, columns.size,
                                           columns.stream, columns.index))
print("result", len(trace), marks["run"], marks["held"], marks["search"],
      deep(trace, set()), arrays)
""",
    "timed": """
t0 = time.perf_counter()
marks = {}
def progress(phase, done, total):
    if (phase, done) == ("traced", 1):
        marks["run"] = time.perf_counter() - t0
found = fit_script(script, [tensors], progress=progress)
assert found.fits
print("result", len(found.traced.snapshot["device_traces"][0]), marks["run"],
      time.perf_counter() - t0 - marks["run"], found.search.replays, rss())
""",
}


def run_fresh(step: str, script: str, tensors: int) -> list[float]:
    """The numbers ``step`` prints after ``result``, in a fresh process."""
    done = subprocess.run([sys.executable, "-c", _PRELUDE + _STEPS[step], script,
                           str(tensors)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": ROOT})
    if done.returncode:
        raise SystemExit(f"{step} {tensors} failed:\n{done.stderr}")
    line = next(x for x in done.stdout.splitlines() if x.startswith("result"))
    return [float(x) for x in line.split()[1:]]


def main(sizes: tuple[int, ...] = SIZES) -> None:
    with tempfile.TemporaryDirectory() as folder:
        script = os.path.join(folder, "tensors.py")
        with open(script, "w") as f:
            f.write(SCRIPT)
        floor = run_fresh("timed", script, 10)[-1]
        rows = []
        for tensors in sizes:
            entries, run_peak, held, search_peak, snapshot, columns = run_fresh(
                "traced", script, tensors)
            _, run_s, search_s, replays, peak_rss = run_fresh("timed", script, tensors)
            rows.append((tensors, entries, run_s, search_s, replays, run_peak / entries,
                         held / entries, snapshot / entries, columns / entries,
                         search_peak / entries, (peak_rss - floor) / entries))
    print(f"fit_script of 10 tensors: peak RSS {floor / 2**20:.0f} MiB (the floor)")
    print("bytes per trace entry: 'run peak' while the script ran and the snapshot was "
          "taken, 'kept' after the run, 'snapshot' its trace alone (as bench_estimate.py), "
          "'columns' the search's arrays, 'search peak' above the start, 'RSS' above the "
          "floor")
    head = (f"{'tensors':>9}{'entries':>10}{'run s':>8}{'search s':>10}{'replays':>9}"
            f"{'run peak':>10}{'kept':>7}{'snapshot':>10}{'columns':>9}{'search peak':>13}"
            f"{'RSS':>6}")
    print(head)
    for r in rows:
        print(f"{r[0]:>9,}{r[1]:>10,.0f}{r[2]:>8.1f}{r[3]:>10.1f}{r[4]:>9.0f}{r[5]:>10.0f}"
              f"{r[6]:>7.0f}{r[7]:>10.0f}{r[8]:>9.0f}{r[9]:>13.0f}{r[10]:>6.0f}")


if __name__ == "__main__":
    main(tuple(int(n) for n in sys.argv[1:]) or SIZES)
