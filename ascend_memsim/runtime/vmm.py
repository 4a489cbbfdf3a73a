"""The runtime's virtual-memory plane: routes the 11-04 calls and aclrtPointerGetAttributes.

``Runtime.vmm`` is one :class:`VirtualMemory`; the pyacl face calls its methods. Each call
needs a current device, as every memory call does (DECISION: ACL_ERROR_RT_CONTEXT_NULL
without one), then works on the process's :class:`~ascend_memsim.memory.vmm.AddressSpace`
(made on first use, so a runtime that never reserves carries none), telling the checker
about unmaps (use after unmap) and the observers about physical memory (events
``malloc_physical`` and ``free_physical``, with the handle).
"""

from __future__ import annotations

from typing import Any

from ..data.host import HostBlock
from ..data.mapped import MappedRegion, mapped_region
from ..memory.args import as_int
from ..memory.constants import LocationType
from ..memory.device import Device
from ..memory.errors import InvalidArgument, InvalidRuntimeParam
from ..memory.physical import PhysicalHandle
from ..memory.rules import PAGE_BYTES, Page
from ..memory.vmm import VA_BASE, VA_END, AddressSpace, Mapping

__all__ = ["VirtualMemory"]

#: DECISION: the page size aclrtPointerGetAttributes reports for normal pages and host memory
#: (the usual 4 KiB page; the simulator's 64-byte placement granule is not a page).
SMALL_PAGE = 4096


class VirtualMemory:
    """The 11-04 calls of one runtime (see the module docstring)."""

    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime
        #: the address space, made at the first reservation or physical allocation
        self.space: AddressSpace | None = None

    def _space(self) -> AddressSpace:
        self.runtime.current_device()
        space = self.space
        if space is None:
            with self.runtime._table.lock:
                if self.space is None:
                    self.space = AddressSpace(self.runtime.profile)
                space = self.space
        return space

    def _device(self, device_id: int) -> Device | None:
        made: Device | None = self.runtime._table.made(device_id)
        return made

    # -- reservations --------------------------------------------------------------------------

    def reserve_mem_address(self, size: object, alignment: object, expect_ptr: object,
                            flags: object) -> int:
        """aclrtReserveMemAddress: the start of the reserved range. See AddressSpace.reserve."""
        return self._space().reserve(size, alignment, expect_ptr, flags).ptr

    def reserve_mem_address_no_uc_memory(self, size: object, alignment: object,
                                         expect_ptr: object, flags: object) -> int:
        """aclrtReserveMemAddressNoUCMemory (Atlas A3 only; the start must be given)."""
        return self._space().reserve(size, alignment, expect_ptr, flags, no_uc=True).ptr

    def release_mem_address(self, ptr: object) -> None:
        """aclrtReleaseMemAddress."""
        self._space().release(ptr)

    # -- physical memory -----------------------------------------------------------------------

    def malloc_physical(self, size: object, prop: object, flags: object = 0) -> int:
        """aclrtMallocPhysical on the device prop.location.id names: the handle."""
        space = self._space()
        handle = space.malloc_physical(self.runtime._table.get, size, prop, flags)
        device = self._device(handle.device_id)
        if self.runtime.sanitizer.on and self.runtime.sanitizer.record_sites:
            handle.alloc_site = self.runtime.sanitizer.capture()
        self._emit(device, "malloc_physical", handle)
        return handle.handle

    def free_physical(self, handle: object) -> None:
        """aclrtFreePhysical (the memory goes when the last mapping does)."""
        found = self._space().free_physical(handle, self._device)
        if found.shared is not None:
            found.shared.settle()  # memory shared with other processes: its record tells
        elif found.released:
            self._emit(self._device(found.device_id), "free_physical", found)

    def mem_get_allocation_granularity(self, prop: object, option: object) -> int:
        """aclrtMemGetAllocationGranularity."""
        return self._space().granularity(self.runtime._table.check_id, prop, option)

    def mem_retain_allocation_handle(self, ptr: object) -> int:
        """aclrtMemRetainAllocationHandle: the handle mapped at ``ptr`` (one more reference)."""
        space = self._space()
        _not_imported(space, ptr, "aclrtMemRetainAllocationHandle")
        return space.retain(ptr).handle

    def mem_get_allocation_properties_from_handle(self, handle: object) -> dict[str, object]:
        """aclrtMemGetAllocationPropertiesFromHandle: the prop as pyacl's dict."""
        return self._space().properties(handle).as_dict()

    # -- mappings ------------------------------------------------------------------------------

    def map_mem(self, ptr: object, size: object, offset: object, handle: object,
                flags: object) -> None:
        """aclrtMapMem."""
        mapping = self._space().map(ptr, size, offset, handle, flags)
        self._site(mapping)

    def mem_map_no_access(self, ptr: object, size: object, offset: object, handle: object,
                          flags: object) -> None:
        """aclrtMemMapNoAccess: mapped, but not accessible until aclrtMemSetAccess."""
        mapping = self._space().map(ptr, size, offset, handle, flags, access=False,
                                    call="aclrtMemMapNoAccess")
        self._site(mapping)

    def _site(self, mapping: Mapping) -> None:
        sanitizer = self.runtime.sanitizer
        if sanitizer.on and sanitizer.record_sites:
            mapping.alloc_site = sanitizer.capture()

    def unmap_mem(self, ptr: object) -> None:
        """aclrtUnmapMem; the checker remembers the range (a later access is use after unmap)."""
        space = self._space()
        _not_imported(space, ptr, "aclrtUnmapMem")
        mapping = space.unmap(ptr, self._device)
        sanitizer = self.runtime.sanitizer
        if sanitizer.on:
            sanitizer.unmapped(mapping)
        if mapping.handle.shared is not None:
            mapping.handle.shared.settle()
        elif mapping.handle.released:
            self._emit(self._device(mapping.device_id), "free_physical", mapping.handle)

    def mem_set_access(self, ptr: object, size: object, desc: object, count: object) -> None:
        """aclrtMemSetAccess."""
        self._space().set_access(ptr, size, desc, count, self.runtime.device_count)

    def mem_get_access(self, ptr: object, location: object) -> int:
        """aclrtMemGetAccess: the flags."""
        return self._space().get_access(ptr, location)

    # -- addresses -----------------------------------------------------------------------------

    def mem_get_address_range(self, ptr: object) -> tuple[int, int]:
        """aclrtMemGetAddressRange: (base, size) of the allocation holding ``ptr``: a device
        block (its requested size), a stream-ordered pool's block (its requested size), a
        host block, or a mapping (11-04, 参考信息).

        Raises:
            InvalidArgument: NULL (memory.cpp). InvalidRuntimeParam: no allocation holds it
            (DECISION).
        """
        self.runtime.current_device()
        ptr = _nonnull(ptr, "aclrtMemGetAddressRange")
        pooled: tuple[int, int] | None = (self.runtime.pools.block_range(ptr)
                                          if self.runtime.pools else None)
        if pooled is not None:
            return pooled  # a stream-ordered pool's block, not its granule (runtime/pools.py)
        mapping = self.mapping_at(ptr)
        if mapping is not None:
            return mapping.ptr, mapping.size
        block = self.runtime.block_at(ptr)
        if block is not None:
            return block.ptr, block.size
        region = self.runtime.host.region_at(ptr)
        if region is not None:
            return region.ptr, region.size
        raise InvalidRuntimeParam(f"aclrtMemGetAddressRange: {ptr:#x} is in no device block, "
                                  f"mapping or host allocation")

    def pointer_get_attributes(self, ptr: object) -> dict[str, object]:
        """aclrtPointerGetAttributes (11-05) as pyacl's dict: ``{"location": {"id", "type"},
        "page_size", "rsv": [0, 0, 0, 0]}`` (rt_memory.cpp GetPyDictFromPtrAttributes).

        Device blocks and mappings: DEVICE, the device, the page size (2 MiB, 1 GiB, or
        4 KiB for normal pages: DECISION). Managed memory (aclrtMemAllocManaged): MANAGED,
        the device it is charged to, 2 MiB. Host memory the runtime knows: HOST, id 0
        (invalid for HOST, 25-04), 4 KiB (DECISION): aclrtMallocHost's page-locked memory,
        and the program's own memory where aclrtHostRegister covers it; the program's own
        memory elsewhere (a buffer through ``bytes_to_ptr`` or ``numpy_to_ptr``, a raw
        address) is UNREGISTERED (hicann/runtime ``src/runtime/driver/npu_driver_mem.cc``
        NpuDriver::PtrGetAttributes: DV_MEM_LOCK_HOST is HOST, DV_MEM_USER_MALLOC is HOST
        only when ``register_memory.cc`` IsRegisteredMemory). Anything else: DECISION,
        UNREGISTERED too. UNREGISTERED has id 0, page size 0 (DECISION) and success.

        Raises:
            InvalidArgument: NULL (memory.cpp).
        """
        self.runtime.current_device()
        ptr = _nonnull(ptr, "aclrtPointerGetAttributes")
        kind, number, page = LocationType.UNREGISTERED, 0, 0
        mapping = self.mapping_at(ptr)
        block = None if mapping is not None else self.runtime.block_at(ptr)
        if mapping is not None:
            kind, number = LocationType.DEVICE, mapping.device_id
            page = PAGE_BYTES[mapping.handle.page if mapping.handle.page is Page.HUGE1G
                              else Page.HUGE]
        elif block is not None:
            kind, number = LocationType.DEVICE, block.device_id
            page = SMALL_PAGE if block.page is Page.NORMAL else PAGE_BYTES[block.page]
        elif (managed := self.runtime.managed.alloc_at(ptr)) is not None:
            # ACL_MEM_LOCATION_TYPE_MANAGED (acl_rt.h); its id is a device id (api_impl.cc
            # PtrGetAttributes converts it as a DEVICE one); managed pages are 2 MiB
            kind, number, page = LocationType.MANAGED, managed.device_id, PAGE_BYTES[Page.HUGE]
        elif isinstance(self.runtime.host.region_at(ptr), HostBlock) or (
                (pinned := self.runtime.extension("pinned")) is not None and pinned.holds(ptr)):
            kind, page = LocationType.HOST, SMALL_PAGE
        return {"location": {"id": number, "type": int(kind)}, "page_size": page,
                "rsv": [0, 0, 0, 0]}

    def region_at(self, addr: int, count: int) -> MappedRegion | None:
        """The data plane's region for an access of ``count`` bytes at ``addr`` (see
        :func:`~ascend_memsim.data.mapped.mapped_region`)."""
        return mapped_region(self.space, addr, count)

    def mapping_at(self, addr: int) -> Mapping | None:
        """The mapping holding ``addr``, or None (no locking of the runtime; O(log n))."""
        space = self.space
        if space is None or not VA_BASE <= addr < VA_END:
            return None
        return space.mapping_at(addr)

    def handles(self) -> list[PhysicalHandle]:
        """The physical handles the program still holds (not yet freed by aclrtFreePhysical),
        oldest first."""
        space = self.space
        if space is None:
            return []
        with space.lock:
            return [h for h in space.handles.values() if h.refs]

    # -- devices and observers -----------------------------------------------------------------

    def forget_device(self, device: Device) -> list[PhysicalHandle]:
        """The device is being reset: drop its handles and their mappings; the handles the
        program never freed (leaks)."""
        space = self.space
        gone = [] if space is None else space.forget_device(device.device_id)
        for handle in gone:
            # the space's table holds no IPC import: a shared handle here is a shareable
            # handle's, whose record (runtime/shareable.py) knows its owner
            shared: Any = handle.shared
            if shared is not None and shared.owner is not handle:
                shared.release(handle)  # an imported handle: the exporter's memory stays
                shared.settle()
                continue
            if shared is not None:
                shared.owner_reset()
            self._emit(device, "free_physical", handle)
        return [h for h in gone if h.refs]

    def _emit(self, device: Device | None, event: str, handle: PhysicalHandle) -> None:
        """Tell the device's observers (statistics, traces) that physical memory was placed
        or given back: plain values, so a trace records them as they are."""
        if device is not None and (device.observers or event in device.subscribers):
            info = {"handle": handle.handle, "size": handle.size, "footprint": handle.footprint,
                    "page": "huge1g" if handle.page is Page.HUGE1G else "huge",
                    "phys": handle.phys}
            for observer in [*device.observers, *device.subscribers.get(event, ())]:
                observer(event, device, info)


def _not_imported(space: AddressSpace, ptr: object, call: str) -> None:
    """Refuse an IPC import's address (runtime/ipc.py): aclrtIpcMemClose ends it.

    Raises:
        InvalidRuntimeParam: DECISION, ``ptr`` is an import of an IPC key.
    """
    mapping = space.mapping_at(ptr) if type(ptr) is int else None
    if mapping is not None and getattr(mapping.handle.shared, "ipc", False):
        raise InvalidRuntimeParam(f"{call}: {ptr:#x} is an IPC import ({mapping.describe()}); "
                                  f"close it with aclrtIpcMemClose")


def _nonnull(ptr: object, call: str) -> int:
    ptr = as_int(ptr, "ptr")
    if ptr == 0:
        raise InvalidArgument(f"{call}: ptr is NULL")
    return ptr
