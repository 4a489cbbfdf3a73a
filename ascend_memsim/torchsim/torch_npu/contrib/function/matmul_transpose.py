"""The stand-in ``torch_npu.contrib.function.matmul_transpose``: ``a @ b.transpose(-2, -1)``
with a backward of two ``npu_bmmV2`` products (``torch_npu/contrib/function/
_matmul_transpose.py``, ``MatmulApply``)."""

from __future__ import annotations

from typing import Any

import torch

from .._ops.dense import npu_bmmV2

__all__ = ["MatmulApply", "matmul_transpose"]


class MatmulApply(torch.autograd.Function):
    """``a @ b.transpose(-2, -1)``; keeps a and b for the backward."""

    @staticmethod
    def forward(ctx: Any, self: Any, mat2: Any) -> Any:
        ctx.save_for_backward(self, mat2)
        return torch.matmul(self, mat2.transpose(-2, -1)).detach()

    @staticmethod
    def backward(ctx: Any, grad: Any) -> tuple:
        self, mat2 = ctx.saved_tensors
        return npu_bmmV2(grad, mat2, []), npu_bmmV2(grad.transpose(-2, -1), self, [])


matmul_transpose = MatmulApply.apply
