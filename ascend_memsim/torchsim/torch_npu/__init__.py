"""The stand-in ``torch_npu``: a package tree shaped like the real one (``npu/``, ``contrib/``,
``optim/``, ``utils/``, ``profiler/``, ``testing/``, ``distributed/``, ``dynamo/``, ``onnx/``),
that :mod:`ascend_memsim.torchsim.standin` serves as ``torch_npu`` during an estimate.

Its modules run the script's calls on the estimate's simulated device; a public name of the
real torch_npu that a module does not model raises
:class:`~ascend_memsim.torchsim.torch_npu._missing.NotModelled` (an AttributeError naming
it). The fused operators (``torch_npu.npu_*``) are resolved on first use from the modules
that model them (:data:`OPERATORS`), one family per module, and so are the three Python
names torch_npu exports lazily (``torch_npu/_init/core/_exports.py``: ``HiFloat8Tensor``,
``erase_stream``, ``matmul_checksum``; :data:`PYTHON_NAMES`).
"""

from __future__ import annotations

import importlib

import torch

from ..ops import OPERATORS as _FAMILY_OPERATORS
from . import npu
from ._missing import not_modelled

__all__ = ["npu", "OPERATORS", "HiFloat8Tensor", "erase_stream", "matmul_checksum"]

#: DECISION: the stand-in's version is the installed torch's release: torch_npu's releases
#: follow torch's (torch_npu 2.14.0 requires torch 2.14.0), and scripts compare the two
__version__ = torch.__version__.split("+")[0]

#: torch_npu.npu_* operator -> the torchsim module that models it
OPERATORS = {
    "npu_fusion_attention": "..fused",
    "npu_fusion_attention_grad": "..fused",
    # the families of ascend_memsim.torchsim.ops, as names relative to this package
    **{name: ".." + home.removeprefix("ascend_memsim.torchsim.")
       for name, home in _FAMILY_OPERATORS.items()},
}

#: torch_npu.<name> -> (the stand-in module, its name there), as torch_npu's lazy exports
PYTHON_NAMES = {
    "HiFloat8Tensor": (".utils.hif8_tensor", "HiFloat8Tensor"),
    "erase_stream": (".npu._erase_stream", "_erase_stream"),
    "matmul_checksum": (".utils._checksum", "matmul_checksum"),
}

#: the subpackages imported when first named (``torch_npu.optim`` after ``import torch_npu``)
_SUBPACKAGES = ("contrib", "optim", "utils", "profiler", "testing", "distributed", "dynamo",
                "onnx")

_missing = not_modelled("torch_npu")


def __getattr__(name: str) -> object:
    home = OPERATORS.get(name)
    if home is not None:
        value = getattr(importlib.import_module(home, __name__), name)
    elif name in PYTHON_NAMES:
        module, attr = PYTHON_NAMES[name]
        value = getattr(importlib.import_module(module, __name__), attr)
    elif name in _SUBPACKAGES:
        value = importlib.import_module(f".{name}", __name__)
    else:
        return _missing(name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *OPERATORS, *PYTHON_NAMES, *_SUBPACKAGES])
