"""The stand-in ``torch_npu.npu.utils`` (``torch_npu/npu/utils.py``): the device functions it
re-exports, and the CANN version the simulated runtime models."""

from __future__ import annotations

from ....allocators.rules import DEFAULT_CANN
from .._missing import not_modelled
from ._state import active

#: the device functions torch_npu.npu.utils holds and torch_npu.npu re-exports; here they are
#: read from torch_npu.npu, where the stand-in keeps them (no import cycle)
_FROM_NPU = ("StreamContext", "current_device", "current_stream", "default_stream", "device",
             "device_of", "ipc_collect", "is_bf16_supported", "set_device", "set_stream",
             "stream", "synchronize", "check_uce_in_memory", "clear_npu_overflow_flag",
             "get_npu_overflow_flag", "get_sync_debug_mode", "set_sync_debug_mode",
             "get_task_queue_enable", "set_task_queue_enable", "set_op_timeout_ms",
             "stress_detect", "init_dump", "set_dump", "finalize_dump")

__all__ = [*_FROM_NPU, "get_cann_version", "is_support_inf_nan"]

_missing = not_modelled("torch_npu.npu.utils")


def __getattr__(name: str) -> object:
    if name in _FROM_NPU:
        import importlib

        return getattr(importlib.import_module(__package__ or ""), name)
    return _missing(name)


_MODULES = ("CANN", "RUNTIME", "COMPILER", "HCCL", "TOOLKIT", "OPP", "OPP_KERNEL", "DRIVER")


def get_cann_version(module: str = "CANN") -> str:
    """The version of a CANN component: the CANN release whose caching-allocator rules the
    running estimate applies (``--cann``; outside one,
    :data:`~ascend_memsim.allocators.rules.DEFAULT_CANN`), for each module torch_npu names."""
    if module not in _MODULES:
        raise ValueError(f"module must be one of {list(_MODULES)}, got {module!r}")
    session = active()
    return DEFAULT_CANN if session is None else session.allocator.cann


def is_support_inf_nan() -> bool:
    """True: every product the simulator models (Atlas A2, A3, 950) keeps inf and NaN (the
    mode torch_npu asks ``_npu_is_support_inf_nan`` for; Atlas training series 910A did not)."""
    return True
