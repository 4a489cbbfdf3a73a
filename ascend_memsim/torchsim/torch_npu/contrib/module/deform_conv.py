"""The stand-in ``torch_npu.contrib.module.deform_conv``: mmcv's modulated deformable
convolution (DCNv2) on ``npu_deformable_conv2d`` (``torch_npu/contrib/module/deform_conv.py``).

Parameters, float32: weight (out, in / groups, kh, kw), bias (out,) (with ``bias``; without
it a zeros (out,) attribute, not a parameter, that the first call moves to the input's
device), and with ``pack`` the offset convolution ``conv_offset``, a Conv2d (in,
3 * deformable_groups * kh * kw, kernel_size) with bias. Two int32 row orders of
2 * deformable_groups * kh * kw entries (attributes too) move with the first call.

The forward makes the inputs float32, reorders the offsets (``index_select``), joins them
with the mask (``offset_all``, (N, 3 * dg * kh * kw, Ho, Wo)) and calls the operator: the
output (N, out, Ho, Wo) and the deformed input (N, in, Ho * kh, Wo * kw). When a gradient is
wanted the graph keeps the input, the weight, the deformed input and ``offset_all``; the
backward is ``npu_deformable_conv2dbk``.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch.nn.modules.utils import _pair

from .._ops.detection import npu_deformable_conv2d, npu_deformable_conv2dbk

__all__ = ["ModulatedDeformConv2dFunction", "ModulatedDeformConv", "DCNv2"]


class ModulatedDeformConv2dFunction(torch.autograd.Function):
    """The modulated deformable convolution with torch_npu's operator and its gradient."""

    @staticmethod
    def forward(ctx: Any, input_tensor: Any, offset_ori: Any, mask: Any, weight: Any,
                bias: Any = None, with_bias: bool = False, stride: int = 1, padding: int = 0,
                dilation: int = 1, groups: int = 1, deformable_groups: int = 1,
                sort_index_for_npu_fp: Any = None, sort_index_for_npu_bp: Any = None) -> Any:
        input_tensor, offset_ori, mask = input_tensor.float(), offset_ori.float(), mask.float()
        ctx.args = dict(kernel_size=[weight.shape[3], weight.shape[2]],
                        stride=[1, 1, stride, stride], padding=[padding] * 4,
                        dilation=[1, 1, dilation, dilation], groups=groups,
                        deformable_groups=deformable_groups, modulated=True)
        ctx.sort_index_for_npu_bp = sort_index_for_npu_bp
        ctx.with_bias = with_bias
        offset = offset_ori.index_select(1, sort_index_for_npu_fp)
        offset_all = torch.cat([offset, mask], dim=1)
        output, offset_out = npu_deformable_conv2d(input_tensor, weight, offset_all, bias,
                                                   **ctx.args)
        if (weight.requires_grad or mask.requires_grad or offset.requires_grad
                or input_tensor.requires_grad):
            ctx.save_for_backward(input_tensor, weight, offset_out, offset_all)
        return output

    @staticmethod
    def backward(ctx: Any, grad_output: Any) -> tuple:
        input_tensor, weight, offset_out, offset_all = ctx.saved_tensors
        grad_input, grad_weight, grad_offset_all, grad_bias = npu_deformable_conv2dbk(
            input_tensor, grad_output, offset_out, weight, offset_all, **ctx.args)
        grad_offset = grad_offset_all.index_select(1, ctx.sort_index_for_npu_bp)
        grad_mask = grad_offset_all[:, grad_offset.shape[1]:, :, :]
        if not ctx.with_bias:
            grad_bias = None
        return (grad_input, grad_offset, grad_mask, grad_weight, grad_bias,
                None, None, None, None, None, None, None, None)


class ModulatedDeformConv(torch.nn.Module):
    """Modulated deformable 2-D convolution; float32. With ``pack`` the offsets and the mask
    come from ``conv_offset`` (zero-initialised), else ``forward`` takes (x, offset, mask)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: int = 1,
                 padding: int = 0, dilation: int = 1, groups: int = 1,
                 deformable_groups: int = 1, bias: bool = True, pack: bool = True) -> None:
        super().__init__()
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = _pair(kernel_size)
        self.stride = stride
        self.padding = padding
        self.dilation = dilation
        self.groups = groups
        self.deformable_groups = deformable_groups
        self.with_bias = bias
        self.pack = pack
        self.weight = torch.nn.Parameter(
            torch.empty(out_channels, in_channels // groups, *self.kernel_size))
        self.bias: Any = (torch.nn.Parameter(torch.empty(out_channels)) if bias
                          else torch.zeros(out_channels))
        if pack:
            self.conv_offset = torch.nn.Conv2d(
                in_channels, deformable_groups * 3 * self.kernel_size[0] * self.kernel_size[1],
                kernel_size=self.kernel_size, stride=_pair(stride), padding=_pair(padding),
                bias=True)
        self.split_num = deformable_groups * 2 * self.kernel_size[0] * self.kernel_size[1]
        # the offsets' rows in the order torch_npu's operator takes them: odd rows first
        order = list(range(1, self.split_num, 2)) + list(range(0, self.split_num, 2))
        inverse = sorted(range(self.split_num), key=order.__getitem__)
        self.sort_index_for_npu_fp = torch.tensor(order, dtype=torch.int32)
        self.sort_index_for_npu_bp = torch.tensor(inverse, dtype=torch.int32)
        self.sort_index_for_npu_todevice = False
        self.init_param()

    def init_param(self) -> None:
        """Uniform weights in +-1/sqrt(in * kh * kw); zero bias and offset convolution."""
        stdv = 1. / math.sqrt(self.in_channels * math.prod(self.kernel_size))
        self.weight.data.uniform_(-stdv, stdv)
        if self.bias is not None:
            self.bias.data.zero_()
        if self.pack:
            offset: Any = self.conv_offset
            offset.weight.data.zero_()
            offset.bias.data.zero_()

    def forward(self, x: Any) -> Any:
        if self.pack:
            out = self.conv_offset(x)
            offset = out[:, :self.split_num, ...]
            mask = torch.sigmoid(out[:, self.split_num:, ...])
        else:
            x, offset, mask = x
        if not self.sort_index_for_npu_todevice:
            self.sort_index_for_npu_fp = self.sort_index_for_npu_fp.to(x.device)
            self.sort_index_for_npu_bp = self.sort_index_for_npu_bp.to(x.device)
            self.bias = self.bias.to(x.device)
            self.sort_index_for_npu_todevice = True
        return ModulatedDeformConv2dFunction.apply(
            x, offset, mask, self.weight, self.bias, self.with_bias, self.stride, self.padding,
            self.dilation, self.groups, self.deformable_groups, self.sort_index_for_npu_fp,
            self.sort_index_for_npu_bp)


DCNv2 = ModulatedDeformConv
