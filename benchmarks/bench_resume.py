"""How much of a search's replaying a checkpoint could skip: the ceiling of "resume a capacity
trial from an earlier run's state where the capacity first matters".

Run: ``python benchmarks/bench_resume.py [ENTRIES ...]`` (default 10,000 and 100,000; about
a minute). For the training loop of ``bench_fit.py`` and each default setting whose replays
read the capacity only through where segments land (``identity_applies``: the default and
``roundup_power2_divisions:4``; ``max_split_size_mb`` settings replay as the default),
``fit_capacity`` runs as it does, and every replay records where each device placement ended
and where each refused one would have ended. A replay at capacity ``C`` is the same run as an
earlier one at ``R`` up to the first placement of ``R``'s run ending above ``C`` (``C < R``)
or the first refused one that would have fitted under ``C`` (``C > R``)
(``ascend_memsim/plan/columns.py``'s text): that prefix is what resuming from the best
earlier run's checkpoint would skip, with checkpoints free and at every point. Prints, per
setting, the allocator calls the search replayed and the share such a resume would skip.
"""

from __future__ import annotations

import os
import sys
from typing import Any

# Use the checkout this file lives in, not an installed copy.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench_fit import snapshot, steps_for, training

from ascend_memsim.allocators import NpuCachingAllocator
from ascend_memsim.plan import columns, fit_capacity, search

#: the replay running now: [allocator calls so far, [(calls, placed?, end), ...]]
_NOW: list[Any] = [0, []]


class _Recording(columns._Watched):
    """The search's device, recording each placement's end at the allocator call it came
    in."""

    __slots__ = ()

    def allocate(self, size: int, align: int = 64) -> int | None:
        ptr = super().allocate(size, align)
        if ptr is None:
            end = -(-self.top_free_start() // align) * align + size - self.base
            _NOW[1].append((_NOW[0], False, end))
        else:
            _NOW[1].append((_NOW[0], True, ptr + size - self.base))
        return ptr


def _counting(malloc: Any) -> Any:
    def counted(self: NpuCachingAllocator, size: Any, stream: int = 0) -> int:
        _NOW[0] += 1
        return malloc(self, size, stream)
    return counted


def _same_until(record: list[tuple[int, bool, int]], length: int, capacity: int,
                at: int) -> int:
    """The allocator calls a replay at ``capacity`` shares with the recorded one at ``at``."""
    for calls, placed, end in record:
        if (capacity < at and placed and end > capacity) or \
                (capacity > at and not placed and end <= capacity):
            return calls
    return length


def ceiling(snap: dict[str, Any], conf: str) -> tuple[int, int, int]:
    """(replays, allocator calls replayed, calls a resume from the best earlier run skips)."""
    runs: list[tuple[int, int, list[tuple[int, bool, int]]]] = []
    replay = search.replay_columns

    def recorded(cols: Any, profile: Any, capacity: int, *args: Any, **kwargs: Any) -> Any:
        _NOW[0], _NOW[1] = 0, []
        run = replay(cols, profile, capacity, *args, **kwargs)
        runs.append((capacity, _NOW[0], _NOW[1]))
        return run

    search.replay_columns = recorded
    try:
        fit_capacity(snap, "A2", alloc_conf=conf)
    finally:
        search.replay_columns = replay
    total = skipped = 0
    for i, (capacity, length, _record) in enumerate(runs):
        best = max((min(length, _same_until(rec, n, capacity, at)) for at, n, rec in runs[:i]),
                   default=0)
        total += length
        skipped += best
    return len(runs), total, skipped


def main() -> None:
    sizes = [int(a) for a in sys.argv[1:]] or [10_000, 100_000]
    columns._Watched = _Recording  # type: ignore[misc]
    NpuCachingAllocator.malloc = _counting(NpuCachingAllocator.malloc)  # type: ignore[method-assign]
    rows = []
    for entries in sizes:
        snap = snapshot(training(steps_for(entries)))
        n = len(snap["device_traces"][0])
        for conf in ("", "roundup_power2_divisions:4"):
            replays, total, skipped = ceiling(snap, conf)
            rows.append((f"{n:,} entries, {conf or '(default)'}",
                         f"{replays} replays, {total:,} allocator calls; a resume from the "
                         f"best earlier run skips {skipped:,} ({skipped / total:.0%})"))
    width = max(len(r[0]) for r in rows)
    for what, figure in rows:
        print(f"{what.ljust(width)}  {figure}", flush=True)


if __name__ == "__main__":
    main()
