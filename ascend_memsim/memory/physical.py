"""Physical device memory for virtual memory (11-04): the property dict and the handle.

aclrtMallocPhysical's ``prop`` (aclrtPhysicalMemProp, acl_rt.h) arrives from pyacl as a dict
(hicann/runtime python/pyACL/rt/rt_memory.cpp, GetPhysicalMemPropFromPydict); its checks are
memory.cpp's (aclrtMallocPhysicalImpl, aclrtMemGetAllocationGranularityImpl). A
:class:`PhysicalHandle` is what the program holds; its memory is placed in the device's heap
(see :mod:`ascend_memsim.memory.vmm`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, cast

from .args import SIZE_MAX, UINT32_MAX, shown
from .constants import (
    MODULE_APP,
    AccessFlags,
    AllocationType,
    HandleType,
    LocationType,
    MallocPolicy,
    MemAttr,
)
from .errors import (
    FeatureNotSupported,
    InvalidArgument,
    InvalidArgumentType,
    InvalidRuntimeParam,
)
from .profiles import Profile
from .rules import PAGE_BYTES, Page, PhysicalApi, Request

__all__ = ["PhysicalHandle", "PhysicalProp", "check_attr", "fault_request", "field_of", "granule",
           "parse_access", "parse_dict", "parse_prop", "reported_attr"]


#: The attributes memory.cpp's memAttrHandlers accepts, and what each asks of the driver
#: (page kind, P2P). The DDR ones are for host memory only; the HBM _P2P ones are not in the
#: table (ACL_ERROR_INVALID_PARAM), the generic ACL_MEM_P2P_* are.
_ATTRS: dict[int, tuple[Page, bool]] = {
    MemAttr.HBM_MEM_HUGE: (Page.HUGE, False),
    MemAttr.HBM_MEM_NORMAL: (Page.NORMAL, False),
    MemAttr.HBM_MEM_HUGE1G: (Page.HUGE1G, False),
    MemAttr.DDR_MEM_HUGE: (Page.HUGE, False),
    MemAttr.DDR_MEM_NORMAL: (Page.NORMAL, False),
    MemAttr.DDR_MEM_P2P_HUGE: (Page.HUGE, True),
    MemAttr.DDR_MEM_P2P_NORMAL: (Page.NORMAL, True),
    MemAttr.MEM_NORMAL: (Page.NORMAL, False),
    MemAttr.MEM_HUGE: (Page.HUGE, False),
    MemAttr.MEM_HUGE1G: (Page.HUGE1G, False),
    MemAttr.MEM_P2P_NORMAL: (Page.NORMAL, True),
    MemAttr.MEM_P2P_HUGE: (Page.HUGE, True),
    MemAttr.MEM_P2P_HUGE1G: (Page.HUGE1G, True),
}
_DDR_ATTRS = frozenset({MemAttr.DDR_MEM_HUGE, MemAttr.DDR_MEM_NORMAL, MemAttr.DDR_MEM_P2P_HUGE,
                        MemAttr.DDR_MEM_P2P_NORMAL})
#: What aclrtMemGetAllocationPropertiesFromHandle reports for device memory (memory.cpp, its
#: mapping table, isHostAlloc false): (page, p2p) -> memAttr.
_REPORTED = {
    (Page.NORMAL, False): MemAttr.HBM_MEM_NORMAL, (Page.HUGE, False): MemAttr.HBM_MEM_HUGE,
    (Page.HUGE1G, False): MemAttr.HBM_MEM_HUGE1G, (Page.NORMAL, True): MemAttr.MEM_P2P_NORMAL,
    (Page.HUGE, True): MemAttr.MEM_P2P_HUGE, (Page.HUGE1G, True): MemAttr.MEM_P2P_HUGE1G,
}


@dataclass(frozen=True, slots=True)
class PhysicalProp:
    """aclrtPhysicalMemProp. pyacl passes it as a dict: ``{"handleType", "allocationType",
    "memAttr", "location": {"id", "type"}, "reserve"}`` (rt_memory.cpp,
    GetPhysicalMemPropFromPydict); a missing key leaves the field 0, as there."""

    handle_type: int = HandleType.NONE
    allocation_type: int = AllocationType.PINNED
    mem_attr: int = MemAttr.HBM_MEM_HUGE
    location_type: int = LocationType.DEVICE
    location_id: int = 0
    reserve: int = 0

    def as_dict(self) -> dict[str, object]:
        """pyacl's dict shape."""
        return {"handleType": self.handle_type, "allocationType": self.allocation_type,
                "memAttr": self.mem_attr,
                "location": {"id": self.location_id, "type": self.location_type},
                "reserve": self.reserve}


def field_of(d: dict[str, object], key: str, hi: int) -> int:
    """An int field of a pyacl dict: 0 when missing, as pyacl leaves the zeroed struct.

    Read as the C API reads it (``PyDict_GetItemString``: a subclass's overridden methods do
    not run). pyacl takes an int (a bool is one) and ignores anything else; DECISION: the
    simulator refuses anything else, so a program tested here never relies on a field it
    thinks it set.

    Raises:
        InvalidArgumentType: not an int. InvalidArgument: outside the C field's range.
    """
    value = dict.get(d, key, 0)
    if not isinstance(value, int):
        raise InvalidArgumentType(f"{key} must be an int, got {shown(value)}")
    value = int.__index__(value)
    lo = -(1 << 31) if hi == UINT32_MAX else 0
    if not lo <= value <= hi:
        raise InvalidArgument(f"{key}={value} is outside [{lo}, {hi}]")
    return value


def parse_dict(value: object, what: str) -> dict[str, object]:
    """``value`` if it is a dict (or a subclass, as ``PyDict_Check``), else the TypeError
    pyacl raises, as a code."""
    if not issubclass(type(value), dict):
        raise InvalidArgumentType(f"the {what} argument is not dict (got {shown(value)})")
    # PyDict_Check's test, which the checker does not read as narrowing
    return cast("dict[str, object]", value)


def parse_prop(prop: object) -> PhysicalProp:
    """A :class:`PhysicalProp` from pyacl's dict (or a PhysicalProp).

    Raises:
        InvalidArgumentType: not a dict (pyacl raises TypeError: "the aclrtPhysicalMemProp
            argument is not dict"), or a field that is not an int.
        InvalidArgument: a field outside its C type.
    """
    if isinstance(prop, PhysicalProp):
        return prop
    prop = parse_dict(prop, "aclrtPhysicalMemProp")
    location = parse_dict(dict.get(prop, "location", {}), "aclrtMemLocation")
    return PhysicalProp(field_of(prop, "handleType", UINT32_MAX),
                        field_of(prop, "allocationType", UINT32_MAX),
                        field_of(prop, "memAttr", UINT32_MAX),
                        field_of(location, "type", UINT32_MAX),
                        field_of(location, "id", UINT32_MAX),
                        field_of(prop, "reserve", SIZE_MAX))


def check_attr(prop: PhysicalProp, profile: Profile) -> tuple[Page, bool]:
    """The page kind and P2P flag ``prop`` asks for, after memory.cpp's attribute checks
    (aclrtMallocPhysicalImpl, aclrtMemGetAllocationGranularityImpl).

    Raises:
        InvalidArgument: location UNREGISTERED or MANAGED; a DDR attribute for device memory;
            an attribute not in memAttrHandlers.
        FeatureNotSupported: host memory (DECISION: physical host memory is not simulated).
    """
    if prop.location_type in (LocationType.UNREGISTERED, LocationType.MANAGED):
        raise InvalidArgument(f"prop location type {LocationType(prop.location_type).name} is "
                              f"not supported (memory.cpp: UNREGISTERED and MANAGED refused)")
    device = prop.location_type == LocationType.DEVICE
    if device and prop.mem_attr in _DDR_ATTRS:
        raise InvalidArgument(f"memAttr {MemAttr(prop.mem_attr).name} is for host memory only "
                              f"(location type HOST or HOST_NUMA)")
    kind = _ATTRS.get(prop.mem_attr)
    if kind is None:
        raise InvalidArgument(f"memAttr {prop.mem_attr} is not an attribute aclrtMallocPhysical "
                              f"supports (memory.cpp memAttrHandlers)")
    if not device:
        raise FeatureNotSupported("physical host memory (location HOST / HOST_NUMA) is not "
                                  "simulated; use location type ACL_MEM_LOCATION_TYPE_DEVICE")
    return kind


def granule(page: Page) -> int:
    """Bytes per page of physical device memory. Normal pages are allocated as huge (11-04,
    aclrtMallocPhysical: ACL_HBM_MEM_NORMAL "接口内部会按照ACL_HBM_MEM_HUGE类型申请大页内存";
    DECISION: ACL_MEM_NORMAL and ACL_MEM_P2P_NORMAL on a device alike)."""
    return PAGE_BYTES[Page.HUGE1G] if page is Page.HUGE1G else PAGE_BYTES[Page.HUGE]


#: (page kind placed, p2p) -> the aclrtMalloc policy that asks for those pages
_POLICY_OF = {
    (Page.HUGE, False): int(MallocPolicy.HUGE_ONLY),
    (Page.HUGE1G, False): int(MallocPolicy.HUGE1G_ONLY),
    (Page.HUGE, True): int(MallocPolicy.HUGE_ONLY_P2P),
    (Page.HUGE1G, True): int(MallocPolicy.HUGE1G_ONLY_P2P),
}


def fault_request(device_id: int, size: int, page: Page, p2p: bool) -> Request:
    """The :class:`~ascend_memsim.memory.rules.Request` fault injection sees for an
    aclrtMallocPhysical of ``size`` bytes of ``page`` memory: api aclrtMallocPhysical, module
    APP, the page kind it is placed on (normal attributes on huge pages, see :func:`granule`)
    and, for a fault's ``policy`` filter, the aclrtMalloc policy that asks for those pages
    (HUGE_ONLY, HUGE1G_ONLY, or their _P2P variants)."""
    placed = Page.HUGE1G if page is Page.HUGE1G else Page.HUGE
    return Request(device_id, PhysicalApi.MALLOC_PHYSICAL, size, _POLICY_OF[placed, p2p],
                   MODULE_APP, (placed,))


class SharedMemory(Protocol):
    """Memory shared between processes, as a handle's ``shared`` (runtime/shareable.py,
    runtime/ipc.py)."""

    def release(self, handle: PhysicalHandle) -> None:
        """The process lets go of ``handle``; the memory goes back with the last one."""

    def settle(self) -> None:
        """Give the memory back once no process holds it any more."""


@dataclass(eq=False, slots=True)
class PhysicalHandle:
    """Physical device memory (aclrtDrvMemHandle): ``size`` bytes asked, ``footprint`` placed at
    ``phys`` in the device's memory."""

    handle: int
    device_id: int
    size: int
    footprint: int
    page: Page
    p2p: bool
    prop: PhysicalProp
    phys: int
    #: references the program holds (aclrtMallocPhysical 1, +1 per retain); 0: freed
    refs: int = 1
    #: virtual addresses it is mapped at
    maps: set[int] = field(default_factory=set)
    #: the data plane's slot (the bytes), as Block.extra
    extra: dict[str, Any] | None = field(default=None, repr=False)
    alloc_site: object = field(default=None, repr=False)
    #: memory shared between processes (runtime/shareable.py, runtime/ipc.py): its
    #: ``release(handle)`` gives the memory back when the last process lets go; None: private
    shared: SharedMemory | None = field(default=None, repr=False)

    @property
    def ptr(self) -> int:
        """The handle's value (what the program holds), for reports."""
        return self.handle

    @property
    def released(self) -> bool:
        """True once the memory went back to the device."""
        return self.refs == 0 and not self.maps

    def describe(self) -> str:
        return (f"physical handle {self.handle:#x} ({self.size} bytes of device "
                f"{self.device_id}, {self.pages}, footprint {self.footprint})")

    @property
    def pages(self) -> str:
        """``2 MiB pages`` or ``1 GiB pages`` (normal attributes are placed on 2 MiB)."""
        return "1 GiB pages" if self.page is Page.HUGE1G else "2 MiB pages"




def reported_attr(page: Page, p2p: bool) -> int:
    """The memAttr aclrtMemGetAllocationPropertiesFromHandle reports for device memory."""
    return _REPORTED[page, p2p]


def parse_access(desc: object, count: int, device_count: int) -> dict[tuple[int, int], int]:
    """aclrtMemSetAccess's ``desc`` (a list of ``{"flags", "location": {"id", "type"}}``,
    aclrtMemAccessDesc) as {(location type, id): flags}, every entry checked first.

    The driver checks each entry in turn, the flag before the location (hicann/driver
    ``src/ascend_hal/svm/v2/devmm/devmm_svm.c`` devmm_access_desc_check and
    ``svm/v3/api/master/svm_vmm.c`` vmm_access_desc_check): NONE and READ are
    DRV_ERROR_NOT_SUPPORT, which the runtime turns into RT_ERROR_FEATURE_NOT_SUPPORT
    (hicann/runtime ``src/runtime/driver/npu_driver_mem.cc`` NpuDriver::MemSetAccess), as
    25-04 Structs aclrtMemAccessDesc says: "当前仅支持ACL_RT_MEM_ACCESS_FLAGS_READWRITE".

    Raises:
        InvalidArgumentType: an entry or location that is not a dict, a field not an int.
        FeatureNotSupported: flags NONE or READ (only READWRITE is supported).
        InvalidRuntimeParam: count 0 or not the list's length, a flag outside
            aclrtMemAccessFlags, a location other than DEVICE (a valid id) or HOST (the
            driver's DRV_ERROR_INVALID_VALUE).
    """
    if not issubclass(type(desc), list):
        raise InvalidArgumentType(f"desc must be a list of aclrtMemAccessDesc dicts, got "
                                  f"{shown(desc)}")
    # PyList_Check's test above, which the checker does not read as narrowing
    desc = list.copy(cast("list[object]", desc))
    if count == 0 or count != len(desc):
        raise InvalidRuntimeParam(f"aclrtMemSetAccess: count={count} for {len(desc)} "
                                  f"descriptor(s)")
    changes: dict[tuple[int, int], int] = {}
    for item in desc:
        entry = parse_dict(item, "aclrtMemAccessDesc")
        flags = field_of(entry, "flags", UINT32_MAX)
        location = parse_dict(dict.get(entry, "location", {}), "aclrtMemLocation")
        kind = field_of(location, "type", UINT32_MAX)
        number = field_of(location, "id", UINT32_MAX)
        if flags in (AccessFlags.NONE, AccessFlags.READ):
            raise FeatureNotSupported(f"aclrtMemSetAccess: flags={AccessFlags(flags).name} is "
                                      f"not supported; only ACL_RT_MEM_ACCESS_FLAGS_READWRITE "
                                      f"(25-04 aclrtMemAccessDesc)")
        if flags != AccessFlags.READWRITE:
            raise InvalidRuntimeParam(f"aclrtMemSetAccess: flags={flags} is not an "
                                      f"aclrtMemAccessFlags value")
        if kind == LocationType.HOST:
            number = 0
        elif kind != LocationType.DEVICE or number >= device_count:
            raise InvalidRuntimeParam(f"aclrtMemSetAccess: location (type {kind}, id {number}) "
                                      f"is not a device or the host")
        changes[LocationType(kind), number] = AccessFlags(flags)
    return changes
