"""Virtual memory (the vendor chapter 11-04): reservations, physical handles, the page table.

The model, one process wide (:class:`AddressSpace`):

* A **reservation** (aclrtReserveMemAddress) is a range of virtual addresses and nothing
  else: it costs no device memory. Reservations live in the window the vendor names for a
  chosen start, [16 TiB, 24 TiB) (11-04, aclrtReserveMemAddress, expectPtr: "地址必须在8T范围内
  (16T-24T)"). DECISION: the system places them in that window too, first-fit, and the bottom
  of it that device 0's heap occupies in this simulator's address layout counts as taken.
* A **physical handle** (aclrtMallocPhysical) is device memory: it is placed in the device's
  memory by the same first-fit as aclrtMalloc blocks, at its page size (2 MiB, or 1 GiB for the
  HUGE1G attributes), so aclrtGetMemInfo drops and aclrtGetMemUsageInfo counts it (APP).
  DECISION: no public source says how the driver places physical memory; sharing the heap
  with aclrtMalloc is what makes both compete for the same memory, as they do on hardware.
* A **mapping** (aclrtMapMem) puts a whole handle at a virtual address inside one
  reservation. The bytes belong to the handle: one handle mapped at two addresses shows the
  same bytes (the data plane keeps them per handle).

Lifetimes (11-04): a reservation is released only when nothing is mapped in it
(aclrtReleaseMemAddress: "释放虚拟内存前, 需调用aclrtUnmapMem"); a handle freed while mapped
keeps its memory until its last mapping goes (aclrtFreePhysical: "只有在调用aclrtUnmapMem接口
取消该物理内存与虚拟内存的映射之后, 物理内存才会被真正释放"); aclrtMemRetainAllocationHandle
adds a reference that needs one more aclrtFreePhysical.

Error codes: the ACL layer's checks (``hicann/runtime`` ``src/acl/aclrt_impl/memory.cpp``)
return ACL_ERROR_INVALID_PARAM; the rest is the driver's (closed) and reaches the program as
the runtime's translation (``src/runtime/core/src/common/errcode_manage.cc``): an invalid
value is ACL_ERROR_RT_PARAM_INVALID, an invalid handle ACL_ERROR_RT_INVALID_HANDLE, out of
memory ACL_ERROR_RT_MEMORY_ALLOCATION. DECISION: which driver check a misuse meets is not
public; each misuse below names the code the simulator gives.

Thread-safe: one lock per address space; a device's lock is taken inside it (never the
other way round). Every public method checks its arguments first; a failed call changes
nothing.

Size: just over 600 lines, on purpose: the address space's rules (reservations, handles,
maps and their lifetimes) are checked against one another under one lock, so they stay in
one class; the pyacl property dicts are read in ``memory/physical.py``.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sortedcontainers import SortedDict

from .args import SIZE_MAX, UINT32_MAX, as_int
from .constants import (
    AccessFlags,
    AllocationType,
    GiB,
    GranularityOption,
    HandleType,
    LocationType,
    MiB,
)
from .errors import (
    FeatureNotSupported,
    InvalidArgument,
    InvalidHandle,
    InvalidRuntimeParam,
    OutOfDeviceMemory,
)
from .physical import (
    PhysicalHandle,
    PhysicalProp,
    check_attr,
    fault_request,
    field_of,
    granule,
    parse_access,
    parse_dict,
    parse_prop,
    reported_attr,
)
from .profiles import Memory, Profile
from .rules import MEMORY_OFFSET, Page, align_up, device_base

if TYPE_CHECKING:
    from .device import Device

__all__ = ["AddressSpace", "Mapping", "Reservation", "VA_BASE", "VA_END"]

TiB = 1 << 40
#: The reservation window (11-04, aclrtReserveMemAddress, expectPtr: 16T-24T).
VA_BASE = 16 * TiB
VA_END = 24 * TiB
#: Handle values (aclrtDrvMemHandle is an opaque pointer): DECISION, a window of their own,
#: far from device and host addresses, never reused within a runtime.
_HANDLE_BASE = 0x7E00_0000_0000
_HANDLE_STEP = 0x100


@dataclass(eq=False, slots=True)
class Reservation:
    """A reserved virtual range (aclrtReserveMemAddress)."""

    ptr: int
    size: int
    span: int
    flags: int
    #: virtual address -> Mapping inside it
    maps: SortedDict[int, Mapping] = field(default_factory=SortedDict)

    @property
    def end(self) -> int:
        return self.ptr + self.size

    @property
    def device_id(self) -> int | None:
        """The device whose handles are mapped in it (11-04: one device per reservation)."""
        return next((m.handle.device_id for m in self.maps.values()), None)


@dataclass(eq=False, slots=True)
class Mapping:
    """A handle mapped at ``ptr`` (aclrtMapMem / aclrtMemMapNoAccess)."""

    ptr: int
    handle: PhysicalHandle
    reservation: Reservation
    #: (location type, id) -> aclrtMemAccessFlags; aclrtMapMem grants the handle's device
    #: READWRITE (DECISION), aclrtMemMapNoAccess nothing until aclrtMemSetAccess
    access: dict[tuple[int, int], int] = field(default_factory=dict)
    alloc_site: object = field(default=None, repr=False)

    @property
    def size(self) -> int:
        return self.handle.size

    @property
    def end(self) -> int:
        return self.ptr + self.handle.size

    @property
    def device_id(self) -> int:
        return self.handle.device_id

    @property
    def p2p(self) -> bool:
        return self.handle.p2p

    #: how a report names an access after aclrtUnmapMem (see the sanitizer)
    gone = "which was unmapped"

    def describe(self) -> str:
        return (f"{self.size}-byte mapping at {self.ptr:#x} of physical handle "
                f"{self.handle.handle:#x} (device {self.device_id}, {self.handle.pages})")


class AddressSpace:
    """The virtual address space of one process: reservations, handles, mappings.

    Device memory is taken and given back through the ``Device`` objects passed in (its
    :meth:`~ascend_memsim.memory.device.Device.take_physical` / ``give_physical``).
    Lookups by address are O(log n) in the reservations and mappings.
    """

    def __init__(self, profile: Profile) -> None:
        self.profile = profile
        self.lock = threading.RLock()
        # Device 0's heap sits at the bottom of the window in this simulator's layout: the
        # window starts above it (DECISION, see the module docstring).
        heap = device_base(0) + MEMORY_OFFSET[Memory.HBM]
        taken = profile.capacity(Memory.HBM) if VA_BASE <= heap < VA_END else 0
        #: the lowest address a reservation may take
        self.floor = VA_BASE + align_up(taken, GiB)
        self.reservations: SortedDict[int, Reservation] = SortedDict()
        self.handles: dict[int, PhysicalHandle] = {}
        self._serial = itertools.count(1)

    # -- reservations --------------------------------------------------------------------------

    def reserve(self, size: object, alignment: object = 0, expect_ptr: object = 0,
                flags: object = 0, *, no_uc: bool = False) -> Reservation:
        """aclrtReserveMemAddress (``no_uc``: aclrtReserveMemAddressNoUCMemory).

        Rules: size > 0 and flags 0 or 1 (memory.cpp: "flags参数取1, 为了早期接口兼容性保留"),
        else ACL_ERROR_INVALID_PARAM; alignment must be 0 (11-04: "预留, 当前只能设置为0"),
        expectPtr null or an unused address in [16T, 24T) aligned to the power of two at or
        above size, 1 GiB from 1 GiB up (11-04); on Ascend 950PR/950DT only null (11-04
        constraints); else ACL_ERROR_RT_PARAM_INVALID. NoUCMemory: the user names the start
        and the size is a whole number of GiB (11-04), only on Atlas A3.
        DECISION: a system-placed range starts on 2 MiB, or 1 GiB from 1 GiB up; its span is
        the size rounded up to 2 MiB. O(log r).

        Raises:
            InvalidArgument, InvalidRuntimeParam, FeatureNotSupported,
            OutOfDeviceMemory: no room left in the window.
        """
        size = as_int(size, "size")
        alignment = as_int(alignment, "alignment")
        expect = as_int(expect_ptr, "expect_ptr")
        flags = as_int(flags, "flags")
        call = "aclrtReserveMemAddressNoUCMemory" if no_uc else "aclrtReserveMemAddress"
        if size == 0:
            raise InvalidArgument(f"{call}: size is 0")
        if flags not in (0, 1):
            raise InvalidArgument(f"{call}: flags={flags}; only 0 (or 1, kept for "
                                  f"compatibility) is accepted")
        if no_uc and self.profile.name != "A3":
            raise FeatureNotSupported(f"{call} is supported on Atlas A3 only (11-04)")
        if alignment:
            raise InvalidRuntimeParam(f"{call}: alignment={alignment}; it is reserved and "
                                      f"must be 0")
        if no_uc and (not expect or size % GiB):
            raise InvalidRuntimeParam(f"{call}: the start must be given (expect_ptr) and the "
                                      f"size a whole number of GiB")
        big = size >= GiB
        align = GiB if big else 1 << (size - 1).bit_length()
        span = align_up(size, 2 * MiB)
        with self.lock:
            if expect:
                if self.profile.name.startswith("950"):
                    raise InvalidRuntimeParam(f"{call}: on {self.profile.name} expect_ptr must "
                                              f"be 0 (11-04)")
                if not VA_BASE <= expect or expect + span > VA_END:
                    raise InvalidRuntimeParam(
                        f"{call}: expect_ptr {expect:#x} (+{span} bytes) is outside "
                        f"[{VA_BASE:#x}, {VA_END:#x}) (16T-24T)")
                if expect < self.floor:
                    raise InvalidRuntimeParam(
                        f"{call}: expect_ptr {expect:#x} is in device 0's heap, below "
                        f"{self.floor:#x}")
                if expect % align:
                    raise InvalidRuntimeParam(f"{call}: expect_ptr {expect:#x} is not aligned to "
                                              f"{align:#x}")
                ptr = expect
                if not self._free(expect, span):
                    raise InvalidRuntimeParam(f"{call}: [{expect:#x}, {expect + span:#x}) is "
                                              f"already in use")
            else:
                found = self._first_fit(span, GiB if big else 2 * MiB)
                if found is None:
                    raise OutOfDeviceMemory(f"{call}: no {span}-byte range is free in the "
                                            f"reservation window [16T, 24T)")
                ptr = found
            reservation = Reservation(ptr, size, span, flags)
            self.reservations[ptr] = reservation
            return reservation

    def _free(self, start: int, span: int) -> bool:
        """True when no reservation overlaps ``[start, start + span)``. O(log r)."""
        rs = self.reservations
        i = rs.bisect_right(start)
        if i and rs.peekitem(i - 1)[1].ptr + rs.peekitem(i - 1)[1].span > start:
            return False
        return i == len(rs) or rs.peekitem(i)[0] >= start + span

    def _first_fit(self, span: int, align: int) -> int | None:
        """The lowest ``align``-aligned start of a free ``span`` in the window. O(r)."""
        at = align_up(self.floor, align)
        for ptr, reservation in self.reservations.items():
            if at + span <= ptr:
                break
            at = max(at, align_up(ptr + reservation.span, align))
        return at if at + span <= VA_END else None

    def release(self, ptr: object) -> Reservation:
        """aclrtReleaseMemAddress: give the range back; it must hold no mapping (11-04).

        Raises:
            InvalidArgument: NULL (memory.cpp). InvalidRuntimeParam: not a reservation's
            start, or something is still mapped in it.
        """
        ptr = as_int(ptr, "vir_ptr")
        if ptr == 0:
            raise InvalidArgument("aclrtReleaseMemAddress: vir_ptr is NULL")
        with self.lock:
            reservation = self.reservations.get(ptr)
            if reservation is None:
                raise InvalidRuntimeParam(f"aclrtReleaseMemAddress: {ptr:#x} is not the start "
                                          f"of a reserved range" + self._inside(ptr))
            if reservation.maps:
                raise InvalidRuntimeParam(
                    f"aclrtReleaseMemAddress: {len(reservation.maps)} mapping(s) remain in the "
                    f"range at {ptr:#x}; unmap them first (aclrtUnmapMem)")
            del self.reservations[ptr]
            return reservation

    def reservation_at(self, addr: int) -> Reservation | None:
        """The reservation holding ``addr``, or None. O(log r)."""
        with self.lock:
            i = self.reservations.bisect_right(addr)
            if not i:
                return None
            reservation = self.reservations.peekitem(i - 1)[1]
            return reservation if addr < reservation.end else None

    def _inside(self, addr: int) -> str:
        reservation = self.reservation_at(addr)
        return ("" if reservation is None else
                f" (it is {addr - reservation.ptr} bytes inside the range at {reservation.ptr:#x})")

    # -- physical memory -----------------------------------------------------------------------

    def malloc_physical(self, devices: Callable[[int], Device], size: object, prop: object,
                        flags: object = 0) -> PhysicalHandle:
        """aclrtMallocPhysical on the device prop.location.id names (``devices(id)`` gives it,
        or raises InvalidDevice: api_error.cc converts and checks the id). memory.cpp's order:
        size > 0, flags 0, handleType NONE, allocationType PINNED,
        location and memAttr (:func:`check_attr`), all ACL_ERROR_INVALID_PARAM; 1 GB pages only
        where the product has them (api_error.cc CheckIfSupport1GHugePage). The footprint is
        the size rounded up to the page (11-04: align the size to the granularity "以便节约内存").

        Raises:
            InvalidArgument, FeatureNotSupported, OutOfDeviceMemory, InvalidDevice.
        """
        size = as_int(size, "size")
        flags = as_int(flags, "flags")
        prop = parse_prop(prop)
        if size == 0:
            raise InvalidArgument("aclrtMallocPhysical: size is 0")
        if flags:
            raise InvalidArgument(f"aclrtMallocPhysical: flags={flags}; it is reserved and must "
                                  f"be 0")
        if prop.handle_type != HandleType.NONE:
            raise InvalidArgument(f"aclrtMallocPhysical: prop handleType={prop.handle_type}; "
                                  f"only ACL_MEM_HANDLE_TYPE_NONE (0)")
        if prop.allocation_type != AllocationType.PINNED:
            raise InvalidArgument(f"aclrtMallocPhysical: prop allocationType="
                                  f"{prop.allocation_type}; only "
                                  f"ACL_MEM_ALLOCATION_TYPE_PINNED (0)")
        page, p2p = check_attr(prop, self.profile)
        device = devices(prop.location_id)
        if page is Page.HUGE1G and not self.profile.huge1g:
            raise FeatureNotSupported(f"aclrtMallocPhysical: {self.profile.name} has no 1 GB "
                                      f"huge pages (11-04: HUGE1G on Atlas A2/A3 only)")
        step = granule(page)
        if size > SIZE_MAX - step:
            raise InvalidArgument(f"aclrtMallocPhysical: size={size} overflows its rounding")
        footprint = align_up(size, step)
        request = fault_request(device.device_id, size, page, p2p)
        with self.lock:
            phys = device.take_physical(footprint, step, f"aclrtMallocPhysical(size={size})",
                                        request)
            handle = PhysicalHandle(_HANDLE_BASE + next(self._serial) * _HANDLE_STEP,
                                    device.device_id, size, footprint, page, p2p, prop, phys)
            self.handles[handle.handle] = handle
            return handle

    def adopt(self, make: Callable[[int], PhysicalHandle]) -> PhysicalHandle:
        """Add the handle ``make(value)`` builds under a fresh value (an imported one)."""
        with self.lock:
            handle = make(_HANDLE_BASE + next(self._serial) * _HANDLE_STEP)
            self.handles[handle.handle] = handle
            return handle

    def handle(self, handle: object, call: str) -> PhysicalHandle:
        """The live handle ``handle`` (the program still holds a reference).

        Raises:
            InvalidArgument: NULL (memory.cpp). InvalidHandle: unknown, or freed.
        """
        value = as_int(handle, "handle")
        if value == 0:
            raise InvalidArgument(f"{call}: handle is NULL")
        with self.lock:
            found = self.handles.get(value)
            if found is None or found.refs == 0:
                state = "was freed" if found is not None else "is not a physical memory handle"
                raise InvalidHandle(f"{call}: {value:#x} {state}")
            return found

    def free_physical(self, handle: object,
                      devices: Callable[[int], Device | None]) -> PhysicalHandle:
        """aclrtFreePhysical: drop one reference; the memory goes back to the device when no
        reference and no mapping is left (11-04). ``devices``: device id -> Device.

        Raises:
            InvalidArgument: NULL. InvalidHandle: unknown or already freed.
        """
        with self.lock:
            found = self.handle(handle, "aclrtFreePhysical")
            found.refs -= 1
            if found.released:
                self._give_back(found, devices)
            return found

    def _give_back(self, handle: PhysicalHandle,
                   devices: Callable[[int], Device | None]) -> None:
        self.handles.pop(handle.handle, None)
        if handle.shared is not None:
            # Shared with other processes: the memory goes when the last of them lets go.
            handle.shared.release(handle)
            return
        device = devices(handle.device_id)
        if device is not None:
            device.give_physical(handle.phys)

    def retain(self, ptr: object) -> PhysicalHandle:
        """aclrtMemRetainAllocationHandle: the handle mapped at ``ptr`` (a mapping's start,
        11-04), with one more reference.

        Raises:
            InvalidArgument: NULL. InvalidRuntimeParam: not a mapping's start.
        """
        with self.lock:
            mapping = self.mapping(ptr, "aclrtMemRetainAllocationHandle")
            mapping.handle.refs += 1
            return mapping.handle

    def granularity(self, check_device: Callable[[int], object], prop: object,
                    option: object) -> int:
        """aclrtMemGetAllocationGranularity: bytes a handle's size should be a multiple of.

        ``check_device(id)`` checks prop.location.id (raises InvalidDevice): memory.cpp checks
        the attribute first, then the runtime converts and checks the id of a device location
        (api_error.cc ApiErrorDecorator::GetAllocationGranularity: RT_ERROR_DEVICE_ID), then
        the driver reads the option.
        DECISION: MINIMUM and RECOMMENDED are both the page size (2 MiB; 1 GiB for HUGE1G):
        the driver's figures are not public. Another option is ACL_ERROR_RT_PARAM_INVALID.

        Raises:
            InvalidArgument, InvalidArgumentType, FeatureNotSupported (see check_attr),
            InvalidDevice: a device that does not exist,
            InvalidRuntimeParam: an option other than MINIMUM / RECOMMENDED.
        """
        prop = parse_prop(prop)
        option = as_int(option, "option", -(1 << 31), UINT32_MAX)
        page, _ = check_attr(prop, self.profile)
        check_device(prop.location_id)
        if option not in (GranularityOption.MINIMUM, GranularityOption.RECOMMENDED):
            raise InvalidRuntimeParam(f"aclrtMemGetAllocationGranularity: option={option} is "
                                      f"neither MINIMUM (0) nor RECOMMENDED (1)")
        return granule(page)

    def properties(self, handle: object) -> PhysicalProp:
        """aclrtMemGetAllocationPropertiesFromHandle: the handle's prop as the runtime rebuilds
        it (memory.cpp: handleType NONE, PINNED, the location, memAttr from its mapping table).

        Raises:
            InvalidArgument: NULL. InvalidHandle: unknown or freed.
        """
        found = self.handle(handle, "aclrtMemGetAllocationPropertiesFromHandle")
        return PhysicalProp(HandleType.NONE, AllocationType.PINNED,
                            reported_attr(found.page, found.p2p), LocationType.DEVICE,
                            found.device_id, found.prop.reserve)

    # -- mappings ------------------------------------------------------------------------------

    def map(self, ptr: object, size: object, offset: object, handle: object, flags: object,
            *, access: bool = True, call: str = "aclrtMapMem") -> Mapping:
        """aclrtMapMem (``access=False``: aclrtMemMapNoAccess) of a whole handle at ``ptr``.

        Rules: NULL ptr or handle, size 0 or flags != 0 are ACL_ERROR_INVALID_PARAM
        (memory.cpp); offset must be 0 and size the handle's size, a multiple of the
        granularity (11-04); the range must lie inside one reservation, start on the handle's
        page size (DECISION), overlap no mapping, and the reservation may hold handles of one
        device only (11-04, handle: "不能同时与两个Device上申请的物理地址绑定"): else
        ACL_ERROR_RT_PARAM_INVALID. A freed or unknown handle: ACL_ERROR_RT_INVALID_HANDLE.
        O(log n).
        """
        ptr = as_int(ptr, "vir_ptr")
        size = as_int(size, "size")
        offset = as_int(offset, "offset")
        flags = as_int(flags, "flags")
        if ptr == 0:
            raise InvalidArgument(f"{call}: vir_ptr is NULL")
        if as_int(handle, "handle") == 0:
            raise InvalidArgument(f"{call}: handle is NULL")
        if size == 0:
            raise InvalidArgument(f"{call}: size is 0")
        if flags:
            raise InvalidArgument(f"{call}: flags={flags}; it is reserved and must be 0")
        with self.lock:
            found = self.handle(handle, call)
            if offset:
                raise InvalidRuntimeParam(f"{call}: offset={offset}; only 0 is supported")
            step = granule(found.page)
            if size != found.size or size % step:
                raise InvalidRuntimeParam(
                    f"{call}: size={size}; it must equal the handle's size ({found.size}) and be "
                    f"a multiple of the granularity ({step})")
            reservation = self.reservation_at(ptr)
            if reservation is None or ptr + size > reservation.end:
                where = ("is not in a reserved range" if reservation is None else
                         f"runs {ptr + size - reservation.end} bytes past the end of the range "
                         f"at {reservation.ptr:#x}")
                raise InvalidRuntimeParam(f"{call}: [{ptr:#x}, {ptr + size:#x}) {where}")
            if ptr % step:
                raise InvalidRuntimeParam(f"{call}: {ptr:#x} is not aligned to the handle's "
                                          f"page size ({step})")
            maps = reservation.maps
            i = maps.bisect_right(ptr)
            for j in (i - 1, i):
                if 0 <= j < len(maps):
                    other = maps.peekitem(j)[1]
                    if other.ptr < ptr + size and ptr < other.end:
                        raise InvalidRuntimeParam(f"{call}: [{ptr:#x}, {ptr + size:#x}) overlaps "
                                                  f"the {other.describe()}")
            owner = reservation.device_id
            if owner is not None and owner != found.device_id:
                raise InvalidRuntimeParam(
                    f"{call}: the range at {reservation.ptr:#x} already maps memory of device "
                    f"{owner}; a handle of device {found.device_id} cannot join it")
            mapping = Mapping(ptr, found, reservation)
            if access:
                mapping.access[LocationType.DEVICE, found.device_id] = AccessFlags.READWRITE
            maps[ptr] = mapping
            found.maps.add(ptr)
            return mapping

    def mapping(self, ptr: object, call: str) -> Mapping:
        """The mapping that starts at ``ptr``.

        Raises:
            InvalidArgument: NULL. InvalidRuntimeParam: no mapping starts there.
        """
        ptr = as_int(ptr, "vir_ptr")
        if ptr == 0:
            raise InvalidArgument(f"{call}: vir_ptr is NULL")
        with self.lock:
            reservation = self.reservation_at(ptr)
            mapping = None if reservation is None else reservation.maps.get(ptr)
            if mapping is None:
                inside = self.mapping_at(ptr)
                why = (f"it is {ptr - inside.ptr} bytes inside the {inside.describe()}"
                       if inside is not None else "nothing is mapped there")
                raise InvalidRuntimeParam(f"{call}: {ptr:#x} is not the start of a mapping "
                                          f"({why})")
            return mapping

    def unmap(self, ptr: object, devices: Callable[[int], Device | None]) -> Mapping:
        """aclrtUnmapMem: remove the mapping at ``ptr``; a freed handle's last mapping gives its
        memory back (11-04, aclrtFreePhysical).

        Raises:
            InvalidArgument: NULL. InvalidRuntimeParam: no mapping starts at ``ptr``.
        """
        with self.lock:
            mapping = self.mapping(ptr, "aclrtUnmapMem")
            del mapping.reservation.maps[mapping.ptr]
            handle = mapping.handle
            handle.maps.discard(mapping.ptr)
            if handle.released:
                self._give_back(handle, devices)
            return mapping

    def mapping_at(self, addr: int) -> Mapping | None:
        """The mapping holding ``addr``, or None. O(log n)."""
        with self.lock:
            reservation = self.reservation_at(addr)
            if reservation is None:
                return None
            maps = reservation.maps
            i = maps.bisect_right(addr)
            if not i:
                return None
            mapping = maps.peekitem(i - 1)[1]
            return mapping if addr < mapping.end else None

    # -- access --------------------------------------------------------------------------------

    def set_access(self, ptr: object, size: object, desc: object, count: object,
                   device_count: int) -> Mapping:
        """aclrtMemSetAccess: ``desc`` a list of ``{"flags", "location": {"id", "type"}}``
        (aclrtMemAccessDesc), ``count`` its length. ptr and size must be a mapping's (11-04).

        The entries are checked (see :func:`parse_access`: flags NONE and READ are
        ACL_ERROR_RT_FEATURE_NOT_SUPPORT, a flag outside aclrtMemAccessFlags, a location other
        than DEVICE (a valid id) or HOST, count != len(desc) or 0 are
        ACL_ERROR_RT_PARAM_INVALID), all of them before the mapping is looked up, as the
        driver's halMemSetAccess does, and before any applies.

        Raises:
            InvalidArgument: NULL. FeatureNotSupported, InvalidRuntimeParam,
            InvalidArgumentType: see above; not a mapping's start and size.
        """
        ptr = as_int(ptr, "vir_ptr")
        size = as_int(size, "size")
        count = as_int(count, "count")
        if ptr == 0:
            raise InvalidArgument("aclrtMemSetAccess: vir_ptr is NULL")
        changes = parse_access(desc, count, device_count)
        with self.lock:
            mapping = self.mapping(ptr, "aclrtMemSetAccess")
            if size != mapping.size:
                raise InvalidRuntimeParam(f"aclrtMemSetAccess: size={size}, but the mapping at "
                                          f"{mapping.ptr:#x} is {mapping.size} bytes")
            mapping.access.update(changes)
            return mapping

    def get_access(self, ptr: object, location: object) -> int:
        """aclrtMemGetAccess: the access flags of ``location`` (type HOST or DEVICE, 11-04) on
        the mapping at ``ptr``; NONE where none was granted.

        Raises:
            InvalidArgument: NULL. InvalidRuntimeParam: not a mapping's start, or another
            location type. InvalidArgumentType: location not a dict.
        """
        location = parse_dict(location, "aclrtMemLocation")
        kind, number = field_of(location, "type", UINT32_MAX), field_of(location, "id", UINT32_MAX)
        with self.lock:
            mapping = self.mapping(ptr, "aclrtMemGetAccess")
            if kind not in (LocationType.HOST, LocationType.DEVICE):
                raise InvalidRuntimeParam(f"aclrtMemGetAccess: location type {kind}; only HOST "
                                          f"(0) or DEVICE (1) (11-04)")
            if kind == LocationType.HOST:
                number = 0
            return int(mapping.access.get((LocationType(kind), number), AccessFlags.NONE))

    # -- devices -------------------------------------------------------------------------------

    def forget_device(self, device_id: int) -> list[PhysicalHandle]:
        """A device was reset: its handles and their mappings are gone (its memory with it);
        the handles dropped."""
        with self.lock:
            gone = [h for h in self.handles.values() if h.device_id == device_id]
            for handle in gone:
                del self.handles[handle.handle]
                for ptr in list(handle.maps):
                    mapping = self.mapping_at(ptr)
                    if mapping is not None:
                        del mapping.reservation.maps[ptr]
                handle.maps.clear()
            return gone

    def check_invariants(self) -> None:
        """Assert the tables agree (for tests)."""
        with self.lock:
            mapped: dict[int, set[int]] = {}
            last = self.floor
            for reservation in self.reservations.values():
                assert last <= reservation.ptr and reservation.ptr + reservation.span <= VA_END
                last = reservation.ptr + reservation.span
                end = reservation.ptr
                devices = set()
                for ptr, mapping in reservation.maps.items():
                    assert ptr == mapping.ptr >= end and mapping.end <= reservation.end
                    end = mapping.end
                    devices.add(mapping.device_id)
                    assert (self.handles.get(mapping.handle.handle) is mapping.handle
                            or getattr(mapping.handle.shared, "ipc", False))
                    mapped.setdefault(mapping.handle.handle, set()).add(ptr)
                assert len(devices) <= 1
            for value, handle in self.handles.items():
                assert not handle.released
                assert handle.maps == mapped.get(value, set())

