"""``torch.autocast("npu")`` on fake tensors: kernels for the AutocastPrivateUse1 key.

torch_npu registers its autocast kernels in C++; without them torch has none for the
renamed PrivateUse1 device (``Could not run 'aten::linear' ... 'Autocastnpu' backend``).
These cast floating-point inputs, as torch's ``at::autocast`` policies do, and call the
operator again below autocast: ``lower_precision_fp`` operators to the autocast dtype,
``fp32`` operators to float32; every other operator falls through.

DECISION: the lists are a subset of upstream's CUDA lists (``aten/src/ATen/autocast_mode.cpp``:
matrix products, convolutions and attention in the lower precision; losses, norms, softmax
and reductions in float32), not checked against torch_npu's. Casts are not cached (torch
caches casts of leaf tensors within an autocast region): each use of a weight makes its own
copy, which the backward keeps alive as torch's would.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["register_autocast"]

LOWER_PRECISION = (
    "mm", "addmm", "addmv", "addr", "bmm", "baddbmm", "addbmm", "matmul", "linear", "mv",
    "einsum", "chain_matmul", "linalg_multi_dot", "conv1d", "conv2d", "conv3d",
    "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "convolution",
    "_convolution", "prelu", "scaled_dot_product_attention",
)
FP32 = (
    "softmax", "log_softmax", "layer_norm", "native_layer_norm", "group_norm", "nll_loss",
    "cross_entropy_loss", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "kl_div",
    "binary_cross_entropy_with_logits", "cosine_similarity", "logsumexp", "exp", "log",
    "pow", "rsqrt", "reciprocal", "sum", "prod", "cumsum", "cumprod", "norm",
)

_libraries: list = []


def _kernel(op: Any, lower: bool) -> Any:
    # (a key of torch's C extension that its stubs do not list)
    keys = torch._C.DispatchKeySet(
        torch._C.DispatchKey.AutocastPrivateUse1)  # type: ignore[attr-defined,unused-ignore]

    def cast(value: Any, dtype: torch.dtype) -> Any:
        if isinstance(value, torch.Tensor) and value.is_floating_point() \
                and value.dtype != torch.float64:
            return value.to(dtype)
        if isinstance(value, (list, tuple)):
            return type(value)(cast(v, dtype) for v in value)
        return value

    def kernel(*args: Any, **kwargs: Any) -> Any:
        dtype = torch.get_autocast_dtype("npu") if lower else torch.float32
        with torch._C._ExcludeDispatchKeyGuard(keys):
            return op(*cast(args, dtype), **{k: cast(v, dtype) for k, v in kwargs.items()})

    return kernel


def register_autocast() -> None:
    """Register the kernels (once per process; torch keeps them)."""
    if _libraries:
        return
    fallthrough = torch.library.Library("_", "IMPL")
    fallthrough.fallback(torch.library.fallthrough_kernel, dispatch_key="AutocastPrivateUse1")
    lib = torch.library.Library("aten", "IMPL")
    for names, lower in ((LOWER_PRECISION, True), (FP32, False)):
        for name in names:
            packet = getattr(torch.ops.aten, name, None)
            if packet is None:
                continue
            for overload in packet.overloads():
                op = getattr(packet, overload)
                qualified = name if overload == "default" else f"{name}.{overload}"
                lib.impl(qualified, _kernel(op, lower), "AutocastPrivateUse1")
    _libraries.extend((fallthrough, lib))
