"""A job plan as a picture: the device total of each estimate against the searched value, one
line per grid point, the card's capacity and the margin's line across, drawn with matplotlib
(the ``plot`` extra) into a PNG or SVG, as the distributed estimate draws its ranks
(:mod:`ascend_memsim.torchsim.ranks.plot`).

A value that ran out of memory has no peak to draw (the run stopped at the allocation that
failed): it is a cross on the capacity line. DECISION: at most :data:`MAX_LINES` grid points
are drawn, those with the largest values that fit first; the title says how many were left
out.
"""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING, Any

from ..memory.units import human_bytes

if TYPE_CHECKING:
    from .job_report import JobPlan

__all__ = ["plot_plan", "plot_problem", "MAX_LINES"]

#: the most grid points drawn (DECISION: what a legend of one column holds)
MAX_LINES = 12
_DPI = 110
_SIZE_IN = (10.0, 6.0)


def plot_problem(path: str, vary: str | None) -> str:
    """Why the plan's picture cannot be drawn to ``path`` ("" when it can), said before any
    run: another extension, no monotone axis, no matplotlib."""
    if not path.lower().endswith((".png", ".svg")):
        return f"--plot {path}: the picture is .png or .svg"
    if vary is None:
        return "--plot draws memory against the searched value: give --vary NAME=LO..HI"
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return "--plot needs matplotlib: pip install 'ascend-memsim[plot]'"
    return ""


def _unit(largest: int) -> tuple[int, str]:
    for shift, name in ((40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")):
        if largest >= 2 << shift:
            return 1 << shift, name
    return 1, "bytes"


def plot_plan(path: str, plan: JobPlan) -> None:
    """Draw ``plan`` into ``path`` (``.png`` or ``.svg``; see the module).

    Raises:
        ImportError: matplotlib is not installed (the message says how to get it).
        ValueError: another extension, or a plan without a monotone axis.
    """
    problem = plot_problem(path, plan.vary)
    if problem:
        if "matplotlib" in problem and "pip" in problem:
            raise ImportError(problem)
        raise ValueError(problem)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.text import Text

    order = sorted(range(len(plan.points)),
                   key=lambda i: (-(plan.points[i].largest or -1), i))[:MAX_LINES]
    shown = [plan.points[i] for i in sorted(order)]
    left_out = len(plan.points) - len(shown)
    capacities = sorted({t.answer["capacity"] for p in shown for t in p.tried
                         if t.answer["capacity"]})
    largest = max([*capacities, *(t.answer["total"] for p in shown for t in p.tried
                                  if not t.answer["oom"]), 1])
    unit, unit_name = _unit(largest)
    fig, ax = plt.subplots(figsize=_SIZE_IN)
    try:
        for i, p in enumerate(shown):
            color = f"C{i % 10}"
            # a run that ran out of memory stopped at the allocation that failed: its
            # figures are not the job's, a cross on the card's line
            drawn = sorted((t.value, t.answer["total"]) for t in p.tried
                           if t.value is not None and t.answer["verdict"] in ("fits", "over")
                           and not t.answer["oom"])
            label = p.label if plan.columns else "the job"
            if p.fits:
                label += f": {plan.vary} {p.largest}"
            ax.plot([x for x, _ in drawn], [y / unit for _, y in drawn], marker="o",
                    markersize=4, color=color, label=label)
            crosses = [(t.value, t.answer["capacity"]) for t in p.tried
                       if t.value is not None and t.answer["oom"]]
            if crosses:
                ax.plot([x for x, _ in crosses], [c / unit for _, c in crosses], marker="x",
                        linestyle="none", color=color, markersize=8)
            if p.fits and p.largest is not None:
                ax.axvline(p.largest, color=color, linestyle=":", linewidth=0.8)
        for cap in capacities:
            ax.axhline(cap / unit, color="#c00000", linestyle="--", linewidth=1.2)
            ax.axhline(cap * (1 - plan.margin) / unit, color="#c00000", linestyle=":",
                       linewidth=1.0)
            ax.text(0.995, cap / unit, f"card: {human_bytes(cap)}", va="bottom", ha="right",
                    fontsize=8, color="#c00000", transform=ax.get_yaxis_transform())
        ax.set_xlabel(f"{plan.vary} (searched by bisection)", fontsize=9)
        ax.set_ylabel(f"device total of the fullest card ({unit_name})", fontsize=9)
        ax.grid(color="#e0e0e0", linewidth=0.6)
        ax.set_axisbelow(True)
        ax.legend(fontsize=8, loc="lower right")
        heading = " ".join(plan.command)
        sub = (f"dashed: the card; dotted: {plan.margin:.0%} of it left free; a cross: out "
               f"of memory (no peak)"
               + (f"; {left_out} grid points with smaller answers left out" if left_out
                  else ""))
        ax.set_title("\n".join([*textwrap.wrap(heading, 100), *textwrap.wrap(sub, 120)]),
                     fontsize=9, loc="left")
        texts: list[Any] = fig.findobj(Text)
        for text in texts:
            text.set_parse_math(False)
            text.set_usetex(False)
        fig.tight_layout()
        fig.savefig(path, dpi=_DPI)
    finally:
        plt.close(fig)
