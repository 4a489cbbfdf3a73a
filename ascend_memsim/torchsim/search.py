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
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..allocators.conf import parse_alloc_conf, shown
from ..allocators.rules import DEFAULT_CANN
from ..memory.constants import MiB
from ..memory.errors import AllocatorConfigError, InvalidArgument, InvalidArgumentType
from ..memory.profiles import DEFAULT_PRODUCT
from ..memory.units import human_bytes, plural
from ..plan.fit import (
    DEFAULT_WINDOW,
    MAX_WINDOW,
    FitSearch,
    Sweep,
    fit_capacity,
    sweep_settings,
)
from .estimate import EstimateResult, estimate

__all__ = ["fit_script", "sweep_script", "ScriptSearch"]


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
           cann: str | None, options: dict) -> EstimateResult:
    if "snapshot" in options or "max_entries" in options:
        raise InvalidArgument("a search keeps every trace entry of its run: no snapshot or "
                              "max_entries option")
    return estimate(target, argv, product=product, capacity=top, alloc_conf=alloc_conf,
                    cann=cann, snapshot=True, **options)


def _check(found: ScriptSearch, target: Any, argv: Any, product: str, cann: str | None,
           options: dict) -> None:
    """Run the script at the plan's capacity and one step below, if it looks at the
    device's memory (see the module's text)."""
    plan = found.plan
    if plan is None or not found.traced.device_queries:
        return
    at = plan.all_fit_from or 0
    for capacity, expected in ((at, True), (at - plan.step, False)):
        if capacity < plan.step:
            continue
        run = estimate(target, argv, product=product, capacity=capacity,
                       alloc_conf=plan.alloc_conf, cann=cann, **options)
        found.checks.append({"capacity": capacity, "alloc_conf": plan.alloc_conf,
                             "expected": expected, "fits": run.fits})


def fit_script(target: str | Callable[[], Any], argv: list[str] | tuple = (), *,
               product: str = DEFAULT_PRODUCT, alloc_conf: str | None = None,
               cann: str | None = None, step: int = 2 * MiB, top: int | None = None,
               window: int = DEFAULT_WINDOW,
               progress: Callable[[int, int], None] | None = None,
               **options: Any) -> ScriptSearch:
    """The smallest capacity on which ``target`` (as :func:`~.estimate.estimate` takes it)
    fits under ``alloc_conf`` (None: the settings the script's run took from its
    environment), and the one from which every larger one fits: the script
    runs once at ``top`` (default: the product's own memory), and
    :func:`~ascend_memsim.plan.fit.fit_capacity` searches its snapshot in steps of
    ``step`` (see the module's text for when the script runs again, to check). The other
    keywords (``item_value``, ...) go to :func:`~.estimate.estimate` for every run.

    Raises:
        InvalidArgument: a bad product, capacity, step or window; a ``snapshot`` or
            ``max_entries`` option (the search keeps every entry).
        AllocatorConfigError: an ``alloc_conf`` torch_npu refuses.
    """
    _precheck(step, window)
    traced = _trace(target, argv, product, top, alloc_conf, cann, options)
    found = ScriptSearch(traced)
    if traced.fits:
        found.search = fit_capacity(traced.snapshot, traced.product,
                                    alloc_conf=traced.alloc_conf,
                                    cann=cann or DEFAULT_CANN, step=step,
                                    top=traced.capacity, window=window, progress=progress,
                                    name=traced.source)
        _check(found, target, argv, product, cann, options)
    return found


def sweep_script(target: str | Callable[[], Any], argv: list[str] | tuple = (), *,
                 product: str = DEFAULT_PRODUCT,
                 candidates: list[str] | tuple[str, ...] | None = None,
                 cann: str | None = None, step: int = 2 * MiB, top: int | None = None,
                 window: int = DEFAULT_WINDOW,
                 progress: Callable[[int, int], None] | None = None,
                 **options: Any) -> ScriptSearch:
    """The allocator settings ``candidates`` (default:
    :func:`~ascend_memsim.plan.fit.default_candidates`) ranked by the capacity ``target``
    needs under each: the script runs once at ``top`` under torch_npu's defaults, and
    :func:`~ascend_memsim.plan.fit.sweep_settings` searches its snapshot for each. The
    other keywords go to :func:`~.estimate.estimate` for every run.

    Raises:
        InvalidArgument: a bad product, capacity, step, window or candidate list; a
            ``snapshot`` or ``max_entries`` option.
        AllocatorConfigError: a candidate torch_npu refuses.
    """
    _precheck(step, window, candidates if isinstance(candidates, (list, tuple)) else ())
    traced = _trace(target, argv, product, top, "", cann, options)
    found = ScriptSearch(traced)
    if traced.fits:
        found.search = sweep_settings(traced.snapshot, traced.product, candidates=candidates,
                                      cann=cann or DEFAULT_CANN, step=step,
                                      top=traced.capacity, window=window, progress=progress,
                                      name=traced.source)
        _check(found, target, argv, product, cann, options)
    return found
