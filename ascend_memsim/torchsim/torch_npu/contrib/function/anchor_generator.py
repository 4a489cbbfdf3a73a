"""The stand-in ``torch_npu.contrib.function.anchor_generator``: the responsible flags of a
feature map's anchors (``torch_npu/contrib/function/anchor_generator.py``), through
``npu_anchor_response_flags``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._ops.detection import npu_anchor_response_flags

__all__ = ["npu_single_level_responsible_flags"]


def npu_single_level_responsible_flags(featmap_size: Sequence[int], gt_bboxes: Any,
                                       stride: Sequence[int], num_base_anchors: int) -> Any:
    """The flags of the anchors of one feature map, (featmap_h * featmap_w *
    num_base_anchors,) uint8.

    torch_npu's dtype check (``box_dtype_check``) compares the tensor, not its dtype, with
    float and half, so it always casts: the boxes are made float32 (a copy unless they are
    float32 already).
    """
    return npu_anchor_response_flags(gt_bboxes.float(), featmap_size, stride,
                                     num_base_anchors)
