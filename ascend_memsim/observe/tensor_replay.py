"""Tensor-level replay: a torch / torch_npu memory snapshot's ``device_traces`` (or the
project's own trace) run through torch_npu's caching allocator on a simulated device.

Each recorded ``alloc`` becomes :meth:`NpuCachingAllocator.malloc` of its requested size on
its stream, each ``free_completed`` (or the older ``free``) the matching ``free``. The
allocator re-derives its own segment calls, so the recorded ``segment_alloc``,
``segment_free``, ``segment_map`` and ``segment_unmap`` are counted, not replayed; an ``oom``
entry (a request that failed) is tried again; ``snapshot`` markers are counted; the
workspace allocator's blocks (a ``workspace_snapshot`` entry and the ``segment_alloc`` and
``alloc`` of its address after it, which torch_npu puts at the start of the trace) are taken
by the replay's workspace allocator before the seeded blocks and counted as "workspace"; any
other action is counted as skipped. Nothing is dropped without a count in
:attr:`TensorReplayResult.actions`.

DECISION: the program's own ``empty_cache()`` calls leave no entry of their own (only the
``segment_free`` entries they cause, which the out-of-memory retry also makes), so they are
not replayed: the replay's allocator frees cached segments only when it needs to.

Entry keys follow ``pytorch/pytorch`` ``torch/cuda/memory.py`` ``_snapshot`` (``action``,
``addr``, ``size``, ``stream``, ``frames``), as ``Ascend/pytorch`` ``torch_npu/csrc/npu/Module.cpp``
memorySnapshot writes them; the sizes of ``alloc`` entries are the sizes asked for
(``NPUCachingAllocator.cpp`` ``malloc``: ``record_trace(TraceEntry::ALLOC, ..., orig_size``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from .. import checks as _checks  # noqa: F401  (registers the checker and config keys)
from ..allocators import NpuCachingAllocator, NpuOutOfMemoryError
from ..allocators.rules import DEFAULT_CANN
from ..allocators.stats import ALLOCATED_BYTES, RESERVED_BYTES
from ..memory.errors import InvalidArgument
from ..memory.profiles import DEFAULT_PRODUCT, get_profile
from ..memory.units import format_bytes, plural
from ..runtime.runtime import Runtime
from .plain import safe_unpickle
from .snapshot import _stack, is_snapshot
from .stream import open_trace, records
from .trace import _open_file

__all__ = ["replay_tensors", "TensorReplayResult"]

_FREES = ("free_requested", "free_completed", "free")
_DERIVED = ("segment_alloc", "segment_free", "segment_map", "segment_unmap")
_LIVE_STATES = ("active_allocated", "active_pending_free")


@dataclass
class TensorReplayResult:
    """What a tensor-level replay through the caching allocator did."""

    source: str
    product: str
    capacity: int
    alloc_conf: str
    allocs: int = 0
    frees: int = 0
    #: blocks live at the trace's start, seeded from the snapshot (allocated first)
    seeded: int = 0
    #: the workspace allocator's blocks of the snapshot, taken before the seeded blocks
    workspace_seeded: int = 0
    peak_allocated: int = 0
    peak_reserved: int = 0
    #: the simulated device's main memory in use at its highest (segments + runtime)
    peak_device: int = 0
    #: reserved - allocated when reserved reached its peak
    fragmentation_at_peak: int = 0
    retries: int = 0
    ooms: int = 0
    #: the first allocation that failed: index in the trace, size, stream, frames, message
    first_failure: dict | None = None
    #: every action seen, by name: "replayed", "rederived" (the allocator's own segment
    #: calls), "workspace" (the workspace allocator's blocks), "counted" (markers) or
    #: "skipped"
    actions: dict[str, dict[str, int]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def fits(self) -> bool:
        return self.ooms == 0

    def as_dict(self) -> dict:
        out = dict(self.__dict__)
        out["fits"] = self.fits
        return out

    def __str__(self) -> str:
        lines = [
            f"{self.source}: {plural(self.allocs, 'alloc')}, {plural(self.frees, 'free')}, "
            f"{self.seeded} seeded, "
            + (f"{plural(self.workspace_seeded, 'workspace block')}, "
               if self.workspace_seeded else "")
            + f"through torch_npu's caching allocator ({self.alloc_conf or 'default conf'}) on "
            f"{self.product} with {format_bytes(self.capacity)}",
            f"  peak allocated {format_bytes(self.peak_allocated)}, reserved "
            f"{format_bytes(self.peak_reserved)}, device {format_bytes(self.peak_device)}; "
            f"reserved but unallocated at the peak {format_bytes(self.fragmentation_at_peak)}",
            f"  {plural(self.retries, 'retry', 'retries')}, {self.ooms} out of memory",
        ]
        if self.first_failure is not None:
            f = self.first_failure
            lines.append(f"  first failure: entry {f['index']}, {format_bytes(f['size'])} on "
                         f"stream {f['stream']}: {f['message'].splitlines()[0]}")
            lines.extend(f"    {frame}" for frame in f["frames"][:8])
        for kind in ("rederived", "workspace", "counted", "skipped"):
            if self.actions.get(kind):
                lines.append(f"  {kind}: " + ", ".join(
                    f"{k} {v}" for k, v in sorted(self.actions[kind].items())))
        lines.extend(f"  problem: {p}" for p in self.problems[:10])
        return "\n".join(lines)


def _load(source: Any) -> tuple[str, Any]:
    """("snapshot", dict) or ("trace", TraceStream) for a snapshot dict or a file path."""
    if isinstance(source, dict):
        if not is_snapshot(source):
            raise InvalidArgument("not a memory snapshot (no 'segments' / 'device_traces')")
        return "snapshot", source
    if not isinstance(source, str):
        raise InvalidArgument(f"source must be a snapshot dict or a path, not "
                              f"{type(source).__name__}")
    with _open_file(source) as f:
        head = f.read(1)
        if head == b"\x80":     # a pickle (torch.npu.memory._dump_snapshot)
            return "snapshot", safe_unpickle(head + f.read())
        first = (head + f.readline()).lstrip()
        while not first and f.peek(1):
            first = f.readline().lstrip()
        if first[:1] in (b"{", b"["):
            try:
                value = json.loads(first)
            except (ValueError, RecursionError):
                # one JSON document over many lines (an indented snapshot): read whole, as
                # the snapshot import does; a JSON Lines trace never gets here
                f.seek(0)
                try:
                    value = json.loads(f.read())
                except (ValueError, RecursionError):
                    value = None
            if is_snapshot(value):
                return "snapshot", value
    return "trace", open_trace(source)


def _stream_id(streams: dict, value: Any) -> int:
    # any recorded stream handle (a number, a string) as a small int, bounded by streams
    sid = streams.get(value)
    if sid is None:
        sid = streams[value] = len(streams)
    return sid


class _Replayer:
    """Feeds one allocator; the peaks are read from its statistics, the device footprint and
    the reserved peak's split only after a call that took memory from the device."""

    def __init__(self, result: TensorReplayResult, alloc: NpuCachingAllocator, main: Any,
                 observer: Any = None) -> None:
        self.result, self.alloc, self.main = result, alloc, main
        #: called (event, entry index, allocator) after each malloc, free and failure
        self.observer = observer
        self.ptrs: dict[Any, int] = {}
        self.streams: dict[Any, int] = {}
        self.stats = alloc.stats
        self.device_allocs = -1
        #: end the replay at the first failure (a capacity search needs no more)
        self.stop = False

    def count(self, kind: str, action: str, n: int = 1) -> None:
        if n:
            bucket = self.result.actions.setdefault(kind, {})
            bucket[action] = bucket.get(action, 0) + n

    def malloc(self, addr: Any, size: int, stream: Any, index: int, frames: Any) -> bool:
        sid = self.streams.get(stream)
        if sid is None:
            sid = _stream_id(self.streams, stream)
        try:
            ptr = self.alloc.malloc(size, sid)
        except NpuOutOfMemoryError as e:
            r = self.result
            r.ooms += 1
            if r.first_failure is None:
                r.first_failure = {"index": index, "size": size, "stream": stream,
                                   "frames": _stack(frames) or [], "message": str(e)}
            self.ptrs.pop(addr, None)
            if self.observer is not None:
                self.observer("oom", index, self.alloc)
            if self.stop:
                raise _Stopped from None
            return False
        self.ptrs[addr] = ptr
        self.result.allocs += 1
        if self.stats.num_device_alloc != self.device_allocs:
            self.took_memory()
        if self.observer is not None:
            self.observer("malloc", index, self.alloc)
        return True

    def took_memory(self) -> None:
        """After a call that took device memory (a segment, mapped pages): the reserved
        peak and the allocated bytes at it, the device's footprint."""
        r, stats = self.result, self.stats
        self.device_allocs = stats.num_device_alloc
        reserved = stats.current(RESERVED_BYTES)
        if reserved > r.peak_reserved:
            r.peak_reserved = reserved
            r.fragmentation_at_peak = reserved - stats.current(ALLOCATED_BYTES)
        used = self.main.used_bytes
        if used > r.peak_device:
            r.peak_device = used

    def workspace(self, size: Any, stream: Any) -> None:
        """A workspace block held at the snapshot, taken again through the workspace
        allocator (its request: the block's size less the 32 bytes it adds) and left
        cached, as after the operator that used it."""
        r = self.result
        if type(size) is not int or size <= 32:
            r.problems.append(f"workspace block of bad size {size!r}; not seeded")
            return
        sid = self.streams.get(stream)
        if sid is None:
            sid = _stream_id(self.streams, stream)
        ws = self.alloc.workspace
        try:
            ws.free(ws.malloc(size - 32, sid))
        except NpuOutOfMemoryError as e:
            r.problems.append(f"workspace block of {size} bytes not seeded: "
                              f"{str(e).splitlines()[0]}")
            return
        r.workspace_seeded += 1
        self.took_memory()

    def free(self, addr: Any, index: int) -> bool:
        ptr = self.ptrs.pop(addr, None)
        if ptr is None:
            return False
        self.alloc.free(ptr)
        self.result.frees += 1
        if self.observer is not None:
            self.observer("free", index, self.alloc)
        return True

    def finish(self) -> None:
        self.result.peak_allocated = self.stats.peak(ALLOCATED_BYTES)
        self.result.retries = self.stats.num_alloc_retries


class _Stopped(Exception):
    """The replay ended at its first failure (``stop_at_failure``)."""


def _workspace(entries: list) -> tuple[set[int], list[tuple[Any, Any, Any]]]:
    """The entries of the workspace allocator: each ``workspace_snapshot`` and the
    ``segment_alloc`` and ``alloc`` of the same address right after it
    (``NPUWorkspaceAllocator.cpp`` ``get_trace``); their indexes and (addr, size, stream)
    of each block."""
    indexes: set[int] = set()
    blocks = []
    for i, e in enumerate(entries):
        if not isinstance(e, dict) or e.get("action") != "workspace_snapshot":
            continue
        indexes.add(i)
        addr = e.get("addr")
        blocks.append((addr, e.get("size"), e.get("stream", 0)))
        for j in (i + 1, i + 2):
            after = entries[j] if j < len(entries) else None
            if (isinstance(after, dict) and after.get("addr") == addr
                    and after.get("action") in ("segment_alloc", "alloc")):
                indexes.add(j)
    return indexes, blocks


def _seeds(entries: list, segments: list, skip: set[int] | frozenset = frozenset()
           ) -> list[tuple[int, int, Any]]:
    """Blocks live when the trace starts: freed in the trace without an alloc in it, or live
    at the snapshot and never allocated in it; entries at the indexes ``skip`` (the
    workspace allocator's) are left out. Memory O(live blocks)."""
    live: set = set()
    pending: set = set()
    seeds: dict[Any, tuple[int, Any]] = {}
    for i, e in enumerate(entries):
        if not isinstance(e, dict) or i in skip:
            continue
        action, addr = e.get("action"), e.get("addr")
        if action == "alloc":
            live.add(addr)
            pending.discard(addr)
        elif action in _FREES:
            if addr in live:
                live.discard(addr)
                if action == "free_requested":
                    pending.add(addr)
            elif action == "free_completed" and addr in pending:
                pending.discard(addr)
            elif addr not in seeds:
                seeds[addr] = (e.get("size"), e.get("stream", 0))
                if action == "free_requested":
                    pending.add(addr)
    for seg in segments if isinstance(segments, list) else ():
        if not isinstance(seg, dict):
            continue
        for b in seg.get("blocks") or ():
            if not isinstance(b, dict) or b.get("state") not in _LIVE_STATES:
                continue
            addr = b.get("address")
            if addr in live or addr in pending or addr in seeds:
                continue
            size = b.get("requested_size") or b.get("size")
            seeds[addr] = (size, seg.get("stream", 0))
    return sorted(((a, s, st) for a, (s, st) in seeds.items()
                   if type(a) is int and type(s) is int and s > 0), key=lambda t: t[0])


def replay_tensors(source: Any, product: str | None = None, *, capacity: int | None = None,
                   alloc_conf: str = "", cann: str = DEFAULT_CANN,
                   device: int | None = None, stop_at_failure: bool = False,
                   observer: Any = None) -> TensorReplayResult:
    """Run every tensor allocation and free of ``source`` through a fresh
    :class:`~ascend_memsim.allocators.NpuCachingAllocator` (``alloc_conf`` as
    ``PYTORCH_NPU_ALLOC_CONF``, ``cann`` its CANN version) on a simulated ``product`` with
    ``capacity`` bytes of main memory (default: the product's own).

    ``source`` is a snapshot dict, a snapshot file (pickle from
    ``torch.npu.memory._dump_snapshot`` or JSON), or a trace of the project (JSON Lines or
    RMM log; ``product`` defaults to the one its header names), whose ``malloc`` events
    become tensor allocations of their size and stream and ``free`` events the frees
    (DECISION: the recorded API and policy do not matter, the caching allocator makes its
    own segment calls). For a snapshot, ``device`` picks the
    device trace (default: the first with entries); blocks live before the trace starts
    are seeded first (see :func:`_seeds`). With ``stop_at_failure`` the replay ends at the
    first allocation that fails (``ooms`` is then 1), as a capacity search needs.
    ``observer(event, index, allocator)`` is called after each replayed malloc, free and
    failed malloc ("malloc", "free", "oom") with the trace entry's index (-1 for a seeded
    block), e.g. :class:`~ascend_memsim.observe.allocmap.AllocatorPictures`.

    Time O(entries x allocator cost), memory O(live blocks + streams): entries are read one
    by one, nothing is kept per event.

    Raises:
        InvalidArgument: an unknown product, a bad capacity, a source that is not a snapshot
            or trace.
        AllocatorConfigError: an ``alloc_conf`` torch_npu refuses.
    """
    kind, data = _load(source)
    name = source if isinstance(source, str) else "<snapshot>"
    if product is None and kind == "trace":
        product = data.header.get("product")   # the product the trace was recorded on
    profile = get_profile(product or DEFAULT_PRODUCT)
    key = "hbm_bytes" if profile.hbm_bytes else "ddr_bytes"
    settings: dict[str, Any] = {"sanitizer": "off"}
    if capacity is not None:
        settings[key] = capacity
    with Runtime(profile, **settings) as rt:
        alloc = NpuCachingAllocator(rt, 0, alloc_conf, cann=cann)
        main = rt.device(0).allocators[rt.profile.main_memory]
        result = TensorReplayResult(name, rt.profile.name, rt.profile.total(
            rt.profile.main_memory), alloc_conf)
        rp = _Replayer(result, alloc, main, observer)
        rp.stop = stop_at_failure
        try:
            if kind == "trace":
                _replay_trace(rp, data)
            else:
                _replay_snapshot(rp, data, device)
        except _Stopped:
            pass
        rp.finish()
        alloc.empty_cache()
    return result


def _replay_trace(rp: _Replayer, stream: Any) -> None:
    malloc, free = rp.malloc, rp.free
    mallocs = frees = 0
    for index, event in enumerate(records(stream)):
        kind = event.kind
        if kind == "malloc":
            size = event.size
            if type(size) is not int or size < 0:
                rp.result.problems.append(f"line {event.line}: bad size {size!r}")
                continue
            # event.get("stream", 0) without the call (bit 1: no stream field)
            malloc(event.ptr, size, 0 if event.absent & 1 else event.stream, index, None)
            mallocs += 1
        elif kind == "free":
            free(event.ptr, index)
            frees += 1
        else:
            rp.count("skipped", str(kind))
    rp.count("replayed", "malloc", mallocs)
    rp.count("replayed", "free", frees)


def _replay_snapshot(rp: _Replayer, snap: dict, device: int | None) -> None:
    traces = snap.get("device_traces") or []
    if not isinstance(traces, list):
        traces = []
    if device is None:
        device = next((i for i, t in enumerate(traces) if t), 0)
    for i, t in enumerate(traces):
        if i != device and t:
            rp.count("skipped", f"device {i} entries")
            rp.result.actions["skipped"][f"device {i} entries"] = len(t)
    entries = traces[device] if device < len(traces) and isinstance(traces[device], list) else []
    segments = [s for s in snap.get("segments") or () if isinstance(s, dict)
                and s.get("device", device) == device]
    workspace, blocks = _workspace(entries)
    for _addr, size, stream in blocks:
        rp.workspace(size, stream)
    for addr, size, stream in _seeds(entries, segments, workspace):
        rp.malloc(addr, size, stream, -1, None)
    rp.result.seeded, rp.result.allocs = rp.result.allocs, 0
    for index, e in enumerate(entries):
        if not isinstance(e, dict):
            rp.count("skipped", "not an entry")
            continue
        if index in workspace:
            rp.count("workspace", str(e.get("action")))
            continue
        action = e.get("action")
        if action == "alloc":
            size = e.get("size")
            if type(size) is not int or size < 0:
                rp.result.problems.append(f"entry {index}: bad size {size!r}")
                rp.count("skipped", "alloc")
                continue
            rp.malloc(e.get("addr"), size, e.get("stream", 0), index, e.get("frames"))
            rp.count("replayed", action)
        elif action == "free_completed" or action == "free":
            # DECISION: the block goes back when torch_npu completed its free (after the
            # events of record_stream), so the delayed reuse is the recorded one
            rp.free(e.get("addr"), index)
            rp.count("replayed", action)
        elif action == "free_requested":
            rp.count("replayed", action)
        elif action in _DERIVED:
            rp.count("rederived", action)
        elif action == "oom":
            # DECISION: a request that failed in the recording is tried again (it carries no
            # address: NPUCachingAllocator.cpp malloc records the OOM with device_free); if it
            # fits here it is freed at once, as the recorded program never got the tensor
            size = e.get("size")
            if type(size) is int and size > 0 and rp.malloc(None, size, e.get("stream", 0),
                                                           index, e.get("frames")):
                rp.free(None, index)
            rp.count("replayed", action)
        elif action == "snapshot":
            rp.count("counted", action)
        else:
            rp.count("skipped", str(action))

