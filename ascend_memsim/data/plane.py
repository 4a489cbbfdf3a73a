"""The data plane: memcpy and memset for a runtime.

:class:`DataPlane` checks the arguments (the rules of aclrtMemcpy / aclrtMemset in the
runtime's memory.cpp and api_error.cc), resolves each address to a *region* (a device block,
:class:`~ascend_memsim.data.contents.DeviceRegion`; a host block or a registered host buffer,
:mod:`ascend_memsim.data.host`; a mapped virtual range, :mod:`ascend_memsim.data.mapped`),
lets the sanitizer look at the access, and only then moves bytes. A failed call changes
nothing. Copies move memoryview slices, never single bytes in Python.
"""

from __future__ import annotations

import threading
from typing import Any

from ..memory.args import as_int
from ..memory.constants import MemcpyKind
from ..memory.errors import InvalidArgument, InvalidPointer, InvalidRuntimeParam
from ..memory.rules import UVM_BASE, UVM_END
from ..memory.units import plural
from .contents import DeviceRegion, Region
from .managed import ManagedAlloc

__all__ = ["DataPlane", "KIND_ENDS", "kind_of", "overrun"]

#: aclrtMemcpyKind values aclrtMemcpy accepts: memory.cpp MemcpyKindTranslate maps 0..5 only.
_MEMCPY_KINDS = range(6)
#: The direction each directed kind names, as (source is host, destination is host);
#: ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE is a host-to-device copy through a buffer. DEFAULT (4)
#: names none: the runtime infers it.
KIND_ENDS = {0: (True, True), 1: (True, False), 2: (False, True), 3: (False, False),
             5: (True, False)}


def kind_of(src_host: bool, dst_host: bool) -> MemcpyKind:
    """The kind that the two ends of a copy make (what ACL_MEMCPY_DEFAULT infers)."""
    return MemcpyKind(2 * (not src_host) + (not dst_host))


def overrun(region: Region, offset: int, count: int) -> str:
    """How far an access of ``count`` bytes at ``offset`` into ``region`` runs past it, in
    one wording for the error message and the sanitizer: past the requested size, and past
    the footprint (the bytes the region owns)."""
    end = offset + count
    return (f"{plural(end - region.size, 'byte')} past the end of the {region.describe()}, "
            f"{plural(end - region.limit, 'byte')} past its {region.limit}-byte footprint")


class DataPlane:
    """memcpy / memset for one runtime: checks, address resolution, then the byte moves.

    The runtime supplies ``host`` (a :class:`~ascend_memsim.data.host.HostMemory`), its devices
    and its ``sanitizer``. Thread-safe: one lock serialises the byte moves.
    """

    def __init__(self, runtime: Any) -> None:  # the Runtime, a layer above
        self.runtime = runtime
        self.lock = threading.RLock()

    # -- argument checks (vendor rules) ---------------------------------------------------------

    @staticmethod
    def check_memcpy(dst: object, dest_max: object, src: object, count: object,
                     kind: object) -> tuple[int, int, int, int] | None:
        """Checked (dst, src, count, kind), or None when there is nothing to do.

        Rules (runtime memory.cpp and api_error.cc): count 0 succeeds before any other
        check; NULL dst/src and kinds outside 0..5 are ACL_ERROR_INVALID_PARAM; count past
        dest_max is ACL_ERROR_RT_PARAM_INVALID. dst == src is returned too: :meth:`copy`
        checks its range and moves nothing.

        Raises:
            InvalidArgument, InvalidArgumentType: NULL pointer, bad kind, bad types.
            InvalidRuntimeParam: count > dest_max.
        """
        count = as_int(count, "count")
        if count == 0:
            return None
        dst = as_int(dst, "dst")
        src = as_int(src, "src")
        if dst == 0 or src == 0:
            raise InvalidArgument(f"{'dst' if dst == 0 else 'src'} is NULL")
        kind = as_int(kind, "kind", -(1 << 31), (1 << 32) - 1)
        if kind not in _MEMCPY_KINDS:
            names = ", ".join(f"{k.name}={k.value}" for k in MemcpyKind if k.value in _MEMCPY_KINDS)
            raise InvalidArgument(f"kind={kind} is not a kind aclrtMemcpy accepts ({names})")
        dest_max = as_int(dest_max, "dest_max")
        if count > dest_max:
            raise InvalidRuntimeParam(f"count={count} is more than dest_max={dest_max}")
        return dst, src, count, kind

    @staticmethod
    def check_memset(ptr: object, max_count: object, value: object,
                     count: object) -> tuple[int, int, int] | None:
        """Checked (ptr, count, low byte of value), or None when count is 0.

        Raises:
            InvalidArgument, InvalidArgumentType: NULL ptr, a value outside int32, bad types.
            InvalidRuntimeParam: count > max_count (DECISION: 107000, as memcpy; the runtime
                check was not found, its unit-test stub refuses it as an invalid value).
        """
        count = as_int(count, "count")
        if count == 0:
            return None
        ptr = as_int(ptr, "ptr")
        if ptr == 0:
            raise InvalidArgument("ptr is NULL")
        # aclrtMemset's value is an int32_t (pyacl parses it with "i": a larger int raises)
        value = as_int(value, "value", -(1 << 31), (1 << 31) - 1)
        max_count = as_int(max_count, "max_count")
        if count > max_count:
            raise InvalidRuntimeParam(f"count={count} is more than max_count={max_count}")
        return ptr, count, value & 0xFF

    # -- resolution ---------------------------------------------------------------------------

    def region_at(self, addr: int, count: int = 1) -> Region | None:
        """The region (host block, registered buffer, device block, mapped virtual range,
        managed allocation) holding ``addr``, or None; a mapped range reaches as far as
        ``count`` bytes need.

        A live device block first, then host memory: aclrtMallocHost blocks sit at real
        process addresses, which may fall inside a device's simulated window.
        """
        runtime = self.runtime
        vmm = runtime.vmm
        if vmm.space is not None:
            mapped = vmm.region_at(addr, count)  # data/mapped.py
            if mapped is not None:
                return mapped
        if addr >= runtime.host_limit:
            device = runtime.device_holding(addr)
            block = None if device is None else device.block_at(addr)
            if block is not None:
                return DeviceRegion(block)
        elif UVM_BASE <= addr < UVM_END:
            return runtime.managed.region_at(addr)  # managed memory (data/managed.py)
        return runtime.host.region_at(addr)

    def read_bytes(self, call: str, addr: int, size: int) -> bytes:
        """The ``size`` bytes at ``addr``, read for ``call`` after :meth:`resolve`'s checks.

        Raises:
            AclError: what :meth:`resolve` raises for the access.
        """
        out = bytearray(size)
        with self.lock:
            region, offset = self.resolve(call, addr, size, write=False)
            region.read_into(offset, memoryview(out))
        return bytes(out)

    def write_bytes(self, call: str, addr: int, payload: bytes) -> None:
        """Write ``payload`` at ``addr`` for ``call`` after :meth:`resolve`'s checks.

        Raises:
            AclError: what :meth:`resolve` raises for the access.
        """
        with self.lock:
            region, offset = self.resolve(call, addr, len(payload), write=True)
            region.write(offset, memoryview(payload))

    def resolve(self, call: str, addr: int, count: int, write: bool, *,
                deferred: bool = False) -> tuple[Region, int]:
        """(region, offset) for an access of ``count`` bytes at ``addr``, after the checks.

        ``deferred``: the access is queued, not done now; only check that the address is live
        and the access stays in its footprint (the rest is checked when it runs).

        Raises:
            InvalidPointer: no live region holds ``addr``, or the access leaves its footprint.
            SanitizerError: a finding the strict sanitizer refuses.
        """
        region = self.region_at(addr, count)
        sanitizer = self.runtime.sanitizer
        if region is None:
            foreign = self.runtime.host.foreign(addr, count, write)
            if foreign is not None:
                # Host memory the process mapped, passed raw (ndarray.ctypes.data, ...).
                if sanitizer.on:
                    sanitizer.unchecked_host(call, addr, count, write)
                return foreign, 0
            sanitizer.bad_address(call, addr, count, write)
            why = self.runtime.host.refusal(addr, count, write)
            raise InvalidPointer(f"{call}: {addr:#x} {why}")
        offset = addr - region.base
        end = offset + count
        if end > region.size:
            if end > region.limit:
                sanitizer.out_of_bounds(call, addr, count, write, region)
                raise InvalidPointer(f"{call}: {count} bytes at {addr:#x} run "
                                     f"{overrun(region, offset, count)}")
            if sanitizer.on and not deferred:
                sanitizer.padding_access(call, addr, count, write, region)
        if sanitizer.on and not deferred:
            if write and region.readonly:
                sanitizer.readonly_write(call, addr, count, region)
            if not write and sanitizer.initcheck:
                gap = region.first_gap(offset, count)
                if gap is not None:
                    sanitizer.uninitialized_read(call, addr, count, region, gap)
        return region, offset

    def check_p2p(self, call: str, src_region: Region, dst_region: Region,
                  kind: int | None = None) -> None:
        """Refuse a copy between two devices unless both blocks are P2P memory and peer
        access is enabled between the devices.

        Raises:
            InvalidRuntimeParam: DECISION: copies between devices need P2P blocks at both
                ends (107000), for aclrtMemcpy and aclrtMemcpyAsync alike; and peer access
                (aclrtDeviceEnablePeerAccess, either device for the other: see
                :mod:`ascend_memsim.runtime.peer`): the vendor FAQ "跨DeviceP2P数据交互配置失败"
                names both as causes of a failed copy between devices. IPC memory another
                process exported from another device than the current one (11-07 约束说明:
                "不同Device上的两个进程"): no ACL_MEMCPY_DEFAULT ("不支持 ... 自动判断复制方向"),
                no host end ("不支持Host->Device或Device->Host"), no synchronous copy within
                one device ("不支持同一个Device内的同步内存复制"); DECISION: each 107000.
        """
        self._check_imported(call, src_region, dst_region, kind)
        if src_region.host or dst_region.host:
            return
        a, b = src_region.block, dst_region.block
        if a.device_id == b.device_id or isinstance(a, ManagedAlloc) or isinstance(
                b, ManagedAlloc):
            # DECISION: managed memory is reachable from every device (11-05: the runtime
            # migrates it to whichever device touches it), so no P2P rule applies to it
            return
        if not (a.p2p and b.p2p):
            raise InvalidRuntimeParam(
                f"{call}: device {a.device_id} to device {b.device_id} needs P2P memory "
                f"at both ends (a *_P2P policy); got {a.describe()} and {b.describe()}")
        peer = self.runtime.extension("peer")
        if peer is None or not peer.allows(a.device_id, b.device_id):
            raise InvalidRuntimeParam(
                f"{call}: device {a.device_id} to device {b.device_id} needs peer access: "
                f"call device_enable_peer_access first")

    def _check_imported(self, call: str, src_region: Region, dst_region: Region,
                        kind: int | None) -> None:
        """The 11-07 copy rules for an import from another device (see :meth:`check_p2p`)."""
        ends = (src_region, dst_region)
        imported = [r for r in ends if not r.host and hasattr(r.block, "exporter_pid")]
        if not imported:
            return
        current = self.runtime.current_device_or_none()
        memory = imported[0].block.device_id
        if current is None or current.device_id == memory:
            return  # "同一个Device上的两个进程 ... 不存在以下要求"
        why = None
        if kind == MemcpyKind.DEFAULT:
            why = "the direction cannot be inferred (ACL_MEMCPY_DEFAULT)"
        elif src_region.host or dst_region.host:
            why = "no copy between it and host memory"
        elif call == "aclrtMemcpy" and src_region.block.device_id == dst_region.block.device_id:
            why = "no synchronous copy within one device (use aclrtMemcpyAsync)"
        if why is not None:
            raise InvalidRuntimeParam(
                f"{call}: {imported[0].block.describe()} is another process's memory on device "
                f"{memory}, used from device {current.device_id}: {why} (11-07)")

    # -- operations ---------------------------------------------------------------------------

    def memcpy(self, dst: object, dest_max: object, src: object, count: object, kind: object,
               *, call: str = "aclrtMemcpy", stream: object = None) -> None:
        """aclrtMemcpy: copy ``count`` bytes from ``src`` to ``dst``, direction from the addresses.

        The kind is checked (0..5) but the direction comes from the addresses, as the
        runtime does: a kind that contradicts the pointers (a host-to-device copy passed as
        DEVICE_TO_HOST, as the vendor's own samples and ModelZoo scripts do) still copies.
        hicann/runtime: aclrtMemcpy passes the kind to rtMemcpy (memory.cpp), whose
        ApiErrorDecorator::MemCopySync (api_error.cc) checks only its range, and the driver
        copies by address (NpuDriver::MemCopySync, npu_driver_mem.cc: drvMemcpy takes no
        kind); aclrtMemcpyAsync corrects the kind between pinned host memory and device memory
        (MemcpyKindAutoCorrect, api_error.cc). DECISION: the refusal that function gives for
        unregistered (pageable) host memory with a contradicting kind, which needs a driver
        that reports user memory attributes, is not modelled. The sanitizer reports the
        contradiction (``wrong-memcpy-kind``, a warning).

        Raises:
            InvalidArgument, InvalidRuntimeParam, InvalidPointer: see :meth:`check_memcpy`
            and :meth:`resolve`.
        """
        checked = self.check_memcpy(dst, dest_max, src, count, kind)
        if checked is None:
            return
        self.copy(*checked, call=call, stream=stream)

    def copy(self, dst: int, src: int, count: int, kind: int, *, call: str = "aclrtMemcpy",
             stream: object = None) -> None:
        """A checked copy (see :meth:`memcpy`): resolve both ends, then move the bytes."""
        if dst == src:
            # api_error.cc (MemCopySync): after the argument checks, dst == src returns
            # RT_ERROR_NONE without touching memory. DECISION: the simulator still checks
            # that the range lies in live memory, as for every copy (an unknown or overrunning
            # pointer is refused with 107000 and reported), and moves and reads nothing (so no
            # padding, read-only or initcheck finding).
            with self.lock:
                self.resolve(call, src, count, write=False, deferred=True)
            return
        with self.lock:
            src_region, src_off = self.resolve(call, src, count, write=False)
            dst_region, dst_off = self.resolve(call, dst, count, write=True)
            self.check_p2p(call, src_region, dst_region, kind)
            ends = KIND_ENDS.get(kind)
            if ends is not None and ends != (src_region.host, dst_region.host):
                sanitizer = self.runtime.sanitizer
                if sanitizer.on:
                    sanitizer.wrong_memcpy_kind(call, dst, src, count, MemcpyKind(kind),
                                                kind_of(src_region.host, dst_region.host),
                                                src_region, dst_region)
            out = dst_region.view(dst_off, count)
            if out is not None:
                src_region.read_into(src_off, out)
            else:
                source = src_region.source(src_off, count)
                if source is not None:
                    dst_region.write(dst_off, source)
                else:
                    dst_region.copy_from(src_region, src_off, dst_off, count)
        self._emit((dst_region, src_region), "memcpy", dst=dst, src=src, count=count,
                   kind=kind, stream=stream)

    def memset(self, ptr: object, max_count: object, value: object, count: object, *,
               call: str = "aclrtMemset", stream: object = None) -> None:
        """aclrtMemset: set ``count`` bytes at ``ptr`` to the low byte of ``value``.

        Raises:
            InvalidArgument, InvalidRuntimeParam, InvalidPointer: see :meth:`check_memset`.
        """
        checked = self.check_memset(ptr, max_count, value, count)
        if checked is None:
            return
        self.fill(*checked, call=call, stream=stream)

    def fill(self, ptr: int, count: int, value: int, *, call: str = "aclrtMemset",
             stream: object = None) -> None:
        """A checked memset (see :meth:`memset`)."""
        with self.lock:
            region, offset = self.resolve(call, ptr, count, write=True)
            region.fill(offset, count, value)
        self._emit((region,), "memset", ptr=ptr, count=count, value=value, stream=stream)

    def _emit(self, regions: tuple[Region, ...], event: str, **info: object) -> None:
        """Tell the observers of the device involved (for host-only moves: the current one)."""
        runtime = self.runtime
        device = None
        for region in regions:
            if not region.host:
                device = runtime.device(region.block.device_id)
                break
        else:
            device = runtime.current_device_or_none()
        if device is not None and (device.observers or event in device.subscribers):
            for observer in [*device.observers, *device.subscribers.get(event, ())]:
                observer(event, device, info)
