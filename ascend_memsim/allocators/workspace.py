"""torch_npu's workspace allocator: the scratch memory operators get on their stream.

Source: ``Ascend/pytorch`` ``torch_npu/csrc/core/npu/NPUWorkspaceAllocator.cpp`` ("the
source" below): ``DeviceWorkspaceAllocator`` keeps one block per stream, grown (freed and
taken again, bigger) when a request does not fit; each block comes from
``aclrtMallocAlign32`` with ``ACL_MEM_MALLOC_HUGE_ONLY``, ``size + 32`` rounded up to 2 MiB
(``kRoundLarge``). It records no trace entries: a snapshot shows each block it holds as a
segment, and, with history on, as ``workspace_snapshot``, ``segment_alloc`` and ``alloc``
entries at the start of the device's trace (``get_trace``, ``get_segm``;
``csrc/npu/Module.cpp`` memorySnapshot puts them first). A free gives nothing back: the block
stays cached for the stream until the cache is emptied (``empty_cache``), which the caching
allocator does in its ``emptyCache`` and in its out-of-memory retry
(``NPUCachingAllocator.cpp`` ``malloc``: "Free all non-split cached blocks and retry alloc."
calls ``NPUWorkspaceAllocator::emptyCache``).

>>> from ascend_memsim import Runtime, MiB
>>> from ascend_memsim.allocators import NpuCachingAllocator
>>> with Runtime("A2", hbm_bytes=256 * MiB) as rt:
...     ws = NpuCachingAllocator(rt).workspace
...     ptr = ws.malloc(3 * MiB)         # 3 MiB + 32 -> a 4 MiB block, huge pages only
...     ws.free(ptr)
...     again = ws.malloc(1 * MiB)       # fits: the same block
...     _ = ws.malloc(5 * MiB)           # does not: freed, a 6 MiB block taken
...     ws.block_size(0) // MiB, again == ptr, ws.memory_stats()["reserved_bytes.current"] // MiB
(6, True, 6)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..memory.constants import ErrorCode, MallocPolicy, MemAttr
from ..memory.errors import AclError, InvalidArgument, InvalidArgumentType
from .conf import SIZE_MAX
from .stats import Stat, format_size

if TYPE_CHECKING:
    from ..memory.errors import NpuOutOfMemoryError

__all__ = ["NpuWorkspaceAllocator", "K_ROUND_LARGE_WORKSPACE", "workspace_block_size"]

#: kRoundLarge (the source): workspace blocks are multiples of 2 MiB
K_ROUND_LARGE_WORKSPACE = 2 * 1024 * 1024


def workspace_block_size(size: int) -> int:
    """DeviceWorkspaceAllocator::malloc's block for a request of ``size`` bytes: ``size``
    + 32, rounded up to 2 MiB.

    >>> workspace_block_size(1), workspace_block_size(2 * 1024 * 1024 - 32) // 1024
    (2097152, 2048)
    """
    step = K_ROUND_LARGE_WORKSPACE
    return -(-(size + 32) // step) * step


class _WorkspaceBlock:
    """WorkspaceBlock (the source): the stream's block; ``ptr`` 0 when none is held."""

    __slots__ = ("ptr", "size", "requested_size")

    def __init__(self) -> None:
        self.ptr = self.size = self.requested_size = 0


class NpuWorkspaceAllocator:
    """torch_npu's NpuWorkspaceAllocator for one device, paired with the
    :class:`~ascend_memsim.allocators.NpuCachingAllocator` that owns it (its ``workspace``;
    one lock for both, as each calls into the other).

    ``retry_on_oom``: torch_npu up to v2.1.0-7.1.0 (``NpuWorkspaceAllocator::malloc``),
    when the device has no room, empties this cache and the caching allocator's and tries
    again; from the 2025-08 change "Fix hang on bug while tq=2" (master, v26.0.0) it raises
    at once. Default False (the current source).
    """

    def __init__(self, owner: Any, *, retry_on_oom: bool = False) -> None:
        self.owner, self.runtime, self.device = owner, owner.runtime, owner.device
        self.retry_on_oom = retry_on_oom
        self._lock = owner._lock
        self._blocks: dict[int, _WorkspaceBlock] = {}
        #: allocated_ptrs (the source): pointers handed out, for free
        self._ptrs: set[int] = set()
        #: allocated_size (the source): the last block handed out (free uncounts it)
        self._allocated_size = 0
        #: DeviceStats of NPUWorkspaceAllocator.h: allocated_bytes and reserved_bytes
        self.allocated_bytes, self.reserved_bytes = Stat(), Stat()

    def malloc(self, size: object, stream: int = 0) -> int:
        """allocate_with_stream (the source): the stream's block, grown if ``size`` + 32
        does not fit (the old block freed after a device synchronisation, a new one of
        :func:`workspace_block_size` taken with ``aclrtMallocAlign32`` HUGE_ONLY); 0 for
        size 0. O(1) plus the runtime's calls.

        Raises:
            NpuOutOfMemoryError: no room for the block ("NPU out of memory.
                NPUWorkspaceAllocator tried to allocate ...").
            InvalidArgument, InvalidArgumentType: a size or stream that is not a
                non-negative int.
        """
        if size.__class__ is not int:
            raise InvalidArgumentType(f"size must be an int, not {type(size).__name__}")
        if not 0 <= size <= SIZE_MAX - K_ROUND_LARGE_WORKSPACE:
            raise InvalidArgument(f"size {size} is out of range")
        if stream.__class__ is not int or stream < 0:
            raise InvalidArgumentType(f"stream must be a stream handle (int), not {stream!r}")
        if size == 0:
            return 0
        with self._lock:
            self.owner._ensure_device()
            src = self._blocks.get(stream)
            src_ptr = src.ptr if src is not None else 0
            ptr = self._malloc(size, stream)
            if ptr is None and self.retry_on_oom:
                # "Free all cached blocks and try again." (v2.1.0-6.0.0 to 7.1.0)
                self._empty_cache()
                self.owner._empty_cache()
                ptr = self._malloc(size, stream)
            if ptr is None:
                free, total = self.runtime.get_mem_info(MemAttr.HBM_MEM)
                raise _out_of_memory(size, self.device, total, free)
            if ptr != src_ptr:
                # replace_allocated_ptr (the source): the stream's old pointer is forgotten
                self._ptrs.discard(src_ptr)
                self._ptrs.add(ptr)
            return ptr

    def _malloc(self, size: int, stream: int) -> int | None:
        """DeviceWorkspaceAllocator::malloc (the source); None when the device refuses."""
        block = self._blocks.get(stream)
        if block is None:
            block = self._blocks[stream] = _WorkspaceBlock()
        alloc_size = size + 32
        if block.size < alloc_size:
            if block.ptr:
                self.runtime.synchronize_device()
                self.runtime.free(block.ptr)
                self.reserved_bytes.update(-block.size)
                block.ptr = 0
            # as the source, the block keeps its new size even when the call below fails
            block.size = workspace_block_size(size)
            try:
                block.ptr = self.runtime.malloc_align32(block.size, MallocPolicy.HUGE_ONLY)
            except AclError as e:
                if e.code == ErrorCode.RT_MEMORY_ALLOCATION:
                    return None
                raise
            block.requested_size = size
            self.reserved_bytes.update(block.size)
        elif not block.ptr:
            # a block whose growth failed and was not emptied since: the source returns its
            # null pointer, which NpuWorkspaceAllocator::malloc reports as out of memory
            return None
        self._allocated_size = block.size
        self.allocated_bytes.update(block.size)
        return block.ptr

    def free(self, ptr: object) -> None:
        """local_raw_delete (the source): uncount the last block handed out; the block
        stays cached. A pointer it never handed out (and 0) is ignored, as the source's
        ``get_allocated_device`` returns -1 for it."""
        with self._lock:
            if ptr.__class__ is int and ptr in self._ptrs:
                self.allocated_bytes.update(-self._allocated_size)

    def empty_cache(self) -> None:
        """emptyCache (the source): synchronise the device, free every block."""
        with self._lock:
            self.owner._ensure_device()
            self.runtime.synchronize_device()
            self._empty_cache()

    def _empty_cache(self) -> None:
        for block in self._blocks.values():
            if block.ptr:
                self.runtime.free(block.ptr)
                self.reserved_bytes.update(-block.size)
        self._blocks.clear()
        self._ptrs.clear()

    def block_size(self, stream: int = 0) -> int:
        """The size of ``stream``'s cached block (0 when it has none)."""
        with self._lock:
            block = self._blocks.get(stream)
            return block.size if block is not None and block.ptr else 0

    def blocks(self) -> list[tuple[int, int, int, int]]:
        """(ptr, size, requested_size, stream) of every block held, by stream."""
        with self._lock:
            return [(b.ptr, b.size, b.requested_size, s) for s, b in sorted(self._blocks.items())
                    if b.ptr]

    def memory_stats(self) -> dict[str, int]:
        """NPUWorkspaceAllocator::getDeviceStats as flat keys (``allocated_bytes.current``,
        ..., ``reserved_bytes.freed``). torch_npu keeps these in C++ only: its
        ``memory_stats()`` reports the caching allocator's."""
        with self._lock:
            out = {}
            for name, stat in (("allocated_bytes", self.allocated_bytes),
                               ("reserved_bytes", self.reserved_bytes)):
                out.update({f"{name}.{k}": v for k, v in stat.as_dict().items()})
            return out


def _out_of_memory(size: int, device: int, total: int, free: int) -> NpuOutOfMemoryError:
    from ..memory.errors import NpuOutOfMemoryError

    # NpuWorkspaceAllocator::malloc (the source, master); no space before "(NPU", as there
    message = (f"NPU out of memory. NPUWorkspaceAllocator tried to allocate "
               f"{format_size(size)}(NPU {device}; {format_size(total)} total capacity; "
               f"{format_size(free)} free). If you want to reduce memory usage, take a try to "
               "set the environment variable TASK_QUEUE_ENABLE=1.")
    return NpuOutOfMemoryError(message, tried=size, device=device, total_capacity=total,
                               free=free)
