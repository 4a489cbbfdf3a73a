"""torch_npu's rotary position embeddings on the fake NPU: ``npu_rotary_mul`` and its
gradient ``npu_rotary_mul_backward``, ``npu_apply_rotary_pos_emb``, ``npu_interleave_rope``.

Schemas: ``op_plugin/config/op_plugin_functions.yaml`` (Ascend/op-plugin at 517f2e7d).
Outputs:

- ``npu_rotary_mul(x, r1, r2)``: like ``x`` (``op_plugin/ops/opapi/RotaryMulKernelNpuOpApi.cpp``
  allocates ``self.sizes()`` in ``self``'s options). When ``r1`` or ``r2`` has another dtype
  than ``x``, the kernel casts them to ``x``'s dtype first (``npu_dtype_cast_impl_op_api``):
  :func:`npu_rotary_mul` holds those copies for the call (a direct ``torch.ops.npu`` call
  makes none);
- ``npu_rotary_mul_backward(grad, x, r1, r2)``: ``dx`` of ``grad``'s shape, ``dr1`` and
  ``dr2`` of ``r1``'s and ``r2``'s shapes, all in ``x``'s dtype, whether ``r1`` and ``r2``
  need a gradient or not (``RotaryMulBackwardKernelNpuOpApi.cpp``; with mixed dtypes it casts
  ``grad``, ``r1``, ``r2`` too, held for the call by the autograd backward here);
- ``npu_apply_rotary_pos_emb(query, key, cos, sin)``: IN PLACE. ``ApplyRotaryPosEmbNpuOpApi.cpp``
  runs ``aclnnApplyRotaryPosEmb(V2)`` on ``query`` and ``key`` and returns them
  (``std::tie(query, key)``): no new memory. torch_npu's meta registration says
  ``empty_like`` (new tensors); the kernel is followed here;
- ``npu_interleave_rope(x, cos, sin)``: like ``x`` (``InterleaveRopeNpuOpApi.cpp``).

Autograd: ``derivatives.yaml`` gives ``npu_rotary_mul`` ``self, r1, r2:
npu_rotary_mul_backward(grad, self, r1, r2, rotary_mode)`` and ``rotate:
non_differentiable``: the graph keeps ``x``, ``r1`` and ``r2``. The other two have no
derivative.

Workspace (``workspace_table.py``): 16 MiB for ``npu_rotary_mul`` and its gradient
(``posembedding/rotary_position_embedding/op_host/rope_rotate_half_tiling.cpp``,
``rope_interleaved_tiling.cpp``; ``rotary_position_embedding_grad/op_host/
rope_half_grad_tiling.cpp``, hicann/ops-transformer), 32 bytes for ``npu_interleave_rope``
(``interleave_rope_tiling.cpp`` ``DEFAULT_WORKSPACE_SIZE``). ESTIMATE: ``npu_apply_rotary_
pos_emb``'s (``apply_rotary_pos_emb_tiling.cpp``: the larger of the system workspace and
its own) is left to the table's default.
"""

from __future__ import annotations

from typing import Any

import torch

from ._common import define

__all__ = ["register", "npu_rotary_mul", "npu_rotary_mul_backward",
           "npu_apply_rotary_pos_emb", "npu_interleave_rope"]

_SCHEMAS = (
    "npu_rotary_mul(Tensor self, Tensor r1, Tensor r2, str rotary_mode='half', "
    "Tensor? rotate=None) -> Tensor",
    "npu_rotary_mul_backward(Tensor grad, Tensor self, Tensor r1, Tensor r2, "
    "str rotary_mode='half') -> (Tensor, Tensor, Tensor)",
    "npu_apply_rotary_pos_emb(Tensor query, Tensor key, Tensor cos, Tensor sin, "
    "str layout='BSND', str rotary_mode='half') -> (Tensor, Tensor)",
    "npu_interleave_rope(Tensor x, Tensor cos, Tensor sin) -> Tensor",
)
_MODES = ("half", "interleave")


def _check_mode(mode: str, name: str) -> None:
    """RotaryMulKernelNpuOpApi.cpp's check (below Ascend950)."""
    if mode not in _MODES:
        raise RuntimeError(f"The rotary_mode of {name} should be half or interleave, but got "
                           f"{mode}")


def _rotary_mul_fake(x, r1, r2, rotary_mode="half", rotate=None):
    _check_mode(rotary_mode, "npu_rotary_mul")
    return torch.empty_like(x)


def _rotary_mul_backward_fake(grad, x, r1, r2, rotary_mode="half"):
    _check_mode(rotary_mode, "npu_rotary_mul_backward")
    return (x.new_empty(grad.shape), x.new_empty(r1.shape), x.new_empty(r2.shape))


def _apply_rotary_pos_emb_fake(query, key, cos, sin, layout="BSND", rotary_mode="half"):
    if rotary_mode not in ("half", "quarter", "interleave"):
        raise RuntimeError(f"The layout should be half/quarter/interleave, but got "
                           f"{rotary_mode}")
    # the kernel writes query and key and returns them (std::tie(query, key))
    return query, key


def _interleave_rope_fake(x, cos, sin):
    return torch.empty_like(x)


def _casts(dtype: Any, *tensors: Any) -> list:
    """The copies the kernel makes of ``tensors`` not of ``dtype`` (npu_dtype_cast_impl_op_api:
    ``self.to(dtype)``), held by the caller for the call."""
    return [torch.empty_like(t, dtype=dtype) for t in tensors if t.dtype != dtype]


def _setup_rotary_mul(ctx: Any, inputs: tuple, output: Any) -> None:
    x, r1, r2, mode, _rotate = inputs
    # derivatives.yaml: self, r1, r2: npu_rotary_mul_backward(grad, self, r1, r2, rotary_mode)
    ctx.save_for_backward(x, r1, r2)
    ctx.mode = mode


def _rotary_mul_grad(ctx: Any, grad: Any) -> tuple:
    x, r1, r2 = ctx.saved_tensors
    held = _casts(x.dtype, grad, r1, r2)
    dx, dr1, dr2 = torch.ops.npu.npu_rotary_mul_backward(grad, x, r1, r2, ctx.mode)
    del held
    return dx, dr1, dr2, None, None


def register(lib: Any) -> None:
    """Define the family's operators in ``lib`` (the ``npu`` namespace), their fake kernels
    and autograd."""
    define(lib, _SCHEMAS, {
        "npu_rotary_mul": _rotary_mul_fake,
        "npu_rotary_mul_backward": _rotary_mul_backward_fake,
        "npu_apply_rotary_pos_emb": _apply_rotary_pos_emb_fake,
        "npu_interleave_rope": _interleave_rope_fake,
    }, {
        "npu_rotary_mul": (_rotary_mul_grad, _setup_rotary_mul),
    })


def npu_rotary_mul(self: Any, r1: Any, r2: Any, rotary_mode: str = "half",
                   rotate: Any = None) -> Any:
    """``torch_npu.npu_rotary_mul``: a tensor like ``self``; copies of ``r1``, ``r2`` in
    ``self``'s dtype are held for the call when their dtype differs."""
    held = _casts(self.dtype, r1, r2)
    out = torch.ops.npu.npu_rotary_mul(self, r1, r2, rotary_mode, rotate)
    del held
    return out


def npu_rotary_mul_backward(grad: Any, self: Any, r1: Any, r2: Any,
                            rotary_mode: str = "half") -> tuple:
    """``torch_npu.npu_rotary_mul_backward``: (dx, dr1, dr2) in ``self``'s dtype."""
    held = _casts(self.dtype, grad, r1, r2)
    out = torch.ops.npu.npu_rotary_mul_backward(grad, self, r1, r2, rotary_mode)
    del held
    return out


def npu_apply_rotary_pos_emb(query: Any, key: Any, cos: Any, sin: Any, layout: str = "BSND",
                             rotary_mode: str = "half") -> tuple:
    """``torch_npu.npu_apply_rotary_pos_emb``: (query, key), rotated in place."""
    return torch.ops.npu.npu_apply_rotary_pos_emb(query, key, cos, sin, layout, rotary_mode)


def npu_interleave_rope(x: Any, cos: Any, sin: Any) -> Any:
    """``torch_npu.npu_interleave_rope``: a tensor like ``x``; not differentiable."""
    return torch.ops.npu.npu_interleave_rope(x, cos, sin)
