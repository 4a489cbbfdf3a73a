"""The stand-in ``torch_npu.npu.memory`` (``torch_npu/npu/memory.py``): the caching
allocator's statistics, snapshots and settings, answered by the running estimate's
allocator; :mod:`torch_npu.npu <..npu>` re-exports them."""

from __future__ import annotations

import pickle
import sys
from typing import Any

from .._missing import not_modelled
from ._state import _check, _session

__all__ = [
    "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
    "memory_cached", "max_memory_cached", "memory_stats", "memory_stats_as_nested_dict",
    "memory_snapshot", "memory_summary", "empty_cache", "reset_peak_memory_stats",
    "reset_max_memory_allocated", "reset_max_memory_cached",
    "set_per_process_memory_fraction", "get_per_process_memory_fraction",
    "caching_allocator_alloc", "caching_allocator_delete",
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
    _check(device)
    session = _session()
    with session.allocator._lock:
        session.allocator.stats.reset_peak()


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


def memory_snapshot() -> list:
    """torch_npu.npu.memory_snapshot(): the segments."""
    return _session().snapshot()["segments"]


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
