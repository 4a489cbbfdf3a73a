"""The stand-in ``torch_npu.contrib.transfer_to_npu``: importing it makes a CUDA script an NPU
script, as Ascend's migration guide tells CUDA users (one line at the top of the script).

What it changes, as the real module does (``torch_npu/contrib/transfer_to_npu.py``): a
``"cuda"`` device (a string, a ``torch.device`` or a ``device=`` / ``map_location=``
keyword) becomes ``"npu"`` in torch's tensor factories, ``torch.load``, ``Tensor.to`` and
``Tensor.new_*``, ``Module.to``; ``Tensor.cuda`` and ``Module.cuda`` are ``.npu``;
``Tensor.is_cuda`` answers for the NPU; the ``torch.cuda`` functions a script calls
(``is_available``, ``device_count``, ``set_device``, the memory statistics, streams, ...)
are ``torch.npu``'s; ``torch.autocast("cuda")`` is autocast on the NPU; and
``init_process_group(backend="nccl")`` is HCCL.

DECISION: each change is recorded and undone when the estimate ends
(:func:`undo`, called by :func:`~ascend_memsim.torchsim.standin.uninstall_torch_npu`, which
also forgets the module), so the process's torch is as it was and the next estimate's import
runs the module again. ``torch.device("cuda")`` itself is not rewritten (torch's C type), but
every call that takes it is.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any

import torch

from .._missing import not_modelled
from ..npu import active

__all__: list[str] = []

__getattr__ = not_modelled("torch_npu.contrib.transfer_to_npu")

#: torch functions whose device arguments are rewritten
_TORCH_FUNCTIONS = (
    "empty", "zeros", "ones", "full", "rand", "randn", "randint", "randperm", "arange",
    "range", "linspace", "logspace", "eye", "tensor", "as_tensor", "empty_strided",
    "empty_like", "zeros_like", "ones_like", "full_like", "rand_like", "randn_like",
    "randint_like", "normal", "scalar_tensor", "tril_indices", "triu_indices", "load",
    "set_default_device", "frombuffer", "hann_window", "hamming_window", "bartlett_window",
    "blackman_window", "kaiser_window",
)
_TENSOR_METHODS = ("to", "new_empty", "new_empty_strided", "new_full", "new_ones",
                   "new_tensor", "new_zeros")
_MODULE_METHODS = ("to", "to_empty")
#: torch.cuda names answered by torch.npu's function of the same name
_CUDA_NAMES = (
    "is_available", "device_count", "current_device", "set_device", "synchronize",
    "get_device_name", "get_device_properties", "get_device_capability", "mem_get_info",
    "memory_stats", "memory_summary", "memory_allocated", "max_memory_allocated",
    "memory_reserved", "max_memory_reserved", "reset_peak_memory_stats",
    "reset_max_memory_allocated", "reset_max_memory_cached", "empty_cache",
    "set_per_process_memory_fraction", "utilization", "can_device_access_peer",
    "current_stream", "default_stream", "stream", "set_stream", "Stream", "Event", "device",
    "is_bf16_supported", "manual_seed", "manual_seed_all", "seed", "seed_all",
    "initial_seed", "get_rng_state", "set_rng_state", "get_rng_state_all",
    "set_rng_state_all", "is_initialized", "init", "caching_allocator_alloc",
    "caching_allocator_delete", "ipc_collect",
)
_DEVICE_KEYWORDS = ("device", "device_type", "map_location", "device_id")

#: what apply() replaced: (owner, attribute, the value before), undone in reverse
_applied: list[tuple[Any, str, Any]] = []


_CUDA_DEVICE = re.compile(r"cuda(:\d+)?")


def _npu(value: Any) -> Any:
    """``value`` with a CUDA device made the NPU (other values, a file name with "cuda" in
    it among them, as they are)."""
    if isinstance(value, str) and _CUDA_DEVICE.fullmatch(value):
        return "npu" + value[4:]
    if isinstance(value, torch.device) and value.type == "cuda":
        return torch.device("npu", value.index)
    if isinstance(value, dict):
        return {_npu(k): _npu(v) for k, v in value.items()}
    return value


def _on_npu(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        args = tuple(_npu(a) if isinstance(a, (str, torch.device)) else a for a in args)
        for key in _DEVICE_KEYWORDS:
            if key in kwargs:
                kwargs[key] = _npu(kwargs[key])
        return fn(*args, **kwargs)

    return wrapper


def _replace(owner: Any, name: str, value: Any) -> None:
    _applied.append((owner, name, owner.__dict__.get(name, _ABSENT)
                     if isinstance(owner, type) else getattr(owner, name, _ABSENT)))
    setattr(owner, name, value)


_ABSENT = object()


def _hccl(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if args and isinstance(args[0], str):
            args = (args[0].replace("nccl", "hccl"),) + args[1:]
        if isinstance(kwargs.get("backend"), str):
            kwargs["backend"] = kwargs["backend"].replace("nccl", "hccl")
        return fn(*args, **kwargs)

    return wrapper


def apply() -> None:
    """Make CUDA calls NPU calls (what importing the real module does); once per estimate."""
    if _applied:
        return
    for name in _TORCH_FUNCTIONS:
        if hasattr(torch, name):
            _replace(torch, name, _on_npu(getattr(torch, name)))
    for name in _TENSOR_METHODS:
        _replace(torch.Tensor, name, _on_npu(getattr(torch.Tensor, name)))
    for name in _MODULE_METHODS:
        _replace(torch.nn.Module, name, _on_npu(getattr(torch.nn.Module, name)))
    # the methods torch generates for the renamed PrivateUse1 backend (backend.py)
    tensor: Any = torch.Tensor
    module: Any = torch.nn.Module
    _replace(torch.Tensor, "cuda", tensor.npu)
    _replace(torch.Tensor, "is_cuda", tensor.is_npu)
    _replace(torch.nn.Module, "cuda", module.npu)
    npu = getattr(torch, "npu")  # noqa: B009  (registered at run time: backend.py)
    for name in _CUDA_NAMES:
        if hasattr(npu, name):
            _replace(torch.cuda, name, getattr(npu, name))
    _replace(torch.amp.autocast_mode.autocast, "__init__",
             _on_npu(torch.amp.autocast_mode.autocast.__init__))
    if torch.distributed.is_available():
        _replace(torch.distributed, "init_process_group",
                 _on_npu(_hccl(torch.distributed.init_process_group)))
        _replace(torch.distributed, "is_nccl_available", lambda: True)
    session = active()
    if session is not None:
        # undone before the session puts back what it patched (torch.load is both's)
        session.on_exit(undo)


def undo() -> None:
    """Put back everything :func:`apply` replaced."""
    while _applied:
        owner, name, before = _applied.pop()
        if before is _ABSENT:
            delattr(owner, name)
        else:
            setattr(owner, name, before)


# importing the module is what applies it, in an estimate (outside one there is no NPU)
if active() is not None:
    apply()
