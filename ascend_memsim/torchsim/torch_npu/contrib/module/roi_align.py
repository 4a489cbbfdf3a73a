"""The stand-in ``torch_npu.contrib.module.roi_align``: detectron2's ROIAlign on
``npu_roi_align`` (``torch_npu/contrib/module/roi_align.py``).

The features are made float32 (a copy of others) and the output is (R, C, pooled_h,
pooled_w), float32 (float16 with float16 rois). The graph keeps the rois alone; the
backward is ``npu_roi_alignbk``, a gradient of the features' shape.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.autograd.function import once_differentiable
from torch.nn.modules.utils import _pair

from .._ops.detection import npu_roi_align, npu_roi_alignbk

__all__ = ["ROIAlign"]

#: the kernel's roi_end_mode for aligned and legacy boxes
_ALIGNED, _LEGACY = 3, 0


class _ROIAlign(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, features: Any, rois: Any, output_size: Any, spatial_scale: float,
                sampling_ratio: int, aligned: bool) -> Any:
        ctx.save_for_backward(rois)
        ctx.output_size = _pair(output_size)
        ctx.args = (spatial_scale, sampling_ratio, _ALIGNED if aligned else _LEGACY)
        ctx.input_shape = features.size()
        return npu_roi_align(features, rois, spatial_scale, output_size[0], output_size[1],
                             sampling_ratio, ctx.args[2])

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: Any) -> tuple:
        (rois,) = ctx.saved_tensors
        spatial_scale, sampling_ratio, end_mode = ctx.args
        height, width = ctx.output_size
        dx = npu_roi_alignbk(grad, rois, ctx.input_shape, height, width, spatial_scale,
                             sampling_ratio, end_mode)
        return dx, None, None, None, None, None


roi_align = _ROIAlign.apply


class ROIAlign(torch.nn.Module):
    """ROI align of NCHW features over rois (R, 5) (batch index, x1, y1, x2, y2).

    Raises:
        ValueError: rois is not (R, 5).
    """

    def __init__(self, output_size: Any, spatial_scale: float, sampling_ratio: int,
                 aligned: bool = True) -> None:
        super().__init__()
        self.output_size = output_size
        self.spatial_scale = spatial_scale
        self.sampling_ratio = sampling_ratio
        self.aligned = aligned

    def forward(self, input_tensor: Any, rois: Any) -> Any:
        if rois.dim() != 2 or rois.size(1) != 5:
            raise ValueError("Expected rois.dim() == 2 and rois.size(1) == 5")
        return roi_align(input_tensor.float(), rois, self.output_size, self.spatial_scale,
                         self.sampling_ratio, self.aligned)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(output_size={self.output_size}, "
                f"spatial_scale={self.spatial_scale}, sampling_ratio={self.sampling_ratio}, "
                f"aligned={self.aligned})")
