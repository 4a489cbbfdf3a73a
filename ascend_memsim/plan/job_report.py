"""What a job plan answers (:class:`JobPlan`, a :class:`PointResult` per grid point, a
:class:`Tried` per estimate) and how a person reads it: the table of grid points, the
recommended configuration and why."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..memory.units import human_bytes, plural
from .knobs import shown_value

__all__ = ["Tried", "PointResult", "JobPlan", "plan_text", "recommend"]


@dataclass
class Tried:
    """One estimate of a point's search: the monotone axis's ``value`` (None without one),
    its answer (:data:`~.job_cells.ANSWER_FIELDS`), whether it came from the cache, and
    whether it fits with the plan's margin."""

    value: int | None
    answer: dict[str, Any]
    cached: bool
    fits: bool

    def as_dict(self) -> dict[str, Any]:
        return {"value": self.value, **self.answer, "cached": self.cached,
                "fits_with_margin": self.fits}


@dataclass
class PointResult:
    """One grid point's answer: ``values`` (every axis's), the largest value of the monotone
    axis that fits (None: none, or no monotone axis), whether it fits there, that estimate's
    peaks and margin (0 when nothing fits; ``capacity`` is the card's either way), the
    smallest value seen not to fit and why, with the rank that fails first (out of memory,
    else the one with the least margin), tokens per step per card, the cells it ran and took
    from the cache, and ``error`` when its search could not finish."""

    values: dict[str, str]
    label: str
    largest: int | None = None
    fits: bool = False
    peak_reserved: int = 0
    total: int = 0
    margin: int = 0
    capacity: int = 0
    first_over: int | None = None
    first_rank: int | None = None
    why: str = ""
    tokens: float | None = None
    runs: int = 0
    cached: int = 0
    error: str = ""
    tried: list[Tried] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"values": self.values, "largest": self.largest, "fits": self.fits,
                "peak_reserved": self.peak_reserved, "total": self.total,
                "margin": self.margin, "capacity": self.capacity,
                "first_over": self.first_over, "first_rank": self.first_rank,
                "why": self.why, "tokens_per_card": self.tokens, "runs": self.runs,
                "cached": self.cached, "error": self.error,
                "tried": [t.as_dict() for t in self.tried]}


@dataclass
class JobPlan:
    """The answers of :func:`plan_job`: one :class:`PointResult` per grid point in the
    grid's order, the recommended one (an index, None when nothing fits) and why."""

    command: list[str]
    axes: dict[str, Any]
    columns: list[str]
    vary: str | None
    margin: float
    points: list[PointResult]
    recommended: int | None = None
    why: str = ""
    #: the product of --batch, --seq and --cards as given ("" without them)
    tokens: str = ""
    runs: int = 0
    cached: int = 0
    ignored: int = 0
    seconds: float = 0.0
    executor: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def fits(self) -> bool:
        """Whether some point fits (a configuration is recommended)."""
        return self.recommended is not None

    def as_dict(self) -> dict[str, Any]:
        best = self.points[self.recommended] if self.recommended is not None else None
        return {"command": self.command, "axes": self.axes, "vary": self.vary,
                "margin": self.margin, "tokens": self.tokens or None,
                "points": [p.as_dict() for p in self.points],
                "recommended": None if best is None else {
                    "index": self.recommended, "values": best.values,
                    "largest": best.largest, "tokens_per_card": best.tokens},
                "why": self.why, "cells": self.runs + self.cached, "runs": self.runs,
                "cached": self.cached, "ignored": self.ignored, "seconds": self.seconds,
                "executor": self.executor, "notes": self.notes}

    def __str__(self) -> str:
        return plan_text(self)




def _margin(p: PointResult) -> str:
    return (f"{human_bytes(p.margin)} ({p.margin / p.capacity:.1%})" if p.fits and p.capacity
            else "-")


def recommend(plan: JobPlan) -> tuple[int | None, str]:
    """The point to run (its index; None when nothing fits) and why: the most tokens per
    step per card (with ``--batch`` and ``--seq``), else the largest value of the monotone
    axis, else the most of the card left; on a tie, the most of the card left, then the
    first in the grid's order. Time O(points)."""
    points = plan.points
    fitting = [i for i, p in enumerate(points) if p.fits and not p.error]
    free = f"{plan.margin:.0%} of the card free"
    if not fitting:
        broken = sum(1 for p in points if p.error)
        return None, (f"nothing fits with {free}"
                      + (f" ({plural(broken, 'grid point')} could not be searched: see the "
                         f"errors)" if broken else ""))

    def score(i: int) -> tuple[float, float, int]:
        p = points[i]
        first = (p.tokens or 0.0) if plan.tokens else float(p.largest or 0) if plan.vary \
            else 0.0
        return (first, p.margin / p.capacity if p.capacity else 0.0, -i)

    best = max(fitting, key=score)
    p = points[best]
    parts = [p.label] if plan.columns else []
    if plan.vary is not None:
        parts.append(f"{plan.vary}={p.largest}")
    among = (f"of the {plural(len(fitting), 'configuration')} that fit with {free}"
             if len(points) > 1 else f"that fits with {free}")
    if plan.tokens and p.tokens is not None:
        reason = f"{p.tokens:,.0f} tokens per step per card, the most {among}"
    elif plan.vary is not None:
        reason = f"the largest {plan.vary} {among}"
    else:
        reason = (f"the most of the card left {among}" if len(points) > 1
                  else f"it fits with {free}")
    return best, (f"{', '.join(parts) or 'the job'}: {reason}; {_margin(p)} of its "
                  f"{human_bytes(p.capacity)} left")


def _cells(table: list[tuple[str, ...]], right: set[int]) -> list[str]:
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    return ["  ".join(c.rjust(w) if i in right else c.ljust(w)
                      for i, (c, w) in enumerate(zip(row, widths))).rstrip() for row in table]


def plan_text(plan: JobPlan) -> str:
    """The plan as a table, a line per grid point, then the recommendation and the totals."""
    lines = [f"plan: {' '.join(plan.command)}"]
    free = f"{plan.margin:.0%} of the card free"
    axes: dict[str, Any] = plan.axes
    if plan.vary is not None:
        r = axes[plan.vary]
        lines.append(f"  the largest {plan.vary} in {r['low']}..{r['high']} that fits with "
                     f"{free}, by bisection: memory is assumed to grow with {plan.vary}")
    else:
        lines.append(f"  each configuration run once: does it fit with {free}?")
    ranks = any(p.first_rank is not None for p in plan.points) or any(
        v != "1" for v in axes.get("world_size", ()))
    head = [*plan.columns, f"largest {plan.vary}" if plan.vary else "fits",
            "peak reserved", "device total", "margin"]
    if plan.vary is not None:
        head.append("first over")
    if ranks:
        head.append("failing rank")
    if plan.tokens:
        head.append("tokens/card")
    head.append("runs")
    table = [tuple(head)]
    for p in plan.points:
        row = [shown_value(c, p.values[c]) for c in plan.columns]
        if p.error:
            verdict = "error"
        elif plan.vary is not None:
            verdict = str(p.largest) if p.fits else "none"
        else:
            verdict = "yes" if p.fits else "no"
        row.append(verdict)
        seen = p.fits and not p.error
        row += [human_bytes(p.peak_reserved) if seen else "-",
                human_bytes(p.total) if seen else "-", _margin(p) if seen else "-"]
        if plan.vary is not None:
            row.append("-" if p.first_over is None else str(p.first_over))
        if ranks:
            row.append("-" if p.first_rank is None else str(p.first_rank))
        if plan.tokens:
            row.append("-" if p.tokens is None else f"{p.tokens:,.0f}")
        row.append(str(p.runs) + (f" +{p.cached} cached" if p.cached else ""))
        table.append(tuple(row))
    first_number = len(plan.columns)
    lines += ["  " + line for line in _cells(table, set(range(first_number, len(head))))]
    for p in plan.points:
        if p.error:
            lines.append(f"  error: {p.error}")
    said = set()
    for p in plan.points:
        if p.why and not p.error and p.why not in said and (p.first_over is not None
                                                             or not p.fits):
            said.add(p.why)
            where = (f"{plan.vary}={p.first_over}" if p.first_over is not None else p.label)
            lines.append(f"  over at {where}"
                         + (f", rank {p.first_rank} first" if p.first_rank is not None
                            else "") + f": {p.why}")
            if len(said) == 3:
                break
    lines.append(("recommended: " if plan.recommended is not None else "") + plan.why)
    if plan.tokens:
        lines.append(f"  tokens per step per card = {plan.tokens}")
    lines += [f"  note: {n}" for n in plan.notes]
    cells = plan.runs + plan.cached
    lines.append(f"{plural(cells, 'cell')}: {plural(plan.runs, 'estimate')} run"
                 + (f", {plan.cached} from the cache" if plan.cached else "")
                 + f", in {plan.seconds:.1f} s"
                 + (f" ({plan.executor})" if plan.executor else ""))
    return "\n".join(lines)
