"""The stand-in ``torch_npu.npu.memory`` (``torch_npu/npu/memory.py``): the caching
allocator's statistics, snapshots and settings, its memory pools (``MemPool``,
``use_mem_pool``) and the host allocator's statistics, answered by the running estimate's
allocators; :mod:`torch_npu.npu <..npu>` re-exports them.

DECISION, custom allocators: ``NPUPluggableAllocator`` does not load its ``.so`` (its
functions call the device, which is simulated); a ``MemPool`` over one is modelled with
torch_npu's own segment sizes (the source's ``alloc_block`` asks the custom allocator for the
same ``alloc_size``), while ``change_current_allocator``, which would put the ``.so``'s policy
in place of the caching allocator's, stops the estimate with a verdict of unknown at the
script's line (:func:`~ascend_memsim.torchsim.limits.custom_allocator_refusal`).
"""

from __future__ import annotations

import contextlib
import os
import pickle
import sys
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

from ....allocators.stats import ALLOCATED_BYTES, RESERVED_BYTES
from ...limits import custom_allocator_refusal
from .._missing import not_modelled
from ._state import _check, _session, active

__all__ = [
    "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
    "memory_cached", "max_memory_cached", "memory_stats", "memory_stats_as_nested_dict",
    "memory_snapshot", "memory_summary", "empty_cache", "reset_peak_memory_stats",
    "reset_max_memory_allocated", "reset_max_memory_cached",
    "set_per_process_memory_fraction", "get_per_process_memory_fraction",
    "caching_allocator_alloc", "caching_allocator_delete",
    "MemPool", "use_mem_pool", "NPUPluggableAllocator", "change_current_allocator",
    "get_allocator_backend", "empty_virt_addr_cache", "reset_accumulated_memory_stats",
    "host_empty_cache", "host_memory_stats", "host_memory_stats_as_nested_dict",
    "reset_accumulated_host_memory_stats", "reset_peak_host_memory_stats",
]

__getattr__ = not_modelled("torch_npu.npu.memory")


def memory_stats(device: Any = None) -> dict:
    _check(device)
    return _session().allocator.memory_stats()


def memory_stats_as_nested_dict(device: Any = None) -> dict:
    _check(device)
    return _session().allocator.stats.nested()


def _stat(name: str, device: Any) -> int:
    return memory_stats(device).get(name, 0)


def memory_allocated(device: Any = None) -> int:
    return _stat("allocated_bytes.all.current", device)


def max_memory_allocated(device: Any = None) -> int:
    return _stat("allocated_bytes.all.peak", device)


def memory_reserved(device: Any = None) -> int:
    return _stat("reserved_bytes.all.current", device)


def max_memory_reserved(device: Any = None) -> int:
    return _stat("reserved_bytes.all.peak", device)


memory_cached, max_memory_cached = memory_reserved, max_memory_reserved


def reset_peak_memory_stats(device: Any = None) -> None:
    """resetPeakStats: the script's peaks start again from the current figures; the
    estimate's own are the whole run's (the peaks so far are kept in the session's
    ``peaks_before_reset`` first: torchtitan resets them at every logged step)."""
    _check(device)
    session = _session()
    with session.allocator._lock:
        stats = session.allocator.stats
        session.peaks_before_reset = tuple(
            max(kept, stats.peak(name)) for kept, name in zip(
                session.peaks_before_reset, (ALLOCATED_BYTES, RESERVED_BYTES)))
        stats.reset_peak()


reset_max_memory_allocated = reset_max_memory_cached = reset_peak_memory_stats


def get_per_process_memory_fraction(device: Any = None) -> float:
    _check(device)
    session = _session()
    cap = session.allocator.allowed_memory_maximum
    return 1.0 if cap is None else cap / session.capacity


def caching_allocator_alloc(size: int, device: Any = None, stream: Any = None) -> int:
    """A block of the caching allocator (torch_npu's raw alloc), counted as a temporary
    until :func:`caching_allocator_delete`; its simulated device address. Raises torch's
    OutOfMemoryError as a tensor's allocation does."""
    _check(device)
    session = _session()
    handle = session.stream if stream is None else getattr(stream, "npu_stream", stream)
    with session.on_stream(handle):
        return int(session.allocate_raw(int(size)))


def caching_allocator_delete(mem_ptr: int) -> None:
    _session().free_raw(mem_ptr)


def empty_cache() -> None:
    session = _session()
    session.asked("empty_cache")
    session.allocator.empty_cache()


def set_per_process_memory_fraction(fraction: float, device: Any = None) -> None:
    _check(device)
    session = _session()
    session.asked("set_per_process_memory_fraction")
    session.allocator.set_memory_fraction(fraction)


def memory_snapshot(mempool_id: tuple[int, int] | None = None) -> list:
    """torch_npu.npu.memory_snapshot(): the segments (a memory pool's only, with its id)."""
    if mempool_id is not None:
        mempool_id = (int(mempool_id[0]), int(mempool_id[1]))
    return _session().snapshot(mempool_id)["segments"]


def memory_summary(device: Any = None, abbreviated: bool = False) -> str:
    from ....memory.units import format_bytes

    stats = memory_stats(device)
    rows = [(key, stats.get(f"{key}.all.current", 0), stats.get(f"{key}.all.peak", 0))
            for key in ("allocated_bytes", "reserved_bytes", "active_bytes", "requested_bytes")]
    return "\n".join(f"{key:18} current {format_bytes(cur):>12}  peak {format_bytes(peak):>12}"
                     for key, cur, peak in rows)


def _record_memory_history(enabled: Any = "all", context: Any = "all", stacks: str = "all",
                           max_entries: int = sys.maxsize, device: Any = None) -> None:
    """torch_npu.npu.memory._record_memory_history: keep the trace (with the user's
    frames) for _snapshot; ``enabled=None`` stops it (unless the estimate itself was asked
    for a snapshot)."""
    session = _session()
    if enabled in (None, False):
        if not session.keep_history:
            session.stop_history()
    else:
        session.start_history(max_entries)


def _snapshot(device: Any = None) -> dict:
    return _session().snapshot()


def _dump_snapshot(filename: str = "dump_snapshot.pickle") -> None:
    with open(filename, "wb") as f:
        pickle.dump(_snapshot(), f)


def reset_accumulated_memory_stats(device: Any = None) -> None:
    """resetAccumulatedStats: every statistic's ``allocated`` and ``freed``, and the
    counters (``num_alloc_retries``, ``num_ooms`` ...), start again from 0."""
    _check(device)
    _session().allocator.reset_accumulated_stats()


def get_allocator_backend() -> str:
    """The caching allocator in use: torch_npu's own (``native``)."""
    return "native"


def empty_virt_addr_cache() -> None:
    """emptyVirtAddrCache (``NPUCachingAllocator.cpp``): with expandable segments, unmap
    the free pages, as empty_cache does; refused without them, as torch_npu refuses.

    DECISION: torch_npu keeps the physical handles it unmaps for a later malloc
    (``free_physical`` false); the simulated device gives them back, so what the device
    reports free afterwards is empty_cache's figure.
    """
    session = _session()
    if not session.allocator.conf.expandable_segments:
        raise RuntimeError("Unsupported config for empty_virt_addr_cache, please enable "
                           "expandable_segments.")
    session.asked("empty_virt_addr_cache")
    session.allocator.empty_cache()


# -- memory pools ----------------------------------------------------------------------------

class _NPUAllocator:
    """torch_npu.npu.memory._NPUAllocator: the handle of an allocator."""

    def __init__(self, allocator: Any) -> None:
        self._allocator = allocator

    def allocator(self) -> Any:
        return self._allocator


class NPUPluggableAllocator(_NPUAllocator):
    """torch_npu.npu.memory.NPUPluggableAllocator: an allocator from a ``.so``'s two
    functions. Its file is checked, not loaded (see the module's DECISION).

    Raises:
        OSError: no such file, as ``ctypes.CDLL`` says it.
        TypeError: names that are not strings.
    """

    def __init__(self, path_to_so_file: str, alloc_fn_name: str, free_fn_name: str) -> None:
        if not all(isinstance(n, str) for n in (alloc_fn_name, free_fn_name)):
            raise TypeError("alloc_fn_name and free_fn_name must be the names (str) of the "
                            "allocator's functions in the .so")
        path = os.fspath(path_to_so_file)
        if not os.path.isfile(path):
            raise OSError(f"{path}: cannot open shared object file: No such file or directory")
        super().__init__((path, alloc_fn_name, free_fn_name))


def change_current_allocator(allocator: _NPUAllocator) -> None:
    """Refused during an estimate: see the module's DECISION."""
    session = _session()
    raise session.stop(custom_allocator_refusal(
        session, "torch_npu.npu.memory.change_current_allocator"))


class MemPool:
    """torch_npu.npu.MemPool (``npu/memory.py``, ``MemPool.cpp``): a private pool of the
    caching allocator. Allocations inside :func:`use_mem_pool` take its blocks, whose
    segments no allocation outside it uses (``use_on_oom=True``: unless nothing else is
    left); its segments go back when the pool and every tensor in it are gone and the cache
    is emptied. ``no_split=True``: a block is a whole segment."""

    def __init__(self, allocator: _NPUAllocator | None = None, use_on_oom: bool = False,
                 no_split: bool = False) -> None:
        if allocator is not None and not isinstance(allocator, _NPUAllocator):
            raise TypeError(f"allocator must be an NPUPluggableAllocator (or None), not "
                            f"{type(allocator).__name__}")
        self._session = _session()
        self._allocator = self._session.allocator
        self._id = self._allocator.create_pool(use_on_oom=bool(use_on_oom),
                                               no_split=bool(no_split),
                                               custom=allocator is not None)

    @property
    def id(self) -> tuple[int, int]:
        """The pool's id, ``(0, n)`` for the n-th pool made."""
        return self._id

    def use_count(self) -> int:
        """The pool's use count: 1 for the pool, one more in each ``use_mem_pool``."""
        return int(self._allocator.pool_use_count(self._id))

    def snapshot(self) -> list:
        """The pool's segments, as :func:`memory_snapshot` gives them."""
        return memory_snapshot(self._id)

    def __del__(self) -> None:
        # ~MemPool (MemPool.cpp): setUseOnOOM(false), releasePool, emptyCache(id), done by
        # the allocator at its next call; nothing once the estimate that made it is over
        session = getattr(self, "_session", None)
        if session is not None and active() is session:
            self._allocator.drop_pool(self._id)


@contextlib.contextmanager
def use_mem_pool(pool: MemPool, device: Any = None) -> Iterator[None]:
    """Route the calling thread's allocations to ``pool`` (torch_npu's
    ``_npu_beginAllocateCurrentThreadToPool``, then ``_npu_endAllocateToPool`` and
    ``_npu_releasePool`` on the way out)."""
    if not isinstance(pool, MemPool):
        raise TypeError(f"use_mem_pool needs a torch_npu.npu.MemPool, not {type(pool).__name__}")
    _check(device)
    allocator = _session().allocator
    allocator.begin_allocate_to_pool(pool.id)
    try:
        yield
    finally:
        allocator.end_allocate_to_pool(pool.id)
        allocator.release_pool(pool.id)


# -- the host allocator (pinned memory) ------------------------------------------------------

def host_empty_cache() -> None:
    """torch_npu.npu.host_empty_cache: the host allocator's free pinned blocks go back."""
    _session().pinned.empty_cache()


def host_memory_stats_as_nested_dict() -> dict:
    """The host allocator's statistics (see :class:`~ascend_memsim.torchsim.host.PinnedMemory`)."""
    return dict(_session().pinned.stats())


def host_memory_stats() -> OrderedDict:
    """torch_npu.npu.host_memory_stats: the nested dict's keys joined by dots, sorted."""
    result = []

    def walk(prefix: str, obj: Any) -> None:
        if isinstance(obj, dict):
            for key, value in obj.items():
                walk(f"{prefix}.{key}" if prefix else key, value)
        else:
            result.append((prefix, obj))

    walk("", host_memory_stats_as_nested_dict())
    return OrderedDict(sorted(result))


def reset_accumulated_host_memory_stats() -> None:
    _session().pinned.reset_accumulated()


def reset_peak_host_memory_stats() -> None:
    _session().pinned.reset_peak()
