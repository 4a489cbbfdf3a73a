"""Plan a job: the largest micro-batch (or sequence length, or any knob that memory grows
with) that fits, and the layout that fits best, from estimates of the script itself.

Each grid point (:class:`~.job_spec.JobSpec`: product x capacity x world size x the
script's own knobs) is searched on its own: with a monotone axis ``NAME=LO..HI`` the
largest value that fits, by bisection; without one, whether the point fits. Each cell is one
estimate in a process of its own (:mod:`.job_cells`), run where the study's executors run
(:mod:`.job_executors`); with a cache folder every answer is kept as it arrives
(:mod:`.cache`), so a plan that was interrupted resumes with no cell run twice.

The bisection (one per grid point, ``LO < HI``): the estimates at ``LO`` and ``HI`` (side by
side when there are workers for both); nothing fits when ``LO`` does not, ``HI`` is the
answer when it fits; otherwise between a value that fits and one that does not, the middle
one is run, until they are neighbours: ``2 + ceil(log2(HI - LO))`` runs, never more than
``ceil(log2(HI - LO + 1)) + 2``. DECISION: it assumes that memory grows with the value (a
larger micro-batch never needs less), which the table says; a value that fits above one
that does not would not be seen. A value **fits** when its estimate fits on every rank and
leaves at least ``margin`` of the card free (5% by default: the allocator's fragmentation
in a long job, the buffers the estimate does not count). A cell whose script fails other
than by running out of memory, or that gives no answer, ends its point's search with the
reason: no value is said to fit from a run that did not finish.

The answer is the same on every executor: each point's search depends on its own answers
only, never on which cell finished first.
"""

from __future__ import annotations

import math
import os
import time
import warnings
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..memory.errors import InvalidArgument
from ..memory.units import human_bytes
from .cache import CacheWarning, DamagedEntry, ResultCache
from .executors import executor_kind
from .fit import _check_jobs
from .job_cells import ANSWER_FIELDS, JobCell
from .job_executors import CellExecutor, make_cell_executor
from .job_report import JobPlan, PointResult, Tried, recommend
from .job_spec import JobSpec, describe_axes

__all__ = ["plan_job", "JobPlan", "PointResult", "Tried", "JobProgress", "DEFAULT_MARGIN",
           "most_runs", "best_so_far"]

#: DECISION: 5% of the card left free by default: what a long job's fragmentation and the
#: buffers an estimate leaves out (docs/guide/estimate.md) take, about
DEFAULT_MARGIN = 0.05
#: a plan warns about this many cache entries one by one, then says how many more
MAX_WARNINGS = 10

#: Called as cells finish: (estimates run, cells from the cache, cells running now, the best
#: configuration seen to fit so far: "" when none yet).
JobProgress = Callable[[int, int, int, str], None]


def most_runs(low: int, high: int) -> int:
    """The most estimates one bisection over ``low..high`` runs: ``ceil(log2(range)) + 2``
    for a range of ``high - low + 1`` values (one for a single value).

    >>> most_runs(1, 256), most_runs(1, 1), most_runs(1, 2)
    (10, 1, 3)
    """
    return 1 if low == high else math.ceil(math.log2(high - low + 1)) + 2


class _Search:
    """One grid point's search, answers in, the values it needs out (see the module)."""

    def __init__(self, spec: JobSpec, point: dict[str, str], margin: float) -> None:
        self.spec, self.point, self.margin = spec, point, margin
        self.result = PointResult(dict(point), spec.label(point, None))
        self.answers: dict[int | None, dict[str, Any]] = {}
        self.asked: set[int | None] = set()
        self.lo: int | None = None    # fits
        self.hi: int | None = None    # does not
        self.done = False

    def fits(self, a: Mapping[str, Any]) -> bool:
        return bool(a["verdict"] == "fits"
                    and a["margin"] >= math.ceil(self.margin * a["capacity"]))

    def wanted(self) -> list[int | None]:
        """The values to run now that were not asked for before."""
        vary = self.spec.vary
        if self.done:
            want: list[int | None] = []
        elif vary is None:
            want = [None]
        elif self.lo is None:
            want = [vary.low, vary.high]
        else:
            assert self.hi is not None
            want = [(self.lo + self.hi) // 2]
        want = [v for v in dict.fromkeys(want) if v not in self.asked]
        self.asked.update(want)
        return want

    def give(self, value: int | None, answer: dict[str, Any], cached: bool) -> None:
        """Take the answer of ``value``; the search moves on (or ends)."""
        if self.done or value in self.answers:
            return
        self.answers[value] = answer
        ok = self.fits(answer)
        r = self.result
        r.tried.append(Tried(value, answer, cached, ok))
        # in the value's order, not the order the cells finished in: the same on every
        # executor
        r.tried.sort(key=lambda t: 0 if t.value is None else t.value)
        if cached:
            r.cached += 1
        else:
            r.runs += 1
        vary = self.spec.vary
        if vary is None:
            if not self._broken(value, answer):
                self._end(None, answer if ok else None, None if ok else answer, None)
            return
        if self.lo is None:
            low, high = vary.low, vary.high
            assert low is not None and high is not None
            if low not in self.answers or high not in self.answers:
                return
            a, b = self.answers[low], self.answers[high]
            if self._broken(low, a) or (self.fits(a) and self._broken(high, b)):
                return
            if not self.fits(a):
                self._end(None, None, a, low)
            elif self.fits(b):
                self._end(high, b, None, None)
            else:
                self.lo, self.hi = low, high
                if high - low <= 1:
                    self._end(low, a, b, high)
            return
        if self._broken(value, answer):
            return
        assert value is not None and self.hi is not None
        if ok:
            self.lo = value
        else:
            self.hi = value
        if self.hi - self.lo <= 1:
            self._end(self.lo, self.answers[self.lo], self.answers[self.hi], self.hi)

    def _broken(self, value: int | None, a: Mapping[str, Any]) -> bool:
        """End the search when ``a`` is no verdict on memory; whether it did."""
        if a["verdict"] in ("fits", "over"):
            return False
        at = self.spec.label(self.point, value)
        self.result.error = f"at {at}: {a['why'] or a['verdict']}"
        self.done = True
        return True

    def _end(self, largest: int | None, best: Mapping[str, Any] | None,
             over: Mapping[str, Any] | None, first_over: int | None) -> None:
        r = self.result
        self.done = True
        r.largest = largest
        r.fits = best is not None
        if best is not None:
            r.peak_reserved, r.total = best["peak_reserved"], best["total"]
            r.margin, r.capacity = best["margin"], best["capacity"]
        elif over is not None:
            r.capacity = over["capacity"]
        if over is not None:
            r.first_over = first_over if self.spec.vary is not None else None
            r.first_rank = (over["first_rank"] if over["first_rank"] is not None
                            else over["tightest_rank"])
            r.why = over["why"] or self._short(over)

    def _short(self, a: Mapping[str, Any]) -> str:
        """Why an answer that fits on the card is short of the margin."""
        need = math.ceil(self.margin * a["capacity"])
        return (f"{human_bytes(a['margin'])} of the card left, under the "
                f"{self.margin:.0%} asked ({human_bytes(need)})")


def best_so_far(spec: JobSpec, searches: Sequence[_Search]) -> str:
    """The configuration seen to fit with the largest value of the monotone axis so far
    (without one: the first point seen to fit), for a progress line; "" when none yet."""
    found: list[tuple[int, int, str]] = []
    for i, s in enumerate(searches):
        if s.done:
            value = s.result.largest if s.result.fits else None
        else:
            value = s.lo
        if spec.vary is not None and value is not None:
            found.append((value, -i, spec.label(s.point, value)))
        elif spec.vary is None and s.done and s.result.fits:
            found.append((0, -i, spec.label(s.point, None)))
    return max(found)[2] if found else ""


def _problem(a: Mapping[str, Any]) -> str:
    """Why a cache entry's answer (of the right fields and types) cannot be a cell's kept
    answer; "" when it can. Time O(1)."""
    if a["verdict"] not in ("fits", "over"):
        return f"the verdict {str(a['verdict'])[:20]!r} is never kept"
    if a["oom"] and a["verdict"] != "over":
        return "it ran out of memory, yet fits"
    if a["capacity"] <= 0 or a["margin"] != a["capacity"] - a["total"]:
        return "its margin is not its capacity less its total"
    if a["peak_reserved"] < 0 or a["total"] < 0:
        return "a negative peak"
    if a["verdict"] == "fits" and (a["margin"] < 0 or a["first_rank"] is not None):
        return "it fits, yet is over its card or names a rank that fails"
    if any(a[n] is not None and a[n] < 0 for n in ("first_rank", "tightest_rank")):
        return "a negative rank"
    if not (math.isfinite(a["seconds"]) and a["seconds"] >= 0):
        return "seconds is not a time"
    return ""


def plan_job(command: Sequence[str], *, vary: str | None = None, grid: Sequence[str] = (),
             env: Sequence[str] = (), keys: Sequence[tuple[str, str]] = (),
             product: str | None = None, capacity: str | None = None,
             world_size: str | None = None, alloc_conf: str | None = None,
             hccl_buffsize: str | None = None, estimate_args: Sequence[str] | str = (),
             inputs: Sequence[str] = (), margin: float = DEFAULT_MARGIN,
             batch: str | None = None, seq: str | None = None, cards: str | None = None,
             jobs: int | None = 1, executor: str | None = None, scheduler: str | None = None,
             cache: str | os.PathLike[str] | None = None, timeout: float = 3600.0,
             cwd: str | None = None, cold: bool = False,
             progress: JobProgress | None = None) -> JobPlan:
    """Search the knobs of the job ``command`` (a script and its arguments, or a launcher's
    command, ``{NAME}`` standing for an axis's value) for what fits.

    Axes (see :mod:`.knobs`): ``vary`` ``NAME=LO..HI``, monotone, searched by bisection;
    ``grid`` ``NAME=a,b,c`` each; ``env`` ``NAME=a,b`` (an axis), ``NAME=VALUE`` or ``NAME``
    (its value here); ``keys`` ``(FILE, KEY.PATH=VALUES)``, set in a copy of the config
    file; ``product``, ``capacity``, ``world_size``, ``hccl_buffsize`` (comma lists) and
    ``alloc_conf`` (a ';' list) as the estimate takes them. ``estimate_args``: more of the
    estimate's options (a string is split as a shell splits it). ``inputs``: files the job
    reads that its command does not name, kept in the cache key. ``margin``: the part of
    the card that must stay free (0 to 0.5). ``batch``, ``seq``, ``cards``: axis names or
    whole numbers joined by ``*``; tokens per step per card = batch x seq / cards (cards 1
    by default), which ranks the points. ``jobs``, ``executor``, ``scheduler`` as
    :func:`~ascend_memsim.plan.study` takes them; ``cache`` a folder keeping every answer;
    ``timeout`` seconds a cell may take; ``cwd`` the folder the command runs in; ``cold``:
    every cell a new interpreter, not a fork of a warm-start server (:mod:`.job_cells`;
    the answers are the same, each cell 2 to 3 seconds slower).

    Raises:
        InvalidArgument(Type): a bad knob, value, executor or cache folder (said before
            any run).
        ImportError: YAML without PyYAML; the dask executor without Dask distributed.
        ClusterUnavailable: the scheduler cannot be used.
    """
    started = time.perf_counter()
    if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not (
            0 <= margin <= 0.5):
        raise InvalidArgument(f"margin is the part of the card left free, 0 to 0.5 (5% is "
                              f"0.05), got {str(margin)[:40]}")
    spec = JobSpec.make(command, vary=vary, grid=grid, env=env, keys=keys, product=product,
                        capacity=capacity, world_size=world_size, alloc_conf=alloc_conf,
                        hccl_buffsize=hccl_buffsize, estimate_args=estimate_args,
                        inputs=inputs, timeout=timeout, cwd=cwd)
    spec.warm = not cold
    if (batch is None) != (seq is None) or (cards is not None and batch is None):
        raise InvalidArgument("tokens per card need --batch and --seq (and --cards, when a "
                              "batch is spread over several cards)")
    expression = ""
    if batch is not None and seq is not None:
        for text, what in ((batch, "--batch"), (seq, "--seq"), (cards or "1", "--cards")):
            spec.check_expression(text, what)
        expression = f"{batch} * {seq} / {cards or '1'}"
    jobs = _check_jobs(jobs)
    kind = executor_kind(executor, jobs, scheduler)
    store = None if cache is None else ResultCache(cache, ANSWER_FIELDS)
    if store is not None:
        store.prepare()
    searches = [_Search(spec, p, float(margin)) for p in spec.points()]
    for s in searches:
        # every grid point's first cell made now: a value a config key cannot take, a file
        # that cannot be read, said before any run
        spec.cell(s.point, spec.vary.low if spec.vary is not None else None)
    plan = JobPlan(list(spec.command), describe_axes(spec), spec.columns,
                   spec.vary.name if spec.vary is not None else None, float(margin),
                   [s.result for s in searches], tokens=expression)
    if spec.names_no_file():
        plan.notes.append("the command names no script or config file (.py, .json, .yaml, "
                          ".toml): the cache cannot see the job change; name its files with "
                          "--input")
    ignored: list[str] = []
    unkept = [0]
    waiting: dict[str, list[tuple[_Search, int | None]]] = {}
    todo = deque(searches)
    ex: CellExecutor | None = None

    def look(cell: JobCell) -> dict[str, Any] | None:
        if store is None:
            return None
        try:
            found = store.get(cell.key)
            problem = "" if found is None else _problem(found)
        except DamagedEntry as e:
            found, problem = None, str(e)
        if problem:
            ignored.append(f"the cache entry {store.path(cell.key)} ({cell.label}) is not "
                           f"used, its cell is run again: {problem}")
            if len(ignored) <= MAX_WARNINGS:
                warnings.warn(ignored[-1], CacheWarning, stacklevel=3)
            return None
        return found

    def keep(cell: JobCell, answer: dict[str, Any]) -> None:
        if store is None or answer["verdict"] not in ("fits", "over"):
            return
        try:
            store.put(cell.key, answer)
        except OSError as e:
            unkept[0] += 1
            if unkept[0] == 1:
                warnings.warn(f"cannot keep an answer in the cache: {store.path(cell.key)}: "
                              f"{e.strerror or e}; the plan goes on", CacheWarning,
                              stacklevel=3)

    def best() -> str:
        return best_so_far(spec, searches)

    try:
        while todo or waiting:
            while todo:
                s = todo.popleft()
                for value in s.wanted():
                    cell = spec.cell(s.point, value)
                    found = look(cell)
                    if found is not None:
                        plan.cached += 1
                        s.give(value, found, True)
                        todo.append(s)
                    elif cell.key in waiting:
                        waiting[cell.key].append((s, value))
                    else:
                        waiting[cell.key] = [(s, value)]
                        if ex is None:
                            ex = make_cell_executor(kind, jobs, scheduler)
                            plan.executor = ex.describe()
                        ex.submit(cell)
            if progress is not None:
                progress(plan.runs, plan.cached, ex.running if ex else 0, best())
            if not waiting:
                break
            assert ex is not None
            for cell, answer in ex.finished():
                plan.runs += 1
                keep(cell, answer)
                for s, value in waiting.pop(cell.key, []):
                    s.give(value, answer, False)
                    todo.append(s)
    finally:
        if ex is not None:
            ex.close()
    if len(ignored) > MAX_WARNINGS:
        warnings.warn(f"{len(ignored) - MAX_WARNINGS} more cache entries in {cache} are not "
                      f"used, their cells run again", CacheWarning, stacklevel=2)
    if unkept[0] > 1:
        warnings.warn(f"{unkept[0]} answers in all could not be kept in the cache folder "
                      f"{cache}: a plan run again runs them", CacheWarning, stacklevel=2)
    plan.ignored = len(ignored)
    for s in searches:
        r = s.result
        if expression and r.fits and batch is not None and seq is not None:
            tokens = (spec.number(batch, s.point, r.largest) * spec.number(seq, s.point,
                                                                            r.largest)
                      / spec.number(cards or "1", s.point, r.largest))
            r.tokens = float(tokens)
    plan.recommended, plan.why = recommend(plan)
    plan.seconds = time.perf_counter() - started
    if progress is not None:
        progress(plan.runs, plan.cached, 0, best())
    return plan
