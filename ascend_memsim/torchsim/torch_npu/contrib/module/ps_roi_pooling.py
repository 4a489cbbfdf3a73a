"""The stand-in ``torch_npu.contrib.module.ps_roi_pooling``: R-FCN's position-sensitive ROI
pooling on ``npu_ps_roi_pooling`` (``torch_npu/contrib/module/ps_roi_pooling.py``).

Features (N, group_size**2 * output_dim, H, W) and rois (N, 5, R) give (N * R, output_dim,
group_size, group_size) in the features' dtype; the graph keeps the rois.
"""

from __future__ import annotations

from typing import Any

import torch

from .._ops.detection import npu_ps_roi_pooling

__all__ = ["PSROIPool"]


class PSROIPool(torch.nn.Module):
    """Position-sensitive ROI pooling; pooled_height == pooled_width == group_size.

    Raises:
        ValueError: the pooled sizes and the group size differ.
    """

    def __init__(self, pooled_height: int = 7, pooled_width: int = 7,
                 spatial_scale: float = 1 / 16.0, group_size: int = 7,
                 output_dim: int = 22) -> None:
        super().__init__()
        if not pooled_height == pooled_width == group_size:
            raise ValueError("only pooled_height == pooled_width == group_size supported.")
        self.group_size = group_size
        self.spatial_scale = spatial_scale
        self.output_dim = output_dim

    def forward(self, features: Any, rois: Any) -> Any:
        return npu_ps_roi_pooling(features, rois, self.spatial_scale, self.group_size,
                                  self.output_dim)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(pooled_width={self.group_size}, "
                f"pooled_height={self.group_size}, spatial_scale={self.spatial_scale}, "
                f"group_size={self.group_size}, output_dim={self.output_dim})")
