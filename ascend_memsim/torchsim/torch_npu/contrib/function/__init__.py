"""The stand-in ``torch_npu.contrib.function``: contrib's functions, one module each as in
torch_npu's tree (``torch_npu/contrib/function/``); the ones it does not model
(``npu_iou`` and the other IoUs, ``dropout_with_byte_mask``) raise NotModelled, naming them."""

from ..._missing import not_modelled
from .anchor_generator import npu_single_level_responsible_flags
from .bbox_coder import (
    npu_bbox_coder_decode_xywh2xyxy,
    npu_bbox_coder_encode_xyxy2xywh,
    npu_bbox_coder_encode_yolo,
)
from .fuse_add_softmax_dropout import fuse_add_softmax_dropout
from .fused_attention import npu_fused_attention, npu_fused_attention_with_layernorm
from .index_op import npu_fast_condition_index_put
from .matmul_transpose import matmul_transpose
from .nms import npu_batched_multiclass_nms, npu_multiclass_nms
from .roll import roll

__all__ = [
    "npu_multiclass_nms",
    "npu_batched_multiclass_nms",
    "npu_single_level_responsible_flags",
    "npu_fast_condition_index_put",
    "npu_bbox_coder_encode_yolo",
    "npu_bbox_coder_encode_xyxy2xywh",
    "npu_bbox_coder_decode_xywh2xyxy",
    "fuse_add_softmax_dropout",
    "roll",
    "matmul_transpose",
    "npu_fused_attention",
    "npu_fused_attention_with_layernorm",
]

__getattr__ = not_modelled("torch_npu.contrib.function")
