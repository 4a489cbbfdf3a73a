"""What the operator families share: torch_npu's dtype numbers, the shape of a norm's
``rstd``, and the running estimate's product and CANN version (for the kernels whose
outputs or saved tensors depend on them)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from ...allocators.rules import DEFAULT_CANN, cann_tuple
from ..torch_npu import npu as _npu

__all__ = ["DTYPES", "dtype_of", "rstd_shape", "halved", "product", "cann", "mx_scale_shape",
           "define"]

#: torch_npu's dtype numbers (an ``int`` argument of a schema takes a ``torch.dtype`` as its
#: ScalarType number, and torch_npu's own types as theirs): ``TORCH_DTYPE_ENUM_VALUE_TO_SCALAR_
#: TYPE_MAP`` of ``torch_npu/op_plugin/meta/_meta_registrations.py``; 285 (int4), 290
#: (hifloat8), 296 and 297 (the float4 pairs) are held in uint8
DTYPES: dict[int, torch.dtype] = {
    0: torch.uint8, 1: torch.int8, 2: torch.int16, 3: torch.int32, 4: torch.int64,
    5: torch.float16, 6: torch.float32, 7: torch.float64, 11: torch.bool, 12: torch.qint8,
    13: torch.quint8, 14: torch.qint32, 15: torch.bfloat16, 16: torch.quint4x2,
    21: torch.bits8, 23: torch.float8_e5m2, 24: torch.float8_e4m3fn, 285: torch.uint8,
    290: torch.uint8, 291: torch.float8_e5m2, 292: torch.float8_e4m3fn, 296: torch.uint8,
    297: torch.uint8,
}


def dtype_of(value: Any, default: torch.dtype) -> torch.dtype:
    """The dtype a torch_npu dtype argument names (a number, a torch.dtype or None)."""
    if value is None:
        return default
    if isinstance(value, torch.dtype):
        return value
    return DTYPES.get(int(value), default)


def rstd_shape(x: Any, gamma: Any) -> list[int]:
    """``x``'s shape up to ``gamma``'s dimensions, then ones (``rms_norm_npu_output_size``,
    ``op_plugin/utils/KernelNpuOutputSize.cpp``; ``npu_rms_norm_meta``)."""
    lead = x.dim() - gamma.dim()
    return [int(x.shape[i]) if i < lead else 1 for i in range(x.dim())]


def halved(x: Any, dim: int) -> list[int]:
    """``x``'s shape with ``dim`` halved (``swiglu_backward_infershape``,
    ``KernelNpuOutputSize.cpp``)."""
    shape = list(x.shape)
    shape[dim] //= 2
    return shape


def mx_scale_shape(shape: Any, axis: int, block: int = 32) -> list[int]:
    """An MX scale's shape: ``shape`` with ``axis`` made ceil(ceil(d / block) / 2), and a
    trailing 2 (uint8 pairs; ``npu_dynamic_mx_quant`` in ``_meta_registrations.py``)."""
    out = [int(d) for d in shape] + [2]
    axis %= len(out) - 1
    blocks = -(-out[axis] // block)
    out[axis] = (blocks + 1) // 2
    return out


def product() -> str:
    """The running estimate's product ("A2" outside one)."""
    session = _npu.active()
    return "A2" if session is None else str(session.product)


def cann() -> tuple[int, int, int]:
    """The running estimate's CANN version (the allocator's; its default outside one)."""
    session = _npu.active()
    version = DEFAULT_CANN if session is None else session.allocator.cann
    return cann_tuple(version)


def define(lib: Any, schemas: tuple[str, ...], fakes: Mapping[str, Callable[..., Any]],
           autograd: Mapping[str, tuple[Callable[..., Any], Callable[..., Any]]] | None = None
           ) -> None:
    """Define one family's operators in ``lib`` (the ``npu`` namespace): each schema, each
    operator's fake kernel, and the (backward, setup_context) of those that have autograd."""
    for schema in schemas:
        lib.define(schema)
    for name, fake in fakes.items():
        torch.library.register_fake(f"npu::{name}", fake, lib=lib)
    for name, (backward, setup) in (autograd or {}).items():
        torch.library.register_autograd(f"npu::{name}", backward, setup_context=setup, lib=lib)
