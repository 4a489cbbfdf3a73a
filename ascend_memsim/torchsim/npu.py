"""The stand-in ``torch.npu`` / ``torch_npu.npu``: devices, streams, events, memory
statistics and snapshots, amp, answered by the running estimate's simulated device.

Names and signatures follow ``Ascend/pytorch`` ``torch_npu/npu/__init__.py``,
``torch_npu/npu/memory.py`` (which mirror ``torch/cuda/memory.py``: ``memory_allocated``,
``max_memory_reserved``, ``memory_stats``, ``memory_snapshot``, ``empty_cache``,
``set_per_process_memory_fraction``, ``_record_memory_history(enabled="all", context="all",
stacks="all", max_entries=...)``, ``_snapshot``, ``_dump_snapshot``) and ``torch_npu/npu/amp``.
Outside an estimate there is no device: ``is_available()`` is False, ``device_count()`` 0, and
anything that needs the device raises RuntimeError.

DECISION: one device: every NPU tensor is on the simulated device 0 (``device_count()`` is
1), or, for a rank of a distributed estimate, on its ``LOCAL_RANK`` of the node's cards
(``device_count()`` is the cards per node); ``set_device`` takes that device only. Streams
and events order nothing (fake tensors run no work); a stream's handle is the simulated
runtime's, so the allocator keeps blocks per stream as torch_npu does. ACL graph capture
(``NPUGraph``, ``graph``, ``make_graphed_callables``, ``graph_pool_handle``) is refused, see
:mod:`.limits`. The calls that see the device's memory (``mem_get_info``,
``get_device_properties``, ``set_per_process_memory_fraction``, ``empty_cache``) are told to
the session (:meth:`~.session.Session.asked`): a search by replays checks such a script by
running it.
"""

from __future__ import annotations

import contextlib
import pickle
import sys
import types
from collections.abc import Iterator
from typing import Any

import torch

from .limits import graph_refusal

__all__ = [
    "is_available", "is_initialized", "init", "device_count", "current_device", "set_device",
    "synchronize", "get_device_name", "get_device_properties", "mem_get_info",
    "Stream", "Event", "current_stream", "default_stream", "stream", "set_stream",
    "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
    "memory_stats", "memory_stats_as_nested_dict", "memory_snapshot", "memory_summary",
    "empty_cache", "reset_peak_memory_stats", "reset_max_memory_allocated",
    "reset_max_memory_cached", "set_per_process_memory_fraction", "memory", "amp",
    "manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed", "is_bf16_supported",
    "get_amp_supported_dtype", "set_compile_mode", "config", "device",
    "NPUGraph", "graph", "graph_pool_handle", "make_graphed_callables",
    "is_current_stream_capturing",
]


#: the running estimate's Session (set by Session.__enter__ and __exit__)
_current: Any = None


def active() -> Any:
    """The running estimate's session, or None."""
    return _current


def _session() -> Any:
    session = active()
    if session is None:
        raise RuntimeError("no NPU: the stand-in torch_npu answers only inside "
                           "ascend_memsim.torchsim.estimate (ascend-memsim estimate)")
    return session


def _own() -> int:
    """The NPU the running estimate's tensors are on (0, or a rank's LOCAL_RANK)."""
    session = active()
    return 0 if session is None else session.device


def _index(device: Any = None) -> int:
    """The device index of ``device`` (None, an int, "npu", "npu:0", torch.device)."""
    if device is None:
        return _own()
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "npu":
            raise ValueError(f"expected an npu device, got {device}")
        return _own() if device.index is None else device.index
    if isinstance(device, int) and not isinstance(device, bool):
        return device
    raise TypeError(f"invalid device: {device!r}")


def _check(device: Any) -> None:
    if _index(device) != _own():
        raise RuntimeError(f"invalid device {device!r}: the estimate simulates one NPU "
                           f"(device {_own()})")


# -- devices ---------------------------------------------------------------------------------

def is_available() -> bool:
    return active() is not None


def is_initialized() -> bool:
    return active() is not None


def init() -> None:
    _session()


def _lazy_init() -> None:
    _session()


def _is_in_bad_fork() -> bool:
    return False


def device_count() -> int:
    session = active()
    return 0 if session is None else session.device_count


def current_device() -> int:
    return _own()


def set_device(device: Any) -> None:
    _check(device)


class device:
    """torch_npu.npu.device: a context manager, as torch.cuda.device."""

    def __init__(self, device: Any) -> None:
        _check(device)

    def __enter__(self) -> device:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass


def synchronize(device: Any = None) -> None:
    _session()


def get_device_name(device: Any = None) -> str:
    return f"Ascend {_session().product} (ascend-memsim)"


def get_device_properties(device: Any = None) -> types.SimpleNamespace:
    session = _session()
    session.asked("get_device_properties")
    return types.SimpleNamespace(name=get_device_name(device), total_memory=session.capacity)


def mem_get_info(device: Any = None) -> tuple[int, int]:
    """(free, total) bytes of the simulated device (aclrtGetMemInfo)."""
    session = _session()
    session.asked("mem_get_info")
    return session.mem_get_info()


# -- streams and events ----------------------------------------------------------------------

class Stream:
    """torch_npu.npu.Stream: a stream of the simulated runtime (``npu_stream``: its handle)."""

    def __init__(self, device: Any = None, priority: int = 0, **kwargs: Any) -> None:
        _check(device)
        session = _session()
        self.npu_stream = kwargs.get("_handle")
        if self.npu_stream is None:
            self.npu_stream = session.runtime.streams.create_stream()
        self.device = torch.device("npu", _own())
        self.priority = priority

    def wait_event(self, event: Event) -> None:
        pass

    def wait_stream(self, stream: Stream) -> None:
        pass

    def record_event(self, event: Event | None = None) -> Event:
        event = event or Event()
        event.record(self)
        return event

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Stream) and other.npu_stream == self.npu_stream

    def __hash__(self) -> int:
        return hash(self.npu_stream)

    def __repr__(self) -> str:
        return (f"<torch_npu.npu.Stream device=npu:{_own()} "
                f"npu_stream={self.npu_stream:#x}>")


class Event:
    """torch_npu.npu.Event: records nothing (no work runs on fake tensors)."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False,
                 interprocess: bool = False) -> None:
        self.enable_timing = enable_timing

    def record(self, stream: Stream | None = None) -> None:
        pass

    def wait(self, stream: Stream | None = None) -> None:
        pass

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end_event: Event) -> float:
        return 0.0


def current_stream(device: Any = None) -> Stream:
    _check(device)
    return Stream(_handle=_session().stream)


def default_stream(device: Any = None) -> Stream:
    _check(device)
    _session()
    return Stream(_handle=0)


def set_stream(stream: Stream) -> None:
    _session().stream = stream.npu_stream


@contextlib.contextmanager
def stream(stream: Stream | None) -> Iterator[None]:
    """torch_npu.npu.stream: allocations in the block go to ``stream``."""
    session = _session()
    if stream is None:
        yield
        return
    previous, session.stream = session.stream, stream.npu_stream
    try:
        yield
    finally:
        session.stream = previous


# -- ACL graphs: refused (see .limits) -------------------------------------------------------

def _refuse_graph(name: str) -> None:
    session = _session()
    raise session.stop(graph_refusal(session, name))


class NPUGraph:
    """torch_npu.npu.NPUGraph (``torch_npu/npu/graphs.py``) during an estimate: refused."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        _refuse_graph("torch_npu.npu.NPUGraph")


class graph:
    """torch_npu.npu.graph (a capture context) during an estimate: refused."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        _refuse_graph("torch_npu.npu.graph")


def make_graphed_callables(*args: Any, **kwargs: Any) -> Any:
    _refuse_graph("torch_npu.npu.make_graphed_callables")


def graph_pool_handle() -> Any:
    _refuse_graph("torch_npu.npu.graph_pool_handle")


def is_current_stream_capturing() -> bool:
    return False


# -- memory ----------------------------------------------------------------------------------

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
    from ..memory.units import format_bytes

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


memory = types.ModuleType("torch_npu.npu.memory")
for _name in ("memory_allocated", "max_memory_allocated", "memory_reserved",
              "max_memory_reserved", "memory_cached", "max_memory_cached", "memory_stats",
              "memory_stats_as_nested_dict", "memory_snapshot", "memory_summary",
              "empty_cache", "reset_peak_memory_stats", "reset_max_memory_allocated",
              "reset_max_memory_cached", "set_per_process_memory_fraction", "mem_get_info",
              "_record_memory_history", "_snapshot", "_dump_snapshot"):
    setattr(memory, _name, globals()[_name])


# -- amp, seeds, settings --------------------------------------------------------------------

def get_amp_supported_dtype() -> list:
    """What torch.autocast("npu") may cast to (torch asks the device module)."""
    return [torch.float16, torch.bfloat16]


def is_bf16_supported() -> bool:
    return True


def _autocast(enabled: bool = True, dtype: torch.dtype = torch.float16,
              cache_enabled: bool = True) -> torch.autocast:
    """torch_npu.npu.amp.autocast: torch.autocast on the npu device."""
    return torch.autocast("npu", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)


class _GradScaler(torch.amp.GradScaler):
    """torch_npu.npu.amp.GradScaler on fake tensors.

    DECISION: the step is always taken. torch's scaler reads whether any gradient was
    infinite (a ``.item()`` of a tensor the estimate has no value of); a skipped step would
    allocate less, so assuming none is the side that does not underestimate."""

    def __init__(self, init_scale: float = 2.0 ** 16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000,
                 enabled: bool = True, **kwargs: Any) -> None:
        super().__init__("npu", init_scale=init_scale, growth_factor=growth_factor,
                         backoff_factor=backoff_factor, growth_interval=growth_interval,
                         enabled=enabled)

    def _maybe_opt_step(self, optimizer: Any, optimizer_state: Any, *args: Any,
                        **kwargs: Any) -> Any:
        return optimizer.step(*args, **kwargs)


amp: Any = types.ModuleType("torch_npu.npu.amp")
amp.autocast = _autocast
amp.GradScaler = _GradScaler


def manual_seed(seed: int) -> None:
    pass


manual_seed_all = manual_seed


def seed() -> None:
    pass


seed_all = seed


def initial_seed() -> int:
    return 0


def set_compile_mode(jit_compile: bool = False) -> None:
    pass


#: torch_npu.npu.config (allow_internal_format and the like: accepted, without effect)
config = types.SimpleNamespace(allow_internal_format=False)
