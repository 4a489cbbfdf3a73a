"""torch_npu's allocator statistics and its out-of-memory error.

Sources: ``Ascend/pytorch`` ``torch_npu/csrc/npu/Module.cpp`` (``THNPModule_memoryStats``: the
keys), ``torch_npu/csrc/core/npu/NPUCachingAllocator.cpp`` (``update_stat``, ``format_size``,
the ``NPU out of memory`` message in ``DeviceCachingAllocator::malloc``) and c10's ``Stat``
(current, peak, allocated, freed). ``memory_stats()`` flattens the nested dict into dotted keys,
sorted, as ``torch_npu.npu.memory_stats`` does.
"""

from __future__ import annotations

from typing import Any

from ..memory.errors import NpuOutOfMemoryError

__all__ = ["Stat", "DeviceStats", "out_of_memory", "format_size", "STAT_TYPES", "ARRAYS",
           "ALLOCATION", "SEGMENT", "ACTIVE", "INACTIVE_SPLIT", "ALLOCATED_BYTES",
           "RESERVED_BYTES", "ACTIVE_BYTES", "INACTIVE_SPLIT_BYTES", "REQUESTED_BYTES"]

#: StatType names, in order (Module.cpp statTypeNames)
STAT_TYPES = ("all", "small_pool", "large_pool")
#: the StatArrays of DeviceStats, in Module.cpp's order
ARRAYS = ("allocation", "segment", "active", "inactive_split", "allocated_bytes",
          "reserved_bytes", "active_bytes", "inactive_split_bytes", "requested_bytes")
# Each array is 8 ints of DeviceStats.values from its index: current (small pool, large
# pool), peak (small, large), allocated (small, large), the aggregate's peak, one unused.
(ALLOCATION, SEGMENT, ACTIVE, INACTIVE_SPLIT, ALLOCATED_BYTES, RESERVED_BYTES, ACTIVE_BYTES,
 INACTIVE_SPLIT_BYTES, REQUESTED_BYTES) = range(0, 8 * len(ARRAYS), 8)
_WIDTH = 8 * len(ARRAYS)


class Stat:
    """c10::CachingAllocator::Stat: current, peak, allocated (sum of increases), freed.

    The oversize stats are Stats; the arrays are kept in :class:`DeviceStats`'s ints and
    read as Stats through :class:`StatView`."""

    __slots__ = ("current", "peak", "allocated", "freed")

    def __init__(self) -> None:
        self.current = self.peak = self.allocated = self.freed = 0

    def update(self, amount: int) -> None:
        """update_stat: an increase or a decrease of ``amount``."""
        if amount > 0:
            self.current += amount
            self.allocated += amount
            if self.current > self.peak:
                self.peak = self.current
        elif amount < 0:
            self.current += amount
            self.freed -= amount

    def as_dict(self) -> dict[str, int]:
        return {"current": self.current, "peak": self.peak, "allocated": self.allocated,
                "freed": self.freed}

    def reset_accumulated(self) -> None:
        self.allocated = self.freed = 0


class StatView:
    """One Stat of an array (``kind`` 0 the aggregate, 1 the small pool, 2 the large pool),
    read live from :attr:`DeviceStats.values` (and ``freed`` from :attr:`DeviceStats.base`)."""

    __slots__ = ("_values", "_base", "_i", "_kind")

    def __init__(self, values: list[int], base: list[int], i: int, kind: int) -> None:
        self._values, self._base, self._i, self._kind = values, base, i, kind

    def _field(self, offset: int, values: list[int] | None = None) -> int:
        v, i = self._values if values is None else values, self._i + offset
        return v[i] + v[i + 1] if self._kind == 0 else v[i + self._kind - 1]

    @property
    def current(self) -> int:
        return self._field(0)

    @property
    def peak(self) -> int:
        if self._kind == 0:
            return self._values[self._i + 6]
        return self._values[self._i + 1 + self._kind]

    @property
    def allocated(self) -> int:
        return self._field(4)

    @property
    def freed(self) -> int:
        # the decreases since the last reset_accumulated: increases minus the growth since
        return self.allocated - self.current + self._field(0, self._base)

    def as_dict(self) -> dict[str, int]:
        return {"current": self.current, "peak": self.peak, "allocated": self.allocated,
                "freed": self.freed}


class DeviceStats:
    """DeviceStats: a Stat per pool kind for each array, the counters, the oversize stats.

    The arrays are plain ints in one list (:attr:`values`) updated in place, the aggregate
    ("all") derived when read: its current and allocated are the pools' sums, its freed (as
    every Stat's) is allocated - current, and only its peak is kept, on each increase. An
    increase costs a few list stores, a decrease one; :meth:`alloc_block`,
    :meth:`free_requested` and :meth:`free_completed` make the hot path's several updates
    in one call. ``stats.allocated_bytes[0].current`` and the like read them as Stats.
    """

    # the arrays (ARRAYS), each a StatView per pool kind (aggregate, small, large): set in
    # __init__
    allocation: tuple[StatView, StatView, StatView]
    segment: tuple[StatView, StatView, StatView]
    active: tuple[StatView, StatView, StatView]
    inactive_split: tuple[StatView, StatView, StatView]
    allocated_bytes: tuple[StatView, StatView, StatView]
    reserved_bytes: tuple[StatView, StatView, StatView]
    active_bytes: tuple[StatView, StatView, StatView]
    inactive_split_bytes: tuple[StatView, StatView, StatView]
    requested_bytes: tuple[StatView, StatView, StatView]

    def __init__(self, max_split_size: int) -> None:
        self.values = [0] * _WIDTH
        #: each pool's current value at the last reset_accumulated (what ``freed`` counts from)
        self.base = [0] * _WIDTH
        for i, name in zip(range(0, _WIDTH, 8), ARRAYS):
            setattr(self, name, tuple(StatView(self.values, self.base, i, k)
                                      for k in range(3)))
        self.oversize_allocations = Stat()
        self.oversize_segments = Stat()
        self.num_alloc_retries = 0
        self.num_ooms = 0
        self.num_sync_all_streams = 0
        self.num_device_alloc = 0
        self.num_device_free = 0
        self.num_oom_rejections = 0
        self.max_split_size = max_split_size

    def add(self, array: int, small: bool, amount: int) -> None:
        """for_each_selected_stat_type + update_stat: ``amount`` on the aggregate and the
        block's pool of ``array`` (ALLOCATION, ..., REQUESTED_BYTES). O(1)."""
        v = self.values
        i = array if small else array + 1
        current = v[i] + amount
        v[i] = current
        if amount > 0:
            v[i + 4] += amount
            if current > v[i + 2]:
                v[i + 2] = current
            current += v[i ^ 1]
            if current > v[array + 6]:
                v[array + 6] = current

    def alloc_block(self, small: bool, size: int, requested: int) -> None:
        """alloc_found_block's increases (the source): allocation, allocated_bytes, active,
        active_bytes and requested_bytes. O(1)."""
        v = self.values
        p = 0 if small else 1
        for array, amount in ((ALLOCATION, 1), (ALLOCATED_BYTES, size), (ACTIVE, 1),
                              (ACTIVE_BYTES, size), (REQUESTED_BYTES, requested)):
            i = array + p
            current = v[i] + amount
            v[i] = current
            v[i + 4] += amount
            if current > v[i + 2]:
                v[i + 2] = current
            current += v[i ^ 1]
            if current > v[array + 6]:
                v[array + 6] = current

    def free_requested(self, small: bool, size: int) -> None:
        """free's decreases (the source): allocation and allocated_bytes. O(1)."""
        p = 0 if small else 1
        v = self.values
        v[ALLOCATION + p] -= 1
        v[ALLOCATED_BYTES + p] -= size

    def free_completed(self, small: bool, size: int, requested: int) -> None:
        """free_block's decreases (the source): active, active_bytes, requested_bytes."""
        p = 0 if small else 1
        v = self.values
        v[ACTIVE + p] -= 1
        v[ACTIVE_BYTES + p] -= size
        v[REQUESTED_BYTES + p] -= requested

    def reset_peak(self) -> None:
        """resetPeakStats (NPUCachingAllocator.cpp, torch_npu.npu.reset_peak_memory_stats):
        every peak, of each pool and of the aggregate, becomes the current value."""
        v = self.values
        for array in range(0, _WIDTH, 8):
            v[array + 2], v[array + 3] = v[array], v[array + 1]
            v[array + 6] = v[array] + v[array + 1]
        for stat in (self.oversize_allocations, self.oversize_segments):
            stat.peak = stat.current

    def reset_accumulated(self) -> None:
        """resetAccumulatedStats (NPUCachingAllocator.cpp,
        torch_npu.npu.reset_accumulated_memory_stats): every Stat's allocated and freed, and
        the counters, start again from 0."""
        v, base = self.values, self.base
        for array in range(0, _WIDTH, 8):
            v[array + 4] = v[array + 5] = 0
            base[array], base[array + 1] = v[array], v[array + 1]
        self.num_alloc_retries = self.num_ooms = self.num_sync_all_streams = 0
        self.num_device_alloc = self.num_device_free = self.num_oom_rejections = 0
        for stat in (self.oversize_allocations, self.oversize_segments):
            stat.reset_accumulated()

    def current(self, array: int) -> int:
        """The aggregate's current value of ``array``."""
        return self.values[array] + self.values[array + 1]

    def peak(self, array: int) -> int:
        """The aggregate's peak of ``array``."""
        return self.values[array + 6]

    def nested(self) -> dict[str, Any]:
        """THNPModule_memoryStats's dict."""
        out: dict[str, Any] = {key: getattr(self, key) for key in (
            "num_alloc_retries", "num_ooms", "max_split_size", "num_sync_all_streams",
            "num_device_alloc", "num_device_free", "num_oom_rejections")}
        for name in ARRAYS:
            out[name] = {t: s.as_dict() for t, s in zip(STAT_TYPES, getattr(self, name))}
        out["oversize_allocations"] = self.oversize_allocations.as_dict()
        out["oversize_segments"] = self.oversize_segments.as_dict()
        return out

    def flat(self) -> dict[str, Any]:
        """torch_npu.npu.memory_stats: the nested dict's keys joined by dots, sorted."""
        result: dict[str, Any] = {}

        def walk(prefix: str, obj: object) -> None:
            if isinstance(obj, dict):
                for k, v in obj.items():
                    walk(f"{prefix}.{k}" if prefix else k, v)
            else:
                result[prefix] = obj

        walk("", self.nested())
        return dict(sorted(result.items()))


def format_size(size: int) -> str:
    """format_size (NPUCachingAllocator.cpp): bytes up to 1 KiB, else two decimals of the unit.

    >>> format_size(1024), format_size(20 * 1024 * 1024), format_size(3 << 30)
    ('1024 bytes', '20.00 MiB', '3.00 GiB')
    """
    if size <= 1024:
        return f"{size} bytes"
    if size <= 1048576:
        return f"{size / 1024.0:.2f} KiB"
    if size <= 1073741824:
        return f"{size / 1048576.0:.2f} MiB"
    return f"{size / 1073741824.0:.2f} GiB"


def out_of_memory(*, tried: int, device: int, total_capacity: int, allocated: int,
                  active: int, free: int, allowed: int | None, reserved: int,
                  rejected: bool = False) -> NpuOutOfMemoryError:
    """The error torch_npu raises, with its message and figures (see NpuOutOfMemoryError)."""
    if rejected:
        # NpuCachingAllocator::malloc (the allocator class): throw_on_npumalloc_oom
        message = ("NPU out of memory. Allocation was preemptively rejected because it "
                   "would exceed per_process_memory_fraction limit. Requested size: "
                   f"{format_size(tried)}")
    else:
        # DeviceCachingAllocator::malloc
        allowed_info = f"{format_size(allowed)} allowed; " if allowed is not None else ""
        message = (f"NPU out of memory. Tried to allocate {format_size(tried)} (NPU "
                   f"{device}; {format_size(total_capacity)} total capacity; "
                   f"{format_size(allocated)} already allocated; {format_size(active)} "
                   f"current active; {format_size(free)} free; {allowed_info}"
                   f"{format_size(reserved)} reserved in total by PyTorch).If reserved "
                   "memory is >> allocated memory try setting max_split_size_mb to avoid "
                   "fragmentation.")
    return NpuOutOfMemoryError(
        message, tried=tried, device=device, total_capacity=total_capacity,
        allocated=allocated, active=active, free=free, allowed=allowed, reserved=reserved,
        rejected=rejected)
