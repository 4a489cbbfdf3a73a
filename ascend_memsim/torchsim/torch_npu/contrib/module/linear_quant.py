"""The stand-in ``torch_npu.contrib.module.linear_quant``: a linear layer on the quantised
matmul ``npu_quant_matmul`` (``torch_npu/contrib/module/linear_quant.py``).

Parameters (none needs a gradient), as torch_npu makes them: weight (out, in) and scale
(out,) in the default dtype (float32: the quantised weights are put in afterwards, as
torch_npu's examples do, ``model.weight.data = int8_weight``), offset and pertoken_scale
(out,) float32 when asked, and bias (out,) int32 (unless ``bias=False``). The forward takes
int8 (or int32, packed int4) x and weight: with a float32 scale and no per-token scale it
converts the scale to int64 (``npu_trans_quant_param``), then ``npu_quant_matmul`` of x and
the transposed weight: (..., out) int8 unless ``output_dtype``.
"""

from __future__ import annotations

from typing import Any

import torch

from ....ops.quant import npu_quant_matmul
from .._ops.dense import npu_trans_quant_param

__all__ = ["LinearQuant"]


def _check_operands(x: Any, weight: Any) -> None:
    if not ((x.dtype == torch.int32 and weight.dtype == torch.int32)
            or (x.dtype == torch.int8 and weight.dtype == torch.int8)):
        raise ValueError(f"input and weight should be both torch.int32 or both torch.int8 "
                         f"datatype, but now input is {x.dtype}, weight is {weight.dtype}.")


def _forward(layer: Any, x: Any) -> Any:
    """The quantised matmul of ``layer`` (LinearQuant or LinearA8W8Quant) on ``x``."""
    scale = layer.scale
    if (layer.pertoken_scale is None and layer.scale.dtype == torch.float32
            and layer.output_dtype not in (torch.bfloat16, torch.int32)):
        scale = npu_trans_quant_param(layer.scale, layer.offset)
    return npu_quant_matmul(x, layer.weight.transpose(-2, -1), scale, offset=layer.offset,
                            pertoken_scale=layer.pertoken_scale, bias=layer.bias,
                            output_dtype=layer.output_dtype)


class LinearQuant(torch.nn.Module):
    """y = x @ weight.T dequantised by scale (+ bias), on int8 or packed-int4 operands.

    Raises:
        ValueError: x and the weight are not both int8 or both int32.
    """

    def __init__(self, in_features: int, out_features: int, *, bias: bool = True,
                 offset: bool = False, pertoken_scale: bool = False, device: Any = None,
                 dtype: Any = None, output_dtype: Any = None) -> None:
        super().__init__()
        _make_parameters(self, in_features, out_features, bias, offset, pertoken_scale,
                         output_dtype)

    def forward(self, linear_quant_input: Any) -> Any:
        _check_operands(linear_quant_input, self.weight)
        return _forward(self, linear_quant_input)


def _make_parameters(layer: Any, in_features: int, out_features: int, bias: bool,
                     offset: bool, pertoken_scale: bool, output_dtype: Any) -> None:
    """LinearQuant's parameters (LinearA8W8Quant's too); ``device`` and ``dtype`` are taken
    and not used, as by torch_npu."""
    parameter = torch.nn.Parameter
    layer.in_features = in_features
    layer.out_features = out_features
    layer.weight = parameter(torch.empty((out_features, in_features)), False)
    layer.scale = parameter(torch.empty(out_features), False)
    layer.output_dtype = output_dtype
    for name, wanted, dtype in (("offset", offset, torch.float32),
                                ("pertoken_scale", pertoken_scale, torch.float32),
                                ("bias", bias, torch.int32)):
        if wanted:
            setattr(layer, name, parameter(torch.empty(out_features, dtype=dtype), False))
        else:
            layer.register_parameter(name, None)
