"""Physical memory shared between processes by shareable handles (11-04).

``hicann/runtime`` ``docs/zh/api_ref/11-04_virtual_memory_management.md``: process A makes a
handle (aclrtMallocPhysical) and exports it (aclrtMemExportToShareableHandle, or V2) as a
*shareable handle*, a number another process may use; with pid validation on (flags
ACL_RT_VMM_EXPORT_FLAG_DEFAULT) A puts B's pid (aclrtDeviceGetBareTgid) on the whitelist
(aclrtMemSetPidToShareableHandle); B imports it (aclrtMemImportFromShareableHandle) as a
handle of its own, on a device of its choice, and maps it as any handle. The rules:

* one shareable handle per handle and one handle per shareable handle in a process
  ("handle与shareableHandle是一一对应的关系, 在同一个进程中, 不允许一对多、或多对一, 否则报错,
  例如重复调用本接口导出时则会返回报错");
* import only in another process ("不支持同一个进程中调用 ... 这两个接口, 只支持跨进程调用");
* the memory is freed when every process has freed its handle ("所有涉及共享内存的进程都必须
  释放其物理内存, 只有当所有相关进程都完成释放操作后, 物理内存才能真正被释放"); the exporter's
  aclrtFreePhysical destroys the shareable handle (no new import), the memory stays;
* import onto another device ("支持在一个Device上调用 ... 导出handle, 然后调用本接口生成另一个
  Device上的handle"), with peer access ("若跨Device, 则还需配合aclrtDeviceEnablePeerAccess").

Codes: the ACL layer (memory.cpp) refuses a NULL handle, a handleType other than NONE, a V2
import ``flags`` other than 0, an empty pid list with ACL_ERROR_INVALID_PARAM; api_error.cc
refuses export flags above DISABLE_PID_VALIDATION and a V2 shareType other than DEFAULT or
FABRIC with ACL_ERROR_RT_PARAM_INVALID, an unknown import device with
ACL_ERROR_RT_INVALID_DEVICEID. The rest is the driver's (closed); DECISIONs: an unknown or
destroyed shareable handle, a second export, an import in the exporting process or a second
one in a process, a whitelist set by another process than the exporter, an import onto
another device without peer access are ACL_ERROR_RT_PARAM_INVALID; a pid not on the whitelist
ACL_ERROR_RT_NO_PERMISSION; a handle unknown or freed ACL_ERROR_RT_INVALID_HANDLE; FABRIC
handles (between AI servers) only on Atlas A3 ("仅Atlas A3 ... 支持跨AI Server"), elsewhere
ACL_ERROR_RT_FEATURE_NOT_SUPPORT. The V1 and V2 DEFAULT handles are one number space. Every
call needs a current device (DECISION, as every memory call).
"""

from __future__ import annotations

from typing import Any, cast

from ..memory.args import SIZE_MAX, as_int
from ..memory.constants import HandleType, SharedHandleType
from ..memory.errors import (
    FeatureNotSupported,
    InvalidArgument,
    InvalidRuntimeParam,
)
from ..memory.physical import PhysicalHandle
from ..memory.vmm import AddressSpace
from .peer import peer_access
from .sharing import INT32, check_importer, emit, parse_pids

__all__ = ["SharedPhysical", "Shareable", "shareable"]

#: aclrtMemFabricHandle is ``uint8_t data[128]`` (11-04, aclrtMemExportToShareableHandleV2)
FABRIC_BYTES = 128


class SharedPhysical:
    """One exported handle, machine-wide: who holds the memory, who may import it."""

    ipc = False

    def __init__(self, value: int | bytes, runtime: Any, owner: PhysicalHandle,
                 validate: bool, share_type: SharedHandleType) -> None:
        self.value = value
        #: the exporting process and its handle (the memory lies in its device's heap)
        self.runtime = runtime
        self.owner = owner
        self.validate = validate
        self.share_type = share_type
        self.pids: set[int] = set()
        #: pid -> the handle imported there
        self.importers: dict[int, PhysicalHandle] = {}
        #: handles (exporter's and importers') that still hold the memory
        self.holders: list[PhysicalHandle] = [owner]
        #: the exporter's device was reset, or the memory went back: nothing to give back
        self.memory_gone = False
        #: what settle() still has to do: (importer, handle) releases to tell, give back
        self._released: list[tuple[Any, PhysicalHandle]] = []
        self._give_back = False

    def release(self, handle: PhysicalHandle) -> None:
        """``handle`` lets go (freed and unmapped, or its device reset). Called under the
        holder's address-space lock, so it only keeps the books: the last holder's memory
        goes back to the exporter's device in :meth:`settle`, which the caller runs after
        that lock is released (a device lock is never taken inside another process's
        address-space lock: the exporter's aclrtFree takes them the other way round)."""
        machine = self.runtime.machine
        with machine.lock:
            self.holders = [h for h in self.holders if h is not handle]
            if handle is self.owner:
                # The exporter's aclrtFreePhysical "实现销毁shareableHandle": no new import.
                machine.shareable.pop(self.value, None)
            for pid, imported in list(self.importers.items()):
                if imported is handle:
                    del self.importers[pid]
                    self._released.append((machine.processes.get(pid), handle))
            if not self.holders and not self.memory_gone:
                self.memory_gone = self._give_back = True

    def settle(self) -> None:
        """Tell importers' observers of their releases, and give the memory back to the
        exporter's device when the last holder let go (see :meth:`release`)."""
        machine = self.runtime.machine
        with machine.lock:
            released, self._released = self._released, []
            give_back, self._give_back = self._give_back, False
        for importer, handle in released:
            if importer is not None:
                emit(importer, "shareable_release", importer._table.made(handle.device_id),
                     {"handle": handle.handle, "size": handle.size,
                      "footprint": handle.footprint, "shareable": _plain(self.value)})
        if give_back:
            device = self.runtime._table.made(self.owner.device_id)
            if device is not None:
                device.give_physical(self.owner.phys)
                self.runtime.vmm._emit(device, "free_physical", self.owner)

    def owner_reset(self) -> None:
        """The exporter's device was reset: the memory went with its heap; the shareable
        handle is destroyed; importers keep their handles and the bytes (DECISION)."""
        with self.runtime.machine.lock:
            self.memory_gone = True
            self.holders = [h for h in self.holders if h is not self.owner]
            self.runtime.machine.shareable.pop(self.value, None)


class Shareable:
    """The shareable-handle calls of one process (``Runtime.extension("shareable")``)."""

    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime

    # -- export ----------------------------------------------------------------------------------

    def export(self, handle: object, handle_type: object, flags: object) -> int:
        """aclrtMemExportToShareableHandle: the shareable handle (a uint64)."""
        value = as_int(handle, "handle")
        handle_type = as_int(handle_type, "handle_type", *INT32)
        flags = as_int(flags, "flags")
        if value == 0:
            raise InvalidArgument("aclrtMemExportToShareableHandle: handle is NULL")
        if handle_type != HandleType.NONE:
            raise InvalidArgument(f"aclrtMemExportToShareableHandle: handle_type={handle_type}; "
                                  f"only ACL_MEM_HANDLE_TYPE_NONE (0)")
        # the DEFAULT kind's shareable handle is an int
        return cast(int, self._export(value, flags, SharedHandleType.DEFAULT,
                                      "aclrtMemExportToShareableHandle"))

    def export_v2(self, handle: object, flags: object, share_type: object) -> int | bytes:
        """aclrtMemExportToShareableHandleV2: an int for DEFAULT, the 128-byte
        aclrtMemFabricHandle as bytes for FABRIC."""
        value = as_int(handle, "handle")
        flags = as_int(flags, "flags")
        kind = as_int(share_type, "share_type", *INT32)
        if value == 0:
            raise InvalidArgument("aclrtMemExportToShareableHandleV2: handle is NULL")
        kind = _share_type(kind, "aclrtMemExportToShareableHandleV2")
        return self._export(value, flags, kind, "aclrtMemExportToShareableHandleV2")

    def _export(self, value: int, flags: int, kind: SharedHandleType, call: str) -> int | bytes:
        if flags > 1:
            raise InvalidRuntimeParam(f"{call}: flags={flags}; only ACL_RT_VMM_EXPORT_FLAG_DEFAULT "
                                      f"(0) or _DISABLE_PID_VALIDATION (1)")
        self._fabric_supported(kind, call)
        space = self.runtime.vmm._space()
        machine = self.runtime.machine
        with space.lock, machine.lock:
            found = space.handle(value, call)
            if found.shared is not None:
                why = ("it was imported from another process" if found.shared.owner is not found
                       else "it is already exported (one shareable handle per handle)")
                raise InvalidRuntimeParam(f"{call}: handle {value:#x} cannot be exported: {why}")
            serial = machine.serial()
            shared_value: int | bytes = (_fabric_value(self.runtime.pid, serial)
                                         if kind is SharedHandleType.FABRIC
                                         else (self.runtime.pid << 32) | serial)
            record = SharedPhysical(shared_value, self.runtime, found, flags == 0, kind)
            if found.extra is None:
                found.extra = {}  # the bytes' slot, shared with every importer
            found.shared = record
            machine.shareable[shared_value] = record
        emit(self.runtime, "shareable_export", self.runtime._table.made(found.device_id),
             {"handle": found.handle, "size": found.size, "footprint": found.footprint,
              "shareable": _plain(shared_value)})
        return shared_value

    def _fabric_supported(self, kind: SharedHandleType, call: str) -> None:
        if kind is SharedHandleType.FABRIC and self.runtime.profile.name != "A3":
            raise FeatureNotSupported(f"{call}: ACL_MEM_SHARE_HANDLE_TYPE_FABRIC (sharing "
                                      f"between AI servers) is supported on Atlas A3 only")

    # -- whitelist -------------------------------------------------------------------------------

    def set_pid(self, shareable: object, pids: object) -> None:
        """aclrtMemSetPidToShareableHandle: let the processes ``pids`` import it."""
        value = as_int(shareable, "shareable_handle")
        allowed = parse_pids(pids, "aclrtMemSetPidToShareableHandle")
        self._set_pid(value, allowed, "aclrtMemSetPidToShareableHandle")

    def set_pid_v2(self, shareable: object, share_type: object, pids: object) -> None:
        """aclrtMemSetPidToShareableHandleV2."""
        kind = as_int(share_type, "share_type", *INT32)
        value = _v2_value(shareable, "aclrtMemSetPidToShareableHandleV2")
        allowed = parse_pids(pids, "aclrtMemSetPidToShareableHandleV2")
        _share_type(kind, "aclrtMemSetPidToShareableHandleV2")
        self._set_pid(value, allowed, "aclrtMemSetPidToShareableHandleV2")

    def _set_pid(self, value: int | bytes, allowed: frozenset[int], call: str) -> None:
        self.runtime.current_device()
        machine = self.runtime.machine
        with machine.lock:
            record = self._record(value, call)
            if record.runtime is not self.runtime:
                raise InvalidRuntimeParam(f"{call}: only the exporting process (pid "
                                          f"{record.runtime.pid}) sets the whitelist")
            record.pids.update(allowed)
        emit(self.runtime, "shareable_set_pid", self.runtime._table.made(record.owner.device_id),
             {"shareable": _plain(value), "pids": sorted(allowed)})

    # -- import ----------------------------------------------------------------------------------

    def import_(self, shareable: object, device_id: object) -> int:
        """aclrtMemImportFromShareableHandle: a handle of this process on ``device_id``."""
        value = as_int(shareable, "shareable_handle")
        number = as_int(device_id, "device_id", *INT32)
        self.runtime.current_device()
        device = self.runtime._table.check_id(number)
        return self._import(value, device, "aclrtMemImportFromShareableHandle")

    def import_v2(self, shareable: object, share_type: object, flags: object) -> int:
        """aclrtMemImportFromShareableHandleV2: onto the current device."""
        kind = as_int(share_type, "share_type", *INT32)
        flags = as_int(flags, "flags")
        value = _v2_value(shareable, "aclrtMemImportFromShareableHandleV2")
        if flags:
            raise InvalidArgument(f"aclrtMemImportFromShareableHandleV2: flags={flags}; it is "
                                  f"reserved and must be 0")
        device = self.runtime.current_device().device_id  # memory.cpp: rtsGetDevice
        _share_type(kind, "aclrtMemImportFromShareableHandleV2")
        return self._import(value, device, "aclrtMemImportFromShareableHandleV2")

    def _import(self, value: int | bytes, device_id: int, call: str) -> int:
        runtime = self.runtime
        space: AddressSpace = runtime.vmm._space()
        machine = runtime.machine
        with space.lock, machine.lock:
            record = self._record(value, call)
            check_importer(record, runtime, call, "the shareable handle",
                           "aclrtMemSetPidToShareableHandle", "11-04")
            if runtime.pid in record.importers:
                raise InvalidRuntimeParam(f"{call}: this process already imported it as handle "
                                          f"{record.importers[runtime.pid].handle:#x} (one "
                                          f"handle per shareable handle)")
            owner = record.owner
            if device_id != owner.device_id and not peer_access(runtime).allows(
                    device_id, owner.device_id):
                raise InvalidRuntimeParam(
                    f"{call}: the memory is on device {owner.device_id}; importing it onto "
                    f"device {device_id} needs peer access (aclrtDeviceEnablePeerAccess)")

            def make(handle_value: int) -> PhysicalHandle:
                return PhysicalHandle(handle_value, device_id, owner.size, owner.footprint,
                                      owner.page, owner.p2p, owner.prop, owner.phys,
                                      extra=owner.extra, shared=record)

            imported = space.adopt(make)
            record.importers[runtime.pid] = imported
            record.holders.append(imported)
        emit(runtime, "shareable_import", runtime._table.get(device_id),
             {"handle": imported.handle, "size": imported.size, "footprint": imported.footprint,
              "shareable": _plain(value), "exporter": record.runtime.pid,
              "memory_device": owner.device_id})
        return imported.handle

    def _record(self, value: int | bytes, call: str) -> SharedPhysical:
        record: SharedPhysical | None = self.runtime.machine.shareable.get(value)
        if record is None:
            shown = value.hex()[:16] + "..." if isinstance(value, bytes) else f"{value:#x}"
            raise InvalidRuntimeParam(f"{call}: {shown} is not a live shareable handle (never "
                                      f"exported, or its exporter freed the handle)")
        return record

    def close(self) -> list[object]:
        """aclFinalize: the handles went with the devices (see VirtualMemory.forget_device)."""
        return []


def _share_type(kind: int, call: str) -> SharedHandleType:
    if kind not in (SharedHandleType.DEFAULT, SharedHandleType.FABRIC):
        raise InvalidRuntimeParam(f"{call}: share_type={kind}; only "
                                  f"ACL_MEM_SHARE_HANDLE_TYPE_DEFAULT (1) or _FABRIC (2)")
    return SharedHandleType(kind)


def _v2_value(shareable: object, call: str) -> int | bytes:
    """A V2 shareable handle: an int (DEFAULT) or the 128 bytes of a fabric handle."""
    if isinstance(shareable, (bytes, bytearray)):
        if len(shareable) != FABRIC_BYTES:
            raise InvalidArgument(f"{call}: a fabric handle is {FABRIC_BYTES} bytes, got "
                                  f"{len(shareable)}")
        return bytes(shareable)
    value = as_int(shareable, "shareable_handle", 0, SIZE_MAX)
    if value == 0:
        raise InvalidArgument(f"{call}: shareable_handle is NULL")
    return value


def _plain(value: int | bytes) -> int | str:
    """A shareable handle as a trace keeps it (a fabric handle as hex)."""
    return value.hex() if isinstance(value, bytes) else value


def _fabric_value(pid: int, serial: int) -> bytes:
    """DECISION: a fabric handle's 128 bytes name the exporting pid and a serial."""
    return b"memsim-fabric" + pid.to_bytes(8, "little") + serial.to_bytes(8, "little") + \
        bytes(FABRIC_BYTES - 29)


def shareable(runtime: Any) -> Shareable:
    """The runtime's :class:`Shareable`, made on first use (``Runtime.extension``)."""
    found: Shareable = runtime.extension("shareable", Shareable)
    return found
