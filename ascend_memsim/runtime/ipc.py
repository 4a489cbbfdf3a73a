"""Device memory shared between processes by IPC keys (11-07).

``hicann/runtime`` ``docs/zh/api_ref/11-07_IPC_memory_sharing.md``: process A allocates
(aclrtMalloc) and exports the block (aclrtIpcMemGetExportKey) under a key, a string of fixed
length (``len`` "固定配置为65"); with pid validation on (ACL_RT_IPC_MEM_EXPORT_FLAG_DEFAULT) A
puts B's pid on the whitelist (aclrtIpcMemSetImportPid); B imports the key
(aclrtIpcMemImportByKey) and gets an address of its own for A's memory: both see the same
bytes. Each process closes the key (aclrtIpcMemClose), every importer before the exporter
("需所有调用aclrtIpcMemImportByKey接口的进程中都调用aclrtIpcMemClose接口后, 调用
aclrtIpcMemGetExportKey接口的进程中才可以调用aclrtIpcMemClose接口, 否则可能导致异常"), then A
frees the block ("调用aclrtIpcMemImportByKey接口前, 需确保待共享内存存在, 不能提前释放").

Codes: memory.cpp refuses NULL pointers and keys with ACL_ERROR_INVALID_PARAM; api_error.cc
(IpcSetMemoryName, IpcOpenMemory, SetIpcMemPid, IpcSetMemoryAttr) a zero size or key length,
export flags above DISABLE_PID_VALIDATION, import flags above ENABLE_PEER_ACCESS, an attribute
type or value out of range with ACL_ERROR_RT_PARAM_INVALID; api_impl_standard_soc.cc needs a
context (ACL_ERROR_RT_CONTEXT_NULL) and enables peer access on an import with
ENABLE_PEER_ACCESS. The driver is closed; DECISIONs: the address must be the start of a live
aclrtMalloc block of the calling process and the size at most the block's; a key length below
65 (the key does not fit), an unknown or destroyed key, an import in the exporting process, a
whitelist set by another process are ACL_ERROR_RT_PARAM_INVALID; a pid not on the whitelist
ACL_ERROR_RT_NO_PERMISSION; each export makes a new key; a process may import one key more
than once (the runtime keeps a list of addresses per key) and each aclrtIpcMemClose in an
importer closes its oldest import.

DECISION, what the simulator adds: an import is a range of the importer's virtual address
space (the reservation window of 11-04) mapped to the exporter's block, so the data plane,
the streams and the sanitizer treat it as device memory of the exporter's device (a copy
between devices needs P2P memory and peer access, as any). A close by the exporter while an
importer still has the key open, and an aclrtFree of an exported block before every importer
closed, are sanitizer findings (``ipc-close-order``) in the exporting process; the calls
succeed. After the exporter frees the block, an importer's access is a ``use-after-free``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..memory.args import as_int, shown
from ..memory.constants import (
    IPC_KEY_LEN,
    AccessFlags,
    IpcMemAttrType,
    LocationType,
)
from ..memory.device import Block
from ..memory.errors import (
    FeatureNotSupported,
    InvalidArgument,
    InvalidArgumentType,
    InvalidRuntimeParam,
)
from ..memory.physical import PhysicalHandle, PhysicalProp
from ..memory.rules import Page
from ..memory.vmm import Mapping
from .peer import peer_access
from .sharing import check_importer, emit, parse_pids

__all__ = ["IpcExport", "IpcMemory", "ImportedMapping", "ipc_memory"]

#: pyacl refuses a key length of 1024 or more with ValueError (rt_memory.cpp,
#: WrapAclRtIpcMemGetExportKey: "key len should be less than 1024")
PYACL_KEY_MAX = 1024
#: RT_IPC_MEM_ATTR_MAX (src/inc/runtime/rt_inner_mem.h): the link values 0..3
_ATTR_VALUES = 4


@dataclass(eq=False, slots=True)
class ImportedMapping(Mapping):
    """An imported IPC key in the importer's address space (see the module docstring)."""

    key: str = ""
    exporter_pid: int = 0
    #: how the sanitizer names a later access: after the exporter freed the block, or
    #: after this process closed the import
    gone: str = "whose exporting process freed it (aclrtFree before every aclrtIpcMemClose)"

    def describe(self) -> str:
        return (f"{self.size}-byte IPC import at {self.ptr:#x} of key {self.key} (device "
                f"{self.device_id} memory of process {self.exporter_pid})")


class IpcExport:
    """One IPC key, machine-wide: the exporter's block and who has it open."""

    ipc = True

    def __init__(self, key: str, runtime: Any, block: Block, size: int,
                 validate: bool) -> None:
        self.key = key
        self.runtime = runtime
        self.block = block
        self.size = size
        self.validate = validate
        self.pids: set[int] = set()
        #: importer pid -> its imports of this key, oldest first
        self.imports: dict[int, list[ImportedMapping]] = {}
        #: the exporter closed the key / freed the block
        self.closed = False
        self.freed = False
        #: aclrtIpcMemSetAttr's ACCESS_LINK value (no effect on the simulation)
        self.link = 0

    def open_count(self) -> int:
        return sum(len(v) for v in self.imports.values())

    def release(self, handle: object) -> None:
        """Nothing to give back: the block is the exporter's (see PhysicalHandle.shared)."""

    def settle(self) -> None:
        """Nothing to settle (see :meth:`release`)."""


class IpcMemory:
    """The 11-07 calls of one process (``Runtime.extension("ipc")``)."""

    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime
        #: keys this process exported that still name live blocks: block ptr -> keys
        self._exported: dict[int, list[IpcExport]] = {}
        self._watching = False

    # -- export ----------------------------------------------------------------------------------

    def get_export_key(self, dev_ptr: object, size: object, key_len: object,
                       flags: object) -> str:
        """aclrtIpcMemGetExportKey: the key (see the module docstring for the rules)."""
        call = "aclrtIpcMemGetExportKey"
        ptr = as_int(dev_ptr, "dev_ptr")
        size = as_int(size, "size")
        key_len = as_int(key_len, "len")
        flags = as_int(flags, "flags")
        if key_len >= PYACL_KEY_MAX:
            raise InvalidArgument(f"{call}: len={key_len}; pyacl refuses 1024 or more")
        if ptr == 0:
            raise InvalidArgument(f"{call}: dev_ptr is NULL")
        if size == 0 or key_len == 0:
            raise InvalidRuntimeParam(f"{call}: {'size' if size == 0 else 'len'} is 0")
        if flags > 1:
            raise InvalidRuntimeParam(f"{call}: flags={flags}; only "
                                      f"ACL_RT_IPC_MEM_EXPORT_FLAG_DEFAULT (0) or "
                                      f"_DISABLE_PID_VALIDATION (1)")
        self.runtime.current_device()
        if key_len < IPC_KEY_LEN:
            raise InvalidRuntimeParam(f"{call}: len={key_len}; the key needs {IPC_KEY_LEN} "
                                      f"characters (11-07: 固定配置为65)")
        block = self.runtime.block(ptr)
        if block is None:
            inside = self.runtime.block_at(ptr)
            why = (f"it is {ptr - inside.ptr} bytes inside the {inside.describe()}"
                   if inside is not None else "no aclrtMalloc block of this process starts there")
            raise InvalidRuntimeParam(f"{call}: {ptr:#x} is not a block's start ({why})")
        if size > block.size:
            raise InvalidRuntimeParam(f"{call}: size={size} is more than the {block.describe()}")
        machine = self.runtime.machine
        self._watch()
        with machine.lock:
            key = f"memsim-ipc-{self.runtime.pid}-{machine.serial():08x}"
            record = IpcExport(key, self.runtime, block, size, flags == 0)
            if block.extra is None:
                block.extra = {}  # the bytes' slot, shared with every importer
            # the keys the exporter has not closed: reports and pictures name them
            block.extra.setdefault("ipc_keys", []).append(key)
            machine.ipc_keys[key] = record
            self._exported.setdefault(block.ptr, []).append(record)
        emit(self.runtime, "ipc_export", self.runtime.device_holding(block.ptr),
             {"key": key, "ptr": block.ptr, "size": size})
        return key

    def _watch(self) -> None:
        """Watch this process's frees and resets (once, from the first export on)."""
        with self.runtime.machine.lock:
            if self._watching:
                return
            self._watching = True
        self.runtime.add_observer(self._observe, events=("free", "reset"))

    def _observe(self, event: str, device: Any, info: dict[str, Any]) -> None:
        blocks = [info["block"]] if event == "free" else info.get("blocks", ())
        for block in blocks:
            with self.runtime.machine.lock:
                records = self._exported.pop(block.ptr, ())
            for record in records:
                if record.block is block:
                    self._exporter_freed(record, event)

    def _exporter_freed(self, record: IpcExport, event: str) -> None:
        """The exporter freed (or reset away) an exported block: importers' addresses now
        point at freed memory; an importer still holding it is a finding."""
        with self.runtime.machine.lock:
            record.freed = True
            opened = [(pid, m) for pid, maps in record.imports.items() for m in maps]
        if opened and event == "free":
            self._close_order("aclrtFree", record, f"the block of key {record.key} is freed while "
                              f"{len(opened)} import(s) of it are open", fail=False)
        for pid, mapping in opened:
            importer = self.runtime.machine.processes.get(pid)
            if importer is not None:
                _unmap(importer, mapping)

    def _close_order(self, call: str, record: IpcExport, what: str, *,
                     fail: bool = True) -> None:
        sanitizer = self.runtime.sanitizer
        if sanitizer.on:
            pids = ", ".join(str(p) for p in sorted(record.imports))
            sanitizer.ipc_close_order(call, record.block.ptr, record.size,
                                      f"{what} (process(es) {pids}); every importer must "
                                      f"call aclrtIpcMemClose first (11-07)", fail=fail)

    # -- whitelist, attributes -------------------------------------------------------------------

    def set_import_pid(self, key: object, pids: object) -> None:
        """aclrtIpcMemSetImportPid: let the processes ``pids`` import ``key``."""
        call = "aclrtIpcMemSetImportPid"
        key = _key(key, call)
        allowed = parse_pids(pids, call)
        self.runtime.current_device()
        with self.runtime.machine.lock:
            record = self._record(key, call)
            if record.runtime is not self.runtime:
                raise InvalidRuntimeParam(f"{call}: only the exporting process (pid "
                                          f"{record.runtime.pid}) sets the whitelist")
            record.pids.update(allowed)
        emit(self.runtime, "ipc_set_import_pid", self.runtime.current_device_or_none(),
             {"key": key, "pids": sorted(allowed)})

    def set_attr(self, key: object, attr_type: object, attr: object) -> None:
        """aclrtIpcMemSetAttr: the link between the dies (Atlas A3 only, 11-07)."""
        call = "aclrtIpcMemSetAttr"
        key = _key(key, call)
        kind = as_int(attr_type, "type", 0, (1 << 32) - 1)
        value = as_int(attr, "attr")
        if kind != IpcMemAttrType.ACCESS_LINK:
            raise InvalidRuntimeParam(f"{call}: type={kind}; only ACL_RT_IPC_MEM_ATTR_ACCESS_LINK")
        if value >= _ATTR_VALUES:
            raise InvalidRuntimeParam(f"{call}: attr={value}; a link value is 0 to "
                                      f"{_ATTR_VALUES - 1}")
        if self.runtime.profile.name != "A3":
            raise FeatureNotSupported(f"{call} is supported on Atlas A3 only (11-07)")
        self.runtime.current_device()
        with self.runtime.machine.lock:
            self._record(key, call).link = value
        emit(self.runtime, "ipc_set_attr", self.runtime.current_device_or_none(),
             {"key": key, "type": kind, "value": value})

    # -- import, close ---------------------------------------------------------------------------

    def import_by_key(self, key: object, flags: object) -> int:
        """aclrtIpcMemImportByKey: this process's address of the exporter's memory."""
        call = "aclrtIpcMemImportByKey"
        key = _key(key, call)
        flags = as_int(flags, "flags")
        if flags > 1:
            raise InvalidRuntimeParam(f"{call}: flags={flags}; only "
                                      f"ACL_RT_IPC_MEM_IMPORT_FLAG_DEFAULT (0) or "
                                      f"_ENABLE_PEER_ACCESS (1)")
        runtime = self.runtime
        current = runtime.current_device().device_id
        space = runtime.vmm._space()
        with space.lock, runtime.machine.lock:
            record = self._record(key, call)
            check_importer(record, runtime, call, f"key {key}", "aclrtIpcMemSetImportPid",
                           "11-07")
            block = record.block
            reservation = space.reserve(record.size)
            handle = PhysicalHandle(0, block.device_id, record.size, block.footprint, Page.HUGE,
                                    block.p2p, PhysicalProp(), block.ptr, extra=block.extra,
                                    shared=record)
            mapping = ImportedMapping(reservation.ptr, handle, reservation, key=key,
                                      exporter_pid=record.runtime.pid)
            mapping.access[LocationType.DEVICE, block.device_id] = AccessFlags.READWRITE
            reservation.maps[mapping.ptr] = mapping
            handle.maps.add(mapping.ptr)
            record.imports.setdefault(runtime.pid, []).append(mapping)
        if flags and current != block.device_id:
            # api_impl_standard_soc.cc IpcOpenMemory: EnableP2PWithOtherDevice
            peer = peer_access(runtime)
            with peer.lock:
                peer.enabled.add((current, block.device_id))
        emit(runtime, "ipc_import", runtime.current_device_or_none(),
             {"key": key, "ptr": mapping.ptr, "size": record.size,
              "exporter": record.runtime.pid, "memory_device": block.device_id})
        return mapping.ptr

    def close_key(self, key: object) -> None:
        """aclrtIpcMemClose: in an importer, close its oldest import of ``key``; in the
        exporter, destroy the key (no new import; imports still open are a finding)."""
        call = "aclrtIpcMemClose"
        key = _key(key, call)
        runtime = self.runtime
        runtime.current_device()
        machine = runtime.machine
        mapping = None
        with machine.lock:
            record = machine.ipc_keys.get(key)
            mine = [] if record is None else record.imports.get(runtime.pid, [])
            if mine:
                mapping = mine.pop(0)
                if not mine:
                    del record.imports[runtime.pid]
            elif record is not None and record.runtime is runtime and not record.closed:
                still = record.open_count()
                if still:
                    # reported before the key goes, so strict mode refuses a call unchanged
                    self._close_order(call, record, f"key {record.key} is closed by its "
                                      f"exporter while {still} import(s) of it are open")
                record.closed = True
                _unlist(record)
            else:
                raise InvalidRuntimeParam(f"{call}: key {key} is not open in this process")
            if record.closed and not record.open_count():
                del machine.ipc_keys[key]
        if mapping is not None:
            mapping.gone = "which aclrtIpcMemClose closed in this process"
            _unmap(runtime, mapping)
        emit(runtime, "ipc_close", runtime.current_device_or_none(),
             {"key": key, "ptr": record.block.ptr if mapping is None else mapping.ptr,
              "size": record.size, "role": "exporter" if mapping is None else "importer"})

    def _record(self, key: str, call: str) -> IpcExport:
        record: IpcExport | None = self.runtime.machine.ipc_keys.get(key)
        if record is None or record.freed or record.closed:
            why = ("no such key is open" if record is None else
                   "its block was freed" if record.freed else "its exporter closed it")
            raise InvalidRuntimeParam(f"{call}: key {key}: {why}")
        return record

    def imports(self) -> list[ImportedMapping]:
        """This process's open imports, oldest first."""
        machine = self.runtime.machine
        with machine.lock:
            return [m for r in machine.ipc_keys.values()
                    for m in r.imports.get(self.runtime.pid, ())]

    def close(self) -> list[object]:
        """aclFinalize: the process ends; its imports close, its keys are destroyed (nothing
        to report: the blocks were reported as leaks if the program never freed them)."""
        machine = self.runtime.machine
        mine: list[ImportedMapping] = []
        with machine.lock:
            for key, record in list(machine.ipc_keys.items()):
                mine += record.imports.pop(self.runtime.pid, [])
                if record.runtime is self.runtime:
                    record.closed = True
                    _unlist(record)
                if record.closed and not record.open_count():
                    del machine.ipc_keys[key]
            self._exported.clear()
        for mapping in mine:
            _unmap(self.runtime, mapping, remember=False)
        return []


def _unlist(record: IpcExport) -> None:
    """The exporter closed the key: its block no longer names it."""
    extra = record.block.extra  # made at the export
    keys = extra.get("ipc_keys", []) if extra is not None else []
    if record.key in keys:
        keys.remove(record.key)


def _unmap(runtime: Any, mapping: ImportedMapping, *, remember: bool = True) -> None:
    """Take an import out of ``runtime``'s address space (``remember``: the sanitizer keeps
    its range, so a later access is a use after free)."""
    space = runtime.vmm.space
    if space is None:
        return
    with space.lock:
        reservation = mapping.reservation
        if reservation.maps.get(mapping.ptr) is mapping:
            del reservation.maps[mapping.ptr]
        mapping.handle.maps.discard(mapping.ptr)
        if not reservation.maps and space.reservations.get(reservation.ptr) is reservation:
            del space.reservations[reservation.ptr]
    if remember and runtime.sanitizer.on:
        runtime.sanitizer.unmapped(mapping)


def _key(key: object, call: str) -> str:
    """A key as pyacl passes it (``"s"``: a str without NUL)."""
    if not isinstance(key, str):
        raise InvalidArgumentType(f"{call}: key must be a str, got {shown(key)}")
    if "\0" in key:
        raise InvalidArgumentType(f"{call}: key contains a NUL character")
    return key


def ipc_memory(runtime: Any) -> IpcMemory:
    """The runtime's :class:`IpcMemory`, made on first use (``Runtime.extension``)."""
    found: IpcMemory = runtime.extension("ipc", IpcMemory)
    return found
