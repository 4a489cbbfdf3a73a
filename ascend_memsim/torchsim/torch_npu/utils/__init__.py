"""The stand-in ``torch_npu.utils``: the CANN version, thread affinity (no effect), combined
tensors (one flat buffer holding several tensors, as the fused optimizers make),
``save_async`` and the flop counter (:mod:`.flops_count`)."""

from __future__ import annotations

from typing import Any

import torch

from .._missing import not_modelled
from ..npu.utils import get_cann_version
from .flops_count import FlopsCounter

__all__ = ["get_cann_version", "set_thread_affinity", "reset_thread_affinity",
           "npu_combine_tensors", "is_combined_tensor_valid", "get_part_combined_tensor",
           "save_async", "FlopsCounter"]

__getattr__ = not_modelled("torch_npu.utils")


def set_thread_affinity(core_range: Any = None) -> None:
    """Binds the process's threads to cores on the machine: no effect on device memory."""


def reset_thread_affinity() -> None:
    """Undoes :func:`set_thread_affinity`: no effect on device memory."""


def npu_combine_tensors(list_of_tensor: list, require_copy_value: bool = True) -> Any:
    """One flat tensor holding every tensor's elements (a new storage of their total size),
    or None for an empty list."""
    tensors = [t for t in list_of_tensor if t is not None]
    if not tensors:
        return None
    return torch.cat([t.detach().reshape(-1) for t in tensors])


def is_combined_tensor_valid(combined_tensor: Any, list_of_tensor: list) -> bool:
    """Whether ``combined_tensor`` holds exactly the elements of the tensors."""
    if combined_tensor is None:
        return False
    return combined_tensor.numel() == sum(t.numel() for t in list_of_tensor if t is not None)


def get_part_combined_tensor(combined_tensor: Any, index: int, size: int) -> Any:
    """A view of ``size`` elements of the combined tensor from element ``index``."""
    if combined_tensor is None or index + size > combined_tensor.numel():
        raise ValueError(f"part [{index}, {index + size}) is outside the combined tensor")
    return combined_tensor[index:index + size]


def save_async(obj: Any, f: Any, *args: Any, **kwargs: Any) -> None:
    """torch_npu's asynchronous save: :func:`torch.save`, at once."""
    torch.save(obj, f, *args, **kwargs)
