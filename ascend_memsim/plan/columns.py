"""A source read once for a whole search: its replayable entries as compact columns, the
blocks live before the trace (seeds) and the workspace allocator's blocks, and a replay over
them that also says at which other capacities it would have run exactly the same.

What :func:`~ascend_memsim.observe.tensor_replay.replay_tensors` works out on every call
(reading the entries' dicts, checking their fields, :func:`_seeds`, :func:`_workspace`, the
stream numbers) is done here once, by :func:`compile_source`; :func:`replay_columns` then
runs the same allocator calls in the same order, so its answers are those of
``replay_tensors`` (``tests/test_fit_fast.py`` checks it against the plain search).

**Identical runs.** The simulated device places each segment first-fit from its lowest
address, so its capacity decides nothing until a placement would end above it: a replay at
capacity ``C`` makes exactly the calls and gets exactly the addresses of a replay at ``R``
as long as every placement that succeeded at ``R`` ends at or below ``C`` and every one that
failed at ``R`` would also fail at ``C`` (its first fit on an unbounded device, at the free
run that reaches the top, ends above ``C``). :class:`_Watched` keeps those two bounds for a
run, ``lo`` (the highest end placed) and ``hi`` (the lowest end refused): every capacity in
``[lo, hi)`` gives that run, with its peaks, retries and fit, and needs no replay of its own
(only the text of an out-of-memory error, which names the capacity, differs: a search
replays the one failure it shows). This holds while nothing else reads the capacity: a
``per_process_memory_fraction`` below 1 and ``throw_on_npumalloc_oom`` read the device's
total at the start, expandable segments size their address range by it, so runs with those
settings get no interval (:func:`identity_applies`).

**Memory outside the allocator.** A replay may take :class:`Outside` blocks on the device
besides the caching allocator's segments (a distributed rank's HCCL buffers and the runtime's
share), each just before the trace entry it came before in the run, through the runtime as
the run took it: they are placed by the same first-fit, so the bounds above hold for them too,
and one the device cannot hold ends the replay as the run's failure ended the run.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, replace
from typing import Any

from ..allocators import NpuCachingAllocator, NpuOutOfMemoryError
from ..allocators.conf import K_LARGE_BUFFER, SIZE_MAX, AllocatorConfig
from ..allocators.rules import (
    K_EXTRA_LARGE_BUFFER,
    K_SMALL_SIZE,
    PAGE_1G_CANN,
    add_pad_size,
    allocation_size,
    cann_tuple,
    round_size,
)
from ..allocators.stats import ALLOCATED_BYTES, RESERVED_BYTES
from ..memory.allocator import Allocator
from ..memory.constants import MallocAttrType, MallocPolicy
from ..memory.errors import AclError, InvalidArgument
from ..memory.profiles import Profile
from ..observe.plain import brief
from ..observe.snapshot import _stack
from ..observe.stream import records
from ..observe.tensor_entries import _END, ALLOC, _int64, tensor_events
from ..observe.tensor_replay import (
    TensorReplayResult,
    _seeds,
    _workspace,
    seed_workspace_block,
)
from ..runtime.runtime import Runtime

__all__ = ["Columns", "compile_source", "replay_columns", "Run", "identity_applies",
           "same_outcome_key", "Outside"]

#: the operations of the columns
MALLOC, FREE, OOM = 0, 1, 2


class Columns:
    """A source's replayable operations, one column each (``array``: a million entries take
    about 30 MB), and what comes before them. Addresses and streams are numbered in the order
    the replay meets them (address 0 stands for an ``oom`` entry's request, which has none),
    as ``replay_tensors`` numbers streams."""

    def __init__(self, name: str, entries: list[Any] | None) -> None:
        self.name = name
        #: the snapshot's entries (their frames are read for a failure only), or None
        self.entries = entries
        self.op = array("b")
        self.addr = array("q")
        self.size = array("Q")
        self.stream = array("q")
        self.index = array("q")
        #: (size, stream number) of each workspace block
        self.workspace: list[tuple[int, int]] = []
        #: (address number, size, stream number) of each block live before the trace
        self.seeds: list[tuple[int, int, int]] = []
        #: the recorded stream of each stream number
        self.streams: list[Any] = []
        self.problems: list[str] = []
        self.actions: dict[str, dict[str, int]] = {}
        #: the largest size any operation, seed or workspace block asks for
        self.largest = 0
        self._addr_ids: dict[Any, int] = {None: 0}
        self._addr_count = 1
        self._stream_ids: dict[Any, int] = {}

    def count(self, kind: str, action: str, n: int = 1) -> None:
        if n:
            bucket = self.actions.setdefault(kind, {})
            bucket[action] = bucket.get(action, 0) + n

    def _aid(self, addr: Any) -> int:
        ids = self._addr_ids
        got = ids.get(addr)
        if got is None:
            got = ids[addr] = len(ids)
        return got

    def _sid(self, stream: Any) -> int:
        ids = self._stream_ids
        got = ids.get(stream)
        if got is None:
            got = ids[stream] = len(ids)
            self.streams.append(stream)
        return got

    def _add(self, op: int, addr: Any, size: int, stream: Any, index: int) -> None:
        if size >= 1 << 64:
            # as the allocator refuses it, before any replay
            raise InvalidArgument(f"size {size} is out of range")
        self.op.append(op)
        self.addr.append(self._aid(addr))
        self.size.append(size)
        self.stream.append(-1 if stream is None else self._sid(stream))
        self.index.append(index)
        if op != FREE and size > self.largest:
            self.largest = size

    def done(self) -> None:
        """Drop what only the compiling needed (the address table: the replay numbers)."""
        self._addr_count = len(self._addr_ids)
        self._addr_ids = {}

    def __len__(self) -> int:
        return len(self.op)


def compile_source(kind: str, data: Any, name: str, device: int | None) -> Columns:
    """The columns of a loaded source (``load_source``'s kind and data): a snapshot's
    ``device`` trace (default: the first with entries), or a trace's malloc and free events
    (read once here: a trace file is not read again by the replays). Time and memory
    O(entries)."""
    if kind == "trace":
        return _compile_trace(data, name)
    return _compile_snapshot(data, name, device)


def _compile_trace(stream: Any, name: str) -> Columns:
    c = Columns(name, None)
    mallocs = frees = 0
    for index, event in enumerate(records(stream)):
        kind = event.kind
        if kind == "malloc":
            size = event.size
            if type(size) is not int or size < 0:
                c.problems.append(f"line {event.line}: bad size {size!r}")
                continue
            c._add(MALLOC, event.ptr, size, 0 if event.absent & 1 else event.stream, index)
            mallocs += 1
        elif kind == "free":
            c._add(FREE, event.ptr, 0, None, index)
            frees += 1
        else:
            c.count("skipped", str(kind))
    c.count("replayed", "malloc", mallocs)
    c.count("replayed", "free", frees)
    c.done()
    return c


def _compile_snapshot(snap: dict[str, Any], name: str, device: int | None) -> Columns:
    """As ``tensor_replay._replay_snapshot`` walks the entries, once."""
    traces = snap.get("device_traces") or []
    if not isinstance(traces, list):
        traces = []
    if device is None:
        device = next((i for i, t in enumerate(traces) if t), 0)
    entries = traces[device] if device < len(traces) and isinstance(traces[device], list) else []
    c = Columns(name, entries)
    for i, t in enumerate(traces):
        if i != device and t:
            c.count("skipped", f"device {i} entries")
            c.actions["skipped"][f"device {i} entries"] = len(t)
    segments = [s for s in snap.get("segments") or () if isinstance(s, dict)
                and s.get("device", device) == device]
    workspace, blocks = _workspace(entries)
    # an entry's fields, as the file gave them (checked before use)
    addr: Any
    size: Any
    stream: Any
    for _addr, size, stream in blocks:
        if type(size) is not int or not 32 < size < _END or not _int64(stream):
            c.problems.append(f"workspace block of size {brief(size)} on stream "
                              f"{brief(stream)}; not seeded")
        else:
            c.workspace.append((size, c._sid(stream)))
            c.largest = max(c.largest, size)
    for addr, size, stream in _seeds(entries, segments, workspace, c.problems):
        c.seeds.append((c._aid(addr), size, c._sid(stream)))
        c.largest = max(c.largest, size)
    for kind, index, addr, size, stream, _e in tensor_events(entries, workspace, name, c.count,
                                                             c.problems):
        if kind == ALLOC:
            c._add(MALLOC, addr, size, stream, index)
        elif kind == FREE:
            c._add(FREE, addr, 0, None, index)
        else:
            c._add(OOM, None, size, stream, index)
    c.done()
    return c


class _Watched(Allocator):
    """The device's first-fit, keeping the bounds of the capacities that would place alike
    (module text): ``lo`` the highest end placed, ``hi`` the lowest end a refused request
    would have had on an unbounded device; both relative to the range's base."""

    __slots__ = ("lo", "hi")

    def __init__(self, capacity: int, *, base: int = 0, granule: int = 64) -> None:
        super().__init__(capacity, base=base, granule=granule)
        self.lo = 0
        self.hi = SIZE_MAX

    def allocate(self, size: int, align: int = 64) -> int | None:
        ptr = Allocator.allocate(self, size, align)
        if ptr is None:
            end = -(-self.top_free_start() // align) * align + size - self.base
            if end < self.hi:
                self.hi = end
        elif ptr + size - self.base > self.lo:
            self.lo = ptr + size - self.base
        return ptr


@dataclass(frozen=True)
class Outside:
    """A block of device memory taken outside the caching allocator during a replay:
    ``size`` bytes by ``aclrtMallocWithCfg`` (huge pages first) under ``module`` (a module
    id), before the trace entry at index ``at`` (0: before everything, the seeds too; past
    the last entry: at the end). ``what`` and ``frames`` name it in a failure."""

    at: int
    size: int
    module: int
    what: str
    #: the frames it was made at, as a snapshot's entries hold them (innermost first)
    frames: tuple[Any, ...] = ()


@dataclass
class Run:
    """One replay of the columns: its result and, when :func:`identity_applies`, the
    capacities ``[lo, hi)`` at which the replay is this one (else ``lo = hi = capacity``)."""

    result: TensorReplayResult
    lo: int
    hi: int

    @property
    def fits(self) -> bool:
        return self.result.ooms == 0

    def covers(self, capacity: int) -> bool:
        return self.lo <= capacity < self.hi


def identity_applies(conf: AllocatorConfig) -> bool:
    """True when the allocator reads the device's capacity only through where segments land
    (the module's text): no memory fraction below 1, no ``throw_on_npumalloc_oom``, no
    expandable segments."""
    return (conf.per_process_memory_fraction >= 1 and not conf.throw_on_npumalloc_oom
            and not conf.expandable_segments)


def same_outcome_key(conf: AllocatorConfig, columns: Columns, profile: Profile,
                     cann: str) -> str:
    """A key of ``conf`` equal to that of any setting that replays ``columns`` alike: the
    settings with the settings that cannot change a replay of them set to their defaults.
    ``max_split_size_mb`` (and ``max_non_split_rounding_mb``, read only for requests above
    it) decide nothing when every block and segment is smaller: each condition on them in
    ``NPUCachingAllocator.cpp`` (``get_free_block``, ``should_split``,
    ``release_available_cached_blocks``) compares a size with ``max_split_size``, and no
    segment is larger than the one the largest request makes or ``large_segment_size``
    (``get_allocation_size``; 1 GiB with ``page_size:1g``)."""
    plain = replace(conf, text="", pinned={})
    if not conf.expandable_segments and conf.max_split_size != SIZE_MAX:
        pad = add_pad_size(profile.soc_name, cann)
        rounded = round_size(max(columns.largest, 1), conf, pad)
        if conf.page_size_1g and cann_tuple(cann) >= PAGE_1G_CANN and rounded > K_SMALL_SIZE:
            segment = -(-rounded // K_EXTRA_LARGE_BUFFER) * K_EXTRA_LARGE_BUFFER
        else:
            segment = allocation_size(rounded, conf)
        # a request from 1 to 10 MiB takes a large_segment_size segment (20 MiB), larger
        # than a request just above 10 MiB makes: not monotone, so it counts too
        if max(segment, rounded, conf.large_segment_size) < conf.max_split_size:
            plain = replace(plain, max_split_size=SIZE_MAX,
                            max_non_split_rounding_size=K_LARGE_BUFFER)
    return repr(plain)


def replay_columns(columns: Columns, profile: Profile, capacity: int, conf: AllocatorConfig,
                   cann: str, *, stop_at_failure: bool = True,
                   outside: tuple[Outside, ...] = ()) -> Run:
    """Replay ``columns`` through a fresh caching allocator with ``conf`` on ``profile`` with
    ``capacity`` bytes of main memory: ``replay_tensors``'s calls, in its order, with its
    figures (peaks, retries, the first failure), and the capacities that would replay alike.
    ``outside`` blocks (ordered by ``at``) are taken on the device where they say; the
    result's ``peak_device`` counts them, ``peak_reserved`` does not.
    Time O(operations x allocator cost); nothing is kept per operation."""
    key = "hbm_bytes" if profile.hbm_bytes else "ddr_bytes"
    c = columns
    capacities: dict[str, Any] = {key: capacity}
    with Runtime(profile, sanitizer="off", **capacities) as rt:
        device = rt.device(0)
        main = device.allocators[rt.profile.main_memory]
        watched = _Watched(main.capacity, base=main.base, granule=main.granule)
        device.use_main_allocator(watched)
        alloc = NpuCachingAllocator(rt, 0, conf, cann=cann)
        r = TensorReplayResult(c.name, rt.profile.name, rt.profile.total(rt.profile.main_memory),
                               conf.text)
        r.problems = list(c.problems)
        r.actions = {k: dict(v) for k, v in c.actions.items()}
        _run(c, r, alloc, watched, stop_at_failure, _Taker(rt, outside))
    if identity_applies(conf):
        return Run(r, watched.lo, watched.hi)
    return Run(r, capacity, capacity)


class _Taker:
    """Takes the :class:`Outside` blocks of a replay as its entries pass their places."""

    def __init__(self, rt: Runtime, blocks: tuple[Outside, ...]) -> None:
        self.rt, self.blocks, self.next = rt, blocks, 0
        self.error: AclError | None = None
        #: the entry index before which the next block is taken (never, when none is left)
        self.at = blocks[0].at if blocks else SIZE_MAX

    def take(self, before: int) -> Outside | None:
        """Take every block due before entry ``before``; the one the device refused (the
        replay ends there), else None."""
        blocks = self.blocks
        while self.next < len(blocks) and blocks[self.next].at <= before:
            block = blocks[self.next]
            self.next += 1
            try:
                self.rt.malloc_with_cfg(block.size, MallocPolicy.HUGE_FIRST,
                                        {MallocAttrType.MODULE_ID: block.module})
            except AclError as e:
                self.error = e
                return block
        self.at = blocks[self.next].at if self.next < len(blocks) else SIZE_MAX
        return None


def _run(c: Columns, r: TensorReplayResult, alloc: NpuCachingAllocator, main: Allocator,
         stop: bool, taker: _Taker) -> None:
    stats = alloc.stats
    streams = c.streams
    device_allocs = [-1]

    def took_memory() -> None:
        device_allocs[0] = stats.num_device_alloc
        reserved = stats.current(RESERVED_BYTES)
        if reserved > r.peak_reserved:
            r.peak_reserved = reserved
            r.fragmentation_at_peak = reserved - stats.current(ALLOCATED_BYTES)
        used = main.used_bytes
        if used > r.peak_device:
            r.peak_device = used

    def failed(error: Exception, index: int, size: int, sid: int, ends_job: bool) -> None:
        r.ooms += 1
        if r.first_failure is None:
            frames = c.entries[index].get("frames") if c.entries is not None and index >= 0 \
                else None
            r.first_failure = {"index": index, "size": size, "stream": streams[sid],
                               "frames": _stack(frames) or [], "message": str(error)}
        if ends_job and r.peaks_before_failure is None:
            r.peaks_before_failure = {"peak_allocated": stats.peak(ALLOCATED_BYTES),
                                      "peak_reserved": r.peak_reserved,
                                      "peak_device": r.peak_device}

    def refused(block: Outside, index: int) -> None:
        r.ooms += 1
        if r.first_failure is None:
            r.first_failure = {"index": index, "size": block.size, "stream": None,
                               "frames": _stack(list(block.frames)) or [], "what": block.what,
                               "message": f"{block.what}: {taker.error}"}
        if r.peaks_before_failure is None:
            r.peaks_before_failure = {"peak_allocated": stats.peak(ALLOCATED_BYTES),
                                      "peak_reserved": r.peak_reserved,
                                      "peak_device": r.peak_device}
        r.ended_at = index
        _finish(r, stats)

    def outside(before: int) -> bool:
        """Take the blocks due before entry ``before``: False when one was refused."""
        block = taker.take(before)
        used = main.used_bytes
        if used > r.peak_device:
            r.peak_device = used
        if block is not None:
            refused(block, before)
            return False
        return True

    if taker.at <= 0 and not outside(0):
        return
    for size, sid in c.workspace:
        if seed_workspace_block(alloc, size, sid, r):
            took_memory()
    ptrs: list[int | None] = [None] * c._addr_count
    malloc, free = alloc.malloc, alloc.free
    for aid, size, sid in c.seeds:
        try:
            ptrs[aid] = malloc(size, sid)
        except NpuOutOfMemoryError as e:
            failed(e, -1, size, sid, True)
            ptrs[aid] = None
            if stop:
                r.ended_at = -1
                _finish(r, stats)
                return
            continue
        r.seeded += 1
        if stats.num_device_alloc != device_allocs[0]:
            took_memory()
    allocs = frees = 0
    for op, aid, size, sid, index in zip(c.op, c.addr, c.size, c.stream, c.index):
        if index >= taker.at and not outside(index):
            r.allocs, r.frees = allocs, frees
            return
        if op == FREE:
            ptr = ptrs[aid]
            if ptr is not None:
                ptrs[aid] = None
                free(ptr)
                frees += 1
            continue
        try:
            ptr = malloc(size, sid)
        except NpuOutOfMemoryError as e:
            failed(e, index, size, sid, op == MALLOC)
            ptrs[aid] = None
            if stop and op == MALLOC:
                r.ended_at = index
                break
            continue
        allocs += 1
        if stats.num_device_alloc != device_allocs[0]:
            took_memory()
        if op == OOM:
            free(ptr)
            frees += 1
        else:
            ptrs[aid] = ptr
    else:
        if taker.at != SIZE_MAX and not outside(SIZE_MAX):
            r.allocs, r.frees = allocs, frees
            return
    r.allocs, r.frees = allocs, frees
    _finish(r, stats)


def _finish(r: TensorReplayResult, stats: Any) -> None:
    r.peak_allocated = stats.peak(ALLOCATED_BYTES)
    r.retries = stats.num_alloc_retries
