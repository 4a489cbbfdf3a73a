"""torch_npu's detection operators on the fake NPU, for ``torch_npu.contrib``: ROI align,
position-sensitive ROI pooling, modulated deformable convolution, batched multi-class NMS,
the box coders and the anchor flags.

Outputs (Ascend/op-plugin at 517f2e7d, ``op_plugin/ops/``):

- ``npu_roi_align(x, rois, ...)`` (``aclops/RoiAlignKernelNpu.cpp``,
  ``roi_align_npu_output_size``): (rois.size(0), x.size(1), pooled_height, pooled_width) in
  x's dtype; with a float16 x or rois the kernel works in float32 (copies of both) and casts
  the result to float16. ``npu_roi_alignbk(grad, rois, xdiff_shape, ...)``
  (``opapi/RoiAlignBackwardKernelNpuOpApi.cpp``): ``xdiff_shape`` in grad's dtype. Neither
  has a derivative;
- ``npu_ps_roi_pooling(x, rois (B, 5, R), spatial_scale, group_size, output_dim)``
  (``aclops/PsRoiPoolingKernelNpu.cpp``): (B * R, output_dim, group_size, group_size) in
  x's dtype; its derivative (``derivatives.yaml``) keeps rois and x's height and width, and
  ``npu_ps_roi_pooling_backward`` gives (B, group_size**2 * output_dim, H, W). DECISION: x
  must be 4-D (N, C, H, W), since the derivative reads its height and width;
- ``npu_deformable_conv2d(x, weight, offset, ...)`` (``opapi/DeformableConv2dKernelNpuOpApi
  .cpp``; ``npu_deformable_conv2d_meta``): the convolution's output (N, C_out, Ho, Wo) and
  the deformed input (N, C_in, Ho * kh, Wo * kw), Ho and Wo the offset's, both in x's dtype;
  ``npu_deformable_conv2dbk`` gives gradients like x, weight and offset, and (C_out,) for
  the bias. ESTIMATE: the NHWC copy of the deformed input that the aclop kernel transposes
  is not counted;
- ``npu_batch_nms(boxes (B, N, C, 4), scores (B, N, C), ...)`` (``aclops/BatchNMSKernelNpu
  .cpp``): fixed-size outputs padded to ``max_total_size``, whatever the scores: boxes
  (B, max_total_size, 4), scores and classes (B, max_total_size) in the boxes' dtype, and the
  count of boxes kept (B,) int32;
- ``npu_bounding_box_encode`` / ``_decode`` (``aclops/BoundingBox*KernelNpu.cpp``): (N, 4)
  like the first input; ``npu_yolo_boxes_encode`` (``aclops/YoloBoxesEncodeKernelNpu.cpp``):
  like the ground-truth boxes; ``npu_anchor_response_flags``
  (``aclops/AnchorResponseFlagsKernelNpu.cpp``, ``infersize_npu_anchor_response_flags``):
  (featmap_h * featmap_w * num_base_anchors,) uint8.

Each refuses what its kernel's checks refuse, with their messages (RuntimeError, as
torch_npu's TORCH_CHECK raises). O(1) in the tensors' sizes: nothing is computed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["npu_roi_align", "npu_roi_alignbk", "npu_ps_roi_pooling",
           "npu_ps_roi_pooling_backward", "npu_deformable_conv2d", "npu_deformable_conv2dbk",
           "npu_batch_nms", "npu_bounding_box_encode", "npu_bounding_box_decode",
           "npu_yolo_boxes_encode", "npu_anchor_response_flags"]

#: YoloBoxesEncodeKernelNpu.cpp: MAX_ANCHOR_BOX_SIZE
_MAX_ANCHOR_BOXES = 20480


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise RuntimeError(message)


def npu_roi_align(self: Any, rois: Any, spatial_scale: float, pooled_height: int,
                  pooled_width: int, sample_num: int, roi_end_mode: int) -> Any:
    """``torch_npu.npu_roi_align``: (rois.size(0), C, pooled_height, pooled_width)."""
    _check(rois.dim() >= 1, "The dim of input tensor [rois] is less than 1.")
    _check(self.dim() >= 2, "The dim of input tensor [self] is less than 2.")
    # the kernel's float32 copies of float16 inputs, for the call
    copies = [t.float() for t in (self, rois) if t.dtype == torch.float16]
    out = self.new_empty((rois.size(0), self.size(1), pooled_height, pooled_width))
    if copies:
        del copies
        out = out.half()
    return out


def npu_roi_alignbk(self: Any, rois: Any, xdiff_shape: Sequence[int], pooled_width: int,
                    pooled_height: int, spatial_scale: float, sample_num: int,
                    roi_end_mode: int | None = None) -> Any:
    """``torch_npu.npu_roi_alignbk``: the gradient of the features, ``xdiff_shape``."""
    return self.new_empty(tuple(xdiff_shape))


class _PsRoiPooling(torch.autograd.Function):
    """npu_ps_roi_pooling's autograd: keeps rois and x's height and width."""

    @staticmethod
    def forward(ctx: Any, x: Any, rois: Any, spatial_scale: float, group_size: int,
                output_dim: int) -> Any:
        ctx.save_for_backward(rois)
        ctx.args = (spatial_scale, group_size, output_dim, (x.size(2), x.size(3)))
        return x.new_empty((rois.size(0) * rois.size(2), output_dim, group_size, group_size))

    @staticmethod
    def backward(ctx: Any, grad: Any) -> tuple:
        (rois,) = ctx.saved_tensors
        spatial_scale, group_size, output_dim, size = ctx.args
        return (npu_ps_roi_pooling_backward(grad, rois, spatial_scale, group_size,
                                            output_dim, size), None, None, None, None)


def npu_ps_roi_pooling(self: Any, rois: Any, spatial_scale: float, group_size: int,
                       output_dim: int) -> Any:
    """``torch_npu.npu_ps_roi_pooling``: (B * R, output_dim, group_size, group_size)."""
    _check(rois.dim() >= 3, f"rois only supports at least 3D tensors, rois got: "
                            f"{rois.dim()}D")
    _check(self.dim() >= 4, f"the input of npu_ps_roi_pooling is (N, C, H, W), got a "
                            f"{self.dim()}-D tensor")
    return _PsRoiPooling.apply(self, rois, spatial_scale, group_size, output_dim)


def npu_ps_roi_pooling_backward(output_grad: Any, rois: Any, spatial_scale: float,
                                group_size: int, output_dim: int,
                                input_size: Sequence[int]) -> Any:
    """``torch_npu.npu_ps_roi_pooling_backward``: (B, group_size**2 * output_dim, H, W)."""
    _check(len(input_size) >= 2, "The length of param 'input_size' must be greater than or "
                                 "equal to 2.")
    return output_grad.new_empty((rois.size(0), group_size * group_size * output_dim,
                                  input_size[0], input_size[1]))


def npu_deformable_conv2d(input: Any, weight: Any, offset: Any, bias: Any,
                          kernel_size: Sequence[int], stride: Sequence[int],
                          padding: Sequence[int], dilation: Sequence[int] = (1, 1, 1, 1),
                          groups: int = 1, deformable_groups: int = 1,
                          modulated: bool = True) -> tuple:
    """``torch_npu.npu_deformable_conv2d``: (output (N, C_out, Ho, Wo), deformed input
    (N, C_in, Ho * kh, Wo * kw))."""
    for name, t in (("input", input), ("weight", weight), ("offset", offset)):
        _check(t.dim() >= 4, f"{name} has to be more than 4D, but got Tensor of dimension "
                             f"{t.dim()}.")
    _check(len(kernel_size) >= 2, f"kernel_size has to contain more than 2 elements, but got "
                                  f"{len(kernel_size)}")
    _check(len(stride) >= 4, "stride must have at least 4 elements.")
    _check(len(dilation) >= 4, "dilation must have at least 4 elements.")
    n, c_in = input.shape[:2]
    ho, wo = offset.shape[2:4]
    kh, kw = kernel_size[:2]
    return (input.new_empty((n, weight.size(0), ho, wo)),
            input.new_empty((n, c_in, ho * kh, wo * kw)))


def npu_deformable_conv2dbk(input: Any, grad_output: Any, offset_out: Any, weight: Any,
                            offset: Any, kernel_size: Sequence[int], stride: Sequence[int],
                            padding: Sequence[int], dilation: Sequence[int] = (1, 1, 1, 1),
                            groups: int = 1, deformable_groups: int = 1,
                            modulated: bool = True) -> tuple:
    """``torch_npu.npu_deformable_conv2dbk``: the gradients of input, weight, offset and
    bias (C_out,)."""
    return (torch.empty_like(input), torch.empty_like(weight), torch.empty_like(offset),
            grad_output.new_empty((grad_output.size(1),)))


def npu_batch_nms(self: Any, scores: Any, score_threshold: float, iou_threshold: float,
                  max_size_per_class: int, max_total_size: int,
                  change_coordinate_frame: bool = False, transpose_box: bool = False) -> tuple:
    """``torch_npu.npu_batch_nms``: (boxes (B, T, 4), scores (B, T), classes (B, T),
    counts (B,) int32), T = ``max_total_size``: the kernel's fixed-size outputs."""
    _check(self.numel() > 0, "The input tensor [self] is an empty tensor.")
    b = self.size(0)
    return (self.new_empty((b, max_total_size, 4)), self.new_empty((b, max_total_size)),
            self.new_empty((b, max_total_size)), self.new_empty((b,), dtype=torch.int32))


def npu_bounding_box_encode(anchor_box: Any, ground_truth_box: Any, means0: float,
                            means1: float, means2: float, means3: float, stds0: float,
                            stds1: float, stds2: float, stds3: float) -> Any:
    """``torch_npu.npu_bounding_box_encode``: the deltas, (N, 4) like the anchors."""
    return anchor_box.new_empty((anchor_box.size(0), 4))


def npu_bounding_box_decode(rois: Any, deltas: Any, means0: float, means1: float,
                            means2: float, means3: float, stds0: float, stds1: float,
                            stds2: float, stds3: float, max_shape: Sequence[int],
                            wh_ratio_clip: float) -> Any:
    """``torch_npu.npu_bounding_box_decode``: the boxes, (N, 4) like the rois."""
    return rois.new_empty((rois.size(0), 4))


def npu_yolo_boxes_encode(self: Any, gt_bboxes: Any, stride: Any,
                          performance_mode: bool = False) -> Any:
    """``torch_npu.npu_yolo_boxes_encode``: the deltas, like ``gt_bboxes``."""
    _check(self.dim() == 2 and self.size(1) == 4,
           f"Non-empty 2D anchor_boxes tensor expected but got a tensor with sizes "
           f"{list(self.shape)}")
    _check(self.size(0) <= _MAX_ANCHOR_BOXES,
           f"anchor_boxes only support max [{_MAX_ANCHOR_BOXES}] num, but got num "
           f"{self.size(0)}")
    _check(gt_bboxes.dim() == 2 and gt_bboxes.size(1) == 4,
           f"Non-empty 2D gt_bboxes tensor expected but got a tensor with sizes "
           f"{list(gt_bboxes.shape)}")
    _check(stride.dim() == 1, f"Non-empty 1D stride tensor expected but got a tensor with "
                              f"sizes {list(stride.shape)}")
    _check(stride.size(0) == gt_bboxes.size(0),
           f"stride's length should be equal gt_bboxes' num, but got stride length "
           f"{stride.size(0)}gt_bboxes num {gt_bboxes.size(0)}")
    _check(not stride.is_floating_point() and stride.dtype != torch.int64,
           f"int32 strdie tensor expected but got a tensor with dtype: {stride.dtype}")
    return torch.empty_like(gt_bboxes)


def npu_anchor_response_flags(self: Any, featmap_size: Sequence[int], stride: Sequence[int],
                              num_base_anchors: int) -> Any:
    """``torch_npu.npu_anchor_response_flags``: (featmap_h * featmap_w * anchors,) uint8."""
    _check(len(featmap_size) == 2, f"expected feat_map_size equals to 2, but got size "
                                   f"{len(featmap_size)}")
    _check(self.dim() == 2 and self.size(1) == 4,
           f"Non-empty 2D gt_bboxes tensor expected but got a tensor with sizes "
           f"{list(self.shape)}")
    _check(self.dtype in (torch.float16, torch.float32),
           f"float16 or float32 tensor expected but got a tensor with dtype: {self.dtype}")
    flags = self.new_empty((math.prod(featmap_size) * num_base_anchors,), dtype=torch.uint8)
    if self.dtype != torch.float32:
        # the kernel's float32 copy of the boxes, for the call
        copy = self.float()
        del copy
    return flags
