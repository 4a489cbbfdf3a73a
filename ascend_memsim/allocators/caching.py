"""torch_npu's caching allocator (NPUCachingAllocator) over a simulated runtime.

Every rule cites ``Ascend/pytorch`` ``torch_npu/csrc/core/npu/NPUCachingAllocator.cpp`` (named
"the source" below) by function; upstream ``pytorch/pytorch``
``c10/cuda/CUDACachingAllocator.cpp`` has the same shape. Segments come from the runtime
through the call torch_npu makes, ``aclrtMallocAlign32`` with ``ACL_MEM_MALLOC_HUGE_FIRST``
(``alloc_block``; ``HUGE1G_ONLY`` with ``page_size:1g``, asked again with ``HUGE_FIRST``
after a warning when it fails, as torch_npu's wrapper does), go back with ``aclrtFree``
(``release_block``), so the simulated device's rules (32-byte rounding, huge pages, the
fallback to normal pages, fragmentation) apply underneath.

>>> from ascend_memsim import Runtime, MiB
>>> with Runtime("A2", hbm_bytes=256 * MiB) as rt:
...     alloc = NpuCachingAllocator(rt)
...     ptr = alloc.malloc(1 * MiB)
...     alloc.block_size(ptr), alloc.memory_stats()["reserved_bytes.all.current"] // MiB
(1049088, 20)

Expandable segments (``expandable_segments:True``) map whole pages of a reserved range through
``Runtime.vmm`` (:mod:`.expandable`). Memory pools (``torch_npu.npu.MemPool``,
``use_mem_pool``) are the source's private pools: :meth:`NpuCachingAllocator.create_pool`.
Not modelled: graph capture's pools (capture is refused), IPC. Free-memory
callbacks and out-of-memory observers: :mod:`.callbacks`. The workspace allocator
(:mod:`.workspace`) is the allocator's ``workspace``.

Size: past 600 lines because its one class is the source's DeviceCachingAllocator, function
by function (see the class's own Size note); every other part is a module of its own.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any, cast

from ..memory.constants import ErrorCode, MallocPolicy, MemAttr
from ..memory.errors import AclError, InvalidArgument, InvalidArgumentType, NpuOutOfMemoryError
from .blocks import Block, Pool, PrivatePool, size_key
from .callbacks import AllocatorCallbacks
from .conf import SIZE_MAX, AllocatorConfig, parse_alloc_conf
from .events import StreamEvents
from .expandable import ExpandableBlocks
from .releases import NEWEST, TorchNpuRelease
from .rules import (
    DEFAULT_CANN,
    K_EXTRA_LARGE_BUFFER,
    K_MIN_BLOCK_SIZE,
    K_ROUND_LARGE,
    K_SMALL_SIZE,
    PAGE_1G_CANN,
    add_pad_size,
    allocation_size,
    cann_tuple,
    round_size,
    warn_page_1g_fallback,
)
from .stats import (
    ACTIVE_BYTES,
    ALLOCATED_BYTES,
    INACTIVE_SPLIT,
    INACTIVE_SPLIT_BYTES,
    RESERVED_BYTES,
    SEGMENT,
    DeviceStats,
    out_of_memory,
)
from .views import SnapshotViews
from .workspace import NpuWorkspaceAllocator

__all__ = ["NpuCachingAllocator"]


def _malloc_align32_1g(runtime: Any, size: int) -> int:
    """torch_npu's ``c10_npu::acl::AclrtMallocAlign32`` wrapper (``AclInterface.cpp``) with
    ``ACL_MEM_MALLOC_HUGE1G_ONLY``: after any failure (1 GiB pages used up, or a part without
    them) it warns and asks again, same size, with ``ACL_MEM_MALLOC_HUGE_FIRST``.

    Raises:
        AclError: the second call's error.
    """
    try:
        return cast("int", runtime.malloc_align32(size, MallocPolicy.HUGE1G_ONLY))
    except AclError:
        warn_page_1g_fallback()
    return cast("int", runtime.malloc_align32(size, MallocPolicy.HUGE_FIRST))


class NpuCachingAllocator(SnapshotViews, ExpandableBlocks, AllocatorCallbacks, StreamEvents):
    """torch_npu's DeviceCachingAllocator for one device of a simulated runtime.

    ``conf`` is a ``PYTORCH_NPU_ALLOC_CONF`` string or an :class:`AllocatorConfig`;
    ``cann`` is the CANN version the +32 pad and 1 GiB pages depend on (default 9.1.0);
    ``torch_npu`` is the release whose behaviours apply (:mod:`.releases`: the settings it
    knows, what ``set_memory_fraction(1.0)`` does; the newest by default);
    ``workspace_retry_on_oom`` picks the older workspace allocator's retry (see
    :class:`~.workspace.NpuWorkspaceAllocator`, reached as :attr:`workspace`).
    The constructor makes ``device`` current on the calling thread (torch_npu's device
    guard); segment calls go to the runtime's current device. Thread-safe (one lock, as
    the source's recursive mutex).

    Size: about 500 lines, on purpose: it is the source's DeviceCachingAllocator function by
    function (malloc, free, get_free_block, alloc_block, the release and garbage-collection
    passes), which read and change the same pools, statistics and lock, so a reader can hold
    each method against the function it cites. What has a seam of its own is apart: the
    rules and sizes (:mod:`.rules`), blocks and pools (:mod:`.blocks`), the config
    (:mod:`.conf`), stream events, expandable segments, callbacks and the snapshot views
    (the base classes), the statistics (:mod:`.stats`) and the workspace allocator.

    Raises:
        AllocatorConfigError: ``conf`` torch_npu refuses.
        InvalidArgument: ``cann`` is not a CANN version ("8.1.RC1", "9.1.0").
    """

    def __init__(self, runtime: Any, device: int = 0, conf: object = "", *,
                 cann: str = DEFAULT_CANN, workspace_retry_on_oom: bool = False,
                 torch_npu: TorchNpuRelease = NEWEST) -> None:
        self.release = torch_npu
        parsed = conf if isinstance(conf, AllocatorConfig) else parse_alloc_conf(conf, torch_npu)
        cann_tuple(cann)  # a CANN version or InvalidArgument, before anything changes
        self.runtime, self.device, self.cann = runtime, device, cann
        runtime.set_device(device)
        self.pad = add_pad_size(runtime.profile.soc_name, cann)
        self._small, self._large = Pool(True), Pool(False)
        #: the private pools (graph_pools), by MemPool id; a freeable one has use_count 0
        self._pools: dict[tuple[int, int], PrivatePool] = {}
        #: allocation_scopes_: (pool id, thread ident) routing that thread's allocations
        self._scopes: list[tuple[tuple[int, int], int]] = []
        #: pools whose MemPool is gone (drop_pool), released at the allocator's next call
        self._dropped: list[tuple[int, int]] = []
        self._active: dict[int, Block] = {}
        #: the ExpandableSegments (expandable_segments:True)
        self._expandable: list[Any] = []
        #: events recorded for blocks freed while other streams used them (insert_events)
        self._events: dict[int, list[tuple[int, Block]]] = {}
        self.total_allocated_memory = 0
        self.allowed_memory_maximum: int | None = None
        self._lock = threading.RLock()
        self._next_pool_uid = 1  # MemPool.cpp's uid_, from 1
        #: device_traces entries when record_history is on (None: off, torch_npu's default)
        self._history: deque[Any] | None = None
        #: torch_npu's workspace allocator for this device (NPUWorkspaceAllocator.cpp)
        self.workspace = NpuWorkspaceAllocator(self, retry_on_oom=workspace_retry_on_oom)
        self._free_memory_callbacks: list[Any] = []
        self._oom_observers: list[Any] = []
        self._apply_conf(parsed)

    def _apply_conf(self, conf: AllocatorConfig) -> None:
        """What the settings decide, from the constructor (or :meth:`configure`)."""
        self.conf = conf
        # IsMallocPage1GMem (the source): page_size:1g needs CANN >= 8.1.RC1
        self.page_1g = conf.page_size_1g and cann_tuple(self.cann) >= PAGE_1G_CANN
        self._plain_rounding = not any(conf.roundup_power2_divisions)
        self.stats = DeviceStats(conf.max_split_size)
        # DeviceCachingAllocator's constructor: setMemoryFraction(per_process_memory_fraction)
        # (from 2.10; before, no cap until the script sets one)
        if not self.release.caps_at_one:
            self.set_memory_fraction(conf.per_process_memory_fraction)

    def configure(self, conf: object) -> None:
        """Take ``conf`` (``PYTORCH_NPU_ALLOC_CONF``'s text) in place of the constructor's,
        as torch_npu takes the settings it reads when the allocator is first used: only
        while nothing was ever allocated (the statistics start afresh).

        Raises:
            AllocatorConfigError: ``conf`` torch_npu refuses (nothing changes).
            RuntimeError: something was allocated already.
        """
        parsed = (conf if isinstance(conf, AllocatorConfig)
                  else parse_alloc_conf(conf, self.release))
        with self._lock:
            if self._active or self.total_allocated_memory or self.stats.num_device_alloc:
                raise RuntimeError("the allocator's settings are read at its first use: "
                                   "something was allocated already")
            self._apply_conf(parsed)

    # -- public ---------------------------------------------------------------------------------

    def malloc(self, size: object, stream: int = 0) -> int:
        """A block of at least ``size`` bytes on ``stream``: its address (0 for size 0, as
        torch_npu's allocate hands out no memory for an empty tensor).

        O(log n) for n free blocks cached in the pool (best fit is a ``SortedList`` bisect
        over plain-int keys, then an erase and, on a split, an insert), plus O(1) statistics
        (ints in a list, :class:`~.stats.DeviceStats`); a cache miss adds the runtime's
        ``aclrtMallocAlign32`` (see ``memory/allocator.py``). The retry chain (releasing
        cached segments), garbage collection (``garbage_collection_threshold`` with a memory
        fraction) and expandable segments' best fit are O(n).

        Raises:
            NpuOutOfMemoryError: no block, even after the retry chain (source ``malloc``).
            InvalidArgument, InvalidArgumentType: a size that is not a non-negative int.
        """
        if size.__class__ is not int:
            raise InvalidArgumentType(f"size must be an int, not {type(size).__name__}")
        if not 0 <= size <= SIZE_MAX:
            raise InvalidArgument(f"size {size} is out of range")
        if stream.__class__ is not int or stream < 0:
            raise InvalidArgumentType(f"stream must be a stream handle (int), not {stream!r}")
        if size == 0:
            return 0
        with self._lock:
            if self._dropped:
                self._drain_dropped()
            self._ensure_device()
            return self._malloc(size, stream).ptr

    def _ensure_device(self) -> None:
        # torch_npu sets the allocator's device on the calling thread before its aclrt calls
        # (c10_npu::SetDevice in malloc / emptyCache), so any thread may allocate
        current = self.runtime.current_device_or_none()
        if current is None or current.device_id != self.device:
            self.runtime.set_device(self.device)

    def free(self, ptr: object) -> None:
        """Give a block back to its pool (or, if other streams used it, once their events
        complete). ``free(0)`` does nothing.

        O(log n) for n free blocks cached in the pool (a dict pop, merges with at most two
        free neighbours, one ``SortedList`` insert), plus O(1) statistics; a block other
        streams used adds one event per stream. Never calls the runtime's ``aclrtFree``
        (segments go back only in ``empty_cache`` and the retry chain).

        Raises:
            InvalidPointer-like InvalidArgument: not a block this allocator handed out
            ("invalid device pointer", the source's NpuCachingAllocator::free).
        """
        if ptr == 0 or ptr is None:
            return
        with self._lock:
            block = self._active.pop(ptr, None) if ptr.__class__ is int else None
            if block is None:
                raise InvalidArgument(f"invalid device pointer: {ptr!r}")
            if block.stream_uses:
                self._ensure_device()
            self._free(block)

    def record_stream(self, ptr: int, stream: int) -> None:
        """recordStream (the source): ``stream`` also uses the block; freeing it waits for
        the work queued on ``stream`` until then (an event recorded there at free)."""
        with self._lock:
            block = self._active.get(ptr) if ptr.__class__ is int else None
            if block is None:
                raise InvalidArgument(f"No allocated block can be found: {ptr!r}")
            # checked now, so that the free that records the event cannot fail half-way
            self.runtime.streams.stream(stream)
            block.stream_uses.add(stream)

    def erase_stream(self, ptr: int, stream: int, current: int | None = None) -> None:
        """eraseStream (the source): undo :meth:`record_stream`, so freeing the block no
        longer waits for ``stream``. The allocator-wide wrapper's rule comes first: a block
        allocated on a stream other than ``current`` (the device's current stream, when
        given) keeps its uses. O(1).

        Raises:
            InvalidArgument: not a block this allocator handed out ("invalid device pointer").
        """
        with self._lock:
            block = self._active.get(ptr) if ptr.__class__ is int else None
            if block is None:
                raise InvalidArgument(f"invalid device pointer: {ptr!r}")
            if current is not None and block.stream != current:
                return
            block.stream_uses.discard(stream)

    def empty_cache(self, pool_id: tuple[int, int] | None = None) -> None:
        """emptyCache (the source): synchronise the device, empty the workspace allocator's
        cache (``NPUWorkspaceAllocator::emptyCache``), then free every wholly free segment
        (release_cached_blocks), a freeable private pool's too. With ``pool_id`` (a
        MemPool's ``emptyCache(mempool_id)``), only that pool's, and only once it is
        freeable (its use count 0)."""
        with self._lock:
            self._ensure_device()
            if self._dropped:
                self._drain_dropped()
            if pool_id is None:
                self._empty_cache()
            else:
                self.runtime.synchronize_device()
                self._release_cached_blocks(pool_id)

    # -- memory pools (the source's PrivatePool; torch_npu.npu.MemPool, use_mem_pool) --------

    def create_pool(self, *, use_on_oom: bool = False, no_split: bool = False,
                    custom: bool = False) -> tuple[int, int]:
        """A new private pool with use count 1, as ``MemPool()`` makes one
        (``MemPool.cpp``: the id ``{0, uid_++}`` of a user-created pool, then
        createOrIncrefPool, setUseOnOOM, setNoSplit): its id."""
        with self._lock:
            pool_id = (0, self._next_pool_uid)
            self._next_pool_uid += 1
            private = self._pools[pool_id] = PrivatePool(pool_id, custom)
            private.use_on_oom, private.no_split = use_on_oom, no_split
            return pool_id

    def _private(self, pool_id: object) -> PrivatePool:
        private = self._pools.get(pool_id) if isinstance(pool_id, tuple) else None
        if private is None:
            raise InvalidArgument(f"Could not find pool of id {pool_id!r}")
        return private

    def begin_allocate_to_pool(self, pool_id: tuple[int, int],
                               thread: int | None = None) -> None:
        """beginAllocateToPool with the filter of ``_npu_beginAllocateCurrentThreadToPool``
        (``csrc/npu/Module.cpp``): allocations of ``thread`` (the caller's by default) go to
        the pool until :meth:`end_allocate_to_pool`; the pool's use count goes up by one.

        Raises:
            InvalidArgument: no such pool, or allocations already go to it.
        """
        with self._lock:
            private = self._private(pool_id)
            if any(pid == pool_id for pid, _ in self._scopes):
                raise InvalidArgument(
                    f"beginAllocateToPool: already recording to mempool_id {pool_id}")
            private.use_count += 1
            self._scopes.append((pool_id, threading.get_ident() if thread is None else thread))

    def end_allocate_to_pool(self, pool_id: tuple[int, int]) -> None:
        """endAllocateToPool: allocations no longer go to the pool (its use count is left to
        :meth:`release_pool`, as the source leaves it)."""
        with self._lock:
            self._scopes = [(pid, t) for pid, t in self._scopes if pid != pool_id]

    def release_pool(self, pool_id: tuple[int, int]) -> None:
        """releasePool: one use fewer; at 0 the pool is freeable (``empty_cache`` frees its
        wholly free segments).

        Raises:
            InvalidArgument: no such pool, or its use count is 0 already.
        """
        with self._lock:
            private = self._private(pool_id)
            if private.use_count == 0:
                raise InvalidArgument(f"mempool_id {pool_id} was released already")
            private.use_count -= 1

    def set_use_on_oom(self, pool_id: tuple[int, int], use_on_oom: bool) -> None:
        """setUseOnOOM: whether the pool is an allocation's last resort (a MemPool's
        destructor turns it off)."""
        with self._lock:
            self._private(pool_id).use_on_oom = use_on_oom

    def drop_pool(self, pool_id: tuple[int, int]) -> None:
        """~MemPool (``MemPool.cpp``: setUseOnOOM(false), releasePool, emptyCache(id)), as a
        MemPool's finalizer calls it: noted here and done at the allocator's next malloc,
        ``empty_cache`` or statistics. DECISION: deferred, because Python's collector may run
        a finalizer in the middle of this allocator's own work (under its re-entrant lock),
        where the source's C++ destructor never interrupts it. O(1)."""
        self._dropped.append(pool_id)

    def _drain_dropped(self) -> None:
        while self._dropped:
            pool_id = self._dropped.pop()
            private = self._pools.get(pool_id)
            if private is None or private.use_count == 0:
                continue
            private.use_on_oom = False
            private.use_count -= 1
            self.runtime.synchronize_device()
            self._release_cached_blocks(pool_id)

    def pool_use_count(self, pool_id: tuple[int, int]) -> int:
        """getPoolUseCount: the MemPools and scopes using the pool."""
        with self._lock:
            return self._private(pool_id).use_count

    def _get_pool(self, small: bool) -> Pool:
        """get_pool (the source): the private pool of the newest scope routing the calling
        thread, else the device's own. O(s) for s scopes open (usually none)."""
        thread = threading.get_ident()
        for pool_id, scope_thread in reversed(self._scopes):
            if scope_thread == thread:
                private = self._pools[pool_id]
                return private.small if small else private.large
        return self._small if small else self._large

    def _mempool_fallback(self, pool: Pool, size: int, stream: int) -> Block | None:
        """try_mempool_fallback (the source): for an allocation outside any pool that found
        no memory, a cached block of a ``use_on_oom`` pool."""
        if pool.owner is not None:
            return None
        for private in self._pools.values():
            if private.use_on_oom:
                block = self._get_free_block(private.small if pool.small else private.large,
                                             size, stream)
                if block is not None:
                    return block
        return None

    def _empty_cache(self) -> None:
        self.runtime.synchronize_device()
        self.workspace._empty_cache()
        self._release_cached_blocks()

    def set_memory_fraction(self, fraction: float) -> None:
        """setMemoryFraction (the source): cap the segments at ``fraction`` of the device's
        total (aclrtGetMemInfo(ACL_HBM_MEM)); 1.0 removes the cap (before torch_npu 2.10:
        1.0 caps at the total, and turns garbage collection on, see :mod:`.releases`)."""
        if fraction.__class__ not in (int, float) or not 0 <= fraction <= 1:
            raise InvalidArgument(f"invalid fraction:{fraction}. Please set within [0, 1].")
        with self._lock:
            self.allowed_memory_maximum = None
            if fraction < 1.0 or self.release.caps_at_one:
                self._ensure_device()
                _free, total = self.runtime.get_mem_info(MemAttr.HBM_MEM)
                self.allowed_memory_maximum = int(fraction * total)

    def memory_stats(self) -> dict[str, Any]:
        """torch_npu.npu.memory_stats: ``"allocated_bytes.all.current"`` and the rest."""
        with self._lock:
            if self._dropped:
                self._drain_dropped()
            return self.stats.flat()

    def reset_accumulated_stats(self) -> None:
        """resetAccumulatedStats (the source): see :meth:`DeviceStats.reset_accumulated`."""
        with self._lock:
            self.stats.reset_accumulated()

    def block_size(self, ptr: int) -> int:
        """The size of the allocated block at ``ptr`` (the rounded size, or more when the
        rest was not worth splitting off)."""
        with self._lock:
            return self._active[ptr].size

    # -- malloc (the source's DeviceCachingAllocator::malloc) --------------------------------

    def _malloc(self, orig_size: int, stream: int) -> Block:
        conf = self.conf
        if self._events and not conf.multi_stream_lazy_reclaim:
            self._process_events()
        if self._plain_rounding:
            # round_size without roundup_power2_divisions: 512-byte steps (orig_size > 0)
            size = -(-(orig_size + self.pad) // K_MIN_BLOCK_SIZE) * K_MIN_BLOCK_SIZE
        else:
            size = round_size(orig_size, conf, self.pad)
        small = size <= K_SMALL_SIZE
        pool = self._get_pool(small) if self._scopes else self._small if small else self._large
        block = self._get_free_block(pool, size, stream)
        if block is None:
            block = self._new_block(pool, size, orig_size, stream)
            pool = block.pool  # a use_on_oom pool's, when it gave the block
        align = conf.base_addr_aligned_size
        if (conf.expandable_segments and size >= K_ROUND_LARGE and align
                and block.ptr % align):
            # malloc (the source): base_addr_aligned_kb moves a large block's start up to the
            # next multiple, leaving the bytes before it a free block
            offset = align - block.ptr % align
            if offset + size <= block.size:
                aligned = Block(block.ptr + offset, block.size - offset, stream, pool)
                aligned.segment = block.segment
                aligned.splice(block, block.next)
                block.size = offset
                pool.insert(block)
                block = aligned
        block = self._alloc_found_block(block, pool, size, orig_size, stream)
        if self._history is not None:
            self._trace("alloc", block.ptr, orig_size, stream)
        return block

    def _new_block(self, pool: Pool, size: int, orig_size: int, stream: int) -> Block:
        """malloc's path when no cached block fits (the source): free-memory callbacks,
        events (with multi_stream_lazy_reclaim), garbage collection, a new segment, then
        the retry chain; NpuOutOfMemoryError when nothing helps."""
        conf = self.conf
        if self.page_1g and not pool.small:
            alloc_size = -(-size // K_EXTRA_LARGE_BUFFER) * K_EXTRA_LARGE_BUFFER
        else:
            alloc_size = allocation_size(size, conf)
        rejected = [False]
        block = None
        if self._free_memory_callbacks and self._trigger_free_memory_callbacks():
            block = self._get_free_block(pool, size, stream)
        if block is None and conf.multi_stream_lazy_reclaim:
            self._process_events()
            block = self._get_free_block(pool, size, stream)
        if block is None:
            if self.allowed_memory_maximum is not None and conf.garbage_collection_threshold > 0:
                self._garbage_collect()
            block = self._alloc_block(pool, size, alloc_size, stream, False, rejected)
            if block is None and not rejected[0]:
                # try_mempool_fallback (a use_on_oom pool's cached block), then the release
                block = self._mempool_fallback(pool, size, stream)
                if block is None and self._release_available_cached_blocks(pool, size, stream):
                    block = self._alloc_block(pool, size, alloc_size, stream, False, rejected)
        if block is None and not rejected[0]:
            # "Free all non-split cached blocks and retry alloc." after synchronising the
            # device, the workspace allocator's cache first (NPUWorkspaceAllocator::emptyCache)
            self._empty_cache()
            block = self._alloc_block(pool, size, alloc_size, stream, True, rejected)
        if block is None:
            error = self._out_of_memory(alloc_size, orig_size, rejected[0])
            if not rejected[0]:
                # (out_of_memory gives the error every figure: none is None)
                if self._history is not None:
                    self._trace("oom", error.free, orig_size, stream)  # type: ignore[arg-type]
                self._notify_out_of_memory(alloc_size, error.free,  # type: ignore[arg-type]
                                           error.total_capacity)  # type: ignore[arg-type]
            raise error
        return block

    def _out_of_memory(self, alloc_size: int, orig_size: int,
                       rejected: bool) -> NpuOutOfMemoryError:
        free, total = self.runtime.get_mem_info(MemAttr.HBM_MEM)
        stats = self.stats
        if not rejected:
            stats.num_ooms += 1
        return out_of_memory(
            tried=orig_size if rejected else alloc_size, device=self.device,
            total_capacity=total, allocated=stats.current(ALLOCATED_BYTES),
            active=stats.current(ACTIVE_BYTES), free=free,
            allowed=self.allowed_memory_maximum, reserved=stats.current(RESERVED_BYTES),
            rejected=rejected)

    def _get_free_block(self, pool: Pool, size: int, stream: int) -> Block | None:
        """get_free_block (the source): best fit on the same stream, within max_split_size's
        and max_non_split_rounding's limits. O(log n), O(n) with GC on."""
        conf = self.conf
        if self.allowed_memory_maximum is not None and conf.garbage_collection_threshold > 0:
            for b in pool.blocks.values():
                b.gc_count += 1
        keys = pool.keys
        i = keys.bisect_left((stream << 128) | (size << 64))
        if i == len(keys) or keys[i] >> 128 != stream:
            return None
        block = pool.blocks[keys[i]]
        if block.segment is not None:
            # best fit counts an expandable block at the size it can grow to (the unmapped
            # block after it), so a later block may fit better
            def growable(b: Block) -> int:
                nxt = b.next
                return b.size + (nxt.size if nxt is not None and not nxt.mapped else 0)

            while (block.segment is not None and i + 1 < len(keys) and keys[i + 1] >> 128 == stream
                   and growable(pool.blocks[keys[i + 1]]) < growable(block)):
                i += 1
                block = pool.blocks[keys[i]]
        max_split = conf.max_split_size
        # Do not return an oversized block for a large request
        if size < max_split and block.size >= max_split:
            return None
        # Allow oversized block size to be rounded up but within a limit
        if size >= max_split and block.size >= size + conf.max_non_split_rounding_size:
            return None
        block.gc_count = 0
        pool.erase(block)
        return block

    def _alloc_block(self, pool: Pool, size: int, alloc_size: int, stream: int,
                     is_retry: bool, rejected: list[Any]) -> Block | None:
        """alloc_block (the source): a new segment from aclrtMallocAlign32, unless the memory
        fraction (or throw_on_npumalloc_oom's limit) forbids it."""
        if is_retry:
            self.stats.num_alloc_retries += 1
        allowed = self.allowed_memory_maximum
        if allowed is not None and self.total_allocated_memory + alloc_size > allowed:
            return None
        if self.conf.throw_on_npumalloc_oom:
            _free, total = self.runtime.get_mem_info(MemAttr.HBM_MEM)
            limit = int(self.conf.per_process_memory_fraction * total)
            if self.total_allocated_memory + alloc_size > limit:
                self.stats.num_oom_rejections += 1
                rejected[0] = True
                return None
        if self.conf.expandable_segments:
            return self._try_allocate_expandable_block(pool, size, stream)
        try:
            if self.page_1g and not pool.small:
                ptr = _malloc_align32_1g(self.runtime, alloc_size)
            else:
                ptr = self.runtime.malloc_align32(alloc_size, MallocPolicy.HUGE_FIRST)
        except AclError as e:
            if e.code == ErrorCode.RT_MEMORY_ALLOCATION:
                return None
            raise
        self.total_allocated_memory += alloc_size
        if pool.owner is not None:
            pool.owner.malloc_count += 1
        self.stats.add(SEGMENT, pool.small, 1)
        self.stats.add(RESERVED_BYTES, pool.small, alloc_size)
        if alloc_size >= self.conf.max_split_size:
            self.stats.oversize_segments.update(1)
        self.stats.num_device_alloc += 1
        if self._history is not None:
            self._trace("segment_alloc", ptr, alloc_size, stream)
        return Block(ptr, alloc_size, stream, pool)

    def _alloc_found_block(self, block: Block, pool: Pool, size: int, orig_size: int,
                           stream: int) -> Block:
        """should_split and alloc_found_block (the source): split off the rest when it is
        worth keeping (>= 512 B in the small pool; > 1 MiB in the large pool, for requests
        below max_split_size), then count the block as allocated."""
        stats, small = self.stats, pool.small
        remaining = block.size - size
        expandable = block.segment is not None
        if pool.owner is not None and pool.owner.no_split:
            split = False
        elif small or self.conf.expandable_segments:
            split = remaining >= K_MIN_BLOCK_SIZE
        else:
            split = size < self.conf.max_split_size and remaining > K_SMALL_SIZE
        already_split = block.is_split()
        if split:
            rest = block
            block = Block(rest.ptr, size, stream, pool)
            block.segment = rest.segment
            block.prev = rest.prev
            if block.prev is not None:
                block.prev.next = block
            block.next = rest
            rest.prev = block
            rest.ptr += size
            rest.size -= size
            pool.insert(rest)
            if expandable:
                pass
            elif already_split:
                stats.add(INACTIVE_SPLIT_BYTES, small, -block.size)
            else:
                stats.add(INACTIVE_SPLIT_BYTES, small, rest.size)
                stats.add(INACTIVE_SPLIT, small, 1)
        elif already_split and not expandable:
            stats.add(INACTIVE_SPLIT_BYTES, small, -block.size)
            stats.add(INACTIVE_SPLIT, small, -1)
        block.allocated = True
        block.requested_size = orig_size
        self._active[block.ptr] = block
        stats.alloc_block(small, block.size, orig_size)
        if block.size >= self.conf.max_split_size:
            stats.oversize_allocations.update(1)
        return block

    # -- free ---------------------------------------------------------------------------------

    def _free(self, block: Block) -> None:
        """free (the source): uncount it; wait for other streams' events, or free_block."""
        block.allocated = False
        if self._history is not None:
            self._trace("free_requested", block.ptr, block.requested_size, block.stream)
        self.stats.free_requested(block.small, block.size)
        if block.size >= self.conf.max_split_size:
            self.stats.oversize_allocations.update(-1)
        if block.stream_uses:
            self._insert_events(block)
        else:
            self._free_block(block)

    def _free_block(self, block: Block) -> None:
        """free_block and try_merge_blocks (the source): back to the pool, merged with free
        neighbours of the same segment."""
        pool = block.pool
        original_size, requested = block.size, block.requested_size
        if self._history is not None:
            self._trace("free_completed", block.ptr, requested, block.stream)
        net_blocks = net_bytes = 0
        for candidate in (block.prev, block.next):
            # an allocated neighbour (or none) cannot merge: no call for it
            if candidate is not None and not candidate.allocated:
                subsumed = self._try_merge(block, candidate, pool)
                if subsumed:
                    net_blocks -= 1
                    net_bytes -= subsumed
        pool.insert(block)
        if block.prev is not None or block.next is not None:
            net_blocks += 1
            net_bytes += block.size
        small = block.small
        if block.segment is None and (net_blocks or net_bytes):
            # inactive_split leaves expandable segments out, as the source does
            self.stats.add(INACTIVE_SPLIT, small, net_blocks)
            self.stats.add(INACTIVE_SPLIT_BYTES, small, net_bytes)
        self.stats.free_completed(small, original_size, requested)

    @staticmethod
    def _try_merge(dst: Block, src: Block | None, pool: Pool) -> int:
        if (src is None or src.allocated or src.event_count > 0 or src.stream_uses
                or src.mapped != dst.mapped):
            return 0
        if src.mapped:
            pool.erase(src)
        else:
            del pool.unmapped[(src.stream, src.ptr)]
        if dst.prev is src:
            dst.ptr = src.ptr
            dst.prev = src.prev
            if dst.prev is not None:
                dst.prev.next = dst
        else:
            dst.next = src.next
            if dst.next is not None:
                dst.next.prev = dst
        dst.size += src.size
        return src.size

    # -- giving memory back -------------------------------------------------------------------

    def _release_block(self, block: Block) -> None:
        """release_block (the source): aclrtFree a whole free segment and uncount it."""
        pool = block.pool
        self.runtime.free(block.ptr)
        if pool.owner is not None:
            pool.owner.malloc_count -= 1
        if self._history is not None:
            self._trace("segment_free", block.ptr, block.size, block.stream)
        self.stats.num_device_free += 1
        self.total_allocated_memory -= block.size
        self.stats.add(SEGMENT, block.small, -1)
        self.stats.add(RESERVED_BYTES, block.small, -block.size)
        if block.size >= self.conf.max_split_size:
            self.stats.oversize_segments.update(-1)
        pool.erase(block)

    def _release_blocks(self, pool: Pool) -> None:
        """release_blocks (the source): every free block that is a whole segment."""
        to_unmap = []
        for key in list(pool.keys):
            block = pool.blocks[key]
            if block.segment is not None:
                to_unmap.append(block)
            elif block.prev is None and block.next is None:
                self._release_block(block)
        for block in to_unmap:
            self._unmap_block(block, pool)

    def _release_cached_blocks(self, pool_id: tuple[int, int] | None = None) -> None:
        """release_cached_blocks (the source): wait for outstanding events, then free every
        wholly free segment of both pools; then those of each freeable private pool (use
        count 0), forgetting a pool left with no segment. With ``pool_id``, that pool's
        only (``emptyCache(mempool_id)``, when it is freeable)."""
        # DECISION: every outstanding event is waited for, also for one pool's release (the
        # source waits for that pool's only); the blocks go back to their own pools either way
        self._synchronize_and_free_events()
        if pool_id is None:
            self._release_blocks(self._large)
            self._release_blocks(self._small)
        for pid, private in list(self._pools.items()):
            if private.use_count or (pool_id is not None and pid != pool_id):
                continue
            self._release_blocks(private.small)
            self._release_blocks(private.large)
            if private.malloc_count == 0:
                del self._pools[pid]

    def _release_available_cached_blocks(self, pool: Pool, size: int, stream: int) -> bool:
        """release_available_cached_blocks (the source): with max_split_size set, free one
        oversize cached block large enough, else the largest ones until enough is freed."""
        max_split = self.conf.max_split_size
        if max_split == SIZE_MAX:
            return False
        self.runtime.synchronize_device()
        need = max(size, max_split)
        keys = pool.keys
        i = keys.bisect_left(size_key(stream, need))
        if i < len(keys) and keys[i] >> 128 == stream:
            block = pool.blocks[keys[i]]
            if block.is_split():
                # DECISION: the source would aclrtFree a block inside a segment here (possible
                # only with large_segment_size_mb above max_split_size_mb), which fails; the
                # simulator frees whole segments only and goes on down the chain
                return False
            self._release_block(block)
            return True
        if i == 0:
            return False
        released = 0
        i -= 1
        while released < need and i >= 0:
            block = pool.blocks[keys[i]]
            if block.size < max_split or block.stream != stream or block.is_split():
                break
            released += block.size
            # the source frees oversize blocks whether or not they are whole segments; a
            # split block cannot be over max_split_size (should_split), so each is one
            self._release_block(block)
            i -= 1
        return released >= need

    def _garbage_collect(self) -> None:
        """garbage_collect_cached_blocks (the source): above garbage_collection_threshold of
        the allowed memory, free unsplit large cached blocks older than the average."""
        # called only under a memory fraction (allowed_memory_maximum not None)
        threshold = int(self.conf.garbage_collection_threshold  # type: ignore[operator]
                        * self.allowed_memory_maximum)
        if self.total_allocated_memory <= threshold:
            return
        target = self.total_allocated_memory - threshold
        freeable = [b for b in self._large.blocks.values() if not b.is_split()]
        if not freeable:
            return
        self.runtime.synchronize_device()
        total_age = float(sum(b.gc_count for b in freeable))
        count = len(freeable)
        reclaimed, freed = 0, True
        while reclaimed < target and freed and count > 0:
            age_threshold = total_age / count
            freed = False
            for key in list(self._large.keys):
                block = self._large.blocks.get(key)
                if block is None or block.is_split() or block.gc_count < age_threshold:
                    continue
                freed = True
                reclaimed += block.size
                total_age -= block.gc_count
                count -= 1
                self._release_block(block)
