"""``estimate --bisect`` and ``--sweep``: the capacity a script needs, and the allocator
settings ranked by it, from one run of the script (trace once, replay many).

The script runs once, at the top of the search (``top``: default the product's own memory),
with the trace history on; its torch_npu-format snapshot is then searched by
:func:`~ascend_memsim.plan.fit.fit_capacity` or
:func:`~ascend_memsim.plan.fit.sweep_settings`, each capacity a replay of the script's
requests through the caching allocator (checked to give the script's own peaks: the
replay at the top is the run). A replay is milliseconds where a run of the script is
seconds.

DECISION: a replay assumes the script asks for the same tensors on any device. A script
that looks at the device's memory (``mem_get_info``, ``get_device_properties``), limits
itself to a share of it (``set_per_process_memory_fraction``) or empties the cache (the
replay does not replay ``empty_cache``: it frees cached segments only when it must) may
not. For such a script the answer is checked by running the script itself at the capacity
to plan with (it must fit) and one step below it (it must fail), and the result says which
calls and whether the runs agree; other scripts are not run again. A script that does not
fit at the top (or stops) is not searched: nothing above its run was seen.

Progress (:data:`Progress`): the run of the script is the long part of a search over a
script that allocates often (a million small tensors: minutes, each entry traced with its
frames), then a replay per capacity tried; each is reported as it goes, the entries traced
so far about once a second from a thread of its own while the script runs.

Memory: the search keeps every trace entry of the run (about 300 bytes each, see
``docs/guide/estimate.md``) and compiles them into columns of about 33 bytes each; the
allocator's own copy of the history is garbage once the snapshot is taken, and is collected
before the search so that the two copies do not live through it.
"""

from __future__ import annotations

import gc
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from ..allocators.conf import parse_alloc_conf, shown
from ..allocators.rules import DEFAULT_CANN
from ..memory.constants import MiB
from ..memory.errors import AllocatorConfigError, InvalidArgument, InvalidArgumentType
from ..memory.profiles import DEFAULT_PRODUCT
from ..memory.units import human_bytes, plural
from ..plan.columns import Outside
from ..plan.fit import (
    DEFAULT_WINDOW,
    MAX_WINDOW,
    FitSearch,
    Sweep,
    default_candidates,
    fit_capacity,
    sweep_settings,
)
from .estimate import EstimateResult, estimate
from .runtime_share import _RUNTIME_MODULE
from .torch_npu import npu as _npu

__all__ = ["fit_script", "sweep_script", "ScriptSearch", "Progress", "about_replays"]

#: ``progress(phase, done, total)``, as :func:`fit_script` and :func:`sweep_script` go:
#: ``"traced"`` (the script's run: 0 of 1 as it starts, 1 of 1 when it has ended),
#: ``"entries"`` (while it runs, about every :data:`TICK` seconds: the trace entries so far,
#: total 0), ``"replays"`` (0 of about ``total`` while the snapshot is read, then each replay
#: ``done`` as it starts; ``total`` is :func:`about_replays`, so ``done`` may pass it),
#: ``"check"`` (runs of the script that check the answer: ``done`` of ``total`` as each
#: starts, ``total`` of ``total`` at the end)
Progress = Callable[[str, int, int], None]
#: seconds between two ``"entries"`` reports while the script runs
TICK = 1.0


def about_replays(lowest: int, top: int, step: int) -> int:
    """The replays a search from ``lowest`` to ``top`` in steps of ``step`` takes about: one
    at the top, one at its footprint, and one per halving of the range,
    ``2 + ceil(log2(steps))`` (:mod:`ascend_memsim.plan.fit`'s text: often fewer, a replay
    answering the capacities that place alike; at most ``2 + 3 log2(steps) + 6 window``, the
    window scans around the answer).

    >>> about_replays(0, 64 << 20, 2 << 20)       # 32 steps: 2 + 5
    7
    """
    steps = max(1, -(-(top - lowest) // step))
    return 2 + math.ceil(math.log2(steps))


class _Ticker:
    """While the script runs, ``progress("entries", n, 0)`` about every :data:`TICK`
    seconds from a daemon thread: ``n`` the entries the running estimate's history holds
    (an O(1) read of the history's length). The thread starts before the estimate, so the
    estimate does not take it for one of the script's threads."""

    def __init__(self, progress: Progress | None) -> None:
        self.progress = progress
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> _Ticker:
        if self.progress is not None:
            self._thread = threading.Thread(target=self._run, name="ascend-memsim progress",
                                            daemon=True)
            self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        progress = self.progress
        assert progress is not None
        while not self._stop.wait(TICK):
            session = _npu.active()
            if session is not None:
                progress("entries", session.allocator.history_length(), 0)


@dataclass
class ScriptSearch:
    """The answer of :func:`fit_script` / :func:`sweep_script`: the script's run at the top,
    the search over its snapshot, and the runs that checked it."""

    #: the script's one run at the top of the search (its snapshot: the trace searched)
    traced: EstimateResult
    #: the search (a :class:`FitSearch`, or a :class:`Sweep`); None when the run at the top
    #: did not fit or stopped
    search: FitSearch | Sweep | None = None
    #: runs of the script that check the answer, when it looks at the device's memory:
    #: {"capacity", "alloc_conf", "expected", "fits"}
    checks: list[dict] = field(default_factory=list)

    @property
    def plan(self) -> FitSearch | None:
        """The search to plan with: the fit, or the sweep's best setting."""
        if isinstance(self.search, Sweep):
            return self.search.best
        return self.search if self.search is not None and self.search.fits else None

    @property
    def confirmed(self) -> bool:
        """Every check run agreed with the search (True when none was needed)."""
        return all(c["fits"] == c["expected"] for c in self.checks)

    @property
    def fits(self) -> bool:
        """The script fits at the capacity to plan with (a check run at it, if any, fit)."""
        return self.plan is not None and all(c["fits"] for c in self.checks if c["expected"])

    def as_dict(self) -> dict:
        return {"traced": self.traced.as_dict(),
                "search": None if self.search is None else self.search.as_dict(),
                "checks": list(self.checks), "confirmed": self.confirmed, "fits": self.fits}

    def __str__(self) -> str:
        t = self.traced
        if self.search is None:
            why = ("did not fit" if t.out_of_memory is not None else
                   "stopped" if t.stopped is not None else f"failed (exit status {t.status})")
            return (f"{t.source}: not searched: the run at the top of the search "
                    f"({human_bytes(t.capacity)}) {why}\n{t}")
        entries = len(t.snapshot["device_traces"][0]) if t.snapshot else 0
        lines = [f"{t.source}: traced once at {human_bytes(t.capacity)} "
                 f"({plural(entries, 'trace entry', 'trace entries')}; peak allocated "
                 f"{human_bytes(t.peak_allocated)}, reserved {human_bytes(t.peak_reserved)}), "
                 f"then replayed:", str(self.search)]
        plan = self.plan
        if plan is not None and plan.failure and plan.failure.get("frames"):
            at, below = plan.all_fit_from or 0, (plan.all_fit_from or 0) - plan.step
            said = human_bytes(below)
            if said == human_bytes(at):
                said = f"{below / MiB:,.2f} MiB"    # one step less than the answer, seen
            lines.append(f"  with {said} the script runs out of memory at "
                         f"{plan.failure['frames'][-1]}")
        if t.device_queries:
            calls = ", ".join(f"{q['call']} at {q.get('filename', '?')}:{q.get('line', '?')}"
                              for q in t.device_queries[:5])
            lines.append(f"  the script looks at the device's memory ({calls}): its "
                         f"requests may depend on the capacity, so the answer was checked "
                         f"by running it:")
            for c in self.checks:
                said = "fits" if c["fits"] else "does not fit"
                agrees = "as the search says" if c["fits"] == c["expected"] else \
                    "NOT as the search says"
                lines.append(f"    at {human_bytes(c['capacity'])} "
                             f"({c['alloc_conf'] or 'default conf'}): {said}, {agrees}")
            if not self.confirmed:
                lines.append("  the search's answers hold for the run traced, not for this "
                             "script at every capacity: estimate it at the --capacity you "
                             "plan with")
        lines.extend(f"  note: {note}" for note in t.notes)
        return "\n".join(lines)


def _precheck(step: object, window: object, confs: Any = ()) -> None:
    """What the search would refuse, refused before the script runs (which may take
    long): the step, the window, each setting."""
    for name, value, low, high in (("step", step, 64, None), ("window", window, 0, MAX_WINDOW)):
        if value.__class__ is not int:
            raise InvalidArgumentType(f"{name} must be an int, not {type(value).__name__}")
        if value < low or (high is not None and value > high) or (name == "step" and value % 64):
            raise InvalidArgument(f"{name} out of range: {value}" + (
                " (a positive multiple of 64 bytes)" if name == "step" else
                f" (from 0 to {MAX_WINDOW})"))
    for conf in confs or ():
        if isinstance(conf, str):
            try:
                parse_alloc_conf(conf.strip())
            except AllocatorConfigError as e:
                raise AllocatorConfigError(
                    f"{str(e).strip().rstrip(',')} (in the setting {shown(conf)!r})") from None


def _trace(target: Any, argv: Any, product: str, top: int | None, alloc_conf: str | None,
           cann: str | None, options: dict, progress: Progress | None) -> EstimateResult:
    if "snapshot" in options or "max_entries" in options:
        raise InvalidArgument("a search keeps every trace entry of its run: no snapshot or "
                              "max_entries option")
    if progress is not None:
        progress("traced", 0, 1)
    with _Ticker(progress):
        traced = estimate(target, argv, product=product, capacity=top, alloc_conf=alloc_conf,
                          cann=cann, snapshot=True, **options)
    # the session's allocator (in a reference cycle with the session) holds the history's
    # own entries until a full collection, which might come only during the search: the
    # snapshot has them, so let the run's state go now
    gc.collect()
    if progress is not None:
        progress("traced", 1, 1)
    return traced


def _replays(progress: Progress | None, traced: EstimateResult, step: int,
             settings: int = 1) -> Callable[[int, int], None] | None:
    """The search's ``progress(replays so far, capacity)`` as ``"replays"`` reports, of
    about :func:`about_replays` per setting searched; the first (0) said before the
    snapshot is read."""
    if progress is None:
        return None
    lowest = -(-traced.peak_allocated // step) * step
    about = settings * about_replays(lowest, traced.capacity // step * step, step)
    progress("replays", 0, about)
    return lambda runs, _capacity: progress("replays", runs + 1, about)


def _check(found: ScriptSearch, target: Any, argv: Any, product: str, cann: str | None,
           options: dict, progress: Progress | None) -> None:
    """Run the script at the plan's capacity and one step below, if it looks at the
    device's memory (see the module's text)."""
    plan = found.plan
    if plan is None or not found.traced.device_queries:
        return
    at = plan.all_fit_from or 0
    runs = [(c, expected) for c, expected in ((at, True), (at - plan.step, False))
            if c >= plan.step]
    for done, (capacity, expected) in enumerate(runs):
        if progress is not None:
            progress("check", done, len(runs))
        run = estimate(target, argv, product=product, capacity=capacity,
                       alloc_conf=plan.alloc_conf, cann=cann, **options)
        found.checks.append({"capacity": capacity, "alloc_conf": plan.alloc_conf,
                             "expected": expected, "fits": run.fits})
    if progress is not None:
        progress("check", len(runs), len(runs))


def _outside(traced: EstimateResult) -> tuple[Outside, ...]:
    """The runtime's share, taken in every replay before the trace's first request, as the
    run took it (:mod:`.runtime_share`)."""
    share = traced.runtime_share
    return (Outside(0, share, _RUNTIME_MODULE, f"the runtime's share of {share} bytes"),) \
        if share else ()


def fit_script(target: str | Callable[[], Any], argv: list[str] | tuple = (), *,
               product: str = DEFAULT_PRODUCT, alloc_conf: str | None = None,
               cann: str | None = None, step: int = 2 * MiB, top: int | None = None,
               window: int = DEFAULT_WINDOW,
               progress: Progress | None = None,
               **options: Any) -> ScriptSearch:
    """The smallest capacity on which ``target`` (as :func:`~.estimate.estimate` takes it)
    fits under ``alloc_conf`` (None: the settings the script's run took from its
    environment), and the one from which every larger one fits: the script
    runs once at ``top`` (default: the product's own memory), and
    :func:`~ascend_memsim.plan.fit.fit_capacity` searches its snapshot in steps of
    ``step`` (see the module's text for when the script runs again, to check). The other
    keywords (``item_value``, ...) go to :func:`~.estimate.estimate` for every run.
    ``progress(phase, done, total)`` is told how it goes (:data:`Progress`).

    Raises:
        InvalidArgument: a bad product, capacity, step or window; a ``snapshot`` or
            ``max_entries`` option (the search keeps every entry).
        AllocatorConfigError: an ``alloc_conf`` torch_npu refuses.
    """
    _precheck(step, window)
    traced = _trace(target, argv, product, top, alloc_conf, cann, options, progress)
    found = ScriptSearch(traced)
    if traced.fits:
        found.search = fit_capacity(traced.snapshot, traced.product,
                                    alloc_conf=traced.alloc_conf,
                                    cann=cann or DEFAULT_CANN, step=step,
                                    top=traced.capacity, window=window,
                                    progress=_replays(progress, traced, step),
                                    name=traced.source, outside=_outside(traced))
        _check(found, target, argv, product, cann, options, progress)
    return found


def sweep_script(target: str | Callable[[], Any], argv: list[str] | tuple = (), *,
                 product: str = DEFAULT_PRODUCT,
                 candidates: list[str] | tuple[str, ...] | None = None,
                 cann: str | None = None, step: int = 2 * MiB, top: int | None = None,
                 window: int = DEFAULT_WINDOW,
                 progress: Progress | None = None,
                 **options: Any) -> ScriptSearch:
    """The allocator settings ``candidates`` (default:
    :func:`~ascend_memsim.plan.fit.default_candidates`) ranked by the capacity ``target``
    needs under each: the script runs once at ``top`` under torch_npu's defaults, and
    :func:`~ascend_memsim.plan.fit.sweep_settings` searches its snapshot for each. The
    other keywords go to :func:`~.estimate.estimate` for every run. ``progress`` as
    :func:`fit_script` tells it, the replays of about :func:`about_replays` per setting.

    Raises:
        InvalidArgument: a bad product, capacity, step, window or candidate list; a
            ``snapshot`` or ``max_entries`` option.
        AllocatorConfigError: a candidate torch_npu refuses.
    """
    _precheck(step, window, candidates if isinstance(candidates, (list, tuple)) else ())
    traced = _trace(target, argv, product, top, "", cann, options, progress)
    found = ScriptSearch(traced)
    if traced.fits:
        settings = max(1, len(candidates) if isinstance(candidates, (list, tuple)) else
                       len(default_candidates(traced.product, cann or DEFAULT_CANN)))
        found.search = sweep_settings(traced.snapshot, traced.product, candidates=candidates,
                                      cann=cann or DEFAULT_CANN, step=step,
                                      top=traced.capacity, window=window,
                                      progress=_replays(progress, traced, step, settings),
                                      name=traced.source, outside=_outside(traced))
        _check(found, target, argv, product, cann, options, progress)
    return found
