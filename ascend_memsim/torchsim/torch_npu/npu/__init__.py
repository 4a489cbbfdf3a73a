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
:mod:`.limits`, and so is device fault recovery (``stop_device``, ``restart_device``, see
:mod:`._recovery`); the calls of a capture (task groups) fail as outside one, see
:mod:`.graphs`. The calls that see the device's memory (``mem_get_info``,
``get_device_properties``, ``set_per_process_memory_fraction``, ``empty_cache``) are told to
the session (:meth:`~.session.Session.asked`): a search by replays checks such a script by
running it.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator
from typing import Any

import torch

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
    "is_current_stream_capturing", "utilization", "get_device_capability",
    "can_device_access_peer", "device_of", "StreamContext", "ipc_collect", "set_option",
    "get_rng_state", "set_rng_state", "get_rng_state_all", "set_rng_state_all",
    "memory_cached", "max_memory_cached",
    "get_per_process_memory_fraction", "caching_allocator_alloc", "caching_allocator_delete",
    "get_autocast_dtype", "set_autocast_dtype", "is_autocast_enabled", "set_autocast_enabled",
    "utils", "set_task_queue_enable", "get_task_queue_enable", "set_sync_debug_mode",
    "get_sync_debug_mode", "set_op_timeout_ms", "set_deterministic_level",
    "enable_deterministic_with_backward", "disable_deterministic_with_backward",
    "check_uce_in_memory", "get_npu_overflow_flag", "clear_npu_overflow_flag",
    "stress_detect", "ExternalStream", "SyncLaunchStream", "get_allocator_backend",
    "ExternalEvent", "CubeMathType", "matmul", "conv", "use_compatible_impl",
    "are_compatible_impl_enabled", "current_blas_handle", "obfuscation_initialize",
    "obfuscation_finalize", "obfuscation_calculate", "graph_task_group_begin",
    "graph_task_group_end", "graph_task_update_begin", "graph_task_update_end",
    "super_kernel_scope_begin", "super_kernel_scope_end", "NpuGraphOpHandler",
    "register_npu_graph_handler", "mstx", "npurt", "stop_device", "restart_device",
    "MemPool", "use_mem_pool", "NPUPluggableAllocator", "change_current_allocator",
    "empty_virt_addr_cache", "reset_accumulated_memory_stats", "host_empty_cache",
    "host_memory_stats", "host_memory_stats_as_nested_dict",
    "reset_accumulated_host_memory_stats", "reset_peak_host_memory_stats",
]


from ._state import (
    _check,
    _index,
    _own,
    _session,
    active,
    set_active,  # noqa: F401  (the session sets itself through torch.npu)
)
from .memory import (  # noqa: F401  (the private three: torch_npu.npu._record_memory_history ...)
    MemPool,
    NPUPluggableAllocator,
    _dump_snapshot,
    _record_memory_history,
    _snapshot,
    caching_allocator_alloc,
    caching_allocator_delete,
    change_current_allocator,
    empty_cache,
    empty_virt_addr_cache,
    get_allocator_backend,
    get_per_process_memory_fraction,
    host_empty_cache,
    host_memory_stats,
    host_memory_stats_as_nested_dict,
    max_memory_allocated,
    max_memory_cached,
    max_memory_reserved,
    memory_allocated,
    memory_cached,
    memory_reserved,
    memory_snapshot,
    memory_stats,
    memory_stats_as_nested_dict,
    memory_summary,
    reset_accumulated_host_memory_stats,
    reset_accumulated_memory_stats,
    reset_max_memory_allocated,
    reset_max_memory_cached,
    reset_peak_host_memory_stats,
    reset_peak_memory_stats,
    set_per_process_memory_fraction,
    use_mem_pool,
)

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

from .streams import (  # noqa: E402
    Event,
    ExternalEvent,
    ExternalStream,
    Stream,
    SyncLaunchStream,
)


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


class device_of(device):
    """torch_npu.npu.device_of: the device of a tensor, as a context manager."""

    def __init__(self, obj: Any) -> None:
        super().__init__(obj.device if obj.device.type == "npu" else None)


#: torch_npu.npu.StreamContext: what ``stream(s)`` enters
StreamContext = stream


def utilization(device: Any = None) -> int:
    """The AI Core's busy share in percent: 0, since fake tensors run no work."""
    _check(device)
    return 0


def get_device_capability(device: Any = None) -> tuple[int, int] | None:
    """As torch_npu (``torch_npu/npu/__init__.py``): ``TORCH_NPU_DEVICE_CAPABILITY``
    ("major.minor") when set, else None, since an NPU has no CUDA capability."""
    import os

    value = os.environ.get("TORCH_NPU_DEVICE_CAPABILITY")
    if not value:
        return None
    major, _, minor = value.partition(".")
    return int(major), int(minor or 0)


def can_device_access_peer(device_id: Any, peer_device_id: Any) -> bool:
    """Whether two cards of the node reach each other's memory (HCCS): True for two
    different cards of the simulated node."""
    count = device_count()
    a, b = _index(device_id), _index(peer_device_id)
    if not (0 <= a < count and 0 <= b < count):
        raise AssertionError("Invalid device id")
    return a != b


def ipc_collect() -> None:
    """Nothing is shared between processes in an estimate: nothing to collect."""


def set_option(option: dict) -> None:
    """torch_npu.npu.set_option: kept in the option table (:mod:`._options`: what
    ``matmul.allow_hf32`` and the like read back), without effect on memory
    (``npu_config.py`` refuses anything but a dict)."""
    if not isinstance(option, dict):
        raise TypeError("npu option must be a dict.")
    _options.set_options(option)


# -- random numbers: each card's default generator (torch_npu/npu/random.py) --------------

from ._generators import default_generators  # noqa: E402,F401  (torch.npu.default_generators)
from .random import (  # noqa: E402
    get_rng_state,
    get_rng_state_all,
    initial_seed,
    manual_seed,
    manual_seed_all,
    seed,
    seed_all,
    set_rng_state,
    set_rng_state_all,
)

# -- amp, seeds, settings --------------------------------------------------------------------

def get_amp_supported_dtype() -> list:
    """What torch.autocast("npu") may cast to (torch asks the device module)."""
    return [torch.float16, torch.bfloat16]


def is_bf16_supported() -> bool:
    return True


def get_autocast_dtype() -> torch.dtype:
    return torch.get_autocast_dtype("npu")


def set_autocast_dtype(dtype: torch.dtype) -> None:
    _keep(get_autocast_dtype, lambda d: torch.set_autocast_dtype("npu", d))
    torch.set_autocast_dtype("npu", dtype)


def is_autocast_enabled() -> bool:
    return torch.is_autocast_enabled("npu")


def set_autocast_enabled(enabled: bool) -> None:
    _keep(is_autocast_enabled, lambda e: torch.set_autocast_enabled("npu", e))
    torch.set_autocast_enabled("npu", enabled)


def set_compile_mode(jit_compile: bool = False) -> None:
    pass


#: torch_npu.npu.config (allow_internal_format and the like: accepted, without effect)
config = types.SimpleNamespace(allow_internal_format=False)


# -- switches that change no memory, and one that does ---------------------------------------

def set_task_queue_enable(mode: int) -> None:
    """TASK_QUEUE_ENABLE set from the script (torch_npu's ``set_task_queue_enable``): where
    operators' workspaces come from from now on (0, 1: the caching allocator; 2:
    NPUWorkspaceAllocator)."""
    if isinstance(mode, bool) or mode not in (0, 1, 2):
        raise ValueError("TASK_QUEUE_ENABLE should be 0, 1 or 2")
    session = _session()
    # it wins over the environment, which is read at the first allocation
    session.startup.task_queue = session.task_queue = mode
    session.startup.sources["task_queue"] = "torch_npu.npu.set_task_queue_enable"


def get_task_queue_enable() -> int:
    return int(_session().task_queue)


_SYNC_DEBUG = {"default": 0, "warn": 1, "error": 2}
_sync_debug = [0]


def set_sync_debug_mode(debug_mode: int | str) -> None:
    """How a synchronizing call is reported (time, not memory): kept."""
    if isinstance(debug_mode, str):
        if debug_mode not in _SYNC_DEBUG:
            raise RuntimeError("invalid value of debug_mode, expected one of "
                               "`default`, `warn`, `error`")
        debug_mode = _SYNC_DEBUG[debug_mode]
    _sync_debug[0] = int(debug_mode)


def get_sync_debug_mode() -> int:
    return _sync_debug[0]


def set_op_timeout_ms(timeout: int) -> None:
    """Operators' execution timeout: nothing runs long in an estimate."""


def set_deterministic_level(level: int) -> None:
    """Deterministic operator implementations (the same memory in the model): as torch's
    ``use_deterministic_algorithms``, put back when the estimate ends."""
    _keep(torch.are_deterministic_algorithms_enabled, torch.use_deterministic_algorithms)
    torch.use_deterministic_algorithms(bool(level))


def _keep(get: Any, put: Any) -> None:
    """Put back, when the estimate ends, a torch setting the script changes here."""
    before = get()
    _session().on_exit(lambda: put(before))


def reset() -> None:
    """What the stand-in's modules keep, as a new process has it (an estimate's start)."""
    _generators.reset()
    _sync_debug[0] = 0
    npu_config.reset()
    _options.reset()
    graphs.reset()
    aclnn.allow_hf32 = False


def enable_deterministic_with_backward(tensor: torch.Tensor) -> torch.Tensor:
    """Marks where deterministic computation starts, forward and backward: the tensor."""
    return tensor


disable_deterministic_with_backward = enable_deterministic_with_backward


def check_uce_in_memory(device_id: int) -> int:
    """Uncorrectable memory errors: 0, none (the simulated HBM has no faults here)."""
    return 0


def stress_detect(mode: int = 0) -> int:
    """The AI cores' self test: 0, passed."""
    return 0


def npurt() -> types.ModuleType:
    """The raw runtime calls (``npuHostRegister``, ``npuHostUnregister``, ``npuStreamCreate``,
    ``npuStreamDestroy``), answered by the simulated runtime (:mod:`._npurt`).

    Raises:
        RuntimeError: outside an estimate (no NPU).
    """
    _session()
    from . import _npurt

    return _npurt


from .._missing import not_modelled  # noqa: E402
from . import (  # noqa: E402
    _generators,
    _options,
    _typed,
    aclnn,
    amp,
    graphs,
    memory,
    npu_config,
    random,  # noqa: F401  (torch_npu.npu.random, an attribute as in torch_npu)
    utils,
)
from ._options import (  # noqa: E402
    CubeMathType,
    are_compatible_impl_enabled,
    conv,
    matmul,
    use_compatible_impl,
)
from ._recovery import restart_device, stop_device  # noqa: E402
from ._typed import *  # noqa: E402, F403  (BFloat16Tensor, FloatStorage, ...)
from .graphs import (  # noqa: E402
    NPUGraph,
    NpuGraphOpHandler,
    graph,
    graph_pool_handle,
    graph_task_group_begin,
    graph_task_group_end,
    graph_task_update_begin,
    graph_task_update_end,
    is_current_stream_capturing,
    make_graphed_callables,
    register_npu_graph_handler,
    super_kernel_scope_begin,
    super_kernel_scope_end,
)
from .mstx import mstx  # noqa: E402  (the class: torch_npu.npu.mstx.mark(...))
from .npu_config import *  # noqa: E402, F403  (set_dump, set_device_limit, ...)
from .utils import (  # noqa: E402
    clear_npu_overflow_flag,
    current_blas_handle,
    get_npu_overflow_flag,
    obfuscation_calculate,
    obfuscation_finalize,
    obfuscation_initialize,
)

__all__ += [*npu_config.__all__, *_typed.__all__]

__getattr__ = not_modelled("torch_npu.npu")
