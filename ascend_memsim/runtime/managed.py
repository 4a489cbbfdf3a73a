"""Managed (unified) memory and aclrtMemP2PMap: the calls of the vendor chapter 11-05.

``Runtime.managed`` is one :class:`ManagedMemory`; the face calls its methods. Sources:
``hicann/runtime`` ``docs/zh/api_ref/11-05_unified_addressing.md`` (the rules and the
products), ``include/external/acl/acl_rt.h`` (the enums), the ACL layer
``src/acl/aclrt_impl/memory.cpp`` (aclrtMemAllocManagedImpl, aclrtMemManaged*Impl,
aclrtMemP2PMapImpl), the runtime's ``src/runtime/api/impl/api_error_uvm.cc``,
``api_error.cc`` (ManagedMemAlloc), ``api_impl.cc`` (ManagedMemAlloc, ManagedMemFree) and
``api_impl_uvm.cc``.

The model:

* aclrtMemAllocManaged gives addresses in the process's managed range
  ``[0x90000000000, +3 TB)`` (11-05), first-fit, the size rounded up to 2 MiB
  (api_impl.cc: ``((size + 0x1FFFFF) >> 21) << 21``). DECISION: the memory is resident on the
  device current at the call (api_impl.cc passes ``curCtx->Device_()->Id_()``) for its whole
  life, charged there as physical memory in 2 MiB pages: aclrtGetMemInfo drops by the
  footprint, faults injected on the device reach it, statistics, traces, replay and pictures
  see it as physical memory (events ``malloc_physical`` / ``free_physical`` whose ``managed``
  field is the address). The runtime maps host or device memory on first touch and migrates
  pages on a fault; the simulator moves no pages, but every side sees the same bytes
  (:mod:`ascend_memsim.data.managed`).
* aclrtFree frees it (11-05: "需调用aclrtFree接口"; api_impl.cc ManagedMemFree); an access
  afterwards is a use after free, and an allocation still live at aclrtResetDevice (of its
  device) or aclFinalize is a leak.
* Advice and prefetch are recorded per 2 MiB page; aclrtMemManagedGetAttr(s) read them back.
  A range whose pages disagree reads as the invalid value (11-05: "查询结果为无效值").
* aclrtMemP2PMap checks its arguments and the peer access the document requires and records
  the mapping; copies between devices already follow the peer-access rules
  (:mod:`ascend_memsim.runtime.peer`), so it changes no data path.

Codes: the ACL layer's checks (NULL, a zero size, a reserved flag not 0, a flag other than
ACL_RT_MEM_ATTACH_GLOBAL, a count below numPrefetchLocs) are ACL_ERROR_INVALID_PARAM
(100000); the runtime's RT_ERROR_INVALID_VALUE (api_error_uvm.cc: an advice past
UNSET_ACCESSED_BY, an attribute outside 1..8, a device location outside the devices, the
prefetchLocIdxs rules) is ACL_ERROR_RT_PARAM_INVALID (107000); a product without managed
memory is ACL_ERROR_RT_FEATURE_NOT_SUPPORT (207000, the driver's "not support"). DECISION:
the driver's own range rules are not public: an address outside the managed range or
outside one live allocation, or a size not a multiple of 2 MiB where 11-05 asks for one, is
107000, as is a dataSize too small for the attribute.

Thread-safe: one lock, taken after the data plane's and before a device's.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any, cast

from sortedcontainers import SortedList

from ..data.managed import (
    DEFAULT_PAGE,
    NO_LOCATION,
    ManagedAlloc,
    ManagedRegion,
    attribute_value,
    store_page,
)
from ..memory.allocator import Allocator
from ..memory.args import UINT32_MAX, as_int, shown
from ..memory.constants import (
    MEM_ATTACH_GLOBAL,
    ManagedAdvise,
    ManagedLocationType,
    ManagedRangeAttr,
    MiB,
)
from ..memory.device import Device
from ..memory.errors import (
    FeatureNotSupported,
    InvalidArgument,
    InvalidArgumentType,
    InvalidDevice,
    InvalidPointer,
    InvalidRuntimeParam,
    OutOfDeviceMemory,
)
from ..memory.physical import fault_request, parse_dict
from ..memory.rules import UVM_BASE, UVM_END, Page, align_up
from .sharing import INT32, emit

__all__ = ["ManagedMemory", "MANAGED_PAGE", "MANAGED_PRODUCTS"]

#: Managed memory's granule: sizes round up to it, advice and prefetch sizes are multiples of it.
MANAGED_PAGE = 2 * MiB
#: 11-05, 产品支持情况: managed memory on "Atlas A3 训练系列产品/Atlas A3 推理系列产品" and
#: "Atlas A2 训练系列产品/Atlas A2 推理系列产品" only. aclrtMemP2PMap is on every simulated
#: product (950, A3, A2 and "Atlas 推理系列产品", 310P), aclrtPointerGetAttributes too.
MANAGED_PRODUCTS = ("A2", "A3")
#: The bytes each attribute's data takes (DECISION: a location is aclrtMemManagedLocation,
#: two 32-bit fields; a flag, a type or an id 32 bits).
_DATA_BYTES = {ManagedRangeAttr.PREFERRED_LOCATION: 8, ManagedRangeAttr.ACCESSED_BY: 8,
               ManagedRangeAttr.LAST_PREFETCH_LOCATION: 8}
_SET_ADVICE = (ManagedAdvise.SET_PREFERRED_LOCATION, ManagedAdvise.SET_ACCESSED_BY,
               ManagedAdvise.UNSET_ACCESSED_BY)


class ManagedMemory:
    """The 11-05 calls of one runtime (see the module docstring).

    Size: about 460 lines, on purpose: the eight calls read and change one table (the live
    allocations in address order, each with its pages' advice and prefetch states) under one
    lock, and share its checks (``_range``, ``_location``, ``_ptr_size``, ``_supported``),
    each citing the vendor's code it gives. The page states and the attributes' encoding
    are :mod:`ascend_memsim.data.managed`; the managed bytes, the data plane's.
    """

    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime
        self.lock = threading.Lock()
        #: live allocations by address, and their addresses in order (for lookups)
        self.allocs: dict[int, ManagedAlloc] = {}
        self._starts: SortedList[int] = SortedList()
        #: the process's managed range, made at the first allocation
        self._space: Allocator | None = None
        #: aclrtMemP2PMap: (device of the memory, block address, device mapped for)
        self.p2p_maps: set[tuple[int, int, int]] = set()

    # -- allocation ----------------------------------------------------------------------------

    def alloc(self, size: object, flag: object) -> int:
        """aclrtMemAllocManaged: the address of ``size`` bytes (rounded up to 2 MiB) of managed
        memory, charged to the current device.

        Raises:
            InvalidArgument: flag not ACL_RT_MEM_ATTACH_GLOBAL (memory.cpp).
            InvalidRuntimeParam: size 0 (api_error.cc ManagedMemAlloc).
            DeviceNotSet: no current device (api_impl.cc). FeatureNotSupported: the product
            has none (11-05). OutOfDeviceMemory: the device has no room, or the process's
            3 TB of managed addresses (11-05: "单个应用进程最大可申请3TB") are used up
            (DECISION: ACL_ERROR_RT_MEMORY_ALLOCATION).
        """
        call = "aclrtMemAllocManaged"
        size = as_int(size, "size")
        flag = as_int(flag, "flag", 0, UINT32_MAX)
        if flag != MEM_ATTACH_GLOBAL:
            raise InvalidArgument(f"{call}: flag={flag:#x}; only ACL_RT_MEM_ATTACH_GLOBAL (0x1)")
        if size == 0:
            raise InvalidRuntimeParam(f"{call}: size is 0")
        device = self.runtime.current_device()
        self._supported(call)
        footprint = align_up(size, MANAGED_PAGE) if size <= UVM_END - UVM_BASE else 0
        with self.lock:
            space = self._space
            if space is None:
                space = self._space = Allocator(UVM_END - UVM_BASE, base=UVM_BASE,
                                                granule=MANAGED_PAGE)
            ptr = space.allocate(footprint, MANAGED_PAGE) if footprint else None
            if ptr is None:
                raise OutOfDeviceMemory(f"{call}: {size} bytes do not fit in what is left of "
                                        f"the process's 3 TB of managed memory (11-05)")
            try:
                phys = device.take_physical(
                    footprint, MANAGED_PAGE, f"{call}(size={size})",
                    fault_request(device.device_id, size, Page.HUGE, False), size=size)
            except BaseException:
                space.release(ptr)
                raise
            alloc = ManagedAlloc(ptr, size, footprint, device.device_id, phys)
            sanitizer = self.runtime.sanitizer
            if sanitizer.on and sanitizer.record_sites:
                alloc.alloc_site = sanitizer.capture()
            self.allocs[ptr] = alloc
            self._starts.add(ptr)
        self._physical(device, "malloc_physical", alloc)
        emit(self.runtime, "managed_alloc", device,
             {"ptr": ptr, "size": size, "footprint": footprint})
        return ptr

    def holds(self, ptr: int) -> bool:
        """True when ``ptr`` is the start of a live managed allocation. O(1)."""
        return ptr in self.allocs

    def free(self, ptr: int, call: str = "aclrtFree") -> ManagedAlloc:
        """Free the managed allocation at ``ptr`` (aclrtFree, see :meth:`Runtime.free`).

        Raises:
            InvalidPointer: not a live allocation's start (another thread freed it first).
        """
        with self.lock:
            alloc = self.allocs.pop(ptr, None)
            if alloc is None:
                raise InvalidPointer(f"{call}: {ptr:#x} is not a live managed allocation")
            self._starts.remove(ptr)
            self._space.release(ptr)  # type: ignore[union-attr]  # made with the first alloc
            device = self.runtime._table.made(alloc.device_id)
            if device is not None:
                device.give_physical(alloc.phys)
        sanitizer = self.runtime.sanitizer
        if sanitizer.on:
            sanitizer.unmapped(alloc)
        emit(self.runtime, "managed_free", device, {"ptr": ptr, "size": alloc.size,
                                                    "footprint": alloc.footprint})
        self._physical(device, "free_physical", alloc)
        return alloc

    def forget_device(self, device: Device) -> list[ManagedAlloc]:
        """The device is being reset: its managed allocations go (DECISION: they are charged
        to it); the ones still live, which the sanitizer reports as leaks."""
        with self.lock:
            gone = [a for a in self.allocs.values() if a.device_id == device.device_id]
            for alloc in gone:
                del self.allocs[alloc.ptr]
                self._starts.remove(alloc.ptr)
                self._space.release(alloc.ptr)  # type: ignore[union-attr]  # (see free)
                device.give_physical(alloc.phys)
            self.p2p_maps = {m for m in self.p2p_maps if device.device_id not in (m[0], m[2])}
        for alloc in gone:
            emit(self.runtime, "managed_free", device, {"ptr": alloc.ptr, "size": alloc.size,
                                                        "footprint": alloc.footprint,
                                                        "reset": True})
            self._physical(device, "free_physical", alloc)
        return gone

    def alloc_at(self, addr: int) -> ManagedAlloc | None:
        """The live allocation whose footprint holds ``addr``, or None. O(log n)."""
        if not UVM_BASE <= addr < UVM_END or not self.allocs:
            return None
        with self.lock:
            starts = self._starts
            i = starts.bisect_right(addr)
            if not i:
                return None
            alloc = self.allocs[starts[i - 1]]
            return alloc if addr < alloc.end else None

    def region_at(self, addr: int) -> ManagedRegion | None:
        """The data plane's region for ``addr`` (see :mod:`ascend_memsim.data.managed`)."""
        alloc = self.alloc_at(addr)
        # a ManagedAlloc has the face of a Block that a DeviceRegion reads
        return None if alloc is None else ManagedRegion(alloc)  # type: ignore[arg-type]

    def allocations(self) -> list[ManagedAlloc]:
        """The live managed allocations, by address."""
        with self.lock:
            return [self.allocs[p] for p in self._starts]

    # -- advice and attributes -----------------------------------------------------------------

    def advise(self, ptr: object, size: object, advise: object, location: object) -> None:
        """aclrtMemManagedAdvise: set or unset ``advise`` on every 2 MiB page of the range.

        Raises:
            InvalidArgument: NULL ptr or a zero size (memory.cpp). InvalidRuntimeParam: an
            advice outside 0..5, a device location outside the devices (api_error_uvm.cc),
            a location of type INVALID for an advice that takes one, or the range (see the
            module docstring). DeviceNotSet. FeatureNotSupported.
        """
        call = "aclrtMemManagedAdvise"
        ptr, size = self._ptr_size(call, ptr, size)
        kind = as_int(advise, "advise", *INT32)
        loc = self._location(location)
        if not 0 <= kind <= ManagedAdvise.UNSET_ACCESSED_BY:
            raise InvalidRuntimeParam(f"{call}: advise={kind} is outside [0, 5]")
        self._check_location(call, loc)
        self.runtime.current_device()
        self._supported(call)
        kind = ManagedAdvise(kind)
        if kind in _SET_ADVICE and loc[0] == ManagedLocationType.INVALID:
            raise InvalidRuntimeParam(f"{call}: {kind.name} needs a location; got type "
                                      f"ACL_MEM_LOCATIONTYPE_INVALID")
        with self.lock:
            alloc, first, last = self._range(call, ptr, size, aligned=True)
            pages = alloc.pages
            for page in range(first, last):
                state = pages.get(page, DEFAULT_PAGE)
                if kind is ManagedAdvise.SET_READ_MOSTLY:
                    state = replace(state, read_mostly=True)
                elif kind is ManagedAdvise.UNSET_READ_MOSTLY:
                    state = replace(state, read_mostly=False)
                elif kind is ManagedAdvise.SET_PREFERRED_LOCATION:
                    state = replace(state, preferred=loc)
                elif kind is ManagedAdvise.UNSET_PREFERRED_LOCATION:
                    state = replace(state, preferred=NO_LOCATION)
                elif kind is ManagedAdvise.SET_ACCESSED_BY:
                    state = replace(state, accessed_by=state.accessed_by | {loc})
                else:
                    state = replace(state, accessed_by=state.accessed_by - {loc})
                store_page(pages, page, state)
        emit(self.runtime, "managed_advise", self._device_of(alloc),
             {"ptr": ptr, "size": size, "advise": int(kind), "location_type": loc[0],
              "location_id": loc[1]})

    def get_attr(self, attribute: object, ptr: object, size: object,
                 data_size: object) -> Any:
        """aclrtMemManagedGetAttr: the attribute's value over the range (see :meth:`_value`).

        Raises:
            InvalidArgument: NULL ptr or a zero size (memory.cpp). InvalidRuntimeParam: an
            attribute outside 1..8 (api_error_uvm.cc), a dataSize too small, the range.
            FeatureNotSupported. No current device is needed (api_impl_uvm.cc falls back to
            the driver).
        """
        call = "aclrtMemManagedGetAttr"
        ptr, size = self._ptr_size(call, ptr, size)
        attr = self._attribute(call, attribute)
        data_size = as_int(data_size, "dataSize")
        return self._values(call, [attr], ptr, size, [data_size])[0]

    def get_attrs(self, attributes: object, ptr: object, size: object,
                  data_sizes: object) -> list[Any]:
        """aclrtMemManagedGetAttrs: one value per attribute (``numAttributes`` is the list's
        length; ``dataSizes`` a list as long).

        Raises:
            InvalidArgument: NULL ptr, a zero size, an empty list, or lists of different
            lengths (DECISION: the C arrays have numAttributes entries).
            InvalidArgumentType: not lists. InvalidRuntimeParam, FeatureNotSupported: as
            :meth:`get_attr`.
        """
        call = "aclrtMemManagedGetAttrs"
        names = _list(attributes, "attributes", call)
        sizes = _list(data_sizes, "dataSizes", call)
        ptr, size = self._ptr_size(call, ptr, size)
        if not names:
            raise InvalidArgument(f"{call}: attributes is empty (numAttributes 0)")
        if len(sizes) != len(names):
            raise InvalidArgument(f"{call}: {len(names)} attributes but {len(sizes)} dataSizes")
        attrs = [self._attribute(call, a) for a in names]
        return self._values(call, attrs, ptr, size,
                            [as_int(s, "dataSizes[]") for s in sizes])

    def _values(self, call: str, attrs: list[ManagedRangeAttr], ptr: int, size: int,
                data_sizes: list[int]) -> list[Any]:
        self._supported(call)
        for attr, data_size in zip(attrs, data_sizes):
            need = _DATA_BYTES.get(attr, 4)
            if data_size < need:
                raise InvalidRuntimeParam(f"{call}: dataSize={data_size} is too small for "
                                          f"{attr.name} ({need} bytes)")
        with self.lock:
            alloc, first, last = self._range(call, ptr, size, aligned=False)
            states = {alloc.pages.get(p, DEFAULT_PAGE) for p in range(first, last)}
        return [attribute_value(attr, states, n) for attr, n in zip(attrs, data_sizes)]

    # -- prefetch ------------------------------------------------------------------------------

    def prefetch_async(self, ptr: object, size: object, location: object, flags: object,
                       stream: object) -> None:
        """aclrtMemManagedPrefetchAsync: queue a prefetch of the range to ``location`` on
        ``stream``; when it runs, the range is checked again and its pages' last prefetch
        location becomes ``location`` (the simulator moves no bytes).

        Raises:
            InvalidArgument: NULL ptr, a zero size, flags not 0 (memory.cpp).
            InvalidHandle, StreamContextMismatch: the stream. InvalidRuntimeParam: a device
            location outside the devices (api_error_uvm.cc), an INVALID or unknown location
            type (DECISION), the range. FeatureNotSupported.
        """
        call = "aclrtMemManagedPrefetchAsync"
        ptr, size = self._ptr_size(call, ptr, size)
        loc = self._location(location)
        _reserved(call, flags)
        target = self.runtime.streams.target(stream, call)
        self._prefetch_location(call, loc)
        self._supported(call)
        with self.lock:
            alloc, _, _ = self._range(call, ptr, size, aligned=True)
        self._queue(call, target, [(ptr, size, loc)])
        emit(self.runtime, "managed_prefetch", self._device_of(alloc),
             {"ptr": ptr, "size": size, "location_type": loc[0], "location_id": loc[1],
              "stream": target.handle})

    def prefetch_batch_async(self, ptrs: object, sizes: object, count: object,
                             prefetch_locs: object, prefetch_loc_idxs: object,
                             num_prefetch_locs: object, flags: object, stream: object) -> None:
        """aclrtMemManagedPrefetchBatchAsync: ``prefetch_locs[k]`` receives the ranges from
        ``prefetch_loc_idxs[k]`` up to the next index (the last up to ``count``), all queued
        as one operation on ``stream`` (11-05, 约束说明).

        Raises:
            InvalidArgument: a zero count or numPrefetchLocs, flags not 0, count below
            numPrefetchLocs (memory.cpp), lists whose lengths are not count and
            numPrefetchLocs (DECISION: "必须具有count指定的相同长度").
            InvalidRuntimeParam: prefetchLocIdxs not starting at 0, not increasing or not
            below count, a NULL address, a device location outside the devices
            (api_error_uvm.cc), a range (see the module docstring).
            InvalidHandle, StreamContextMismatch, FeatureNotSupported.
        """
        call = "aclrtMemManagedPrefetchBatchAsync"
        addrs = _list(ptrs, "ptrs", call)
        lengths = _list(sizes, "sizes", call)
        locs = _list(prefetch_locs, "prefetchLocs", call)
        idxs = _list(prefetch_loc_idxs, "prefetchLocIdxs", call)
        count = as_int(count, "count")
        num = as_int(num_prefetch_locs, "numPrefetchLocs")
        if count == 0 or num == 0:
            raise InvalidArgument(f"{call}: {'count' if count == 0 else 'numPrefetchLocs'} is 0")
        _reserved(call, flags)
        if count < num:
            raise InvalidArgument(f"{call}: count={count} must be at least numPrefetchLocs={num}")
        if len(addrs) != count or len(lengths) != count or len(locs) != num or len(idxs) != num:
            raise InvalidArgument(f"{call}: ptrs and sizes need count={count} entries, "
                                  f"prefetchLocs and prefetchLocIdxs numPrefetchLocs={num} "
                                  f"(got {len(addrs)}, {len(lengths)}, {len(locs)}, {len(idxs)})")
        addrs = [as_int(a, "ptrs[]") for a in addrs]
        lengths = [as_int(n, "sizes[]") for n in lengths]
        idxs = [as_int(i, "prefetchLocIdxs[]") for i in idxs]
        places = [self._location(loc) for loc in locs]
        if idxs[0] != 0:
            raise InvalidRuntimeParam(f"{call}: prefetchLocIdxs[0]={idxs[0]} must be 0")
        for k, idx in enumerate(idxs):
            if idx >= count or (k and idx <= idxs[k - 1]):
                raise InvalidRuntimeParam(f"{call}: prefetchLocIdxs[{k}]={idx} must be below "
                                          f"count={count} and above the entry before it")
        if 0 in addrs:
            raise InvalidRuntimeParam(f"{call}: ptrs[{addrs.index(0)}] is NULL")
        for loc in places:
            self._check_location(call, loc)
        target = self.runtime.streams.target(stream, call)
        for loc in places:
            self._prefetch_location(call, loc)
        self._supported(call)
        bounds = [*idxs[1:], count]
        jobs = [(addrs[i], lengths[i], places[k]) for k in range(num)
                for i in range(idxs[k], bounds[k])]
        with self.lock:
            for addr, length, _ in jobs:
                if length == 0:
                    raise InvalidRuntimeParam(f"{call}: a size of 0 at {addr:#x}")
                alloc, _, _ = self._range(call, addr, length, aligned=True)
        self._queue(call, target, jobs)
        emit(self.runtime, "managed_prefetch_batch", self._device_of(alloc),
             {"count": count, "num_prefetch_locs": num, "stream": target.handle})

    def _queue(self, call: str, target: object, jobs: list[Any]) -> None:
        data = self.runtime.data

        def run(_stream: object) -> None:
            with data.lock:
                for addr, length, _ in jobs:
                    data.resolve(call, addr, length, write=False, deferred=True)
            with self.lock:
                for addr, length, loc in jobs:
                    alloc, first, last = self._range(call, addr, length, aligned=True)
                    for page in range(first, last):
                        state = alloc.pages.get(page, DEFAULT_PAGE)
                        store_page(alloc.pages, page, replace(state, prefetched=loc))

        self.runtime.streams.enqueue(target, call, tuple((a, a + n) for a, n, _ in jobs), run)

    # -- aclrtMemP2PMap ------------------------------------------------------------------------

    def p2p_map(self, dev_ptr: object, size: object, dst_dev_id: object, flags: object) -> None:
        """aclrtMemP2PMap: map ``size`` bytes of device memory at ``dev_ptr`` for device
        ``dst_dev_id`` (11-05: "需先调用aclrtDeviceEnablePeerAccess接口").

        DECISION: the memory must be one live device block or mapping (not host or managed
        memory) and the two devices must have peer access, else 107000; mapping a device's
        memory for itself succeeds and records nothing.

        Raises:
            InvalidArgument: NULL, a zero size, flags not 0 (memory.cpp).
            InvalidDevice: dst_dev_id not a device (rtGetDevicePhyIdByIndex).
            DeviceNotSet. InvalidRuntimeParam, InvalidPointer: see above.
        """
        call = "aclrtMemP2PMap"
        ptr = as_int(dev_ptr, "devPtr")
        size = as_int(size, "size")
        dst = as_int(dst_dev_id, "dstDevId", *INT32)
        if ptr == 0 or size == 0:
            raise InvalidArgument(f"{call}: {'devPtr is NULL' if ptr == 0 else 'size is 0'}")
        _reserved(call, flags)
        runtime = self.runtime
        if not 0 <= dst < runtime.device_count:
            raise InvalidDevice(f"{call}: dstDevId={dst} is not a device (0 to "
                                f"{runtime.device_count - 1})")
        runtime.current_device()
        data = runtime.data
        with data.lock:
            region, _ = data.resolve(call, ptr, size, write=False, deferred=True)
        if region.host or getattr(region, "managed", False):
            raise InvalidRuntimeParam(f"{call}: {ptr:#x} is not device memory "
                                      f"({region.describe()})")
        owner = region.block.device_id
        if owner == dst:
            return
        peer = runtime.extension("peer")
        if peer is None or not peer.allows(owner, dst):
            raise InvalidRuntimeParam(f"{call}: device {owner} and device {dst} have no peer "
                                      f"access: call device_enable_peer_access first (11-05)")
        with self.lock:
            self.p2p_maps.add((owner, region.base, dst))
        emit(runtime, "p2p_map", runtime._table.made(owner),
             {"ptr": ptr, "size": size, "dst_device": dst})

    # -- helpers -------------------------------------------------------------------------------

    def _supported(self, call: str) -> None:
        name = self.runtime.profile.name
        if name not in MANAGED_PRODUCTS:
            raise FeatureNotSupported(f"{call}: {name} has no managed memory (11-05: Atlas A2 "
                                      f"and A3 only)")

    @staticmethod
    def _ptr_size(call: str, ptr: object, size: object) -> tuple[int, int]:
        ptr = as_int(ptr, "ptr")
        size = as_int(size, "size")
        if ptr == 0:
            raise InvalidArgument(f"{call}: ptr is NULL")
        if size == 0:
            raise InvalidArgument(f"{call}: size is 0")
        return ptr, size

    @staticmethod
    def _attribute(call: str, attribute: object) -> ManagedRangeAttr:
        value = as_int(attribute, "attribute", *INT32)
        if value not in ManagedRangeAttr._value2member_map_:
            raise InvalidRuntimeParam(f"{call}: attribute={value} is outside [1, 8]")
        return ManagedRangeAttr(value)

    @staticmethod
    def _location(location: object) -> tuple[int, int]:
        """(type, id) of an aclrtMemManagedLocation given as ``{"type", "id"}`` (missing: 0)."""
        loc = parse_dict(location, "aclrtMemManagedLocation")
        kind = as_int(dict.get(loc, "type", 0), "location.type", 0, UINT32_MAX)
        number = as_int(dict.get(loc, "id", 0), "location.id", *INT32)
        return kind, number

    def _check_location(self, call: str, loc: tuple[int, int]) -> None:
        """api_error_uvm.cc: a DEVICE location's id must name a device."""
        count = self.runtime.device_count
        if loc[0] == ManagedLocationType.DEVICE and not 0 <= loc[1] < count:
            raise InvalidRuntimeParam(f"{call}: location.id={loc[1]} is outside "
                                      f"[0, {count - 1}]")

    def _prefetch_location(self, call: str, loc: tuple[int, int]) -> None:
        self._check_location(call, loc)
        if loc[0] not in ManagedLocationType._value2member_map_ or loc[0] == 0:
            raise InvalidRuntimeParam(f"{call}: location.type={loc[0]} is not a place to "
                                      f"prefetch to (DEVICE 1, HOST 2, HOST_NUMA 3, "
                                      f"HOST_NUMA_CURRENT 4)")

    def _range(self, call: str, ptr: int, size: int, *,
               aligned: bool) -> tuple[ManagedAlloc, int, int]:
        """(allocation, first page, end page) of ``[ptr, ptr + size)`` (under the lock).

        Raises:
            InvalidRuntimeParam: outside the managed range, not inside one live allocation, or
            (``aligned``) a size not a multiple of 2 MiB (11-05: "要求2MB对齐").
        """
        if not UVM_BASE <= ptr < UVM_END:
            raise InvalidRuntimeParam(f"{call}: {ptr:#x} is outside managed memory's range "
                                      f"[{UVM_BASE:#x}, {UVM_END:#x}) (11-05)")
        if aligned and size % MANAGED_PAGE:
            raise InvalidRuntimeParam(f"{call}: size={size} is not a multiple of 2 MiB (11-05)")
        i = self._starts.bisect_right(ptr)
        alloc = self.allocs[self._starts[i - 1]] if i else None
        if alloc is None or ptr >= alloc.end:
            raise InvalidRuntimeParam(f"{call}: {ptr:#x} is in no live managed allocation")
        if ptr + size > alloc.end:
            raise InvalidRuntimeParam(f"{call}: {size} bytes at {ptr:#x} run past the end of "
                                      f"the {alloc.describe()}")
        first = (ptr - alloc.ptr) // MANAGED_PAGE
        return alloc, first, -(-(ptr + size - alloc.ptr) // MANAGED_PAGE)

    def _device_of(self, alloc: ManagedAlloc) -> Device | None:
        made: Device | None = self.runtime._table.made(alloc.device_id)
        return made

    def _physical(self, device: Device | None, event: str, alloc: ManagedAlloc) -> None:
        """The memory charged to the device, as physical memory (replay and pictures place
        it as they place aclrtMallocPhysical's)."""
        emit(self.runtime, event, device,
             {"handle": alloc.ptr, "size": alloc.size, "footprint": alloc.footprint,
              "page": "huge", "phys": alloc.phys, "managed": alloc.ptr})


def _list(value: object, name: str, call: str) -> list[Any]:
    if not issubclass(type(value), list):
        raise InvalidArgumentType(f"{call}: {name} must be a list, got {shown(value)}")
    # PyList_Check's test above, which the checker does not read as narrowing
    return list.copy(cast("list[Any]", value))


def _reserved(call: str, flags: object) -> None:
    value = as_int(flags, "flags")
    if value != 0:
        raise InvalidArgument(f"{call}: flags={value}; it is reserved and must be 0")
