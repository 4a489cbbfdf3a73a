"""The caching allocator's records: Block and BlockPool of ``Ascend/pytorch``
``torch_npu/csrc/core/npu/NPUCachingAllocator.cpp``."""

from __future__ import annotations

from typing import Any

from sortedcontainers import SortedList

__all__ = ["Block", "Pool", "PrivatePool", "size_key"]


class Block:
    """Block (the source): a piece of a segment, free or allocated, linked to its neighbours."""

    __slots__ = ("ptr", "size", "requested_size", "stream", "pool", "small", "allocated",
                 "prev", "next", "event_count", "stream_uses", "gc_count", "mapped", "segment")

    def __init__(self, ptr: int, size: int, stream: int, pool: Pool) -> None:
        self.ptr, self.size, self.stream = ptr, size, stream
        #: the pool it goes back to when free (a private pool's for a MemPool's block)
        self.pool, self.small = pool, pool.small
        self.requested_size = 0
        self.allocated = False
        self.prev: Block | None = None
        self.next: Block | None = None
        self.event_count = 0
        self.stream_uses: set[int] = set()
        self.gc_count = 0
        #: expandable segments only: whether pages back it, and its ExpandableSegment
        self.mapped = True
        self.segment: Any = None  # (expandable.py, which imports this module, makes them)

    def splice(self, before: Block | None, after: Block | None) -> None:
        """Block::splice: link this block between ``before`` and ``after``."""
        if before is not None:
            before.next = self
        self.prev = before
        if after is not None:
            after.prev = self
        self.next = after

    def is_split(self) -> bool:
        return self.prev is not None or self.next is not None


def size_key(stream: int, size: int, ptr: int = 0) -> int:
    """BlockComparatorSize's order as one int: stream, then size, then address (each size
    and address below 2**64), so the pool's SortedList compares plain ints."""
    return (stream << 128) | (size << 64) | ptr


class Pool:
    """BlockPool (the source): free blocks ordered as BlockComparatorSize (stream, size, ptr),
    keyed by :func:`size_key` (``key >> 128`` is the stream)."""

    __slots__ = ("small", "owner", "keys", "blocks", "unmapped")

    def __init__(self, small: bool, owner: PrivatePool | None = None) -> None:
        self.small = small
        #: the PrivatePool it belongs to (owner_PrivatePool), None for the device's own pools
        self.owner = owner
        self.keys: SortedList[Any] = SortedList()
        self.blocks: dict[int, Block] = {}
        #: unmapped blocks of expandable segments, by (stream, ptr) (BlockComparatorAddress)
        self.unmapped: dict[tuple[int, int], Block] = {}

    def insert(self, b: Block) -> None:
        """O(log n) for n free blocks in the pool."""
        key = (b.stream << 128) | (b.size << 64) | b.ptr
        self.keys.add(key)
        self.blocks[key] = b

    def erase(self, b: Block) -> None:
        """O(log n); nothing when ``b`` is not in the pool."""
        key = (b.stream << 128) | (b.size << 64) | b.ptr
        if self.blocks.pop(key, None) is not None:
            self.keys.remove(key)


class PrivatePool:
    """PrivatePool (the source): the small and large pools of one memory pool (a
    ``torch_npu.npu.MemPool``), with ``use_count`` (MemPools and ``use_mem_pool`` scopes using
    it) and ``malloc_count`` (its segments not yet freed). A pool whose use count reaches 0 is
    freeable: ``empty_cache`` frees its wholly free segments, and forgets it once none is left
    (release_cached_blocks)."""

    __slots__ = ("id", "use_count", "malloc_count", "small", "large", "use_on_oom", "no_split",
                 "custom")

    def __init__(self, pool_id: tuple[int, int], custom: bool = False) -> None:
        self.id = pool_id
        self.use_count = 1
        self.malloc_count = 0
        self.small, self.large = Pool(True, self), Pool(False, self)
        #: MemPool(use_on_oom=True): the last resort of an allocation outside it
        self.use_on_oom = False
        #: MemPool(no_split=True): its segments are never split (should_split)
        self.no_split = False
        #: segments come from a custom allocator (MemPool(allocator=...)), not aclrtMalloc
        self.custom = custom
