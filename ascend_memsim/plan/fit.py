"""Will it fit, and with which settings? The capacity a recorded job needs under torch_npu's
caching allocator (:func:`fit_capacity`), and a sweep of allocator settings ranked by it
(:func:`sweep_settings`).

Fit is not monotone in the capacity under a caching allocator: with a little more memory a
segment that would not fit (so the allocator freed its cached segments and packed the next
one lower) fits above them, and a later segment may then find no run long enough. So a
search answers two questions, each checked by replays:

- the **smallest capacity that fits**;
- the capacity **from which every larger one fits**, the one to plan with.

The search (every capacity a multiple of ``step``, from a lower bound to ``top``):

1. one replay at ``top``; if the job fails there, nothing fits in the range;
2. the lower bound: that run's peak allocated bytes, rounded up to a step (a fitting run
   allocates the same blocks at every capacity, so no smaller device holds its live
   tensors);
3. one replay at the top run's device footprint (a hint: usually near the answer); if it
   fails, strides doubling from one step above it until one fits; then a bisection, for a
   capacity ``T`` that fits with ``T - step`` failing: about 2 log2(distance / step)
   replays, never more than 2 log2(range / step);
4. downwards: every step from ``T - step`` to ``window`` steps below ``T`` is replayed, or
   every step down to the bound when it is within ``2 * window`` steps; the smallest that
   fits is the first answer, exact when the scan reached the bound;
5. upwards: every step above ``T`` is replayed until ``window`` steps in a row fit; a failure
   moves the second answer above it and the count starts again (at most ``4 * window``
   replays); when those run out on a failure, a bisection between it and the top finds a
   capacity that fits with the step below failing (at most log2(range / step) replays), so
   the second answer is always one replayed.

DECISION: ``window`` is 16 steps (32 MiB at the default 2 MiB step, the huge page) on each
side: the dips seen in recorded jobs are a few segments wide. A search costs at most
2 + 3 log2(range / step) + 6 * window replays; a failing replay ends at its first failure.
Capacities above the checked stretch are not proven: each replay is one capacity.

A source is read once per search or sweep and compiled into columns
(:mod:`ascend_memsim.plan.columns`); each replay runs them through a fresh caching allocator
on a fresh device, with the calls and figures of
:func:`~ascend_memsim.observe.tensor_replay.replay_tensors`. A capacity is answered without a
replay of its own when a replay at another one places every segment alike there (the same
run: its fit, peaks and retries); a setting that cannot change any replay of the source is
answered by the search of one it replays alike. The search (:mod:`ascend_memsim.plan.search`)
asks the same capacities either way, so the answers are those of a replay at each.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from typing import Any

from ..allocators.conf import parse_alloc_conf, shown
from ..allocators.rules import DEFAULT_CANN, PAGE_1G_CANN, cann_tuple
from ..memory.constants import MiB
from ..memory.errors import AllocatorConfigError, InvalidArgument, InvalidArgumentType
from ..memory.profiles import DEFAULT_PRODUCT, get_profile
from ..memory.units import human_bytes
from .columns import Outside, same_outcome_key
from .results import FitSearch, Sweep
from .search import Progress, Source, run_searches, search, worker_pool

__all__ = ["fit_capacity", "sweep_settings", "default_candidates", "FitSearch", "Sweep",
           "DEFAULT_WINDOW", "MAX_WINDOW"]

#: steps checked below and above the bisection's answer (DECISION, see the module's text)
DEFAULT_WINDOW = 16
#: the largest window taken: bounds what one search can cost
MAX_WINDOW = 1024

def default_candidates(product: str | None = None, cann: str = DEFAULT_CANN) -> list[str]:
    """The settings :func:`sweep_settings` tries when given none (DECISION): torch_npu's
    defaults, expandable segments, ``max_split_size_mb`` 32, 128 and 512 (a factor of four
    apart from the smallest torch_npu takes, 20), ``roundup_power2_divisions:4``, and
    ``page_size:1g`` where the product has 1 GiB pages and ``cann`` is 8.1.RC1 or later
    (``NPUCachingAllocator.cpp`` ``IsMallocPage1GMem``; on a part without them torch_npu
    takes each 1 GiB segment on 2 MiB pages after a warning, which only rounds segments up,
    so it is not tried there). ``garbage_collection_threshold``
    is not among them: torch_npu collects only under a memory fraction below 1
    (``NPUCachingAllocator.cpp`` ``malloc``: ``allowed_memory_maximum.has_value() &&
    garbage_collection_threshold() > 0``), so alone it changes nothing; sweep it with a
    ``per_process_memory_fraction`` in your own list.
    """
    profile = get_profile(product or DEFAULT_PRODUCT)
    out = ["", "expandable_segments:True", "max_split_size_mb:32", "max_split_size_mb:128",
           "max_split_size_mb:512", "roundup_power2_divisions:4"]
    if profile.huge1g and cann_tuple(cann) >= PAGE_1G_CANN:
        out.append("page_size:1g")
    return out


def _check_int(name: str, value: object, low: int, high: int | None = None) -> int:
    if value.__class__ is not int:
        raise InvalidArgumentType(f"{name} must be an int, not {type(value).__name__}")
    if value < low or (high is not None and value > high):
        bound = f"from {low} to {high}" if high is not None else f"at least {low}"
        raise InvalidArgument(f"{name} must be {bound}, got {value}")
    return value


def _limits(src: Source, step: object, top: object, window: object,
            cann: object) -> tuple[int, int, int]:
    cann_tuple(cann)  # a CANN version, or InvalidArgument(Type) before any replay
    step = _check_int("step", step, 1)
    if step % 64:
        raise InvalidArgument(f"step must be a positive multiple of 64 bytes, got {step}")
    profile = src.profile
    if top is None:
        top = profile.total(profile.main_memory)
    top = _check_int("top (the largest capacity)", top, 1) // step * step
    if top < step:
        raise InvalidArgument(f"the largest capacity must be at least one step "
                              f"({human_bytes(step)})")
    return step, top, _check_int("window", window, 0, MAX_WINDOW)


def _check_jobs(jobs: object) -> int:
    if jobs is None:
        return os.cpu_count() or 1
    return _check_int("jobs", jobs, 1, 1024)


def fit_capacity(source: Any, product: str | None = None, *, alloc_conf: str = "",
                 cann: str = DEFAULT_CANN, step: int = 2 * MiB, top: int | None = None,
                 window: int = DEFAULT_WINDOW, device: int | None = None,
                 progress: Progress | None = None, name: str | None = None,
                 jobs: int | None = 1, outside: tuple[Outside, ...] = (),
                 _plain: bool = False) -> FitSearch:
    """The smallest capacity on which ``source`` fits through torch_npu's caching allocator
    with ``alloc_conf``, and the capacity from which every larger one fits, searched in
    multiples of ``step`` up to ``top`` (default: the product's own memory). ``source``,
    ``product``, ``cann`` and ``device`` as :func:`replay_tensors` takes them; the search
    and what each answer has been checked against are in the module's text.

    At most 2 + 3 log2(top / step) + 6 * ``window`` replays, fewer when a replay answers
    other capacities too. ``name`` names the source in the answer (default: the path, or
    ``<snapshot>`` for a dict). ``jobs`` worker processes replay a window's capacities side
    by side (1: all in this process; None: one per core); the answers are the same.
    ``progress(replays so far, capacity)`` is called as each replay in this process starts.
    ``outside`` blocks (:class:`~ascend_memsim.plan.columns.Outside`: HCCL buffers, the
    runtime's share) are taken on the device in every replay where they say, so the answers
    count them.

    Raises:
        InvalidArgument: a bad source, product, step, top, window or jobs; a source with
            nothing to replay (no tensor allocation), which any capacity would "fit".
        AllocatorConfigError: an ``alloc_conf`` torch_npu refuses.
    """
    src = Source(source, product, name, device, outside)
    step, top, window = _limits(src, step, top, window, cann)
    jobs = _check_jobs(jobs)
    parse_alloc_conf(alloc_conf)
    pool = None if _plain else worker_pool(jobs, src)
    try:
        return search(src, alloc_conf, cann, step, top, window, progress=progress,
                      plain=_plain, pool=pool, jobs=jobs)
    finally:
        if pool is not None:
            pool.shutdown()


def sweep_settings(source: Any, product: str | None = None, *,
                   candidates: list[str] | tuple[str, ...] | None = None,
                   cann: str = DEFAULT_CANN, step: int = 2 * MiB, top: int | None = None,
                   window: int = DEFAULT_WINDOW, device: int | None = None,
                   progress: Progress | None = None, name: str | None = None,
                   jobs: int | None = 1, outside: tuple[Outside, ...] = (),
                   _plain: bool = False) -> Sweep:
    """Run :func:`fit_capacity` for each allocator setting in ``candidates`` (default:
    :func:`default_candidates`) over one reading of ``source``, and rank them (see
    :attr:`Sweep.results`). Every candidate is parsed before any replay. A setting that
    cannot change any replay of this source (a ``max_split_size_mb`` above every request
    and the segment it makes) gets the answer of the first setting it replays alike, with no
    replay of its own (:attr:`Sweep.same_as`). ``jobs`` worker processes run the settings'
    searches side by side (1: all in this process; None: one per core); ``outside`` blocks
    are taken in every replay, as :func:`fit_capacity` takes them; the answers are the
    same.

    Raises:
        InvalidArgument: a bad source, product, step, top, window, jobs or candidate list.
        AllocatorConfigError: a candidate torch_npu refuses (the message names it).
    """
    src = Source(source, product, name, device, outside)
    step, top, window = _limits(src, step, top, window, cann)
    jobs = _check_jobs(jobs)
    if candidates is None:
        candidates = default_candidates(src.profile.name, cann)
    if not isinstance(candidates, (list, tuple)) or not candidates:
        raise InvalidArgument("candidates must be a non-empty list of PYTORCH_NPU_ALLOC_CONF "
                              "strings")
    confs: list[str] = []
    parsed = []
    for conf in candidates:
        if not isinstance(conf, str):
            raise InvalidArgumentType(f"a candidate must be a str, not {type(conf).__name__}")
        conf = conf.strip()
        try:
            value = parse_alloc_conf(conf)
        except AllocatorConfigError as e:
            raise AllocatorConfigError(
                f"{str(e).strip().rstrip(',')} (in the setting {shown(conf)!r})") from None
        if conf not in confs:
            confs.append(conf)
            parsed.append(value)
    started = time.perf_counter()
    sweep = Sweep(src.name, src.profile.name, step, top)
    # settings that replay alike share one search: the first of them is searched
    first: dict[Any, str] = {}
    like: str | None
    for conf, value in zip(confs, parsed):
        key = conf if _plain else same_outcome_key(value, src.columns, src.profile, cann)
        like = first.setdefault(key, conf)
        if like != conf:
            sweep.same_as[conf] = like
    searched = [c for c in confs if c not in sweep.same_as]
    done = 0

    def told(runs: int, capacity: int) -> None:
        if progress is not None:
            progress(done + runs, capacity)

    pool = None if _plain or len(searched) < 2 else worker_pool(min(jobs, len(searched)), src)
    try:
        if pool is None:
            found = {}
            for conf in searched:
                found[conf] = search(src, conf, cann, step, top, window, progress=told,
                                     plain=_plain)
                done += found[conf].replays
        else:
            found = dict(zip(searched, run_searches(
                src, [(c, cann, step, top, window) for c in searched], pool, progress)))
    finally:
        if pool is not None:
            pool.shutdown()
    results = []
    for index, conf in enumerate(confs):
        like = sweep.same_as.get(conf)
        if like is None:
            results.append((index, found[conf]))
        else:
            copy = replace(found[like], alloc_conf=conf, replays=0, seconds=0.0,
                           trials=list(found[like].trials),
                           failing_between=list(found[like].failing_between))
            results.append((index, copy))
    results.sort(key=lambda t: (not t[1].fits, t[1].all_fit_from or 0, t[1].smallest or 0,
                                t[1].peak_reserved, t[0]))
    sweep.results = [r for _, r in results]
    sweep.replays = sum(r.replays for r in sweep.results)
    sweep.seconds = time.perf_counter() - started
    return sweep
