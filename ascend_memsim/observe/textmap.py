"""The text map: a device's memory in characters, for terminals (``ascend-memsim map``, the
demo, the HTML page's text section).

A character stands for a power of two of bytes chosen from the span the blocks use
(:func:`text_scale`), so that three 1 GiB blocks and a page of small ones both fill a few
lines; the legend says the scale. Each character shows the strongest content of its bytes
(:data:`TEXT_LEGEND`); a block that starts where the character before is drawn alike starts
with :data:`BOUNDARY_TEXT`; a block smaller than a character keeps a character of its own
and is named under the map.
"""

from __future__ import annotations

from typing import Any

from ..memory.constants import MiB
from ..memory.errors import InvalidArgument
from ..memory.rules import Page
from ..memory.units import format_bytes, plural
from .regions import is_physical

#: a :class:`~.viz.MapSnapshot` (or a map of the same shape, :mod:`.allocmap`): named, not
#: imported, since viz imports this module
MapSnapshot = Any

__all__ = ["text_map", "text_scale", "check_cell", "offset_label", "TEXT_LEGEND",
           "PHYSICAL_TEXT", "POOL_TEXT", "FALLBACK_TEXT", "BOUNDARY_TEXT", "TEXT_LINES",
           "MIN_CELL", "MAX_TEXT_LINES"]


def offset_label(offset: int) -> str:
    """An offset from the device's base as the maps write it: ``+24 MiB``, ``+4 KiB``.

    >>> offset_label(24 << 20), offset_label(3 << 30), offset_label(4096)
    ('+24 MiB', '+3072 MiB', '+4 KiB')
    """
    return f"+{offset // MiB} MiB" if offset % MiB == 0 else f"+{format_bytes(offset)}"


#: Text map characters: the cell's strongest content wins, in this order.
TEXT_LEGEND = (("G", "1 GiB pages"), ("H", "huge pages with requested bytes"),
               ("h", "huge pages holding only padding / page rounding"),
               ("N", "normal-page blocks fill the character"),
               ("n", "normal-page blocks, partly"), (".", "free"))
#: The text map's character for physical memory (shown in the legend when there is some).
PHYSICAL_TEXT = "P"
#: ... and for a stream-ordered pool's granule (with a SharingView)
POOL_TEXT = "M"
#: ... and for normal pages of a block HUGE_FIRST wanted on huge pages (a fallback)
FALLBACK_TEXT = "F"
#: ... and for the character where a block starts right after one drawn alike (three 1 GiB
#: blocks side by side were one run of G)
BOUNDARY_TEXT = "|"
#: About how many lines of the map the span its blocks use takes at the chosen scale.
#: DECISION: 8 lines (512 characters at 64 a line): three 1 GiB blocks are 2 lines each at
#: 8 MiB a character, three 6 MiB blocks (8 MiB footprints) 2 lines each at 64 KiB, fine
#: enough to see a block's data and page rounding apart, short enough for a terminal.
TEXT_LINES = 8
#: The finest scale: 64 bytes a character, the granule every block starts on.
MIN_CELL = 64
#: The most lines the blocks' span may take at a scale given (``cell=``): beyond, the scale
#: is refused (a map of millions of lines helps no one and takes long to make).
MAX_TEXT_LINES = 4096
#: Blocks smaller than a character listed one by one up to this many; more are counted by
#: size (at most this many sizes).
_SMALL_LISTED = 8


def text_scale(snapshot: MapSnapshot, *, columns: int = 64, lines: int = TEXT_LINES) -> int:
    """The bytes a character of :func:`text_map` stands for: the smallest power of two, at
    least :data:`MIN_CELL`, that draws the span the blocks use (from the base to the end of
    the highest footprint; the whole capacity when there is none) in at most ``lines`` lines
    of ``columns``. O(blocks).

    >>> from ascend_memsim import Runtime, GiB
    >>> from ascend_memsim.observe.viz import MapSnapshot
    >>> with Runtime("A2", hbm_bytes=8 * GiB, sanitizer="off") as rt:
    ...     _ = rt.set_device(0)
    ...     _ = [rt.malloc(GiB, 6) for _ in range(3)]     # HUGE1G_ONLY
    ...     format_bytes(text_scale(MapSnapshot.of(rt.device(0))))   # 3 GiB / 512 = 6 MiB
    '8 MiB'

    Raises:
        InvalidArgument: ``columns`` or ``lines`` is not a positive int.
    """
    for name, value in (("columns", columns), ("lines", lines)):
        if value.__class__ is not int or value < 1:
            raise InvalidArgument(f"{name} must be a positive int, not {value!r}")
    span = max((end for _, end, _, _ in snapshot.segments()), default=0) or snapshot.capacity
    cell = MIN_CELL
    while cell * columns * lines < span:
        cell *= 2
    return cell


def check_cell(cell: object) -> None:
    """``cell`` is a scale :func:`text_map` takes: a power of two of at least
    :data:`MIN_CELL` bytes.

    Raises:
        InvalidArgument: it is not.
    """
    if type(cell) is not int or cell < MIN_CELL or cell & (cell - 1):
        raise InvalidArgument(f"a character stands for a power of two of at least "
                              f"{MIN_CELL} bytes, not {cell!r}")


def _cell_char(slot: dict[str, int] | None, cell: int) -> str:
    """The character of a cell holding ``slot`` ({kind + part: bytes}): the strongest
    content wins (physical, pool, 1 GiB, huge-page data, fallback data, huge-page padding
    or rounding alone, normal pages full or partly)."""
    if not slot:
        return "."
    if any(k.startswith(PHYSICAL_TEXT) for k in slot):
        return PHYSICAL_TEXT
    if any(k.startswith(POOL_TEXT) for k in slot):
        return POOL_TEXT
    if any(k.startswith("G") for k in slot):
        return "G"
    if slot.get("Hdata"):
        return "H"
    if slot.get(FALLBACK_TEXT + "data"):
        return FALLBACK_TEXT
    if any(k.startswith("H") for k in slot) and not any(k[0] in "nF" for k in slot):
        return "h"
    normal = sum(v for k, v in slot.items() if k[0] in "nF")
    return "N" if normal >= cell * 0.95 else "n"


def _text_kind(b: Any) -> str:
    return ("P" if is_physical(b) else POOL_TEXT if getattr(b, "counted_as", None)
            == "pool granule" else "G" if b.page is Page.HUGE1G
            else "H" if b.page is Page.HUGE else FALLBACK_TEXT if b.fallback else "n")


def _small_line(small: list[tuple[int, Any]], cell: int) -> str:
    """The legend's line for the blocks smaller than a character: each with where it is,
    or (many) their sizes counted."""
    head = f"smaller than a character ({format_bytes(cell)}), each drawn as one: "
    if len(small) <= _SMALL_LISTED:
        return head + ", ".join(f"{format_bytes(b.size)} at {offset_label(start)}"
                                for start, b in small)
    sizes: dict[int, int] = {}
    for _, b in small:
        sizes[b.size] = sizes.get(b.size, 0) + 1
    shown = sorted(sizes.items(), key=lambda t: (-t[1], t[0]))
    said = ", ".join(f"{n} x {format_bytes(size)}" if n > 1 else format_bytes(size)
                     for size, n in shown[:_SMALL_LISTED])
    more = len(shown) - _SMALL_LISTED
    return (head + f"{len(small)} blocks: {said}"
            + (f" and {plural(more, 'more size')}" if more > 0 else ""))


def text_map(snapshot: MapSnapshot, *, columns: int = 64, cell: int | None = None,
             lines: int = TEXT_LINES) -> str:
    """The device as characters, ``columns`` a line, each standing for ``cell`` bytes
    (default :func:`text_scale`: the span the blocks use in about ``lines`` lines, said in
    the legend); free lines and full lines the same as the one above fold.

    Every block shows: where one of a character or more starts in a character drawn like
    the one before it, that character is :data:`BOUNDARY_TEXT` (``|``: three 1 GiB blocks
    side by side are three runs of G, not one); a block smaller than a character is drawn
    in its own character whatever larger neighbour shares it, and listed under the map
    with its size and place (by size when there are many). Time O(blocks + lines drawn).

    >>> from ascend_memsim import Runtime, MiB
    >>> from ascend_memsim.observe.viz import MapSnapshot
    >>> with Runtime("A2", hbm_bytes=16 * MiB) as rt:
    ...     _ = rt.set_device(0)
    ...     _ = rt.malloc(2 * MiB)       # 2 MiB + 32: a huge page of data, one of padding
    ...     print(text_map(MapSnapshot.of(rt.device(0)), cell=2 * MiB).splitlines()[1])
    +0 MiB      Hh......

    Raises:
        InvalidArgument: ``cell`` is not a power of two of at least :data:`MIN_CELL`
            bytes, or draws the blocks' span in more than :data:`MAX_TEXT_LINES` lines;
            ``columns`` or ``lines`` is not a positive int.
    """
    span = max((end for _, end, _, _ in snapshot.segments()), default=0)
    if columns.__class__ is not int or columns < 1:
        raise InvalidArgument(f"columns must be a positive int, not {columns!r}")
    if cell is None:
        cell = text_scale(snapshot, columns=columns, lines=lines)
        scale = (f"one character = {format_bytes(cell)} (scaled to the "
                 f"{format_bytes(span)} the blocks span)" if span else
                 f"one character = {format_bytes(cell)}")
    else:
        check_cell(cell)
        if -(-span // cell) > MAX_TEXT_LINES * columns:
            raise InvalidArgument(
                f"{format_bytes(cell)} a character draws the {format_bytes(span)} the blocks "
                f"span in more than {MAX_TEXT_LINES} lines: take a larger one")
        scale = f"one character = {format_bytes(cell)}"
    cells = -(-snapshot.capacity // cell)
    # per cell: {kind + part: bytes} of every block, and of the blocks smaller than a cell
    data: dict[int, dict[str, int]] = {}
    small_data: dict[int, dict[str, int]] = {}
    starts: set[int] = set()
    small: list[tuple[int, Any]] = []
    for b in snapshot.blocks:
        start = b.ptr - snapshot.base
        if b.footprint < cell:
            small.append((start, b))
        else:
            # where a block of a character or more starts (a smaller one is listed)
            starts.add(start // cell)
    tiny = {id(b) for _, b in small}
    for start, end, part, b in snapshot.segments():
        key = _text_kind(b) + part
        pos = start
        while pos < end:
            c = pos // cell
            stop = min(end, (c + 1) * cell)
            for into in (data, small_data) if id(b) in tiny else (data,):
                slot = into.setdefault(c, {})
                slot[key] = slot.get(key, 0) + stop - pos
            pos = stop

    drawn: dict[int, str] = {}

    def kind(c: int) -> str:
        return _cell_char(small_data.get(c) or data.get(c), cell)

    def char(c: int) -> str:
        got = kind(c)
        # a block starting where the character before is drawn alike: mark its edge
        if got != "." and c in starts and c > 0 and got == kind(c - 1):
            got = BOUNDARY_TEXT
        drawn[c] = got
        return got

    out = [f"{snapshot.title}: {snapshot.counted}, "
           f"{format_bytes(snapshot.used_bytes)} used of {format_bytes(snapshot.capacity)}, "
           f"largest free run {format_bytes(snapshot.largest_free_run)}"]
    used_rows = {c // columns for c in data}
    folded = repeated = 0
    previous = ""

    def said_repeats() -> None:
        # DECISION: full lines the same as the one above fold as free lines do (three 1 GiB
        # pages were 32 identical lines of G)
        if repeated:
            out.append(f"{'':11} ... {plural(repeated, 'more line')} the same "
                       f"({format_bytes(repeated * columns * cell)}) ...")

    last = max(used_rows, default=0)
    for row in sorted(used_rows | {0}):
        if row > 0 and row - 1 not in used_rows:
            # the free rows before this one (the first drawn always)
            said_repeats()
            repeated, previous = 0, ""
            first_free = max((r for r in used_rows | {0} if r < row), default=0) + 1
            folded += (row - first_free) * columns
        text = "".join(char(c) for c in range(row * columns, min(cells, (row + 1) * columns)))
        if text == previous and len(text) == columns and set(text) != {"."}:
            repeated += 1
            continue
        said_repeats()
        repeated = 0
        if set(text) == {"."} and row > 0:
            folded += len(text)
            previous = ""
            continue
        if folded:
            out.append(f"{'':11} ... {format_bytes(folded * cell)} free ...")
            folded = 0
        out.append(f"{offset_label(row * columns * cell):11} {text}")
        previous = text
    said_repeats()
    folded += max(0, cells - (last + 1) * columns)
    if folded:
        out.append(f"{'':11} ... {format_bytes(folded * cell)} free to the end ...")
    legend: tuple[tuple[str, str], ...] = TEXT_LEGEND
    if snapshot.handles:
        pages = " or ".join(sorted({b.pages for b in snapshot.blocks if is_physical(b)}))
        legend = ((PHYSICAL_TEXT, f"physical handle ({pages})"), *legend)
    if any(getattr(b, "counted_as", None) == "pool granule" for b in snapshot.blocks):
        legend = ((POOL_TEXT, "memory pool granule"), *legend)
    if any(b.fallback for b in snapshot.blocks):
        legend = ((FALLBACK_TEXT, "normal pages of a HUGE_FIRST fallback"), *legend)
    if BOUNDARY_TEXT in drawn.values():
        legend = (*legend, (BOUNDARY_TEXT, "a block starts after one drawn alike"))
    out.append(f"{scale}: " + ", ".join(f"{ch} {label}" for ch, label in legend))
    if small:
        out.append(_small_line(small, cell))
    out += [f"mapped from another process: {entry.label}" for entry in snapshot.imports]
    return "\n".join(out)
