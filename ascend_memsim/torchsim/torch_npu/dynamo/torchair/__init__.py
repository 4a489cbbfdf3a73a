"""The stand-in ``torch_npu.dynamo.torchair``: torch.compile's NPU backend (graph mode).

DECISION: an estimate runs ``torch.compile`` eagerly (see :mod:`ascend_memsim.torchsim.limits`),
so :func:`get_npu_backend` gives torch's eager backend, and the settings classes are kept as
given; graph-mode memory (GE's static memory planning) is not modelled.
"""

from __future__ import annotations

import logging
from typing import Any

from ..._missing import not_modelled

__all__ = ["CompilerConfig", "get_npu_backend", "get_compiler", "dynamo_export", "logger",
           "use_internal_format_weight", "register_fx_node_ge_converter",
           "register_replacement", "patch_for_hcom", "npu_format_cast_via_cpu"]

__getattr__ = not_modelled("torch_npu.dynamo.torchair")

logger = logging.getLogger("torchair")


class _Settings:
    """Nested settings (``config.experimental_config.frozen_parameter = True``): kept."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        value = _Settings()
        setattr(self, name, value)
        return value


class CompilerConfig(_Settings):
    """torchair's CompilerConfig: every setting is accepted and kept."""


def get_npu_backend(*, compiler_config: Any = None, custom_decompositions: Any = None) -> str:
    """torch.compile's backend: ``"eager"`` (see the module's DECISION)."""
    return "eager"


def get_compiler(compiler_config: Any = None) -> str:
    return "eager"


def dynamo_export(*args: Any, **kwargs: Any) -> None:
    """Exports a graph for offline inference: nothing to write in an estimate."""


def use_internal_format_weight(model: Any) -> None:
    """Casts weights to the NPU's private formats: their sizes are modelled as ND."""


def register_fx_node_ge_converter(aten_op: Any) -> Any:
    def decorator(fn: Any) -> Any:
        return fn

    return decorator


def register_replacement(*args: Any, **kwargs: Any) -> None:
    pass


def patch_for_hcom() -> None:
    pass


def npu_format_cast_via_cpu(tensor: Any, *args: Any, **kwargs: Any) -> Any:
    return tensor
