"""RAPIDS RMM's CSV allocation log, read as a stream of events and written from one.

The log of ``rmm::mr::logging_resource_adaptor`` is ``Thread,Time,Action,Pointer,Size,Stream``
(rmm ``cpp/src/mr/detail/logging_resource_adaptor_impl.cpp``); this project adds
``Api,Policy,Module``, what RMM cannot log, which RMM's own reader skips (rmm
``benchmarks/utilities/log_parser.hpp``, ``parse_csv``, takes its columns by name). Both
directions hold one row at a time: O(1) memory in the log's length.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator
from typing import Any

from ..memory.errors import InvalidArgument, TraceFormatError
from .fields import _APIS, _check_event
from .plain import brief

__all__ = ["rmm_csv_lines"]

_RMM_COLUMNS = ("Thread", "Time", "Action", "Pointer", "Size", "Stream")
#: columns of this project's own after RMM's: what an RMM log cannot say about a malloc
_RMM_EXTRA = ("Api", "Policy", "Module")


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


def _rmm_events(reader: Any, name: str, problems: list[str], *, strict: bool = False
                ) -> Iterator[tuple[dict[str, Any], int]]:
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


def _rmm_call(row: list[str], columns: dict[str, int], where: str) -> dict[str, Any]:
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
