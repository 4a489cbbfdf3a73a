"""acl.rt's calls that share memory between processes: shareable handles (11-04), IPC keys
(11-07) and aclrtDeviceGetBareTgid.

pyacl binds mem_export_to_shareable_handle, mem_set_pid_to_shareable_handle,
mem_import_from_shareable_handle, device_get_bare_tgid, ipc_mem_get_export_key,
ipc_mem_set_import_pid, ipc_mem_import_by_key and ipc_mem_close (hicann/runtime
python/pyACL/rt/pyrt_methods.cpp), with rt_memory.cpp's shapes: a pid whitelist is a list,
the key length is passed and the key returned (``key, ret``). The V2 shareable-handle calls
and ipc_mem_set_attr are **not in pyacl**: offered under the pyacl-style name for teaching
(and for the C names in ``ascend_memsim.aclrt``); a program that calls them meets an
AttributeError on hardware.
"""

from __future__ import annotations

from typing import Any

from ..runtime.active import current_runtime
from ..runtime.ipc import ipc_memory
from ..runtime.shareable import shareable
from ._face import face as _face

__all__ = [
    "device_get_bare_tgid", "mem_export_to_shareable_handle", "mem_set_pid_to_shareable_handle",
    "mem_import_from_shareable_handle", "mem_export_to_shareable_handle_v2",
    "mem_set_pid_to_shareable_handle_v2", "mem_import_from_shareable_handle_v2",
    "ipc_mem_get_export_key", "ipc_mem_set_import_pid", "ipc_mem_import_by_key",
    "ipc_mem_set_attr", "ipc_mem_close",
]

#: The functions pyacl does not bind (pyrt_methods.cpp has no entry for them).
NOT_IN_PYACL = ("mem_export_to_shareable_handle_v2", "mem_set_pid_to_shareable_handle_v2",
                "mem_import_from_shareable_handle_v2", "ipc_mem_set_attr")


@_face(0)
def device_get_bare_tgid() -> int:
    """aclrtDeviceGetBareTgid: ``pid, ret``, the simulated process's pid."""
    return current_runtime().device_get_bare_tgid()


# -- shareable handles (11-04) -------------------------------------------------------------------

@_face(0)
def mem_export_to_shareable_handle(handle: int, handle_type: int, flags: int) -> int:
    """aclrtMemExportToShareableHandle: ``shareable_handle, ret`` (rt_memory.cpp: ``"kiK"``)."""
    return shareable(current_runtime()).export(handle, handle_type, flags)


@_face()
def mem_set_pid_to_shareable_handle(shareable_handle: int, pid: list) -> None:
    """aclrtMemSetPidToShareableHandle: ``ret``; ``pid`` a list of pids."""
    shareable(current_runtime()).set_pid(shareable_handle, pid)


@_face(0)
def mem_import_from_shareable_handle(shareable_handle: int, device_id: int) -> int:
    """aclrtMemImportFromShareableHandle: ``handle, ret`` (a handle of this process)."""
    return shareable(current_runtime()).import_(shareable_handle, device_id)


@_face(0)
def mem_export_to_shareable_handle_v2(handle: int, flags: int, share_type: int) -> Any:
    """aclrtMemExportToShareableHandleV2: ``shareable_handle, ret``: an int for
    ACL_MEM_SHARE_HANDLE_TYPE_DEFAULT, the 128-byte aclrtMemFabricHandle as bytes for FABRIC.
    Not in pyacl (pyrt_methods.cpp binds no such function): for teaching."""
    return shareable(current_runtime()).export_v2(handle, flags, share_type)


@_face()
def mem_set_pid_to_shareable_handle_v2(shareable_handle: Any, share_type: int,
                                       pid: list) -> None:
    """aclrtMemSetPidToShareableHandleV2: ``ret``.
    Not in pyacl (pyrt_methods.cpp binds no such function): for teaching."""
    shareable(current_runtime()).set_pid_v2(shareable_handle, share_type, pid)


@_face(0)
def mem_import_from_shareable_handle_v2(shareable_handle: Any, share_type: int,
                                        flags: int) -> int:
    """aclrtMemImportFromShareableHandleV2: ``handle, ret``, on the current device.
    Not in pyacl (pyrt_methods.cpp binds no such function): for teaching."""
    return shareable(current_runtime()).import_v2(shareable_handle, share_type, flags)


# -- IPC keys (11-07) ----------------------------------------------------------------------------

@_face("")
def ipc_mem_get_export_key(dev_ptr: int, size: int, key_len: int, flags: int) -> str:
    """aclrtIpcMemGetExportKey: ``key, ret`` (rt_memory.cpp: ``"kkkK"``; ``key_len`` 65,
    ACL_RT_IPC_MEM_EXPORT_FLAG_DEFAULT 0 or _DISABLE_PID_VALIDATION 1)."""
    return ipc_memory(current_runtime()).get_export_key(dev_ptr, size, key_len, flags)


@_face()
def ipc_mem_set_import_pid(key: str, pid: list) -> None:
    """aclrtIpcMemSetImportPid: ``ret``; ``pid`` a list of pids."""
    ipc_memory(current_runtime()).set_import_pid(key, pid)


@_face(0)
def ipc_mem_import_by_key(key: str, flags: int) -> int:
    """aclrtIpcMemImportByKey: ``dev_ptr, ret`` (an address of this process)."""
    return ipc_memory(current_runtime()).import_by_key(key, flags)


@_face()
def ipc_mem_set_attr(key: str, attr_type: int, attr: int) -> None:
    """aclrtIpcMemSetAttr: ``ret`` (Atlas A3 only).
    Not in pyacl (pyrt_methods.cpp binds no such function): for teaching."""
    ipc_memory(current_runtime()).set_attr(key, attr_type, attr)


@_face()
def ipc_mem_close(key: str) -> None:
    """aclrtIpcMemClose: ``ret``."""
    ipc_memory(current_runtime()).close_key(key)
