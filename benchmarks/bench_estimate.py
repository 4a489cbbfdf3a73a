"""The cost of an estimate: a GPT-style decoder (``examples/estimate_gpt.py``) traced on fake
tensors through the simulated caching allocator as the model grows, 125M, 1B and 7B
parameters at their full depth (12, 18 and 32 layers).

Run: ``python benchmarks/bench_estimate.py [sizes ...]`` (default 125M 1B 7B: a few
minutes). Each figure comes from a fresh process on a 1 TiB A2 (so nothing runs out of
memory), which reports its own time and peak RSS:

1. ``estimate(lambda: None)``: the floor (importing torch, one session);
2. the decoder for 1 step and for 3 steps, best of two runs each: the first step's seconds
   include the session's setup and building the model; seconds per step is the difference
   / 2; the peak RSS must not grow with the model's bytes (fake tensors have no storage);
3. the same 3 steps with ``snapshot=True`` (every trace entry with the script's frames):
   entries, and the host bytes the history costs per entry (every object reachable from
   ``device_traces``, each counted once: frames shared between entries count once);
4. ``fit_script`` (``estimate --bisect``) of the 3 steps: the trace plus the replays.
"""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "estimate_gpt.py")
SIZES = ("125M", "1B", "7B")
ROUNDS = 2

_PRELUDE = """
import os, resource, sys, time
from ascend_memsim.torchsim import estimate
TiB = 1 << 40
argv = sys.argv[1:]
def rss():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
"""

_STEPS = {
    "floor": """
t0 = time.perf_counter()
estimate(lambda: None, product="A2", capacity=TiB)
print("result", time.perf_counter() - t0, rss())
""",
    "trace": """
t0 = time.perf_counter()
r = estimate(argv[0], argv[1:], product="A2", capacity=TiB)
assert r.fits, r
print("result", time.perf_counter() - t0, rss(), r.peak_allocated, r.peak_reserved)
""",
    "snapshot": """
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
t0 = time.perf_counter()
r = estimate(argv[0], argv[1:], product="A2", capacity=TiB, snapshot=True)
seconds = time.perf_counter() - t0
trace = r.snapshot["device_traces"][0]
# the small ints and strings every entry shares (action names, sizes) count once, as they
# are interned or cached in a real run too
print("result", seconds, rss(), len(trace), deep(trace, set()) / len(trace))
""",
    "bisect": """
from ascend_memsim.torchsim.search import fit_script
t0 = time.perf_counter()
found = fit_script(argv[0], argv[1:], product="A2", top=TiB)
assert found.fits
print("result", time.perf_counter() - t0, rss(), found.search.replays,
      found.search.seconds)
""",
}


def run_fresh(step: str, argv: list[str]) -> list[float]:
    """The numbers ``step`` prints after ``result``, in a fresh process."""
    done = subprocess.run([sys.executable, "-c", _PRELUDE + _STEPS[step], *argv],
                          capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": ROOT})
    if done.returncode:
        raise SystemExit(f"{step} {argv} failed:\n{done.stderr}")
    line = next(x for x in done.stdout.splitlines() if x.startswith("result"))
    return [float(x) for x in line.split()[1:]]


def main(sizes: tuple[str, ...] = SIZES) -> None:
    floor_s, floor_rss = run_fresh("floor", [])
    print(f"floor: estimate(lambda: None) {floor_s:.2f} s, peak RSS {floor_rss:.0f} MiB "
          f"(importing torch is most of it)")
    head = (f"{'model':<6}{'layers':>7}{'1 step s':>10}{'s/step':>8}{'peak RSS':>10}"
            f"{'peak alloc':>12}{'entries':>9}{'B/entry':>9}{'snap RSS':>10}"
            f"{'bisect s':>10}{'replays':>9}")
    print(head)
    for size in sizes:
        layers = {"125M": 12, "1B": 18, "7B": 32}[size]
        # best of ROUNDS (the machine is shared); the peak RSS of the same runs
        one = min(run_fresh("trace", [EXAMPLE, "--size", size, "--steps", "1"])
                  for _ in range(ROUNDS))
        three = min(run_fresh("trace", [EXAMPLE, "--size", size, "--steps", "3"])
                    for _ in range(ROUNDS))
        snap = run_fresh("snapshot", [EXAMPLE, "--size", size, "--steps", "3"])
        fit = run_fresh("bisect", [EXAMPLE, "--size", size, "--steps", "3"])
        per_step = (three[0] - one[0]) / 2
        print(f"{size:<6}{layers:>7}{one[0]:>10.2f}{per_step:>8.2f}"
              f"{max(one[1], three[1]):>9.0f}M{three[2] / 2**30:>11.1f}G{snap[2]:>9.0f}"
              f"{snap[3]:>9.0f}{snap[1]:>9.0f}M{fit[0]:>10.2f}{fit[2]:>9.0f}")


if __name__ == "__main__":
    main(tuple(sys.argv[1:]) or SIZES)
