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

from dataclasses import dataclass, field
from typing import Any

from .. import checks as _checks  # noqa: F401  (registers the checker and config keys)
from ..allocators import NpuCachingAllocator, NpuOutOfMemoryError
from ..allocators.rules import DEFAULT_CANN
from ..allocators.stats import ALLOCATED_BYTES, RESERVED_BYTES
from ..memory.errors import InvalidArgument
from ..memory.profiles import DEFAULT_PRODUCT, get_profile
from ..memory.units import human_bytes, plural
from ..runtime.runtime import Runtime
from .plain import brief, safe_unpickle
from .snapshot import _stack, is_snapshot, loads_json
from .stream import open_trace, records
from .tensor_entries import _END, ALLOC, FREE, _bad_field, _int64, tensor_events
from .trace import _open_file

__all__ = ["replay_tensors", "TensorReplayResult", "nothing_replayed", "load_source"]

_FREES = ("free_requested", "free_completed", "free")
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
    first_failure: dict[str, Any] | None = None
    #: the entry whose allocation failed and ended the replay (``stop_at_failure``), as it
    #: ends a torch job; None when the replay did not end early
    ended_at: int | None = None
    #: the peaks (``peak_allocated``, ``peak_reserved``, ``peak_device``) when the first
    #: failure that ends a torch job came; with ``stop_at_failure=False`` the replay goes
    #: on, and its peaks above these are not the job's
    peaks_before_failure: dict[str, Any] | None = None
    #: every action seen, by name: "replayed", "rederived" (the allocator's own segment
    #: calls), "workspace" (the workspace allocator's blocks), "counted" (markers) or
    #: "skipped"
    actions: dict[str, dict[str, int]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def fits(self) -> bool:
        return self.ooms == 0

    @property
    def peaks_after_failure(self) -> bool:
        """True when a peak was reached after the first out-of-memory error (replayed on
        with ``stop_at_failure=False``): not a figure of the job, which torch ends there."""
        before = self.peaks_before_failure
        return before is not None and any(getattr(self, k) > v for k, v in before.items())

    def as_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["fits"] = self.fits
        out["peaks_after_failure"] = self.peaks_after_failure
        return out

    def __str__(self) -> str:
        size = human_bytes
        lines = [
            f"{self.source}: {plural(self.allocs, 'alloc')}, {plural(self.frees, 'free')}, "
            f"{self.seeded} seeded, "
            + (f"{plural(self.workspace_seeded, 'workspace block')}, "
               if self.workspace_seeded else "")
            + f"through torch_npu's caching allocator ({self.alloc_conf or 'default conf'}) on "
            f"{self.product} with {size(self.capacity)}",
            f"  peak allocated {size(self.peak_allocated)}, reserved "
            f"{size(self.peak_reserved)}, device {size(self.peak_device)}; "
            f"reserved but unallocated at the peak {size(self.fragmentation_at_peak)}",
            f"  {plural(self.retries, 'retry', 'retries')}, {self.ooms} out of memory",
        ]
        if self.first_failure is not None:
            f = self.first_failure
            lines.append(f"  first failure: entry {f['index']}, {size(f['size'])} on "
                         f"stream {f['stream']}: {f['message'].splitlines()[0]}")
            lines.extend(f"    {frame}" for frame in f["frames"][:8])
        if self.ended_at is not None:
            lines.append(f"  the replay ended at entry {self.ended_at}, as torch ends a job at "
                         f"an out-of-memory error it does not catch (--continue-after-oom "
                         f"replays on)")
        if self.peaks_after_failure:
            b = self.peaks_before_failure or {}
            lines.append(
                f"  not the job's: a peak above came after the first out-of-memory error, "
                f"which ends a torch job; up to it: allocated {size(b['peak_allocated'])}, "
                f"reserved {size(b['peak_reserved'])}, device {size(b['peak_device'])}")
        for kind in ("rederived", "workspace", "counted", "skipped"):
            if self.actions.get(kind):
                lines.append(f"  {kind}: " + ", ".join(
                    f"{k} {v}" for k, v in sorted(self.actions[kind].items())))
        lines.extend(f"  problem: {p}" for p in self.problems[:10])
        return "\n".join(lines)


def load_source(source: Any) -> tuple[str, Any]:
    """("snapshot", dict) or ("trace", TraceStream) for a snapshot dict or a file path: a
    snapshot file read once (a pickle by :func:`~ascend_memsim.observe.plain.safe_unpickle`,
    JSON by :func:`~ascend_memsim.observe.snapshot.loads_json`), a trace opened as a stream.

    Raises:
        InvalidArgument: a dict that is no snapshot, a file that cannot be read.
        SnapshotError, TraceFormatError: a file in no known format (both ``ValueError``).
    """
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
                value = loads_json(first)
            except (ValueError, RecursionError):
                # one JSON document over many lines (an indented snapshot): read whole, as
                # the snapshot import does; a JSON Lines trace never gets here
                f.seek(0)
                try:
                    value = loads_json(f.read())
                except (ValueError, RecursionError):
                    value = None
            if is_snapshot(value):
                return "snapshot", value
    return "trace", open_trace(source)


def _stream_id(streams: dict[str, Any], value: Any) -> int:
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

    def malloc(self, addr: Any, size: int, stream: Any, index: int, frames: Any,
               ends_job: bool = True) -> bool:
        """Allocate for trace entry ``index``; False when it fails. A failure that
        ``ends_job`` (an allocation the recording made) records the peaks before it and,
        with ``stop``, ends the replay."""
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
            if ends_job and r.peaks_before_failure is None:
                r.peaks_before_failure = {
                    "peak_allocated": self.stats.peak(ALLOCATED_BYTES),
                    "peak_reserved": r.peak_reserved, "peak_device": r.peak_device}
            self.ptrs.pop(addr, None)
            if self.observer is not None:
                self.observer("oom", index, self.alloc)
            if self.stop and ends_job:
                r.ended_at = index
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
        if type(size) is not int or not 32 < size < _END or not _int64(stream):
            r.problems.append(f"workspace block of size {brief(size)} on stream "
                              f"{brief(stream)}; not seeded")
            return
        sid = self.streams.get(stream)
        if sid is None:
            sid = _stream_id(self.streams, stream)
        if seed_workspace_block(self.alloc, size, sid, r):
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


def seed_workspace_block(alloc: Any, size: int, stream: int, r: TensorReplayResult) -> bool:
    """Take a workspace block of ``size`` bytes (as a snapshot holds it) again through
    ``alloc``'s workspace allocator on ``stream`` (its request: the size less the 32 bytes
    it adds) and leave it cached, as after the operator that used it: True, or False with
    the reason in ``r.problems`` when the device cannot hold it."""
    ws = alloc.workspace
    try:
        ws.free(ws.malloc(size - 32, stream))
    except NpuOutOfMemoryError as e:
        r.problems.append(f"workspace block of {size} bytes not seeded: "
                          f"{str(e).splitlines()[0]}")
        return False
    r.workspace_seeded += 1
    return True


class _Stopped(Exception):
    """The replay ended at its first failure (``stop_at_failure``)."""


def _workspace(entries: list[Any]) -> tuple[set[int], list[tuple[Any, Any, Any]]]:
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


def _seeds(entries: list[Any], segments: list[Any], skip: set[int] | frozenset[Any] = frozenset(),
           problems: list[str] | None = None) -> list[tuple[int, int, Any]]:
    """Blocks live when the trace starts: freed in the trace without an alloc in it, or live
    at the snapshot and never allocated in it; entries at the indexes ``skip`` (the
    workspace allocator's) are left out. A block without an ``address`` of its own (torch
    2.0-era snapshots, ``torch.cuda._memory_viz._profile_to_snapshot``) gets the one
    MemoryViz gives it (``torch/utils/viz/MemoryViz.js`` ``annotate_snapshot``: each
    segment walked from its ``address``, adding each block's ``size`` in order). Blocks that
    cannot be seeded (no address to be had, no size) are counted in ``problems``, never
    dropped silently. Memory O(live blocks)."""
    live: set[Any] = set()
    pending: set[Any] = set()
    seeds: dict[Any, tuple[Any, Any]] = {}
    lost = 0
    for i, e in enumerate(entries):
        if not isinstance(e, dict) or i in skip:
            continue
        action, addr = e.get("action"), e.get("addr")
        if action != "alloc" and action not in _FREES:
            continue
        if _bad_field(e, ("addr", "stream")) is not None:
            continue    # the replay tells it when it reaches the entry
        if action == "alloc":
            live.add(addr)
            pending.discard(addr)
        elif addr in live:
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
        walk = seg.get("address")
        blocks = seg.get("blocks")
        for b in blocks if isinstance(blocks, list) else ():
            if not isinstance(b, dict):
                continue
            addr, size = b.get("address", walk), b.get("size")
            walk = addr + size if _int64(addr) and _int64(size) and size > 0 else None
            if b.get("state") not in _LIVE_STATES:
                continue
            stream = seg.get("stream", 0)
            want = b.get("requested_size") or size
            if not (_int64(addr) and _int64(want) and want > 0 and _int64(stream)):
                lost += 1
                continue
            if addr not in live and addr not in pending and addr not in seeds:
                seeds[addr] = (want, stream)
    out = []
    for a, (s, st) in seeds.items():
        if _int64(s) and s > 0:
            out.append((a, s, st))
        else:
            lost += 1
    if lost and problems is not None:
        problems.append(f"{plural(lost, 'block')} live before the trace not seeded: no "
                        f"address (none of its own and no segment address to walk from) or "
                        f"no size")
    return sorted(out, key=lambda t: t[0])



def replay_tensors(source: Any, product: str | None = None, *, capacity: int | None = None,
                   alloc_conf: str = "", cann: str = DEFAULT_CANN,
                   device: int | None = None, stop_at_failure: bool = True,
                   observer: Any = None, name: str | None = None) -> TensorReplayResult:
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
    are seeded first (see :func:`_seeds`). With ``stop_at_failure`` (the default) the replay
    ends at the first allocation that fails (``ooms`` is then 1), as torch ends the job
    there (DECISION); without, it replays on, and peaks reached after that failure are
    flagged (:attr:`TensorReplayResult.peaks_after_failure`) as not the job's. ``name``
    names the source in the result (default: the path, or ``<snapshot>`` for a dict).
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
    kind, data = load_source(source)
    if name is None:
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


def nothing_replayed(result: TensorReplayResult) -> str | None:
    """Why ``result`` replayed nothing (no allocation, seeded block, workspace block or
    failure), or None when it replayed something: a replay of nothing "fits" any device,
    which answers no question."""
    if result.allocs or result.seeded or result.workspace_seeded or result.ooms:
        return None
    bad = len(result.problems)
    derived = sum((result.actions.get("rederived") or {}).values())
    return (f"{result.source}: nothing to replay through the caching allocator: no tensor "
            f"allocation (alloc entry) and no live block in the snapshot's segments"
            + (f"; {plural(bad, 'problem')} (warned about above) left entries out" if bad
               else "")
            + (f"; it holds {plural(derived, 'segment-level entry', 'segment-level entries')}"
               f": --allocator none replays them on the device" if derived else ""))


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


def _replay_snapshot(rp: _Replayer, snap: dict[str, Any], device: int | None) -> None:
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
    # an entry's fields, as the file gave them (checked below before use)
    addr: Any
    size: Any
    stream: Any
    workspace, blocks = _workspace(entries)
    for _addr, size, stream in blocks:
        rp.workspace(size, stream)
    try:
        for addr, size, stream in _seeds(entries, segments, workspace, rp.result.problems):
            rp.malloc(addr, size, stream, -1, None)
    finally:
        # counted as seeded also when a seed's failure ended the replay
        rp.result.seeded, rp.result.allocs = rp.result.allocs, 0
    name = rp.result.source
    for kind, index, addr, size, stream, e in tensor_events(entries, workspace, name, rp.count,
                                                            rp.result.problems):
        if kind == ALLOC:
            rp.malloc(addr, size, stream, index, e.get("frames"))
        elif kind == FREE:
            rp.free(addr, index)
        elif rp.malloc(None, size, stream, index, e.get("frames"), False):
            rp.free(None, index)    # the retried oom request fitted: the job never had it
