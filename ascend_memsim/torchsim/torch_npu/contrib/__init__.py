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
from .function import *  # noqa: F403  (contrib re-exports both trees, as torch_npu's does)
from .function import __all__ as _FUNCTIONS
from .module import *  # noqa: F403
from .module import __all__ as _MODULES

#: both trees' names; DCNv2 is imported by torch_npu's contrib but left out of its __all__
__all__ = [*_FUNCTIONS, *(name for name in _MODULES if name != "DCNv2")]

__getattr__ = not_modelled("torch_npu.contrib")
