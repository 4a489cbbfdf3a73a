"""torch_npu's layout operators on the fake NPU: ``npu_format_cast``, ``npu_format_cast_``,
``npu_confusion_transpose`` and its gradient, ``npu_transpose``, and
``npu_transpose_batchmatmul`` (a batched matmul with its transposes fused in).

Schemas: ``npu_format_cast`` and ``npu_format_cast_`` are torch_npu's own
(``torch_npu/csrc/aten/npu_native_functions.yaml`` of the torch_npu 2.14.0 wheel, both
overloads each); the others op-plugin's (``op_plugin/config/op_plugin_functions.yaml``,
Ascend/op-plugin at 517f2e7d). Outputs:

- ``npu_format_cast(x, acl_format)`` (or ``(x, dst)``): a new tensor of ``x``'s shape and
  dtype (``_npu_format_cast_meta``: ``self.new_empty(self.shape)``). ESTIMATE: its memory is
  that of the same shape in ND; a private format pads (FRACTAL_NZ rounds the last two
  dimensions up to 16 x 16 blocks, C0 32 bytes for int8), which is not modelled, and a
  tensor already in the format would be returned as it is, while here every call copies;
- ``npu_format_cast_(x, acl_format)``: in place; torch_npu makes the new storage, copies and
  sets ``x`` to it, so the old and the new storage live together for the call: ESTIMATE, a
  tensor of ``x``'s size in ND held for the call by :func:`npu_format_cast_`, then nothing
  more;
- ``npu_confusion_transpose(x, perm, shape, transpose_first)``: ``shape`` when
  ``transpose_first``, else ``shape`` permuted by ``perm`` (``op_plugin/ops/aclops/
  ConfusionTransposeKernelNpu.cpp``, ``opapi/ConfusionTransposeKernelNpuOpApi.cpp``); its
  gradient has the forward input's shape;
- ``npu_transpose(x, perm)``: a contiguous copy of ``x.permute(perm)``
  (``aclops/TransposeKernelNpu.cpp``, ``transpose_npu_output_size``);
- ``npu_transpose_batchmatmul(x, w)`` (``npu_transpose_batchmatmul_meta``): (M, batch, N) in
  x's dtype, M and batch x's axes 1 and 0 after ``perm_x1``, N w's axis 2 after ``perm_x2``;
  (M, 1, batch * N) int8 with ``scale``; (f, M, batch * N / f) with ``batch_split_factor``
  f > 1.

Autograd (``derivatives.yaml``): ``_npu_format_cast``: ``self: grad`` (nothing kept; the
public ``npu_format_cast`` reaches autograd through it, ``torchnpugen/autograd/
gen_variable_type.py`` ``NPU_NATIVEFUNCTIONS``; its ``.Tensor`` overload and
``npu_format_cast_`` are on ``AUTOGRAD_BLACK_LIST``, ``torchnpugen/autograd/utils.py``, and
have none); ``npu_confusion_transpose``: ``self: npu_confusion_transpose_backward(grad, perm,
self.sym_sizes(), !transpose_first)``, nothing kept but the sizes. ``npu_transpose`` and
``npu_transpose_batchmatmul`` have no derivative.

Workspace: ESTIMATE, left to the table's default (their tilings were not read).
"""

from __future__ import annotations

from typing import Any

import torch

from ._common import define

__all__ = ["register", "npu_format_cast", "npu_format_cast_", "npu_confusion_transpose",
           "npu_confusion_transpose_backward", "npu_transpose", "npu_transpose_batchmatmul"]

_OPTIONS = "*, int? customize_dtype=None, int? input_dtype=None"
_SCHEMAS = (
    f"npu_format_cast(Tensor self, int acl_format, {_OPTIONS}) -> Tensor",
    f"npu_format_cast.Tensor(Tensor self, Tensor dst, {_OPTIONS}) -> Tensor",
    f"npu_format_cast_.acl_format(Tensor(a!) self, int acl_format, {_OPTIONS}) -> Tensor(a!)",
    f"npu_format_cast_(Tensor(a!) self, Tensor src, {_OPTIONS}) -> Tensor(a!)",
    "npu_confusion_transpose(Tensor self, int[] perm, int[] shape, bool transpose_first) "
    "-> Tensor",
    "npu_confusion_transpose_backward(Tensor grad, int[] perm, SymInt[] shape, "
    "bool transpose_first) -> Tensor",
    "npu_transpose(Tensor self, int[] perm, bool require_contiguous=True) -> Tensor",
    "npu_transpose_batchmatmul(Tensor input, Tensor weight, *, Tensor? bias=None, "
    "Tensor? scale=None, int[]? perm_x1=None, int[]? perm_x2=None, int[]? perm_y=None, "
    "int? batch_split_factor=1) -> Tensor",
)


def _format_cast_fake(x, target, *, customize_dtype=None, input_dtype=None):
    return x.new_empty(x.shape)


def _format_cast_inplace_fake(x, target, *, customize_dtype=None, input_dtype=None):
    return x


def _confusion_shape(perm: Any, shape: Any, transpose_first: bool) -> list[int]:
    """ConfusionTransposeKernelNpu.cpp: ``shape``, or ``shape`` permuted by ``perm``."""
    if transpose_first:
        return list(shape)
    for p in perm:
        if not 0 <= p < len(shape):
            raise RuntimeError(f"npu_confusion_transpose input invalid, shape has size "
                               f"{len(shape)} but perm[i] is, {p}")
    return [shape[p] for p in perm]


def _confusion_fake(x, perm, shape, transpose_first):
    return x.new_empty(_confusion_shape(perm, shape, transpose_first))


def _confusion_backward_fake(grad, perm, shape, transpose_first):
    return grad.new_empty(list(shape))


def _transpose_fake(x, perm, require_contiguous=True):
    return x.new_empty(x.permute(perm).shape)


def _transpose_bmm_fake(x, w, *, bias=None, scale=None, perm_x1=None, perm_x2=None,
                        perm_y=None, batch_split_factor=1):
    perm_x1, perm_x2 = list(perm_x1 or (0, 1, 2)), list(perm_x2 or (0, 1, 2))
    if bias is not None:
        raise RuntimeError("The bias is not supported in TransposeBatchMatMul")
    m, batch = x.shape[perm_x1.index(1)], x.shape[perm_x1.index(0)]
    n = w.shape[perm_x2.index(2)]
    shape, dtype = (m, batch, n), x.dtype
    if scale is not None:
        shape, dtype = (m, 1, batch * n), torch.int8
    if batch_split_factor is not None and batch_split_factor > 1:
        shape = (batch_split_factor, m, batch * n // batch_split_factor)
    return x.new_empty(shape, dtype=dtype)


def _setup_format_cast(ctx: Any, inputs: tuple, keyword_only_inputs: dict,
                       output: Any) -> None:
    """Nothing is kept (the gradient passes through)."""


def _format_cast_grad(ctx: Any, grad: Any) -> tuple:
    # derivatives.yaml: _npu_format_cast: self: grad
    return grad, None


def _setup_confusion(ctx: Any, inputs: tuple, output: Any) -> None:
    x, perm, _shape, transpose_first = inputs
    ctx.args = (list(perm), list(x.shape), not transpose_first)


def _confusion_grad(ctx: Any, grad: Any) -> tuple:
    perm, sizes, transpose_first = ctx.args
    return (torch.ops.npu.npu_confusion_transpose_backward(grad, perm, sizes, transpose_first),
            None, None, None)


def register(lib: Any) -> None:
    """Define the family's operators in ``lib`` (the ``npu`` namespace), their fake kernels
    and autograd."""
    define(lib, _SCHEMAS, {
        "npu_format_cast": _format_cast_fake,
        "npu_format_cast.Tensor": _format_cast_fake,
        "npu_format_cast_.acl_format": _format_cast_inplace_fake,
        "npu_format_cast_": _format_cast_inplace_fake,
        "npu_confusion_transpose": _confusion_fake,
        "npu_confusion_transpose_backward": _confusion_backward_fake,
        "npu_transpose": _transpose_fake,
        "npu_transpose_batchmatmul": _transpose_bmm_fake,
    }, {
        "npu_format_cast": (_format_cast_grad, _setup_format_cast),
        "npu_confusion_transpose": (_confusion_grad, _setup_confusion),
    })


def npu_format_cast(self: Any, acl_format: Any, **kwargs: Any) -> Any:
    """``torch_npu.npu_format_cast``: a copy of ``self`` (ESTIMATE: its size in ND)."""
    return torch.ops.npu.npu_format_cast(self, acl_format, **kwargs)


def npu_format_cast_(self: Any, acl_format: Any, **kwargs: Any) -> Any:
    """``torch_npu.npu_format_cast_``: ``self``, cast in place; the new storage and the old
    live together for the call (ESTIMATE: a copy of ``self``'s size in ND)."""
    held = torch.empty_like(self)
    out = torch.ops.npu.npu_format_cast_(self, acl_format, **kwargs)
    del held
    return out


def npu_confusion_transpose(self: Any, perm: Any, shape: Any, transpose_first: bool) -> Any:
    """``torch_npu.npu_confusion_transpose``: a reshape and a transpose in one copy."""
    return torch.ops.npu.npu_confusion_transpose(self, perm, shape, transpose_first)


def npu_confusion_transpose_backward(grad: Any, perm: Any, shape: Any,
                                     transpose_first: bool) -> Any:
    """``torch_npu.npu_confusion_transpose_backward``: a tensor of ``shape``."""
    return torch.ops.npu.npu_confusion_transpose_backward(grad, perm, shape, transpose_first)


def npu_transpose(self: Any, perm: Any, require_contiguous: bool = True) -> Any:
    """``torch_npu.npu_transpose``: a contiguous copy of ``self.permute(perm)``."""
    return torch.ops.npu.npu_transpose(self, perm, require_contiguous)


def npu_transpose_batchmatmul(input: Any, weight: Any, **kwargs: Any) -> Any:
    """``torch_npu.npu_transpose_batchmatmul``: (M, batch, N) by default; not
    differentiable."""
    return torch.ops.npu.npu_transpose_batchmatmul(input, weight, **kwargs)
