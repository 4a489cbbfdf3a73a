"""torch_npu's dropout operators on the fake NPU, for ``torch_npu.contrib``: a mask made
ahead (``npu_dropout_gen_mask``), applied (``npu_dropout_do_mask``), and the fused
add-softmax-dropout of attention scores (``npu_dropout_with_add_softmax``).

Outputs (Ascend/op-plugin at 517f2e7d):

- ``npu_dropout_gen_mask(size, p)`` (``aclops/DropoutKernelNpu.cpp``): a bit mask, uint8
  (ceil(numel / 128) * 128 / 8,) for ``numel`` elements of ``size``;
- ``npu_dropout_do_mask(x, mask, p)``: (result like x, the mask itself); its derivative
  (``derivatives.yaml``) keeps the mask (``npu_dropout_backward(grad, result1, p)``, a
  gradient like grad);
- ``npu_dropout_with_add_softmax(x, x1, alpha, prob, dim)``
  (``aclops/DropoutWithAddSoftmaxKernelNpu.cpp``): (mask, softmax, dropout): a byte mask,
  uint8 (ceil(x1.numel() / 128) * 128,), one byte an element (the kernel's
  ``dropout_genmask``, not the meta registration's ``numel`` bytes), the softmax like x1
  and the result like x. Only the result is differentiable; its derivative keeps the mask
  and the softmax (result0, result1) and gives x the backward's result (like the softmax)
  and x1 the incoming gradient itself. DECISION: the mask is made on the current stream
  (torch_npu makes it on the secondary stream and records it on the current one), as
  :mod:`ascend_memsim.torchsim.fused` does for fusion attention's.

O(1) in the tensors' sizes: nothing is computed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["mask_bytes", "npu_dropout_gen_mask", "npu_dropout_do_mask", "npu_dropout_backward",
           "npu_dropout_with_add_softmax", "npu_dropout_with_add_softmax_backward"]

#: DropoutKernelNpu.cpp: LENGTH_DATA_ALIGN, LENGTH_BOLCK_ALIGN
_ALIGN, _BITS = 128, 8


def mask_bytes(numel: int) -> int:
    """The bytes of torch_npu's bit mask for ``numel`` elements: ceil(numel / 128) * 16."""
    return -(-numel // _ALIGN) * _ALIGN // _BITS


def npu_dropout_gen_mask(size: Sequence[int], p: float, *, dtype: Any = None,
                         layout: Any = None, device: Any = None,
                         pin_memory: Any = None) -> Any:
    """``torch_npu.npu_dropout_gen_mask``: the bit mask of a tensor of ``size``, on the NPU
    (``device``, the current NPU when None)."""
    return torch.empty(mask_bytes(math.prod(size)), dtype=torch.uint8,
                       device=device if device is not None else "npu")


class _DoMask(torch.autograd.Function):
    """npu_dropout_do_mask's autograd: keeps the mask."""

    @staticmethod
    def forward(ctx: Any, x: Any, mask: Any, p: float) -> Any:
        ctx.save_for_backward(mask)
        ctx.p = p
        return torch.empty_like(x)

    @staticmethod
    def backward(ctx: Any, grad: Any) -> tuple:
        (mask,) = ctx.saved_tensors
        return npu_dropout_backward(grad, mask, ctx.p), None, None


def npu_dropout_do_mask(self: Any, mask: Any, p: float) -> tuple:
    """``torch_npu.npu_dropout_do_mask``: (``self`` with the mask applied, the mask)."""
    return _DoMask.apply(self, mask, p), mask


def npu_dropout_backward(grad_output: Any, mask: Any, p: float) -> Any:
    """``torch_npu.npu_dropout_backward``: the input's gradient, like ``grad_output``."""
    return torch.empty_like(grad_output)


class _WithAddSoftmax(torch.autograd.Function):
    """npu_dropout_with_add_softmax's autograd: keeps the mask and the softmax."""

    @staticmethod
    def forward(ctx: Any, x: Any, x1: Any, alpha: Any, prob: float, dim: int) -> tuple:
        mask = x1.new_empty((-(-x1.numel() // _ALIGN) * _ALIGN,), dtype=torch.uint8)
        softmax = torch.empty_like(x1)
        result = torch.empty_like(x)
        ctx.save_for_backward(mask, softmax)
        ctx.args = (alpha, prob, dim)
        ctx.mark_non_differentiable(mask, softmax)
        # the generated node gets no gradient for the outputs that have none
        ctx.set_materialize_grads(False)
        return mask, softmax, result

    @staticmethod
    def backward(ctx: Any, _mask: Any, _softmax: Any, grad: Any) -> tuple:
        if grad is None:
            return None, None, None, None, None
        mask, softmax = ctx.saved_tensors
        dx, dx1 = npu_dropout_with_add_softmax_backward(grad, mask, softmax, *ctx.args)
        return dx, dx1, None, None, None


def npu_dropout_with_add_softmax(self: Any, x1: Any, alpha: Any, prob: float,
                                 dim: int) -> tuple:
    """``torch_npu.npu_dropout_with_add_softmax``: (byte mask, softmax like x1, result like
    ``self``)."""
    return _WithAddSoftmax.apply(self, x1, alpha, prob, dim)


def npu_dropout_with_add_softmax_backward(grad: Any, mask: Any, softmax_out: Any, alpha: Any,
                                          prob: float, dim: int) -> tuple:
    """``torch_npu.npu_dropout_with_add_softmax_backward``: (a gradient like the softmax,
    ``grad`` itself)."""
    return torch.empty_like(softmax_out), grad
