"""An interactive trace player: one self-contained HTML page to step through a trace.

:func:`save_player` replays a trace on each of a few products (A2 and 950PR by default) in
Python and writes one HTML page that holds the result as JSON, its script and its styles
inline (no network, no external file: a Content-Security-Policy forbids both). In a browser
the page shows, per product side by side (on one capacity), the memory map and the timeline,
with a slider over the events; the peak and the first failing event are marked; hovering a
block shows its size, footprint and the rules that made it, page, API, component and the call
stack that allocated it (when the trace has stacks); under each map, a close-up of the block
the event allocated (or the one clicked) shows its padding magnified (:mod:`.closeup`).
Fallback blocks are outlined. A product switch above each panel replays the same trace on
another product.

What the page holds is bounded: per product, each allocation of the drawn device once
(offset, sizes, page, API, stack number) and each change as two integers; the script
rebuilds the map at event N from the changes, forward or back, in time proportional to the
changes between the two events. Beyond :data:`MAX_EVENTS` events the slider covers the
first ones only (the page says so); the timeline covers the whole trace (at most ~2,000
points, the replay's own). Stacks are cut to :data:`FRAMES` frames of :data:`FRAME_CHARS`
characters, and at most :data:`STACK_CHARS` characters of stacks are kept in all.

Text from the trace (file name, stack frames) is data: the JSON escapes ``<``, ``>`` and
``&`` so nothing closes the script element, and the script writes text only through
``textContent`` and attributes, never as markup.
"""

from __future__ import annotations

import html
import json
import sys
from importlib import resources
from typing import Any

from ..memory.constants import MODULE_APP
from ..memory.errors import InvalidArgument
from ..memory.profiles import get_profile
from ..memory.rules import Api, Page, PhysicalApi
from ..memory.units import format_bytes
from .regions import PHYSICAL_COLOR
from .replay import ReplayResult, Source, replay
from .sharedmap import CACHED_COLOR, POOL_COLOR, import_change
from .stream import records
from .viz import FALLBACK_LABEL, PADDING_COLOR, PAGE_COLORS, ROW_BYTES, MapSnapshot, map_svg

__all__ = ["save_player", "player_html", "player_data", "products_for", "PRODUCTS",
           "MAX_EVENTS", "FRAMES", "FRAME_CHARS", "STACK_CHARS"]

#: the products a page replays when none are named
PRODUCTS = ("A2", "950PR")
#: the slider covers at most this many events (the timeline covers them all). DECISION: a
#: page of about 7 MiB for 100,000 events with stacks, which a browser opens in a second or
#: two; beyond, the first events rather than a sample, so that every change is there.
MAX_EVENTS = 100_000
#: a map has at most this many rows (rows double in size beyond)
MAX_ROWS = 96
#: frames kept of a stack (the innermost), characters kept of a frame
FRAMES = 24
FRAME_CHARS = 240
#: characters of stack frames a page holds in all; later stacks are left out (and said so)
STACK_CHARS = 2_000_000

_PAGES = {Page.NORMAL: 0, Page.HUGE: 1, Page.HUGE1G: 2}
#: the APIs of blocks, then aclrtMallocPhysical (a physical handle's memory, drawn apart),
#: then a stream-ordered pool's granule holding a block, and one cached (each its own colour)
_APIS = [*(api.value for api in Api), PhysicalApi.MALLOC_PHYSICAL.value,
         "aclrtMemPoolMallocAsync", "memory pool, cached"]
_PHYSICAL = len(_APIS) - 3
_POOL_BLOCK, _POOL_CACHED = len(_APIS) - 2, len(_APIS) - 1
_GRANULE = ROW_BYTES   # a pool's granule (runtime/pools.py): 2 MiB, one row
_PAGE_OF = {"huge": Page.HUGE, "huge1g": Page.HUGE1G}
_KIND = {"malloc": "m", "free": "f", "malloc_failed": "x", "reset": "r"}


class _Counting:
    """A trace source for :func:`replay` that knows which event is being replayed (a
    stream in the sense of :func:`~ascend_memsim.observe.stream.records`)."""

    def __init__(self, source: Source, kinds: list[str] | None, limit: int) -> None:
        self.source = source
        self.name = source.name
        self.header = source.header
        self.index = -1
        self.event: Any = None
        self.kinds = kinds
        self.limit = limit

    @property
    def problems(self) -> list[str]:
        return self.source.problems

    def records(self, progress: Any = None) -> Any:
        kinds, limit = self.kinds, self.limit
        for index, event in enumerate(records(self.source, progress)):
            self.index, self.event = index, event
            if kinds is not None and index < limit:
                kinds.append(_KIND.get(event.kind, "."))
            yield event
        # what happens after the last event (the replay closing its runtime) is not drawn
        self.index = sys.maxsize


class _Stacks:
    """The stacks a page holds: each distinct stack once, cut to size, within a budget."""

    def __init__(self) -> None:
        self.ids: dict[tuple[Any, ...], int] = {}
        self.table: list[list[str]] = []
        self.chars = 0
        self.left_out = 0

    def id_of(self, stack: Any) -> int:
        if type(stack) is not tuple or not stack:
            return -1
        found = self.ids.get(stack)
        if found is not None:
            return found
        frames = [str(f) if len(str(f)) <= FRAME_CHARS else str(f)[:FRAME_CHARS] + " …"
                  for f in stack[-FRAMES:]]
        if len(stack) > FRAMES:
            frames.insert(0, f"… {len(stack) - FRAMES} outer frames left out")
        size = sum(len(f) for f in frames)
        if self.chars + size > STACK_CHARS:
            self.left_out += 1
            self.ids[stack] = -2
            return -2
        self.chars += size
        self.ids[stack] = len(self.table)
        self.table.append(frames)
        return len(self.table) - 1


def _replay_one(source: Source, product: str, stacks: _Stacks, kinds: list[str] | None,
                limit: int, device: int | None, capacity: int | None,
                policy: int | None) -> tuple[dict[str, Any], int | None]:
    """One product's replay, with what the page draws of it; and the device drawn."""
    counting = _Counting(source, kinds, limit)
    blocks: list[list[int]] = []
    ops: list[int] = []
    live: dict[int, int] = {}
    drawn = device
    state: dict[str, Any] = {}
    #: (pool, va) -> phys of each pool granule; [opened at, closed at or -1, label] imports
    granules: dict[tuple[int, int], int] = {}
    imports: list[list[Any]] = []
    open_imports: dict[tuple[Any, ...], list[Any]] = {}

    def granule(index: int, phys: int, api: int, size: int) -> None:
        """(Re)draw a pool granule: the block it holds now (its bytes in it), or cached."""
        number = live.pop(phys, None)
        if number is not None:
            ops.extend((index, -(number + 1)))
        live[phys] = len(blocks)
        ops.extend((index, len(blocks) + 1))
        blocks.append([index, phys - state["base"], size, size, _GRANULE, _PAGES[Page.HUGE],
                       api, MODULE_APP, -1, 0])

    def pooled(index: int, event: str, info: dict[str, Any]) -> None:
        """A pool block handed out or given back: its granules redrawn."""
        pool, ptr, size, footprint = (info.get(k) for k in ("pool", "ptr", "size",
                                                               "footprint"))
        if not (type(pool) is type(ptr) is type(size) is type(footprint) is int):
            return
        # no block holds more granules than the pools have (a trace's figure is data)
        for va in range(ptr, ptr + min(footprint, len(granules) * _GRANULE), _GRANULE):
            phys = granules.get((pool, va))
            if phys is None:
                continue
            if event == "mem_pool_malloc":
                granule(index, phys, _POOL_BLOCK, max(0, min(size - (va - ptr), _GRANULE)))
            else:
                granule(index, phys, _POOL_CACHED, _GRANULE)

    def observe(event: str, dev: Any, info: dict[str, Any]) -> None:
        nonlocal drawn
        index = counting.index
        if index >= limit:
            return
        if drawn is None and event in ("malloc", "malloc_physical", "ipc_import",
                                       "shareable_import"):
            drawn = dev.device_id
        if dev.device_id != drawn:
            return
        main = state.get("main")
        if main is None:
            main = state["main"] = dev.profile.main_memory
            alloc = dev.allocators[main]
            state["base"], state["capacity"] = alloc.base, alloc.capacity
        if event == "malloc":
            b = info["block"]
            if b.memory is not main:
                return
            live[b.ptr] = len(blocks)
            ops.extend((index, len(blocks) + 1))
            e = counting.event
            blocks.append([index, b.ptr - state["base"], b.size, b.rule_size, b.footprint,
                           _PAGES[b.page], _APIS.index(b.api.value), b.module,
                           stacks.id_of(getattr(e, "stack", None)), int(b.fallback)])
        elif event in ("ipc_import", "shareable_import", "ipc_close", "shareable_release"):
            key, opened = import_change(event, info)
            if key is not None and opened is not None:
                open_imports[key] = entry = [index, -1, opened.label]
                imports.append(entry)
            elif key is not None and key in open_imports:
                open_imports.pop(key)[1] = index
        elif event in ("mem_pool_malloc", "mem_pool_free"):
            pooled(index, event, info)
        elif event == "malloc_physical" and type(info.get("pool")) is int and \
                type(info.get("va")) is int and info.get("footprint") == _GRANULE:
            granules[(info["pool"], info["va"])] = info["phys"]
            granule(index, info["phys"], _POOL_CACHED, _GRANULE)
        elif event == "malloc_physical":
            # a physical handle's memory, in the same heap (memory/vmm.py): size as asked, no
            # padding, the rest of its pages as page rounding
            live[info["phys"]] = len(blocks)
            ops.extend((index, len(blocks) + 1))
            blocks.append([index, info["phys"] - state["base"], info["size"], info["size"],
                           info["footprint"], _PAGES[_PAGE_OF.get(info["page"], Page.HUGE)],
                           _PHYSICAL, MODULE_APP, -1, 0])
        elif event == "free_physical":
            if type(info.get("pool")) is int:
                # (an event without a va finds nothing to drop)
                granules.pop((info["pool"], info.get("va")), None)  # type: ignore[arg-type]
            number = live.pop(info["phys"], None)
            if number is not None:
                ops.extend((index, -(number + 1)))
        elif event in ("free", "reset"):
            for b in ([info["block"]] if event == "free" else info["blocks"]):
                number = live.pop(b.ptr, None)
                if number is not None:
                    ops.extend((index, -(number + 1)))

    # a duck-typed source (name, header, records), as replay reads one
    result = replay(counting, product,  # type: ignore[arg-type]
                    capacity=capacity, policy=policy, timeline=True, observers=[observe])
    if "capacity" not in state:
        state["capacity"] = result.capacity
    row_bytes, lines = _layout(blocks, state["capacity"])
    panel = _product(result, state["capacity"], blocks, ops, row_bytes, lines)
    panel["imports"] = imports[:1000]
    return panel, drawn


def _product(result: ReplayResult, capacity: int, blocks: list[Any], ops: list[Any], row_bytes: int,
             lines: list[Any]) -> dict[str, Any]:
    timeline = result.timeline
    assert timeline is not None
    failure = result.first_failure
    return {
        "product": result.product, "capacity": capacity, "row_bytes": row_bytes,
        "capacity_note": result.capacity_note,
        "lines": lines, "blocks": blocks, "ops": ops,
        "peak": [result.peak_index, result.peak_bytes],
        "failures": timeline.failures[:200], "failed": result.failures,
        "first_failure": None if failure is None else {
            "index": failure.index, "message": failure.message.splitlines()[0]
            if failure.message else ""},
        "timeline": [[index, sum(by.values())] for index, by in timeline.points],
        "bucket": timeline.bucket, "mallocs": result.mallocs, "frees": result.frees,
        "events": result.total,
    }


def _layout(blocks: list[list[int]], capacity: int) -> tuple[int, list[list[int]]]:
    """(bytes per row, lines): [0, row] for a row drawn, [1, first, end] for a folded free
    stretch of rows [first, end): every row any block ever touched, rows doubled while more
    than MAX_ROWS are in use (as the SVG map). O(blocks log blocks)."""
    spans = sorted((b[1] // ROW_BYTES, (b[1] + b[4] - 1) // ROW_BYTES) for b in blocks)
    row_bytes = ROW_BYTES
    while True:
        merged: list[list[int]] = []
        for first, last in spans:
            if merged and first <= merged[-1][1] + 1:
                merged[-1][1] = max(merged[-1][1], last)
            else:
                merged.append([first, last])
        if sum(last - first + 1 for first, last in merged) <= MAX_ROWS:
            break
        row_bytes *= 2
        spans = [(first // 2, last // 2) for first, last in merged]
    total = -(-capacity // row_bytes)
    runs: list[list[int]] = []
    for first, last in merged:   # free gaps of up to 2 rows drawn, longer ones folded
        if runs and first - runs[-1][1] <= 3:
            runs[-1][1] = last
        else:
            runs.append([first, last])
    if not runs:
        runs = [[0, min(total, 4) - 1]]
    elif runs[-1][1] + 1 < total:
        runs[-1][1] += 1   # one free row after the last used one, where free begins
    lines: list[list[int]] = []
    end = 0
    for first, last in runs:
        if first > end:
            lines.append([1, end, first])
        lines += [[0, r] for r in range(first, min(last, total - 1) + 1)]
        end = last + 1
    if end < total:
        lines.append([1, end, total])
    return row_bytes, lines


def player_data(source: Source, products: tuple[str, ...] | list[str] | None = None, *,
                capacity: int | None = None, policy: int | None = None,
                device: int | None = None, max_events: int = MAX_EVENTS) -> dict[str, Any]:
    """What the page draws: one replay of ``source`` per product (see the module docstring).

    ``device`` is the device drawn (DECISION: by default the first one a block is
    allocated on, since most traces use one device; the page says which).
    ``capacity`` and ``policy`` are passed to each replay. DECISION: without a
    ``capacity`` every product replays on the first one's (the capacity the trace records,
    as ``replay`` takes it on any product, else the first product's own), so that the panels
    differ by the rules alone, not by the size of the device. Time O(products x replay);
    memory O(allocations of the first ``max_events`` events + timeline points + stacks).

    Raises:
        InvalidArgument: an unknown product, no product, or a bad ``max_events``.
    """
    names = list(products or PRODUCTS)
    if not names:
        raise InvalidArgument("the player needs at least one product")
    names = list(dict.fromkeys(get_profile(p).name for p in names))
    if not isinstance(max_events, int) or isinstance(max_events, bool) or max_events < 1:
        raise InvalidArgument(f"max_events must be a positive int, got {max_events!r}")
    stacks = _Stacks()
    kinds: list[str] = []
    panels = []
    drawn = device
    for i, name in enumerate(names):
        panel, found = _replay_one(source, name, stacks, kinds if i == 0 else None,
                                   max_events, drawn, capacity, policy)
        drawn = found if drawn is None else drawn
        panels.append(panel)
        if capacity is None:
            capacity = panel["capacity"]   # the others compare on the first one's
    events = max(p["events"] for p in panels)
    return {
        "name": str(source.name), "events": events, "shown": min(events, max_events),
        "device": drawn or 0, "kinds": "".join(kinds), "products": panels,
        "apis": _APIS, "modules": _module_names(), "stacks": stacks.table,
        "stacks_left_out": stacks.left_out,
        "colors": {"pages": [PAGE_COLORS[p.value] for p in _PAGES], "padding": PADDING_COLOR,
                   "physical": PHYSICAL_COLOR},
        "fallback_label": FALLBACK_LABEL,
        "physical_api": _PHYSICAL,
        # a pool's granules: their own colours by api
        "fills": {str(_POOL_BLOCK): POOL_COLOR, str(_POOL_CACHED): CACHED_COLOR},
    }


def _module_names() -> dict[str, str]:
    from ..memory.constants import MODULE_NAMES

    return {str(k): v for k, v in MODULE_NAMES.items()}


def _asset(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


def _script_json(data: dict[str, Any]) -> str:
    """``data`` as JSON safe inside a ``<script>`` element: no ``<``, ``>`` or ``&`` (so no
    ``</script>`` or ``<!--``), and no U+2028/2029 (``ensure_ascii``)."""
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=True)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def player_html(source: Source, products: tuple[str, ...] | list[str] | None = None, *,
                allocator: MapSnapshot | None = None, **options: Any) -> str:
    """The player page for ``source`` (see :func:`player_data` for the options;
    ``allocator`` as for :func:`save_player`)."""
    return _page(player_data(source, products, **options), allocator)


def _allocator_section(allocator: MapSnapshot | None) -> list[str]:
    """A caching allocator's segments (:func:`~ascend_memsim.observe.allocmap.allocator_map`)
    as a still picture under the panels: the slider does not move it."""
    if allocator is None:
        return []
    return ['<section id="allocator"><h2>The caching allocator</h2><p class="note">'
            "A still picture: the segments and the blocks in them, not moved by the slider."
            f'</p><div class="fig">{map_svg(allocator)}</div></section>']


def _page(data: dict[str, Any], allocator: MapSnapshot | None = None) -> str:
    title = f"{data['name']}: trace player"
    note = (f"The slider covers the first {data['shown']:,} of {data['events']:,} events; "
            f"the timeline covers them all." if data["shown"] < data["events"] else "")
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
        # nothing from the network, no script or style but the page's own
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:\">",
        f"<title>{html.escape(title)}</title>",
        f"<style>{_asset('player.css')}</style>", "</head>", "<body>",
        f'<header><h1>{html.escape(title)}</h1><p class="note">{html.escape(note)}</p>'
        "</header>",
        '<div id="controls"><button id="prev" title="previous event (←)">◀</button>'
        '<input id="slider" type="range" min="0" value="0" step="1" '
        'aria-label="event number">'
        '<button id="next" title="next event (→)">▶</button>'
        '<button id="play">play</button><button id="to-peak">peak</button>'
        '<button id="to-failure">first failure</button>'
        '<span id="event-label"></span></div>',
        '<div id="what"></div>', '<div id="panels"></div>', *_allocator_section(allocator),
        '<div id="tip" role="tooltip"></div>',
        '<footer>Footprint: the bytes a block occupies (requested + padding + page rounding). '
        "Hover a block for its allocation; use the menu above a panel to replay the trace on "
        "another product. Made by ascend-memsim.</footer>",
        f'<script type="application/json" id="memsim-data">{_script_json(data)}</script>',
        f"<script>{_asset('player.js')}</script>", "</body>", "</html>", ""])


def products_for(first: str | None) -> list[str]:
    """The products a page compares by default: ``first`` (A2 when None) and 950PR, or A2
    when ``first`` is 950PR.

    Raises:
        InvalidArgument: an unknown product.
    """
    # DECISION: the newest product beside the one recorded on, so that the rules that
    # changed between them (the +32 padding, page rounding) show side by side
    name = get_profile(first or "A2").name
    return [name, "A2" if name == "950PR" else "950PR"]


def save_player(path: str, source: Source, products: tuple[str, ...] | list[str] | None = None,
                *, allocator: MapSnapshot | None = None, **options: Any) -> dict[str, Any]:
    """Write the player page for ``source`` to ``path`` (options as :func:`player_data`);
    ``allocator``, a caching allocator's segments
    (:func:`~ascend_memsim.observe.allocmap.allocator_map`), goes under the panels as a still
    picture.

    Returns a summary: ``path``, ``bytes`` written, ``events``, ``shown`` (events the slider
    covers), ``products`` and ``summary``, a line saying them.
    """
    data = player_data(source, products, **options)
    page = _page(data, allocator)
    encoded = page.encode("utf-8")
    with open(path, "wb") as f:
        f.write(encoded)
    first = data["products"][0]
    # the capacity every panel replays on, and why (the first product's replay decided it)
    note = first["capacity_note"] if options.get("capacity") is None else "as given"
    summary = (f"{data['events']:,} events on " + " and ".join(
        p["product"] for p in data["products"]) + f" on {format_bytes(first['capacity'])} "
        f"{note}, {format_bytes(len(encoded))}")
    if data["shown"] < data["events"]:
        summary += f"; the slider covers the first {data['shown']:,} events"
    return {"path": path, "bytes": len(encoded), "events": data["events"],
            "shown": data["shown"], "products": [p["product"] for p in data["products"]],
            "summary": summary}
