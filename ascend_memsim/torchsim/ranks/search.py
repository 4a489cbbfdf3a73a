"""``estimate --world-size N --sweep`` and ``--bisect``: the settings a distributed job fits
with (``PYTORCH_NPU_ALLOC_CONF``, ``HCCL_BUFFSIZE``, the product, the card count), and the
smallest card each rank class fits on, from one run of the script per rank class.

**Trace once, replay many.** Each rank class (:func:`~.ranks.estimate_ranks`'s) runs once,
per product and world size, on a roomy card (:data:`TRACE_CAPACITY`) with the history on:
its torch_npu snapshot holds every request of the caching allocator in order, and each HCCL
communicator knows its place in it (:attr:`~.hccl.Communicator.entry`). A setting is then a
replay of that snapshot through :mod:`ascend_memsim.plan` on a fresh card of the capacity
asked, which first takes the runtime's share and, before the trace entry that followed each
communicator in the run, that communicator's buffer at the setting's size
(:class:`~ascend_memsim.plan.columns.Outside`): ``2 x HCCL_BUFFSIZE`` for a group sized by
the variable, its own size for one with ``hccl_buffer_size`` and for point-to-point pairs.

DECISION: the replay is the run, not an approximation of it. HCCL's buffer size, the
allocator's settings and the card's capacity change no tensor the script asks for, only
where the device places things and what fails; the replay makes the device calls of a run
at that setting in the run's order (the runtime's share first, each communicator before the
request that followed it, each caching allocator request with the setting's rounding,
splitting, expandable segments and out-of-memory retry), so it places, fragments, retries and
fails as the run would: a communicator taken in the middle of the cached segments splits the
free memory the allocator's retry would have merged, exactly as in the run. Where it is not
the run (said in the output): a script whose requests depend on the card (it reads
``mem_get_info`` or sizes itself by the memory), one that calls ``empty_cache`` (a replay
frees cached segments only when it must), and ``TASK_QUEUE_ENABLE=2``, whose workspace
block is taken at the start of a replay at its final size. So the best setting is checked:
the script runs again at it (:attr:`RanksSweep.check`), and the output says whether the run
agrees.

DECISION: the trace is per product as well as per world size (a product's operator
workspaces may differ: the 950's softmax), and never per allocator setting or HCCL size.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...allocators.conf import parse_alloc_conf, shown
from ...allocators.rules import DEFAULT_CANN
from ...allocators.stats import format_size as format_bytes
from ...memory.constants import GiB, MiB
from ...memory.errors import AllocatorConfigError, InvalidArgument
from ...memory.profiles import DEFAULT_PRODUCT, get_profile
from ...plan import DEFAULT_WINDOW, FitSearch, default_candidates, fit_capacity
from ...plan.columns import Columns, Outside, compile_source, replay_columns
from ..runtime_share import _RUNTIME_MODULE
from .hccl import _HCCL_MODULE, DEFAULT_HCCL_BUFFSIZE
from .report import RankFigures, RanksResult, _ranks_text
from .run import estimate_ranks

__all__ = ["sweep_ranks", "bisect_ranks", "RanksSweep", "RanksBisect", "SettingOutcome",
           "ClassOutcome", "ClassNeed", "TRACE_CAPACITY", "DEFAULT_HCCL_SWEEP",
           "outside_blocks"]

#: DECISION: the card each rank class is traced on: far above any product's (1 TiB), so the
#: script's every request is recorded whatever the setting swept; never a figure reported
TRACE_CAPACITY = 1024 * GiB
#: DECISION: HCCL_BUFFSIZE values (MB) a sweep tries when given none: the default, then
#: halving (smaller buffers split large collectives into more rounds: slower, never larger)
DEFAULT_HCCL_SWEEP = (200, 100, 50, 25)


def outside_blocks(figures: RankFigures, hccl_buffsize: int | None = None) -> tuple[Outside, ...]:
    """The blocks a traced rank's card holds outside the caching allocator, in the run's
    order: the runtime's share, then each communicator at its place; a group sized by
    ``HCCL_BUFFSIZE`` takes ``2 x hccl_buffsize`` MB (None: as traced)."""
    blocks = []
    if figures.runtime_share:
        blocks.append(Outside(0, figures.runtime_share, _RUNTIME_MODULE,
                              f"the runtime's share of {figures.runtime_share} bytes"))
    for comm in figures.communicators:
        mb = comm.buffsize
        if hccl_buffsize is not None and comm.sized_by == "HCCL_BUFFSIZE":
            mb = hccl_buffsize
        blocks.append(Outside(max(comm.entry, 0), 2 * mb * MiB, _HCCL_MODULE,
                              f"HCCL: Create ccl buffer size[{2 * mb * MiB}] fail ({comm.kind} "
                              f"communicator of group {comm.group}, ranks "
                              f"{_ranks_text(comm.ranks)}, 2 x {mb} MB)",
                              tuple(comm.frames)))
    return tuple(blocks)


def _hccl_of(figures: RankFigures, hccl_buffsize: int | None) -> int:
    return sum(b.size for b in outside_blocks(figures, hccl_buffsize)
               if b.module == _HCCL_MODULE)


def _why(failure: dict | None) -> str:
    """A replay's first failure in a few words, with the script's line."""
    if failure is None:
        return ""
    frames = failure.get("frames") or []
    where = f" at {frames[-1].split(' in ')[0]}" if frames else ""
    if failure.get("what", "").startswith("HCCL"):
        return f"HCCL buffer of {format_bytes(failure['size'])}{where}"
    if "what" in failure:
        return f"the runtime's share{where}"
    return f"out of memory, {format_bytes(failure['size'])}{where}"


@dataclass
class ClassOutcome:
    """One rank class under one setting on one card, by a replay of its trace."""

    ranks: tuple[int, ...]
    traced_rank: int
    fits: bool
    peak_reserved: int
    workspace: int
    hccl: int
    runtime_share: int
    capacity: int
    #: the replay's first failure (message, size, frames), or None
    failure: dict | None = None

    @property
    def total(self) -> int:
        return self.peak_reserved + self.workspace + self.hccl + self.runtime_share

    @property
    def margin(self) -> int:
        return self.capacity - self.total

    def why(self) -> str:
        if self.failure is not None:
            return _why(self.failure)
        return "" if self.fits else f"the device total is {format_bytes(-self.margin)} over"

    def as_dict(self) -> dict:
        return {"ranks": list(self.ranks), "traced_rank": self.traced_rank, "fits": self.fits,
                "peak_reserved": self.peak_reserved, "workspace": self.workspace,
                "hccl": self.hccl, "runtime_share": self.runtime_share, "total": self.total,
                "margin": self.margin, "why": self.why() or None}


@dataclass
class SettingOutcome:
    """One setting of the sweep: every rank class's replay."""

    product: str
    world_size: int
    alloc_conf: str
    hccl_buffsize: int
    capacity: int
    classes: list[ClassOutcome]

    @property
    def fits(self) -> bool:
        return all(c.fits for c in self.classes)

    @property
    def worst(self) -> ClassOutcome:
        """The class with the smallest margin (a failing one first)."""
        return min(self.classes, key=lambda c: (c.fits, c.margin, c.traced_rank))

    @property
    def is_default(self) -> bool:
        """torch_npu's and HCCL's own settings: no PYTORCH_NPU_ALLOC_CONF, HCCL_BUFFSIZE=200."""
        return not self.alloc_conf and self.hccl_buffsize == DEFAULT_HCCL_BUFFSIZE

    def label(self) -> str:
        return (f"{self.product}, {self.world_size} ranks, PYTORCH_NPU_ALLOC_CONF="
                f"{self.alloc_conf or '(default)'}, HCCL_BUFFSIZE={self.hccl_buffsize}")

    def as_dict(self) -> dict:
        worst = self.worst
        return {"product": self.product, "world_size": self.world_size,
                "alloc_conf": self.alloc_conf, "hccl_buffsize_mb": self.hccl_buffsize,
                "capacity": self.capacity, "fits": self.fits, "worst_rank": worst.traced_rank,
                "worst_total": worst.total, "worst_margin": worst.margin,
                "classes": [c.as_dict() for c in self.classes]}


_HOW = ("each rank class traced once (per product and world size) on a roomy card; each "
        "setting a replay of its requests through the caching allocator on the card, the "
        "runtime's share and each HCCL communicator taken where the run took them")
_NOT_EXACT = ("a replay is the run unless the script reads the card's memory, calls "
              "empty_cache or runs with TASK_QUEUE_ENABLE=2: the best setting is run again "
              "to check")


@dataclass
class RanksSweep:
    """The answer of :func:`sweep_ranks`: the settings ranked (:attr:`results`), the runs
    and replays it took, and the run that checked the best."""

    source: str
    results: list[SettingOutcome] = field(default_factory=list)
    #: runs of the script (one per rank class, product and world size)
    traced_runs: int = 0
    replays: int = 0
    seconds: float = 0.0
    #: the script run at the best setting: {"setting", "fits", "agrees", "result"}; None
    #: when nothing fits
    check: dict | None = None
    #: the distributed estimate of the best setting's run (for a picture), or None
    checked: RanksResult | None = field(default=None, repr=False)

    @property
    def best(self) -> SettingOutcome | None:
        return self.results[0] if self.results and self.results[0].fits else None

    @property
    def fits(self) -> bool:
        """Some setting fits, and the run at it agreed."""
        return self.best is not None and (self.check is None or self.check["fits"])

    def find(self, *, product: str | None = None, world_size: int | None = None,
             alloc_conf: str | None = None, hccl_buffsize: int | None = None
             ) -> SettingOutcome:
        """The one result with the values given.

        Raises:
            KeyError: none, or more than one.
        """
        found = [r for r in self.results
                 if (product is None or r.product == product)
                 and (world_size is None or r.world_size == world_size)
                 and (alloc_conf is None or r.alloc_conf == alloc_conf)
                 and (hccl_buffsize is None or r.hccl_buffsize == hccl_buffsize)]
        if len(found) != 1:
            raise KeyError(f"{len(found)} results match")
        return found[0]

    def as_dict(self) -> dict:
        return {"source": self.source, "traced_runs": self.traced_runs,
                "replays": self.replays, "seconds": self.seconds,
                "results": [r.as_dict() for r in self.results],
                "best": None if self.best is None else self.best.as_dict(),
                "check": self.check, "how": _HOW, "exact": _NOT_EXACT}

    def __str__(self) -> str:
        size = format_bytes
        rows = [("product", "ranks", "PYTORCH_NPU_ALLOC_CONF", "HCCL_BUFFSIZE", "card",
                 "worst rank", "device total", "margin", "verdict")]
        for r in self.results:
            w = r.worst
            rows.append((r.product, str(r.world_size), r.alloc_conf or "(default)",
                         f"{r.hccl_buffsize} MB", size(r.capacity), str(w.traced_rank),
                         size(w.total) if r.fits else "-", size(w.margin) if r.fits else "-",
                         "fits" if r.fits else f"rank {w.traced_rank}: {w.why()}"))
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        left = {0, 2, 8}
        lines = [f"{self.source}: settings that fit first, the default (no "
                 f"PYTORCH_NPU_ALLOC_CONF, HCCL_BUFFSIZE={DEFAULT_HCCL_BUFFSIZE}) first among "
                 f"them, then by the worst rank's device total; the others by its margin"]
        for row in rows:
            lines.append("  " + "  ".join(cell.ljust(w) if i in left else cell.rjust(w)
                                          for i, (cell, w) in enumerate(zip(row, widths)))
                         .rstrip())
        best = self.best
        if best is None:
            lines.append("  verdict: no setting fits")
        else:
            every = all(r.fits for r in self.results)
            lines.append(("  every setting fits; " if every else "  ")
                         + ("the default is enough" if best.is_default else "best")
                         + f": {best.label()}: the worst rank ({best.worst.traced_rank}) "
                         f"has {size(best.worst.margin)} to spare")
        if self.check is not None:
            c = self.check
            lines.append(f"  checked: the script run at the best setting "
                         f"{'fits' if c['fits'] else 'DOES NOT FIT'}, "
                         + ("as the replay says (every rank's device total the same)"
                            if c["agrees"] else "NOT as the replay says: " + c["differs"]))
        lines.append(f"  {self.traced_runs} run(s) of the script, {self.replays} replays, "
                     f"in {self.seconds:.2f} s: {_HOW}")
        lines.append(f"  {_NOT_EXACT}")
        return "\n".join(lines)


#: ``progress(phase, done, total)``: "traced" (runs of the script), "replays", "check"
Progress = Callable[[str, int, int], None]


def _no_progress(phase: str, done: int, total: int) -> None:
    pass


def _traces(target: Any, argv: Any, world_sizes: Sequence[int], products: Sequence[str],
            options: dict, progress: Progress = _no_progress
            ) -> dict[tuple[str, int], RanksResult]:
    """One distributed estimate with the history kept, per product and world size."""
    out = {}
    total = len(products) * len(world_sizes)
    progress("traced", 0, total)
    for product in products:
        for n in world_sizes:
            out[product, n] = estimate_ranks(target, argv, world_size=n, product=product,
                                             capacity=TRACE_CAPACITY, history=True, **options)
            progress("traced", len(out), total)
    return out


def _columns(traced: RanksResult) -> dict[int, Columns]:
    """Each traced rank's compiled snapshot, by traced rank."""
    out = {}
    for c in traced.classes:
        est = c.figures.estimate
        if not est.fits:
            raise InvalidArgument(
                f"rank {c.figures.rank} does not run to its end even on a "
                f"{format_bytes(TRACE_CAPACITY)} card, so nothing can be searched: "
                f"{c.figures.failure()}")
        out[c.figures.rank] = compile_source("snapshot", est.snapshot, traced.source,
                                             c.figures.local_rank)
    return out


def _check_lists(candidates: Any, hccl: Any, products: Any, world_sizes: Any,
                 world_size: int, product: str, cann: str) -> tuple[list, list, list, list]:
    products = list(products or [product])
    for p in products:
        get_profile(p)
    world_sizes = list(world_sizes or [world_size])
    for label, values in (("world size", world_sizes), ("HCCL_BUFFSIZE", hccl)):
        for v in values:
            if type(v) is not int or v < 1:
                raise ValueError(f"a {label} must be a whole number >= 1, got {v!r}")
    confs = []
    for conf in candidates if candidates is not None else default_candidates(products[0], cann):
        if not isinstance(conf, str):
            raise InvalidArgument(f"a setting must be a str, not {type(conf).__name__}")
        try:
            parse_alloc_conf(conf.strip())
        except AllocatorConfigError as e:
            raise AllocatorConfigError(
                f"{str(e).strip().rstrip(',')} (in the setting {shown(conf)!r})") from None
        if conf.strip() not in confs:
            confs.append(conf.strip())
    if not confs or not hccl or not products or not world_sizes:
        raise InvalidArgument("every list a sweep takes needs at least one value")
    return confs, list(dict.fromkeys(hccl)), list(dict.fromkeys(products)), \
        list(dict.fromkeys(world_sizes))


def sweep_ranks(target: str | Callable[[], Any], argv: list[str] | tuple = (), *,
                world_size: int, product: str = DEFAULT_PRODUCT,
                capacity: int | None = None,
                candidates: Sequence[str] | None = None,
                hccl_buffsizes: Sequence[int] = DEFAULT_HCCL_SWEEP,
                products: Sequence[str] | None = None,
                world_sizes: Sequence[int] | None = None,
                cann: str | None = None, check: bool = True,
                progress: Progress | None = None, **options: Any) -> RanksSweep:
    """Every combination of ``candidates`` (``PYTORCH_NPU_ALLOC_CONF``; default
    :func:`~ascend_memsim.plan.default_candidates`), ``hccl_buffsizes`` (MB), ``products``
    (default: ``product``) and ``world_sizes`` (default: ``world_size``) for ``target``
    (as :func:`~.ranks.estimate_ranks` runs it), each on a card of ``capacity`` bytes
    (default: each product's own), those that fit first: the default settings first among
    them, then by the worst rank's device total (least memory); the others by the worst
    rank's margin (see the module's text for how: one run per rank class, product and world
    size, then replays). With ``check``, the best setting is run again and the result says
    whether the run agrees. ``progress(phase, done, total)`` is told of each run of the
    script ("traced"), each replay ("replays") and the check ("check"). ``options`` go to
    :func:`~.ranks.estimate_ranks` (``cards_per_node``,
    ``p2p_buffsize``, ``runtime_share``, ``trace_all``, ``workspace``, ``task_queue``).

    Raises:
        ValueError: a world size, card count or buffer size out of range.
        InvalidArgument: an unknown product, an empty list, a bad capacity; a rank that does
            not run to its end even on the trace's card.
        AllocatorConfigError: a setting torch_npu refuses (the message names it).
    """
    started = time.perf_counter()
    cann = cann or DEFAULT_CANN
    confs, hccls, products, sizes = _check_lists(candidates, hccl_buffsizes, products,
                                                 world_sizes, world_size, product, cann)
    options = dict(options, cann=cann)
    progress = progress or _no_progress
    traces = _traces(target, argv, sizes, products, options, progress)
    replays = sum(len(t.classes) for t in traces.values()) * len(confs) * len(hccls)
    sweep = RanksSweep(next(iter(traces.values())).source, traced_runs=sum(
        len(t.classes) for t in traces.values()))
    ranked = []
    for (prod, n), traced in traces.items():
        profile = get_profile(prod)
        card = capacity if capacity is not None else profile.total(profile.main_memory)
        columns = _columns(traced)
        for conf in confs:
            parsed = parse_alloc_conf(conf)
            for hccl in hccls:
                outcome = SettingOutcome(prod, n, conf, hccl, card, [])
                for c in traced.classes:
                    f = c.figures
                    blocks = outside_blocks(f, hccl)
                    with warnings.catch_warnings():
                        # page_size:1g's fallback warning, once per replay: noise here
                        warnings.simplefilter("ignore", UserWarning)
                        run = replay_columns(columns[f.rank], profile, card, parsed, cann,
                                             outside=blocks)
                    sweep.replays += 1
                    progress("replays", sweep.replays, replays)
                    one = ClassOutcome(c.ranks, f.rank, run.fits, run.result.peak_reserved,
                                       f.workspace, _hccl_of(f, hccl), f.runtime_share, card,
                                       run.result.first_failure)
                    one.fits = one.fits and one.margin >= 0
                    outcome.classes.append(one)
                ranked.append(outcome)
    order = {id(r): i for i, r in enumerate(ranked)}
    # DECISION: as the single-card sweep ranks, by what a user changes least: those that fit
    # first, the default settings first among them (nothing to change), then the least
    # memory on the worst rank; those that do not fit by the worst rank's margin
    ranked.sort(key=lambda r: (not r.fits, not (r.fits and r.is_default),
                               r.worst.total if r.fits else -r.worst.margin, order[id(r)]))
    sweep.results = ranked
    if check and sweep.best is not None:
        progress("check", 0, 1)
        _check_best(sweep, target, argv, options)
        progress("check", 1, 1)
    sweep.seconds = time.perf_counter() - started
    return sweep


def _check_best(sweep: RanksSweep, target: Any, argv: Any, options: dict) -> None:
    """Run the script at the best setting; note whether each rank's device total and
    verdict are the replay's."""
    best = sweep.best
    assert best is not None
    run = estimate_ranks(target, argv, world_size=best.world_size, product=best.product,
                         capacity=best.capacity, alloc_conf=best.alloc_conf,
                         hccl_buffsize=best.hccl_buffsize, **options)
    differs = []
    for c in best.classes:
        f = run.rank(c.traced_rank)
        if (f.fits, f.total) != (c.fits, c.total):
            differs.append(f"rank {c.traced_rank}: the run's total {format_bytes(f.total)} "
                           f"({'fits' if f.fits else 'does not fit'}), the replay's "
                           f"{format_bytes(c.total)}")
    sweep.checked = run
    sweep.check = {"setting": best.label(), "fits": run.fits, "agrees": not differs,
                   "differs": "; ".join(differs)}


@dataclass
class ClassNeed:
    """The smallest card one rank class fits on (:func:`bisect_ranks`)."""

    ranks: tuple[int, ...]
    traced_rank: int
    #: the capacity search of the class's replays, communicators and share included
    search: FitSearch
    #: the capacity to plan with: every larger one fits, the device total within it; None
    #: when nothing fits up to the top
    needs: int | None
    #: the device total at ``needs``
    total: int
    workspace: int
    hccl: int
    runtime_share: int

    def as_dict(self) -> dict:
        return {"ranks": list(self.ranks), "traced_rank": self.traced_rank,
                "needs": self.needs, "smallest": self.search.smallest, "total": self.total,
                "workspace": self.workspace, "hccl": self.hccl,
                "runtime_share": self.runtime_share, "search": self.search.as_dict()}


@dataclass
class RanksBisect:
    """The answer of :func:`bisect_ranks`: the card each rank class needs."""

    source: str
    product: str
    world_size: int
    alloc_conf: str
    hccl_buffsize: int
    #: the product's own card
    capacity: int
    step: int
    top: int
    classes: list[ClassNeed] = field(default_factory=list)
    #: the distributed estimate traced (on the trace's card)
    traced: RanksResult | None = field(default=None, repr=False)
    replays: int = 0
    seconds: float = 0.0

    @property
    def needs(self) -> int | None:
        """The card every rank fits on: the largest class's need (None: some never fit)."""
        needs = [c.needs for c in self.classes]
        return None if None in needs else max(needs)  # type: ignore[type-var]

    @property
    def fits(self) -> bool:
        """Every class fits on the product's own card."""
        needs = self.needs
        return needs is not None and needs <= self.capacity

    def as_dict(self) -> dict:
        return {"source": self.source, "product": self.product,
                "world_size": self.world_size, "alloc_conf": self.alloc_conf,
                "hccl_buffsize_mb": self.hccl_buffsize, "capacity": self.capacity,
                "step": self.step, "top": self.top, "needs": self.needs, "fits": self.fits,
                "replays": self.replays, "seconds": self.seconds,
                "classes": [c.as_dict() for c in self.classes], "how": _HOW}

    def __str__(self) -> str:
        size = format_bytes
        rows = [("ranks", "smallest fit", "plan with", "device total", "HCCL", "runtime",
                 f"on {self.product} ({size(self.capacity)})")]
        for c in self.classes:
            if c.needs is None:
                rows.append((_ranks_text(c.ranks), "no fit", "-", "-", size(c.hccl),
                             size(c.runtime_share), f"does not fit up to {size(self.top)}"))
                continue
            spare = self.capacity - c.needs
            rows.append((_ranks_text(c.ranks), size(c.search.smallest or 0), size(c.needs),
                         size(c.total), size(c.hccl), size(c.runtime_share),
                         f"fits, {size(spare)} to spare" if spare >= 0 else
                         f"DOES NOT FIT, {size(-spare)} short"))
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        lines = [f"{self.source}: the smallest card each rank class fits on, {self.world_size} "
                 f"ranks on {self.product}, PYTORCH_NPU_ALLOC_CONF="
                 f"{self.alloc_conf or '(default)'}, HCCL_BUFFSIZE={self.hccl_buffsize} MB "
                 f"(steps of {size(self.step)})"]
        for row in rows:
            lines.append("  " + "  ".join(cell.ljust(w) if i in (0, 6) else cell.rjust(w)
                                          for i, (cell, w) in enumerate(zip(row, widths)))
                         .rstrip())
        needs = self.needs
        lines.append(f"  verdict: every rank fits on {size(needs)}"
                     + (f": fits on {self.product}" if self.fits else
                        f": DOES NOT FIT on {self.product}") if needs is not None else
                     "  verdict: some rank class does not fit at the top of the search")
        lines.append("  plan with: every larger card fits too (replayed a window above), the "
                     "device total (reserved + workspace + HCCL + runtime) within it")
        lines.append(f"  {self.replays} replays in {self.seconds:.2f} s: {_HOW}")
        lines.append(f"  {_NOT_EXACT.split(':')[0]}")
        return "\n".join(lines)


def bisect_ranks(target: str | Callable[[], Any], argv: list[str] | tuple = (), *,
                 world_size: int, product: str = DEFAULT_PRODUCT,
                 alloc_conf: str | None = None,
                 cann: str | None = None, step: int = 2 * MiB, top: int | None = None,
                 window: int = DEFAULT_WINDOW, **options: Any) -> RanksBisect:
    """The smallest card each rank class of ``target`` fits on under ``alloc_conf`` (None:
    the settings the traced run took from its environment or the script, as
    :func:`~.search.fit_script` takes them), its communicators and the runtime's share
    included: each class traced once, then
    :func:`~ascend_memsim.plan.fit_capacity` over its replays in steps of ``step`` up to
    ``top`` (default :data:`TRACE_CAPACITY`), and the answer raised until the device total
    is within it. ``options`` go to :func:`~.ranks.estimate_ranks` (``hccl_buffsize``,
    ``p2p_buffsize``, ``cards_per_node``, ``runtime_share``, ...).

    Raises:
        ValueError, InvalidArgument, AllocatorConfigError: as :func:`sweep_ranks`.
    """
    started = time.perf_counter()
    cann = cann or DEFAULT_CANN
    if alloc_conf is not None:
        parse_alloc_conf(alloc_conf)
    profile = get_profile(product)
    top = TRACE_CAPACITY if top is None else top
    traced = estimate_ranks(target, argv, world_size=world_size, product=product,
                            capacity=TRACE_CAPACITY, history=True, cann=cann,
                            alloc_conf=alloc_conf, **options)
    if alloc_conf is None:
        alloc_conf = traced.classes[0].figures.estimate.alloc_conf
    found = RanksBisect(traced.source, traced.product, world_size, alloc_conf,
                        traced.hccl_buffsize, profile.total(profile.main_memory), step, top,
                        traced=traced)
    columns = _columns(traced)
    conf = parse_alloc_conf(alloc_conf)
    for c in traced.classes:
        f = c.figures
        blocks = outside_blocks(f)
        search = fit_capacity(f.estimate.snapshot, product, alloc_conf=alloc_conf, cann=cann,
                              step=step, top=top, window=window, device=f.local_rank,
                              name=traced.source, outside=blocks)
        found.replays += search.replays
        outside = sum(b.size for b in blocks)
        needs, total = search.all_fit_from, 0
        if needs is not None:
            # the search asks the replay to fit; the device total (each part at its own
            # peak) must be within the card too: raised a step at a time past it
            total = search.peak_reserved + f.workspace + outside
            while total > needs:
                needs = max(needs + step, -(-total // step) * step)
                if needs > top:
                    needs = None
                    break
                run = replay_columns(columns[f.rank], profile, needs, conf, cann,
                                     outside=blocks)
                found.replays += 1
                total = run.result.peak_reserved + f.workspace + outside
                if not run.fits:
                    total = needs + step
        found.classes.append(ClassNeed(c.ranks, f.rank, search, needs, total, f.workspace,
                                       f.hccl, f.runtime_share))
    found.seconds = time.perf_counter() - started
    return found

