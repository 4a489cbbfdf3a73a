"""Allocation traces: record every event of a runtime, save it as JSON Lines, load it back.

A trace is a list of plain dicts, one per event, each with ``seq`` (0, 1, 2, ...),
``event`` (``malloc``, ``malloc_failed``, ``free``, ``reset``, ``set_device``,
``reset_device``, ``memcpy``, ``memset`` or any later event, recorded generically),
``device``, ``thread`` (threads numbered in order of first appearance), ``stream`` (when
the event names one, else None) and the event's own fields:

- ``malloc``: api, policy, size, module, ptr, rule_size, footprint, page, memory, fallback
  (true when HUGE_FIRST fell back to normal pages: the "fallback" event is this flag);
- ``malloc_failed``: api, policy, size, module, code, error (the explaining message);
- ``free``: ptr, size, footprint; ``reset``: leaked (pointers still live);
- ``malloc_physical`` / ``free_physical``: handle, size, footprint, page, phys (where the
  memory lies in the device's heap), and for a stream-ordered pool's 2 MiB granule ``pool``
  and ``va`` (where the pool maps it);
- ``mem_pool_create`` (pool, max_size), ``mem_pool_malloc`` / ``mem_pool_free`` (pool, ptr,
  size, footprint, stream), ``mem_pool_trim`` (pool, keep, released), ``mem_pool_set_attr``
  (pool, attr, value), ``mem_pool_destroy``;
- ``ipc_export`` (key, ptr, size), ``ipc_set_import_pid`` (key, pids), ``ipc_set_attr``
  (key, type, value), ``ipc_import`` (key, ptr, size, exporter, memory_device),
  ``ipc_close`` (key, ptr, size, role), ``shareable_export`` (handle, size, footprint,
  shareable), ``shareable_set_pid`` (shareable, pids), ``shareable_import`` (handle, size,
  footprint, shareable, exporter, memory_device), ``shareable_release`` (handle, size,
  footprint, shareable).

Replay places and gives back the memory of ``malloc``, ``free``, ``reset`` and the physical
events (a pool's granules among them, so a pool's memory counts as the runtime charges it);
it counts the pool and sharing events, which place no memory of their own (an import maps
another process's memory), and tells them to its observers
(:mod:`ascend_memsim.observe.recorded`); any other event is kept and skipped.

With ``stacks=True`` each event also carries ``stack``: the user's frames as
``file:line in function`` strings (:mod:`ascend_memsim.memory.sites`).

The format is written down as a JSON Schema of one line, shipped with the package
(``trace.schema.json`` beside this module; :func:`schema` returns it), so other tools can
write traces.

The file starts with a header line ``{"format": "ascend-memsim-trace", "version": 1, ...}``
naming the product and capacity it was recorded on. :func:`load` also reads RAPIDS RMM's
CSV allocation log (``Thread,Time,Action,Pointer,Size,Stream``, from
``rmm::mr::logging_resource_adaptor``) and PyTorch / torch_npu memory snapshots (the
``_dump_snapshot`` pickle, or the same dict as JSON; :mod:`ascend_memsim.observe.snapshot`).
:func:`dumps_rmm_csv` writes a trace as RMM's log. A file in none of these formats is a
:class:`TraceFormatError`, never an empty trace.

:func:`load` holds the whole trace (O(events) memory); for traces of any length,
:func:`ascend_memsim.observe.stream.open_trace` reads the same formats as a stream of compact
records.

Bad input never crashes a load: a line that cannot be read is left out and described, with
its line number, in :attr:`Trace.problems` (``strict=True`` raises :class:`TraceFormatError`
at the first one instead).
"""

from __future__ import annotations

import csv
import io
import json
import os
import stat
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, cast

from ..memory.errors import InvalidArgument, TraceFormatError
from ..memory.profiles import Memory
from ..memory.sites import capture_site
from .fields import (
    _HEADER_FIELDS,
    FORMAT,
    MAX_DEVICES,
    VERSION,
    _check_event,
    _check_header,
    _header_of,
    _valid,
)
from .plain import SnapshotError, safe_unpickle
from .rmm import _rmm_events, rmm_csv_lines
from .snapshot import is_snapshot, loads_json, read_snapshot

if TYPE_CHECKING:
    from ..memory.device import Device
    from ..runtime.runtime import Runtime

__all__ = ["Trace", "Recorder", "TraceFormatError", "load", "loads", "read_rmm_csv",
           "dumps_rmm_csv", "rmm_csv_lines", "from_snapshot", "schema", "FORMAT",
           "KNOWN_EVENTS", "MAX_DEVICES"]


#: The events replay places memory for (or that need nothing); the pool and sharing events
#: are counted (:data:`~ascend_memsim.observe.recorded.RECORDED_EVENTS`); any other event is
#: kept and skipped.
KNOWN_EVENTS = ("malloc", "malloc_failed", "free", "reset", "set_device", "reset_device",
                "malloc_physical", "free_physical")



@dataclass
class Trace:
    """Events (dicts), the header, the source line of each event and the load problems."""

    events: list[dict[str, Any]] = field(default_factory=list)
    header: dict[str, Any] = field(default_factory=dict)
    #: source line number of each event (1-based), parallel to ``events``
    lines: list[int] = field(default_factory=list)
    #: ``"name:line: what is wrong"`` for every line left out when loading
    problems: list[str] = field(default_factory=list)
    name: str = "<trace>"

    def __len__(self) -> int:
        return len(self.events)

    def line_of(self, index: int) -> int:
        """The source line of event ``index`` (its position + 2 when recorded in memory)."""
        return self.lines[index] if index < len(self.lines) else index + 2

    def dumps(self) -> str:
        """The trace as JSON Lines text, header first."""
        header = {"format": FORMAT, "version": VERSION, **{
            k: v for k, v in self.header.items() if k not in ("format", "version")}}
        out = [json.dumps(header, sort_keys=True)]
        out += [json.dumps(e, sort_keys=True) for e in self.events]
        return "\n".join(out) + "\n"

    def save(self, path: str) -> None:
        """Write the trace as JSON Lines to ``path``."""
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.dumps())

    def counts(self) -> dict[str, int]:
        """How many events of each kind."""
        out: dict[str, int] = {}
        for event in self.events:
            out[event["event"]] = out.get(event["event"], 0) + 1
        return out


def _jsonable(value: Any) -> Any:
    """A JSON value for an event field: numbers, strings, enums by value, others by repr."""
    if isinstance(value, Enum):
        return value.value
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    # a stream or event object: its integer handle when it has one
    for attr in ("handle", "stream_id", "id"):
        number = getattr(value, attr, None)
        if isinstance(number, int) and not isinstance(number, bool):
            return number
    return repr(value)


class Recorder:
    """A runtime observer that records every event into a :class:`Trace`.

    >>> from ascend_memsim import Runtime, MiB
    >>> with Runtime("A2", hbm_bytes=64 * MiB) as rt, Recorder(rt) as rec:
    ...     _ = rt.set_device(0)
    ...     rt.free(rt.malloc(100))
    >>> [e["event"] for e in rec.trace.events]
    ['set_device', 'malloc', 'free']
    """

    def __init__(self, runtime: Runtime, *, stacks: bool = False) -> None:
        self.runtime = runtime
        self.stacks = stacks
        self.trace = Trace(header=self._header())
        self._lock = threading.Lock()
        self._threads: dict[int, int] = {}
        self._attached = False

    def __enter__(self) -> Recorder:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Begin recording (idempotent)."""
        if not self._attached:
            self.runtime.add_observer(self)
            self._attached = True

    def stop(self) -> None:
        """Stop recording; the trace stays in :attr:`trace`.

        The header is taken again from the runtime: acl.init may have changed its product or
        capacity after recording began (before any device existed).
        """
        if self._attached:
            self.runtime.remove_observer(self)
            self._attached = False
            self.trace.header.update(self._header())

    def _header(self) -> dict[str, Any]:
        profile = self.runtime.profile
        # The totals programs saw (system-reserved memory left out), which a replay on the
        # same product takes as its capacity.
        return {"product": profile.name, "hbm_bytes": profile.total(Memory.HBM),
                "ddr_bytes": profile.total(Memory.DDR), "device_count": profile.device_count}

    def __call__(self, event: str, device: Device, info: dict[str, Any]) -> None:
        record: dict[str, Any] = {"event": event, "device": device.device_id,
                                  "stream": _jsonable(info.get("stream"))}
        if event == "malloc":
            block, request = info["block"], info["request"]
            record.update(api=request.api.value, policy=request.policy, size=request.size,
                          module=request.module, ptr=block.ptr, rule_size=block.rule_size,
                          footprint=block.footprint, page=block.page.value,
                          memory=block.memory.value, fallback=block.fallback)
        elif event == "malloc_failed":
            request, error = info["request"], info["error"]
            record.update(api=request.api.value, policy=request.policy, size=request.size,
                          module=request.module, code=int(getattr(error, "code", 0)),
                          error=str(error))
        elif event == "free":
            block = info["block"]
            record.update(ptr=block.ptr, size=block.size, footprint=block.footprint)
        elif event == "reset":
            record["leaked"] = [b.ptr for b in info["blocks"]]
        else:
            for key, value in info.items():
                if key != "stream":
                    record[key] = _jsonable(value)
        if self.stacks:
            site = capture_site()
            record["stack"] = [f"{f.filename}:{f.lineno} in {f.name}" for f in site]
        ident = threading.get_ident()
        with self._lock:
            thread = self._threads.get(ident)
            if thread is None:
                thread = self._threads[ident] = len(self._threads)
            record["thread"] = thread
            record["seq"] = len(self.trace.events)
            self.trace.events.append(record)


def schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of one trace line: the header or an event.

    >>> schema()["$defs"]["header"]["properties"]["format"]
    {'const': 'ascend-memsim-trace'}
    """
    from importlib.resources import files

    text = files(__package__).joinpath("trace.schema.json").read_text("utf-8")
    return cast("dict[str, Any]", json.loads(text))


# -- loading -------------------------------------------------------------------------------

def loads(text: str, name: str = "<trace>", *, strict: bool = False) -> Trace:
    """Parse JSON Lines trace text (or RMM CSV text, recognised by its header).

    Raises:
        TraceFormatError: with ``strict``, at the first bad line.
    """
    first = text.lstrip().split("\n", 1)[0]
    if first.replace(" ", "").startswith("Thread,Time,Action"):
        return read_rmm_csv(io.StringIO(text), name, strict=strict)
    if text.lstrip()[:1] in ("{", "["):
        # a snapshot as one JSON document (possibly indented over many lines)
        try:
            whole = loads_json(text)
        except (ValueError, RecursionError):
            whole = None
        if is_snapshot(whole):
            return from_snapshot(whole, name, strict=strict)
    trace = Trace(name=name)
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{name}:{number}"
        try:
            try:
                record = json.loads(line)
            except (ValueError, RecursionError) as e:
                raise _line_error(e, where) from None
            if isinstance(record, dict) and record.get("format") == FORMAT:
                trace.header = _header_of(record, where)
                continue
            if not _valid(record):
                record = _check_event(record, where)
        except TraceFormatError as e:
            if strict:
                raise
            trace.problems.append(e.message)
            continue
        trace.events.append(record)
        trace.lines.append(number)
    if not trace.events and not trace.header:
        raise _not_a_trace(name, trace.problems)
    return trace


def _line_error(error: Exception, where: str) -> TraceFormatError:
    """What is wrong with a line ``json.loads`` refused."""
    if isinstance(error, json.JSONDecodeError):
        return TraceFormatError(f"{where}: not a JSON object ({error.msg}; truncated line?)")
    if isinstance(error, RecursionError):
        return TraceFormatError(f"{where}: cannot read the line: nested too deeply")
    # e.g. an integer longer than int() reads (sys.set_int_max_str_digits), or bytes that
    # are not UTF-8
    return TraceFormatError(f"{where}: cannot read the line: {error}")


def _not_a_trace(name: str, problems: list[str]) -> TraceFormatError:
    first_problem = f" (first problem: {problems[0]})" if problems else ""
    return TraceFormatError(
        f"{name}: not a trace in any known format: no ascend-memsim trace header and no "
        f"event line; expected JSON Lines, an RMM CSV log or a PyTorch/torch_npu memory "
        f"snapshot{first_problem}")


def from_snapshot(obj: Any, name: str = "<snapshot>", *, strict: bool = False) -> Trace:
    """A trace of a PyTorch / torch_npu memory snapshot dict (already unpickled or parsed).

    Raises:
        TraceFormatError: ``obj`` is no snapshot; with ``strict``, at the first bad entry.
    """
    try:
        events, header, problems = read_snapshot(obj, name)
    except SnapshotError as e:
        raise TraceFormatError(str(e)) from None
    if strict and problems:
        raise TraceFormatError(problems[0])
    try:
        _check_header(header, f"{name}: 'memsim'")
    except TraceFormatError as e:
        problems.append(f"{e.message}; the recorded product and capacity are ignored")
        header = {k: v for k, v in header.items() if k not in _HEADER_FIELDS}
    trace = Trace(header=header, name=name, problems=problems)
    # one stack is shared by the events of one allocation site (torch_npu's snapshot shares
    # its frame lists): each is checked once
    stacks: set[int] = set()
    for event in events:
        try:
            # the common malloc and free entries pass the fast test, as a file's lines do
            if not _valid(event):
                event = _check_event(event, f"{name}: event {event['seq']}", stacks)
            trace.events.append(event)
            trace.lines.append(event["seq"] + 1)
        except TraceFormatError as e:
            if strict:
                raise
            trace.problems.append(e.message)
    return trace


def load(path: str, *, strict: bool = False) -> Trace:
    """Read a trace file: JSON Lines as written by :meth:`Trace.save`, an RMM CSV log, or a
    PyTorch / torch_npu memory snapshot (pickle or JSON).

    Raises:
        TraceFormatError: no known format; with ``strict``, at the first bad line.
        InvalidArgument: the file cannot be read.
    """
    with _open_file(path) as f:
        data = f.read()
    if data[:1] == b"\x80":
        # a pickle (protocol 2 or later): torch's _dump_snapshot
        try:
            obj = safe_unpickle(data)
        except SnapshotError as e:
            raise TraceFormatError(f"{path}: {e}") from None
        return from_snapshot(obj, path, strict=strict)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise TraceFormatError(f"{path}: not a trace in any known format (binary, not "
                               f"UTF-8 text nor a pickle): {e}") from None
    return loads(text, path, strict=strict)


def _open_file(path: str, *, text: bool = False) -> Any:
    """The trace file at ``path`` opened for reading (bytes, or UTF-8 text with bad bytes
    as U+FFFD), or InvalidArgument saying why not.

    Only a regular file is read: a device (``/dev/zero`` never ends), a FIFO (opening it
    waits for a writer; here it is opened without waiting) or a directory is refused, so a
    read is bounded by the file's size.
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)
                     | getattr(os, "O_CLOEXEC", 0))
    except PermissionError as e:
        # torch_npu's _dump_snapshot creates the file write-only for its owner (S_IWUSR)
        raise InvalidArgument(f"cannot read trace {path!r}: {e} (a torch_npu snapshot is "
                              f"written without read permission: chmod u+r it)") from None
    except OSError as e:
        raise InvalidArgument(f"cannot read trace {path!r}: {e}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = ("a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode)
                    else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                    else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")
            raise InvalidArgument(f"cannot read trace {path!r}: it is {kind}; a trace is "
                                  f"read from a regular file (save a stream to a file first)")
        if text:
            return open(fd, encoding="utf-8", errors="replace", buffering=1 << 20)
        return open(fd, "rb", buffering=1 << 20)
    except BaseException:
        os.close(fd)
        raise


def read_rmm_csv(source: Iterable[str], name: str = "<rmm log>", *,
                 strict: bool = False) -> Trace:
    """Read RMM's CSV allocation log into a trace of ``malloc``/``free`` events.

    Actions: ``allocate`` and ``free`` (also ``deallocate``), ``allocate failure``. Pointers
    and streams are ``0x``-prefixed hexadecimal (``0x7f...``) or decimal; thread ids are
    renumbered in order of appearance. RMM logs no API or policy: events get aclrtMalloc
    with HUGE_FIRST (``replay --api/--policy`` override them), unless the log has the
    ``Api``, ``Policy`` and ``Module`` columns :func:`rmm_csv_lines` adds.

    Raises:
        TraceFormatError: with ``strict``, at the first bad line.
    """
    trace = Trace(name=name, header={"source": "rmm-csv"})
    for event, number in _rmm_events(csv.reader(source), name, trace.problems,
                                     strict=strict):
        trace.events.append(event)
        trace.lines.append(number)
    return trace


def dumps_rmm_csv(trace: Trace, device: int | None = None) -> str:
    """The trace as RMM's ``logging_resource_adaptor`` CSV log (see :func:`rmm_csv_lines`).

    Raises:
        InvalidArgument: events of several devices and no ``device`` chosen.
    """
    devices = sorted({e.get("device", 0) for e in trace.events
                      if e.get("event") in ("malloc", "free", "malloc_failed")})
    if device is None and len(devices) > 1:
        raise InvalidArgument(f"{trace.name} has events on devices {devices}; an RMM log "
                              f"holds one device: choose one")
    return "".join(rmm_csv_lines(trace.events, device, trace.name))
