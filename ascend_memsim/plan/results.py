"""The answers of a capacity search and of a sweep of settings, as text and as JSON."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..memory.units import format_bytes, human_bytes, plural

__all__ = ["FitSearch", "Sweep"]


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
    failure: dict[str, Any] | None = None
    #: every capacity replayed and whether the job fit, in capacity order
    trials: list[tuple[int, bool]] = field(default_factory=list)
    #: the replays run (a trial a replay at another capacity answers runs none: it would
    #: place every segment alike, ``ascend_memsim.plan.columns``)
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

    def as_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["trials"] = [list(t) for t in self.trials]
        out["fits"] = self.fits
        out["smallest_exact"] = self.smallest_exact
        return out

    def __str__(self) -> str:
        mb = _distinct_sizes(self.top, self.lower_bound, self.step, self.smallest,
                             self.smallest_checked_from, self.all_fit_from,
                             self.all_fit_checked_to, *self.failing_between,
                             *(c - self.step for c in (self.smallest, self.all_fit_from)
                               if c is not None))
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
        lines.append(f"  {plural(self.replays, 'replay')} in {self.seconds:.2f} s"
                     + _answered(len(self.trials), self.replays))
        return "\n".join(lines)


def _distinct_sizes(*capacities: int | None) -> Callable[[int], str]:
    """:func:`human_bytes` for these capacities, except where two of them would read alike
    ("seen to fit: 10.65 GiB" beside "with 10.65 GiB: first failure", one step apart): those
    print exact (:func:`format_bytes`), so no two figures of one report contradict."""
    seen: dict[str, set[int]] = {}
    for capacity in capacities:
        if capacity is not None:
            seen.setdefault(human_bytes(capacity), set()).add(capacity)

    def show(n: int) -> str:
        text = human_bytes(n)
        return format_bytes(n) if len(seen.get(text, ())) > 1 else text
    return show


def _answered(trials: int, replays: int) -> str:
    """How many capacities were answered by a replay at another (the same run), if any."""
    others = trials - replays
    if others <= 0:
        return ""
    return (f"; {plural(others, 'capacity', 'capacities')} more answered by a replay at "
            f"another that places every segment alike")


def _failure_line(f: dict[str, Any]) -> str:
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
    #: setting -> the setting whose search answers it: it cannot change any replay of this
    #: source (e.g. a ``max_split_size_mb`` above every request and segment), not replayed
    same_as: dict[str, str] = field(default_factory=dict)
    replays: int = 0
    seconds: float = 0.0

    @property
    def best(self) -> FitSearch | None:
        return self.results[0] if self.results and self.results[0].fits else None

    def as_dict(self) -> dict[str, Any]:
        return {"source": self.source, "product": self.product, "step": self.step,
                "top": self.top, "replays": self.replays, "seconds": self.seconds,
                "same_as": dict(self.same_as),
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
        groups: dict[str, list[str]] = {}
        for conf, like in self.same_as.items():
            groups.setdefault(like, []).append(conf)
        for like, confs in groups.items():
            lines.append(f"  same as {like or '(default)'}: {', '.join(confs)} (every request "
                         f"and segment is under its max_split_size_mb, which then changes "
                         f"nothing: not replayed)")
        lines.append(f"  {plural(self.replays, 'replay')} in {self.seconds:.2f} s; "
                     f"each row is checked as `replay --bisect` checks it")
        return "\n".join(lines)


