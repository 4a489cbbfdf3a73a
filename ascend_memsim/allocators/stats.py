"""torch_npu's allocator statistics and its out-of-memory error.

Sources: ``Ascend/pytorch`` ``torch_npu/csrc/npu/Module.cpp`` (``THNPModule_memoryStats``: the
keys), ``torch_npu/csrc/core/npu/NPUCachingAllocator.cpp`` (``update_stat``, ``format_size``,
the ``NPU out of memory`` message in ``DeviceCachingAllocator::malloc``) and c10's ``Stat``
(current, peak, allocated, freed). ``memory_stats()`` flattens the nested dict into dotted keys,
sorted, as ``torch_npu.npu.memory_stats`` does.
"""

from __future__ import annotations

from ..memory.errors import NpuOutOfMemoryError

__all__ = ["Stat", "DeviceStats", "out_of_memory", "format_size", "STAT_TYPES"]

#: StatType names, in order (Module.cpp statTypeNames)
STAT_TYPES = ("all", "small_pool", "large_pool")
_ARRAYS = ("allocation", "segment", "active", "inactive_split", "allocated_bytes",
           "reserved_bytes", "active_bytes", "inactive_split_bytes", "requested_bytes")


class Stat:
    """c10::CachingAllocator::Stat: current, peak, allocated (sum of increases), freed."""

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


class DeviceStats:
    """DeviceStats: one Stat per pool kind for each array, the counters, the oversize stats."""

    def __init__(self, max_split_size: int) -> None:
        for name in _ARRAYS:
            setattr(self, name, tuple(Stat() for _ in STAT_TYPES))
        self.oversize_allocations = Stat()
        self.oversize_segments = Stat()
        self.num_alloc_retries = 0
        self.num_ooms = 0
        self.num_sync_all_streams = 0
        self.num_device_alloc = 0
        self.num_device_free = 0
        self.num_oom_rejections = 0
        self.max_split_size = max_split_size

    def update(self, name: str, small: bool, amount: int) -> None:
        """for_each_selected_stat_type: the aggregate and the block's pool."""
        stats = getattr(self, name)
        stats[0].update(amount)
        stats[1 if small else 2].update(amount)

    def nested(self) -> dict:
        """THNPModule_memoryStats's dict."""
        out: dict = {key: getattr(self, key) for key in (
            "num_alloc_retries", "num_ooms", "max_split_size", "num_sync_all_streams",
            "num_device_alloc", "num_device_free", "num_oom_rejections")}
        for name in _ARRAYS:
            out[name] = {t: s.as_dict() for t, s in zip(STAT_TYPES, getattr(self, name))}
        out["oversize_allocations"] = self.oversize_allocations.as_dict()
        out["oversize_segments"] = self.oversize_segments.as_dict()
        return out

    def flat(self) -> dict:
        """torch_npu.npu.memory_stats: the nested dict's keys joined by dots, sorted."""
        result: dict = {}

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
