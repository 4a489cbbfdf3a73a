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

Each replay is :func:`~ascend_memsim.observe.tensor_replay.replay_tensors` on a fresh
device; a snapshot is read once and its entries reused by every replay, a trace of the
project is streamed again by each (memory bounded by its live blocks).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..allocators.conf import parse_alloc_conf
from ..allocators.rules import DEFAULT_CANN, PAGE_1G_CANN, cann_tuple
from ..memory.constants import MiB
from ..memory.errors import AllocatorConfigError, InvalidArgument, InvalidArgumentType
from ..memory.profiles import DEFAULT_PRODUCT, get_profile
from ..memory.units import human_bytes, plural
from .tensor_replay import TensorReplayResult, load_source, nothing_replayed, replay_tensors

__all__ = ["fit_capacity", "sweep_settings", "default_candidates", "FitSearch", "Sweep",
           "DEFAULT_WINDOW", "MAX_WINDOW"]

#: steps checked below and above the bisection's answer (DECISION, see the module's text)
DEFAULT_WINDOW = 16
#: the largest window taken: bounds what one search can cost
MAX_WINDOW = 1024

#: Called as each replay starts: (replays so far, the capacity about to be replayed).
Progress = Callable[[int, int], None]


@dataclass
class FitSearch:
    """The answer of :func:`fit_capacity`; capacities in bytes, multiples of ``step``."""

    source: str
    product: str
    alloc_conf: str
    step: int
    #: the largest capacity searched
    top: int
    #: the top run's peak allocated, rounded up to a step: nothing smaller can fit
    lower_bound: int = 0
    #: the smallest capacity seen to fit, or None when nothing fits at ``top``
    smallest: int | None = None
    #: every step from here to ``smallest - step`` was replayed and failed; equal to
    #: ``lower_bound`` when ``smallest`` is exact
    smallest_checked_from: int | None = None
    #: every capacity from here to ``all_fit_checked_to`` was replayed and fits; every
    #: failure seen is below it
    all_fit_from: int | None = None
    all_fit_checked_to: int | None = None
    #: capacities seen to fail between ``smallest`` and ``all_fit_from`` (fit not monotone)
    failing_between: list[int] = field(default_factory=list)
    #: figures of the replay at ``all_fit_from``
    peak_allocated: int = 0
    peak_reserved: int = 0
    peak_device: int = 0
    retries: int = 0
    #: the first failure one step below ``all_fit_from`` (or at ``top`` when nothing fits)
    failure: dict | None = None
    #: every capacity replayed and whether the job fit, in capacity order
    trials: list[tuple[int, bool]] = field(default_factory=list)
    replays: int = 0
    seconds: float = 0.0
    reason: str = ""

    @property
    def fits(self) -> bool:
        return self.all_fit_from is not None

    @property
    def smallest_exact(self) -> bool:
        """True when every step between the lower bound and ``smallest`` was seen to fail."""
        return self.smallest is not None and self.smallest_checked_from == self.lower_bound

    def as_dict(self) -> dict:
        out = dict(self.__dict__)
        out["trials"] = [list(t) for t in self.trials]
        out["fits"] = self.fits
        out["smallest_exact"] = self.smallest_exact
        return out

    def __str__(self) -> str:
        mb = human_bytes
        head = (f"{self.source} through torch_npu's caching allocator "
                f"({self.alloc_conf or 'default conf'}) on {self.product}")
        if not self.fits:
            text = f"{head}: does not fit at {mb(self.top)}, the top of the search: {self.reason}"
            if self.failure is not None:
                text += "\n  " + _failure_line(self.failure)
            return text
        assert self.smallest is not None and self.all_fit_from is not None
        lines = [f"{head}, capacities from {mb(self.lower_bound)} (the peak allocated: no "
                 f"smaller device holds the live tensors) to {mb(self.top)} in steps of "
                 f"{mb(self.step)}:"]
        start = self.smallest_checked_from or self.smallest
        if self.smallest == self.lower_bound:
            checked = "the lower bound itself"
        elif self.smallest_exact:
            checked = (f"exact: each step from {mb(start)} to "
                       f"{mb(self.smallest - self.step)} fails")
        else:
            checked = (f"each step from {mb(start)} to {mb(self.smallest - self.step)} fails; "
                       f"below {mb(start)} not replayed")
        label = "that fits" if self.smallest_exact else "seen to fit"
        lines.append(f"  smallest capacity {label}:  {mb(self.smallest)} ({checked})")
        above = [c for c, fits in self.trials if fits and c > (self.all_fit_checked_to or 0)]
        lines.append(
            f"  every capacity from {mb(self.all_fit_from)} up fits: replayed at every step to "
            f"{mb(self.all_fit_checked_to or self.all_fit_from)}"
            + (f" and at {plural(len(above), 'capacity', 'capacities')} above, up to "
               f"{mb(self.top)}" if above else ""))
        if self.failing_between:
            lines.append(f"  fit is not monotone: {_ranges(self.failing_between, self.step)} "
                         f"fail{'s' * (len(self.failing_between) == 1)} between them")
        lines.append(f"  at {mb(self.all_fit_from)}: peak allocated {mb(self.peak_allocated)}, "
                     f"reserved {mb(self.peak_reserved)}, device {mb(self.peak_device)}, "
                     f"{plural(self.retries, 'retry', 'retries')}")
        if self.failure is not None:
            lines.append(f"  with {mb(self.all_fit_from - self.step)}: "
                         + _failure_line(self.failure))
        lines.append(f"  {plural(self.replays, 'replay')} in {self.seconds:.2f} s")
        return "\n".join(lines)


def _failure_line(f: dict) -> str:
    message = f["message"].splitlines()[0] if f.get("message") else ""
    return (f"first failure at entry {f['index']}, {human_bytes(f['size'])} on stream "
            f"{f['stream']}: {message}")


def _ranges(capacities: list[int], step: int) -> str:
    """'40 MiB, 44 MiB - 48 MiB' for runs of consecutive steps."""
    parts: list[str] = []
    start = prev = capacities[0]
    for c in [*capacities[1:], None]:
        if c is not None and c == prev + step:
            prev = c
            continue
        parts.append(human_bytes(start) if start == prev
                     else f"{human_bytes(start)} - {human_bytes(prev)}")
        if c is not None:
            start = prev = c
    return ", ".join(parts)


@dataclass
class Sweep:
    """The answer of :func:`sweep_settings`: one search per setting, best first."""

    source: str
    product: str
    step: int
    top: int
    #: ranked by the capacity from which every larger one fits, then the smallest that fits,
    #: then the peak reserved; settings that do not fit at ``top`` last
    results: list[FitSearch] = field(default_factory=list)
    replays: int = 0
    seconds: float = 0.0

    @property
    def best(self) -> FitSearch | None:
        return self.results[0] if self.results and self.results[0].fits else None

    def as_dict(self) -> dict:
        return {"source": self.source, "product": self.product, "step": self.step,
                "top": self.top, "replays": self.replays, "seconds": self.seconds,
                "results": [r.as_dict() for r in self.results]}

    def __str__(self) -> str:
        mb = human_bytes
        rows = [("setting", "smallest fit", "all fit from", "peak reserved", "retries",
                 "replays")]
        for r in self.results:
            if r.fits:
                rows.append((r.alloc_conf or "(default)",
                             mb(r.smallest or 0) + ("" if r.smallest_exact else " *"),
                             mb(r.all_fit_from or 0), mb(r.peak_reserved), str(r.retries),
                             str(r.replays)))
            else:
                rows.append((r.alloc_conf or "(default)", "no fit", "-", "-", "-",
                             str(r.replays)))
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        lines = [f"{self.source} on {self.product}: allocator settings ranked by the capacity "
                 f"from which every larger one fits (steps of {mb(self.step)}, up to "
                 f"{mb(self.top)})"]
        for row in rows:
            lines.append("  " + "  ".join(
                cell.ljust(w) if i == 0 else cell.rjust(w)
                for i, (cell, w) in enumerate(zip(row, widths))).rstrip())
        if any(r.fits and not r.smallest_exact for r in self.results):
            lines.append("  * the smallest seen to fit: steps far below it were not replayed")
        lines.append(f"  {plural(self.replays, 'replay')} in {self.seconds:.2f} s; "
                     f"each row is checked as `replay --bisect` checks it")
        return "\n".join(lines)


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


class _Source:
    """A source read once: the snapshot dict (or the trace's path) and its product."""

    def __init__(self, source: Any, product: str | None, name: str | None = None) -> None:
        kind, data = load_source(source)
        self.name = name or (source if isinstance(source, str) else "<snapshot>")
        self.data = data if kind == "snapshot" else source
        if product is None and kind == "trace":
            product = data.header.get("product")
        self.profile = get_profile(product or DEFAULT_PRODUCT)


def _limits(src: _Source, step: object, top: object, window: object,
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


def fit_capacity(source: Any, product: str | None = None, *, alloc_conf: str = "",
                 cann: str = DEFAULT_CANN, step: int = 2 * MiB, top: int | None = None,
                 window: int = DEFAULT_WINDOW, device: int | None = None,
                 progress: Progress | None = None, name: str | None = None) -> FitSearch:
    """The smallest capacity on which ``source`` fits through torch_npu's caching allocator
    with ``alloc_conf``, and the capacity from which every larger one fits, searched in
    multiples of ``step`` up to ``top`` (default: the product's own memory). ``source``,
    ``product``, ``cann`` and ``device`` as :func:`replay_tensors` takes them; the search
    and what each answer has been checked against are in the module's text.

    At most 2 + 3 log2(top / step) + 6 * ``window`` replays. ``name`` names the source in
    the answer (default: the path, or ``<snapshot>`` for a dict).

    Raises:
        InvalidArgument: a bad source, product, step, top or window; a source with nothing
            to replay (no tensor allocation), which any capacity would "fit".
        AllocatorConfigError: an ``alloc_conf`` torch_npu refuses.
    """
    src = _Source(source, product, name)
    step, top, window = _limits(src, step, top, window, cann)
    parse_alloc_conf(alloc_conf)
    return _search(src, alloc_conf, cann, step, top, window, device, progress)


def _search(src: _Source, conf: str, cann: str, step: int, top: int, window: int,
            device: int | None, progress: Progress | None) -> FitSearch:
    started = time.perf_counter()
    result = FitSearch(src.name, src.profile.name, conf, step, top)
    runs: dict[int, TensorReplayResult] = {}

    def fits(capacity: int, whole: bool = False) -> bool:
        run = runs.get(capacity)
        if run is None:
            if progress is not None:
                progress(len(runs), capacity)
            run = runs[capacity] = replay_tensors(
                src.data, src.profile.name, capacity=capacity, alloc_conf=conf, cann=cann,
                device=device, stop_at_failure=not whole, name=src.name)
        return run.fits

    try:
        if not fits(top, whole=True):
            result.reason = "an allocation fails even there"
            result.failure = runs[top].first_failure
            return result
        first = runs[top]
        empty = nothing_replayed(first)
        if empty is not None:
            raise InvalidArgument(empty)
        lower = result.lower_bound = max(step, -(-first.peak_allocated // step) * step)
        hint = min(top, max(lower, -(-first.peak_device // step) * step))
        found = _probe(fits, lower, hint, top, step, window)
    finally:
        result.replays = len(runs)
        result.seconds = time.perf_counter() - started
    result.trials = sorted((c, r.fits) for c, r in runs.items())
    (result.smallest, result.smallest_checked_from, all_from, result.all_fit_checked_to,
     result.failing_between) = _answers(dict(result.trials), lower, step, found)
    result.all_fit_from = all_from
    at = runs[all_from]
    result.peak_allocated, result.peak_reserved = at.peak_allocated, at.peak_reserved
    result.peak_device, result.retries = at.peak_device, at.retries
    if all_from - step in runs:
        result.failure = runs[all_from - step].first_failure
    return result


def _probe(fits: Callable[[int], bool], lower: int, hint: int, top: int, step: int,
           window: int) -> int:
    """Steps 3 to 5 of the search (see the module's text) with ``fits(capacity)`` (which
    remembers its answers; ``top`` fits): the capacity the bisection found, which fits with
    one step less failing or below ``lower``."""
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
        fits(c)
    # above: until `window` steps in a row fit, a failure moving the start above it (at
    # most 4 * window replays)
    all_from, c, budget = found, found, 4 * window
    while c + step <= top and c + step - all_from <= window * step and budget > 0:
        c += step
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


def sweep_settings(source: Any, product: str | None = None, *,
                   candidates: list[str] | tuple[str, ...] | None = None,
                   cann: str = DEFAULT_CANN, step: int = 2 * MiB, top: int | None = None,
                   window: int = DEFAULT_WINDOW, device: int | None = None,
                   progress: Progress | None = None, name: str | None = None) -> Sweep:
    """Run :func:`fit_capacity` for each allocator setting in ``candidates`` (default:
    :func:`default_candidates`) over one reading of ``source``, and rank them (see
    :attr:`Sweep.results`). Every candidate is parsed before any replay.

    Raises:
        InvalidArgument: a bad source, product, step, top, window or candidate list.
        AllocatorConfigError: a candidate torch_npu refuses (the message names it).
    """
    src = _Source(source, product, name)
    step, top, window = _limits(src, step, top, window, cann)
    if candidates is None:
        candidates = default_candidates(src.profile.name, cann)
    if not isinstance(candidates, (list, tuple)) or not candidates:
        raise InvalidArgument("candidates must be a non-empty list of PYTORCH_NPU_ALLOC_CONF "
                              "strings")
    confs: list[str] = []
    for conf in candidates:
        if not isinstance(conf, str):
            raise InvalidArgumentType(f"a candidate must be a str, not {type(conf).__name__}")
        conf = conf.strip()
        try:
            parse_alloc_conf(conf)
        except AllocatorConfigError as e:
            raise AllocatorConfigError(
                f"{str(e).strip().rstrip(',')} (in the setting {conf!r})") from None
        if conf not in confs:
            confs.append(conf)
    started = time.perf_counter()
    sweep = Sweep(src.name, src.profile.name, step, top)
    done = 0

    def told(runs: int, capacity: int) -> None:
        if progress is not None:
            progress(done + runs, capacity)

    results = []
    for index, conf in enumerate(confs):
        r = _search(src, conf, cann, step, top, window, device, told)
        done += r.replays
        results.append((index, r))
    results.sort(key=lambda t: (not t[1].fits, t[1].all_fit_from or 0, t[1].smallest or 0,
                                t[1].peak_reserved, t[0]))
    sweep.results = [r for _, r in results]
    sweep.replays = done
    sweep.seconds = time.perf_counter() - started
    return sweep
