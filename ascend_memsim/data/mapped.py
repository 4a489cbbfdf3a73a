"""Mapped virtual memory seen as a region: the bytes live per physical handle.

A virtual address inside a mapping (aclrtMapMem) resolves to a :class:`MappedRegion`: the
mapping holding it and the mappings that follow it without a gap, as far as the access
reaches (torch_npu's expandable segments put a tensor across two handles' mappings). Each
handle keeps its bytes in a :class:`~ascend_memsim.data.contents.Contents`, made on first
write, so one handle mapped at two addresses shows the same bytes, and bytes survive unmapping
and mapping again. The data plane, the streams, operators and the sanitizer use it as they use
a device block.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..memory.constants import AccessFlags, LocationType
from ..memory.errors import InvalidPointer
from ..memory.physical import PhysicalHandle
from ..memory.vmm import VA_END, AddressSpace, Mapping
from .contents import Contents, Region, contents_of, fill_view

__all__ = ["MappedRegion", "mapped_region"]


def _contents_if_any(handle: PhysicalHandle) -> Contents | None:
    extra = handle.extra
    found: Contents | None = None if extra is None else extra.get("contents")
    return found


class MappedRegion:
    """Consecutive mappings as one region; ``block`` is the first mapping (its device_id,
    p2p and describe are what the data plane and launches read)."""

    __slots__ = ("base", "maps", "size")
    host = False
    #: aclrtMemSetAccess grants READWRITE only (25-04 aclrtMemAccessDesc), so a mapping its
    #: device may access may also be written
    readonly = False

    def __init__(self, maps: list[Mapping]) -> None:
        self.maps = maps
        self.base = maps[0].ptr
        self.size = maps[-1].end - self.base

    @property
    def block(self) -> Mapping:
        return self.maps[0]

    @property
    def limit(self) -> int:
        return self.size

    def describe(self) -> str:
        if len(self.maps) == 1:
            return self.maps[0].describe()
        return (f"{self.size}-byte mapped range at {self.base:#x} ({len(self.maps)} mappings, "
                f"from the {self.maps[0].describe()})")

    def site(self) -> object:
        return self.maps[0].alloc_site

    def _pieces(self, offset: int,
                count: int) -> Iterator[tuple[PhysicalHandle, int, int, int]]:
        """(handle, offset in it, offset in the access, bytes) per mapping the access touches."""
        addr, end, done = self.base + offset, self.base + offset + count, 0
        for mapping in self.maps:
            if mapping.end <= addr:
                continue
            if mapping.ptr >= end:
                break
            take = min(end, mapping.end) - addr
            yield mapping.handle, addr - mapping.ptr, done, take
            addr += take
            done += take

    def view(self, offset: int, count: int) -> None:
        """Device bytes are not directly addressable."""
        return

    def source(self, offset: int, count: int) -> memoryview:
        """The bytes, read into a new buffer (a copy to a device block takes them from here)."""
        out = bytearray(count)
        self.read_into(offset, memoryview(out))
        return memoryview(out)

    def direct_view(self, offset: int, count: int) -> memoryview:
        """The handle's bytes themselves (ACL_DEVICE run mode), inside one mapping only.

        Raises:
            InvalidPointer: the range spans two handles.
        """
        pieces = list(self._pieces(offset, count))
        if len(pieces) != 1:
            raise InvalidPointer(f"{count} bytes at {self.base + offset:#x} span "
                                 f"{len(pieces)} physical handles; view them one at a time")
        handle, at, _, take = pieces[0]
        contents = contents_of(handle)
        contents.written.add(at, at + take)
        return contents._materialise(0)[at:at + take]

    def read_into(self, offset: int, out: memoryview) -> None:
        for handle, at, done, take in self._pieces(offset, len(out)):
            contents = _contents_if_any(handle)
            if contents is None:
                fill_view(out[done:done + take], 0)
            else:
                contents.read_into(at, out[done:done + take])

    def read(self, offset: int, count: int) -> bytearray:
        out = bytearray(count)
        self.read_into(offset, memoryview(out))
        return out

    def write(self, offset: int, data: memoryview) -> None:
        for handle, at, done, take in self._pieces(offset, len(data)):
            contents_of(handle).write(at, data[done:done + take])

    def fill(self, offset: int, count: int, value: int) -> None:
        for handle, at, _, take in self._pieces(offset, count):
            contents_of(handle).fill(at, take, value)

    def copy_from(self, source: Region, src_off: int, dst_off: int, count: int) -> None:
        """Copy from a device block or mapped range (through a buffer of ``count`` bytes)."""
        data = bytearray(count)
        source.read_into(src_off, memoryview(data))
        self.write(dst_off, memoryview(data))

    def first_gap(self, offset: int, count: int) -> tuple[int, int] | None:
        for handle, at, done, take in self._pieces(offset, count):
            contents = _contents_if_any(handle)
            gap = ((at, at + take) if contents is None
                   else contents.written.first_gap(at, at + take))
            if gap is not None:
                start = offset + done + gap[0] - at
                return start, start + gap[1] - gap[0]
        return None


def mapped_region(space: AddressSpace | None, addr: int, count: int) -> MappedRegion | None:
    """The region of the mappings from the one holding ``addr`` as far as ``count`` bytes
    reach without a gap, or None (unmapped, or not accessible to its device: a mapping made
    by aclrtMemMapNoAccess before aclrtMemSetAccess). O(log n + k)."""
    # Device 0's heap lies below the floor of the window: its addresses stop here.
    if space is None or not space.floor <= addr < VA_END:
        return None
    with space.lock:
        first = space.mapping_at(addr)
        if first is None or not _readable(first):
            return None
        maps = [first]
        end = addr + max(count, 1)
        table = first.reservation.maps
        if first.end < end:
            for _, mapping in table.items()[table.index(first.ptr) + 1:]:
                if mapping.ptr != maps[-1].end or not _readable(mapping):
                    break
                maps.append(mapping)
                if mapping.end >= end:
                    break
        return MappedRegion(maps)


def _readable(mapping: Mapping) -> bool:
    return mapping.access.get((LocationType.DEVICE, mapping.device_id),
                              AccessFlags.NONE) != AccessFlags.NONE
