"""The stand-in ``torch_npu.contrib``: :mod:`.transfer_to_npu` (the one-line migration of a
CUDA script); its modules and functions (``ROIAlign``, ``npu_fused_attention``, ...) are not
modelled (each raises NotModelled, naming it)."""

from .._missing import not_modelled

__all__: list[str] = []

__getattr__ = not_modelled("torch_npu.contrib")
