"""torch_npu's RMS norms on the fake NPU: ``npu_rms_norm``, its gradient
``npu_rms_norm_backward``, and ``npu_add_rms_norm``.

Schemas: ``op_plugin/config/op_plugin_functions.yaml`` (Ascend/op-plugin at 517f2e7d).
Outputs (``op_plugin/ops/opapi/RmsNormKernelOpApi.cpp``, ``RmsNormBackwardKernelOpApi.cpp``,
the ``gen_opapi`` entry of ``npu_add_rms_norm``; ``rms_norm_npu_output_size``):

- ``npu_rms_norm(x, gamma)``: ``y`` like ``x``; ``rstd`` float32, ``x``'s shape up to
  ``gamma``'s dimensions then ones ((B, S, 1) for x (B, S, H) and gamma (H,));
- ``npu_rms_norm_backward(dy, x, gamma, rstd)``: ``dx`` like ``x``, ``dgamma`` float32 of
  ``gamma``'s shape (autograd then casts it to ``gamma``'s dtype, as for any gradient);
- ``npu_add_rms_norm(x1, x2, gamma)``: ``y`` and ``x_sum`` (x1 + x2) like ``x1``, ``rstd`` as
  above.

Autograd: ``derivatives.yaml`` gives ``npu_rms_norm`` ``output_differentiability: [true,
false]`` and ``self, gamma: npu_rms_norm_backward(grad, self, gamma, result1)``: the graph
keeps ``x``, ``gamma`` and ``rstd`` (result1), nothing else. ``npu_add_rms_norm`` has no
derivative in op-plugin (its callers write their own backward).

Workspace (``workspace_table.py``): ``npu_rms_norm`` and its gradient were there; the tiling of
``npu_add_rms_norm`` asks 16 MiB + 256 bytes (``norm/add_rms_norm/op_host/
add_rms_norm_tiling.cpp``, hicann/ops-nn), added.
"""

from __future__ import annotations

from typing import Any

import torch

from ._common import define, rstd_shape

__all__ = ["register", "npu_rms_norm", "npu_rms_norm_backward", "npu_add_rms_norm"]

_SCHEMAS = (
    "npu_rms_norm(Tensor self, Tensor gamma, float epsilon=1e-06) -> (Tensor, Tensor)",
    "npu_rms_norm_backward(Tensor dy, Tensor self, Tensor gamma, Tensor rstd) "
    "-> (Tensor, Tensor)",
    "npu_add_rms_norm(Tensor x1, Tensor x2, Tensor gamma, float epsilon=1e-06) "
    "-> (Tensor, Tensor, Tensor)",
)


def _rms_norm_fake(x, gamma, epsilon=1e-6):
    return torch.empty_like(x), x.new_empty(rstd_shape(x, gamma), dtype=torch.float32)


def _rms_norm_backward_fake(dy, x, gamma, rstd):
    return torch.empty_like(x), gamma.new_empty(gamma.shape, dtype=torch.float32)


def _add_rms_norm_fake(x1, x2, gamma, epsilon=1e-6):
    rstd = x1.new_empty(rstd_shape(x1, gamma), dtype=torch.float32)
    return torch.empty_like(x1), rstd, torch.empty_like(x1)


def _setup_rms_norm(ctx: Any, inputs: tuple, output: tuple) -> None:
    x, gamma, _epsilon = inputs
    _y, rstd = output
    # derivatives.yaml: output_differentiability [true, false]; keeps self, gamma, result1
    ctx.mark_non_differentiable(rstd)
    ctx.save_for_backward(x, gamma, rstd)
    # the generated node gets an undefined gradient for an unused y (no zeros made)
    ctx.set_materialize_grads(False)


def _rms_norm_grad(ctx: Any, dy: Any, _drstd: Any) -> tuple:
    if dy is None:
        return None, None, None
    x, gamma, rstd = ctx.saved_tensors
    dx, dgamma = torch.ops.npu.npu_rms_norm_backward(dy, x, gamma, rstd)
    return dx, dgamma, None


def register(lib: Any) -> None:
    """Define the family's operators in ``lib`` (the ``npu`` namespace), their fake kernels
    and autograd."""
    define(lib, _SCHEMAS, {
        "npu_rms_norm": _rms_norm_fake,
        "npu_rms_norm_backward": _rms_norm_backward_fake,
        "npu_add_rms_norm": _add_rms_norm_fake,
    }, {
        "npu_rms_norm": (_rms_norm_grad, _setup_rms_norm),
    })


def npu_rms_norm(self: Any, gamma: Any, epsilon: float = 1e-6) -> tuple:
    """``torch_npu.npu_rms_norm``: (y, rstd); rstd float32 with ones in gamma's
    dimensions."""
    return torch.ops.npu.npu_rms_norm(self, gamma, epsilon)


def npu_rms_norm_backward(dy: Any, self: Any, gamma: Any, rstd: Any) -> tuple:
    """``torch_npu.npu_rms_norm_backward``: (dx like self, dgamma float32 like gamma)."""
    return torch.ops.npu.npu_rms_norm_backward(dy, self, gamma, rstd)


def npu_add_rms_norm(x1: Any, x2: Any, gamma: Any, epsilon: float = 1e-6) -> tuple:
    """``torch_npu.npu_add_rms_norm``: (y, rstd, x1 + x2); not differentiable."""
    return torch.ops.npu.npu_add_rms_norm(x1, x2, gamma, epsilon)
