"""A small caching allocator in the style of torch_npu's, written against pyacl (``import acl``).

It runs unchanged on Ascend hardware and, after ``ascend_memsim.install_acl()`` (or under
``pytest --memsim-acl``), on the simulator. The shape follows torch_npu's
NPUCachingAllocator:

- request sizes are rounded up to 512 bytes;
- requests up to 1 MiB come from the *small* pool, carved out of 2 MiB segments; larger ones
  from the *large* pool: 20 MiB segments below 10 MiB, else the size rounded up to 2 MiB;
- segments come from ``acl.rt.malloc_align32`` (no hidden +32 padding, so a 2 MiB segment
  costs exactly one huge page);
- a block is split when the rest is worth keeping (>= 512 bytes in the small pool,
  > 1 MiB in the large pool); freed blocks go back to their pool, merged with free neighbours;
- when the device is out of memory, the cache is emptied and the segment allocation retried;
- ``empty_cache()`` returns every wholly free segment to the device.

:class:`BuggyCachingAllocator` has a one-line bug in ``empty_cache``; the tests show the
state machine in ``ascend_memsim.testing.machine`` finding it. The tests are in
``tests/test_example_caching_allocator.py``; ``python examples/caching_allocator.py`` runs a
short demonstration.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

try:
    import acl
except ModuleNotFoundError:  # no Ascend toolkit on this machine: run on the simulator
    from ascend_memsim import install_acl

    install_acl()
    import acl

ACL_SUCCESS = 0
ACL_MEM_MALLOC_HUGE_FIRST = 0

MiB = 1 << 20
K_MIN_BLOCK_SIZE = 512
K_SMALL_SIZE = 1 * MiB
K_SMALL_BUFFER = 2 * MiB
K_LARGE_BUFFER = 20 * MiB
K_MIN_LARGE_ALLOC = 10 * MiB
K_ROUND_LARGE = 2 * MiB


class NPUOutOfMemoryError(RuntimeError):
    """The device cannot provide a segment, even after the cache was emptied."""


def round_size(size: int) -> int:
    """Request sizes in units of 512 bytes (at least 512)."""
    return max(K_MIN_BLOCK_SIZE, -(-size // K_MIN_BLOCK_SIZE) * K_MIN_BLOCK_SIZE)


def allocation_size(size: int) -> int:
    """The segment size a request of ``size`` (already rounded) needs."""
    if size <= K_SMALL_SIZE:
        return K_SMALL_BUFFER
    if size < K_MIN_LARGE_ALLOC:
        return K_LARGE_BUFFER
    return -(-size // K_ROUND_LARGE) * K_ROUND_LARGE


@dataclass(eq=False)
class Block:
    """A piece of a segment, free or handed out; neighbours in the segment are linked."""

    ptr: int
    size: int
    small: bool
    allocated: bool = False
    prev: Block | None = None
    next: Block | None = None


class CachingAllocator:
    """Hands out device memory from cached segments; see the module docstring."""

    def __init__(self) -> None:
        # Free blocks per pool, as sorted (size, ptr) keys for best fit, and by ptr.
        self._free_keys: dict[bool, list[tuple[int, int]]] = {True: [], False: []}
        self._free: dict[int, Block] = {}
        self._active: dict[int, Block] = {}
        self._segments: dict[int, int] = {}

    # -- public ---------------------------------------------------------------------------

    def malloc(self, size: int) -> int:
        """A device pointer to at least ``size`` bytes.

        Raises:
            NPUOutOfMemoryError: no cached block fits and the device has no segment left.
        """
        size = round_size(size)
        small = size <= K_SMALL_SIZE
        block = self._take_free(small, size)
        if block is None:
            block = self._new_segment(small, allocation_size(size))
        if self._should_split(block, size):
            rest = Block(block.ptr + size, block.size - size, small, prev=block, next=block.next)
            if block.next is not None:
                block.next.prev = rest
            block.next = rest
            block.size = size
            self._put_free(rest)
        block.allocated = True
        self._active[block.ptr] = block
        return block.ptr

    def free(self, ptr: int) -> None:
        """Give the block at ``ptr`` back to its pool, merged with free neighbours."""
        block = self._active.pop(ptr, None)
        if block is None:
            raise ValueError(f"{ptr:#x} was not handed out by this allocator")
        block.allocated = False
        for neighbour in (block.prev, block.next):
            if neighbour is not None and not neighbour.allocated:
                self._take(neighbour)
                block = self._merge(block, neighbour)
        self._put_free(block)

    def empty_cache(self) -> None:
        """Return every wholly free segment to the device."""
        for block in [b for b in self._free.values() if self._releasable(b)]:
            self._take(block)
            del self._segments[block.ptr]
            ret = acl.rt.free(block.ptr)
            if ret != ACL_SUCCESS:
                raise RuntimeError(f"aclrtFree({block.ptr:#x}) failed with {ret}")

    @property
    def allocated_bytes(self) -> int:
        return sum(b.size for b in self._active.values())

    @property
    def reserved_bytes(self) -> int:
        return sum(self._segments.values())

    def extents(self) -> list[tuple[int, int]]:
        """(ptr, size) of every block handed out and not yet freed."""
        return [(b.ptr, b.size) for b in self._active.values()]

    # -- internals ------------------------------------------------------------------------

    def _releasable(self, block: Block) -> bool:
        # A segment is wholly free when its free block has no neighbours.
        return block.prev is None and block.next is None

    def _should_split(self, block: Block, size: int) -> bool:
        remaining = block.size - size
        return remaining >= K_MIN_BLOCK_SIZE if block.small else remaining > K_SMALL_SIZE

    def _new_segment(self, small: bool, size: int) -> Block:
        for attempt in range(2):
            ptr, ret = acl.rt.malloc_align32(size, ACL_MEM_MALLOC_HUGE_FIRST)
            if ret == ACL_SUCCESS:
                self._segments[ptr] = size
                return Block(ptr, size, small)
            if attempt == 0:
                self.empty_cache()
        raise NPUOutOfMemoryError(f"cannot allocate a {size}-byte segment (aclError {ret}); "
                                  f"{self.allocated_bytes} bytes allocated, "
                                  f"{self.reserved_bytes} reserved")

    def _take_free(self, small: bool, size: int) -> Block | None:
        keys = self._free_keys[small]
        i = bisect.bisect_left(keys, (size, 0))
        if i == len(keys):
            return None
        return self._take(self._free[keys[i][1]])

    def _take(self, block: Block) -> Block:
        keys = self._free_keys[block.small]
        del keys[bisect.bisect_left(keys, (block.size, block.ptr))]
        del self._free[block.ptr]
        return block

    def _put_free(self, block: Block) -> None:
        bisect.insort(self._free_keys[block.small], (block.size, block.ptr))
        self._free[block.ptr] = block

    @staticmethod
    def _merge(block: Block, neighbour: Block) -> Block:
        first, second = (neighbour, block) if neighbour.ptr < block.ptr else (block, neighbour)
        first.size += second.size
        first.next = second.next
        if second.next is not None:
            second.next.prev = first
        return first


class BuggyCachingAllocator(CachingAllocator):
    """The same allocator with a plausible slip: a segment counts as free when its *first*
    block is free, so empty_cache returns segments whose later blocks are still in use."""

    def _releasable(self, block: Block) -> bool:
        return block.prev is None


def attention_step(cache: CachingAllocator, tokens: int) -> None:
    """User code with an error-path leak: if the second buffer cannot be had, the first one
    is never freed (exhaustive fault injection finds this)."""
    query = cache.malloc(tokens * 4096)
    key = cache.malloc(tokens * 4096)
    cache.free(key)
    cache.free(query)


def attention_step_fixed(cache: CachingAllocator, tokens: int) -> None:
    """The same step, freeing what it has on every path."""
    query = cache.malloc(tokens * 4096)
    try:
        key = cache.malloc(tokens * 4096)
        cache.free(key)
    finally:
        cache.free(query)


if __name__ == "__main__":
    assert acl.init() == 0 and acl.rt.set_device(0) == 0
    cache = CachingAllocator()
    small = cache.malloc(1000)            # 1024 bytes from a 2 MiB small segment
    large = cache.malloc(3 * 1024 * 1024)  # from a 20 MiB large segment
    print(f"allocated {cache.allocated_bytes} bytes, reserved {cache.reserved_bytes} "
          f"from the device")
    cache.free(small)
    cache.free(large)
    print(f"after free: allocated {cache.allocated_bytes}, still reserved "
          f"{cache.reserved_bytes} (cached)")
    cache.empty_cache()
    print(f"after empty_cache: reserved {cache.reserved_bytes}")
    assert acl.rt.reset_device(0) == 0 and acl.finalize() == 0
