"""torch_npu's fused activations on the fake NPU: ``npu_swiglu`` and its gradient,
``npu_clipped_swiglu``, ``npu_fast_gelu`` / ``fast_gelu`` and their gradient,
``npu_gelu_mul``.

Schemas: ``op_plugin/config/op_plugin_functions.yaml`` (Ascend/op-plugin at 517f2e7d).
Outputs (the ``gen_opapi`` entries there, ``op_plugin/utils/KernelNpuOutputSize.cpp``):

- ``npu_swiglu(x, dim)``, ``npu_clipped_swiglu(x, dim=...)``: ``x`` with ``dim`` halved
  (``swiglu_backward_infershape``), ``x``'s dtype; ``npu_swiglu_backward(grad, x, dim)``:
  like ``x``;
- ``npu_gelu_mul(x)``: ``x`` with the last dimension halved (``npu_gelu_mul_output_size``);
- ``npu_fast_gelu(x)``, ``fast_gelu(x)``, ``npu_fast_gelu_backward(grad, x)``: like ``x``
  (``op_plugin/ops/opapi/FastGeluNpuOpApi.cpp``).

Autograd (``derivatives.yaml``): ``npu_swiglu``: ``self: npu_swiglu_backward(grad, self,
dim)``, the graph keeps the (twice as wide) input; ``npu_fast_gelu`` and ``fast_gelu``:
``self: npu_fast_gelu_backward(grad, self)``, the graph keeps the input. ``npu_clipped_swiglu``
and ``npu_gelu_mul`` have no derivative in op-plugin.

Workspace (``workspace_table.py``): 16 MiB for ``npu_swiglu`` and ``npu_swiglu_backward``
(``WORKSPACE_BUFFER``, ``activation/swi_glu/op_host/swi_glu_tiling.cpp``, whose tiling
serves SwiGluGrad too; hicann/ops-nn). ESTIMATE: the others are left to the table's default
(``clipped_swiglu`` and ``gelu_mul`` compute theirs from the shapes; ``fast_gelu`` has an
Ascend C tiling only for arch35).
"""

from __future__ import annotations

from typing import Any

import torch

from ._common import define, halved

__all__ = ["register", "npu_swiglu", "npu_swiglu_backward", "npu_clipped_swiglu",
           "npu_fast_gelu", "npu_fast_gelu_backward", "fast_gelu", "npu_gelu_mul"]

_SCHEMAS = (
    "npu_swiglu(Tensor self, int dim=-1) -> Tensor",
    "npu_swiglu_backward(Tensor grad_output, Tensor self, int dim=-1) -> Tensor",
    "npu_clipped_swiglu(Tensor x, *, Tensor? group_index=None, int dim=-1, "
    "float alpha=1.702, float limit=7.0, float bias=1.0, bool interleaved=True) -> Tensor",
    "npu_fast_gelu(Tensor self) -> Tensor",
    "npu_fast_gelu_backward(Tensor grad, Tensor self) -> Tensor",
    "fast_gelu(Tensor self) -> Tensor",
    "npu_gelu_mul(Tensor input, *, str approximate='none') -> Tensor",
)


def _swiglu_fake(x, dim=-1):
    return x.new_empty(halved(x, dim))


def _like_second(grad, x, *rest):
    return torch.empty_like(x)


def _clipped_swiglu_fake(x, *, group_index=None, dim=-1, alpha=1.702, limit=7.0, bias=1.0,
                         interleaved=True):
    return x.new_empty(halved(x, dim))


def _like(x):
    return torch.empty_like(x)


def _gelu_mul_fake(x, *, approximate="none"):
    return x.new_empty(halved(x, -1))


def _setup_swiglu(ctx: Any, inputs: tuple, output: Any) -> None:
    x, dim = inputs
    # derivatives.yaml: self: npu_swiglu_backward(grad, self, dim)
    ctx.save_for_backward(x)
    ctx.dim = dim


def _swiglu_grad(ctx: Any, grad: Any) -> tuple:
    (x,) = ctx.saved_tensors
    return torch.ops.npu.npu_swiglu_backward(grad, x, ctx.dim), None


def _setup_fast_gelu(ctx: Any, inputs: tuple, output: Any) -> None:
    # derivatives.yaml: self: npu_fast_gelu_backward(grad, self)
    ctx.save_for_backward(inputs[0])


def _fast_gelu_grad(ctx: Any, grad: Any) -> Any:
    (x,) = ctx.saved_tensors
    return torch.ops.npu.npu_fast_gelu_backward(grad, x)


def register(lib: Any) -> None:
    """Define the family's operators in ``lib`` (the ``npu`` namespace), their fake kernels
    and autograd."""
    define(lib, _SCHEMAS, {
        "npu_swiglu": _swiglu_fake,
        "npu_swiglu_backward": _like_second,
        "npu_clipped_swiglu": _clipped_swiglu_fake,
        "npu_fast_gelu": _like,
        "fast_gelu": _like,
        "npu_fast_gelu_backward": _like_second,
        "npu_gelu_mul": _gelu_mul_fake,
    }, {
        "npu_swiglu": (_swiglu_grad, _setup_swiglu),
        "npu_fast_gelu": (_fast_gelu_grad, _setup_fast_gelu),
        "fast_gelu": (_fast_gelu_grad, _setup_fast_gelu),
    })


def npu_swiglu(self: Any, dim: int = -1) -> Any:
    """``torch_npu.npu_swiglu``: ``self`` with ``dim`` halved; the graph keeps ``self``."""
    return torch.ops.npu.npu_swiglu(self, dim)


def npu_swiglu_backward(grad_output: Any, self: Any, dim: int = -1) -> Any:
    """``torch_npu.npu_swiglu_backward``: a tensor like ``self``."""
    return torch.ops.npu.npu_swiglu_backward(grad_output, self, dim)


def npu_clipped_swiglu(x: Any, **kwargs: Any) -> Any:
    """``torch_npu.npu_clipped_swiglu``: ``x`` with ``dim`` halved; not differentiable."""
    return torch.ops.npu.npu_clipped_swiglu(x, **kwargs)


def npu_fast_gelu(self: Any) -> Any:
    """``torch_npu.npu_fast_gelu``: like ``self``; the graph keeps ``self``."""
    return torch.ops.npu.npu_fast_gelu(self)


def fast_gelu(self: Any) -> Any:
    """``torch_npu.fast_gelu``: as :func:`npu_fast_gelu`."""
    return torch.ops.npu.fast_gelu(self)


def npu_fast_gelu_backward(grad: Any, self: Any) -> Any:
    """``torch_npu.npu_fast_gelu_backward``: like ``self``."""
    return torch.ops.npu.npu_fast_gelu_backward(grad, self)


def npu_gelu_mul(input: Any, *, approximate: str = "none") -> Any:
    """``torch_npu.npu_gelu_mul``: ``input`` with its last dimension halved."""
    return torch.ops.npu.npu_gelu_mul(input, approximate=approximate)
