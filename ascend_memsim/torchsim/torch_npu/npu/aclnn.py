"""The stand-in ``torch_npu.npu.aclnn``: the aclnn operator library's switches
(``allow_hf32``: HF32 matmul and convolution, no effect on memory) and version."""

from __future__ import annotations

from ....allocators.rules import DEFAULT_CANN
from .._missing import not_modelled
from ._state import active

__all__ = ["allow_hf32", "version"]

__getattr__ = not_modelled("torch_npu.npu.aclnn")

#: whether aclnn may compute float32 matmuls in HF32 (torch_npu's default: False)
allow_hf32 = False


def version() -> str:
    """The aclnn library's version: the CANN release the running estimate models."""
    session = active()
    return DEFAULT_CANN if session is None else str(session.allocator.cann)
