"""A close-up of one block: its requested bytes, the size rule's padding (the +32) and the
page rounding, whole and magnified where the request ends, with the rules that made each.

At the scale of a memory map the padding of ``aclrtMalloc`` is invisible: 32 bytes of a
4 MiB footprint are 1/131,072 of it. The close-up draws the footprint twice: whole, to
scale; and a window of :data:`WINDOW` bytes around the end of the request, where 32 bytes
take an eighth of the bar. Under the bars stand the steps of
:func:`~ascend_memsim.memory.explain.explain` that made this footprint, each with its
source. DECISION: a close-up of one chosen block rather than a second, byte-scale map: the
padding is a property of each block, and one block with its reasons teaches the rule.

:func:`closeup_of` finds the block an event of a trace allocated (``ascend-memsim plot TRACE
--zoom EVENT``); :func:`closeup_svg` draws it; :mod:`.png` draws the same with matplotlib.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any

from ..memory.device import Block
from ..memory.errors import AclError, InvalidArgument
from ..memory.explain import explain
from ..memory.rules import PAGE_BYTES
from ..memory.units import format_bytes
from .replay import Source, replay
from .stream import records
from .viz import _FONT, FALLBACK_COLOR, PADDING_COLOR, PAGE_COLORS, _heading, _wrap

__all__ = ["Closeup", "closeup_of", "closeup_svg", "WINDOW"]

#: bytes the magnified bar shows: the last bytes of the request, the padding, the start of
#: the page rounding
WINDOW = 256
_BEFORE = 96
#: (part, fill, word) of the parts of a footprint
PART_WORDS = {"data": "requested", "padding": "padding (size rule)",
              "rounding": "page rounding"}


@dataclass
class Closeup:
    """One block to draw close up: ``block`` (a :class:`~ascend_memsim.memory.device.Block`),
    the ``product`` whose rules placed it and the ``event`` that allocated it (or None)."""

    block: Block
    product: str
    event: int | None = None

    @property
    def title(self) -> str:
        b = self.block
        made = f", allocated by event {self.event}" if self.event is not None else ""
        return (f"Close-up of a block on {self.product}{made}: {format_bytes(b.size)} "
                f"requested ({b.api.value}), footprint {format_bytes(b.footprint)}")

    def parts(self) -> list[tuple[int, int, str]]:
        """(first byte, end, part) of the footprint: "data", "padding", "rounding"."""
        b = self.block
        out = [(0, b.size, "data")]
        if b.rule_size > b.size:
            out.append((b.size, b.rule_size, "padding"))
        if b.footprint > b.rule_size:
            out.append((b.rule_size, b.footprint, "rounding"))
        return out

    def window(self) -> tuple[int, int]:
        """The bytes [first, end) the magnified bar shows: :data:`WINDOW` bytes from a little
        before the end of the request (the whole footprint when it is smaller)."""
        b = self.block
        first = max(0, min(b.size - _BEFORE, b.footprint - WINDOW))
        return first, min(b.footprint, first + WINDOW)

    def why(self) -> list[str]:
        """The rules that made the footprint, one a line, each with its source (the steps of
        :func:`~ascend_memsim.memory.explain.explain` for this block's page), then the sum."""
        b = self.block
        lines: list[str] = []
        try:
            explanation = explain(b.size, b.policy, product=self.product, api=b.api)
            steps = explanation.steps + explanation.fallback
        except AclError:   # a request explain refuses: the figures alone
            steps = ()
        page = b.page.value
        for step in steps:
            text = step.text
            if text.startswith(("size rule", "pages:")):
                lines.append(f"{text}  [{step.rule}]")
            elif text.startswith(f"fallback, {page} pages:" if b.fallback else f"{page} pages:"):
                lines.append(f"{text}  [{step.rule}]")
        if b.fallback:
            lines.append("HUGE_FIRST fell back: no free 2 MiB huge page could be had, so "
                         "normal pages")
        more = b.footprint - b.size
        lines.append(f"=> {b.footprint:,} bytes for {b.size:,} requested: {b.padding:,} B "
                     f"padding + {b.page_rounding:,} B page rounding"
                     + (f" ({100 * more / b.size:.4g}% more than asked)" if b.size else ""))
        return lines


class _At:
    """A trace source for :func:`replay` that is also its observer: it keeps the block the
    event numbered ``index`` allocated."""

    def __init__(self, source: Source, index: int) -> None:
        self.source, self.index = source, index
        self.name, self.header = source.name, source.header
        self.now = -1
        self.kind: Any = None
        self.block: Block | None = None

    @property
    def problems(self) -> list[str]:
        return self.source.problems

    def records(self, progress: Any = None) -> Any:
        for now, event in enumerate(records(self.source, progress)):
            self.now = now
            if now == self.index:
                self.kind = event.kind
            yield event

    def __call__(self, event: str, device: Any, info: dict[str, Any]) -> None:
        if event == "malloc" and self.now == self.index and self.kind == "malloc":
            self.block = info["block"]


def closeup_of(source: Source, index: int, product: str | None = None, *,
               capacity: int | None = None, policy: int | None = None) -> Closeup:
    """The block event ``index`` of ``source`` allocated, replayed as :func:`replay` would
    (``product``, ``capacity`` and ``policy`` as there). One pass over the trace up to
    the event.

    Raises:
        InvalidArgument: ``index`` is not the number of an event that allocated a block.
    """
    if type(index) is not int or index < 0:
        raise InvalidArgument(f"--zoom takes an event number (0 or more), got {index!r}")
    at = _At(source, index)
    # a duck-typed source (name, header, records), as replay reads one
    result = replay(at, product, capacity=capacity,  # type: ignore[arg-type]
                    policy=policy, stop_after=index, observers=[at])
    if at.block is None:
        what = ("the trace has fewer events" if at.now < index else
                f"it is a {at.kind} event" if at.kind != "malloc" else
                "its malloc failed here")
        raise InvalidArgument(f"--zoom {index}: event {index} of {source.name} allocated no "
                              f"block ({what}); give the number of a malloc event (the "
                              f"player and the timeline show them)")
    return Closeup(at.block, result.product, index)


def closeup_svg(closeup: Closeup, *, width: int = 760) -> str:
    """The close-up as an SVG: the whole footprint to scale, the magnified window with a
    tick every 32 bytes, and the rules (see the module docstring)."""
    b = closeup.block
    left, right = 20, 20
    bar_w = width - left - right
    fill = PAGE_COLORS[b.page.value]
    fills = {"data": fill, "padding": PADDING_COLOR, "rounding": "url(#closeup-rounding)"}
    head, y = _heading(closeup.title, "whole footprint, to scale; then the bytes around the "
                       "end of the request, magnified", left, bar_w)
    body: list[str] = []
    # the whole footprint, to scale (padding at least 2 px, so it shows where it is)
    pages = b.footprint // PAGE_BYTES[b.page]
    words = (f"requested {b.size:,} B; padding {b.padding:,} B; page rounding "
             f"{b.page_rounding:,} B; footprint {b.footprint:,} B = {pages:,} "
             f"{b.page.value} page{'s' * (pages != 1)} of {format_bytes(PAGE_BYTES[b.page])}")
    body.append(f'<text x="{left}" y="{y + 12}" class="fig">{html.escape(words)}</text>')
    y += 22
    scale = bar_w / b.footprint
    for start, end, part in closeup.parts():
        w = max((end - start) * scale, 2.0 if part == "padding" else 1.0)
        outline = (f' stroke="{FALLBACK_COLOR}" stroke-width="2"' if part == "data" and
                   b.fallback else ' stroke="#555" stroke-width="0.5"')
        body.append(f'<rect x="{left + start * scale:.2f}" y="{y}" width="{w:.2f}" '
                    f'height="18" fill="{fills[part]}"{outline}/>')
    first, end = closeup.window()
    wx0, wx1 = left + first * scale, left + end * scale
    body.append(f'<rect x="{wx0:.2f}" y="{y - 2}" width="{max(wx1 - wx0, 3):.2f}" '
                f'height="22" fill="none" stroke="#000" stroke-width="1.2"/>')
    # the window, magnified
    top = y + 50
    zoom = bar_w / (end - first)
    body.append(f'<path d="M{wx0:.2f},{y + 20} L{left},{top} M{wx1:.2f},{y + 20} '
                f'L{left + bar_w},{top}" stroke="#888" stroke-dasharray="3 3" fill="none"/>')
    for start, stop, part in closeup.parts():
        a, z = max(start, first), min(stop, end)
        if a >= z:
            continue
        x = left + (a - first) * zoom
        outline = (f' stroke="{FALLBACK_COLOR}" stroke-width="2"' if part == "data" and
                   b.fallback else ' stroke="#555" stroke-width="0.5"')
        body.append(f'<rect x="{x:.2f}" y="{top}" width="{(z - a) * zoom:.2f}" height="26" '
                    f'fill="{fills[part]}"{outline}/>')
        label = (f"+{stop - start} B padding" if part == "padding" else PART_WORDS[part])
        if 0.6 * 10.5 * len(label) + 8 <= (z - a) * zoom:
            body.append(f'<text x="{x + 4:.2f}" y="{top + 17}" class="inl">'
                        f'{html.escape(label)}</text>')
    step = 32
    for offset in range(-(-first // step) * step, end + 1, step):
        x = left + (offset - first) * zoom
        # the labels at the ends stay inside the picture
        anchor = "start" if x < left + 30 else "end" if x > left + bar_w - 30 else "middle"
        body.append(f'<line x1="{x:.2f}" y1="{top + 26}" x2="{x:.2f}" y2="{top + 31}" '
                    f'stroke="#333"/><text x="{x:.2f}" y="{top + 42}" text-anchor="{anchor}" '
                    f'class="tick">{offset:,}</text>')
    body.append(f'<text x="{left}" y="{top + 56}" class="fig">bytes {first:,} to {end:,} of '
                f'the block, a tick every {step} B</text>')
    y = top + 76
    for line in closeup.why():
        for part in _wrap(line, bar_w, 11):
            body.append(f'<text x="{left}" y="{y}" class="why">{html.escape(part)}</text>')
            y += 15
    height = y + 4
    return "\n".join([
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}">',
        '<defs><pattern id="closeup-rounding" width="6" height="6" '
        'patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="6" '
        'height="6" fill="#FFFFFF"/><line x1="0" y1="0" x2="0" y2="6" stroke="#888888" '
        'stroke-width="2"/></pattern>',
        f"<style>text{{{_FONT};fill:#222}} .title{{font-size:15px;font-weight:bold}} "
        ".sub{font-size:11.5px;fill:#444} .fig{font-size:11.5px} .tick{font-size:9.5px;"
        "fill:#555} .inl{font-size:10.5px;fill:#000} .why{font-size:11px;fill:#222}</style>",
        "</defs>", f'<rect width="{width}" height="{height}" fill="#FFFFFF"/>',
        *head, *body, "</svg>"])
