"""The stand-in ``torch_npu.contrib.module.linear_a8w8_quant``: the deprecated
``LinearA8W8Quant`` (``torch_npu/contrib/module/linear_a8w8_quant.py``): LinearQuant's
parameters and forward, with a FutureWarning when made and dtype checks on its parameters."""

from __future__ import annotations

import warnings
from typing import Any

import torch

from .linear_quant import _check_operands, _forward, _make_parameters

__all__ = ["LinearA8W8Quant"]


class LinearA8W8Quant(torch.nn.Module):
    """LinearQuant, deprecated.

    Raises:
        ValueError: x and the weight are not both int8 or both int32, or a parameter or
            ``output_dtype`` has a dtype torch_npu refuses.
    """

    def __init__(self, in_features: int, out_features: int, *, bias: bool = True,
                 offset: bool = False, pertoken_scale: bool = False, device: Any = None,
                 dtype: Any = None, output_dtype: Any = None) -> None:
        super().__init__()
        warnings.warn("torch_npu.contrib.module.LinearA8W8Quant is deprecated and will be "
                      "removed in a future version. Use torch_npu.contrib.module.LinearQuant "
                      "instead.", FutureWarning, stacklevel=2)
        _make_parameters(self, in_features, out_features, bias, offset, pertoken_scale,
                         output_dtype)

    def forward(self, linear_quant_input: Any) -> Any:
        _check_operands(linear_quant_input, self.weight)
        checks = (
            ("scale", self.scale, (torch.int64, torch.float32, torch.bfloat16),
             "torch.int64, torch.float32 or torch.bfloat16"),
            ("offset", self.offset, (torch.float32,), "torch.float32"),
            ("bias", self.bias, (torch.int32, torch.bfloat16, torch.float16, torch.float32),
             "torch.int32, torch.bfloat16, torch.float16 or torch.float32"),
            ("pertoken_scale", self.pertoken_scale, (torch.float32,), "torch.float32"),
        )
        for name, value, dtypes, said in checks:
            if value is not None and value.dtype not in dtypes:
                raise ValueError(f"{name} should be {said} datatype, but now it is "
                                 f"{value.dtype}.")
        if self.output_dtype is not None and self.output_dtype not in (
                torch.int8, torch.float16, torch.bfloat16):
            raise ValueError(f"output_dtype should be torch.int8, torch.float16 or "
                             f"torch.bfloat16, but now it is {self.output_dtype}.")
        return _forward(self, linear_quant_input)
