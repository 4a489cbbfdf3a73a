"""Tensor-level replay at scale: a generated training-loop trace through torch_npu's caching
allocator (``replay_tensors``), against ``json.loads`` of the same lines.

Run: ``python benchmarks/bench_tensor_replay.py [events]`` (default 1,000,000 events: a few
minutes). The trace is the one ``bench_replay.py`` writes (JSON Lines in the project's trace
format: a few hundred sizes from 512 B to 16 MiB, frees mostly in reverse order of
allocation, two streams, a slowly growing set of long-lived blocks); each ``malloc`` becomes a
tensor allocation of its size on its stream, each ``free`` its free. Each step runs in a
fresh process, which reports its own time and peak RSS:

1. ``json.loads`` of every line, each record dropped at once (the floor: reading the text);
2. ``replay_tensors`` of the file on a 64 GiB A2 (target: <= 6x the json.loads time);
   1 and 2 alternate, best of three runs each;
3. the same two on the trace's first tenth (events / 10), once each, for the peak RSS at a
   tenth of the length (target: flat in trace length; the file is streamed, one line at a
   time, and the replay keeps only its live blocks).
"""

from __future__ import annotations

import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_replay import _STEPS as _REPLAY_STEPS
from bench_replay import generate, run_fresh

ROUNDS = 3
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_STEPS = {
    "json": _REPLAY_STEPS["json"],  # the same baseline: json.loads of every line
    "replay": """
from ascend_memsim.observe.tensor_replay import replay_tensors
result = replay_tensors(path, "A2", capacity=64 << 30)
assert result.fits, result.first_failure
n = result.allocs + result.frees
print("peak", result.peak_allocated, result.peak_reserved, result.retries)
""",
}


def run(step: str, path: str) -> tuple[float, float, str]:
    """(seconds, peak RSS MiB, extra output) of one step in a fresh process."""
    return run_fresh(step, _STEPS[step], path)


def main(events: int = 1_000_000) -> None:
    short = max(events // 10, 1)
    with tempfile.TemporaryDirectory() as tmp:
        path, tenth = os.path.join(tmp, "trace.jsonl"), os.path.join(tmp, "tenth.jsonl")
        peak_live = generate(path, events)
        generate(tenth, short)     # the same seed: the first tenth of the same trace
        megabytes = os.path.getsize(path) / (1 << 20)
        best: dict[str, tuple[float, float, str]] = {}
        for _ in range(ROUNDS):
            for step in ("json", "replay"):
                got = run(step, path)
                if step not in best or got[0] < best[step][0]:
                    best[step] = got
        small = {step: run(step, tenth) for step in ("json", "replay")}
    print(f"a {events:,}-event training-loop trace ({megabytes:,.0f} MiB of JSON Lines, "
          f"{peak_live:,} blocks live at most) through NpuCachingAllocator on a 64 GiB A2; "
          "each step a fresh process")
    print(f"{'step':<38}{'events':>11}{'seconds':>9}{'x json':>8}{'us/event':>10}"
          f"{'peak RSS':>11}")
    for label, results, n in (("", best, events), (" (first tenth)", small, short)):
        base = results["json"][0]
        for step, name in (("json", "json.loads of every line"),
                           ("replay", "replay_tensors")):
            seconds, rss, _ = results[step]
            print(f"{name + label:<38}{n:>11,}{seconds:>9.2f}{seconds / base:>7.2f}x"
                  f"{seconds / n * 1e6:>10.2f}{rss:>7.0f} MiB")
    ratio = best["replay"][0] / best["json"][0]
    growth = best["replay"][1] - small["replay"][1]
    print(f"replay / json.loads: {ratio:.2f}x (target <= 6x); replay peak RSS "
          f"{small['replay'][1]:.0f} MiB at {short:,} events, {best['replay'][1]:.0f} MiB at "
          f"{events:,} ({growth:+.0f} MiB for 10x the events)")
    print("replay:", best["replay"][2].split(" ", 1)[1])


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:]))
