"""The stand-in ``torch_npu.contrib``: :mod:`.transfer_to_npu` (the one-line migration of a
CUDA script), and contrib's public modules and functions (``__all__``, torch_npu 2.14.0's
``torch_npu/contrib/__init__.py``) from :mod:`.module` and :mod:`.function`, a tree shaped
like torch_npu's: detection (``ROIAlign``, ``PSROIPool``, ``ModulatedDeformConv``, the NMS
and box coders), BERT and fairseq attention (``npu_fused_attention``, ``MultiheadAttention``,
``fuse_add_softmax_dropout``), quantised linears (``LinearQuant``, ``LinearA8W8Quant``,
``LinearWeightQuant``), dropout and drop path with masks made ahead, ``Prefetcher``, ``roll``,
``Focus``, ``ChannelShuffle``. Their parameters and outputs have torch_npu's shapes and
dtypes, and their graphs keep what torch_npu's keep; the torch_npu operators they call that
the stand-in's operator families do not have are in :mod:`._ops`. The other names contrib
imports (``npu_iou`` and the other IoUs, ``Mish``, ``BiLSTM``, ...) are not modelled (each
raises NotModelled, naming it).

DECISION: ``fuse_add_softmax_dropout`` is in torch_npu 2.14.0's ``__all__`` but its
``__init__`` does not import it (``torch_npu.contrib.fuse_add_softmax_dropout`` is an
AttributeError there, ``torch_npu.contrib.function.fuse_add_softmax_dropout`` the function);
here it is there, as ``__all__`` says.
"""

from .._missing import not_modelled
from .function import (
    fuse_add_softmax_dropout,
    matmul_transpose,
    npu_batched_multiclass_nms,
    npu_bbox_coder_decode_xywh2xyxy,
    npu_bbox_coder_encode_xyxy2xywh,
    npu_bbox_coder_encode_yolo,
    npu_fast_condition_index_put,
    npu_fused_attention,
    npu_fused_attention_with_layernorm,
    npu_multiclass_nms,
    npu_single_level_responsible_flags,
    roll,
)
from .module import (
    ChannelShuffle,
    DCNv2,  # noqa: F401  (imported by torch_npu's contrib, outside its __all__)
    Focus,
    LabelSmoothingCrossEntropy,
    LinearA8W8Quant,
    LinearQuant,
    LinearWeightQuant,
    ModulatedDeformConv,
    MultiheadAttention,
    NpuCachedDropout,
    NpuDropPath,
    NpuFairseqDropout,
    Prefetcher,
    PSROIPool,
    ROIAlign,
)

__all__ = [
    # from function
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
    "npu_fused_attention_with_layernorm",
    "npu_fused_attention",
    # from module
    "ChannelShuffle",
    "Prefetcher",
    "LabelSmoothingCrossEntropy",
    "ROIAlign",
    "ModulatedDeformConv",
    "PSROIPool",
    "NpuFairseqDropout",
    "NpuCachedDropout",
    "MultiheadAttention",
    "NpuDropPath",
    "Focus",
    "LinearA8W8Quant",
    "LinearQuant",
    "LinearWeightQuant",
]

__getattr__ = not_modelled("torch_npu.contrib")
