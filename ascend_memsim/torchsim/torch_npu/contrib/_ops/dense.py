"""torch_npu's matrix, loss and quantisation operators on the fake NPU, for
``torch_npu.contrib``: ``npu_linear``, ``npu_bmmV2``, ``npu_one_hot``,
``npu_softmax_cross_entropy_with_logits``, ``npu_trans_quant_param`` and
``npu_weight_quant_batchmatmul``.

Outputs (Ascend/op-plugin at 517f2e7d, ``op_plugin/ops/``; the torch_npu 2.14.0 wheel's
``_meta_registrations.py``):

- ``npu_linear(x (M, K), w (N, K), bias)`` (``opapi/LinearKernelNpuOpApi.cpp``, the aclnn
  path; the aclop one's FRACTAL_NZ copy of x is not modelled): (M, N) in x's dtype; its
  derivative keeps x and w, and ``npu_linear_backward`` gives gradients of their shapes in
  the gradient's dtype (the bias's is the gradient itself, which autograd sums to the
  bias's shape);
- ``npu_bmmV2(a (..., M, K), b (..., K, N), output_sizes)`` (``aclops/BmmV2KernelNpu.cpp``):
  (broadcast batch..., M, N) in a's dtype;
- ``npu_one_hot(x, num_classes, depth, on_value, off_value)`` (``aclops/OnehotNpu.cpp``, the
  path below Ascend950): x's shape + (depth,) float32; the kernel makes an int32 copy of a
  non-int32 x and two (1,) float32 tensors for the on and off values, for the call.
  ESTIMATE: Ascend950's path (``opapi/OneHotKernelNpuOpApi.cpp``, its dtype the on value's)
  is not modelled: float32 on every product;
- ``npu_softmax_cross_entropy_with_logits(x (N, C), labels)`` (``aclops/
  SoftmaxCrossEntropyWithLogitsKernelNpu.cpp``): the loss (N,) in x's dtype (the kernel's;
  the meta registration says float32); the kernel also makes the gradient (N, C), dropped,
  for the call. Its derivative keeps x and labels, and the backward makes loss and gradient
  again, then returns gradient * grad.unsqueeze(-1);
- ``npu_trans_quant_param(scale, offset)`` (``opapi/TransQuantParamKernelNpuOpApi.cpp``): int64
  of scale's shape (of the longer of scale and offset for a 1-D scale);
- ``npu_weight_quant_batchmatmul(x (..., M, K), w (K, N), antiquant_scale, ...)``
  (``opapi/WeightQuantBatchMatmulV2KernelNpuOpApi.cpp``): (..., M, N) in x's dtype, int8
  with ``quant_scale``; an int32 or float32 w holds 8 int4 values an element (K or N times
  8, as it is transposed or not); a float32 ``quant_scale`` is converted to an int64 one for
  the call.

O(1) in the tensors' sizes: nothing is computed.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["npu_linear", "npu_linear_backward", "npu_bmmV2", "npu_one_hot",
           "npu_softmax_cross_entropy_with_logits",
           "npu_softmax_cross_entropy_with_logits_backward", "npu_trans_quant_param",
           "npu_weight_quant_batchmatmul"]

#: WeightQuantBatchMatmulV2KernelNpuOpApi.cpp: INT4_NUMS_IN_INT32
_INT4_PER_INT32 = 8


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise RuntimeError(message)


class _Linear(torch.autograd.Function):
    """npu_linear's autograd: keeps input and weight."""

    @staticmethod
    def forward(ctx: Any, x: Any, weight: Any, bias: Any) -> Any:
        ctx.save_for_backward(x, weight)
        return x.new_empty((x.size(0), weight.size(0)))

    @staticmethod
    def backward(ctx: Any, grad: Any) -> tuple:
        x, weight = ctx.saved_tensors
        dx, dw = npu_linear_backward(grad, x, weight)
        return dx, dw, grad


def npu_linear(input: Any, weight: Any, bias: Any = None) -> Any:
    """``torch_npu.npu_linear``: input @ weight.T (+ bias), (M, N)."""
    _check(input.dim() >= 2, "torch.nn.functional.linear() input must be at least "
                             "two-dimensional.")
    _check(weight.dim() >= 2, "torch.nn.functional.linear() weight must be at least "
                              "two-dimensional.")
    return _Linear.apply(input, weight, bias)


def npu_linear_backward(grad: Any, input: Any, weight: Any) -> tuple:
    """``torch_npu.npu_linear_backward``: (input's gradient, weight's gradient)."""
    return grad.new_empty(input.shape), grad.new_empty(weight.shape)


def npu_bmmV2(self: Any, mat2: Any, output_sizes: Any) -> Any:
    """``torch_npu.npu_bmmV2``: the batched product, (batch..., M, N)."""
    batch = torch.broadcast_shapes(self.shape[:-2], mat2.shape[:-2])
    return self.new_empty((*batch, self.size(-2), mat2.size(-1)))


def npu_one_hot(self: Any, num_classes: int = -1, depth: int = 1, on_value: Any = 1,
                off_value: Any = 0) -> Any:
    """``torch_npu.npu_one_hot``: float32, ``self``'s shape + (depth,)."""
    result = self.new_empty((*self.shape, depth), dtype=torch.float32)
    # the kernel's int32 copy of the indices and its on and off values, for the call
    held = [self.new_empty((1,), dtype=torch.float32) for _ in range(2)]
    if self.dtype != torch.int32:
        held.append(self.int())
    del held
    return result


class _SoftmaxCrossEntropy(torch.autograd.Function):
    """npu_softmax_cross_entropy_with_logits's autograd: keeps the logits and labels."""

    @staticmethod
    def forward(ctx: Any, x: Any, labels: Any) -> Any:
        ctx.save_for_backward(x, labels)
        loss, backprop = _loss_and_gradient(x)
        del backprop
        return loss

    @staticmethod
    def backward(ctx: Any, grad: Any) -> tuple:
        x, labels = ctx.saved_tensors
        return npu_softmax_cross_entropy_with_logits_backward(grad, x, labels), None


def _loss_and_gradient(x: Any) -> tuple:
    """The kernel's two outputs: the loss (N,) and its gradient (N, C), in x's dtype."""
    return x.new_empty((x.size(0),)), torch.empty_like(x)


def npu_softmax_cross_entropy_with_logits(self: Any, labels: Any) -> Any:
    """``torch_npu.npu_softmax_cross_entropy_with_logits``: the loss of each row, (N,)."""
    _check(self.device.type == "npu", "Expected all tensors to be on the NPU: "
                                      "npu_softmax_cross_entropy_with_logits")
    return _SoftmaxCrossEntropy.apply(self, labels)


def npu_softmax_cross_entropy_with_logits_backward(grad: Any, self: Any, labels: Any) -> Any:
    """``torch_npu.npu_softmax_cross_entropy_with_logits_backward``: the logits' gradient,
    (N, C)."""
    loss, backprop = _loss_and_gradient(self)
    del loss
    return backprop * grad.unsqueeze(-1)


def npu_trans_quant_param(scale: Any, offset: Any = None, round_mode: int | None = 0) -> Any:
    """``torch_npu.npu_trans_quant_param``: the scale (and offset) as int64 for the
    quantised matmul."""
    _check(scale.dim() == 1 or (scale.dim() == 2 and scale.size(0) == 1),
           "the scale shape support only (1, ) and (1, n)")
    mode = 0 if round_mode is None else round_mode
    _check(mode in (0, 1), f"round_mode must be 0 or 1. but now is {mode}")
    shape = tuple(scale.shape)
    if scale.dim() == 1 and offset is not None and offset.size(0) > scale.size(0):
        shape = tuple(offset.shape)
    return scale.new_empty(shape, dtype=torch.int64)


def _transposed(t: Any) -> bool:
    """op_plugin::utils::is_transpose_last_two_dims: a transposed view of the last two
    dimensions (not both of size 1)."""
    if not 2 <= t.dim() <= 6:
        return False
    rows, cols = t.dim() - 2, t.dim() - 1
    if t.stride(rows) != 1 or t.stride(cols) != t.size(rows):
        return False
    span = t.size(rows) * t.size(cols)
    for dim in range(t.dim() - 3, -1, -1):
        if t.stride(dim) != span:
            return False
        span *= t.size(dim)
    return not (t.size(rows) == 1 and t.size(cols) == 1)


def npu_weight_quant_batchmatmul(x: Any, weight: Any, antiquant_scale: Any,
                                 antiquant_offset: Any = None, quant_scale: Any = None,
                                 quant_offset: Any = None, bias: Any = None,
                                 antiquant_group_size: int = 0, inner_precise: int = 0,
                                 weight_dtype: Any = None) -> Any:
    """``torch_npu.npu_weight_quant_batchmatmul``: x @ dequantised weight, (..., M, N)."""
    _check(x.dim() >= 2, f"x shape do not support dim num less than 2, but it is {x.dim()}")
    _check(weight.dim() >= 2, f"weight shape do not support dim num less than 2, but it is "
                              f"{weight.dim()}")
    _check(not (min(x.dim(), weight.dim()) > 2 and x.dim() != weight.dim()),
           "x dim is not the same as weight dim")
    packed = weight.dtype in (torch.int32, torch.float32)
    transposed = _transposed(weight)
    k = weight.size(-2) * (_INT4_PER_INT32 if packed and transposed else 1)
    _check(x.size(-1) == k, f"The k of x and weight should be equal. but x_k_dim is "
                            f"{x.size(-1)}, weight_k_dim is {k}")
    _check(antiquant_group_size == 0
           or (32 <= antiquant_group_size <= k - 1 and antiquant_group_size % 32 == 0),
           "antiquant_group_size can be either 0 or a multiple of 32 within the range 32 to "
           "weight_k_dim - 1.")
    _check(quant_scale is not None or quant_offset is None,
           "Quantization parameters are incorrectly set, quant_offset cannot exist in "
           "isolation from quant_scale")
    _check(inner_precise in (0, 1), f"inner_precise only support 0 or 1. but is:"
                                    f"{inner_precise}")
    if x.dim() == weight.dim():
        _check(x.shape[:-2] == weight.shape[:-2], "batch of x is diff from batch of weight")
    n = weight.size(-1) * (_INT4_PER_INT32 if packed and not transposed else 1)
    longer = x if x.dim() >= weight.dim() else weight
    shape = (*longer.shape[:-2], x.size(-2), n)
    out = x.new_empty(shape, dtype=torch.int8 if quant_scale is not None else None)
    if quant_scale is not None and quant_scale.dtype == torch.float32:
        # the int64 scale the kernel converts it to, for the call
        converted = quant_scale.new_empty(quant_scale.shape, dtype=torch.int64)
        del converted
    return out
