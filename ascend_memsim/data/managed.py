"""Managed (unified) memory as the data plane sees it: one allocation, one region.

An aclrtMemAllocManaged allocation (hicann/runtime ``docs/zh/api_ref/11-05_unified_addressing.md``)
is one range of addresses the host and every device reach. Its bytes live in one
:class:`~ascend_memsim.data.contents.Contents`, made on first write, whichever side writes:
a host read (``acl.util.ptr_to_bytes``), a copy to or from a device and an operator all see
the same bytes. The simulator does not move pages between host and device (the runtime does,
on a page fault); :mod:`ascend_memsim.runtime.managed` keeps the advice and the prefetch
location the program can query.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..memory.sites import Site
from .contents import DeviceRegion

__all__ = ["ManagedAlloc", "ManagedRegion"]


@dataclass(slots=True, eq=False)
class ManagedAlloc:
    """A live managed allocation: ``size`` bytes asked at ``ptr``, ``footprint`` (the size
    rounded up to 2 MiB) held on device ``device_id`` at ``phys``."""

    ptr: int
    size: int
    footprint: int
    device_id: int
    phys: int
    #: per 2 MiB page (its index from ``ptr``): the advice and prefetch state, when not the
    #: default (see runtime/managed.py)
    pages: dict = field(default_factory=dict)
    #: where the bytes are kept (``contents``, see data/contents.py contents_of)
    extra: dict | None = field(default=None, repr=False)
    alloc_site: Site | None = field(default=None, repr=False)
    #: what the data plane and the sanitizer read of a block
    readonly = False
    p2p = True

    #: DECISION: no rounding rule beyond the 2 MiB pages (a padding access names the pages)
    @property
    def rule_size(self) -> int:
        return self.size

    @property
    def end(self) -> int:
        return self.ptr + self.footprint

    def describe(self) -> str:
        return (f"{self.size}-byte managed allocation at {self.ptr:#x} (aclrtMemAllocManaged, "
                f"footprint {self.footprint}, charged to device {self.device_id})")


class ManagedRegion(DeviceRegion):
    """A managed allocation seen as a region: device memory the host may read and write
    directly (``acl.util.ptr_to_bytes`` / ``ptr_to_numpy``)."""

    __slots__ = ()
    managed = True
