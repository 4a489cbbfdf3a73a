"""The stand-in ``torch_npu.contrib.module``: contrib's modules, one module each as in
torch_npu's tree (``torch_npu/contrib/module/``); the ones it does not model (``Mish``,
``SiLU``, ``BiLSTM``, ``FusedColorJitter``, the ``FastBatchNorm`` family, ``QuantConv2d``,
``DropoutWithByteMask``, ...) raise NotModelled, naming them."""

from ..._missing import not_modelled
from .channel_shuffle import ChannelShuffle
from .crossentropy import LabelSmoothingCrossEntropy
from .deform_conv import DCNv2, ModulatedDeformConv
from .drop_path import NpuDropPath
from .ensemble_dropout import NpuCachedDropout, NpuFairseqDropout
from .focus import Focus
from .linear_a8w8_quant import LinearA8W8Quant
from .linear_quant import LinearQuant
from .linear_weight_quant import LinearWeightQuant
from .multihead_attention import MultiheadAttention
from .prefetcher import Prefetcher
from .ps_roi_pooling import PSROIPool
from .roi_align import ROIAlign

__all__ = [
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
    "DCNv2",
]

__getattr__ = not_modelled("torch_npu.contrib.module")
