"""Allocation traces: record every event of a runtime, save it as JSON Lines, load it back.

A trace is a list of plain dicts, one per event, each with ``seq`` (0, 1, 2, ...),
``event`` (``malloc``, ``malloc_failed``, ``free``, ``reset``, ``set_device``,
``reset_device``, ``memcpy``, ``memset`` or any later event, recorded generically),
``device``, ``thread`` (threads numbered in order of first appearance), ``stream`` (when
the event names one, else None) and the event's own fields:

- ``malloc``: api, policy, size, module, ptr, rule_size, footprint, page, memory, fallback
  (true when HUGE_FIRST fell back to normal pages: the "fallback" event is this flag);
- ``malloc_failed``: api, policy, size, module, code, error (the explaining message);
- ``free``: ptr, size, footprint; ``reset``: leaked (pointers still live).

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
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

from ..memory.args import UINT32_MAX
from ..memory.constants import MODULE_ID_MAX, MODULE_NAMES
from ..memory.errors import InvalidArgument, TraceFormatError
from ..memory.profiles import Memory
from ..memory.rules import Api
from ..memory.sites import capture_site
from .snapshot import SnapshotError, brief, is_snapshot, read_snapshot, safe_unpickle

if TYPE_CHECKING:
    from ..memory.device import Device
    from ..runtime.runtime import Runtime

__all__ = ["Trace", "Recorder", "TraceFormatError", "load", "loads", "read_rmm_csv",
           "dumps_rmm_csv", "rmm_csv_lines", "from_snapshot", "schema", "FORMAT",
           "KNOWN_EVENTS"]

FORMAT = "ascend-memsim-trace"
VERSION = 1

#: The events replay acts on; any other event is kept and skipped.
KNOWN_EVENTS = ("malloc", "malloc_failed", "free", "reset", "set_device", "reset_device")

_RMM_COLUMNS = ("Thread", "Time", "Action", "Pointer", "Size", "Stream")
#: columns of this project's own after RMM's: what an RMM log cannot say about a malloc
_RMM_EXTRA = ("Api", "Policy", "Module")


@dataclass
class Trace:
    """Events (dicts), the header, the source line of each event and the load problems."""

    events: list[dict] = field(default_factory=list)
    header: dict = field(default_factory=dict)
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

    def __call__(self, event: str, device: Device, info: dict) -> None:
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


def schema() -> dict:
    """The JSON Schema (draft 2020-12) of one trace line: the header or an event.

    >>> schema()["$defs"]["header"]["properties"]["format"]
    {'const': 'ascend-memsim-trace'}
    """
    from importlib.resources import files

    return json.loads(files(__package__).joinpath("trace.schema.json").read_text("utf-8"))


# -- loading -------------------------------------------------------------------------------

#: device ids a trace may name: the simulator makes at most 64 devices (Profile.device_count)
MAX_DEVICES = 64

#: fields of the schema that are counts (integers >= 0) wherever they appear
_COUNTS = ("seq", "thread", "module", "size", "rule_size", "footprint")
_ENUMS = {"page": ("normal", "huge", "huge1g"), "memory": ("HBM", "DDR")}
#: every spelling of an allocation API that Api.parse takes (the schema's ``api`` enum)
_APIS = frozenset(name for api in Api for name in (api.value, api.pyacl_name))
#: the fields of the schema that :func:`_valid` leaves to the full check, on a malloc and
#: on a free line
_SLOW_MALLOC = frozenset({"format", "code", "error", "leaked"})
_SLOW_FREE = _SLOW_MALLOC | {"api", "policy", "module", "rule_size", "page", "memory",
                             "fallback"}


def _int_field(record: dict, key: str, where: str, *, minimum: int = 0,
               maximum: int | None = None) -> int:
    value = record.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TraceFormatError(f"{where}: {key!r} must be an integer, got {brief(value)}")
    if value < minimum:
        raise TraceFormatError(f"{where}: {key}={brief(value)} is below {minimum}")
    if maximum is not None and value > maximum:
        shown = f"{maximum:#x}" if maximum > 1 << 16 else str(maximum)
        raise TraceFormatError(f"{where}: {key}={brief(value)} is above {shown}")
    return value


def _is_stack(stack: Any) -> bool:
    """True for a list of strings (O(frames))."""
    return type(stack) is list and all(type(frame) is str for frame in stack)


def _what(stack: Any) -> str:
    """What is wrong in a stack that is not a list of strings, for a message."""
    if type(stack) is not list:
        return f", got {brief(stack)}"
    index = next(i for i, frame in enumerate(stack) if type(frame) is not str)
    return f"; frame {index} is {brief(stack[index])}"


def _valid(record: Any) -> bool:
    """True when ``record`` is a malloc or free event that :func:`_check_event` would pass
    unchanged: the fast test of the common lines (O(fields + frames)); False means "check it
    fully"."""
    if type(record) is not dict:
        return False
    get = record.get
    kind = get("event")
    if kind == "malloc":
        if not record.keys().isdisjoint(_SLOW_MALLOC):
            return False
    elif kind != "free" or not record.keys().isdisjoint(_SLOW_FREE):
        return False
    device, stream, ptr = get("device"), get("stream"), get("ptr")
    seq, thread, footprint = get("seq", 0), get("thread", 0), get("footprint", 0)
    size, stack = get("size", 0), get("stack", _NO_STACK)
    # for integers, a | b | c is negative when any of them is
    if not (type(device) is int and type(ptr) is int and type(seq) is int
            and type(thread) is int and type(footprint) is int and type(size) is int
            and 0 <= device < MAX_DEVICES and ptr >= 1
            and (seq | thread | footprint | size) >= 0
            and (stream is None or type(stream) in _STREAM_TYPES)
            and (stack is _NO_STACK or (type(stack) is list
                                        and _STR_ONLY.issuperset(map(type, stack))))):
        return False
    if kind == "free":
        return True
    policy, module, rule = get("policy"), get("module", MODULE_ID_MAX + 1), get("rule_size", 0)
    return (size >= 1 and type(policy) is int and 0 <= policy <= UINT32_MAX
            and get("api") in _APIS and type(module) is int
            and (module > MODULE_ID_MAX or (0 <= module and module in MODULE_NAMES))
            and type(rule) is int and rule >= 0 and get("page", "normal") in _PAGES
            and get("memory", "HBM") in _MEMORIES and type(get("fallback", False)) is bool)


_NO_STACK: list = []
_STREAM_TYPES = (int, str)
_STR_ONLY = frozenset({str})
_PAGES = frozenset(_ENUMS["page"])
_MEMORIES = frozenset(_ENUMS["memory"])


def _check_event(record: Any, where: str, stacks: set[int] | None = None) -> dict:
    """The event ``record`` with each field the trace's schema names checked against it
    (``trace.schema.json``; other fields are kept as they are), defaults filled in, or
    TraceFormatError saying which field is wrong. O(fields + frames); a stack whose id is in
    ``stacks`` was checked before (a snapshot shares one stack among many events) and is
    not walked again.
    """
    if not isinstance(record, dict):
        raise TraceFormatError(f"{where}: an event must be a JSON object, got "
                               f"{type(record).__name__}")
    kind = record.get("event")
    if not isinstance(kind, str) or not kind:
        raise TraceFormatError(f"{where}: no 'event' name")
    if "format" in record:
        raise TraceFormatError(f"{where}: a header line (it has 'format') that is not "
                               f"{FORMAT!r}")
    record.setdefault("device", 0)
    # DECISION: a device id the simulator cannot make is refused where the trace is read,
    # so no reader builds anything per device id (the memory_viz export lists devices)
    device = _int_field(record, "device", where)
    if device >= MAX_DEVICES:
        raise TraceFormatError(f"{where}: device {brief(device)} is outside [0, "
                               f"{MAX_DEVICES}): the simulator makes at most {MAX_DEVICES} "
                               f"devices")
    # replay keeps bytes per stream in a dict: the stream is a name (or handle), nothing else
    stream = record.get("stream")
    if stream is not None and (isinstance(stream, bool) or not isinstance(stream, (int, str))):
        raise TraceFormatError(f"{where}: 'stream' must be null, an integer or a string, got "
                               f"{brief(stream)}")
    if kind in ("malloc", "malloc_failed"):
        if "size" not in record:
            raise TraceFormatError(f"{where}: a {kind} event needs a 'size'")
        # a recorded failure may have any size (size 0 fails on the real runtime too)
        _int_field(record, "size", where, minimum=1 if kind == "malloc" else 0)
    for key in _COUNTS:
        if key in record:
            _int_field(record, key, where)
    if "stack" in record:
        stack = record["stack"]
        if stacks is None or id(stack) not in stacks:
            if not _is_stack(stack):
                raise TraceFormatError(f"{where}: 'stack' must be a list of strings "
                                       f"('file:line in function'){_what(stack)}")
            if stacks is not None:
                stacks.add(id(stack))
    for key, allowed in _ENUMS.items():
        if key in record and record[key] not in allowed:
            raise TraceFormatError(f"{where}: {key!r} must be one of {', '.join(allowed)}, "
                                   f"got {brief(record[key])}")
    for key, kinds, name in (("fallback", (bool,), "true or false"),
                             ("error", (str,), "a string")):
        if key in record and type(record[key]) not in kinds:
            raise TraceFormatError(f"{where}: {key!r} must be {name}, got "
                                   f"{brief(record[key])}")
    code = record.get("code")
    if code is not None and (type(code) is not int):
        raise TraceFormatError(f"{where}: 'code' must be an integer, got {brief(code)}")
    leaked = record.get("leaked")
    if leaked is not None and not (type(leaked) is list and all(
            type(p) is int and p >= 1 for p in leaked)):
        raise TraceFormatError(f"{where}: 'leaked' must be a list of pointers (integers "
                               f">= 1), got {brief(leaked)}")
    if kind in ("malloc", "malloc_failed"):
        record.setdefault("policy", 0)
        record.setdefault("api", "aclrtMalloc")
    if "policy" in record:
        _int_field(record, "policy", where, maximum=UINT32_MAX)
    if "api" in record and record["api"] not in _APIS:
        raise TraceFormatError(f"{where}: unknown allocation API {brief(record['api'])}; "
                               f"known: {', '.join(a.value for a in Api)} (or their pyacl "
                               f"names)")
    if "module" in record:
        module = record["module"]
        # as Device.allocate: ids above MODULE_ID_MAX count as APP, others need a name
        if module <= MODULE_ID_MAX and module not in MODULE_NAMES:
            raise TraceFormatError(f"{where}: module id {module} has no entry in the "
                                   f"runtime's module table")
    if kind in ("malloc", "free") or "ptr" in record:
        _int_field(record, "ptr", where, minimum=1 if kind in ("malloc", "free") else 0)
    return record


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
            whole = json.loads(text)
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


def _header_of(record: dict, where: str) -> dict:
    """The header line ``record`` with its fields checked against the schema, or
    TraceFormatError (another version, a field of the wrong type) naming the file and line."""
    if record.get("version") != VERSION:
        raise TraceFormatError(f"{where}: trace version {brief(record.get('version'))}"
                               f" is not {VERSION}")
    return _check_header(record, where)


_HEADER_FIELDS = ("product", "hbm_bytes", "ddr_bytes", "device_count")


def _check_header(header: dict, where: str) -> dict:
    """``header`` when its product, capacities and device count have the schema's types."""
    product = header.get("product")
    if product is not None and type(product) is not str:
        raise TraceFormatError(f"{where}: header 'product' must be a string, got "
                               f"{brief(product)}")
    for key in ("hbm_bytes", "ddr_bytes"):
        if header.get(key) is not None:
            _int_field(header, key, where)
    if header.get("device_count") is not None:
        _int_field(header, "device_count", where, minimum=1, maximum=MAX_DEVICES)
    return header


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
            trace.events.append(_check_event(event, f"{name}: event {event['seq']}", stacks))
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


def _parse_int(text: str) -> int:
    """A pointer or stream of an RMM log: ``0x``-prefixed hexadecimal or decimal; an empty
    field or a null spelling (``nil``, ``(nil)``, ``null``, ``nullptr``) is 0.

    DECISION: no guessing from the digits: ``1e5`` is neither, not hexadecimal 0x1e5.

    Raises:
        ValueError: anything else.
    """
    text = text.strip()
    if text.lower() in ("", "nil", "(nil)", "null", "nullptr"):
        return 0
    return int(text, 16) if text.lower().startswith("0x") else int(text, 10)


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


def _rmm_events(reader: Any, name: str, problems: list[str], *, strict: bool = False
                ) -> Iterator[tuple[dict, int]]:
    """(event, line number) of each row of an RMM log read by ``reader`` (a csv.reader), in
    order; the rows left out are described in ``problems``. O(1) memory per row."""
    threads: dict[str, int] = {}
    columns: dict[str, int] | None = None
    seq = 0
    while True:
        try:
            row = next(reader)
            error = None
        except StopIteration:
            break
        except csv.Error as e:
            # e.g. a field over csv.field_size_limit(); the reader goes on at the next line
            row, error = None, e
        number = reader.line_num
        where = f"{name}:{number}"
        if row is not None and (not row or not "".join(row).strip()):
            continue
        try:
            if row is None:
                raise TraceFormatError(f"{where}: cannot read the CSV line: {error}")
            if columns is None:
                found = [c.strip() for c in row]
                missing = [c for c in _RMM_COLUMNS if c not in found]
                if missing:
                    raise TraceFormatError(f"{where}: RMM log header must name "
                                           f"{','.join(_RMM_COLUMNS)}; missing {missing}")
                columns = {c: found.index(c) for c in _RMM_COLUMNS + _RMM_EXTRA
                           if c in found}
                continue
            if len(row) < len(columns):
                raise TraceFormatError(f"{where}: {len(row)} fields, expected "
                                       f"{len(columns)} (truncated line?)")
            action = row[columns["Action"]].strip().lower()
            try:
                ptr = _parse_int(row[columns["Pointer"]])
                size = int(row[columns["Size"]].strip())
                stream = _parse_int(row[columns["Stream"]])
            except ValueError:
                raise TraceFormatError(f"{where}: cannot read the pointer, size or stream in "
                                       f"{','.join(row)!r}") from None
            if size < 0:
                raise TraceFormatError(f"{where}: negative size {size}")
            if ptr < 0:
                raise TraceFormatError(f"{where}: negative pointer {ptr}")
            thread = threads.setdefault(row[columns["Thread"]].strip(), len(threads))
            common = {"device": 0, "thread": thread, "stream": stream,
                      "time": row[columns["Time"]].strip()}
            if action == "allocate":
                if ptr <= 0:
                    raise TraceFormatError(f"{where}: allocate with a null pointer")
                event = {"event": "malloc", **_rmm_call(row, columns, where), "size": size,
                         "ptr": ptr, **common}
            elif action in ("free", "deallocate"):
                event = {"event": "free", "ptr": ptr, "size": size, **common}
            elif action in ("allocate failure", "allocate_failure", "failure"):
                event = {"event": "malloc_failed", **_rmm_call(row, columns, where),
                         "size": size, **common}
            else:
                raise TraceFormatError(f"{where}: unknown action {brief(action)} (expected "
                                       f"allocate, free or allocate failure)")
            _check_event(event, where)
        except TraceFormatError as e:
            if strict:
                raise
            problems.append(e.message)
            continue
        event["seq"] = seq
        seq += 1
        yield event, number
    if columns is None:
        problem = f"{name}:1: empty RMM log (no header line)"
        if strict:
            raise TraceFormatError(problem)
        problems.append(problem)


def _rmm_call(row: list[str], columns: dict[str, int], where: str) -> dict:
    """api, policy and module of an allocate row: this project's extra columns when the log
    has them and they are filled in, else (RMM logs none) aclrtMalloc with HUGE_FIRST.

    Raises:
        TraceFormatError: an unknown API, a policy or module that is not a number.
    """
    out: dict[str, Any] = {"api": "aclrtMalloc", "policy": 0}
    values = {c: row[i].strip() for c, i in columns.items() if c in _RMM_EXTRA}
    if values.get("Api"):
        if values["Api"] not in _APIS:
            raise TraceFormatError(f"{where}: unknown allocation API {brief(values['Api'])} "
                                   f"in the Api column")
        out["api"] = values["Api"]
    try:
        if values.get("Policy"):
            out["policy"] = _parse_int(values["Policy"])
        if values.get("Module"):
            out["module"] = int(values["Module"], 10)
    except ValueError:
        raise TraceFormatError(f"{where}: cannot read the Policy or Module column "
                               f"({brief(values.get('Policy'))}, "
                               f"{brief(values.get('Module'))})") from None
    return out


def _rmm_time(recorded: Any, index: int) -> str:
    """The recorded ``HH:MM:SS.ffffff`` of an RMM event, else (DECISION) the event's position
    as microseconds from midnight, so the order shows and the column parses."""
    if isinstance(recorded, str) and recorded and "," not in recorded and "\n" not in recorded:
        return recorded
    seconds, micros = divmod(index, 1_000_000)
    minutes, seconds = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours % 24:02d}:{minutes:02d}:{seconds:02d}.{micros:06d}"


def _rmm_stream(stream: Any) -> str:
    """``std::stringstream << std::hex << cudaStream_t`` (rmm::detail::format_stream): the
    null stream prints ``0``, any other ``0x...``."""
    return f"{stream:#x}" if isinstance(stream, int) and stream > 0 else "0"


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


def rmm_csv_lines(events: Iterable[Any], device: int | None = None,
                  name: str = "<trace>") -> Iterator[str]:
    """The lines (each ending in a newline) of RMM's ``logging_resource_adaptor`` CSV log
    (rmm ``cpp/src/mr/detail/logging_resource_adaptor_impl.cpp``) for ``events`` (dicts or
    stream records, read once: O(1) memory): the header
    ``Thread,Time,Action,Pointer,Size,Stream,Api,Policy,Module``, then ``%t,%H:%M:%S.%f,`` and
    ``allocate,%p,%zu,stream`` / ``free,...`` / ``allocate failure,(nil),...``. Pointers print
    as glibc's ``%p`` (``0x7f...``, ``(nil)``), sizes in decimal, streams in hex.

    RMM logs no allocation API, policy or module: they go in three more columns, which
    RMM's own reader skips (rmm ``benchmarks/utilities/log_parser.hpp``, ``parse_csv``,
    takes its columns by name) and :func:`read_rmm_csv` reads back, so a replay of the log
    places blocks as a replay of the trace does. RMM logs one device per file: ``device``
    picks it, else the device of the first event written. Only malloc, free and failed
    malloc events are written (RMM has no others).

    Raises:
        InvalidArgument: with no ``device`` chosen, an event on a second device (raised
            when the generator reaches it).
    """
    yield ",".join(_RMM_COLUMNS + _RMM_EXTRA) + "\n"
    chosen = device is not None
    for index, event in enumerate(events):
        get = event.get
        kind = get("event")
        if kind not in ("malloc", "free", "malloc_failed"):
            continue
        on = get("device", 0)
        if device is None:
            device = on
        elif on != device:
            if chosen:
                continue
            raise InvalidArgument(f"{name} has events on devices {device} and {on} (event "
                                  f"{index}); an RMM log holds one device: choose one")
        head = f"{get('thread', 0)},{_rmm_time(get('time'), index)}"
        stream = _rmm_stream(get("stream"))
        if kind == "free":
            yield f"{head},free,{get('ptr'):#x},{get('size', 0)},{stream},,,\n"
            continue
        module = get("module")
        call = (f"{get('api', 'aclrtMalloc')},{get('policy', 0):#x},"
                f"{'' if module is None else module}")
        if kind == "malloc":
            yield f"{head},allocate,{get('ptr'):#x},{get('size')},{stream},{call}\n"
        else:
            yield f"{head},allocate failure,(nil),{get('size', 0)},{stream},{call}\n"
