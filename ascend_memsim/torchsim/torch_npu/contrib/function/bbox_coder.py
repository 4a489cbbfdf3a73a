"""The stand-in ``torch_npu.contrib.function.bbox_coder``: the box coders of mmdetection on
NPU operators (``torch_npu/contrib/function/bbox_coder.py``): YOLO encoding, xyxy to xywh
deltas and back.

torch_npu's dtype checks (``_box_dtype_check``, ``_stride_dtype_check``) compare the tensor,
not its dtype, with the accepted dtypes, so they always cast: boxes are made float32 and
strides int32 (copies unless they are already), and the results are float32.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._ops.detection import (
    npu_bounding_box_decode,
    npu_bounding_box_encode,
    npu_yolo_boxes_encode,
)

__all__ = ["npu_bbox_coder_encode_yolo", "npu_bbox_coder_decode_xywh2xyxy",
           "npu_bbox_coder_encode_xyxy2xywh"]


def _pair_check(bboxes: Any, other: Any, name: str) -> None:
    if bboxes.size(0) != other.size(0):
        raise ValueError(f"Expected bboxes.size(0) == {name}.size(0)")
    if not bboxes.size(-1) == other.size(-1) == 4:
        raise ValueError(f"Expected bboxes.size(-1) == {name}.size(-1) == 4")


def npu_bbox_coder_encode_yolo(bboxes: Any, gt_bboxes: Any, stride: Any) -> Any:
    """The deltas that take ``bboxes`` (n, 4) to ``gt_bboxes`` (n, 4) at ``stride`` (n,):
    (n, 4) float32."""
    _pair_check(bboxes, gt_bboxes, "gt_bboxes")
    return npu_yolo_boxes_encode(bboxes.float(), gt_bboxes.float(), stride.int(),
                                 performance_mode=False)


def npu_bbox_coder_encode_xyxy2xywh(bboxes: Any, gt_bboxes: Any,
                                    means: Sequence[float] | None = None,
                                    stds: Sequence[float] | None = None,
                                    is_normalized: bool = False,
                                    normalized_scale: float = 10000.) -> Any:
    """The xywh deltas of ``gt_bboxes`` against ``bboxes`` (both (n, 4) xyxy): (n, 4)
    float32."""
    means = [0., 0., 0., 0.] if means is None else means
    stds = [1., 1., 1., 1.] if stds is None else stds
    _pair_check(bboxes, gt_bboxes, "gt_bboxes")
    bboxes, gt_bboxes = bboxes.float(), gt_bboxes.float()
    if is_normalized:
        bboxes = bboxes * normalized_scale
        gt_bboxes = gt_bboxes * normalized_scale
    return npu_bounding_box_encode(bboxes, gt_bboxes, means[0], means[1], means[2], means[3],
                                   stds[0], stds[1], stds[2], stds[3])


def npu_bbox_coder_decode_xywh2xyxy(bboxes: Any, pred_bboxes: Any,
                                    means: Sequence[float] | None = None,
                                    stds: Sequence[float] | None = None,
                                    max_shape: Sequence[int] | None = None,
                                    wh_ratio_clip: float = 16 / 1000) -> Any:
    """The xyxy boxes that ``pred_bboxes``' deltas give from ``bboxes`` (both (n, 4)):
    (n, 4) float32."""
    means = [0., 0., 0., 0.] if means is None else means
    stds = [1., 1., 1., 1.] if stds is None else stds
    max_shape = [9999, 9999] if max_shape is None else max_shape
    _pair_check(bboxes, pred_bboxes, "pred_bboxes")
    return npu_bounding_box_decode(bboxes.float(), pred_bboxes.float(), means[0], means[1],
                                   means[2], means[3], stds[0], stds[1], stds[2], stds[3],
                                   max_shape, wh_ratio_clip)
