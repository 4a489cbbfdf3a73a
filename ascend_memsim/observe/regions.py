"""Physical memory handles (aclrtMallocPhysical, 11-04) as the pictures draw them.

A handle's memory lies in the device's heap beside the blocks, so the memory map, the text map
and the PNG draw it where it lies, in a colour of its own, labelled "physical handle" with its
page size. :class:`PhysicalRegion` reads as a :class:`~ascend_memsim.memory.device.Block`
reads for drawing (``ptr``, ``size``, ``footprint``, ``page``, ``module_name``, ...).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..memory.rules import Page, PhysicalApi

if TYPE_CHECKING:
    from ..memory.device import Device

__all__ = ["PhysicalRegion", "physical_regions", "PHYSICAL_COLOR", "is_physical"]

#: Fill colour of physical memory (the Okabe-Ito bluish green, apart from the page colours).
PHYSICAL_COLOR = "#009E73"


@dataclass(frozen=True, slots=True)
class PhysicalRegion:
    """The memory of one physical handle: ``size`` bytes asked, ``footprint`` placed at
    ``ptr``, on 2 MiB or 1 GiB pages; charged to APP as the runtime charges it."""

    ptr: int
    size: int
    footprint: int
    page: Page
    device_id: int
    api = PhysicalApi.MALLOC_PHYSICAL
    module_name = "APP"
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

    @property
    def pages(self) -> str:
        """``2 MiB pages`` or ``1 GiB pages``."""
        return "1 GiB pages" if self.page is Page.HUGE1G else "2 MiB pages"

    def describe(self) -> str:
        return (f"physical handle of {self.size} bytes at {self.ptr:#x} (aclrtMallocPhysical, "
                f"{self.pages}, footprint {self.footprint})")


def is_physical(region: object) -> bool:
    """True for a :class:`PhysicalRegion` (a block is not one)."""
    return region.__class__ is PhysicalRegion


def physical_regions(device: Device) -> list[PhysicalRegion]:
    """The device's physical memory now, by address (call under the device lock)."""
    return [PhysicalRegion(ptr, size, device.physical[ptr], page, device.device_id)
            for ptr, (size, page) in sorted(device.physical_info.items())]
