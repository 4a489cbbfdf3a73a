"""The stand-in ``torch_npu.contrib.module.crossentropy``: cross entropy with label smoothing
on torch_npu's one-hot and softmax cross entropy (``torch_npu/contrib/module/crossentropy.py``).

The forward makes the targets int32 (a copy of int64 targets, for the call), the smoothed
one-hot labels (N, C) float32, the loss of each row (N,) in the logits' dtype, and its mean,
float32 (). The graph keeps the logits and the one-hot labels (the softmax cross entropy's
derivative keeps both): N * C * 4 bytes beyond the logits.
"""

from __future__ import annotations

from typing import Any

import torch

from .._ops.dense import npu_one_hot, npu_softmax_cross_entropy_with_logits

__all__ = ["LabelSmoothingCrossEntropy"]


class LabelSmoothingCrossEntropy(torch.nn.Module):
    """The mean cross entropy of logits (N, C) and class targets (N,), the target's
    probability 1 - smooth_factor and every other class's smooth_factor / (C - 1)."""

    def __init__(self, num_classes: int = 1000, smooth_factor: float = 0.) -> None:
        super().__init__()
        self.on_value = 1.0 - smooth_factor
        self.off_value = 1.0 * smooth_factor / (num_classes - 1)

    def forward(self, pred: Any, target: Any) -> Any:
        one_hot = npu_one_hot(target.int(), -1, pred.size(1), self.on_value, self.off_value)
        loss = npu_softmax_cross_entropy_with_logits(pred, one_hot)
        return torch.mean(loss, [0], keepdim=False, dtype=torch.float32)
