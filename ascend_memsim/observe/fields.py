"""The fields of a trace line, checked against the trace's own JSON Schema
(``trace.schema.json``) once, where a trace is read, so every reader gets valid events.

:func:`_check_event` checks every field the schema names (others are kept as they are) and
fills in the defaults; :func:`_valid` is its fast test of the common malloc and free lines.
Messages start with ``file:line:`` and show a bad value in a few dozen characters whatever
its size (:func:`~ascend_memsim.observe.plain.brief`).
"""

from __future__ import annotations

from typing import Any

from ..memory.args import UINT32_MAX
from ..memory.constants import MODULE_ID_MAX, MODULE_NAMES
from ..memory.errors import TraceFormatError
from ..memory.rules import Api
from .plain import brief

__all__ = ["FORMAT", "VERSION", "MAX_DEVICES"]

FORMAT = "ascend-memsim-trace"
VERSION = 1

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


def _int_field(record: dict[str, Any], key: str, where: str, *, minimum: int = 0,
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


_NO_STACK: list[Any] = []
_STREAM_TYPES = (int, str)
_STR_ONLY = frozenset({str})
_PAGES = frozenset(_ENUMS["page"])
_MEMORIES = frozenset(_ENUMS["memory"])


def _check_event(record: Any, where: str, stacks: set[int] | None = None) -> dict[str, Any]:
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


def _header_of(record: dict[str, Any], where: str) -> dict[str, Any]:
    """The header line ``record`` with its fields checked against the schema, or
    TraceFormatError (another version, a field of the wrong type) naming the file and line."""
    if record.get("version") != VERSION:
        raise TraceFormatError(f"{where}: trace version {brief(record.get('version'))}"
                               f" is not {VERSION}")
    return _check_header(record, where)


_HEADER_FIELDS = ("product", "hbm_bytes", "ddr_bytes", "device_count")


def _check_header(header: dict[str, Any], where: str) -> dict[str, Any]:
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
