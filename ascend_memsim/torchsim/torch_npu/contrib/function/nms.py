"""The stand-in ``torch_npu.contrib.function.nms``: multi-class NMS over one image or a batch,
through ``npu_batch_nms`` (``torch_npu/contrib/function/nms.py``).

DECISION, the size of the outputs: torch_npu's ``npu_batch_nms`` gives fixed-size outputs
padded to ``max_total_size``, which these functions set to ``max_num`` (``BatchNMSKernelNpu
.cpp``), so the outputs have ``max_num`` rows whatever the scores, as on the NPU; the number
kept is not known on fake tensors and is not needed for the memory. The boxes and scores are
cast to float16 for the operator, so the results are float16, the labels too.
"""

from __future__ import annotations

from typing import Any

import torch

from .._ops.detection import npu_batch_nms

__all__ = ["npu_multiclass_nms", "npu_batched_multiclass_nms"]


def npu_multiclass_nms(multi_bboxes: Any, multi_scores: Any, score_thr: float = 0.05,
                       nms_thr: float = 0.45, max_num: int = 50,
                       score_factors: Any = None) -> tuple:
    """Multi-class NMS of one image: boxes (n, #class, 4) or (n, 4), scores (n, #class + 1)
    (the last column, the background, dropped). Returns (boxes and scores (max_num, 5),
    labels (max_num,)), float16."""
    classes = multi_scores.size(1) - 1
    boxes = multi_scores.size(0)
    scores = multi_scores[:, :-1]
    if score_factors is not None:
        scores = scores * score_factors[:, None]
    multi_bboxes = multi_bboxes.reshape(1, boxes, multi_bboxes.numel() // 4 // boxes, 4)
    scores = scores.reshape(1, boxes, classes)
    kept, kept_scores, labels, _count = npu_batch_nms(
        multi_bboxes.half(), scores.half(), score_thr, nms_thr, max_num, max_num)
    kept = kept.reshape(kept.shape[1:])
    kept_scores = kept_scores.reshape(kept_scores.shape[1])
    labels = labels.reshape(labels.shape[1])
    return torch.cat([kept, kept_scores[:, None]], -1), labels


def npu_batched_multiclass_nms(multi_bboxes: Any, multi_scores: Any, score_thr: float = 0.05,
                               nms_thr: float = 0.45, max_num: int = 50,
                               score_factors: Any = None) -> tuple:
    """Multi-class NMS of a batch: boxes (bs, n, #class, 4) or (bs, n, 4), scores
    (bs, n, #class + 1). Returns (boxes and scores (bs, max_num, 5), labels
    (bs, max_num)), float16."""
    classes = multi_scores.size(2) - 1
    boxes = multi_scores.size(1)
    batch = multi_scores.size(0)
    scores = multi_scores[..., :-1]
    if score_factors is not None:
        scores = scores * score_factors[..., None]
    multi_bboxes = multi_bboxes.reshape(batch, boxes,
                                        multi_bboxes.numel() // 4 // boxes // batch, 4)
    scores = scores.reshape(batch, boxes, classes)
    kept, kept_scores, labels, _count = npu_batch_nms(
        multi_bboxes.half(), scores.half(), score_thr, nms_thr, max_num, max_num)
    return torch.cat([kept, kept_scores[..., None]], -1), labels
