"""Managed (unified) memory as the data plane sees it: one allocation, one region.

An aclrtMemAllocManaged allocation (hicann/runtime ``docs/zh/api_ref/11-05_unified_addressing.md``)
is one range of addresses the host and every device reach. Its bytes live in one
:class:`~ascend_memsim.data.contents.Contents`, made on first write, whichever side writes:
a host read (``acl.util.ptr_to_bytes``), a copy to or from a device and an operator all see
the same bytes. The simulator does not move pages between host and device (the runtime does,
on a page fault); each allocation keeps, per 2 MiB page, the advice and the prefetch
location the program can query (:mod:`ascend_memsim.runtime.managed` sets them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..memory.constants import ManagedLocationType, ManagedRangeAttr
from ..memory.sites import Site
from .contents import DeviceRegion

__all__ = ["DEFAULT_PAGE", "NO_LOCATION", "ManagedAlloc", "ManagedRegion", "PageState",
           "attribute_value", "store_page"]

#: What an attribute reads where none was set or the pages disagree (DECISION).
NO_LOCATION = (int(ManagedLocationType.INVALID), -1)


@dataclass(frozen=True, slots=True)
class PageState:
    """The advice and the last prefetch of one 2 MiB page of managed memory."""

    read_mostly: bool = False
    preferred: tuple[int, int] = NO_LOCATION
    accessed_by: frozenset[tuple[int, int]] = frozenset()
    prefetched: tuple[int, int] = NO_LOCATION


#: A page nothing was advised for and nothing prefetched to (not kept in ``pages``).
DEFAULT_PAGE = PageState()


@dataclass(slots=True, eq=False)
class ManagedAlloc:
    """A live managed allocation: ``size`` bytes asked at ``ptr``, ``footprint`` (the size
    rounded up to 2 MiB) held on device ``device_id`` at ``phys``."""

    ptr: int
    size: int
    footprint: int
    device_id: int
    phys: int
    #: per 2 MiB page (its index from ``ptr``): its :class:`PageState`, when not the default
    pages: dict[int, PageState] = field(default_factory=dict)
    #: where the bytes are kept (``contents``, see data/contents.py contents_of)
    extra: dict[str, Any] | None = field(default=None, repr=False)
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


def store_page(pages: dict[int, PageState], page: int, state: PageState) -> None:
    """Keep ``state`` for ``page`` (a default state is not kept)."""
    if state == DEFAULT_PAGE:
        pages.pop(page, None)
    else:
        pages[page] = state


def attribute_value(attr: ManagedRangeAttr, states: set[PageState], data_size: int) -> Any:
    """One attribute over pages in ``states`` (DECISION, the vendor names no layout): a flag
    0/1; a location ``{"type", "id"}``; a type or an id an int; ACCESSED_BY a list of
    locations (at most dataSize // 8). Pages that disagree on it read as invalid: 0, the
    INVALID location (type 0, id -1), an empty list (11-05: "查询结果为无效值")."""
    if attr is ManagedRangeAttr.READ_MOSTLY:
        return int(all(s.read_mostly for s in states))
    if attr is ManagedRangeAttr.ACCESSED_BY:
        found = {s.accessed_by for s in states}
        chosen = sorted(found.pop()) if len(found) == 1 else []
        return [{"type": t, "id": i} for t, i in chosen[:data_size // 8]]
    prefetch = attr.name.startswith("LAST_PREFETCH")
    locations = {s.prefetched if prefetch else s.preferred for s in states}
    loc = locations.pop() if len(locations) == 1 else NO_LOCATION
    if attr.name.endswith("_TYPE"):
        return loc[0]
    if attr.name.endswith("_ID"):
        return loc[1]
    return {"type": loc[0], "id": loc[1]}
