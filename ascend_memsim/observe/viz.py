"""Pictures of device memory: a memory map, a timeline, a text map; SVG, HTML, PNG.

- :func:`map_svg`: the device's address range as rows of 2 MiB (the huge page), each block
  drawn in three parts: the bytes requested, the rounding padding (the +32 rule) and the page
  rounding (a huge page's unused tail), so the cost of each rule is visible at a glance.
- :func:`timeline_svg`: bytes in use (footprints) over the events of a replay, stacked by
  component, with the capacity and each failed malloc marked.
- :func:`text_map` (:mod:`.textmap`, named here too): the device in characters for
  terminals, at a scale chosen from the span its blocks use, each block's start and the
  blocks smaller than a character shown.
- :func:`html_page`: self-contained HTML (inline SVG, no script, no network) around them.

:func:`ascend_memsim.observe.pictures.save_picture` writes them to a file by its extension.

Size: about 660 lines, on purpose: the pictures share their geometry (rows, colours,
headings, the labels and edges the PNG draws too) and one import path; the PNG itself is
:mod:`ascend_memsim.observe.png`, the text map :mod:`.textmap`, and regions of other kinds
(a caching allocator's blocks, :mod:`.allocmap`) bring their own fill, label and tip rather
than a branch here.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from ..memory.device import Block
from ..memory.rules import PAGE_BYTES, Page
from ..memory.units import format_bytes, plural
from .regions import PHYSICAL_COLOR, is_physical, physical_regions
from .sharedmap import IMPORT_COLOR, SharingView, imports_svg
from .textmap import (
    BOUNDARY_TEXT,
    FALLBACK_TEXT,
    PHYSICAL_TEXT,
    POOL_TEXT,
    TEXT_LEGEND,
    check_cell,
    offset_label,
    text_map,
    text_scale,
)

if TYPE_CHECKING:
    from ..memory.device import Device
    from .replay import Timeline

__all__ = ["MapSnapshot", "map_svg", "timeline_svg", "text_map", "text_scale", "check_cell",
           "html_page", "stack_svg", "timeline_steps", "offset_label", "PAGE_COLORS",
           "FALLBACK_COLOR", "FALLBACK_LABEL", "TEXT_LEGEND", "PHYSICAL_TEXT", "POOL_TEXT",
           "FALLBACK_TEXT", "BOUNDARY_TEXT"]

ROW_BYTES = PAGE_BYTES[Page.HUGE]

#: Fill colours of requested bytes, by page kind (colour-blind-safe Okabe-Ito hues).
PAGE_COLORS = {"normal": "#0072B2", "huge": "#E69F00", "huge1g": "#CC79A7"}
_COMPONENT_COLORS = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00",
                     "#F0E442", "#999999")
PADDING_COLOR = "#D55E00"
#: The outline of a block HUGE_FIRST placed on normal pages (no huge page could be had), and
#: its legend entry, the same in every picture (SVG, PNG, the player)
FALLBACK_COLOR = "#C00000"
FALLBACK_LABEL = "HUGE_FIRST fallback: normal pages (red outline)"
FREE_COLOR = "#F4F4F4"
_FONT = "font-family:DejaVu Sans,Verdana,sans-serif"


@dataclass
class MapSnapshot:
    """The live blocks of one device's main memory at a moment, for drawing; ``blocks`` holds
    the physical handles' memory too (:class:`~ascend_memsim.observe.regions.PhysicalRegion`).

    A map of something else (a caching allocator's segments, :mod:`.allocmap`) holds regions
    with their own ``fill``, ``label`` and ``tip``, and sets ``summary`` (the heading's
    figures), ``legend`` ((fill, label) swatches), ``gap`` (the word for memory between
    regions) and ``outlines`` ((address, size) of the regions that hold blocks, drawn with
    a heavier edge: a caching allocator's segments)."""

    title: str
    base: int
    capacity: int
    #: Blocks, and regions drawn beside them (regions.py: duck-typed, hence Any)
    blocks: list[Any] = field(default_factory=list)
    free_bytes: int = 0
    largest_free_run: int = 0
    summary: str | None = None
    legend: list[tuple[str, str]] | None = None
    gap: str = "free"
    outlines: list[tuple[int, int]] = field(default_factory=list)
    #: other processes' memory this process maps (:class:`~.sharedmap.Import`), drawn
    #: under the device's memory
    imports: list[Any] = field(default_factory=list)

    @classmethod
    def of(cls, device: Device, title: str | None = None, *,
           sharing: SharingView | None = None) -> MapSnapshot:
        """A snapshot of ``device`` now (takes the device lock); with ``sharing`` (a
        :class:`~.sharedmap.SharingView` observing the runtime or replay), its pools' granules
        drawn with their blocks and its imports listed."""
        if sharing is not None:
            return cast("MapSnapshot", sharing.annotate(cls.of(device, title), device.device_id))
        with device.lock:
            memory = device.profile.main_memory
            alloc = device.allocators[memory]
            blocks: list[Any] = [b for b in device.blocks() if b.memory is memory]
            # physical handles lie in the main memory's heap, beside the blocks
            blocks = sorted([*blocks, *physical_regions(device)], key=lambda b: b.ptr)
            return cls(title or f"{device.profile.name} device {device.device_id}, "
                                f"{memory.value}", alloc.base, alloc.capacity, blocks,
                       alloc.free_bytes, alloc.largest_free_run())

    def segments(self) -> Iterator[tuple[int, int, str, Block]]:
        """(start offset, end offset, part, block) with part "data", "padding", "rounding"."""
        for b in self.blocks:
            start = b.ptr - self.base
            yield start, start + b.size, "data", b
            if b.rule_size > b.size:
                yield start + b.size, start + b.rule_size, "padding", b
            if b.footprint > b.rule_size:
                yield start + b.rule_size, start + b.footprint, "rounding", b

    @property
    def handles(self) -> int:
        """How many physical handles' memory the snapshot holds."""
        return sum(1 for b in self.blocks if is_physical(b))

    @property
    def counted(self) -> str:
        """``3 blocks``, ``3 blocks and 1 physical handle``, ``1 block and 3 pool granules``:
        blocks, then other regions by what they count as, in order of address."""
        counts = {"block": 0}
        for b in self.blocks:
            name = getattr(b, "counted_as", None) or (
                "physical handle" if is_physical(b) else "block")
            counts[name] = counts.get(name, 0) + 1
        parts = [plural(n, name) for name, n in counts.items()]
        return parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} and {parts[-1]}"

    @property
    def used_bytes(self) -> int:
        return self.capacity - self.free_bytes


def component_colors(names: set[str] | list[str]) -> dict[str, str]:
    """A colour per component name, the same in every picture: APP first, then by name."""
    ordered = sorted(set(names), key=lambda n: (n != "APP", n))
    return {n: _COMPONENT_COLORS[i % len(_COMPONENT_COLORS)] for i, n in enumerate(ordered)}


def rows_of(snapshot: MapSnapshot, max_rows: int) -> tuple[int, list[tuple[int, int]]]:
    """(bytes per row, [(first row, row count)] of runs to draw; gaps between are free)."""
    row_bytes = ROW_BYTES
    total_rows = -(-snapshot.capacity // row_bytes)
    used = sorted({r for s, e, _, _ in snapshot.segments()
                   for r in range(s // row_bytes, (e - 1) // row_bytes + 1)})
    while len(used) > max_rows:
        row_bytes *= 2
        total_rows = -(-snapshot.capacity // row_bytes)
        used = sorted({r // 2 for r in used})
    # show used rows, free gaps of up to 2 rows drawn, longer gaps folded
    runs: list[tuple[int, int]] = []
    for r in used:
        if runs and r - (runs[-1][0] + runs[-1][1]) <= 2:
            first, _ = runs[-1]
            runs[-1] = (first, r - first + 1)
        else:
            runs.append((r, 1))
    if not runs:
        runs = [(0, min(total_rows, 4))]
    else:
        # one free row after the last used one, if there is room, to show where free begins
        first, count = runs[-1]
        if first + count < total_rows:
            runs[-1] = (first, count + 1)
    return row_bytes, runs


def allocation_site(block: Block) -> str:
    """Where ``block`` was allocated, one frame a line, innermost last: its recorded stack
    (a replayed trace) or its site (a live runtime recording sites); '' when unknown."""
    extra = block.extra or {}
    stack = extra.get("stack")
    if stack:
        return "\n".join(str(frame) for frame in stack)
    site = block.alloc_site
    return "\n".join(f"{f.filename}:{f.lineno} in {f.name}" for f in site) if site else ""


def _text_width(text: str, font_px: float, *, bold: bool = False) -> float:
    """A generous estimate of ``text``'s width in DejaVu Sans (about 0.62 em a character,
    0.7 em bold), so that text laid out by it is never clipped."""
    return len(text) * font_px * (0.7 if bold else 0.62)


def _wrap(text: str, room: float, font_px: float, *, bold: bool = False) -> list[str]:
    """``text`` cut into lines that fit ``room`` pixels: at "; ", ", " or a space, else
    anywhere (a long file name)."""
    per_line = max(8, int(room / (font_px * (0.7 if bold else 0.62))))
    lines: list[str] = []
    while len(text) > per_line:
        cut = max(text.rfind("; ", 0, per_line), text.rfind(", ", 0, per_line))
        cut = cut + 2 if cut > 0 else text.rfind(" ", 0, per_line) + 1
        if cut <= 0:
            cut = per_line
        lines.append(text[:cut].rstrip())
        text = text[cut:]
    return [*lines, text] if text else lines


def _heading(title: str, subtitle: str, x: float, room: float) -> tuple[list[str], float]:
    """SVG text lines of a bold title and a subtitle, wrapped to ``room`` pixels; and the y
    below them where the rest of the picture may begin."""
    out, y = [], 20.0
    for line in _wrap(title, room, 15, bold=True):
        out.append(f'<text x="{x}" y="{y}" class="title">{html.escape(line)}</text>')
        y += 18
    y -= 2
    for line in _wrap(subtitle, room, 11.5):
        out.append(f'<text x="{x}" y="{y}" class="sub">{html.escape(line)}</text>')
        y += 14
    return out, y


def footprint_edges(snapshot: MapSnapshot, row_bytes: int, *, outlines: bool = False
                    ) -> Iterator[tuple[int, int]]:
    """``(row, offset in the row)`` where each block's footprint begins and ends, for the
    dark edge the SVG map and the PNG draw; an end on a row boundary closes the row above.
    With ``outlines``, where each of the snapshot's ``outlines`` begins and ends."""
    spans = snapshot.outlines if outlines else ((b.ptr, b.footprint) for b in snapshot.blocks)
    for ptr, footprint in spans:
        start = ptr - snapshot.base
        for offset, is_end in ((start, False), (start + footprint, True)):
            r = offset // row_bytes
            if is_end and offset % row_bytes == 0:
                r -= 1
            yield r, offset - r * row_bytes


def segment_label(part: str, block: Block, size: int, room: float) -> str:
    """The words written at the start of a segment (``size`` bytes of ``part``) with room
    for ``room`` characters: a block's requested size and API (the size alone where that
    does not fit; a physical handle's size and pages), or the page rounding left unused;
    "" for padding or where nothing fits."""
    own = getattr(block, "label", None) if part == "data" else None
    if own is not None:
        label = own if len(own) <= room else format_bytes(block.size)
    elif part == "data" and is_physical(block):
        label = f"physical handle, {format_bytes(block.size)}, {block.pages}"
        if len(label) > room:
            label = "physical handle"
    elif part == "data":
        label = f"{format_bytes(block.size)} requested, {block.api.value}"
        if block.extra and block.extra.get("ipc_keys"):
            label += ", IPC export"  # runtime/ipc.py: shared with other processes
        if block.fallback:
            label += ", fallback"
        if len(label) > room:
            label = format_bytes(block.size) + (", fallback" if block.fallback else "")
        if len(label) > room:
            label = format_bytes(block.size)
    elif part == "rounding":
        label = f"page rounding: {format_bytes(size)} unused"
    else:
        return ""
    return label if len(label) <= room else ""


def map_svg(snapshot: MapSnapshot, *, color_by: str = "page", width: int = 760,
            max_rows: int = 160, title: str | None = None) -> str:
    """An SVG memory map: rows of 2 MiB, blocks split into requested / padding / rounding.

    ``color_by`` is ``"page"`` (normal, huge, 1 GiB pages) or ``"component"`` (module).
    Hovering a block shows its description (an SVG ``<title>``). Rows double in size when
    more than ``max_rows`` would be needed; long free stretches fold into one line.
    ``title`` heads the picture (the snapshot's own title then follows in the subtitle);
    long heading lines wrap to the width.
    """
    if color_by not in ("page", "component"):
        raise ValueError(f"color_by must be 'page' or 'component', got {color_by!r}")
    row_bytes, runs = rows_of(snapshot, max_rows)
    left, right, row_h, gap = 78, 14, 16, 3
    bar_w = width - left - right
    scale = bar_w / row_bytes
    comp = component_colors({b.module_name for b in snapshot.blocks})

    def color(b: Block) -> str:
        own = getattr(b, "fill", None)
        if own is not None:
            return cast("str", own)
        if is_physical(b):
            return PHYSICAL_COLOR
        return PAGE_COLORS[b.page.value] if color_by == "page" else comp[b.module_name]

    # the heading: the title, then the snapshot's figures, each wrapped to the width
    heading = f"Memory map: {snapshot.title}" if title is None else title
    grid_note = row_bytes > ROW_BYTES and row_bytes // ROW_BYTES <= 64
    row_note = (f"each row {format_bytes(row_bytes)}"
                + (f", ticks every {format_bytes(ROW_BYTES)}" if grid_note
                   else " (one huge page)"))
    summary = (f"{snapshot.counted} use "
               f"{format_bytes(snapshot.used_bytes)} of "
               f"{format_bytes(snapshot.capacity)}; free {format_bytes(snapshot.free_bytes)}, "
               f"largest free run {format_bytes(snapshot.largest_free_run)}; {row_note}")
    if snapshot.summary is not None:
        summary = f"{snapshot.summary}; {row_note}"
    if title is not None:
        summary = f"Memory map: {snapshot.title}; {summary}"
    head, ly = _heading(heading, summary, left, width - left - right)
    # legend
    if snapshot.legend is not None:
        swatches = list(snapshot.legend)
    elif color_by == "page":
        kinds = sorted({b.page.value for b in snapshot.blocks if not is_physical(b)
                        and getattr(b, "fill", None) is None}) or ["normal", "huge"]
        swatches = [(PAGE_COLORS[k], f"requested, {k} pages") for k in kinds]
    else:
        swatches = [(c, f"component {n}") for n, c in comp.items()]
    if snapshot.legend is None:
        swatches += [(PHYSICAL_COLOR, f"physical handle, {b.pages}")
                     for b in {b.page: b for b in snapshot.blocks if is_physical(b)}.values()]
        # regions of their own kind (a pool's granules): each fill once
        swatches += list(dict.fromkeys((b.fill, b.swatch) for b in snapshot.blocks
                                       if getattr(b, "swatch", None) is not None))
        if snapshot.imports:
            swatches.append((IMPORT_COLOR, "imported from another process"))
        swatches += [(PADDING_COLOR, "padding (size rule, e.g. +32)"),
                     ("url(#rounding)", "page rounding (unused tail of a page)"),
                     (FREE_COLOR, "free")]
    legend = []
    lx: float = left
    for fill, label in swatches:
        if lx > left and lx + 19 + _text_width(label, 11) > width - right:
            lx, ly = left, ly + 18
        legend.append(f'<rect x="{lx}" y="{ly}" width="14" height="12" fill="{fill}" '
                      f'stroke="#555" stroke-width="0.5"/><text x="{lx + 19}" y="{ly + 10}" '
                      f'class="legend">{html.escape(label)}</text>')
        lx += 30 + _text_width(label, 11)
    if any(b.fallback for b in snapshot.blocks):
        if lx + 19 + _text_width(FALLBACK_LABEL, 11) > width - right:
            lx, ly = left, ly + 18
        legend.append(f'<rect x="{lx}" y="{ly}" width="14" height="12" fill="none" '
                      f'stroke="{FALLBACK_COLOR}" stroke-width="2"/><text x="{lx + 19}" '
                      f'y="{ly + 10}" class="legend">{FALLBACK_LABEL}</text>')
    top = ly + 34

    body: list[str] = []
    y = top
    row_y: dict[int, float] = {}
    previous_end = 0
    for first, count in runs:
        if first > previous_end:
            skipped = first - previous_end
            body.append(f'<text x="{left + bar_w / 2}" y="{y + 11}" text-anchor="middle" '
                        f'class="fold">… {format_bytes(skipped * row_bytes)} {snapshot.gap} '
                        f'({offset_label(previous_end * row_bytes)} to '
                        f'{offset_label(first * row_bytes)}) …</text>')
            y += row_h + gap
        for r in range(first, first + count):
            if r * row_bytes >= snapshot.capacity:
                break
            row_y[r] = y
            row_w = min(row_bytes, snapshot.capacity - r * row_bytes) * scale
            body.append(f'<rect x="{left}" y="{y}" width="{row_w:.2f}" height="{row_h}" '
                        f'class="free"/>')
            body.append(f'<text x="{left - 6}" y="{y + 12}" text-anchor="end" class="addr">'
                        f'{offset_label(r * row_bytes)}</text>')
            y += row_h + gap
        previous_end = first + count
    total_rows = -(-snapshot.capacity // row_bytes)
    if previous_end < total_rows:
        body.append(f'<text x="{left + bar_w / 2}" y="{y + 11}" text-anchor="middle" '
                    f'class="fold">… {format_bytes(snapshot.capacity - previous_end * row_bytes)}'
                    f' {snapshot.gap} to the end ({format_bytes(snapshot.capacity)}) …</text>')
        y += row_h + gap
    # the blocks, cut at row boundaries
    on_top: list[str] = []
    for start, end, part, b in snapshot.segments():
        where = allocation_site(b)
        tip = html.escape((getattr(b, "tip", None)
                           or f"{b.describe()}; {b.module_name}; rule size {b.rule_size}, "
                              f"padding {b.padding} B, page rounding {b.page_rounding} B")
                          + ("; fell back to normal pages" if b.fallback else "")
                          + (f"\nallocated at:\n{where}" if where else ""))
        pos = start
        while pos < end:
            r = pos // row_bytes
            stop = min(end, (r + 1) * row_bytes)
            if r in row_y:
                x = left + (pos - r * row_bytes) * scale
                # padding is tiny next to a page: draw it at least 2 px so the rule shows
                w = max((stop - pos) * scale, 2.0 if part == "padding" else 1.0)
                fill = {"data": color(b), "padding": PADDING_COLOR,
                        "rounding": "url(#rounding)"}[part]
                extra = (f' stroke="{FALLBACK_COLOR}" stroke-width="2"'
                         if b.fallback and part == "data" else "")
                # padding goes on top of the page rounding that follows it
                (on_top if part == "padding" else body).append(
                    f'<rect x="{x:.2f}" y="{row_y[r] + 1}" width="{w:.2f}" '
                    f'height="{row_h - 2}" fill="{fill}"{extra}><title>{tip}</title></rect>')
                if part == "rounding":
                    body.append(f'<rect x="{x:.2f}" y="{row_y[r] + 1}" width="{w:.2f}" '
                                f'height="{row_h - 2}" fill="none" stroke="{color(b)}" '
                                f'stroke-width="0.8"/>')
                label = "" if pos != start else segment_label(
                    part, b, end - start, (w - 8) / 5.6)
                if label:
                    cls = "inl" if part == "data" else "inr"
                    body.append(f'<text x="{x + 5:.2f}" y="{row_y[r] + 11.5}" class="{cls}">'
                                f'{html.escape(label)}</text>')
            pos = stop
    body += on_top
    # block boundaries: a dark line where each footprint begins and ends
    for r, at in footprint_edges(snapshot, row_bytes):
        if r in row_y:
            bx = left + at * scale
            body.append(f'<line x1="{bx:.2f}" y1="{row_y[r]}" x2="{bx:.2f}" '
                        f'y2="{row_y[r] + row_h}" class="edge"/>')
    for r, at in footprint_edges(snapshot, row_bytes, outlines=True):
        if r in row_y:
            bx = left + at * scale
            body.append(f'<line x1="{bx:.2f}" y1="{row_y[r] - 1.5}" x2="{bx:.2f}" '
                        f'y2="{row_y[r] + row_h + 1.5}" class="outline"/>')
    # the 2 MiB grid: ticks inside a row when rows are larger than a huge page
    grid: list[str] = []
    if row_bytes > ROW_BYTES and row_bytes // ROW_BYTES <= 64:
        for ry in row_y.values():
            for k in range(1, row_bytes // ROW_BYTES):
                gx = left + k * ROW_BYTES * scale
                grid.append(f'<line x1="{gx:.2f}" y1="{ry}" x2="{gx:.2f}" y2="{ry + row_h}" '
                            f'class="grid"/>')
    y = imports_svg(snapshot.imports, body, left, bar_w, y, row_bytes)
    height = y + 10
    return "\n".join([
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}">',
        "<defs>",
        '<pattern id="rounding" width="6" height="6" patternUnits="userSpaceOnUse" '
        'patternTransform="rotate(45)"><rect width="6" height="6" fill="#FFFFFF"/>'
        '<line x1="0" y1="0" x2="0" y2="6" stroke="#888888" stroke-width="2"/></pattern>',
        f"<style>text{{{_FONT};fill:#222}} .title{{font-size:15px;font-weight:bold}} "
        ".sub{font-size:11.5px;fill:#444} .addr{font-size:10px;fill:#555} "
        ".legend{font-size:11px} .fold{font-size:10.5px;fill:#777;font-style:italic} "
        f".free{{fill:{FREE_COLOR};stroke:#CCCCCC;stroke-width:0.5}} "
        ".grid{stroke:#FFFFFF;stroke-width:1} .inl{font-size:10px;fill:#000} "
        ".edge{stroke:#222222;stroke-width:1} .outline{stroke:#000000;stroke-width:3} "
        ".inr{font-size:10px;fill:#444;font-style:italic}</style>",
        "</defs>",
        f'<rect width="{width}" height="{height}" fill="#FFFFFF"/>',
        *head, *legend, *body, *grid, "</svg>"])


def _nice_step(top: int) -> int:
    """A round tick step (1, 2, 5 x a power of two unit) giving 4 to 8 ticks up to ``top``."""
    unit = 1
    for scale in (1 << 30, 1 << 20, 1 << 10):
        if top >= 4 * scale:
            unit = scale
            break
    for mult in (1, 2, 4, 5, 8, 10, 16, 20, 32, 50, 64, 100, 128, 256, 512, 1024):
        step = mult * unit
        if top / step <= 8:
            return step
    return max(1, top // 8)


def timeline_svg(timeline: Timeline, *, title: str = "Bytes in use", width: int = 760,
                 height: float = 320, show_capacity: bool | None = None) -> str:
    """An SVG stacked-area chart of footprint bytes per component over the event index.

    Failed mallocs are red marks on the axis. The capacity is drawn as a dashed line when it
    is within 4x of the peak (``show_capacity`` forces it on or off).
    """
    names = timeline.components()
    colors = {**component_colors(names), **timeline.colors}
    points = timeline.points
    n_events = max(timeline.events, 1)
    peak = max((sum(by.values()) for _, by in points), default=0)
    cap = timeline.capacity
    if show_capacity is None:
        show_capacity = bool(cap) and cap <= 4 * max(peak, 1)
    top_value = max(peak, cap if show_capacity else 0, 1)
    step = _nice_step(top_value)
    top_value = -(-top_value // step) * step
    left, right, bottom = 78, 20, 42
    sub = f"peak {format_bytes(peak)} over {timeline.events} events"
    if getattr(timeline, "bucket", 1) > 1:
        sub += f"; each point the highest of {timeline.bucket} events"
    sub += "; event N at x = N"
    # the heading wraps to the width; the picture grows by what it takes beyond one line each
    head, legend_y = _heading(title, sub, left, width - left - right)
    top = legend_y + 22
    plot_w, plot_h = width - left - right, height - 56 - bottom
    height = top + plot_h + bottom

    def px(index: float) -> float:
        # the state after event N starts at x = N, where the axis says N (the empty device,
        # index -1, from x = 0)
        return left + max(index, 0) / n_events * plot_w

    def py(value: float) -> float:
        return top + plot_h - value / top_value * plot_h

    # one sample per pixel column at most: keep the column's highest total (peaks survive)
    columns: dict[int, tuple[int, dict[str, int]]] = {}
    for index, by in points:
        col = int(px(index))
        kept = columns.get(col)
        if kept is None or sum(by.values()) >= sum(kept[1].values()):
            columns[col] = (index, by)
    samples = [columns[c] for c in sorted(columns)]
    parts: list[str] = []
    # stacked step areas, largest component at the bottom
    below = [0] * len(samples)
    for name in names:
        upper = [below[i] + samples[i][1].get(name, 0) for i in range(len(samples))]
        outline: list[tuple[float, float]] = []
        for i, (index, _) in enumerate(samples):
            x_next = px(samples[i + 1][0]) if i + 1 < len(samples) else px(n_events)
            outline += [(px(index), py(upper[i])), (x_next, py(upper[i]))]
        back = []
        for i in reversed(range(len(samples))):
            x_next = px(samples[i + 1][0]) if i + 1 < len(samples) else px(n_events)
            back += [(x_next, py(below[i])), (px(samples[i][0]), py(below[i]))]
        coords = " ".join(f"{x:.1f},{y:.1f}" for x, y in outline + back)
        parts.append(f'<polygon points="{coords}" fill="{colors[name]}" fill-opacity="0.85" '
                     f'stroke="{colors[name]}" stroke-width="0.6"><title>{html.escape(name)}'
                     f'</title></polygon>')
        below = upper
    # axes and ticks
    axis = [f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" '
            f'class="axis"/>', f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}" '
            f'class="axis"/>']
    value = 0
    while value <= top_value:
        y = py(value)
        axis.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + plot_w}" y2="{y:.1f}" '
                    f'class="gridline"/><text x="{left - 6}" y="{y + 4:.1f}" '
                    f'text-anchor="end" class="tick">{format_bytes(value)}</text>')
        value += step
    x_step = max(1, _nice_count(n_events))
    index = 0
    while index <= n_events:
        x = left + index / n_events * plot_w
        axis.append(f'<text x="{x:.1f}" y="{top + plot_h + 15}" text-anchor="middle" '
                    f'class="tick">{index}</text>')
        index += x_step
    axis.append(f'<text x="{left + plot_w / 2}" y="{height - 8}" text-anchor="middle" '
                f'class="tick">event number</text>')
    if show_capacity and cap:
        y = py(cap)
        axis.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + plot_w}" y2="{y:.1f}" '
                    f'class="cap"/><text x="{left + plot_w - 4}" y="{y - 4:.1f}" '
                    f'text-anchor="end" class="capt">capacity {format_bytes(cap)}</text>')
    marks = []
    for index in timeline.failures[:200]:
        x = px(index)
        marks.append(f'<path d="M{x:.1f},{top + plot_h - 9} l-5,9 h10 z" class="fail">'
                    f'<title>malloc failed at event {index}</title></path>')
    legend = []
    lx: float = left
    items = [(colors[n], n) for n in names]
    if timeline.failures:
        failed = max(getattr(timeline, "failed", 0), len(timeline.failures))
        items.append(("#C00000", f"failed malloc ({failed})"))
    for fill, label in items:
        if lx + 19 + _text_width(label, 11) > width - right:
            break   # a legend that does not fit stops; each area's name is its tooltip
        legend.append(f'<rect x="{lx}" y="{legend_y}" width="14" height="12" fill="{fill}"/>'
                      f'<text x="{lx + 19}" y="{legend_y + 10}" class="legend">'
                      f'{html.escape(label)}</text>')
        lx += 34 + _text_width(label, 11)
    return "\n".join([
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}">',
        f"<defs><style>text{{{_FONT};fill:#222}} .title{{font-size:15px;font-weight:bold}} "
        ".tick{font-size:10px;fill:#555} .legend{font-size:11px} .sub{font-size:11.5px;fill:#444} "
        ".axis{stroke:#333;stroke-width:1} .gridline{stroke:#E4E4E4;stroke-width:1} "
        ".cap{stroke:#C00000;stroke-width:1.2;stroke-dasharray:6 4} "
        ".capt{font-size:10.5px;fill:#C00000} .fail{fill:#C00000}</style></defs>",
        f'<rect width="{width}" height="{height}" fill="#FFFFFF"/>',
        *head, *legend, *axis[2:], *parts, *axis[:2], *marks, "</svg>"])


def timeline_steps(timeline: Timeline) -> tuple[list[int], dict[str, list[int]]]:
    """The timeline as steps for a plot: x positions and bytes per component.

    The value after event ``i`` holds from x = i (the first point, the empty device, from
    x = 0) to the next change, so event N is drawn at x = N as the axis labels it; the last
    value holds to x = ``timeline.events``, as the SVG draws it, so the last step has its
    width.
    """
    points = timeline.points
    xs = [max(index, 0) for index, _ in points]
    end = max(timeline.events, xs[-1] if xs else 0)
    ys = {name: [by.get(name, 0) for _, by in points] for name in timeline.components()}
    if xs and xs[-1] < end:
        xs.append(end)
        for values in ys.values():
            values.append(values[-1])
    return xs, ys


def stack_svg(*documents: str, gap: int = 12) -> str:
    """One SVG holding ``documents`` (SVG strings, as :func:`map_svg` and
    :func:`timeline_svg` return) as panels, one under another."""
    width: float
    y: float
    panels, width, y = [], 0, 0
    for doc in documents:
        head = re.match(r'\s*<svg [^>]*width="(\d+(?:\.\d+)?)" height="(\d+(?:\.\d+)?)"', doc)
        if head is None:
            raise ValueError("stack_svg takes SVG documents with a width and a height")
        w, h = float(head.group(1)), float(head.group(2))
        panels.append(doc.replace("<svg ", f'<svg x="0" y="{y:g}" ', 1))
        width = max(width, w)
        y += h + gap
    height = max(y - gap, 0)
    return "\n".join([
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:g}" height="{height:g}" '
        f'viewBox="0 0 {width:g} {height:g}">',
        f'<rect width="{width:g}" height="{height:g}" fill="#FFFFFF"/>',
        *panels, "</svg>"])


def _nice_count(n: int) -> int:
    """A round step for event-number ticks (about 8 ticks)."""
    raw = max(1, n // 8)
    magnitude = 10 ** (len(str(raw)) - 1)
    for mult in (1, 2, 5, 10):
        if mult * magnitude >= raw:
            return cast("int", mult * magnitude)
    return raw


def html_page(title: str, *sections: tuple[str, str]) -> str:
    """A self-contained HTML page: (heading, content) sections; content is SVG or text.

    Text content (not starting with ``<svg``) is shown preformatted. No scripts, no links.
    """
    body = []
    for heading, content in sections:
        body.append(f"<h2>{html.escape(heading)}</h2>")
        if content.lstrip().startswith("<svg"):
            body.append(f'<div class="fig">{content}</div>')
        else:
            body.append(f"<pre>{html.escape(content)}</pre>")
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
        f"<title>{html.escape(title)}</title>",
        "<style>body{font-family:DejaVu Sans,Verdana,sans-serif;margin:24px;color:#222;"
        "max-width:900px} h1{font-size:22px} h2{font-size:17px;margin-top:28px} "
        "pre{background:#F6F6F6;padding:10px;overflow-x:auto;font-size:12px} "
        ".fig{border:1px solid #DDD;display:inline-block}</style>",
        "</head>", "<body>", f"<h1>{html.escape(title)}</h1>", *body, "</body>", "</html>", ""])
