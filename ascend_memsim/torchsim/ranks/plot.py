"""A distributed estimate as a picture: one row per rank class, its card's bytes stacked by
kind (parameters, gradients, optimizer, activations, cached, workspace, HCCL, runtime)
against the card's capacity, drawn with matplotlib (the ``plot`` extra) into a PNG or SVG.

Rows are classes, never ranks: traced ranks whose figures are the same (every rank of a
data-parallel group, say) share a row, so 8 ranks and 1,024 ranks give a picture of a few
rows; a row names its ranks ("0-3,8-11", or "512 ranks: 0,2,4,..." when that is long).
DECISION: at most :data:`MAX_ROWS` rows; past that the rows with the largest totals are
drawn and the title says how many were left out.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any

from ...allocators.stats import format_size as format_bytes
from .report import KINDS, RankFigures, RanksResult, _ranks_text

__all__ = ["plot_ranks", "picture_rows", "MAX_ROWS", "KIND_COLORS"]

#: the most rows drawn (DECISION: about what a screen shows at the figure's row height)
MAX_ROWS = 40
#: one color per kind, in KINDS' order: the tensors' kinds warm to cool, then the memory
#: outside the tensors in greys and a strong violet for HCCL (what the sweeps turn)
KIND_COLORS = ("#1f77b4", "#6baed6", "#2ca02c", "#ff7f0e", "#fdd0a2", "#9e9e9e", "#7b3294",
               "#404040")
_DPI = 110
_WIDTH_IN = 10.0
_ROW_IN = 0.42
_HEAD_IN = 1.5
_LEGEND_IN = 0.45
_LABEL_CHARS = 26


def _label(ranks: tuple[int, ...]) -> str:
    text = _ranks_text(ranks)
    if len(text) <= _LABEL_CHARS:
        return f"ranks {text}" if len(ranks) > 1 else f"rank {text}"
    return f"{len(ranks)} ranks: {text[:_LABEL_CHARS - 8].rsplit(',', 1)[0]},..."


def picture_rows(result: RanksResult) -> list[tuple[tuple[int, ...], RankFigures]]:
    """The rows of the picture: (the ranks, the figures standing for them), classes whose
    kinds and margin are the same merged, in the order of their lowest rank."""
    merged: dict[tuple, tuple[list[int], RankFigures]] = {}
    for c in result.classes:
        f = c.figures
        key = (tuple(f.kinds().values()), f.fits)
        if key in merged:
            merged[key][0].extend(c.ranks)
        else:
            merged[key] = (list(c.ranks), f)
    rows = [(tuple(sorted(ranks)), f) for ranks, f in merged.values()]
    return sorted(rows, key=lambda row: row[0][0])


def _unit(largest: int) -> tuple[int, str]:
    for shift, name in ((40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")):
        if largest >= 2 << shift:
            return 1 << shift, name
    return 1, "bytes"


def plot_ranks(path: str, result: RanksResult, *, title: str | None = None,
               needs: Sequence[int | None] | None = None) -> None:
    """Draw ``result`` into ``path`` (``.png`` or ``.svg``): a row per class (see the
    module's text), stacked by kind, the card's capacity as a line and, with ``needs``
    (bytes per class of ``result.classes``, from a bisection), each class's smallest card
    as a tick on its row.

    Raises:
        ImportError: matplotlib is not installed (the message says how to get it).
        ValueError: another extension.
    """
    if not path.lower().endswith((".png", ".svg")):
        raise ValueError(f"{path!r}: the picture is .png or .svg")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.lines import Line2D
        from matplotlib.patches import Patch
        from matplotlib.text import Text
    except ImportError:
        raise ImportError("the picture needs matplotlib: pip install "
                          "'ascend-memsim[plot]'") from None
    need_of = {}
    if needs is not None:
        for c, need in zip(result.classes, needs):
            need_of[c.figures.rank] = need
    rows = picture_rows(result)
    left_out = 0
    if len(rows) > MAX_ROWS:
        left_out = len(rows) - MAX_ROWS
        rows = sorted(sorted(rows, key=lambda r: -r[1].total)[:MAX_ROWS],
                      key=lambda r: r[0][0])
    largest = max([result.capacity, *(f.total for _, f in rows),
                   *(n for n in need_of.values() if n)])
    unit, unit_name = _unit(largest)
    height = _HEAD_IN + _LEGEND_IN + _ROW_IN * max(len(rows), 2)
    fig, ax = plt.subplots(figsize=(_WIDTH_IN, height))
    try:
        _draw(ax, rows, result, unit, unit_name, need_of)
        heading = title or (f"{result.source}: {result.world_size} ranks on {result.product}, "
                            f"{format_bytes(result.capacity)} a card")
        sub = (f"{len(rows)} row(s) for {len(result.classes)} traced class(es) "
               f"({result.traced}); PYTORCH_NPU_ALLOC_CONF={result.alloc_conf or '(default)'}"
               f", HCCL_BUFFSIZE={result.hccl_buffsize} MB"
               + (f"; {left_out} rows with smaller totals left out" if left_out else ""))
        ax.set_title("\n".join([*textwrap.wrap(heading, 100), *textwrap.wrap(sub, 120)]),
                     fontsize=9, loc="left")
        handles: list[Any] = [Patch(color=color, label=kind)
                              for kind, color in zip(KINDS, KIND_COLORS)]
        handles.append(Line2D([], [], color="#c00000", linestyle="--",
                              label=f"card: {format_bytes(result.capacity)}"))
        if need_of:
            handles.append(Line2D([], [], color="#c00000", linewidth=2, marker="|",
                                  linestyle="none", markersize=10,
                                  label="smallest card it fits on"))
        fig.legend(handles=handles, ncol=len(handles), fontsize=8, loc="lower center",
                   frameon=False, handlelength=1.2, columnspacing=1.2)
        for text in fig.findobj(Text):
            text.set_parse_math(False)
            text.set_usetex(False)
        fig.tight_layout(rect=(0, _LEGEND_IN / height, 1, 1))
        fig.savefig(path, dpi=_DPI)
    finally:
        plt.close(fig)


def _draw(ax: Any, rows: list, result: RanksResult, unit: int, unit_name: str,
          need_of: dict) -> None:
    n = len(rows)
    for y, (_, f) in enumerate(rows):
        left = 0.0
        for kind, color in zip(KINDS, KIND_COLORS):
            value = f.kinds()[kind] / unit
            if value > 0:
                ax.barh(y, value, left=left, color=color, height=0.62, edgecolor="white",
                        linewidth=0.4)
                left += value
        verdict = (f"{format_bytes(f.total)}, {format_bytes(f.margin)} spare" if f.fits else
                   f"{format_bytes(f.total)}: DOES NOT FIT")
        ax.text(left, y, " " + verdict, va="center", ha="left", fontsize=8,
                color="black" if f.fits else "#c00000")
        need = need_of.get(f.rank)
        if need:
            ax.plot([need / unit] * 2, [y - 0.38, y + 0.38], color="#c00000", linewidth=2.5)
    cap = result.capacity / unit
    ax.axvline(cap, color="#c00000", linestyle="--", linewidth=1.2)
    ax.set_yticks(range(n), [_label(ranks) for ranks, _ in rows], fontsize=8)
    ax.set_ylim(n - 0.4, -0.6)
    ax.set_xlim(0, max(cap, *(f.total / unit for _, f in rows),
                       *(x / unit for x in need_of.values() if x)) * 1.28)
    ax.set_xlabel(f"device memory of the rank's card ({unit_name})", fontsize=9)
    ax.tick_params(axis="x", labelsize=8)
    ax.grid(axis="x", color="#e0e0e0", linewidth=0.6)
    ax.set_axisbelow(True)
