"""What the two ways of sharing memory between processes have in common: argument checks.

Shareable handles (11-04, :mod:`.shareable`) and IPC keys (11-07, :mod:`.ipc`) both take a
pid whitelist as pyacl passes it (a list, ``GetValuesFromPyList`` into ``int32_t``), both are
checked in the ACL layer (``hicann/runtime`` ``src/acl/aclrt_impl/memory.cpp``: NULL pointers
and a zero count are ACL_ERROR_INVALID_PARAM) and then in the runtime's
``src/runtime/api/impl/api_error.cc`` (a value out of range is ACL_ERROR_RT_PARAM_INVALID).
"""

from __future__ import annotations

from typing import Any, cast

from ..memory.args import as_int, shown
from ..memory.errors import InvalidArgument, InvalidArgumentType, InvalidRuntimeParam, NoPermission

__all__ = ["INT32", "check_importer", "emit", "parse_pids"]

INT32 = (-(1 << 31), (1 << 31) - 1)


def parse_pids(pids: object, call: str) -> frozenset[int]:
    """A pid whitelist from pyacl's list.

    Raises:
        InvalidArgumentType: not a list, or an entry that is not an int (pyacl: ValueError
            "argument 2 only support the format of list", "get values from PyList failed").
        InvalidArgument: an empty list (the C call gets a NULL ``pid`` and a zero count,
            memory.cpp: ACL_REQUIRES_NOT_NULL / ACL_REQUIRES_POSITIVE), or an entry outside
            int32.
    """
    if not issubclass(type(pids), list):
        raise InvalidArgumentType(f"{call}: the pid argument must be a list, got {shown(pids)}")
    # PyList_Check's test above, which the checker does not read as narrowing
    values = list.copy(cast("list[object]", pids))
    if not values:
        raise InvalidArgument(f"{call}: the pid list is empty")
    return frozenset(as_int(value, "pid", *INT32) for value in values)


def check_importer(record: Any, runtime: Any, call: str, what: str, whitelist: str,
                   section: str) -> None:
    """The rules both ways of sharing put on an import of ``record`` (an IPC key's or a
    shareable handle's export, ``what`` in messages): made in another process than the
    exporter (``section`` of the chapter says so), and by a pid on the whitelist
    (set with the ``whitelist`` call) when the export checks pids.

    Raises:
        InvalidRuntimeParam: the exporting process imports its own export.
        NoPermission: the export checks pids and this process's is not on its whitelist.
    """
    if record.runtime is runtime:
        raise InvalidRuntimeParam(f"{call}: {what} was exported by this process; import it in "
                                  f"another one ({section})")
    if record.validate and runtime.pid not in record.pids:
        raise NoPermission(f"{call}: pid {runtime.pid} is not on {what}'s whitelist "
                           f"({whitelist})")


def emit(runtime: Any, event: str, device: object, info: dict[str, Any]) -> None:
    """Tell ``runtime``'s observers (statistics, traces) about an event of a call that is not
    an allocation, with plain values (a trace records them as they are): the sharing events
    ``ipc_export``, ``ipc_set_import_pid``, ``ipc_set_attr``, ``ipc_import``, ``ipc_close``,
    ``shareable_export``, ``shareable_set_pid``, ``shareable_import``, ``shareable_release``;
    and others' (``value_write``, ``cmo``, ``symbol_load``, ...). Nothing when no observer
    sees the event."""
    table = runtime._table
    if device is not None and table.wants(event):
        for observer in table.observers_of(event):
            observer(event, device, info)
