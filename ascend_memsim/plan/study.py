"""A study: will these jobs fit, on which product, at which capacity, with which allocator
settings? Every snapshot x product x capacity x setting of a grid (:class:`Grid`) answered
as :func:`fit_capacity` answers it, in one table (:class:`Study`), on one of three executors
(:mod:`ascend_memsim.plan.executors`): this process, local worker processes, or a Dask
cluster.

A task is one snapshot on one product at one capacity, all its settings searched over one
compiled copy of the snapshot (:mod:`ascend_memsim.plan.cells`). With a cache folder, every
answer is kept as it arrives, keyed by the snapshot's content and everything else that
decides it (:mod:`ascend_memsim.plan.cache`), so a study that was interrupted resumes where
it stopped, and a cell already answered is never replayed again. Every executor gives the
same answers.
"""

from __future__ import annotations

import csv
import io
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

from ..memory.errors import InvalidArgumentType
from ..memory.profiles import get_profile
from ..memory.units import human_bytes, plural
from .cache import ResultCache, cell_key
from .cells import ANSWER_FIELDS, CellTask
from .executors import executor_kind, make_executor
from .fit import _check_jobs
from .grid import Grid

__all__ = ["study", "Study", "StudyRow", "StudyProgress"]

#: Called after the cache was read and after each task: (cells answered, cells in all, what
#: was just answered: ``"cache"`` or ``"SNAPSHOT on PRODUCT up to CAPACITY"``).
StudyProgress = Callable[[int, int, str], None]


@dataclass
class StudyRow:
    """One cell: ``snapshot`` on ``product`` with the allocator setting ``setting``,
    searched up to ``capacity`` bytes; the answers of :class:`FitSearch` (None when nothing
    fits, or on an error)."""

    snapshot: str
    sha256: str
    product: str
    capacity: int
    setting: str
    #: every capacity from ``all_fit_from`` up to ``capacity`` fits (as checked by the search)
    fits: bool = False
    smallest: int | None = None
    smallest_exact: bool = False
    all_fit_from: int | None = None
    lower_bound: int = 0
    peak_allocated: int = 0
    peak_reserved: int = 0
    peak_device: int = 0
    retries: int = 0
    #: the replays its search ran (0 when ``same_as`` answered it)
    replays: int = 0
    seconds: float = 0.0
    #: the setting of this snapshot and product that replays alike and answered this one
    same_as: str | None = None
    #: answered from the cache, not replayed by this study
    cached: bool = False
    #: why the snapshot could not be searched ("" when it was)
    error: str = ""

    def answer(self) -> tuple[Any, ...]:
        """What the cell answers, without how long it took or where it came from."""
        return tuple(getattr(self, f) for f in ANSWER_FIELDS if f not in ("seconds",)) + (
            self.error,)

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass
class Study:
    """The answers of :func:`study`, one :class:`StudyRow` per cell in the grid's order
    (snapshot, product, capacity, setting)."""

    rows: list[StudyRow] = field(default_factory=list)
    #: the cells answered from the cache
    cached: int = 0
    #: the replays this study ran
    replays: int = 0
    seconds: float = 0.0
    #: where the tasks ran ("" when every cell came from the cache)
    executor: str = ""

    @property
    def fits(self) -> bool:
        """True when every cell fits at its capacity."""
        return all(r.fits for r in self.rows)

    def as_dict(self) -> dict[str, Any]:
        return {"cells": len(self.rows), "cached": self.cached, "replays": self.replays,
                "seconds": self.seconds, "executor": self.executor,
                "rows": [r.as_dict() for r in self.rows]}

    def to_csv(self) -> str:
        """The rows as CSV, one header line, bytes as integers, None as an empty field."""
        out = io.StringIO()
        names = [f.name for f in fields(StudyRow)]
        w = csv.writer(out, lineterminator="\n")
        w.writerow(names)
        for r in self.rows:
            w.writerow(["" if v is None else v for v in (getattr(r, n) for n in names)])
        return out.getvalue()

    def __str__(self) -> str:
        mb = human_bytes
        table = [("snapshot", "product", "capacity", "setting", "smallest fit", "all fit from",
                  "peak reserved", "replays")]
        for r in self.rows:
            if r.error:
                answer = ("error", "-", "-")
            elif r.fits:
                answer = (mb(r.smallest or 0) + ("" if r.smallest_exact else " *"),
                          mb(r.all_fit_from or 0), mb(r.peak_reserved))
            else:
                answer = ("no fit", "-", "-")
            replays = ("cached" if r.cached else "=" if r.same_as is not None
                       else str(r.replays))
            table.append((r.snapshot, r.product, mb(r.capacity), r.setting or "(default)",
                          *answer, replays))
        widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
        lines = ["  ".join(cell.ljust(w) if i < 4 else cell.rjust(w)
                           for i, (cell, w) in enumerate(zip(row, widths))).rstrip()
                 for row in table]
        if any(r.fits and not r.smallest_exact for r in self.rows):
            lines.append("* the smallest seen to fit: steps far below it were not replayed")
        if any(r.same_as is not None and not r.cached for r in self.rows):
            lines.append("= replays alike a setting above it (every request and segment is "
                         "under its max_split_size_mb): that setting's answer, no replay")
        said = set()
        for r in self.rows:
            if r.error and (r.snapshot, r.error) not in said:
                said.add((r.snapshot, r.error))
                lines.append(f"error: {r.snapshot}: {r.error}")
        lines.append(f"{plural(len(self.rows), 'cell')}"
                     + (f" ({self.cached} from the cache)" if self.cached else "")
                     + f": {plural(self.replays, 'replay')} in {self.seconds:.2f} s"
                     + (f" on {self.executor}" if self.executor else ""))
        return "\n".join(lines)


def study(grid: Grid | dict[str, Any], *, jobs: int | None = 1, executor: str | None = None,
          scheduler: str | None = None, cache: str | os.PathLike[str] | None = None,
          progress: StudyProgress | None = None) -> Study:
    """Answer every cell of ``grid`` (a :class:`Grid`, or a dict of its fields) as
    :func:`fit_capacity` answers it, in one table.

    ``executor``: ``"inline"`` (this process), ``"processes"`` (``jobs`` local worker
    processes) or ``"dask"`` (a Dask cluster at ``scheduler``, e.g. ``tcp://host:8786``,
    else a local cluster of ``jobs`` worker processes; needs the ``study`` extra); default
    ``dask`` with a scheduler, ``processes`` for ``jobs`` > 1, else ``inline``. ``jobs``
    None: one per core. ``cache``: a folder keeping every answer as it arrives; a cell
    found there is not replayed (a study interrupted and run again resumes). ``progress``
    as :data:`StudyProgress`. A snapshot that cannot be searched gets rows with its
    ``error``; the other cells are answered.

    Raises:
        InvalidArgument(Type): a bad grid value, executor, jobs or scheduler; a snapshot
            that cannot be read.
        AllocatorConfigError: a setting torch_npu refuses (the message names it).
        ImportError: the dask executor without Dask distributed installed.
    """
    started = time.perf_counter()
    if isinstance(grid, dict):
        grid = Grid.from_dict(grid)
    if not isinstance(grid, Grid):
        raise InvalidArgumentType(f"grid must be a Grid or a dict, not {type(grid).__name__}")
    jobs = _check_jobs(jobs)
    kind = executor_kind(executor, jobs, scheduler)
    g = grid.checked()
    store = None if cache is None else ResultCache(cache, ANSWER_FIELDS)
    rows: dict[tuple[Any, ...], StudyRow] = {}
    order: list[tuple[Any, ...]] = []
    tasks: list[CellTask] = []
    keys: dict[tuple[Any, ...], str] = {}
    for snap in g.snapshots:
        for product in g.products:
            profile = get_profile(product)
            for capacity in g.capacities:
                top = capacity if capacity is not None else profile.total(profile.main_memory)
                top = top // g.step * g.step
                settings = g.settings[product]
                missing = []
                for conf in settings:
                    cell = (snap.sha256, snap.name, product, top, conf)
                    if cell in rows:
                        continue      # the same snapshot twice, or a capacity twice
                    order.append(cell)
                    row = rows[cell] = StudyRow(snap.name, snap.sha256, product, top, conf)
                    keys[cell] = cell_key(snap.sha256, product, top, conf, g.cann, g.step,
                                          g.window)
                    found = store.get(keys[cell]) if store is not None else None
                    if found is None:
                        missing.append(conf)
                    else:
                        _fill(row, found, cached=True)
                if missing:
                    tasks.append(CellTask(snap.sha256, snap.name, product, top,
                                          tuple(settings), tuple(missing), g.cann, g.step,
                                          g.window))
    cached = len(order) - sum(len(t.missing) for t in tasks)
    done = cached
    if progress is not None:
        progress(done, len(order), "cache")
    result = Study(cached=cached)
    needed = {t.sha256 for t in tasks}
    snapshots = {s.sha256: s for s in g.snapshots if s.sha256 in needed}
    # the longest tasks first (by the snapshot's size times the settings searched), so that
    # no worker is left with a long one at the end while the others wait
    tasks.sort(key=lambda t: -len(snapshots[t.sha256].data) * len(t.missing))
    # every cell in the cache: no worker is started (nor a cluster reached)
    with make_executor(kind if tasks else "inline", jobs, scheduler) as ex:
        result.executor = ex.describe() if tasks else ""
        for index, answers in ex.run(snapshots, tasks):
            task = tasks[index]
            for a in answers:
                cell = (task.sha256, task.name, task.product, task.capacity, a["setting"])
                row = rows[cell]
                if "error" in a:
                    row.error = str(a["error"])
                    continue
                if "like" in a:
                    key = (*cell[:4], a["like"])
                    like = rows[key]
                    answer = {f: getattr(like, f) for f in ANSWER_FIELDS}
                    answer.update(replays=0, seconds=0.0, same_as=a["like"])
                else:
                    answer = a["answer"]
                _fill(row, answer, cached=False)
                result.replays += row.replays
                if store is not None:
                    store.put(keys[cell], answer)
            done += len(task.missing)
            if progress is not None:
                progress(done, len(order), f"{task.name} on {task.product} up to "
                                           f"{human_bytes(task.capacity)}")
    result.rows = [rows[c] for c in order]
    result.seconds = time.perf_counter() - started
    return result


def _fill(row: StudyRow, answer: dict[str, Any], cached: bool) -> None:
    for name in ANSWER_FIELDS:
        setattr(row, name, answer[name])
    row.cached = cached
