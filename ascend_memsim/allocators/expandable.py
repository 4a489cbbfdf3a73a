"""torch_npu's ExpandableSegment over the simulated virtual memory (``Runtime.vmm``).

Source: ``Ascend/pytorch`` ``torch_npu/csrc/core/npu/NPUCachingAllocator.cpp``,
``struct ExpandableSegment``: one reservation of address space for 1 1/8 of the device's
memory (``aclrtReserveMemAddress``, flags 1), backed page by page (``segment_size``: 2 MiB in
the small pool, ``large_segment_size`` (20 MiB) in the large one, 1 GiB with
``page_size:1g``) by physical handles (``aclrtMallocPhysical`` with ``ACL_HBM_MEM_HUGE``,
``ACL_HBM_MEM_HUGE1G`` for 1 GiB pages, again with ``ACL_HBM_MEM_HUGE`` when that fails;
``aclrtMapMem``), unmapped and freed (``aclrtUnmapMem``, ``aclrtFreePhysical``) or kept in
the pool's ``free_physical_handles_`` for the next map.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any, TypeGuard, cast

from ..memory.constants import ErrorCode, LocationType, MemAttr
from ..memory.errors import AclError
from .blocks import Block, Pool
from .conf import K_LARGE_BUFFER, AllocatorConfig
from .rules import K_EXTRA_LARGE_BUFFER, K_SMALL_BUFFER, warn_page_1g_fallback
from .stats import RESERVED_BYTES, DeviceStats

__all__ = ["ExpandableSegment", "ExpandableBlocks"]


class ExpandableSegment:
    """A reserved range whose pages are mapped on demand; ``handles[i]`` backs page ``i``."""

    __slots__ = ("runtime", "device", "stream", "page", "ptr", "max_handles", "handles")

    def __init__(self, runtime: Any, device: int, stream: int, page: int) -> None:
        self.runtime, self.device, self.stream, self.page = runtime, device, stream, page
        _free, total = runtime.get_mem_info(MemAttr.HBM_MEM)
        # "max_handles_ = numSegments(device_total + device_total / 8)"
        self.max_handles = -(-(total + total // 8) // page)
        self.ptr = runtime.vmm.reserve_mem_address(page * self.max_handles, 0, 0, 1)
        self.handles: list[int | None] = []

    @property
    def size(self) -> int:
        return cast("int", self.page * self.max_handles)

    def _prop(self) -> dict[str, Any]:
        attr = int(MemAttr.HBM_MEM_HUGE1G if self.page == 1 << 30 else MemAttr.HBM_MEM_HUGE)
        return {"handleType": 0, "allocationType": 0, "memAttr": attr,
                "location": {"type": int(LocationType.DEVICE), "id": self.device},
                "reserve": 0}

    def _malloc_physical(self, page: int) -> int:
        """torch_npu's ``AclrtMallocPhysical`` wrapper (``interface/AclInterface.cpp``): a 1 GiB
        page that fails for any reason is asked for again, same size, with
        ``ACL_HBM_MEM_HUGE``, after torch_npu's warning."""
        vmm, prop = self.runtime.vmm, self._prop()
        if prop["memAttr"] != MemAttr.HBM_MEM_HUGE1G:
            return cast("int", vmm.malloc_physical(page, prop, 0))
        try:
            return cast("int", vmm.malloc_physical(page, prop, 0))
        except AclError:
            warn_page_1g_fallback()
        return cast("int", vmm.malloc_physical(page, {**prop, "memAttr": int(MemAttr.HBM_MEM_HUGE)},
                                               0))

    def map(self, ptr: int, size: int, free_handles: list[int]) -> tuple[int, int]:
        """ExpandableSegment::map: back the pages of ``[ptr, ptr + size)`` (``ptr`` on a page
        start); the mapped range, of size 0 when the device is out of memory."""
        page, vmm = self.page, self.runtime.vmm
        begin = (ptr - self.ptr) // page
        end = -(-(ptr + size - self.ptr) // page)
        if begin == end:
            return ptr, 0
        while len(self.handles) < end:
            self.handles.append(None)
        for i in range(begin, end):
            if free_handles:
                self.handles[i] = free_handles.pop()
                continue
            try:
                self.handles[i] = self._malloc_physical(page)
            except AclError as e:
                if e.code != ErrorCode.RT_MEMORY_ALLOCATION:
                    raise
                for j in range(begin, i):
                    vmm.free_physical(self.handles[j])
                    self.handles[j] = None
                self._trim()
                return ptr, 0
        for i in range(begin, end):
            vmm.map_mem(self.ptr + i * page, page, 0, self.handles[i], 0)
        return self.ptr + begin * page, (end - begin) * page

    def unmap(self, ptr: int, size: int,
              free_handles: list[int | None] | None) -> tuple[int, int]:
        """ExpandableSegment::unmap: unmap the pages wholly inside the range, after
        synchronising the device; their handles are freed, or kept in ``free_handles``."""
        page, vmm = self.page, self.runtime.vmm
        begin = -(-(ptr - self.ptr) // page)
        end = (ptr + size - self.ptr) // page
        if begin >= end:
            return ptr, 0
        self.runtime.synchronize_device()
        for i in range(begin, end):
            handle, self.handles[i] = self.handles[i], None
            vmm.unmap_mem(self.ptr + i * page)
            if free_handles is None:
                vmm.free_physical(handle)
            else:
                free_handles.append(handle)
        self._trim()
        return self.ptr + begin * page, (end - begin) * page

    def release(self) -> None:
        """The segment's address space goes back (aclrtReleaseMemAddress)."""
        self.runtime.vmm.release_mem_address(self.ptr)

    def _trim(self) -> None:
        while self.handles and self.handles[-1] is None:
            self.handles.pop()


class ExpandableBlocks:
    """The allocator's expandable-segment methods (a mixin of NpuCachingAllocator, called
    under its lock): find_expandable_block, map_block, try_allocate_expandable_block and
    unmap_block of the source. Blocks not backed by pages wait in ``pool.unmapped``."""

    # the allocator's (caching.py), which these methods use
    conf: AllocatorConfig
    page_1g: bool
    runtime: Any
    device: int
    _expandable: list[ExpandableSegment]
    total_allocated_memory: int
    stats: DeviceStats
    _history: deque[Any] | None
    if TYPE_CHECKING:
        @staticmethod
        def _try_merge(dst: Block, src: Block | None, pool: Pool) -> int: ...

        def _trace(self, action: str, addr: int, size: int, stream: int) -> None: ...

    def _find_expandable_block(self, pool: Pool, size: int, stream: int) -> Block:
        """find_expandable_block: the lowest unmapped block of the stream (with the free
        block before it) with room for ``size``, or a new segment's one unmapped block."""

        def allocatable(b: Block | None) -> TypeGuard[Block]:
            return (b is not None and not b.allocated and b.event_count == 0
                    and not b.stream_uses)

        def has_room(b: Block | None) -> bool:
            room = 0
            while room < size and allocatable(b):
                room += b.size
                b = b.next
            return room >= size

        for key in sorted(k for k in pool.unmapped if k[0] == stream):
            c = pool.unmapped[key]
            if allocatable(c.prev):
                c = c.prev
            if has_room(c):
                return c
        conf = self.conf
        if pool.small:
            page = K_SMALL_BUFFER
        elif self.page_1g:
            page = K_EXTRA_LARGE_BUFFER
        elif conf.large_segment_size != K_LARGE_BUFFER:
            # get_custom_expandable_segment_size: large_segment_size_mb, else segment_size_mb
            page = conf.large_segment_size
        else:
            page = conf.segment_size or K_LARGE_BUFFER
        segment = ExpandableSegment(self.runtime, self.device, stream, page)
        self._expandable.append(segment)
        candidate = Block(segment.ptr, segment.size, stream, pool)
        candidate.mapped, candidate.segment = False, segment
        pool.unmapped[(stream, candidate.ptr)] = candidate
        return candidate

    def _map_block(self, to_map: Block, size: int, pool: Pool) -> bool:
        """map_block: back the first ``size`` bytes of an unmapped block with pages."""
        start, mapped = to_map.segment.map(to_map.ptr, size, [])
        if mapped == 0:
            return False
        del pool.unmapped[(to_map.stream, to_map.ptr)]
        to_map.mapped = True
        if mapped < to_map.size:
            rest = Block(to_map.ptr + mapped, to_map.size - mapped, to_map.stream, pool)
            rest.mapped, rest.segment = False, to_map.segment
            rest.splice(to_map, to_map.next)
            pool.unmapped[(rest.stream, rest.ptr)] = rest
            to_map.size = mapped
        self._try_merge(to_map, to_map.prev, pool)
        self._try_merge(to_map, to_map.next, pool)
        pool.insert(to_map)
        self.total_allocated_memory += mapped
        self.stats.add(RESERVED_BYTES, pool.small, mapped)
        self.stats.num_device_alloc += 1
        if self._history is not None:
            self._trace("segment_map", start, mapped, to_map.stream)
        return True

    def _try_allocate_expandable_block(self, pool: Pool, size: int,
                                       stream: int) -> Block | None:
        """try_allocate_expandable_block: map pages until a free block of ``size`` exists."""
        candidate = self._find_expandable_block(pool, size, stream)
        if not candidate.mapped and not self._map_block(
                candidate, min(candidate.size, size), pool):
            return None
        while candidate.size < size:
            following = candidate.next
            if following is None:
                return None
            if not self._map_block(following, min(size - candidate.size, following.size),
                                   pool):
                return None
            candidate = following
        pool.erase(candidate)
        return candidate

    def _unmap_block(self, block: Block, pool: Pool) -> None:
        """unmap_block: unmap the whole pages of a free block (their handles freed: the
        source's emptyCache and retry pass free_physical), keeping the parts of pages
        around them as free mapped blocks; then release_expandable_segment when the whole
        segment is unmapped."""
        start, size = block.segment.unmap(block.ptr, block.size, None)
        if size == 0:
            return
        pool.erase(block)
        before = start - block.ptr
        if before > 0:
            head = Block(block.ptr, before, block.stream, pool)
            head.segment = block.segment
            head.splice(block.prev, block)
            pool.insert(head)
        after = block.size - before - size
        if after > 0:
            tail = Block(start + size, after, block.stream, pool)
            tail.segment = block.segment
            tail.splice(block, block.next)
            pool.insert(tail)
        block.ptr, block.size, block.mapped = start, size, False
        self._try_merge(block, block.prev, pool)
        self._try_merge(block, block.next, pool)
        pool.unmapped[(block.stream, block.ptr)] = block
        self.total_allocated_memory -= size
        self.stats.add(RESERVED_BYTES, pool.small, -size)
        self.stats.num_device_free += 1
        if self._history is not None:
            self._trace("segment_unmap", start, size, block.stream)
        if block.prev is None and block.next is None:
            # release_expandable_segment
            del pool.unmapped[(block.stream, block.ptr)]
            self._expandable.remove(block.segment)
            block.segment.release()
