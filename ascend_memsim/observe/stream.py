"""Traces read as a stream of compact event records, for traces larger than memory.

:func:`open_trace` opens a trace file in any format :func:`~ascend_memsim.observe.trace.load`
reads and returns a :class:`TraceStream`: its header is read at once; iterating it reads the
file again from the start and yields one :class:`Event` per event, holding nothing once the
caller drops it. JSON Lines traces and RMM CSV logs are read a line at a time (memory O(1)
in the trace length: one line, plus one shared copy of each distinct stack and name);
PyTorch / torch_npu snapshots are read whole (a pickle cannot be read in parts; the snapshot
holds the trace's events anyway) and then streamed from memory.

>>> import os, tempfile
>>> from ascend_memsim import Runtime, MiB
>>> from ascend_memsim.observe.trace import Recorder
>>> with Runtime("A2", hbm_bytes=64 * MiB) as rt, Recorder(rt) as rec:
...     _ = rt.set_device(0)
...     rt.free(rt.malloc(100))
>>> path = os.path.join(tempfile.mkdtemp(), "t.jsonl")
>>> rec.trace.save(path)
>>> stream = open_trace(path)
>>> [(e.kind, e.size, e.line) for e in stream]
[('set_device', None, 2), ('malloc', 100, 3), ('free', 100, 4)]
>>> [e.as_dict() for e in stream] == load(path).events
True

:func:`records` gives the same records for an in-memory
:class:`~ascend_memsim.observe.trace.Trace`, so replay, stats and the pictures take either.
"""

from __future__ import annotations

import csv
import json
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

from ..memory.errors import TraceFormatError
from .fields import FORMAT, _check_event, _header_of, _valid
from .rmm import _rmm_events
from .snapshot import is_snapshot, loads_json
from .trace import Trace, _line_error, _not_a_trace, _open_file, from_snapshot, load

__all__ = ["Event", "TraceStream", "open_trace", "records"]

#: a progress callback: (done, total), in events or in bytes of the file
Progress = Callable[[int, int], None]

#: the optional fields an Event keeps in slots; absent ones are marked in ``Event.absent``
_SLOTTED = ("stream", "size", "ptr", "policy", "api", "module", "stack")
_BIT = {name: 1 << i for i, name in enumerate(_SLOTTED)}
_ALL_ABSENT = (1 << len(_SLOTTED)) - 1
_MISSING = object()
#: records between two progress calls when streaming a file
_PROGRESS_EVERY = 1 << 14


class Event:
    """One trace event as a compact record (``__slots__``; names interned, each distinct
    stack one shared tuple).

    ``kind`` is the ``event`` field; ``device``, ``stream``, ``size``, ``ptr``, ``policy``,
    ``api``, ``module`` and ``stack`` are the fields replay reads (None when the line has no
    such field); ``line`` is the source line (1-based); ``rest`` holds every other field
    (``seq``, ``footprint``, ...) or is None. :meth:`as_dict` gives back the dict
    :func:`~ascend_memsim.observe.trace.load` makes of the same line.
    """

    __slots__ = ("kind", "device", "line", "rest", "absent") + _SLOTTED

    # the fields hold what the file gave (its readers check them), hence Any
    kind: Any
    device: Any
    line: int
    rest: dict[str, Any] | None
    absent: int
    stream: Any
    size: Any
    ptr: Any
    policy: Any
    api: Any
    module: Any
    stack: Any

    def get(self, key: str, default: Any = None) -> Any:
        """A field by its trace name, as ``dict.get`` (O(1))."""
        if key == "event":
            return self.kind
        if key in _BIT:
            return default if self.absent & _BIT[key] else getattr(self, key)
        if key == "device":
            return self.device
        return default if self.rest is None else self.rest.get(key, default)

    def as_dict(self) -> dict[str, Any]:
        """The event as the plain dict :func:`~ascend_memsim.observe.trace.load` gives."""
        out = {"event": self.kind, "device": self.device}
        for name in _SLOTTED:
            if not self.absent & _BIT[name]:
                value = getattr(self, name)
                out[name] = list(value) if name == "stack" else value
        if self.rest:
            out.update(self.rest)
        return out

    def __repr__(self) -> str:
        return f"Event(line={self.line}, {self.as_dict()!r})"

    @classmethod
    def of(cls, fields: dict[str, Any], line: int = 0) -> Event:
        """The record of an event dict (``{"event": "malloc", "size": 4096, ...}``), which is
        left unchanged."""
        return _Compactor(cls)(dict(fields), line)


class _Compactor:
    """Turns checked event dicts into :class:`Event` records, sharing stacks and names."""

    def __init__(self, record_type: type[Event] | None = None) -> None:
        self.record_type = record_type or Event
        self.stacks: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        self.intern = sys.intern

    def __call__(self, record: dict[str, Any], line: int) -> Event:
        """O(fields) per record; ``record`` is consumed (its fields are moved out)."""
        pop = record.pop
        event = self.record_type()
        kind = pop("event", None)
        event.kind = self.intern(kind) if type(kind) is str else kind
        event.device = pop("device", 0)
        event.line = line
        absent = 0
        stream = pop("stream", _MISSING)
        if stream is _MISSING:
            stream, absent = None, 1
        elif type(stream) is str:
            stream = self.intern(stream)
        event.stream = stream
        value = event.size = pop("size", _MISSING)
        if value is _MISSING:
            event.size, absent = None, absent | 2
        value = event.ptr = pop("ptr", _MISSING)
        if value is _MISSING:
            event.ptr, absent = None, absent | 4
        value = event.policy = pop("policy", _MISSING)
        if value is _MISSING:
            event.policy, absent = None, absent | 8
        api = pop("api", _MISSING)
        if api is _MISSING:
            api, absent = None, absent | 16
        elif type(api) is str:
            api = self.intern(api)
        event.api = api
        value = event.module = pop("module", _MISSING)
        if value is _MISSING:
            event.module, absent = None, absent | 32
        stack = pop("stack", _MISSING)
        if stack is _MISSING:
            stack, absent = None, absent | 64
        elif type(stack) is list:
            key = tuple(stack)
            stack = self.stacks.setdefault(key, key)
        event.stack = stack
        event.absent = absent
        event.rest = record or None
        return event


class TraceStream:
    """A trace file read again on each iteration: ``for event in stream`` yields
    :class:`Event` records in file order, memory O(1) in the number of events for JSON Lines
    and RMM CSV (see the module docstring).

    ``header`` is known from :func:`open_trace` on; ``problems`` are those of the last
    complete pass (a line left out, with its number); ``events`` counts the events of the
    last complete pass (None before one).
    """

    def __init__(self, path: str, kind: str, header: dict[str, Any], *, strict: bool = False,
                 whole: Trace | None = None) -> None:
        self.path = self.name = path
        self.kind = kind  # "jsonl", "rmm-csv" or "snapshot"
        self.header = whole.header if whole is not None else header
        self.strict = strict
        self.problems: list[str] = list(whole.problems) if whole is not None else []
        self.events: int | None = len(whole.events) if whole is not None else None
        self._whole = whole
        try:
            self.size = os.path.getsize(path)
        except OSError:
            self.size = 0

    def __iter__(self) -> Iterator[Event]:
        return self.records()

    def records(self, progress: Progress | None = None) -> Iterator[Event]:
        """One pass over the trace. ``progress(done, total)`` is called about every 16k
        events, in bytes of the file (in events for a snapshot). O(events) time."""
        if self._whole is not None:
            yield from records(self._whole, progress)
            return
        problems: list[str] = []
        count = 0
        jsonl = self.kind == "jsonl"
        with _open(self.path, text=jsonl) as f:
            events = self._jsonl(f, problems) if jsonl else self._rmm(f, problems)
            tell = f.buffer.tell if jsonl else f.tell
            for count, event in enumerate(events, 1):
                if progress is not None and not count % _PROGRESS_EVERY:
                    progress(min(tell(), self.size), self.size)
                yield event
        if progress is not None:
            progress(self.size, self.size)
        self.problems = problems
        self.events = count

    def _jsonl(self, f: Any, problems: list[str]) -> Iterator[Event]:
        compact = _Compactor()
        # json's own scanner, without json.loads' per-call checks; any line it does not
        # take whole goes through json.loads, which gives the same value or the error (the
        # decoder's __init__ sets scan_once; the stubs do not declare it)
        scan = json.decoder.JSONDecoder().scan_once  # type: ignore[attr-defined]
        parse = json.loads
        name, strict = self.name, self.strict
        for number, line in enumerate(f, 1):
            try:
                try:
                    record, end = scan(line, 0)
                    if end != len(line) and line[end:].strip():
                        raise ValueError
                except (StopIteration, ValueError):
                    record = parse(line)
                if type(record) is dict and record.get("format") == FORMAT:
                    self.header = _header_of(record, f"{name}:{number}")
                    continue
                if not _valid(record):
                    record = _check_event(record, f"{name}:{number}")
            except (ValueError, RecursionError, TraceFormatError) as e:
                if not line.strip():
                    continue
                error = e if isinstance(e, TraceFormatError) else _line_error(
                    e, f"{name}:{number}")
                if strict:
                    raise error from None
                problems.append(error.message)
                continue
            yield compact(record, number)

    def _rmm(self, f: Any, problems: list[str]) -> Iterator[Event]:
        compact = _Compactor()
        lines = (raw.decode("utf-8", "replace") for raw in f)
        for event, number in _rmm_events(csv.reader(lines), self.name, problems,
                                         strict=self.strict):
            yield compact(event, number)

    def load(self, progress: Progress | None = None) -> Trace:
        """The whole trace in memory (a :class:`~ascend_memsim.observe.trace.Trace` of
        dicts, as :func:`~ascend_memsim.observe.trace.load` gives): O(events) memory."""
        if self._whole is not None:
            return self._whole
        trace = Trace(name=self.name)
        for event in self.records(progress):
            trace.events.append(event.as_dict())
            trace.lines.append(event.line)
        trace.header = self.header
        trace.problems = list(self.problems)
        return trace


def _open(path: str, *, text: bool = False) -> Any:
    """The trace file opened for reading bytes (or UTF-8 text), or InvalidArgument saying why
    it cannot be (a file that is not a regular file is refused).

    DECISION: bytes that are not UTF-8 in a JSON Lines trace read as U+FFFD (the line is
    read, or left out as any bad line), never refuse the whole file.
    """
    return _open_file(path, text=text)


def open_trace(path: str, *, strict: bool = False) -> TraceStream:
    """Open the trace at ``path`` for streaming: the format is told from its first line, the
    header read, and the file scanned up to its first event (a file with no header and no
    event in any format is refused here, as by ``load``). O(1) memory for JSON Lines and RMM
    CSV; a snapshot is read whole.

    Raises:
        TraceFormatError: no known format; with ``strict``, a bad line before the first event.
        InvalidArgument: the file cannot be read.
    """
    with _open(path) as f:
        head = f.read(1)
        first = (head + f.readline()).lstrip()
        while not first and f.peek(1):
            first = f.readline().lstrip()
    if head == b"\x80":
        return TraceStream(path, "snapshot", {}, strict=strict, whole=load(path, strict=strict))
    if first.replace(b" ", b"").startswith(b"Thread,Time,Action"):
        return TraceStream(path, "rmm-csv", {"source": "rmm-csv"}, strict=strict)
    if first[:1] in (b"{", b"["):
        try:
            value = loads_json(first)
        except (ValueError, RecursionError):
            value = None
            # a JSON document over many lines (an indented snapshot), or a bad first line
            whole = _whole_document(path)
            if is_snapshot(whole):
                return TraceStream(path, "snapshot", {}, strict=strict,
                                   whole=from_snapshot(whole, path, strict=strict))
        if is_snapshot(value):
            return TraceStream(path, "snapshot", {}, strict=strict,
                               whole=from_snapshot(value, path, strict=strict))
    stream = TraceStream(path, "jsonl", {}, strict=strict)
    problems: list[str] = []
    with _open(path, text=True) as f:
        for _ in stream._jsonl(f, problems):
            break
        else:
            if not stream.header:
                raise _not_a_trace(path, problems)
    return stream


def _whole_document(path: str) -> Any:
    """The file parsed as one JSON document, or None (O(file) memory, only for a file whose
    first line is not a JSON value)."""
    with _open(path) as f:
        try:
            return loads_json(f.read())
        except (ValueError, RecursionError):
            return None


def records(source: Trace | TraceStream, progress: Progress | None = None
            ) -> Iterator[Event]:
    """The events of a trace in memory or of a stream as :class:`Event` records, in order.

    Any other object with a ``records(progress)`` method yielding Events (and ``name``,
    ``header`` and ``problems`` attributes) is a stream too: replay takes it the same way.

    ``progress(done, total)`` is called about 100 times (in events for a trace in memory, in
    bytes for a file). O(events) time; memory O(1) beyond the source.

    Raises:
        TraceFormatError: an event of a trace in memory with a field its schema refuses
            (a file's bad lines are left out when it is read, so never from ``load``).
    """
    if not isinstance(source, Trace):
        yield from source.records(progress)
        return
    compact = _Compactor()
    events = source.events
    total = len(events)
    every = max(1, total // 100)
    stacks: set[int] = set()
    name = source.name
    for index, event in enumerate(events):
        if progress is not None and index % every == 0:
            progress(index, total)
        record = dict(event)
        if not _valid(record):
            # a trace built in memory is checked as a file's lines are (load's are already)
            record = _check_event(record, f"{name}: event {index} (line "
                                          f"{source.line_of(index)})", stacks)
        yield compact(record, source.line_of(index))
    if progress is not None:
        progress(total, total)
