"""The stand-in ``torch_npu.contrib.module.channel_shuffle``: ShuffleNet's channel shuffle of
two inputs as ``index_select`` (``torch_npu/contrib/module/channel_shuffle.py``).

The module keeps its row indices as plain attributes (not buffers), int64 on the CPU until
its first call on the NPU moves them there as int32: with ``split_shuffle``, two forward
indices of in_channels / groups rows and two backward ones of in_channels / 2. The forward
concatenates the inputs (freed after the call) and selects; its autograd keeps nothing but
those indices.
"""

from __future__ import annotations

from typing import Any

import torch

from ....ops.layout import npu_format_cast

__all__ = ["ChannelShuffle"]


class ChannelShuffle(torch.nn.Module):
    """Channel shuffle of ``x1`` and ``x2`` (N, C, ...) with ``in_channels`` C1 + C2 in all:
    two outputs of in_channels / groups channels each (``split_shuffle``), or one of
    in_channels. torch_npu implements the backward for ``groups`` = 2 only."""

    def __init__(self, in_channels: int, groups: int = 2, split_shuffle: bool = True) -> None:
        super().__init__()
        self.split_shuffle = split_shuffle
        self.group_len = in_channels // groups
        self.out_channels = (torch.arange(in_channels).reshape(groups, self.group_len)
                             .transpose(1, 0).flatten())
        if split_shuffle:
            self.fp_index1 = self.out_channels[:self.group_len]
            self.fp_index2 = self.out_channels[self.group_len:]
        else:
            self.fp_index = self.out_channels
        self.bp_index1 = torch.arange(0, in_channels, 2)
        self.bp_index2 = torch.arange(1, in_channels, 2)
        self.checked = False

    def check_self(self, x: Any) -> None:
        """Move the indices to ``x``'s device (int32 on the NPU), once."""
        if self.bp_index1.device == x.device:
            self.checked = True
            return
        names = ["fp_index1", "fp_index2"] if self.split_shuffle else ["fp_index"]
        for name in [*names, "bp_index1", "bp_index2"]:
            index = getattr(self, name)
            if x.device.type == "npu":
                index = index.int()
            setattr(self, name, index.to(x.device))

    def forward(self, x1: Any, x2: Any) -> Any:
        if not self.checked:
            self.check_self(x1)
        if self.split_shuffle:
            if self.training:
                return _HalfShuffle.apply(x1, x2, self.fp_index1, self.fp_index2,
                                          self.bp_index1, self.bp_index2)
            x = torch.cat([x1, x2], dim=1)
            return x.index_select(1, self.fp_index1), x.index_select(1, self.fp_index2)
        if self.training:
            return _FullShuffle.apply(x1, x2, self.fp_index, self.bp_index1, self.bp_index2)
        return torch.cat([x1, x2], dim=1).index_select(1, self.fp_index)


class _FullShuffle(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x1: Any, x2: Any, fp_index: Any, bp_index1: Any,
                bp_index2: Any) -> Any:
        ctx.bp_index = (bp_index1, bp_index2)
        return torch.cat([x1, x2], dim=1).index_select(1, fp_index)

    @staticmethod
    def backward(ctx: Any, grad: Any) -> tuple:
        if grad.device.type == "npu":
            # torch_npu casts the gradient back to NCHW in place (a new storage for it)
            grad.data = npu_format_cast(grad.data, 0)
        bp1, bp2 = ctx.bp_index
        return grad.index_select(1, bp1), grad.index_select(1, bp2), None, None, None


class _HalfShuffle(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x1: Any, x2: Any, fp_index1: Any, fp_index2: Any, bp_index1: Any,
                bp_index2: Any) -> tuple:
        ctx.bp_index = (bp_index1, bp_index2)
        x = torch.cat([x1, x2], dim=1)
        return x.index_select(1, fp_index1), x.index_select(1, fp_index2)

    @staticmethod
    def backward(ctx: Any, grad1: Any, grad2: Any) -> tuple:
        grad = torch.cat([grad1, grad2], 1)
        bp1, bp2 = ctx.bp_index
        return grad.index_select(1, bp1), grad.index_select(1, bp2), None, None, None, None
