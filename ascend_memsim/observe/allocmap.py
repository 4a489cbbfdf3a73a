"""The caching allocator's segments and the blocks inside them, as memory maps and a timeline.

A torch / torch_npu memory snapshot's ``segments`` (``torch.npu.memory._snapshot()``, a file
``_dump_snapshot`` wrote, or :meth:`NpuCachingAllocator.memory_snapshot`) each hold their
``blocks`` with a ``state`` (``pytorch/pytorch`` ``torch/cuda/memory.py`` ``_snapshot``;
``Ascend/pytorch`` ``torch_npu/csrc/npu/Module.cpp`` memorySnapshot). The map draws each
block in its segment, coloured by what it is:

- **allocated** (``active_allocated``): a tensor's block; its requested bytes in colour, the
  allocator's rounding (the +32 pad, 512-byte steps, a rest too small to split off) after
  it in the padding colour;
- **pending free** (``active_pending_free``): freed, waiting for the events of the streams
  that used it (``record_stream``);
- **inactive split** (``inactive`` in a segment with other blocks): a free block the
  allocator cannot give back, since its segment is partly in use;
- **cached** (``inactive``, the whole segment): a free segment ``empty_cache`` would return.

So "reserved but unallocated" is the cached, inactive split and pending-free area. The map
reads as the device map of :mod:`.viz` reads (rows of 2 MiB, long stretches folded), its
addresses the segments' own (device addresses, or the reserved virtual range of expandable
segments); memory between segments is "not reserved" by the allocator.

:class:`AllocatorPictures` watches a tensor replay
(:func:`~ascend_memsim.observe.tensor_replay.replay_tensors`) for the timeline of these four
quantities and the maps at the peak of reserved bytes and at the first out-of-memory error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..memory.rules import Page
from ..memory.units import format_bytes, plural
from .plain import safe_unpickle
from .snapshot import _stack, is_snapshot, loads_json
from .timeline import Timeline, _Timeline
from .trace import _open_file
from .viz import FREE_COLOR, PADDING_COLOR, ROW_BYTES, MapSnapshot

__all__ = ["AllocatorBlock", "allocator_map", "state_counts", "AllocatorPictures",
           "read_snapshot_file", "STATES", "STATE_COLORS"]

#: The block states drawn, in stacking order (the timeline's, bottom first).
STATES = ("allocated", "pending free", "inactive split", "cached")
#: Their fills (Okabe-Ito hues apart from the padding's vermillion).
STATE_COLORS = {"allocated": "#0072B2", "pending free": "#56B4E9",
                "inactive split": "#CC79A7", "cached": "#F0E442"}
_LEGEND = {"allocated": "allocated (requested bytes)",
           "pending free": "pending free (record_stream)",
           "inactive split": "inactive split (free, segment in use)",
           "cached": "cached (free segment, empty_cache returns it)"}
_ROUNDING = "allocator rounding (+32, 512 B steps, unsplit rest)"
#: A snapshot's blocks drawn at most (a bigger snapshot is drawn up to it, and says so).
MAX_BLOCKS = 200_000


def _int(value: Any) -> int | None:
    return value if value.__class__ is int and value >= 0 else None


@dataclass(frozen=True, slots=True)
class AllocatorBlock:
    """One block of a segment, read as a device block is for drawing: ``size`` requested
    bytes (the whole block when free), ``footprint`` the block's size at ``ptr``."""

    ptr: int
    size: int
    footprint: int
    state: str
    segment: int
    segment_size: int
    stream: Any
    pool: str
    frames: tuple[str, ...] = ()
    page = Page.HUGE
    module_name = "caching allocator"
    fallback = False
    alloc_site = None

    @property
    def rule_size(self) -> int:
        return self.footprint

    @property
    def padding(self) -> int:
        return self.footprint - self.size

    @property
    def page_rounding(self) -> int:
        return 0

    @property
    def end(self) -> int:
        return self.ptr + self.footprint

    @property
    def extra(self) -> dict[str, Any] | None:
        return {"stack": list(self.frames)} if self.frames else None

    @property
    def fill(self) -> str:
        return STATE_COLORS[self.state]

    @property
    def label(self) -> str:
        return f"{self.state}, {format_bytes(self.size)}"

    @property
    def tip(self) -> str:
        asked = (f", {format_bytes(self.size)} requested" if self.state in
                 ("allocated", "pending free") else "")
        return (f"{self.state} block of {format_bytes(self.footprint)} at {self.ptr:#x}"
                f"{asked}; {self.pool} pool segment at {self.segment:#x} of "
                f"{format_bytes(self.segment_size)}, stream {self.stream}")

    def describe(self) -> str:
        return self.tip


def _state(raw: Any, alone: bool) -> str | None:
    if raw == "active_allocated":
        return "allocated"
    if raw == "active_pending_free":
        return "pending free"
    if raw == "inactive":
        return "cached" if alone else "inactive split"
    return None


def _blocks_of(seg: dict[str, Any], problems: list[str]) -> list[AllocatorBlock]:
    start, total = _int(seg.get("address")), _int(seg.get("total_size"))
    if start is None or not total:
        problems.append("a segment without an address and a size is left out")
        return []
    raw = seg.get("blocks")
    raw = [b for b in raw if isinstance(b, dict)] if isinstance(raw, list) else []
    kind = seg.get("segment_type")
    pool = str(kind) if kind in ("small", "large") else "?"
    stream = seg.get("stream", 0)
    stream = stream if isinstance(stream, (int, str)) else "?"
    out, end = [], start + total
    for b in raw:
        ptr, size = _int(b.get("address")), _int(b.get("size"))
        state = _state(b.get("state"), len(raw) == 1)
        if ptr is None or not size or state is None or ptr < start or ptr + size > end:
            problems.append(f"a block of the segment at {start:#x} is left out (no address, "
                            f"size or state, or outside the segment)")
            continue
        asked = _int(b.get("requested_size"))
        if state in ("cached", "inactive split") or asked is None or asked > size:
            asked = size
        frames = _stack(b.get("frames")) or ()
        out.append(AllocatorBlock(ptr, asked, size, state, start, total, stream, pool,
                                  tuple(frames)))
    return out


def allocator_map(snapshot: Any, *, device: int | None = None,
                  title: str = "caching allocator") -> MapSnapshot:
    """The segments of ``snapshot`` (a torch / torch_npu snapshot dict) on ``device``
    (default: the first segment's) as a :class:`~ascend_memsim.observe.viz.MapSnapshot`
    of :class:`AllocatorBlock` regions, for :func:`~ascend_memsim.observe.viz.map_svg`,
    the PNG and :func:`~ascend_memsim.observe.pictures.save_picture` (``maps=``).

    Fields that are not what torch writes (a block outside its segment, a state it has no
    word for, ...) are left out and counted in the heading. O(blocks log blocks); at most
    :data:`MAX_BLOCKS` blocks are drawn.
    """
    raw = snapshot.get("segments") if isinstance(snapshot, dict) else snapshot
    segments = [s for s in raw if isinstance(s, dict)] if isinstance(raw, list) else []
    if device is None:
        device = next((s["device"] for s in segments if _int(s.get("device")) is not None), 0)
    problems: list[str] = []
    blocks: list[AllocatorBlock] = []
    outlines: list[tuple[int, int]] = []
    reserved = 0
    seen = 0
    for seg in segments:
        if seg.get("device", device) != device:
            continue
        some = _blocks_of(seg, problems)
        if some:
            seen += 1
            reserved += some[0].segment_size
            outlines.append((some[0].segment, some[0].segment_size))
            blocks += some
        if len(blocks) >= MAX_BLOCKS:
            problems.append(f"only the first {MAX_BLOCKS:,} blocks are drawn")
            blocks = blocks[:MAX_BLOCKS]
            break
    blocks.sort(key=lambda b: b.ptr)
    # DECISION: overlapping blocks (a hostile file; torch never writes them) keep the first
    kept: list[AllocatorBlock] = []
    for b in blocks:
        if kept and b.ptr < kept[-1].end:
            problems.append(f"a block at {b.ptr:#x} overlaps another and is left out")
            continue
        kept.append(b)
    base = kept[0].ptr // ROW_BYTES * ROW_BYTES if kept else 0
    top = -(-kept[-1].end // ROW_BYTES) * ROW_BYTES if kept else ROW_BYTES
    counts = state_counts(kept)
    allocated = counts["allocated"][1]
    summary = (f"{plural(seen, 'segment')} reserve {format_bytes(reserved)}: " + ", ".join(
        f"{s} {format_bytes(counts[s][1])} ({plural(counts[s][0], 'block')})" for s in STATES)
        + f"; reserved but unallocated {format_bytes(reserved - allocated)}")
    if problems:
        summary += f"; {plural(len(problems), 'problem')}: {problems[0]}"
    legend = [(STATE_COLORS[s], _LEGEND[s]) for s in STATES]
    legend += [(PADDING_COLOR, _ROUNDING), (FREE_COLOR, "not reserved by the allocator")]
    return MapSnapshot(title, base, top - base, kept, top - base - reserved, 0,
                       summary=summary, legend=legend, gap="not reserved",
                       outlines=outlines)


def state_counts(blocks: Any) -> dict[str, tuple[int, int]]:
    """{state: (blocks, bytes)} of the :class:`AllocatorBlock` s of a map."""
    out = {s: [0, 0] for s in STATES}
    for b in blocks:
        one = out[b.state]
        one[0] += 1
        one[1] += b.footprint
    return {s: (n, size) for s, (n, size) in out.items()}


def read_snapshot_file(path: str) -> dict[str, Any] | None:
    """The snapshot dict in ``path`` (a pickle, read by the restricted unpickler, or JSON),
    or None when the file is no snapshot. Read in time and memory bounded by its size.

    Raises:
        InvalidArgument: the file cannot be read.
    """
    with _open_file(path) as f:
        data = f.read()
    if data[:1] == b"\x80":
        value = safe_unpickle(data)
    elif data.lstrip()[:1] == b"{":
        try:
            value = loads_json(data)
        except (ValueError, RecursionError):
            return None
    else:
        return None
    return value if isinstance(value, dict) and is_snapshot(value) else None


class AllocatorPictures:
    """Watches a tensor replay (``replay_tensors(..., observer=pictures)``): the timeline of
    allocated, pending free, inactive split and cached bytes after each event, and the
    allocator's map at the peak of reserved bytes and at the first out-of-memory error.

    O(1) per event beyond the allocator's own statistics, plus one snapshot of the segments
    (O(blocks)) each time reserved bytes reach a new peak (a new segment or mapped page);
    the timeline keeps at most about 2,000 points (:class:`~.timeline.Timeline`).
    """

    def __init__(self, title: str = "") -> None:
        self.title = title
        self.timeline = Timeline(colors=dict(STATE_COLORS), order=STATES,
                                 quantity="MiB reserved by the caching allocator",
                                 heading="Reserved bytes of the caching allocator: allocated, "
                                         "pending free, inactive split, cached")
        self._track = _Timeline(self.timeline)
        self._now = dict.fromkeys(STATES, 0)
        self._peak = 0
        self._last = -1
        self.at_peak: dict[str, Any] | None = None
        self.peak_index = -1
        self.at_failure: dict[str, Any] | None = None
        self.failure_index = -1

    def __call__(self, event: str, index: int, alloc: Any) -> None:
        """``event`` ("malloc", "free" or "oom") was replayed at trace entry ``index``."""
        stats = alloc.stats
        allocated = stats.allocated_bytes[0].current
        active = stats.active_bytes[0].current
        split = stats.inactive_split_bytes[0].current
        reserved = stats.reserved_bytes[0].current
        now = {"allocated": allocated, "pending free": active - allocated,
               "inactive split": split, "cached": reserved - active - split}
        changed = [s for s in STATES if now[s] != self._now[s]]
        if changed:
            by = self._track.by
            for s in changed[:-1]:
                by[s] = now[s]
            last = changed[-1]
            self._track.change(index, last, now[last] - self._now[last], reserved)
            self._now = now
        self._last = max(self._last, index)
        if event == "oom":
            self._track.failure(index)
            if self.at_failure is None:
                self.at_failure, self.failure_index = alloc.memory_snapshot(), index
        elif reserved > self._peak:
            self._peak = reserved
            self.at_peak, self.peak_index = alloc.memory_snapshot(), index

    def finish(self, capacity: int, events: int = 0) -> None:
        """The replay ended: ``events`` trace entries on a device of ``capacity`` bytes."""
        self.timeline.capacity = capacity
        self.timeline.events = max(events, self._last + 1)
        self._track.finish(self._last)

    def maps(self) -> list[MapSnapshot]:
        """The allocator's map at the peak of reserved bytes and at the first failure."""
        out = []
        if self.at_peak is not None:
            out.append(allocator_map(self.at_peak, title=f"{self.title}caching allocator at "
                                     f"the peak of reserved bytes (entry {self.peak_index})"))
        if self.at_failure is not None:
            out.append(allocator_map(self.at_failure, title=f"{self.title}caching allocator "
                                     f"at the first out-of-memory error (entry "
                                     f"{self.failure_index})"))
        return out
