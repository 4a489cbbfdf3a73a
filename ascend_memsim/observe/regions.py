"""Physical memory handles (aclrtMallocPhysical, 11-04) as the pictures and snapshots show them.

A handle's memory lies in the device's heap beside the blocks, so the memory map, the text map
and the PNG draw it where it lies, in a colour of its own, labelled "physical handle" with its
page size. :class:`PhysicalRegion` reads as a :class:`~ascend_memsim.memory.device.Block`
reads for drawing (``ptr``, ``size``, ``footprint``, ``page``, ``module_name``, ...).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeGuard

from ..memory.rules import Page, PhysicalApi

if TYPE_CHECKING:
    from ..memory.device import Device

__all__ = ["BlockLike", "PhysicalRegion", "physical_regions", "PHYSICAL_COLOR", "is_physical",
           "PHYSICAL_API", "physical_entry", "physical_event"]

#: Fill colour of physical memory (the Okabe-Ito bluish green, apart from the page colours).
PHYSICAL_COLOR = "#009E73"


class BlockLike:
    """What a region drawn beside the blocks shares with a
    :class:`~ascend_memsim.memory.device.Block`: its ``size`` bytes lie in its ``footprint``
    at ``ptr``, with no padding, no fallback, no extra and no allocation site (a base for
    slotted dataclasses declaring ``ptr``, ``size`` and ``footprint``)."""

    __slots__ = ()
    ptr: int
    size: int
    footprint: int
    fallback = False
    extra = None
    alloc_site = None

    @property
    def rule_size(self) -> int:
        return self.size

    @property
    def padding(self) -> int:
        return 0

    @property
    def page_rounding(self) -> int:
        return self.footprint - self.size

    @property
    def end(self) -> int:
        return self.ptr + self.footprint


@dataclass(frozen=True, slots=True)
class PhysicalRegion(BlockLike):
    """The memory of one physical handle: ``size`` bytes asked, ``footprint`` placed at
    ``ptr``, on 2 MiB or 1 GiB pages; charged to APP as the runtime charges it."""

    ptr: int
    size: int
    footprint: int
    page: Page
    device_id: int
    api = PhysicalApi.MALLOC_PHYSICAL
    module_name = "APP"

    @property
    def pages(self) -> str:
        """``2 MiB pages`` or ``1 GiB pages``."""
        return "1 GiB pages" if self.page is Page.HUGE1G else "2 MiB pages"

    def describe(self) -> str:
        return (f"physical handle of {self.size} bytes at {self.ptr:#x} (aclrtMallocPhysical, "
                f"{self.pages}, footprint {self.footprint})")


def is_physical(region: object) -> TypeGuard[PhysicalRegion]:
    """True for a :class:`PhysicalRegion` (a block is not one)."""
    return region.__class__ is PhysicalRegion


def physical_regions(device: Device) -> list[PhysicalRegion]:
    """The device's physical memory now, by address (call under the device lock)."""
    return [PhysicalRegion(ptr, size, device.physical[ptr], page, device.device_id)
            for ptr, (size, page) in sorted(device.physical_info.items())]


# -- memory_viz snapshots (observe/snapshot.py) ---------------------------------------------

def _int(value: Any) -> int | None:
    # a plain int only, as snapshot.py reads a hostile file's fields
    return value if isinstance(value, int) and not isinstance(value, bool) else None


#: the api a physical handle's snapshot entries carry
PHYSICAL_API = PhysicalApi.MALLOC_PHYSICAL.value


def physical_event(entry: dict[str, Any], action: str, size: int, addr: int, common: dict[str, Any],
                   footprint: int | None = None) -> dict[str, Any]:
    """A physical handle's segment (as :func:`~ascend_memsim.observe.snapshot.to_memory_viz`
    writes it) back as the trace's
    malloc_physical / free_physical event; replay checks its footprint and page."""
    handle = _int(entry.get("handle"))
    page = entry.get("page")
    return {"event": "malloc_physical" if action == "segment_alloc" else "free_physical",
            "handle": addr if handle is None else handle, "size": size,
            "footprint": _int(entry.get("size")) if footprint is None else footprint,
            "page": page if page in ("huge", "huge1g") else "huge", "phys": addr, **common}


def physical_entry(event: Any, device: int, out: Any,
                   live: dict[tuple[int, int], dict[str, Any]], in_use: dict[int, int],
                   frames: list[Any], stream: int) -> None:
    """A physical handle's memory (aclrtMallocPhysical, 11-04) as a segment of its own at its
    address in the device (``phys``): ``segment_alloc`` / ``segment_free``, no block handed
    out (torch's view of device memory no tensor uses yet), ``api`` aclrtMallocPhysical and
    the handle and page kind beside."""
    get = event.get
    ptr, footprint, size = _int(get("phys")), _int(get("footprint")), _int(get("size"))
    if ptr is None or not footprint or size is None:
        return
    if get("event") == "malloc_physical":
        extra = {"api": PHYSICAL_API, "handle": get("handle"), "page": get("page")}
        live[(device, ptr)] = {"size": size, "footprint": footprint, "frames": frames,
                               "stream": stream, "extra": extra}
        in_use[device] = in_use.get(device, 0) + footprint
        action = "segment_alloc"
    elif live.pop((device, ptr), None) is not None:
        in_use[device] -= footprint
        extra, action = {"api": PHYSICAL_API, "handle": get("handle")}, "segment_free"
    else:
        return
    out.append({"action": action, "addr": ptr, "size": footprint, "stream": stream,
                "frames": frames, "requested_size": size, **extra})
