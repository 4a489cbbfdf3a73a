"""The stand-in ``torch_npu.testing`` (its public names are in :mod:`.testcase`)."""

from .._missing import not_modelled

__all__: list[str] = []

__getattr__ = not_modelled("torch_npu.testing")
