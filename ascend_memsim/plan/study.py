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
import math
import os
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

from ..allocators.conf import parse_alloc_conf
from ..memory.errors import AclError, InvalidArgumentType
from ..memory.profiles import get_profile
from ..memory.units import human_bytes, plural
from .cache import CacheWarning, DamagedEntry, ResultCache, cell_key
from .cells import ANSWER_FIELDS, CellTask
from .executors import executor_kind, make_executor
from .fit import _check_jobs
from .grid import Grid

__all__ = ["study", "Study", "StudyRow", "StudyProgress", "CacheWarning", "answer_problem",
           "MAX_WARNINGS"]

#: a study warns about this many cache entries one by one, then says how many more
MAX_WARNINGS = 10

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
    #: the cache entries found but not trusted (each warned about, its cell replayed)
    ignored: int = 0
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
        return {"cells": len(self.rows), "cached": self.cached, "ignored": self.ignored,
                "replays": self.replays,
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

    The cache folder is made and checked before anything else is read. A cache entry that
    is damaged, made for another cell, or whose answer the search could not have given
    (:func:`answer_problem`) is not used: its cell is replayed and a :class:`CacheWarning`
    says which entry and why (the first :data:`MAX_WARNINGS`, then how many more). An
    answer that cannot be written to the cache is warned about (the first, then how many in
    all), and the study goes on.

    Raises:
        InvalidArgument(Type): a bad grid value, executor, jobs or scheduler; a snapshot
            that cannot be read; a cache folder that is not a directory or cannot be
            written to.
        AllocatorConfigError: a setting torch_npu refuses (the message names it).
        ImportError: the dask executor without Dask distributed installed.
        ClusterUnavailable: (a ``ConnectionError``) the Dask scheduler at ``scheduler``
            cannot be used: no answer in time, not a Dask scheduler, no workers (the
            message names it and why).
    """
    started = time.perf_counter()
    if isinstance(grid, dict):
        grid = Grid.from_dict(grid)
    if not isinstance(grid, Grid):
        raise InvalidArgumentType(f"grid must be a Grid or a dict, not {type(grid).__name__}")
    jobs = _check_jobs(jobs)
    kind = executor_kind(executor, jobs, scheduler)
    store = None if cache is None else ResultCache(cache, ANSWER_FIELDS)
    if store is not None:
        store.prepare()
    g = grid.checked()
    ignored: list[str] = []
    unkept = 0
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
                    found = None
                    if store is not None:
                        try:
                            found = store.get(keys[cell])
                            problem = "" if found is None else answer_problem(
                                found, top, g.step, len(snap.data), conf)
                        except DamagedEntry as e:
                            problem = str(e)
                        if problem:
                            found = None
                            ignored.append(
                                f"the cache entry {store.path(keys[cell])} ({snap.name} on "
                                f"{product} up to {human_bytes(top)}, "
                                f"{conf or '(default)'}) is not used, its cell is replayed: "
                                f"{problem}")
                    if found is None:
                        missing.append(conf)
                    else:
                        _fill(row, found, cached=True)
                if missing:
                    tasks.append(CellTask(snap.sha256, snap.name, product, top,
                                          tuple(settings), tuple(missing), g.cann, g.step,
                                          g.window))
    for text in ignored[:MAX_WARNINGS]:
        warnings.warn(text, CacheWarning, stacklevel=2)
    if len(ignored) > MAX_WARNINGS:
        warnings.warn(f"{len(ignored) - MAX_WARNINGS} more cache entries in {cache} are not "
                      f"used, their cells replayed", CacheWarning, stacklevel=2)
    cached = len(order) - sum(len(t.missing) for t in tasks)
    done = cached
    if progress is not None:
        progress(done, len(order), "cache")
    result = Study(cached=cached, ignored=len(ignored))
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
                    try:
                        store.put(keys[cell], answer)
                    except OSError as e:
                        # the first said as it happens (a full disk, the folder removed),
                        # how many in all at the end; the table is whole either way
                        unkept += 1
                        if unkept == 1:
                            warnings.warn(f"cannot keep an answer in the cache: "
                                          f"{store.path(keys[cell])}: {e.strerror or e}; the "
                                          f"study goes on", CacheWarning, stacklevel=2)
            done += len(task.missing)
            if progress is not None:
                progress(done, len(order), f"{task.name} on {task.product} up to "
                                           f"{human_bytes(task.capacity)}")
    if unkept > 1:
        warnings.warn(f"{unkept} answers in all could not be kept in the cache folder "
                      f"{cache}: a study run again replays them", CacheWarning, stacklevel=2)
    result.rows = [rows[c] for c in order]
    result.seconds = time.perf_counter() - started
    return result


def _fill(row: StudyRow, answer: dict[str, Any], cached: bool) -> None:
    for name in ANSWER_FIELDS:
        setattr(row, name, answer[name])
    row.cached = cached


_SIZES = ("lower_bound", "peak_allocated", "peak_reserved", "peak_device")


def answer_problem(answer: dict[str, Any], capacity: int, step: int, snapshot_bytes: int,
                   setting: str) -> str:
    """Why ``answer`` (a cache entry's, of the right fields and types) cannot be what the
    capacity search answers for a cell searched up to ``capacity`` in steps of ``step``, of
    a snapshot of ``snapshot_bytes`` bytes, with ``setting``; "" when it can. Time O(1) but
    for a ``same_as`` setting, parsed (linear in its length).

    What :func:`~ascend_memsim.plan.search.search` answers, checked here: a search that does
    not fit ran one replay, at the top, and holds no figure (``FitSearch``'s defaults); one
    that fits has ``step <= lower_bound <= smallest <= all_fit_from <= capacity``, each a
    multiple of the step (every capacity it replays is), a smallest equal to the lower bound
    only when exact, peaks ``allocated <= reserved <= device <= all_fit_from`` (the replay
    at ``all_fit_from`` fits) with the peak allocated under the lower bound (the bound is
    the top run's peak allocated rounded up, and a run that fits allocates alike at every
    capacity), at most one replay per step up to the capacity (each replay is at a step of
    its own), and at most one retry per byte of the snapshot (a retry is one allocation of
    it). An answer taken from ``same_as`` ran no replay and took no time.
    """
    a = answer
    mb = human_bytes
    for name in (*_SIZES, "smallest", "all_fit_from"):
        if a[name] is not None and not 0 <= a[name] <= capacity:
            # the value itself is not printed: it may be thousands of digits
            return f"{name} is not between 0 and the capacity searched, {mb(capacity)}"
    if not 0 <= a["retries"] <= snapshot_bytes:
        return (f"retries is not between 0 and one per byte of the snapshot "
                f"({snapshot_bytes:,} bytes)")
    if not (math.isfinite(a["seconds"]) and a["seconds"] >= 0):
        return "seconds is not a time"
    same_as, replays = a["same_as"], a["replays"]
    if same_as is None:
        most = capacity // step
        if not 1 <= replays <= most:
            return (f"replays is not between 1 and one per step up to the capacity "
                    f"({most:,})")
    else:
        if same_as == setting:
            return "it says it replays alike its own setting"
        if replays != 0 or a["seconds"] != 0.0:
            return "it is another setting's answer, yet ran replays of its own"
        try:
            parse_alloc_conf(same_as)
        except (AclError, ValueError):
            return "same_as is not an allocator setting"
    if not a["fits"]:
        if (a["smallest"], a["all_fit_from"], a["smallest_exact"], a["retries"],
                *(a[n] for n in _SIZES)) != (None, None, False, 0, 0, 0, 0, 0):
            return "it does not fit, yet holds the figures of a fit"
        if same_as is None and replays != 1:
            return "it does not fit, yet ran more than the one replay at the top"
        return ""
    smallest, all_from, lower = a["smallest"], a["all_fit_from"], a["lower_bound"]
    if smallest is None or all_from is None:
        return "it fits, yet names no capacity that fits"
    if smallest % step or all_from % step or lower % step:
        return f"a capacity in it is not a multiple of the step, {mb(step)}"
    if not step <= lower <= smallest <= all_from <= capacity:
        return (f"it fits from {mb(all_from)}, the smallest {mb(smallest)}, with a lower "
                f"bound of {mb(lower)}: not in that order between one step ({mb(step)}) "
                f"and the capacity ({mb(capacity)})")
    if smallest == lower and not a["smallest_exact"]:
        return "its smallest is the lower bound, yet not exact"
    if not a["peak_allocated"] <= a["peak_reserved"] <= a["peak_device"] <= all_from:
        return (f"its peaks (allocated, reserved, device) are not in order up to the "
                f"capacity that fits, {mb(all_from)}")
    if a["peak_allocated"] > lower:
        return (f"its peak allocated, {mb(a['peak_allocated'])}, is above the lower bound, "
                f"{mb(lower)}")
    return ""
