"""What "will it fit?" costs: ``replay --allocator torch-npu --bisect`` and ``--sweep``.

Run: ``python benchmarks/bench_fit.py [ENTRIES ...] [--plain]`` (default 10,000 and 100,000
entries; a few minutes; ``--plain`` also times the plain search, which replays every capacity
it asks from the start: many minutes). Prints one table, all figures from this run:

1. the two jobs of docs/guide/will-it-fit.md (``dip``: fit not monotone; ``frag``: the sweep's
   example): the search's replays and seconds, ``fit_capacity`` and ``sweep_settings`` with
   the default candidates, on an A2 up to its own memory;
2. a recorded training loop of about ENTRIES entries (iterations of a forward pass keeping
   activations of varied sizes and a backward pass freeing them, on two streams): one
   replay of it at the capacity the search found (``replay_tensors``), then ``--bisect``,
   ``--sweep`` (the default candidates) in one process and with two workers: the medians of
   three rounds (one at 1M entries) of each time and of its ratio to the round's one replay,
   and the replays each ran (a failing replay stops at its first failure).
"""

from __future__ import annotations

import os
import random
import statistics
import sys
import time

# Use the checkout this file lives in, not an installed copy.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from ascend_memsim import KiB, MiB, Runtime
from ascend_memsim.allocators import NpuCachingAllocator
from ascend_memsim.memory.units import format_bytes
from ascend_memsim.observe.tensor_replay import replay_tensors
from ascend_memsim.plan import fit_capacity, sweep_settings


def dip(alloc: NpuCachingAllocator) -> None:
    """The will-it-fit guide's job whose fit is not monotone (32-40 MiB fit, 42 fails, 44 up
    fit)."""
    small, x, y = (alloc.malloc(n) for n in (112 * KiB, 12 * MiB, 23 * MiB // 2))
    for ptr in (y, small, x):
        alloc.free(ptr)
    x, y = alloc.malloc(25 * MiB // 2), alloc.malloc(12 * MiB)
    alloc.free(y)
    alloc.free(x)
    for n in (1933 * KiB, 241 * KiB, 14 * MiB):
        alloc.malloc(n)


def frag(alloc: NpuCachingAllocator) -> None:
    """The will-it-fit guide's fragmenting job (expandable segments fit it in 80 MiB, the
    default not)."""
    held = [alloc.malloc(6 * MiB) for _ in range(12)]
    for i, ptr in enumerate(held):
        if i % 4:
            alloc.free(ptr)
    for _ in range(3):
        alloc.malloc(16 * MiB)


def training(steps: int):
    """A training loop: weights kept, per step activations of varied sizes on two streams
    allocated then freed in reverse, a gradient buffer now and then."""
    rnd = random.Random(1)

    def job(alloc: NpuCachingAllocator) -> None:
        weights = [alloc.malloc(rnd.randint(1, 40) * MiB // 4) for _ in range(16)]
        for step in range(steps):
            acts = [alloc.malloc(rnd.randint(1, 64) * MiB // 8 + rnd.randint(0, 4095),
                                 stream=step % 2) for _ in range(8)]
            grad = alloc.malloc(rnd.randint(8, 24) * MiB) if step % 5 == 0 else None
            for ptr in reversed(acts):
                alloc.free(ptr)
            if grad is not None:
                alloc.free(grad)
        for ptr in weights:
            alloc.free(ptr)

    return job


def snapshot(job) -> dict:
    with Runtime("A2", hbm_bytes=4096 * MiB, sanitizer="off") as rt:
        alloc = NpuCachingAllocator(rt)
        alloc.record_history(max_entries=10_000_000)   # keep every entry
        job(alloc)
        return alloc.memory_snapshot()


def timed(fn, *args, **kwargs):
    start = time.perf_counter()
    value = fn(*args, **kwargs)
    return value, time.perf_counter() - start


def steps_for(entries: int) -> int:
    """Training steps whose snapshot has about ``entries`` entries (24.7 per step)."""
    return max(1, round(entries / 24.7))


def median(values: list[float]) -> float:
    return statistics.median(values)


def scale(entries: int, rounds: int, plain: bool) -> list[tuple[str, str]]:
    """One replay, --bisect, --sweep (one process and two workers; the plain search too
    with ``plain``) of a training loop of about ``entries`` entries: medians of ``rounds``
    runs, the ratios to one replay taken in the same round."""
    snap = snapshot(training(steps_for(entries)))
    n = len(snap["device_traces"][0])
    found = fit_capacity(snap, "A2")
    ratios: dict[str, list[float]] = {}
    seconds: dict[str, list[float]] = {}
    counts: dict[str, int] = {}
    runs = {
        "--bisect": lambda: fit_capacity(snap, "A2"),
        "--sweep": lambda: sweep_settings(snap, "A2"),
        "--sweep --jobs 2": lambda: sweep_settings(snap, "A2", jobs=2),
    }
    if plain:
        runs["--bisect (plain search)"] = lambda: fit_capacity(snap, "A2", _plain=True)
        runs["--sweep (plain search)"] = lambda: sweep_settings(snap, "A2", _plain=True)
    for r in range(rounds):
        _, one = timed(replay_tensors, snap, "A2", capacity=found.all_fit_from)
        seconds.setdefault("one replay", []).append(one)
        for what, run in runs.items():
            if r and "plain" in what:
                continue     # the plain search: once (minutes at 100k entries)
            answer, t = timed(run)
            seconds.setdefault(what, []).append(t)
            ratios.setdefault(what, []).append(t / one)
            counts[what] = answer.replays
    rows = [(f"{n:,} entries: one replay (replay_tensors)",
             f"{median(seconds['one replay']):.2f} s")]
    for what in runs:
        rows.append((f"{n:,} entries: {what}",
                     f"{median(seconds[what]):.2f} s, {median(ratios[what]):.1f}x one replay, "
                     f"{counts[what]} replays"))
    return rows


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    plain = "--plain" in sys.argv
    sizes = [int(a) for a in args] or [10_000, 100_000]
    rows: list[tuple[str, str]] = []
    for name, job in (("dip", dip), ("frag", frag)):
        snap = snapshot(job)
        found, seconds = timed(fit_capacity, snap, "A2")
        rows.append((f"{name}: --bisect", f"{found.replays} replays, {seconds:.2f} s; smallest "
                     f"{format_bytes(found.smallest)}, all fit from "
                     f"{format_bytes(found.all_fit_from)}"))
        sweep, seconds = timed(sweep_settings, snap, "A2")
        rows.append((f"{name}: --sweep ({len(sweep.results)} settings)",
                     f"{sweep.replays} replays, {seconds:.2f} s; best "
                     f"{sweep.best.alloc_conf or '(default)'} from "
                     f"{format_bytes(sweep.best.all_fit_from)}"))
    for entries in sizes:
        rows.extend(scale(entries, 3 if entries <= 100_000 else 1, plain))
    width = max(len(r[0]) for r in rows)
    for what, figure in rows:
        print(f"{what.ljust(width)}  {figure}", flush=True)


if __name__ == "__main__":
    main()
