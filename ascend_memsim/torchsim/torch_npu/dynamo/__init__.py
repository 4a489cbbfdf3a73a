"""The stand-in ``torch_npu.dynamo``: none of its public names is modelled (each raises
NotModelled, naming it)."""

from .._missing import not_modelled

__all__: list[str] = []

__getattr__ = not_modelled("torch_npu.dynamo")
