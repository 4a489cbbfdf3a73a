"""The stand-in ``torch_npu.contrib.function.fuse_add_softmax_dropout``: attention scores +
mask, softmax and dropout, fused on the NPU where the shapes allow
(``torch_npu/contrib/function/fuse_add_softmax_dropout.py``)."""

from __future__ import annotations

import math
from typing import Any

import torch

from .._ops.dropout import npu_dropout_with_add_softmax

__all__ = ["fuse_add_softmax_dropout"]

#: the sequence lengths torch_npu sends to the fused operator
_FUSED_LENGTHS = (128, 256, 384, 512)


def fuse_add_softmax_dropout(training: bool, dropout: Any, attn_mask: Any, attn_scores: Any,
                             attn_head_size: float, p: float = 0.5, dim: int = -1) -> Any:
    """softmax(attn_mask + attn_scores / sqrt(attn_head_size)) with dropout, like
    ``attn_scores`` (n, c, h, w).

    When h is 128, 256, 384 or 512 and n * c a multiple of 32, torch_npu runs
    ``npu_dropout_with_add_softmax`` (probability ``p`` in training, 0 otherwise; ``dropout``
    is not called): the graph keeps its byte mask and softmax. Otherwise it adds, takes the
    softmax over the last axis whatever ``dim`` says (as torch_npu does) and calls
    ``dropout``.
    """
    n, c, h, _w = attn_scores.size()
    alpha = 1 / math.sqrt(attn_head_size)
    if h in _FUSED_LENGTHS and (n * c) % 32 == 0:
        _mask, _softmax, probs = npu_dropout_with_add_softmax(
            attn_scores, attn_mask, alpha, p if training else 0., -1)
        return probs
    scores = torch.add(attn_mask, attn_scores, alpha=alpha)
    return dropout(torch.nn.functional.softmax(scores, dim=-1))
