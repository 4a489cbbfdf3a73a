"""Stream-ordered memory pools (the vendor chapter 11-10): the aclrtMemPool* calls.

``Runtime.pools`` is one :class:`MemPools`; the face calls its methods. Sources:
``hicann/runtime`` ``docs/zh/api_ref/11-10_ordered_stream_memory_allocation.md``, the header
``include/external/acl/acl_rt_memory_soma.h``, the ACL layer
``src/acl/aclrt_impl/memory.cpp`` (aclrtMemPool*Impl), the runtime
``src/runtime/api/impl/api_impl_soma.cc``, ``src/runtime/feature/soma/soma.cc`` and
``stream_mem_pool.cc``.

Size: just over 600 lines, on purpose: the seven calls share the pool table, its lock and the
reuse rules; the event-order tables are apart (:mod:`.pool_order`), the segments too
(:mod:`ascend_memsim.memory.mempool`).

The model:

* A pool is a range of virtual addresses in the virtual-memory window (a reservation of the
  process's :class:`~ascend_memsim.memory.vmm.AddressSpace`, costing no device memory), of
  maxSize rounded up to 2 MiB (soma.cc AlignAndValidatePoolSize; maxSize 0 is the device's
  whole memory, rounded down). Its segments are kept by
  :class:`~ascend_memsim.memory.mempool.SegmentPool`.
* Device memory comes in 2 MiB granules: each granule of a busy or cached segment is a
  physical handle of the device, mapped at its address, placed by the same first-fit as
  every allocation. So aclrtGetMemInfo sees the pool's reserved memory, statistics, traces,
  replay and pictures see it as physical memory (events ``malloc_physical`` and
  ``free_physical``, with ``pool``), faults injected on the device reach it, and the data
  plane reads and writes it as mapped memory. DECISION: the vendor maps pool memory on the
  device (the SomaMemMng AICPU kernel, closed); here it is mapped when the call is made.
* aclrtMemPoolMallocAsync hands out a segment at once (the runtime does so on the host,
  SomaApi::AllocFromMemPool): a cached one the stream may reuse (below), else new granules.
* aclrtMemPoolFreeAsync gives the segment back at once as cached (SegmentManager::SegmentFree)
  and queues the free on the stream. When the free runs (the program synchronises), the
  segment's memory is no longer the program's: its device may not access it, and the
  sanitizer reports a later access as use after free. A pointer outside every pool is freed
  as aclrtFree would, when the stream reaches it (api_impl_soma.cc: a host callback calling
  DevFreeStatic).
* Reuse (11-10, "内存复用机制"): a cached segment freed on the same stream is always
  reusable (stream order protects it); one freed on another stream is reusable with
  ACL_RT_MEM_POOL_REUSE_FOLLOW_EVENT_DEPENDENCIES when the allocating stream waited for an
  event recorded on the freeing stream after the free (the runtime's sequence maps,
  PoolRegistry::UpdateEventMap / UpdateSeqMap); with ..._ALLOW_INTERNAL_DEPENDENCIES always,
  the allocating stream then waiting for the freeing stream's work up to the free; with
  ..._ALLOW_OPPORTUNISTIC when that free has already run. DECISION: in that order of
  preference, best-fit within each (the open source's TryToReuse is a stub; the rules are
  the document's).
* Release (11-10): at each stream or device synchronisation, a pool of the device holding
  more than its release threshold (default 0) gives back cached memory whose free has run,
  down to the threshold; aclrtMemPoolTrimTo does so down to its minBytesToKeep. DECISION:
  only segments whose free has run are released (memory the device may still be using is
  not taken away; 11-10: "不影响当前正在使用的物理内存").

Error codes: the ACL layer refuses NULL handles and bad props with ACL_ERROR_INVALID_PARAM
(100000); the runtime's RT_ERROR_INVALID_VALUE is ACL_ERROR_RT_PARAM_INVALID (107000); its
pool errors (RT_ERROR_MEM_POOL_NULL, RT_ERROR_POOL_OP_INVALID, RT_ERROR_POOL_PROP_INVALID,
RT_ERROR_MEM_POOL_ALLOC) and RT_ERROR_STREAM_NULL have no entry in errcode_manage.cc's table
and reach the program as ACL_ERROR_RT_INTERNAL_ERROR (507000, ErrorcodeManage::GetRtExtErrCode).

Thread-safe: one lock for the pools, taken before the address space's and a device's.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field
from typing import Any

from ..memory.args import SIZE_MAX, UINT32_MAX, as_int
from ..memory.constants import AccessFlags, AllocationType, HandleType, LocationType, MemAttr
from ..memory.errors import (
    FeatureNotSupported,
    InternalError,
    InvalidArgument,
    InvalidRuntimeParam,
    OutOfDeviceMemory,
)
from ..memory.mempool import GRANULE, REUSE_ATTRS, PoolAttr, Segment, SegmentPool, check_reserved
from ..memory.physical import PhysicalProp, field_of, parse_dict
from ..memory.rules import align_up
from .pool_order import EventOrder
from .work import Operation, Stream

__all__ = ["MemPools", "Pool", "PoolBlock", "POOL_BASE"]

#: Pool handles are ints from here, 64 apart (streams 0x1_..., contexts 0x2_..., compute
#: handles 0x3_..., events 0x4_...); none is a memory address.
POOL_BASE = 0x5_0000_0000

#: The products that have pools: 11-10, 产品支持情况 ("Atlas A2 训练系列产品/Atlas A2 推理系列
#: 产品: 支持"; every other product: 不支持).
POOL_PRODUCTS = ("A2",)


@dataclass(eq=False)
class Pool:
    """One aclrtMemPool: its device, segments, reservation and granules."""

    handle: int
    device_id: int
    segments: SegmentPool
    reservation: Any
    #: granule address -> its physical handle (mapped there)
    granules: dict[int, Any] = field(default_factory=dict)

    def describe(self) -> str:
        return (f"memory pool {self.handle:#x} of device {self.device_id} "
                f"({self.segments.size} bytes at {self.segments.base:#x})")


class PoolBlock:
    """A pool segment as the sanitizer sees it (a freed or leaked block)."""

    __slots__ = ("alloc_site", "device_id", "gone", "pool", "ptr", "size")

    def __init__(self, pool: Pool, seg: Segment, gone: str = "") -> None:
        self.pool, self.ptr, self.size = pool.handle, seg.ptr, seg.asked or seg.size
        self.device_id, self.alloc_site, self.gone = pool.device_id, seg.alloc_site, gone

    def describe(self) -> str:
        return f"{self.size}-byte block at {self.ptr:#x} of memory pool {self.pool:#x}"


class MemPools:
    """The 11-10 calls of one runtime (see the module docstring)."""

    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime
        self.lock = threading.RLock()
        self._pools: dict[int, Pool] = {}
        self._numbers = itertools.count()
        #: the records and waits of event-dependency reuse
        self.order = EventOrder()

    def __bool__(self) -> bool:
        return bool(self._pools)

    def pools(self) -> list[Pool]:
        """The live pools, oldest first."""
        with self.lock:
            return list(self._pools.values())

    # -- create and destroy --------------------------------------------------------------------

    def create(self, props: object) -> int:
        """aclrtMemPoolCreate: a pool on the device ``props["location"]["id"]``; its handle.

        ``props`` is pyacl's dict shape of aclrtMemPoolProps (DECISION: pyacl does not bind
        the call): ``{"allocType", "handleType", "location": {"id", "type"}, "maxSize",
        "reserved"}``, a missing key 0; ``reserved`` 0 or up to 32 zero bytes (a list or
        bytes).

        Raises:
            InvalidArgument: not a dict, allocType not PINNED, location type not DEVICE,
                reserved not all zero (memory.cpp), a handleType outside aclrtMemHandleType
                (DECISION). DeviceNotSet: no current device. InvalidDevice: bad location id.
            FeatureNotSupported: a product without pools (A2 only, 11-10).
            InvalidRuntimeParam: maxSize past the device's memory (soma.cc).
        """
        props = parse_dict(props, "aclrtMemPoolProps")
        location = parse_dict(dict.get(props, "location", {}), "aclrtMemLocation")
        alloc_type = field_of(props, "allocType", UINT32_MAX)
        handle_type = field_of(props, "handleType", UINT32_MAX)
        location_type = field_of(location, "type", UINT32_MAX)
        device_id = field_of(location, "id", UINT32_MAX)
        max_size = field_of(props, "maxSize", SIZE_MAX)
        if alloc_type != AllocationType.PINNED:
            raise InvalidArgument(f"aclrtMemPoolCreate: poolProps->allocType={alloc_type}; only "
                                  f"ACL_MEM_ALLOCATION_TYPE_PINNED (0)")
        if location_type != LocationType.DEVICE:
            raise InvalidArgument(f"aclrtMemPoolCreate: poolProps->location.type="
                                  f"{location_type}; only ACL_MEM_LOCATION_TYPE_DEVICE (1)")
        check_reserved(dict.get(props, "reserved", 0))
        if handle_type not in tuple(HandleType):
            raise InvalidArgument(f"aclrtMemPoolCreate: poolProps->handleType={handle_type} is "
                                  f"not an aclrtMemHandleType (0 or 2)")
        runtime = self.runtime
        runtime.current_device()
        device = runtime.device(device_id)
        if runtime.profile.name not in POOL_PRODUCTS:
            raise FeatureNotSupported(f"aclrtMemPoolCreate: {runtime.profile.name} has no "
                                      f"stream-ordered memory pools (11-10: Atlas A2 only)")
        total = device.mem_info(MemAttr.HBM_MEM)[1]
        size = (total // GRANULE * GRANULE if max_size == 0
                else align_up(max_size, GRANULE) if max_size <= SIZE_MAX - GRANULE else SIZE_MAX)
        if size > total or size == 0:
            raise InvalidRuntimeParam(f"aclrtMemPoolCreate: maxSize={max_size} is {size} bytes "
                                      f"after 2 MiB alignment, past the device's {total} bytes")
        space = runtime.vmm._space()
        with self.lock:
            reservation = space.reserve(size)
            handle = POOL_BASE + 64 * next(self._numbers)
            pool = Pool(handle, device.device_id, SegmentPool(reservation.ptr, size),
                        reservation)
            self._pools[handle] = pool
        self._emit(pool, "mem_pool_create", max_size=size)
        return handle

    def get(self, handle: object, call: str, unknown: type = InternalError) -> Pool:
        """The live pool ``handle``.

        Raises:
            InvalidArgument: NULL (memory.cpp). ``unknown`` (InternalError: the runtime's
            RT_ERROR_MEM_POOL_NULL) for an unknown or destroyed pool.
        """
        number = as_int(handle, "mem_pool")
        if number == 0:
            raise InvalidArgument(f"{call}: memPool is NULL")
        pool = self._pools.get(number)
        if pool is None:
            raise unknown(f"{call}: {number:#x} is not a memory pool, or was destroyed")
        return pool

    def destroy(self, handle: object) -> None:
        """aclrtMemPoolDestroy: give back all its memory and its addresses.

        DECISION: the runtime does not refuse a pool with blocks still handed out
        (SomaApi::StreamMemPoolDestroy checks only that the pool exists): they are reported
        as leaks, and a later access as use after free.

        Raises:
            InvalidArgument: NULL. InternalError: unknown or destroyed (RT_ERROR_MEM_POOL_NULL).
        """
        self.runtime.current_device()
        with self.lock:
            pool = self.get(handle, "aclrtMemPoolDestroy")
            leaked = self._drop(pool, "which aclrtMemPoolDestroy released with its pool")
        self.runtime.sanitizer.leaks("aclrtMemPoolDestroy", leaked)
        self._emit(pool, "mem_pool_destroy")

    def _drop(self, pool: Pool, gone: str) -> list[PoolBlock]:
        """Release all of ``pool`` (with the lock held); its busy blocks."""
        del self._pools[pool.handle]
        busy = [PoolBlock(pool, s, gone) for s in pool.segments.busy()]
        sanitizer = self.runtime.sanitizer
        if sanitizer.on:
            for block in busy:
                sanitizer.unmapped(block)
        for ptr, size in pool.segments.release_all():
            self._unback(pool, ptr, size)
        self.runtime.vmm.space.release(pool.reservation.ptr)
        return busy

    def forget_device(self, device: Any) -> list[PoolBlock]:
        """The device is being reset: its pools go; their busy blocks (leaks)."""
        leaked: list[PoolBlock] = []
        with self.lock:
            for pool in [p for p in self._pools.values() if p.device_id == device.device_id]:
                leaked += self._drop(pool, "which went with its pool at the device's reset")
            self.order.forget_device(device.device_id)
        return leaked

    # -- attributes ----------------------------------------------------------------------------

    def set_attr(self, handle: object, attr: object, value: object) -> None:
        """aclrtMemPoolSetAttr (stream_mem_pool.cc SegmentManager::SetAttribute).

        The reuse switches take a uint32 (non-zero is 1), the threshold a uint64 up to the
        pool's size; the high-water marks only 0 (a reset); the current figures are
        read-only.

        Raises:
            InvalidArgument: NULL pool. InvalidRuntimeParam: unknown pool, value None (NULL),
                a read-only attribute (soma.cc). InternalError: an unknown attribute or a
                value out of range (RT_ERROR_POOL_PROP_INVALID).
            InvalidArgumentType: not ints.
        """
        self.runtime.current_device()
        call = "aclrtMemPoolSetAttr"
        with self.lock:
            pool = self.get(handle, call, unknown=InvalidRuntimeParam)
            attr = as_int(attr, "attr", -(1 << 31), (1 << 31) - 1)
            if value is None:
                raise InvalidRuntimeParam(f"{call}: value is NULL")
            if attr in (PoolAttr.ATTR_RESERVED_MEM_CURRENT, PoolAttr.ATTR_USED_MEM_CURRENT):
                raise InvalidRuntimeParam(f"{call}: {PoolAttr(attr).name} is read-only")
            segments = pool.segments
            if attr not in tuple(PoolAttr):
                raise InternalError(f"{call}: attr={attr} is not an aclrtMemPoolAttr")
            if attr in REUSE_ATTRS:
                value = int(as_int(value, "value", 0, UINT32_MAX) != 0)
                segments.reuse[PoolAttr(attr)] = value
            elif attr == PoolAttr.ATTR_RELEASE_THRESHOLD:
                value = as_int(value, "value", 0, SIZE_MAX)
                if value > segments.size:
                    raise InternalError(f"{call}: release threshold {value} is more than the "
                                        f"pool's {segments.size} bytes")
                segments.threshold = value
            elif as_int(value, "value", 0, SIZE_MAX):
                raise InternalError(f"{call}: {PoolAttr(attr).name} can only be reset to 0")
            elif attr == PoolAttr.ATTR_RESERVED_MEM_HIGH:
                segments.reserved_high = value = 0
            else:
                segments.used_high = value = 0
        self._emit(pool, "mem_pool_set_attr", attr=attr, value=value)

    def get_attr(self, handle: object, attr: object) -> int:
        """aclrtMemPoolGetAttr: the attribute's value (SegmentManager::GetAttribute).

        DECISION: a high-water mark reset to 0 reads 0 until the next allocation (the
        runtime keeps it as set).

        Raises:
            InvalidArgument: NULL pool. InvalidRuntimeParam: unknown pool.
            InternalError: an unknown attribute (RT_ERROR_POOL_PROP_INVALID).
        """
        self.runtime.current_device()
        with self.lock:
            pool = self.get(handle, "aclrtMemPoolGetAttr", unknown=InvalidRuntimeParam)
            attr = as_int(attr, "attr", -(1 << 31), (1 << 31) - 1)
            s = pool.segments
            values: dict[int, int]
            values = {PoolAttr.ATTR_RELEASE_THRESHOLD: s.threshold,
                      PoolAttr.ATTR_RESERVED_MEM_CURRENT: s.reserved,
                      PoolAttr.ATTR_RESERVED_MEM_HIGH: s.reserved_high,
                      PoolAttr.ATTR_USED_MEM_CURRENT: s.used,
                      PoolAttr.ATTR_USED_MEM_HIGH: s.used_high, **s.reuse}
            if attr not in values:
                raise InternalError(f"aclrtMemPoolGetAttr: attr={attr} is not an "
                                    f"aclrtMemPoolAttr")
            return values[attr]

    # -- allocation ----------------------------------------------------------------------------

    def malloc_async(self, size: object, handle: object, stream: object) -> int:
        """aclrtMemPoolMallocAsync: a block of ``size`` bytes (rounded up to 2 MiB) from the
        pool, for work on ``stream``; its address (0 for size 0, which succeeds doing
        nothing: memory.cpp).

        Raises:
            InvalidArgument: NULL pool or stream (memory.cpp; the default stream is NULL).
            InvalidHandle, StreamContextMismatch: a bad stream, or one of another device.
            InvalidRuntimeParam: a size that overflows its rounding (api_impl_soma.cc); a
                stream of another device than the pool's (DECISION).
            InternalError: unknown pool, or no room in it (RT_ERROR_MEM_POOL_ALLOC).
            OutOfDeviceMemory: the device has no memory for new granules.
        """
        call = "aclrtMemPoolMallocAsync"
        size = as_int(size, "size")
        if as_int(handle, "mem_pool") == 0:
            raise InvalidArgument(f"{call}: memPool is NULL")
        if stream is None or as_int(stream, "stream") == 0:
            raise InvalidArgument(f"{call}: stream is NULL (the default stream cannot be used)")
        if size == 0:
            return 0
        runtime = self.runtime
        runtime.current_device()
        target = runtime.streams.target(stream, call)
        if size > SIZE_MAX - (GRANULE - 1):
            raise InvalidRuntimeParam(f"{call}: size={size} overflows its 2 MiB rounding")
        rounded = align_up(size, GRANULE)
        site = runtime.sanitizer.capture() if runtime.sanitizer.record_sites else None
        with self.lock:
            pool = self.get(handle, call)
            if pool.device_id != target.device_id:
                raise InvalidRuntimeParam(f"{call}: the pool is on device {pool.device_id}, "
                                          f"the stream on device {target.device_id}")
            segments = pool.segments
            seg, wait_for = self._reusable(pool, rounded, target)
            seg_seq = 0 if seg is None else seg.free_seq
            if seg is not None:
                seg = segments.reuse_cached(seg, rounded, target, size)
                self._grant(pool, seg.ptr, seg.size)
                if wait_for is not None:
                    self._wait(target, wait_for, seg_seq, call)
            else:
                ptr = segments.best_free(rounded)
                if ptr is None:
                    raise InternalError(f"{call}: the pool has no free {rounded}-byte range "
                                        f"({segments.used} bytes in use, {segments.reserved} "
                                        f"reserved of {segments.size})")
                self._back(pool, ptr, rounded)
                seg = segments.take_free(ptr, rounded, target, size)
            seg.alloc_site = site
        self._emit(pool, "mem_pool_malloc", ptr=seg.ptr, size=size, footprint=seg.size,
                   stream=target.handle)
        return seg.ptr

    def _reusable(self, pool: Pool, size: int,
                  stream: Stream) -> tuple[Segment | None, Any]:
        """(cached segment, stream to wait for) by the reuse rules of the module docstring."""
        segments = pool.segments
        reuse = segments.reuse
        seg = segments.best_cached(size, lambda s: s.stream is stream)
        if seg is None and reuse[PoolAttr.REUSE_FOLLOW_EVENT_DEPENDENCIES]:
            reached = self.order.reached
            seg = segments.best_cached(size, lambda s: reached(stream, s.stream) > s.free_seq)
        if seg is None and reuse[PoolAttr.REUSE_ALLOW_INTERNAL_DEPENDENCIES]:
            seg = segments.best_cached(size, lambda s: True)
            if seg is not None and not seg.done:
                return seg, seg.stream
        if seg is None and reuse[PoolAttr.REUSE_ALLOW_OPPORTUNISTIC]:
            seg = segments.best_cached(size, lambda s: s.done)
        return seg, None

    def _wait(self, stream: Stream, source: Stream, seq: int, call: str) -> None:
        """Queue on ``stream`` a wait for ``source``'s work up to the free ``seq`` (the
        runtime's implicit event for ..._ALLOW_INTERNAL_DEPENDENCIES)."""
        def run(_stream: Stream) -> None:
            self.runtime.streams.run([source], upto=seq)

        self.runtime.streams.enqueue(stream, f"{call} (waits for stream {source.handle:#x})",
                                     (), run)

    def free_async(self, ptr: object, stream: object) -> None:
        """aclrtMemPoolFreeAsync: give the block back to its pool when ``stream`` reaches this
        point. A pointer in no pool is a device block freed as aclrtFree frees it, then
        (api_impl_soma.cc).

        Raises:
            InvalidArgument: NULL ptr (memory.cpp).
            InternalError: the default (NULL) stream (RT_ERROR_STREAM_NULL).
            InvalidHandle, StreamContextMismatch: a bad stream, or one of another device.
            InvalidRuntimeParam: a pool address that is not a block's start, or one already
                given back (soma.cc: its allocation size is 0).
            InvalidPointer: outside every pool, and not a live block's start (DECISION:
                checked now; the runtime's callback fails later).
        """
        call = "aclrtMemPoolFreeAsync"
        ptr = as_int(ptr, "ptr")
        if ptr == 0:
            raise InvalidArgument(f"{call}: ptr is NULL")
        if stream is None or as_int(stream, "stream") == 0:
            raise InternalError(f"{call}: stream is NULL (RT_ERROR_STREAM_NULL)")
        runtime = self.runtime
        runtime.current_device()
        target = runtime.streams.target(stream, call)
        with self.lock:
            pool = self._pool_holding(ptr)
            if pool is None:
                device = runtime._owner(ptr)
                device.releasable(ptr, call)
                runtime.streams.enqueue(target, call, (),
                                        lambda _s: runtime._release(device, ptr, call))
                return
            seg = pool.segments.segment_at(ptr)
            if seg is None or not seg.busy or seg.ptr != ptr:
                state = ("was already given back" if seg is not None and seg.ptr == ptr
                         else "is not the start of a block")
                raise InvalidRuntimeParam(f"{call}: {ptr:#x} in {pool.describe()} {state}")
            asked, end, site = seg.asked, seg.end, seg.alloc_site
            op: Operation = runtime.streams.enqueue(
                target, call, (), lambda _s: self._free_ran(pool, target, op.seq))
            seg = pool.segments.give_back(seg, target, op.seq)
            seg.alloc_site = site
        self._emit(pool, "mem_pool_free", ptr=ptr, size=asked, footprint=end - ptr,
                   stream=target.handle)

    def block_range(self, addr: int) -> tuple[int, int] | None:
        """aclrtMemGetAddressRange of ``addr``: (start, bytes asked) of the pool block holding
        it, None outside every pool. DECISION: the block, as for aclrtMalloc memory (11-04:
        "待查询地址所属内存块"), not the 2 MiB granule mapped there.

        Raises:
            InvalidRuntimeParam: in a pool, but in no block handed out (given back, or never).
        """
        with self.lock:
            pool = self._pool_holding(addr)
            if pool is None:
                return None
            seg = pool.segments.segment_at(addr)
            if seg is None or not seg.busy:
                raise InvalidRuntimeParam(f"aclrtMemGetAddressRange: {addr:#x} is in no block "
                                          f"of {pool.describe()} (given back, or never handed "
                                          f"out)")
            return seg.ptr, seg.asked

    def _pool_holding(self, addr: int) -> Pool | None:
        for pool in self._pools.values():
            s = pool.segments
            if s.base <= addr < s.base + s.size:
                return pool
        return None

    def _free_ran(self, pool: Pool, stream: Stream, seq: int) -> None:
        """The queued free reached: its granules go out of the program's reach."""
        with self.lock:
            if self._pools.get(pool.handle) is not pool:
                return
            for seg in pool.segments.freed_ran(stream, seq):
                self._revoke(pool, seg, stream)

    # -- backing: granules of device memory ----------------------------------------------------

    def _back(self, pool: Pool, ptr: int, size: int) -> None:
        """Map a fresh physical granule at each 2 MiB of ``[ptr, ptr + size)``; on failure the
        ones made are given back and the error raised."""
        runtime = self.runtime
        space = runtime.vmm.space
        prop = PhysicalProp(location_id=pool.device_id)
        made = []
        try:
            for va in range(ptr, ptr + size, GRANULE):
                handle = space.malloc_physical(runtime._table.get, GRANULE, prop)
                made.append(va)
                pool.granules[va] = handle
                space.map(va, GRANULE, 0, handle.handle, 0)
        except OutOfDeviceMemory as error:
            for va in made:
                self._unback(pool, va, GRANULE, emit=False)
            raise OutOfDeviceMemory(f"aclrtMemPoolMallocAsync: {error}") from None
        for va in made:
            self._emit_physical(pool, "malloc_physical", pool.granules[va], va)

    def _unback(self, pool: Pool, ptr: int, size: int, *, emit: bool = True) -> None:
        # the space exists while a pool does (made by create); no current-device check here:
        # a reset drops pools after the device stopped being current
        space = self.runtime.vmm.space
        devices = self.runtime._table.made
        for va in range(ptr, ptr + size, GRANULE):
            handle = pool.granules.pop(va)
            if handle.maps:
                space.unmap(va, devices)
            space.free_physical(handle.handle, devices)
            if emit:
                self._emit_physical(pool, "free_physical", handle, va)

    def _grant(self, pool: Pool, ptr: int, size: int) -> None:
        self._access(pool, ptr, size, AccessFlags.READWRITE)

    def _revoke(self, pool: Pool, seg: Segment, stream: Stream) -> None:
        self._access(pool, seg.ptr, seg.size, AccessFlags.NONE)
        sanitizer = self.runtime.sanitizer
        if sanitizer.on:
            sanitizer.unmapped(PoolBlock(pool, seg, f"which aclrtMemPoolFreeAsync gave back to "
                                                    f"its pool (the free ran on stream "
                                                    f"{stream.handle:#x})"))

    def _access(self, pool: Pool, ptr: int, size: int, flags: AccessFlags) -> None:
        space = self.runtime.vmm.space
        key = (LocationType.DEVICE, pool.device_id)
        with space.lock:
            for va in range(ptr, ptr + size, GRANULE):
                mapping = space.mapping_at(va)
                mapping.access[key] = flags

    # -- trimming ------------------------------------------------------------------------------

    def trim_to(self, handle: object, min_bytes_to_keep: object) -> None:
        """aclrtMemPoolTrimTo: give back cached memory (whose free has run) until the pool
        holds at most ``min_bytes_to_keep`` (SegmentManager::TrimTo).

        Raises:
            InvalidArgument: NULL pool. InternalError: unknown pool (RT_ERROR_MEM_POOL_NULL),
                more than the pool's size, or less than its busy bytes
                (RT_ERROR_POOL_OP_INVALID).
        """
        self.runtime.current_device()
        call = "aclrtMemPoolTrimTo"
        with self.lock:
            pool = self.get(handle, call)
            keep = as_int(min_bytes_to_keep, "min_bytes_to_keep")
            segments = pool.segments
            if keep > segments.size:
                raise InternalError(f"{call}: minBytesToKeep={keep} is more than the pool's "
                                    f"{segments.size} bytes")
            if keep >= segments.reserved:
                return
            if keep < segments.used:
                raise InternalError(f"{call}: minBytesToKeep={keep} is less than the "
                                    f"{segments.used} bytes in use")
            released = self._trim(pool, keep)
        self._emit(pool, "mem_pool_trim", keep=keep, released=released)

    def _trim(self, pool: Pool, keep: int) -> int:
        released = 0
        for ptr, size in pool.segments.trim(keep):
            self._unback(pool, ptr, size)
            released += size
        return released

    def synchronized(self, device_id: int) -> None:
        """A stream or the device was synchronised: each pool of the device above its release
        threshold gives back cached memory down to it (11-10)."""
        if not self._pools:
            return
        trimmed = []
        with self.lock:
            for pool in self._pools.values():
                s = pool.segments
                if pool.device_id == device_id and s.reserved > max(s.threshold, s.used):
                    released = self._trim(pool, max(s.threshold, s.used))
                    if released:
                        trimmed.append((pool, released))
        for pool, released in trimmed:
            self._emit(pool, "mem_pool_trim", keep=pool.segments.threshold, released=released)

    # -- events (the sequence maps of event-dependency reuse) -------------------------------

    def recorded(self, event: int, stream: Stream, seq: int) -> None:
        """aclrtRecordEvent queued the record ``seq`` of ``event`` on ``stream``."""
        with self.lock:
            self.order.recorded(event, stream, seq)

    def waited(self, stream: Stream, event: int) -> None:
        """aclrtStreamWaitEvent: ``stream`` waits for the event's last record."""
        with self.lock:
            self.order.wait(stream, event)

    def forget(self, *, event: int | None = None, stream: Stream | None = None) -> None:
        """aclrtDestroyEvent / aclrtDestroyStream: drop its entries (:mod:`.pool_order`)."""
        with self.lock:
            freeing = set() if stream is None else {
                s.stream for pool in self._pools.values() for s in pool.segments.cached()}
            self.order.forget(event, stream, freeing)

    # -- observers ------------------------------------------------------------------------------

    def _emit(self, pool: Pool, event: str, **info: Any) -> None:
        device = self.runtime._table.made(pool.device_id)
        if device is not None and (device.observers or event in device.subscribers):
            info = {"pool": pool.handle, **info}
            for observer in [*device.observers, *device.subscribers.get(event, ())]:
                observer(event, device, info)

    def _emit_physical(self, pool: Pool, event: str, handle: Any, va: int) -> None:
        """A granule placed or given back: ``phys`` where it lies in the device's heap, ``va``
        where it is mapped in the pool (pictures draw the pool's blocks in their granules)."""
        self._emit(pool, event, handle=handle.handle, size=handle.size,
                   footprint=handle.footprint, page="huge", phys=handle.phys, va=va)

