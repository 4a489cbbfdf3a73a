"""The memory map and the timeline as a PNG, drawn with matplotlib (the ``plot`` extra).

The PNG draws what the SVG of :mod:`.viz` draws: the map's rows of 2 MiB with requested
bytes, padding (at least 2 pixels wide, so the +32 rule shows) and page rounding apart, a
dark line at each block's start and end, labels inside blocks wide enough, folded free
stretches; the timeline with its capacity line and failed mallocs. Every text is plain:
file names and component names never go through matplotlib's ``$...$`` math parser or TeX.

A PNG is at most :data:`MAX_HEIGHT` pixels tall, whatever the size of the job: the maps share
what the timeline (and a close-up) leave, and a map with more lines than its share gets
larger rows (doubling, as the SVG's do), so its labels stay the size a screen shows them at.
Each map keeps at least 8 lines, so a timeline, two maps and a close-up together run to
about 1,400 pixels.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from ..memory.constants import MiB
from ..memory.rules import PAGE_BYTES
from ..memory.units import format_bytes, plural
from .closeup import PART_WORDS
from .regions import PHYSICAL_COLOR, is_physical
from .viz import (
    FALLBACK_COLOR,
    FALLBACK_LABEL,
    FREE_COLOR,
    PADDING_COLOR,
    PAGE_COLORS,
    ROW_BYTES,
    MapSnapshot,
    _wrap,
    component_colors,
    footprint_edges,
    offset_label,
    rows_of,
    segment_label,
    timeline_steps,
)

if TYPE_CHECKING:
    from .closeup import Closeup
    from .replay import Timeline

__all__ = ["save_png", "draw_figure", "MAX_HEIGHT"]

_DPI = 110
_FIG_WIDTH = 10.0
#: the most pixels a PNG is tall. DECISION: about what a laptop's screen shows at once
#: (1,200 px at 110 dpi), so that a picture is never shrunk to fit the screen and its 7-point
#: labels stay readable; a 19 GiB job's maps get larger rows instead of more of them.
MAX_HEIGHT = 1200
#: inches of the figure: the timeline; a map's heading and legend; one line of a map
_TIMELINE_IN = 3.2
_MAP_HEAD_IN = 1.6
_LINE_IN = 0.17
#: the fewest lines a map is given, however many maps share the height
_MIN_LINES = 8
#: the most blocks too narrow for their label that get one beside them (a callout)
_CALLOUTS = 8
#: inches of a close-up: its title and bars; each line of its rules
_CLOSEUP_IN = 2.6
_WHY_IN = 0.17


def _lines(*texts: str) -> str:
    """``texts`` one under another, each wrapped to the figure's width (a heading of 10.5
    points), so no long file name runs off the picture."""
    room = _FIG_WIDTH * _DPI * 0.88
    return "\n".join(line for text in texts for line in _wrap(text, room, 10.5 * _DPI / 72))


def save_png(path: str, *, snapshot: MapSnapshot | None = None,
             timeline: Timeline | None = None, title: str = "",
             color_by: str = "page", maps: Sequence[MapSnapshot] = (),
             closeups: Sequence[Closeup] = ()) -> None:
    """Draw the map and/or the timeline into a PNG with matplotlib (the ``plot`` extra).

    Raises:
        ImportError: matplotlib is not installed (the message says how to get it).
    """
    fig = draw_figure(snapshot=snapshot, timeline=timeline, title=title, color_by=color_by,
                      maps=maps, closeups=closeups)
    import matplotlib.pyplot as plt  # draw_figure has checked that matplotlib is there

    try:
        fig.savefig(path, dpi=_DPI)
    finally:
        plt.close(fig)


def draw_figure(*, snapshot: MapSnapshot | None = None, timeline: Timeline | None = None,
                title: str = "", color_by: str = "page",
                maps: Sequence[MapSnapshot] = (), closeups: Sequence[Closeup] = ()) -> Any:
    """The matplotlib figure :func:`save_png` writes (the timeline above the map, then
    ``maps``, more maps, one under another: a caching allocator's segments; then
    ``closeups``, blocks drawn close up, :mod:`.closeup`).

    ``title`` heads the timeline, or the map when it is alone.

    Raises:
        ImportError: matplotlib is not installed (the message says how to get it).
        ValueError: nothing to draw, or ``color_by`` is not "page" or "component".
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.text import Text
    except ImportError:
        raise ImportError("PNG output needs matplotlib: pip install 'ascend-memsim[plot]' "
                          "(or write .svg / .html, which need nothing)") from None
    if color_by not in ("page", "component"):
        raise ValueError(f"color_by must be 'page' or 'component', got {color_by!r}")
    all_maps = [m for m in (snapshot, *maps) if m is not None]
    if timeline is None and not all_maps and not closeups:
        raise ValueError("save_png needs a snapshot, a timeline or a close-up")
    whys = [_closeup_why(one) for one in closeups]
    closeup_heights = [_CLOSEUP_IN + _WHY_IN * len(why) for why in whys]
    # The maps' lines: rows of 2 MiB while they fit the height left (else larger), and folds.
    budget = MAX_HEIGHT / _DPI - (_TIMELINE_IN if timeline is not None else 0) - sum(
        closeup_heights)
    share = (budget - _MAP_HEAD_IN * len(all_maps)) / max(len(all_maps), 1) / _LINE_IN
    layouts = [_map_lines(m, max(_MIN_LINES, int(share))) for m in all_maps]
    heights = ([_TIMELINE_IN] if timeline is not None else []) + [
        max(3.0, _MAP_HEAD_IN + _LINE_IN * len(lines[1])) for lines in layouts
    ] + closeup_heights
    fig, axes = plt.subplots(len(heights), 1, figsize=(_FIG_WIDTH, sum(heights)),
                             squeeze=False, gridspec_kw={"height_ratios": heights})
    ax_iter = iter(axes[:, 0])
    if timeline is not None:
        _draw_timeline(next(ax_iter), timeline, title or "Bytes in use")
    for i, (one, lines) in enumerate(zip(all_maps, layouts)):
        heading = [f"Memory map: {one.title}"]
        if title and timeline is None and i == 0:
            heading.insert(0, title)
        _draw_map(next(ax_iter), fig, one, lines, heading, color_by)
    for close, why in zip(closeups, whys):
        _draw_closeup(next(ax_iter), close, why)
    # File and component names are data: never math text, never TeX (before any layout,
    # which measures the texts).
    for text in fig.findobj(Text):
        text.set_parse_math(False)
        text.set_usetex(False)
    fig.tight_layout()
    return fig


def _draw_timeline(ax: Any, timeline: Timeline, title: str) -> None:
    names = timeline.components()
    # The value after event N holds from x = N, as the SVG draws it (timeline_steps).
    xs, by_name = timeline_steps(timeline)
    ys = [[v / MiB for v in by_name[n]] for n in names]
    colors = {**component_colors(names), **timeline.colors}
    if names:
        ax.stackplot(xs, ys, labels=names, step="post", colors=[colors[n] for n in names],
                     alpha=0.85)
    peak = max((sum(by.values()) for _, by in timeline.points), default=0)
    cap = timeline.capacity
    if cap and cap <= 4 * max(peak, 1):
        ax.axhline(cap / MiB, color="#C00000", linewidth=1.2, linestyle=(0, (6, 4)),
                   label=f"capacity {format_bytes(cap)}")
    for i, index in enumerate(timeline.failures[:200]):
        failed = max(timeline.failed, len(timeline.failures))
        ax.axvline(index, color="#C00000", linewidth=0.8,
                   label=f"failed malloc ({failed})" if i == 0 else None)
    ax.set_xlim(0, max(xs[-1], 1))
    ax.set_ylim(bottom=0)
    ax.set_xlabel("event number (event N at x = N)")
    ax.set_ylabel(timeline.quantity)
    sub = f"peak {format_bytes(peak)} over {timeline.events} events"
    if timeline.bucket > 1:
        sub += f"; each point the highest of {timeline.bucket} events"
    ax.set_title(_lines(title, sub), fontsize=10.5, loc="left")
    ax.grid(axis="y", color="#E4E4E4")
    ax.set_axisbelow(True)
    if names or timeline.failures:
        ax.legend(loc="upper left", fontsize=8)


def _map_lines(snapshot: MapSnapshot, max_lines: int
               ) -> tuple[int, list[tuple[str, int, int]]]:
    """(bytes per row, at most ``max_lines`` lines top to bottom): ("row", r, 0) or ("fold",
    first, end) for a folded free stretch of rows [first, end), as the SVG lays them out;
    rows double in size until the lines fit (a single line at worst)."""
    max_rows = max_lines
    while True:
        row_bytes, lines = _lines_of(snapshot, max_rows)
        if len(lines) <= max_lines or max_rows == 1:
            return row_bytes, lines
        max_rows = max(1, max_rows - (len(lines) - max_lines))


def _lines_of(snapshot: MapSnapshot, max_rows: int) -> tuple[int, list[tuple[str, int, int]]]:
    """The lines of :func:`_map_lines` with at most ``max_rows`` rows in use."""
    row_bytes, runs = rows_of(snapshot, max_rows)
    total_rows = -(-snapshot.capacity // row_bytes)
    lines: list[tuple[str, int, int]] = []
    previous_end = 0
    for first, count in runs:
        if first > previous_end:
            lines.append(("fold", previous_end, first))
        lines += [("row", r, 0) for r in range(first, first + count)
                  if r * row_bytes < snapshot.capacity]
        previous_end = first + count
    if previous_end < total_rows:
        lines.append(("fold", previous_end, total_rows))
    return row_bytes, lines


def _draw_map(ax: Any, fig: Any, snapshot: MapSnapshot,
              layout: tuple[int, list[tuple[str, int, int]]], heading: list[str],
              color_by: str) -> None:
    from matplotlib.patches import Patch, Rectangle

    row_bytes, lines = layout
    row_mib = row_bytes / MiB
    comp = component_colors({b.module_name for b in snapshot.blocks})

    def color(b: Any) -> str:
        own = getattr(b, "fill", None)
        if own is not None:
            return cast("str", own)
        if is_physical(b):
            return PHYSICAL_COLOR
        return PAGE_COLORS[b.page.value] if color_by == "page" else comp[b.module_name]

    # pixels per MiB of the row, from the axes' width in the figure (labels fit by it)
    px_per_mib = ax.get_position().width * _FIG_WIDTH * _DPI / row_mib
    char_px = 7 * 0.62 * _DPI / 72
    position: dict[int, int] = {}
    #: (x, width, row position, block) of each block too narrow for its label
    unlabelled: list[tuple[float, float, int, Any]] = []
    y: int | None  # a row's position (None: a row not drawn)
    for y, (kind, a, b) in enumerate(lines):
        if kind == "row":
            position[a] = y
            row_w = min(row_bytes, snapshot.capacity - a * row_bytes) / MiB
            ax.add_patch(Rectangle((0, y - 0.42), row_w, 0.84, facecolor=FREE_COLOR,
                                   edgecolor="#CCCCCC", linewidth=0.5))
        else:
            free = format_bytes((b - a) * row_bytes) if b * row_bytes <= snapshot.capacity \
                else format_bytes(snapshot.capacity - a * row_bytes)
            ax.text(row_mib / 2, y, f"… {free} {snapshot.gap} ({offset_label(a * row_bytes)} to "
                    f"{offset_label(min(b * row_bytes, snapshot.capacity))}) …",
                    ha="center", va="center", fontsize=7.5, color="#777777", style="italic")
    for start, end, part, blk in snapshot.segments():
        pos = start
        while pos < end:
            r = pos // row_bytes
            stop = min(end, (r + 1) * row_bytes)
            y = position.get(r)
            if y is not None:
                x, w = (pos - r * row_bytes) / MiB, (stop - pos) / MiB
                # padding is tiny next to a page: at least 2 pixels, so the rule shows, and
                # drawn over the page rounding that follows it; a small block 1.5 pixels
                w = max(w, (2 if part == "padding" else 1.5) / px_per_mib)
                face = {"data": color(blk), "padding": PADDING_COLOR, "rounding": "#FFFFFF"}
                fell_back = part == "data" and blk.fallback
                ax.add_patch(Rectangle(
                    (x, y - 0.36), w, 0.72, facecolor=face[part],
                    linewidth=1.6 if fell_back else 0.6,
                    edgecolor=FALLBACK_COLOR if fell_back else color(blk)
                    if part == "rounding" else "none",
                    hatch="////" if part == "rounding" else None,
                    zorder=1.6 if part == "padding" else 1.55 if fell_back else 1.5))
                label = "" if pos != start else segment_label(
                    part, blk, end - start, (w * px_per_mib - 8) / char_px)
                if label:
                    ax.text(x + 4 / px_per_mib, y, label, va="center", fontsize=7,
                            color="#000000" if part == "data" else "#444444",
                            style="normal" if part == "data" else "italic")
                elif pos == start and part == "data":
                    unlabelled.append((x, w, y, blk))
            pos = stop
    left = _callouts(ax, unlabelled, row_mib, px_per_mib, char_px)
    # block boundaries: a dark line where each footprint begins and ends
    for r, at in footprint_edges(snapshot, row_bytes):
        if r in position:
            bx = at / MiB
            ax.plot([bx, bx], [position[r] - 0.42, position[r] + 0.42], color="#222222",
                    linewidth=1.0, solid_capstyle="butt")
    # regions that hold blocks (a caching allocator's segments): a heavier edge
    for r, at in footprint_edges(snapshot, row_bytes, outlines=True):
        if r in position:
            bx = at / MiB
            ax.plot([bx, bx], [position[r] - 0.5, position[r] + 0.5], color="#000000",
                    linewidth=2.6, solid_capstyle="butt", zorder=3)
    # the 2 MiB grid: ticks inside a row when rows are larger than a huge page (as the SVG)
    if ROW_BYTES < row_bytes <= 64 * ROW_BYTES:
        ticks = [k * ROW_BYTES / MiB for k in range(1, row_bytes // ROW_BYTES)]
        for y in position.values():
            ax.vlines(ticks, y - 0.36, y + 0.36, color="#FFFFFF", linewidth=0.8, zorder=1.7)
    rows = [(y, a) for y, (kind, a, _) in enumerate(lines) if kind == "row"]
    every = max(1, -(-len(rows) // 40))   # at most about 40 labels, so they never overprint
    ax.set_yticks([y for y, _ in rows[::every]])
    ax.set_yticklabels([offset_label(a * row_bytes) for _, a in rows[::every]], fontsize=7)
    ax.set_ylim(len(lines) - 0.5, -0.5)
    ax.set_xlim(0, row_mib)
    ax.set_xlabel(f"MiB within the row (each row {format_bytes(row_bytes)}"
                  + (f", ticks every {format_bytes(ROW_BYTES)})"
                     if ROW_BYTES < row_bytes <= 64 * ROW_BYTES
                     else ")" if row_bytes > ROW_BYTES else ", one huge page)"))
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    ax.tick_params(axis="y", length=0)
    summary = snapshot.summary or (
        f"{snapshot.counted} use {format_bytes(snapshot.used_bytes)} of "
        f"{format_bytes(snapshot.capacity)}; free {format_bytes(snapshot.free_bytes)}, "
        f"largest free run {format_bytes(snapshot.largest_free_run)}")
    if left:
        summary += (f"; {plural(left, 'more block')} too small to see at this scale, "
                    f"not labelled")
    # other processes' memory this one maps: named under the figures (not this heap's)
    mapped = [f"mapped from another process: {entry.label}" for entry in snapshot.imports[:8]]
    if len(snapshot.imports) > 8:
        mapped.append(f"... and {len(snapshot.imports) - 8} more imports")
    ax.set_title(_lines(*heading, summary, *mapped), fontsize=10.5, loc="left", pad=30)
    if snapshot.legend is not None:
        handles = [Patch(facecolor=fill, edgecolor="#555555", linewidth=0.5, label=label)
                   for fill, label in snapshot.legend]
    elif color_by == "page":
        kinds = sorted({b.page.value for b in snapshot.blocks if not is_physical(b)
                        and getattr(b, "fill", None) is None}) or ["normal", "huge"]
        handles = [Patch(color=PAGE_COLORS[k], label=f"requested, {k} pages") for k in kinds]
    else:
        handles = [Patch(color=c, label=f"component {n}") for n, c in comp.items()]
    if snapshot.legend is None:
        handles += [Patch(color=PHYSICAL_COLOR, label=f"physical handle, {pages}")
                    for pages in sorted({b.pages for b in snapshot.blocks if is_physical(b)})]
        # regions of their own kind (a pool's granules): each fill once
        handles += [Patch(color=fill, label=label) for fill, label in dict.fromkeys(
            (b.fill, b.swatch) for b in snapshot.blocks if getattr(b, "swatch", None))]
        if any(b.fallback for b in snapshot.blocks):
            handles.append(Patch(facecolor="none", edgecolor=FALLBACK_COLOR, linewidth=1.6,
                                 label=FALLBACK_LABEL))
        handles += [Patch(color=PADDING_COLOR, label="padding (size rule, e.g. +32)"),
                    Patch(facecolor="#FFFFFF", edgecolor="#888888", hatch="////",
                          label="page rounding"),
                    Patch(facecolor=FREE_COLOR, edgecolor="#CCCCCC", label="free")]
    # The legend sits between the title and the map, where no axis label is.
    ax.legend(handles=handles, loc="lower left", bbox_to_anchor=(0.0, 1.0),
              ncol=min(len(handles), 5 if snapshot.legend is None else 3), fontsize=7.5,
              frameon=False)


def _callouts(ax: Any, unlabelled: list[tuple[float, float, int, Any]], row_mib: float,
              px_per_mib: float, char_px: float) -> int:
    """Label blocks too narrow for their label (a 100 B request in a row of 64 MiB is a
    sliver): the label in a box beside the block, in its row, with a line to it. Blocks a
    callout would cover or cross share it ("3 blocks: 100 B, 2 KiB, 4 KiB requested"), so
    no line runs through another's box. At most :data:`_CALLOUTS` callouts, the first by
    address; returns the count of blocks left unlabelled (no room, or past the most).
    O(blocks unlabelled)."""
    gap = 18 / px_per_mib
    by_row: dict[int, list[tuple[float, float, int, Any]]] = {}
    for item in unlabelled:
        by_row.setdefault(item[2], []).append(item)
    made = labelled = 0
    for y, items in by_row.items():
        i, ends = 0, 0.0
        while i < len(items) and made < _CALLOUTS:
            j, last_end = i + 1, items[i][0] + items[i][1]
            first = [b for _, _, _, b in items[i:i + _NAMED]]
            sizes = [format_bytes(b.size) for b in first]
            while True:
                at = max(last_end + gap, ends + gap / 2)
                text = _callout_text(first, sizes, j - i, (row_mib - at) * px_per_mib - 10,
                                     char_px)
                width = (len(text) * char_px + 10) / px_per_mib
                # a block under the box or its line joins it
                if j < len(items) and items[j][0] <= at + width + gap / 2:
                    last_end = max(last_end, items[j][0] + items[j][1])
                    j += 1
                    continue
                break
            group, i = items[i:j], j
            first_x = group[0][0]
            if not text or at + width > row_mib:
                # no room to the right: to the left of the first, if nothing is drawn there
                text = _callout_text(first, sizes, len(group), float("inf"), char_px)
                width = (len(text) * char_px + 10) / px_per_mib
                at = first_x - gap - width
                if at < ends or at < 0:
                    continue
            ends = at + width
            ax.annotate(text, xy=((first_x + last_end) / 2 if len(group) == 1 else
                                  (last_end if at > first_x else first_x), y),
                        xytext=(at + 5 / px_per_mib, y), va="center", fontsize=7, zorder=4,
                        bbox={"boxstyle": "round,pad=0.25", "facecolor": "#FFFFFF",
                              "edgecolor": "#555555", "linewidth": 0.6},
                        arrowprops={"arrowstyle": "-", "color": "#333333", "linewidth": 0.8,
                                    "shrinkA": 0, "shrinkB": 1})
            made += 1
            labelled += len(group)
    return len(unlabelled) - labelled


#: the most sizes a callout names (more never fit in a row)
_NAMED = 16


def _callout_text(first: list[Any], sizes: list[str], count: int, room_px: float,
                  char_px: float) -> str:
    """A callout's words in ``room_px`` pixels for ``count`` blocks, ``first`` the first of
    them (at most :data:`_NAMED`) and ``sizes`` theirs as words: one block's label as inside
    a block wide enough; several blocks' count and as many of their sizes as fit ("" when
    not even the count does). O(:data:`_NAMED`)."""
    room = room_px / char_px      # characters
    if count == 1:
        text = segment_label("data", first[0], first[0].size, float("inf"))
        return text if len(text) <= room else sizes[0] if len(sizes[0]) <= room else ""
    # "N blocks: " + sizes joined by ", " + (" and M more") + " requested"
    head, tail = f"{count} blocks: ", " requested"
    length = len(head) + len(tail)
    shown = 0
    for size in sizes:
        more = count - shown - 1
        extra = (2 if shown else 0) + len(size) + (len(f" and {more} more") if more else 0)
        if length + extra > room:
            break
        length += (2 if shown else 0) + len(size)
        shown += 1
    if not shown:
        text = f"{count} small blocks"
        return text if len(text) <= room else ""
    more = count - shown
    return head + ", ".join(sizes[:shown]) + (f" and {more} more" if more else "") + tail


def _closeup_why(closeup: Closeup) -> list[str]:
    """The close-up's rules, wrapped to the figure's width (8 points)."""
    room = _FIG_WIDTH * _DPI * 0.9
    return [part for line in closeup.why() for part in _wrap(line, room, 8 * _DPI / 72)]


def _draw_closeup(ax: Any, closeup: Closeup, why: list[str]) -> None:
    """A block close up (as :func:`~.closeup.closeup_svg` draws it): the whole footprint to
    scale, the window around the end of the request magnified, then the rules. The axes
    measure inches from their top."""
    from matplotlib.patches import Rectangle

    b = closeup.block
    height = _CLOSEUP_IN - 0.35 + _WHY_IN * len(why)
    ax.set_xlim(0, 1)
    ax.set_ylim(height, 0)
    ax.axis("off")
    px = ax.get_position().width * _FIG_WIDTH * _DPI   # pixels across the bars
    fills = {"data": PAGE_COLORS[b.page.value], "padding": PADDING_COLOR,
             "rounding": "#FFFFFF"}

    def part_patch(x: float, y: float, w: float, h: float, part: str) -> None:
        fell_back = part == "data" and b.fallback
        ax.add_patch(Rectangle((x, y), w, h, facecolor=fills[part],
                               hatch="////" if part == "rounding" else None,
                               edgecolor=FALLBACK_COLOR if fell_back else "#555555",
                               linewidth=1.6 if fell_back else 0.5,
                               zorder=2 if part == "padding" else 1))

    for start, end, part in closeup.parts():
        part_patch(start / b.footprint, 0.3, max((end - start) / b.footprint,
                                                  (2 if part == "padding" else 1) / px),
                   0.25, part)
    first, end = closeup.window()
    wx0, wx1 = first / b.footprint, max(end / b.footprint, first / b.footprint + 3 / px)
    ax.add_patch(Rectangle((wx0, 0.27), wx1 - wx0, 0.31, fill=False, edgecolor="#000000",
                           linewidth=1.2, zorder=3))
    pages = b.footprint // PAGE_BYTES[b.page]
    ax.text(0, 0.12, f"requested {b.size:,} B; padding {b.padding:,} B; page rounding "
            f"{b.page_rounding:,} B; footprint {b.footprint:,} B = {pages:,} {b.page.value} "
            f"page{'s' * (pages != 1)} of {format_bytes(PAGE_BYTES[b.page])}",
            fontsize=8, va="center")
    ax.plot([wx0, 0], [0.58, 0.95], [wx1, 1], [0.58, 0.95], color="#888888", linewidth=0.8,
            linestyle=(0, (3, 3)))
    zoom = 1 / (end - first)
    for start, stop, part in closeup.parts():
        a, z = max(start, first), min(stop, end)
        if a >= z:
            continue
        part_patch((a - first) * zoom, 0.95, (z - a) * zoom, 0.35, part)
        label = f"+{stop - start} B padding" if part == "padding" else PART_WORDS[part]
        if len(label) * 8 * 0.62 * _DPI / 72 + 8 <= (z - a) * zoom * px:
            ax.text((a - first) * zoom + 4 / px, 1.125, label, fontsize=8, va="center",
                    zorder=4)
    for offset in range(-(-first // 32) * 32, end + 1, 32):
        x = (offset - first) * zoom
        ax.plot([x, x], [1.3, 1.37], color="#333333", linewidth=0.8)
        ax.text(x, 1.49, f"{offset:,}", fontsize=7, ha="center", va="center", color="#555555")
    ax.text(0, 1.7, f"bytes {first:,} to {end:,} of the block, a tick every 32 B",
            fontsize=8, va="center")
    ax.text(0, 1.95, "\n".join(why), fontsize=8, va="top", linespacing=1.45)
    ax.set_title(_lines(closeup.title, "whole footprint, to scale; then the bytes around the "
                        "end of the request, magnified"), fontsize=10.5, loc="left")
