"""``import torch_npu`` during an estimate: the stand-in module, installed for the run.

As :func:`ascend_memsim.acl.install_acl` serves pyacl programs, :func:`install_torch_npu`
puts a ``torch_npu`` module (with ``torch_npu.npu``, ``torch_npu.npu.amp`` and
``torch_npu.npu.memory``, all :mod:`.npu`) in ``sys.modules``; :func:`uninstall_torch_npu`
puts back what was there.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from . import fused, npu

__all__ = ["install_torch_npu", "uninstall_torch_npu"]

_NAMES = ("torch_npu", "torch_npu.npu", "torch_npu.npu.amp", "torch_npu.npu.memory")


def _module() -> types.ModuleType:
    module: Any = types.ModuleType("torch_npu", "ascend-memsim's stand-in for torch_npu: fake "
                                           "tensors on a simulated NPU")
    module.npu = npu
    module.npu_fusion_attention = fused.npu_fusion_attention
    module.npu_fusion_attention_grad = fused.npu_fusion_attention_grad
    module.__version__ = "2.14.1+ascend_memsim"
    module.__path__ = []
    return module


def install_torch_npu() -> dict:
    """Make ``import torch_npu`` give the stand-in; what the names were before."""
    previous = {name: sys.modules.get(name) for name in _NAMES}
    sys.modules.update({"torch_npu": _module(), "torch_npu.npu": npu,
                        "torch_npu.npu.amp": npu.amp, "torch_npu.npu.memory": npu.memory})
    return previous


def uninstall_torch_npu(previous: dict) -> None:
    """Undo :func:`install_torch_npu`."""
    for name in _NAMES:
        if previous.get(name) is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = previous[name]
