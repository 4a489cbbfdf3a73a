"""The stand-in ``torch_npu.npu.utils`` (``torch_npu/npu/utils.py``): the device functions it
re-exports, the CANN version the simulated runtime models, the overflow checks, the model
obfuscation operators and ``current_blas_handle``.

Overflow (``get_npu_overflow_flag``, ``clear_npu_overflow_flag``, ``npu_check_overflow``):
every product the simulator models keeps inf and NaN (:func:`is_support_inf_nan`), so
torch_npu checks a value for overflow on the host unless ``FORCE_OVERFLOW_CHECK=1`` with CANN
9.1.0 or later (:func:`is_force_overflow_check`) makes it read the device's float status
registers (``npu_get_float_status``: a float32 status tensor of 8 and an int32 result of 8
on the device, the result's first element read on the host; op-plugin
``FloatStatusKernelNpu.cpp``). A read of a value is a read of a fake tensor's value, given
by the estimate's ``--item-value`` (:mod:`...limits`).
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import torch

from ....allocators.rules import DEFAULT_CANN, cann_tuple
from .._missing import not_modelled
from ._state import _session, active

#: the device functions torch_npu.npu.utils holds and torch_npu.npu re-exports; here they are
#: read from torch_npu.npu, where the stand-in keeps them (no import cycle)
_FROM_NPU = ("StreamContext", "current_device", "current_stream", "default_stream", "device",
             "device_of", "ipc_collect", "is_bf16_supported", "set_device", "set_stream",
             "stream", "synchronize", "check_uce_in_memory", "get_sync_debug_mode",
             "set_sync_debug_mode", "get_task_queue_enable", "set_task_queue_enable",
             "set_op_timeout_ms", "stress_detect", "init_dump", "set_dump", "finalize_dump")

__all__ = [*_FROM_NPU, "get_cann_version", "is_support_inf_nan", "is_force_overflow_check",
           "get_npu_overflow_flag", "clear_npu_overflow_flag", "npu_check_overflow",
           "current_blas_handle", "obfuscation_initialize", "obfuscation_finalize",
           "obfuscation_calculate"]

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


def is_force_overflow_check() -> bool:
    """Whether ``FORCE_OVERFLOW_CHECK=1`` and CANN 9.1.0 or later make the overflow checks
    read the device's status registers (torch_npu's ``_is_gte_cann_version("9.1.0")``)."""
    return (os.environ.get("FORCE_OVERFLOW_CHECK", "0") == "1"
            and cann_tuple(get_cann_version()) >= (9, 1, 0))


def _host_check() -> bool:
    return is_support_inf_nan() and not is_force_overflow_check()


def get_npu_overflow_flag() -> bool:
    """Whether the device's float status says an overflow happened.

    Raises:
        RuntimeError: inf and NaN are kept and the check is not forced (torch_npu tells to
            use ``npu_check_overflow``).
    """
    if _host_check():
        raise RuntimeError("Unsupported api when soc_version >= Ascend910B1, please use "
                           "npu_check_overflow")
    _session()
    status = torch.zeros(8, device="npu")
    # npu_get_float_status on Ascend910B1 and later: an int32 tensor of 8 (NPUGetFloatStatusV2)
    result = torch.empty(8, dtype=torch.int32, device=status.device)
    return bool(result.cpu()[0] != 0)


def clear_npu_overflow_flag() -> None:
    """Clear the device's float status (a warning, and nothing, when the check is on the
    host)."""
    if _host_check():
        warnings.warn("When soc_version >= Ascend910B1, clear_npu_overflow_flag is useless. "
                      "Please remove it.", stacklevel=2)
        return
    _session()
    status = torch.zeros(8, device="npu")
    # npu_clear_float_status: a float32 tensor of 8 like its input
    torch.empty_like(status)


def npu_check_overflow(grad: Any) -> bool:
    """Whether ``grad`` (a float or a tensor) overflowed: inf or NaN in its sum, checked on
    the host; the device's status registers when the check is forced.

    Raises:
        RuntimeError: ``grad`` is neither a float nor a tensor (host check).
    """
    if _host_check():
        if isinstance(grad, float):
            total = grad
        elif isinstance(grad, torch.Tensor):
            total = float(grad.float().sum())
        else:
            raise RuntimeError(f"Unsupported type: {type(grad).__name__} (npu_check_overflow "
                               f"takes a float or a tensor)")
        return total in (float("inf"), -float("inf")) or total != total
    flag = get_npu_overflow_flag()
    if flag:
        clear_npu_overflow_flag()
    return flag


def current_blas_handle() -> None:
    """None, with torch_npu's warning: an NPU has no BLAS handle."""
    warnings.warn("NPU does not use blas handle.", stacklevel=2)


# -- model obfuscation (PMCC): op-plugin's Obfuscation*KernelNpuOpApi.cpp ---------------------

_OBF_DTYPES = (torch.float16, torch.float32, torch.int8, torch.bfloat16)


def obfuscation_initialize(hidden_size: int, tp_rank: int, cmd: int, *, data_type: Any = None,
                           model_obf_seed_id: int = 0, data_obf_seed_id: int = 0,
                           thread_num: int = 4, obf_coefficient: float = 1.0) -> torch.Tensor:
    """Connect to the obfuscation engine: its socket, an int32 tensor of one element on the
    device (``ObfuscationInitializeKernelNpuOpApi.cpp``).

    Raises:
        RuntimeError: no ``data_type`` (op-plugin: "data_type cannot be empty").
        TypeError: an argument of another type than the schema's.
    """
    for name, value in (("hidden_size", hidden_size), ("tp_rank", tp_rank), ("cmd", cmd),
                        ("model_obf_seed_id", model_obf_seed_id),
                        ("data_obf_seed_id", data_obf_seed_id), ("thread_num", thread_num)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if isinstance(obf_coefficient, bool) or not isinstance(obf_coefficient, (int, float)):
        raise TypeError(f"obf_coefficient must be a float, not {type(obf_coefficient).__name__}")
    if data_type is None:
        raise RuntimeError("data_type cannot be empty")
    if not isinstance(data_type, torch.dtype):
        raise TypeError(f"data_type must be a torch.dtype, not {type(data_type).__name__}")
    _session()
    return torch.empty(1, dtype=torch.int32, device="npu")


def obfuscation_finalize(fd_to_close: torch.Tensor) -> torch.Tensor:
    """Close the engine's socket: a tensor like ``fd_to_close``
    (``ObfuscationFinalizeKernelNpuOpApi.cpp``)."""
    if not isinstance(fd_to_close, torch.Tensor):
        raise TypeError(f"fd_to_close must be a tensor, not {type(fd_to_close).__name__}")
    _session()
    return torch.empty_like(fd_to_close)


def obfuscation_calculate(fd: torch.Tensor, x: torch.Tensor, param: torch.Tensor, *,
                          obf_coefficient: float = 1.0) -> torch.Tensor:
    """Obfuscate ``x`` through the engine: a tensor like ``x``
    (``ObfuscationCalculateKernelNpuOpApi.cpp``).

    Raises:
        TypeError: ``fd``, ``x`` or ``param`` is not a tensor, or ``x``'s dtype is not one
            the engine takes (float16, float32, bfloat16, int8).
    """
    for name, value in (("fd", fd), ("x", x), ("param", param)):
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"{name} must be a tensor, not {type(value).__name__}")
    if x.dtype not in _OBF_DTYPES:
        raise TypeError(f"obfuscation_calculate takes float16, float32, bfloat16 or int8, "
                        f"not {x.dtype}")
    _session()
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)

