"""The stand-in ``torch_npu.contrib.module.focus``: YOLOv5's Focus, its four strided slices
concatenated and a convolution (``torch_npu/contrib/module/focus.py``).

The parameters are those of its ``Conv``: a Conv2d (c2, 4 * c1 / g, k, k) without bias, a
BatchNorm2d (c2) (weight, bias, and the buffers running_mean, running_var, float32 (c2,),
num_batches_tracked int64 ()) and LeakyReLU(0.1) in place (or nothing), under the state
dict names ``conv.conv.weight``, ``conv.bn.*`` as torch_npu's.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["Focus"]


def autopad(k: Any, p: Any = None) -> Any:
    """The padding that keeps the size: half the kernel."""
    if p is None:
        p = k // 2 if isinstance(k, int) else [x // 2 for x in k]
    return p


class Conv(torch.nn.Module):
    """YOLOv5's convolution: Conv2d (no bias), BatchNorm2d, LeakyReLU(0.1) in place."""

    def __init__(self, c1: int, c2: int, k: Any = 1, s: Any = 1, p: Any = None, g: int = 1,
                 act: bool = True) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(c1, c2, k, s, autopad(k, p), groups=g, bias=False)
        self.bn = torch.nn.BatchNorm2d(c2)
        self.act: torch.nn.Module = (torch.nn.LeakyReLU(0.1, inplace=True) if act
                                     else torch.nn.Identity())

    def forward(self, x: Any) -> Any:
        return self.act(self.bn(self.conv(x)))

    def fuseforward(self, x: Any) -> Any:
        return self.act(self.conv(x))


def fast_slice(x: Any) -> list:
    """The four pixels of each 2 x 2 block, as four strided views."""
    return [x[..., ::2, ::2], x[..., 1::2, ::2], x[..., ::2, 1::2], x[..., 1::2, 1::2]]


class Focus(torch.nn.Module):
    """x (N, c1, H, W) -> Conv(cat of its four slices (N, 4 * c1, H / 2, W / 2))."""

    def __init__(self, c1: int, c2: int, k: Any = 1, s: Any = 1, p: Any = None, g: int = 1,
                 act: bool = True) -> None:
        super().__init__()
        self.conv = Conv(c1 * 4, c2, k, s, p, g, act)

    def forward(self, x: Any) -> Any:
        return self.conv(torch.cat(fast_slice(x), 1))
