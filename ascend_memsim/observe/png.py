"""The memory map and the timeline as a PNG, drawn with matplotlib (the ``plot`` extra)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..memory.constants import MiB
from ..memory.units import format_bytes
from .viz import (
    PADDING_COLOR,
    PAGE_COLORS,
    ROW_BYTES,
    MapSnapshot,
    component_colors,
    offset_label,
    rows_of,
    timeline_steps,
)

if TYPE_CHECKING:
    from .replay import Timeline

__all__ = ["save_png", "draw_figure"]

def save_png(path: str, *, snapshot: MapSnapshot | None = None,
             timeline: Timeline | None = None, title: str = "") -> None:
    """Draw the map and/or the timeline into a PNG with matplotlib (the ``plot`` extra).

    Raises:
        ImportError: matplotlib is not installed (the message says how to get it).
    """
    fig = draw_figure(snapshot=snapshot, timeline=timeline, title=title)
    import matplotlib.pyplot as plt  # draw_figure has checked that matplotlib is there

    fig.savefig(path, dpi=110)
    plt.close(fig)


def draw_figure(*, snapshot: MapSnapshot | None = None, timeline: Timeline | None = None,
                title: str = "") -> Any:
    """The matplotlib figure :func:`save_png` writes (the timeline above the map).

    Raises:
        ImportError: matplotlib is not installed (the message says how to get it).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Patch
    except ImportError:
        raise ImportError("PNG output needs matplotlib: pip install 'ascend-memsim[plot]' "
                          "(or write .svg / .html, which need nothing)") from None
    panels = [p for p in (timeline, snapshot) if p is not None]
    if not panels:
        raise ValueError("save_png needs a snapshot or a timeline")
    # The map's rows: 2 MiB each while up to 128 rows are in use (as the SVG), and a panel
    # tall enough for them.
    row_bytes, runs = rows_of(snapshot, 128) if snapshot is not None else (ROW_BYTES, [])
    rows = [r for first, count in runs for r in range(first, first + count)]
    heights = ([4] if timeline is not None else []) + (
        [max(3.0, 1.5 + 0.16 * len(rows))] if snapshot is not None else [])
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, sum(heights)), squeeze=False,
                             gridspec_kw={"height_ratios": heights})
    ax_iter = iter(axes[:, 0])
    if timeline is not None:
        ax = next(ax_iter)
        names = timeline.components()
        # The last value holds to the last event, as in the SVG (timeline_steps).
        xs, by_name = timeline_steps(timeline)
        ys = [[v / MiB for v in by_name[n]] for n in names]
        if names:
            ax.stackplot(xs, ys, labels=names, step="post",
                         colors=[component_colors(names)[n] for n in names])
        for index in timeline.failures:
            ax.axvline(index + 1, color="#C00000", linewidth=0.8)
        ax.set_xlim(0, max(xs[-1], 1))
        ax.set_xlabel("event number")
        ax.set_ylabel("MiB in use (footprint)")
        ax.set_title(title or "Bytes in use")
        if names:
            ax.legend(loc="upper left")
    if snapshot is not None:
        ax = next(ax_iter)
        position = {r: i for i, r in enumerate(rows)}
        parts = {"data": None, "padding": PADDING_COLOR, "rounding": "#DDDDDD"}
        for start, end, part, b in snapshot.segments():
            pos = start
            while pos < end:
                r = pos // row_bytes
                stop = min(end, (r + 1) * row_bytes)
                if r in position:
                    ax.broken_barh([((pos - r * row_bytes) / MiB, (stop - pos) / MiB)],
                                   (position[r] - 0.4, 0.8),
                                   facecolors=parts[part] or PAGE_COLORS[b.page.value],
                                   hatch="//" if part == "rounding" else None)
                pos = stop
        # at most about 40 labels, so they never overprint
        every = max(1, -(-len(rows) // 40))
        ax.set_yticks(range(0, len(rows), every))
        ax.set_yticklabels([offset_label(r * row_bytes) for r in rows[::every]], fontsize=7)
        ax.invert_yaxis()
        ax.set_xlim(0, row_bytes / MiB)
        ax.set_xlabel(f"MiB within the row (each row {format_bytes(row_bytes)})")
        # The legend sits between the title and the map, where no axis label is.
        ax.set_title(f"Memory map: {snapshot.title}", pad=26)
        ax.legend(handles=[Patch(color=c, label=f"{k} pages") for k, c in PAGE_COLORS.items()]
                  + [Patch(color=PADDING_COLOR, label="padding"),
                     Patch(facecolor="#DDDDDD", hatch="//", label="page rounding")],
                  loc="lower center", bbox_to_anchor=(0.5, 1.0),
                  ncol=5, fontsize=8, frameon=False)
    fig.tight_layout()
    return fig
