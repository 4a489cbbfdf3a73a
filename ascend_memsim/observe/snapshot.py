"""PyTorch / torch_npu memory snapshots: read them as traces, write traces as snapshots.

``torch.cuda.memory._dump_snapshot()`` and ``torch_npu.npu.memory._dump_snapshot()`` pickle
the dict built by ``torch/csrc/cuda/Module.cpp`` (``THCPModule_memorySnapshot``) and
``torch_npu/csrc/npu/Module.cpp`` (``THNPModule_memorySnapshot``): ``segments`` (each with
``device``, ``address``, ``total_size``, ``stream``, ``frames`` and ``blocks``) and
``device_traces`` (one list of trace entries per device, each with ``action``, ``addr``,
``size``, ``stream`` and, when a context was recorded, ``frames``; an ``oom`` entry has
``device_free`` instead of ``addr``).

Reading (:func:`read_snapshot`): the caching allocator's ``segment_alloc`` / ``segment_free``
entries are exactly its ``aclrtMalloc`` / ``aclrtFree`` calls, so they become ``malloc`` /
``free`` events (size, stream, device, and the frames as the stack); ``oom`` becomes
``malloc_failed``. The other actions (``alloc``, ``free_requested``, ``free_completed``,
``segment_map``, ``segment_unmap``, ``snapshot``, ``workspace_snapshot``) happen inside the
caching allocator's cached segments and are counted, not replayed. A segment live in
``segments`` whose allocation is older than the trace ring buffer (or every segment, when
there are no ``device_traces``) is allocated at the start. Pickles are read by
:func:`ascend_memsim.observe.plain.safe_unpickle`, which builds only plain containers,
strings and numbers.

Writing (:func:`to_memory_viz`): one segment per live block (the ``aclrtMalloc`` is the
segment), whose single block has ``requested_size`` = the requested bytes and ``size`` = the
footprint, so memory_viz shows the +32 padding and the page rounding as rounding loss; and
``device_traces`` with ``segment_alloc`` + ``alloc`` per malloc, ``free_requested`` +
``free_completed`` + ``segment_free`` per free (also for each block a device reset
discards) and ``oom`` per failed malloc, so torch's own ``torch.cuda._memory_viz``
(``segsum``, ``trace``, ``filter_alloc_free_pairs``, ...) and MemoryViz read the same
figures as ``ascend-memsim stats``. Entries carry the trace's own
``requested_size``, ``api``, ``policy``, ``module``, ``thread`` and ``seq`` as extra keys (the
viewer ignores keys it does not know), so reading the file back gives the same events.
``torch/utils/viz/MemoryViz.js`` unpickles only protocols 2 to 4: the file is protocol 4.
"""

from __future__ import annotations

import json
import pickle
from collections import deque
from collections.abc import Iterable
from typing import Any, cast

from ..memory.profiles import DEFAULT_PRODUCT, get_profile
from ..memory.rules import PAGE_BYTES, Api, align_up, page_order, parse_policy, rule_size
from .plain import SnapshotError, WideInt, brief
from .regions import PHYSICAL_API, physical_entry, physical_event

__all__ = ["SnapshotError", "is_snapshot", "read_snapshot", "to_memory_viz",
           "memory_viz_bytes", "PICKLE_PROTOCOL", "SNAPSHOT_API", "SNAPSHOT_POLICY",
           "loads_json", "tensor_entries"]

#: MemoryViz.js: ``if (version < 2 || version > 4) throw`` (torch/utils/viz/MemoryViz.js)
PICKLE_PROTOCOL = 4

#: DECISION: a snapshot's segment_alloc is replayed as torch_npu's caching allocator makes it:
#: ``c10_npu::acl::AclrtMallocAlign32(&ptr, size, ACL_MEM_MALLOC_HUGE_FIRST)``
#: (torch_npu/csrc/core/npu/NPUCachingAllocator.cpp). ``replay --api/--policy`` override it.
SNAPSHOT_API = "aclrtMallocAlign32"
SNAPSHOT_POLICY = 0
#: the workspace allocator's segments (a ``workspace_snapshot`` entry names each):
#: ``AclrtMallocAlign32(..., ACL_MEM_MALLOC_HUGE_ONLY)`` (NPUWorkspaceAllocator.cpp malloc)
_WORKSPACE_POLICY = 1

#: ACL_ERROR_RT_MEMORY_ALLOCATION, the code of a recorded oom
_OOM_CODE = 207001

_IGNORED = ("alloc", "free_requested", "free_completed", "segment_map", "segment_unmap",
            "snapshot", "workspace_snapshot", "annotate")

#: torch writes every integer of a snapshot as a 64-bit IValue (``int64_t``; an address as
#: ``uint64_t`` fits too): a wider one is no snapshot's
_INT_LOW, _INT_END = -(1 << 63), 1 << 64


def _json_int(text: str) -> int | WideInt:
    # 20 digits hold every 64-bit integer; the rest is left unread
    return int(text) if len(text) <= 21 else WideInt(len(text.lstrip("-")))


def loads_json(text: str | bytes) -> Any:
    """A snapshot saved as JSON (``json.loads``), an integer too long for Python to read
    kept as a :class:`WideInt` (for :func:`_wide_field` to name), not refused as a whole file.
    O(len(text)).

    Raises:
        ValueError, RecursionError: not one JSON document (as ``json.loads``).
    """
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except ValueError:
        # "Exceeds the limit (4300 digits) for integer string conversion"
        return json.loads(text, parse_int=_json_int)


def _wide_field(record: dict[str, Any]) -> Any:
    """The first key of ``record`` whose value is an integer wider than 64 bits (or a
    :class:`WideInt`), or None. O(keys)."""
    low, end = _INT_LOW, _INT_END
    for key, value in record.items():
        kind = value.__class__
        if (kind is int and not low <= value < end) or kind is WideInt:
            return key
    return None


def _wide_problem(where: str, record: dict[str, Any], key: Any) -> str:
    """The message for field ``key`` of ``record`` at ``where`` (file and entry), which
    :func:`_wide_field` found."""
    return (f"{where}: field {brief(key)} is {brief(record[key])}; every integer of a "
            f"snapshot fits in 64 bits (damaged or hostile); ignored")


def is_snapshot(obj: Any) -> bool:
    """True for a snapshot dict (``segments`` or ``device_traces``) or a bare segment list
    (very old torch_npu, which ``_memory_viz`` reads the same way)."""
    if isinstance(obj, dict):
        return "segments" in obj or "device_traces" in obj
    return (isinstance(obj, list) and bool(obj) and isinstance(obj[0], dict)
            and "total_size" in obj[0] and "address" in obj[0])


def tensor_entries(obj: Any) -> int:
    """How many ``alloc`` entries (single tensors, which only a replay through the caching
    allocator replays) snapshot ``obj`` holds; 0 for this project's own export (a ``memsim``
    key), whose ``alloc`` entries are the device's mallocs. O(entries)."""
    if not isinstance(obj, dict) or "memsim" in obj:
        return 0
    traces = obj.get("device_traces")
    return sum(1 for per_device in traces if isinstance(per_device, list)
               for entry in per_device
               if isinstance(entry, dict) and entry.get("action") == "alloc") \
        if isinstance(traces, list) else 0


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _stack(frames: Any, cache: dict[int, Any] | None = None) -> list[str] | None:
    """torch frames (innermost first) as this project's stack (``file:line in name``,
    outermost first); None when there are none. O(frames); with ``cache`` (id of a frame
    list still alive -> its stack), a frame list shared by many entries is read once and
    its stack shared."""
    if not isinstance(frames, list) or not frames:
        return None
    if cache is not None:
        known = cache.get(id(frames), _UNSEEN)
        if known is not _UNSEEN:
            return cast("list[str] | None", known)
    out = []
    for f in frames:
        if isinstance(f, dict):
            out.append(f"{_text(f.get('filename'))}:{_line(f.get('line'))} in "
                       f"{_text(f.get('name'))}")
    out.reverse()
    result = out or None
    if cache is not None:
        cache[id(frames)] = result
    return result


_UNSEEN = object()


def _text(value: Any) -> str:
    """A frame's file or function name: the string, or ``?`` for anything else."""
    return value if type(value) is str else "?"


def _line(value: Any) -> int:
    """A frame's line number, or 0 for anything but a plain integer."""
    return value if type(value) is int and 0 <= value < 1 << 63 else 0


def _frames(stack: Any) -> list[dict[str, Any]]:
    """This project's stack strings as torch frames (innermost first)."""
    frames = []
    for entry in stack or ():
        text = str(entry)
        where, _, name = text.partition(" in ")
        filename, _, line = where.rpartition(":")
        number = int(line) if line.isdigit() else 0
        frames.append({"filename": filename if line.isdigit() else where, "line": number,
                       "name": name})
    frames.reverse()
    return frames


def _stream(value: Any) -> Any:
    """DECISION: stream 0, the default (null) stream of torch, is this project's None."""
    return None if value in (0, None) else value


#: the problems of a snapshot described one by one; the rest are counted
MAX_PROBLEMS = 100


class _Problems:
    """A snapshot's problems: the first :data:`MAX_PROBLEMS`, then a count. O(1) memory past
    the limit."""

    def __init__(self) -> None:
        self.first: list[str] = []
        self.more = 0

    def append(self, text: str) -> None:
        if len(self.first) < MAX_PROBLEMS:
            self.first.append(text)
        else:
            self.more += 1

    def listed(self) -> list[str]:
        if not self.more:
            return self.first
        return [*self.first, f"... and {self.more:,} more problems like these (the first "
                             f"{MAX_PROBLEMS} are listed)"]


def read_snapshot(obj: Any, name: str = "<snapshot>") -> tuple[list[dict[str, Any]], dict[str, Any],
                  list[str]]:
    """The events, header and problems of snapshot ``obj`` (see the module docstring).

    Bad entries are left out and described in the problems, never raised: the first
    :data:`MAX_PROBLEMS` one by one, then one line counting the rest (a file of a million bad
    entries costs its reader a line, not a million).

    Raises:
        SnapshotError: ``obj`` is not a snapshot at all.
    """
    if not is_snapshot(obj):
        raise SnapshotError(f"{name}: not a memory snapshot (no 'segments' or "
                            f"'device_traces')")
    if isinstance(obj, list):
        obj = {"segments": obj}
    problems = _Problems()
    header: dict[str, Any] = {"source": "torch-snapshot"}
    segments = obj.get("segments") or []
    traces = obj.get("device_traces")
    if not isinstance(segments, list):
        problems.append(f"{name}: 'segments' is not a list; ignored")
        segments = []
    if traces is not None and not isinstance(traces, list):
        problems.append(f"{name}: 'device_traces' is not a list; ignored")
        traces = None
    entries: list[tuple[int, int, dict[str, Any]]] = []  # (device, position, entry)
    # A pickle may name one object many times (its memo); torch never shares an entry, a
    # segment or a device's list between two places, so a second mention is left out: the
    # events stay as many as the file's bytes allow, never a product of its references.
    seen: set[int] = set()
    device: int | None
    for device, per_device in enumerate(traces or []):
        if not isinstance(per_device, list) or id(per_device) in seen:
            problems.append(f"{name}: device_traces[{device}] is not a list of its own; "
                            f"ignored")
            continue
        seen.add(id(per_device))
        for position, entry in enumerate(per_device):
            if not isinstance(entry, dict) or not isinstance(entry.get("action"), str) \
                    or id(entry) in seen:
                problems.append(f"{name}: device_traces[{device}][{position}]: not a trace "
                                f"entry of its own with an action; ignored")
                continue
            seen.add(id(entry))
            wide = _wide_field(entry)
            if wide is not None:
                problems.append(_wide_problem(f"{name}: device_traces[{device}][{position}]",
                                             entry, wide))
                continue
            entries.append((device, position, entry))
    # one order for all devices: by the trace's own sequence numbers, else by time, else the
    # devices one after another
    for order in ("seq", "time_us"):
        if entries and all(_int(e.get(order)) is not None for _, _, e in entries):
            # (the checker infers no type for a lambda with a default argument)
            entries.sort(key=lambda item, order=order:  # type: ignore[misc]
                         (item[2][order], item[0], item[1]))
            break
    events: list[dict[str, Any]] = []
    ignored: dict[str, int] = {}
    allocated: set[tuple[int, int]] = set()
    seen_alloc: set[tuple[int, int]] = set()
    early: list[dict[str, Any]] = []
    stacks: dict[int, Any] = {}
    workspace: set[tuple[int, int]] = set()
    for device, position, entry in entries:
        where = f"{name}: device_traces[{device}][{position}]"
        action = entry["action"]
        stream = _stream(entry.get("stream"))
        size = _int(entry.get("size"))
        thread = _int(entry.get("thread"))
        common = {"device": device, "stream": stream,
                  "thread": 0 if thread is None else thread}
        stack = _stack(entry.get("frames"), stacks)
        if stack is not None:
            common["stack"] = stack
        if action in ("segment_alloc", "segment_free", "oom"):
            requested = _int(entry.get("requested_size"))
            if requested is not None and requested > 0:
                size = requested
            if size is None or size < (1 if action != "oom" else 0):
                problems.append(f"{where}: {action} without a size; ignored")
                continue
        if action in ("segment_alloc", "segment_free"):
            addr = _int(entry.get("addr"))
            if addr is None or addr <= 0:
                problems.append(f"{where}: {action} without an address; ignored")
                continue
            key = (device, addr)
            if entry.get("api") == PHYSICAL_API:
                seen_alloc.add(key)
                # (the size was checked above, for every segment action)
                events.append(physical_event(entry, action, size,  # type: ignore[arg-type]
                                             addr, common))
            elif action == "segment_alloc":
                seen_alloc.add(key)
                allocated.add(key)
                call = _call(entry)
                if key in workspace and _int(entry.get("policy")) is None:
                    call["policy"] = _WORKSPACE_POLICY
                events.append({"event": "malloc", **call, "size": size, "ptr": addr,
                               **common})
            else:
                if key not in allocated and key not in seen_alloc:
                    # allocated before the ring buffer began: it was live at the start
                    early.append({"event": "malloc", **_call(entry), "size": size,
                                  "ptr": addr, "device": device, "stream": stream,
                                  "thread": common["thread"]})
                seen_alloc.add(key)
                allocated.discard(key)
                events.append({"event": "free", "ptr": addr, "size": size, **common})
        elif action == "oom":
            # DECISION: the recorded request (the caching allocator would have rounded it
            # to a segment); replay probes whether that request fits
            free = _int(entry.get("device_free"))
            message = entry.get("error")
            if not isinstance(message, str):
                message = "out of memory on the recorded device" + (
                    f" ({free} bytes free)" if free is not None else "")
            events.append({"event": "malloc_failed", **_call(entry), "size": size,
                           "code": _int(entry.get("code")) or _OOM_CODE, "error": message,
                           **common})
        else:
            if action not in _IGNORED:
                problems.append(f"{where}: unknown action {brief(action)}; ignored")
            else:
                ignored[action] = ignored.get(action, 0) + 1
                if action == "workspace_snapshot" and (at := _int(entry.get("addr"))):
                    workspace.add((device, at))
    # segments live at the end whose allocation the trace does not hold
    for index, segment in enumerate(segments):
        if not isinstance(segment, dict) or id(segment) in seen:
            problems.append(f"{name}: segments[{index}] is not a segment of its own; ignored")
            continue
        seen.add(id(segment))
        wide = _wide_field(segment)
        if wide is not None:
            problems.append(_wide_problem(f"{name}: segments[{index}]", segment, wide))
            continue
        device = _int(segment.get("device"))
        address = _int(segment.get("address"))
        total = _int(segment.get("total_size"))
        if device is None or address is None or address <= 0 or not total:
            problems.append(f"{name}: segments[{index}] lacks a device, address or "
                            f"total_size; ignored")
            continue
        if (device, address) in seen_alloc:
            continue
        requested = _int(segment.get("requested_size"))
        if segment.get("api") == PHYSICAL_API:
            early.append(physical_event(segment, "segment_alloc", requested or total,
                                         address, {"device": device, "stream": None,
                                                   "thread": 0}, total))
            continue
        event = {"event": "malloc", **_call(segment),
                 "size": requested if requested and segment.get("memsim") else total,
                 "ptr": address, "device": device,
                 "stream": _stream(segment.get("stream")), "thread": 0}
        stack = _stack(segment.get("frames"), stacks)
        if stack is not None:
            event["stack"] = stack
        early.append(event)
    events = early + events
    for seq, event in enumerate(events):
        event["seq"] = seq
    if ignored:
        header["ignored_actions"] = dict(sorted(ignored.items()))
    for field in ("product", "hbm_bytes", "ddr_bytes", "device_count"):
        value = obj.get("memsim", {}).get(field) if isinstance(obj.get("memsim"), dict) else None
        if value is not None:
            header[field] = value
    return events, header, problems.listed()


def _call(entry: dict[str, Any]) -> dict[str, Any]:
    """api, policy and module of an entry: the trace's own (written by to_memory_viz) or
    those of torch_npu's caching allocator."""
    out = {"api": entry.get("api") if isinstance(entry.get("api"), str) else SNAPSHOT_API,
           "policy": _int(entry.get("policy")) if _int(entry.get("policy")) is not None
           else SNAPSHOT_POLICY}
    if _int(entry.get("module")) is not None:
        out["module"] = entry["module"]
    return out


# -- writing -----------------------------------------------------------------------------------

def _footprint(event: dict[str, Any], product: str) -> int:
    """The recorded footprint, else the one the product's rules give the first page kind."""
    recorded = _int(event.get("footprint"))
    if recorded:
        return recorded
    profile = get_profile(product)
    size = _int(event.get("size"))
    if size is None:
        # no footprint and no size: nothing to place (it used to be a TypeError)
        raise SnapshotError(f"a malloc event with neither a footprint nor an integer size: "
                            f"{brief(event.get('size'))} at ptr {brief(event.get('ptr'))}")
    try:
        api = Api.parse(event.get("api", "aclrtMalloc"))
        policy = event.get("policy", 0)
        base, _ = parse_policy(policy, api)
        page = page_order(profile, size, base)[0]
    except Exception:  # an unreplayable call: normal pages, plain aclrtMalloc
        api, policy, page = Api.MALLOC, None, page_order(profile, size, None)[0]
    return align_up(rule_size(profile, size, page, api, policy), PAGE_BYTES[page])


def to_memory_viz(events: Iterable[Any], header: dict[str, Any] | None = None, *,
                  max_entries: int | None = None) -> dict[str, Any]:
    """The snapshot dict memory_viz opens, for a trace's events (see the module docstring).

    ``events`` are event dicts or :class:`~ascend_memsim.observe.stream.Event` records (any
    object with a dict's ``get``), read once in order, so a stream of a file serves. The
    snapshot is one object (a pickle is written whole): O(events) memory for the entries it
    holds, each distinct stack converted once. ``max_entries`` keeps only the last entries
    of each device, as torch's ring buffer does
    (``torch.cuda.memory._record_memory_history(max_entries=...)``): memory O(live blocks +
    max_entries); reading the snapshot back allocates the blocks live before the kept
    entries first, as for any torch snapshot.

    Raises:
        SnapshotError: an event on a device id the simulator cannot make (64 or more); a
            malloc event with neither a footprint nor an integer size.
    """
    header = header or {}
    product = header.get("product") or DEFAULT_PRODUCT
    try:
        get_profile(product)
    except Exception:
        product = DEFAULT_PRODUCT
    profile = get_profile(product)
    capacity = _int(header.get("hbm_bytes")) or _int(header.get("ddr_bytes")) or \
        profile.capacity(profile.main_memory)
    traces: dict[int, Any] = {}
    live: dict[tuple[int, int], dict[str, Any]] = {}
    in_use: dict[int, int] = {}
    if max_entries is not None and (type(max_entries) is not int or max_entries < 1):
        raise SnapshotError(f"max_entries must be a positive integer, got {brief(max_entries)}")
    # id of a stack -> (the stack, kept alive so the id stays its own; its torch frames)
    frames_of: dict[int, tuple[Any, list[dict[str, Any]]]] = {}
    for event in events:
        get = event.get
        kind = get("event")
        device = _int(get("device")) or 0
        if not 0 <= device < _MAX_DEVICES:
            raise SnapshotError(f"an event on device {brief(device)}; a snapshot lists "
                                f"devices 0 to {_MAX_DEVICES - 1}")
        out = traces.get(device)
        if out is None:
            out = traces[device] = deque(maxlen=max_entries)
        stream = _int(get("stream")) or 0
        extra = {k: get(k) for k in _EXTRA if get(k, _UNSEEN) is not _UNSEEN}
        stack = get("stack")
        known = frames_of.get(id(stack))
        if known is None:
            known = frames_of[id(stack)] = (stack, _frames(stack))
        frames = known[1]
        if kind == "malloc":
            footprint = _footprint(event, product)
            ptr, size = get("ptr"), get("size")
            live[(device, ptr)] = {"size": size, "footprint": footprint, "frames": frames,
                                   "stream": stream, "extra": extra}
            in_use[device] = in_use.get(device, 0) + footprint
            for action in ("segment_alloc", "alloc"):
                out.append({"action": action, "addr": ptr, "size": footprint,
                            "stream": stream, "frames": frames,
                            "requested_size": size, **extra})
        elif kind == "free":
            ptr = get("ptr")
            block = live.pop((device, ptr), None)
            if block is None:
                continue
            in_use[device] -= block["footprint"]
            _free_entries(out, ptr, block, stream, frames, extra)
        elif kind == "malloc_physical" or kind == "free_physical":
            physical_entry(event, device, out, live, in_use, frames, stream)
        elif kind == "malloc_failed":
            size = get("size", 0)
            out.append({"action": "oom", "device_free": max(0, capacity - in_use.get(device, 0)),
                        "size": size, "stream": stream, "frames": frames,
                        "requested_size": size, "error": str(get("error", "")), **extra})
        elif kind == "reset":
            for ptr in get("leaked", ()):
                block = live.pop((device, ptr), None)
                if block is not None:
                    in_use[device] -= block["footprint"]
                    _free_entries(out, ptr, block, stream, frames, extra)
    segments = []
    for (device, ptr), block in sorted(live.items()):
        footprint, size = block["footprint"], block["size"]
        call = {k: v for k, v in block["extra"].items() if k in ("api", "policy", "module",
                                                                 "handle", "page")}
        # a physical handle hands no block out: reserved, none of it allocated
        state, used = ("inactive", 0) if "handle" in call else ("active_allocated", footprint)
        segments.append({
            "device": device, "address": ptr, "total_size": footprint,
            "allocated_size": used, "active_size": used,
            "requested_size": size, "stream": block["stream"],
            # torch's small pool holds requests of at most 1 MiB (kSmallSize)
            "segment_type": "small" if footprint <= 1 << 20 else "large",
            "segment_pool_id": (0, 0), "is_expandable": False, "frames": block["frames"],
            "memsim": True, **call,
            "blocks": [{"address": ptr, "size": footprint, "requested_size": size,
                        "state": state, "frames": block["frames"]}]})
    devices = max(list(traces) + [device for device, _ in live] + [0]) + 1
    return {"segments": segments,
            "device_traces": [list(traces.get(d, ())) for d in range(devices)],
            "memsim": {k: header[k] for k in ("product", "hbm_bytes", "ddr_bytes",
                                              "device_count") if k in header}}


def _free_entries(out: Any, ptr: int, block: dict[str, Any], stream: int, frames: list[Any],
                  extra: dict[str, Any]) -> None:
    """The entries of one freed block, in torch's order: ``free_requested`` (the caching
    allocator's ``free``), ``free_completed`` (``free_block``: the tensor's memory is no
    longer allocated), then ``segment_free`` (the ``aclrtFree``). torch's
    ``_memory_viz.filter_alloc_free_pairs`` pairs an ``alloc`` with its ``free_requested``
    and reports a ``free_completed`` without one; MemoryViz's allocation timeline ends a
    block at ``free_completed``."""
    for action in ("free_requested", "free_completed", "segment_free"):
        out.append({"action": action, "addr": ptr, "size": block["footprint"],
                    "stream": stream, "frames": frames, "requested_size": block["size"],
                    **extra})


#: the trace's own fields each entry carries (memory_viz ignores keys it does not know)
_EXTRA = ("api", "policy", "module", "thread", "seq")
#: the device ids a snapshot may list (the simulator makes at most 64 devices)
_MAX_DEVICES = 64


def memory_viz_bytes(events: Iterable[Any], header: dict[str, Any] | None = None, *,
                     max_entries: int | None = None) -> bytes:
    """:func:`to_memory_viz` pickled with protocol 4, as ``_dump_snapshot`` writes it."""
    return pickle.dumps(to_memory_viz(events, header, max_entries=max_entries),
                        protocol=PICKLE_PROTOCOL)
