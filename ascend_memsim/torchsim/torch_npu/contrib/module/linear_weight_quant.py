"""The stand-in ``torch_npu.contrib.module.linear_weight_quant``: a linear layer with
quantised weights and activations in float (``npu_weight_quant_batchmatmul``,
``torch_npu/contrib/module/linear_weight_quant.py``).

Parameters (none needs a gradient), as torch_npu makes them: weight (out, in) and
antiquant_scale (out,) in the default dtype (float32; the int8 or packed-int4 weight is put
in afterwards: ``model.weight.data = int8_weight``), and antiquant_offset, quant_scale,
quant_offset, bias (out,) when asked. The forward gives x's shape with ``out`` last, in x's
dtype (int8 with quant_scale).
"""

from __future__ import annotations

from typing import Any

import torch

from .._ops.dense import npu_weight_quant_batchmatmul

__all__ = ["LinearWeightQuant"]


class LinearWeightQuant(torch.nn.Module):
    """y = x @ dequantised(weight).T (+ bias).

    Raises:
        RuntimeError: what ``npu_weight_quant_batchmatmul`` refuses (a float32 weight is
            read as packed int4: put the quantised weight in first).
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 device: Any = None, dtype: Any = None, antiquant_offset: bool = False,
                 quant_scale: bool = False, quant_offset: bool = False,
                 antiquant_group_size: int = 0, inner_precise: int = 0,
                 weight_dtype: Any = None) -> None:
        super().__init__()

        def parameter(*shape: int) -> torch.nn.Parameter:
            return torch.nn.Parameter(torch.empty(shape, device=device), False)

        self.weight = parameter(out_features, in_features)
        self.antiquant_scale = parameter(out_features)
        for name, wanted in (("antiquant_offset", antiquant_offset),
                             ("quant_scale", quant_scale), ("quant_offset", quant_offset),
                             ("bias", bias)):
            if wanted:
                setattr(self, name, parameter(out_features))
            else:
                self.register_parameter(name, None)
        self.antiquant_group_size = antiquant_group_size
        self.inner_precise = inner_precise
        self.weight_dtype = weight_dtype

    def forward(self, x: Any) -> Any:
        antiquant_scale: Any = self.antiquant_scale
        if antiquant_scale.dim() == 2:
            antiquant_scale = antiquant_scale.transpose(-1, -2)
        antiquant_offset: Any = self.antiquant_offset
        if antiquant_offset is not None and antiquant_offset.dim() == 2:
            antiquant_offset = antiquant_offset.transpose(-1, -2)
        return npu_weight_quant_batchmatmul(
            x, self.weight.transpose(-1, -2), antiquant_scale, antiquant_offset,
            self.quant_scale, self.quant_offset, self.bias, self.antiquant_group_size,
            self.inner_precise, weight_dtype=self.weight_dtype)
