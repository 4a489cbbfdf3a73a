"""The stand-in ``torch_npu.contrib.function.roll``: Swin Transformer's roll of an
(N, H, W, C) tensor over H and W as an ``index_select`` of H * W rows
(``torch_npu/contrib/function/roll.py``).

``roll`` keeps, for each (H, W, shifts, dims) it has seen, the forward and backward row
indices, int64 (H * W,) each, on the input's device: device memory held from the first call
on (for the estimate: :mod:`.._state`). The forward's index_select output is the result; its
autograd keeps the input (torch_npu puts it on the context, for its shape) and the backward
index.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from .._state import forget_at_exit

__all__ = ["roll"]


class _RollWithIndexSelect(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Any, index_fp: Any, index_bp: Any) -> Any:
        n, h, w, c = x.shape
        # as torch_npu does: the input lives as long as the graph
        ctx.input1 = x
        ctx.index_bp = index_bp
        return x.reshape(n, h * w, c).index_select(1, index_fp).reshape(n, h, w, c)

    @staticmethod
    def backward(ctx: Any, grad: Any) -> tuple:
        n, h, w, c = ctx.input1.shape
        rows = grad.reshape(n, h * w, c).index_select(1, ctx.index_bp)
        return rows.reshape(n, h, w, c), None, None


def _indices(h: int, w: int, shifts: Sequence[int], device: Any) -> tuple:
    """The rows of the rolled (H, W) grid (forward) and of its inverse roll (backward)."""
    grid = torch.arange(h * w).reshape(h, w)
    forward = torch.roll(grid, shifts=tuple(shifts), dims=(0, 1)).reshape(-1)
    backward = torch.roll(grid, shifts=tuple(-s for s in shifts), dims=(0, 1)).reshape(-1)
    return forward.to(device), backward.to(device)


class _Roll:
    """``roll(x, shifts, dims)``: ``x`` (N, H, W, C) rolled by ``shifts`` over H and W.

    Raises:
        ValueError: x is not 4-D, or shifts or dims has not two entries.
    """

    def __init__(self) -> None:
        self.index_dict: dict[tuple, tuple] = {}

    def __call__(self, x: Any, shifts: Sequence[int], dims: Sequence[int]) -> Any:
        if x.dim() != 4:
            raise ValueError("Expected x.dim() == 4")
        if len(shifts) != 2:
            raise ValueError("Expected len(shifts) == 2")
        if len(dims) != 2:
            raise ValueError("Expected len(dims) == 2")
        _n, h, w, _c = x.shape
        key = (h, w, tuple(shifts), tuple(dims))
        if key not in self.index_dict:
            forget_at_exit(self, self.index_dict.clear)
            self.index_dict[key] = _indices(h, w, shifts, x.device)
        index_fp, index_bp = self.index_dict[key]
        return _RollWithIndexSelect.apply(x, index_fp, index_bp)


roll = _Roll()
