"""The capacity search of :func:`~ascend_memsim.plan.fit.fit_capacity` (the steps are in
:mod:`ascend_memsim.plan.fit`'s text) and its trials, replayed in this process or in worker
processes.

A source is read and compiled once (:class:`Source`); each trial asks whether the job fits
at one capacity. The fast path (the default) answers a trial by a run it already has when
that run would be the same at this capacity (``ascend_memsim.plan.columns``: every segment
placed alike), else by a replay of the columns; the plain path (``plain=True``) replays
:func:`~ascend_memsim.observe.tensor_replay.replay_tensors` at every trial, as the search
first did, and is kept to check the fast one against (``tests/test_fit_fast.py``).

With a pool of workers (``--jobs``) the trials of a window are replayed side by side before
the search reads them, and a sweep runs one setting's search per worker; the workers get the
compiled source once, by ``fork`` where the platform has it (shared copy-on-write, nothing
sent), else pickled once each. The answers are the same with or without workers: a trial's
answer is the same whichever run gives it; only the count of replays may differ.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Executor, ProcessPoolExecutor
from typing import Any

from ..allocators.conf import AllocatorConfig, parse_alloc_conf
from ..memory.errors import InvalidArgument
from ..memory.profiles import DEFAULT_PRODUCT, get_profile
from ..observe.tensor_replay import load_source, nothing_replayed, replay_tensors
from .columns import Columns, Outside, Run, compile_source, replay_columns
from .results import FitSearch

__all__ = ["Source", "search", "run_searches", "worker_pool", "SearchTask"]

#: Called as each replay starts: (replays so far, the capacity about to be replayed).
Progress = Callable[[int, int], None]


class Source:
    """A source read once: the snapshot dict (or the trace's path), its product, (for the
    fast path) its columns for ``device``, and the blocks every replay takes outside the
    caching allocator (``outside``, fast path only)."""

    def __init__(self, source: Any, product: str | None, name: str | None = None,
                 device: int | None = None, outside: tuple[Outside, ...] = ()) -> None:
        kind, data = load_source(source)
        self.name = name or (source if isinstance(source, str) else "<snapshot>")
        self.data = data if kind == "snapshot" else source
        if product is None and kind == "trace":
            product = data.header.get("product")
        self.profile = get_profile(product or DEFAULT_PRODUCT)
        self.device = device
        self.outside = tuple(sorted(outside, key=lambda b: b.at))
        self._kind, self._loaded = kind, data
        self._columns: Columns | None = None

    @property
    def columns(self) -> Columns:
        """The compiled columns, made on first use (a trace is read here, once)."""
        if self._columns is None:
            self._columns = compile_source(self._kind, self._loaded, self.name, self.device)
            self._loaded = None     # a trace's stream: read, and not picklable
        return self._columns

    def on(self, product: str) -> Source:
        """This source on ``product``, sharing its compiled columns (they do not depend on
        the product: a study compiles a snapshot once for all its products)."""
        other = Source(self.data, product, self.name, self.device)
        other._columns = self.columns
        return other

    def replay(self, capacity: int, conf: AllocatorConfig, cann: str, *, whole: bool = False,
               plain: bool = False) -> Run:
        if plain:
            if self.outside:
                raise InvalidArgument("blocks outside the allocator replay on the fast path")
            r = replay_tensors(self.data, self.profile.name, capacity=capacity,
                               alloc_conf=conf.text, cann=cann, device=self.device,
                               stop_at_failure=not whole, name=self.name)
            return Run(r, capacity, capacity)
        return replay_columns(self.columns, self.profile, capacity, conf, cann,
                              stop_at_failure=not whole, outside=self.outside)


#: the source a worker process replays (installed by the pool's initializer)
_WORKER: dict[str, Source] = {}


def _install(src: Source) -> None:
    _WORKER["source"] = src


def worker_pool(jobs: int, src: Source) -> Executor | None:
    """``jobs`` worker processes holding ``src`` (None for one job: all in this process).
    By ``fork`` where the platform has it, after the source was read and compiled, so the
    workers share it copy-on-write."""
    if jobs <= 1:
        return None
    src.columns  # noqa: B018  (compiled before the fork, so that every worker shares it)
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else None)
    return ProcessPoolExecutor(jobs, mp_context=context, initializer=_install,
                               initargs=(src,))


def _replay_task(task: tuple[int, AllocatorConfig, str]) -> Run:
    capacity, conf, cann = task
    return _WORKER["source"].replay(capacity, conf, cann)


#: one setting's search, as a worker takes it: (conf text, cann, step, top, window); a
#: study's grid would fan out as such tasks
SearchTask = tuple[str, str, int, int, int]


def _search_task(task: SearchTask) -> FitSearch:
    conf, cann, step, top, window = task
    return search(_WORKER["source"], conf, cann, step, top, window)


def run_searches(src: Source, tasks: list[SearchTask], pool: Executor | None,
                 progress: Progress | None = None) -> list[FitSearch]:
    """One search per task, in order; side by side on ``pool``'s workers when there is one.
    ``progress(searches done, 0)`` after each finishes (with a pool)."""
    if pool is None:
        return [search(src, *t, progress=progress) for t in tasks]
    futures = [pool.submit(_search_task, t) for t in tasks]
    out = []
    for done, f in enumerate(futures):
        out.append(f.result())
        if progress is not None:
            progress(done + 1, 0)
    return out


class _Trials:
    """The trials of one search: the answer at each capacity asked, the runs replayed."""

    def __init__(self, src: Source, conf: AllocatorConfig, cann: str,
                 progress: Progress | None, plain: bool, pool: Executor | None,
                 jobs: int) -> None:
        self.src, self.conf, self.cann = src, conf, cann
        self.progress, self.plain, self.pool = progress, plain, pool
        self.jobs = jobs
        #: capacity -> fits, for each capacity the search asked
        self.asked: dict[int, bool] = {}
        #: capacity -> its replay
        self.runs: dict[int, Run] = {}

    @property
    def replays(self) -> int:
        return len(self.runs)

    def _replay(self, capacity: int, whole: bool = False) -> Run:
        if self.progress is not None:
            self.progress(len(self.runs), capacity)
        run = self.runs[capacity] = self.src.replay(capacity, self.conf, self.cann,
                                                    whole=whole, plain=self.plain)
        return run

    def known(self, capacity: int) -> Run | None:
        """The run that is the replay at ``capacity``, if one was replayed."""
        run = self.runs.get(capacity)
        if run is None:
            for other in self.runs.values():
                if other.covers(capacity):
                    return other
        return run

    def fits(self, capacity: int, whole: bool = False) -> bool:
        run = self.known(capacity) or self._replay(capacity, whole)
        self.asked[capacity] = run.fits
        return run.fits

    def failure(self, capacity: int) -> dict[str, Any] | None:
        """The first failure at ``capacity``, from a replay there (its message names the
        capacity, so a run answering for it will not do)."""
        run = self.runs.get(capacity) or self._replay(capacity)
        return run.result.first_failure

    def prefetch(self, capacities: Iterable[int]) -> None:
        """When no run answers the first of ``capacities`` (in the order the search will ask
        them), replay it and the next ones no run answers, one per worker, side by side."""
        if self.pool is None:
            return
        missing: list[int] = []
        for c in capacities:
            if self.known(c) is None:
                missing.append(c)
            elif not missing:
                return
            if len(missing) == self.jobs:
                break
        if len(missing) < 2:
            return
        if self.progress is not None:
            self.progress(len(self.runs), missing[0])
        for c, run in zip(missing, self.pool.map(
                _replay_task, [(c, self.conf, self.cann) for c in missing])):
            self.runs[c] = run


def search(src: Source, conf: str, cann: str, step: int, top: int, window: int, *,
           progress: Progress | None = None, plain: bool = False,
           pool: Executor | None = None, jobs: int = 1) -> FitSearch:
    """The search for one setting ``conf`` (checked already); see ``fit_capacity``."""
    started = time.perf_counter()
    result = FitSearch(src.name, src.profile.name, conf, step, top)
    trials = _Trials(src, parse_alloc_conf(conf), cann, progress, plain, pool, jobs)
    fits = trials.fits
    try:
        if not fits(top, whole=True):
            result.reason = "an allocation fails even there"
            result.failure = trials.runs[top].result.first_failure
            return result
        first = trials.runs[top].result
        empty = nothing_replayed(first)
        if empty is not None:
            raise InvalidArgument(empty)
        # no capacity below the peak of allocated bytes and the blocks held outside the
        # allocator from the start (the runtime's share) can hold the job
        held = sum(b.size for b in src.outside if b.at == 0)
        lower = result.lower_bound = max(step, -(-(first.peak_allocated + held) // step) * step)
        hint = min(top, max(lower, -(-first.peak_device // step) * step))
        found = _probe(fits, lower, hint, top, step, window, trials.prefetch)
        result.trials = sorted(trials.asked.items())
        (result.smallest, result.smallest_checked_from, all_from, result.all_fit_checked_to,
         result.failing_between) = _answers(dict(result.trials), lower, step, found)
        result.all_fit_from = all_from
        at = trials.known(all_from)
        assert at is not None
        r = at.result
        result.peak_allocated, result.peak_reserved = r.peak_allocated, r.peak_reserved
        result.peak_device, result.retries = r.peak_device, r.retries
        if all_from - step in trials.asked:
            result.failure = trials.failure(all_from - step)
    finally:
        result.replays = trials.replays
        result.seconds = time.perf_counter() - started
    return result


def _probe(fits: Callable[[int], bool], lower: int, hint: int, top: int, step: int,
           window: int, prefetch: Callable[[Iterable[int]], None] | None = None) -> int:
    """Steps 3 to 5 of the search (see ``fit``'s text) with ``fits(capacity)`` (which
    remembers its answers; ``top`` fits): the capacity the bisection found, which fits with
    one step less failing or below ``lower``. ``prefetch(capacities)`` is told each window
    before it is scanned (workers replay it side by side); it changes no answer."""
    lo, hi = lower - step, top   # lo: known to fail (or below the bound), hi: fits
    if hint < top:
        if fits(hint):
            hi = hint
        else:
            # the answer is above the hint, most often near it: strides doubling from one
            # step until one fits, then a bisection of the last stride
            lo, stride = hint, step
            while lo + stride < top:
                if fits(lo + stride):
                    hi = lo + stride
                    break
                lo += stride
                stride *= 2
    found = _bisect(fits, lo, hi, step)
    # below: every step of the window, down to the bound; all the way to it when it is
    # within two windows, so that the smallest answer is exact
    down_to = lower if found - lower <= 2 * window * step else found - window * step
    for c in range(found - step, down_to - 1, -step):
        if prefetch is not None:
            prefetch(range(c, down_to - 1, -step))
        fits(c)
    # above: until `window` steps in a row fit, a failure moving the start above it (at
    # most 4 * window replays)
    all_from, c, budget = found, found, 4 * window
    while c + step <= top and c + step - all_from <= window * step and budget > 0:
        c += step
        if prefetch is not None:
            prefetch(range(c, min(top, all_from + window * step) + 1, step))
        budget -= 1
        if not fits(c):
            all_from = c + step
    if all_from == c + step <= top:
        # the budget ran out on a failure, so the second answer was never replayed: a
        # bisection up to the top (which fits) for a capacity that fits with a failure
        # below it, at most log2(range / step) replays
        _bisect(fits, c, top, step)
    return found


def _bisect(fits: Callable[[int], bool], lo: int, hi: int, step: int) -> int:
    """A capacity between ``lo`` (fails, or below the bound) and ``hi`` (fits) that fits with
    the step below it failing (or being ``lo``): at most log2((hi - lo) / step) replays."""
    while hi - lo > step:
        mid = (lo + hi) // 2 // step * step
        if fits(mid):
            hi = mid
        else:
            lo = mid
    return hi


def _answers(trials: dict[int, bool], lower: int, step: int,
             found: int) -> tuple[int, int, int, int, list[int]]:
    """From the capacities replayed: the smallest that fits and where the failing steps
    below it start, the capacity above every failure seen (not below ``found``) and how far
    up every step from it fits, and the failures between the two answers."""
    fitting = sorted(c for c, ok in trials.items() if ok)
    failing = sorted(c for c, ok in trials.items() if not ok)
    smallest = fitting[0]
    below = smallest - step
    while below >= lower and trials.get(below) is False:
        below -= step
    all_from = max(found, failing[-1] + step if failing else lower)
    checked = all_from
    while trials.get(checked + step) is True:
        checked += step
    between = [c for c in failing if smallest < c < all_from]
    return smallest, below + step, all_from, checked, between


