"""The stand-in ``torch_npu.contrib.function.index_op``: a boolean ``index_put`` written as
``torch.where`` (``torch_npu/contrib/function/index_op.py``)."""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["npu_fast_condition_index_put"]


def npu_fast_condition_index_put(x: Any, condition: Any, value: Any) -> Any:
    """``x`` with ``value`` where ``condition`` (bool) holds, as a new tensor: a tensor of
    ``value`` like ``x`` (zeros, ones, or zeros + value, as torch_npu makes it) and the
    ``torch.where`` result.

    Raises:
        TypeError: ``condition`` is not bool.
    """
    if condition.dtype != torch.bool:
        raise TypeError("Expected condition.dtype in [torch.bool]")
    if value == 0:
        fill = torch.zeros_like(x)
    elif value == 1:
        fill = torch.ones_like(x)
    else:
        fill = torch.zeros_like(x) + value
    return torch.where(condition, fill, x)
