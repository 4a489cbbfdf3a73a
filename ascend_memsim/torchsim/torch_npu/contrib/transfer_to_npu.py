"""The stand-in ``torch_npu.contrib.transfer_to_npu``: importing it makes a CUDA script an NPU
script, as Ascend's migration guide tells CUDA users (one line at the top of the script).

What it changes, as the real module does (``torch_npu/contrib/transfer_to_npu.py``): a
``"cuda"`` device (a string, a ``torch.device`` or a ``device=`` / ``map_location=``
keyword) becomes ``"npu"`` in torch's tensor factories, ``torch.load``, ``Tensor.to`` and
``Tensor.new_*``, ``Module.to``; ``Tensor.cuda`` and ``Module.cuda`` are ``.npu``;
``Tensor.is_cuda`` answers for the NPU; the ``torch.cuda`` functions a script calls
(``is_available``, ``device_count``, ``set_device``, the memory statistics, streams, ...)
are ``torch.npu``'s, and so are ``torch.cuda.random``'s and ``torch.cuda.default_generators``;
``torch.autocast("cuda")`` is autocast on the NPU; and
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

#: what apply() replaced: (owner, attribute, the value before, ours), undone in reverse
_applied: list[tuple[Any, str, Any, Any]] = []


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


def _current(owner: Any, name: str) -> Any:
    return (owner.__dict__.get(name, _ABSENT) if isinstance(owner, type)
            else getattr(owner, name, _ABSENT))


def _replace(owner: Any, name: str, value: Any) -> None:
    _applied.append((owner, name, _current(owner, name), value))
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
    # torch.cuda.random's names are torch_npu.npu.random's, their device argument "cuda" the
    # NPU, and the cards' default generators are the NPU's (the real module's _patch_cuda,
    # _device_wrapper(torch.cuda.random, [...]) and _update_cuda_default_generators):
    # Megatron-core's RNG tracker sets a card's state through both
    for name in npu.random.__all__:
        value = getattr(npu.random, name)
        if name in ("get_rng_state", "set_rng_state"):
            value = _on_npu(value)
            _replace(torch.cuda, name, value)
        _replace(torch.cuda.random, name, value)
    _replace(torch.cuda, "default_generators", npu.default_generators)
    # the legacy typed tensors (torch.cuda.FloatTensor, ...) are torch.npu's, as the real
    # module's _patch_cuda gives torch.cuda every name of torch_npu.npu.__all__ (Megatron-core
    # tells float tensors by isinstance against them: megatron/core/transformer/module.py)
    for name in npu._typed.__all__:
        if name.endswith("Tensor"):
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
    """Put back everything :func:`apply` replaced and is still its own: a name that another
    patch of the run has put back already (a distributed estimate's ``init_process_group``
    and ``Tensor.to``, put back when the rank's process group goes, before this undo) is
    left as that patch put it, not set to that patch's replacement."""
    while _applied:
        owner, name, before, ours = _applied.pop()
        if _current(owner, name) is not ours:
            continue
        if before is _ABSENT:
            delattr(owner, name)
        else:
            setattr(owner, name, before)


# importing the module is what applies it, in an estimate (outside one there is no NPU)
if active() is not None:
    apply()
