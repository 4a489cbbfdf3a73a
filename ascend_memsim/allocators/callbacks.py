"""The caching allocator's two hooks into its out-of-memory path: free-memory callbacks and
out-of-memory observers.

Source: ``Ascend/pytorch`` ``torch_npu/csrc/core/npu/NPUCachingAllocator.cpp``:
``FreeNPUMemoryCallbacksRegistry`` and ``trigger_free_memory_callbacks`` (when no cached block
fits, every registered callback runs, and if any says it freed memory the pool is searched
again, before a new segment is asked for); ``attachOutOfMemoryObserver`` (each observer is
called with the device, the segment size tried, the allowed memory (the memory fraction's, or
the device's total) and the device's free memory, just before ``NPU out of memory`` is raised).
torch_npu registers no free-memory callback of its own.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from ..memory.errors import InvalidArgument

__all__ = ["AllocatorCallbacks"]


class AllocatorCallbacks:
    """The hooks of :class:`~ascend_memsim.allocators.caching.NpuCachingAllocator` (a mixin:
    the allocator keeps the lists, both start empty)."""

    _free_memory_callbacks: list[Callable[[], bool]]
    _oom_observers: list[Callable[..., object]]
    # the allocator's (caching.py), which this mixin reads
    _lock: threading.RLock
    device: int
    allowed_memory_maximum: int | None

    def add_free_memory_callback(self, callback: Callable[[], bool]) -> None:
        """Register ``callback()`` (FreeMemoryCallback::Execute): called under the
        allocator's lock when no cached block fits; it returns True when it freed memory
        (it may free blocks of this allocator). DECISION: callbacks run in the order they
        were added (torch_npu's registry keeps them by name in a hash map)."""
        if not callable(callback):
            raise InvalidArgument(f"callback must be callable, not {callback!r}")
        with self._lock:
            self._free_memory_callbacks.append(callback)

    def attach_out_of_memory_observer(self,
                                      observer: Callable[[int, int, int, int], None]) -> None:
        """attachOutOfMemoryObserver: ``observer(device, alloc_size, allowed, device_free)``
        before each ``NpuOutOfMemoryError`` (not before a throw_on_npumalloc_oom rejection).
        DECISION: it runs under the allocator's lock (torch_npu releases its lock first), so
        it must not wait for another thread that uses this allocator."""
        if not callable(observer):
            raise InvalidArgument(f"observer must be callable, not {observer!r}")
        with self._lock:
            self._oom_observers.append(observer)

    def _trigger_free_memory_callbacks(self) -> bool:
        """trigger_free_memory_callbacks: run every callback; whether any freed memory."""
        freed = False
        for callback in list(self._free_memory_callbacks):
            freed |= bool(callback())
        return freed

    def _notify_out_of_memory(self, alloc_size: int, free: int, total: int) -> None:
        allowed = self.allowed_memory_maximum
        for observer in list(self._oom_observers):
            observer(self.device, alloc_size, allowed if allowed is not None else total, free)
