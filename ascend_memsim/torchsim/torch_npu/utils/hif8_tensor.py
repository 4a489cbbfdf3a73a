"""``torch_npu.HiFloat8Tensor`` (``torch_npu/utils/hif8_tensor.py``): a tensor whose data is
HiFloat8, one byte an element, that presents itself in a wider nominal dtype.

What it holds: its ``_data``, a uint8 tensor of its shape on the device (``numel`` bytes),
and nothing else; its ``dtype`` and ``element_size()`` are the nominal dtype's (float32 by
default: 4), as torch_npu's wrapper subclass reports them. Casting to it
(:meth:`HiFloat8Tensor.to_hifloat8`, torch_npu's ``cast_to_fp8``) makes that uint8 tensor;
casting from it (:meth:`~HiFloat8Tensor.from_hifloat8`, ``float()``, ``bfloat16()``,
``half()``, ``cpu()``) makes a tensor of the wider dtype. Any other operator takes the
tensor cast to its nominal dtype (a temporary of that size), as torch_npu's
``__torch_dispatch__`` does; an in-place operator writes the result back into the HiFloat8
data; ``view``, ``reshape``, ``transpose``, ``detach`` and slices share the data; ``copy_``
into it casts in place (``cast_to_fp8_noalloc``: no new memory).

DECISION: the cast kernels (torch_npu's ``_C._cd.cast_to_fp8`` / ``cast_from_fp8``) are not
aten operators, so their outputs are made as empty tensors of the right dtype and shape (the
same device memory; the fake tensors hold no values either way) and take no workspace.
Gradients pass through the casts unchanged, as torch_npu's autograd functions pass them.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._pytree import tree_map

from .._missing import not_modelled

__all__ = ["HiFloat8Tensor"]

__getattr__ = not_modelled("torch_npu.utils.hif8_tensor")

_aten = torch.ops.aten
#: the dtypes torch_npu casts to HiFloat8 as they are (others go through float32 first)
_CASTABLE = (torch.float32, torch.bfloat16, torch.float16)
#: the dtypes cast_from_fp8 gives (torch_npu's NPU_CUSTOM_DType)
_FROM = (torch.uint8, torch.int32, torch.float32, torch.float16, torch.bfloat16)


def _to_hif8(tensor: torch.Tensor) -> torch.Tensor:
    """cast_to_fp8: one byte an element, the tensor's shape."""
    return torch.empty(tuple(tensor.shape), dtype=torch.uint8, device=tensor.device)


def _from_hif8(data: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """cast_from_fp8: a contiguous tensor of ``dtype`` and the data's shape."""
    if dtype not in _FROM:
        raise KeyError(dtype)
    return torch.empty(tuple(data.shape), dtype=dtype, device=data.device)


class _FromHiFloat8(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, tensor: HiFloat8Tensor, dtype: torch.dtype | None) -> torch.Tensor:
        return _from_hif8(tensor._data, tensor.dtype if dtype is None else dtype)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple:
        return grad, None


class _ToHiFloat8(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor) -> HiFloat8Tensor:
        tensor = tensor.contiguous().to("npu").detach()
        if tensor.dtype not in _CASTABLE:
            tensor = tensor.float()
        return HiFloat8Tensor(data=_to_hif8(tensor), dtype=tensor.dtype)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple:
        return (grad,)


class _Reshaped(torch.autograd.Function):
    """A view, reshape or transpose of the HiFloat8 data; the gradient is put back by the
    inverse (the input's shape, or the same transpose)."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, how: str, args: tuple) -> torch.Tensor:
        ctx.shape, ctx.how, ctx.args = tensor.shape, how, args
        if isinstance(tensor, HiFloat8Tensor):
            return HiFloat8Tensor.make_like(tensor, data=getattr(tensor._data, how)(*args))
        return getattr(tensor, how)(*args)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple:
        if ctx.how == "transpose":
            return grad.transpose(*ctx.args), None, None
        return grad.reshape(ctx.shape), None, None


class HiFloat8Tensor(torch.Tensor):
    """A tensor of HiFloat8 data (``_data``, uint8) in the nominal ``dtype``.

    Raises (construction):
        TypeError: ``data`` is not a tensor.
        ValueError: ``data`` is not of an 8-bit dtype, or requires grad (torch_npu's
            checks).
    """

    _data: torch.Tensor

    @staticmethod
    def __new__(cls, *, data: torch.Tensor, dtype: torch.dtype = torch.float32) -> Any:
        if not isinstance(data, torch.Tensor):
            raise TypeError(f"data must be a tensor, not {type(data).__name__}")
        if not isinstance(dtype, torch.dtype):
            raise TypeError(f"dtype must be a torch.dtype, not {type(dtype).__name__}")
        if data.element_size() != 1:
            raise ValueError(f"HiFloat8Tensor requires data buffer with 8-bit dtype "
                             f"(got dtype={data.dtype})")
        if data.requires_grad:
            raise ValueError("HiFloat8Tensor requires non-differentiable data buffer")
        if data.device.type != "npu":
            data = data.to("npu")
        self = torch.Tensor._make_wrapper_subclass(
            cls, data.size(), strides=data.stride(), storage_offset=data.storage_offset(),
            dtype=dtype, layout=data.layout, requires_grad=False, device=data.device)
        self._data = data
        return self

    # what the estimate's tracker and torch's subclass machinery read: the data it wraps
    def __tensor_flatten__(self) -> tuple[list[str], dict]:
        return ["_data"], {"dtype": self.dtype}

    @staticmethod
    def __tensor_unflatten__(inner: dict, meta: dict, outer_size: Any,
                             outer_stride: Any) -> HiFloat8Tensor:
        return HiFloat8Tensor(data=inner["_data"], dtype=meta["dtype"])

    @classmethod
    def make_like(cls, tensor: HiFloat8Tensor, *, data: torch.Tensor,
                  **kwargs: Any) -> HiFloat8Tensor:
        """A HiFloat8Tensor of ``data`` with ``tensor``'s nominal dtype (unless given)."""
        kwargs.setdefault("dtype", tensor.dtype)
        return HiFloat8Tensor(data=data, **kwargs)

    def __repr__(  # type: ignore[override,unused-ignore]
            self, *, tensor_contents: Any = None) -> str:
        return (f"HiFloat8Tensor(shape={tuple(self.shape)}, dtype={self.dtype}, "
                f"device={self.device})")

    # -- casts ---------------------------------------------------------------------------

    def from_hifloat8(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        """A tensor of ``dtype`` (the nominal one by default) with this tensor's values."""
        return _FromHiFloat8.apply(self, dtype)

    @classmethod
    def to_hifloat8(cls, tensor: torch.Tensor) -> HiFloat8Tensor:
        """``tensor`` cast to HiFloat8 on the device (float32, bfloat16 and float16 keep
        their dtype as the nominal one; other dtypes go through float32)."""
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"tensor must be a tensor, not {type(tensor).__name__}")
        return _ToHiFloat8.apply(tensor)

    def float(self) -> torch.Tensor:
        return self.from_hifloat8(dtype=torch.float32)

    def bfloat16(self) -> torch.Tensor:
        return self.from_hifloat8(dtype=torch.bfloat16)

    def half(self) -> torch.Tensor:
        return self.from_hifloat8(dtype=torch.float16)

    def cpu(self) -> torch.Tensor:  # type: ignore[override,unused-ignore]
        return self.from_hifloat8().cpu()

    def to_dtype(self, dtype: torch.dtype) -> HiFloat8Tensor:
        """The same HiFloat8 data with another nominal dtype (no copy)."""
        return HiFloat8Tensor.make_like(self, data=self._data, dtype=dtype)

    # -- shape -----------------------------------------------------------------------------

    def clone(self) -> HiFloat8Tensor:  # type: ignore[override,unused-ignore]
        return HiFloat8Tensor.make_like(self, data=self._data.detach().clone())

    def view(self, *shape: Any) -> Any:
        return _Reshaped.apply(self, "view", shape)

    def reshape(self, *shape: Any) -> Any:
        return _Reshaped.apply(self, "reshape", shape)

    def transpose(self, dim0: int, dim1: int) -> Any:
        return _Reshaped.apply(self, "transpose", (dim0, dim1))

    def contiguous(  # type: ignore[override,unused-ignore]
            self, *, memory_format: torch.memory_format = torch.contiguous_format
    ) -> HiFloat8Tensor:
        if self._data.is_contiguous(memory_format=memory_format):
            return self
        return HiFloat8Tensor.make_like(
            self, data=self._data.detach().contiguous(memory_format=memory_format))

    def __reduce_ex__(self, protocol: Any) -> tuple:
        return HiFloat8Tensor._rebuild, (self._data, self.dtype)

    @staticmethod
    def _rebuild(data: torch.Tensor, dtype: torch.dtype) -> HiFloat8Tensor:
        return HiFloat8Tensor(data=data, dtype=dtype)

    # ``tensor.data = other`` casts ``other`` into the HiFloat8 data
    def _get_data(self) -> Any:
        return super().data

    def _set_data(self, tensor: torch.Tensor) -> None:
        with torch.no_grad():
            self.copy_(tensor)

    data = property(_get_data, _set_data)

    __torch_function__ = torch._C._disabled_torch_function_impl  # type: ignore[assignment,unused-ignore]

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any,  # type: ignore[override,unused-ignore]
                           args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func is _aten.copy_.default:
            return _copy(args[0], args[1])
        if func in (_aten.slice.Tensor, _aten.view.default, _aten.detach.default):
            tensor = args[0]
            return HiFloat8Tensor.make_like(tensor, data=func(tensor._data, *args[1:],
                                                               **kwargs))

        def unwrap(t: Any) -> Any:
            return t.from_hifloat8() if isinstance(t, HiFloat8Tensor) else t

        new_args, new_kwargs = tree_map(unwrap, (tuple(args), kwargs))
        out = func(*new_args, **new_kwargs)
        if func._schema.is_mutable:
            # the wider copies were written: cast their values back into the HiFloat8 data
            schema = func._schema.arguments
            named = dict(zip((a.name for a in schema), list(new_args)))
            named.update(new_kwargs)
            originals = dict(zip((a.name for a in schema), list(args)))
            originals.update(kwargs)
            for a in schema:
                original, wide = originals.get(a.name), named.get(a.name)
                if (isinstance(original, HiFloat8Tensor) and isinstance(wide, torch.Tensor)
                        and a.alias_info is not None and a.alias_info.is_write):
                    original.copy_(wide)
        return out


def _copy(dst: Any, src: Any) -> Any:
    """copy_ with a HiFloat8Tensor on either side (torch_npu's rules)."""
    if not isinstance(dst, torch.Tensor) or not isinstance(src, torch.Tensor):
        raise RuntimeError("Attempted to copy into or from something that isn't a PyTorch "
                           "tensor")
    if isinstance(dst, HiFloat8Tensor) and isinstance(src, HiFloat8Tensor):
        dst._data.copy_(src._data)
    elif isinstance(src, HiFloat8Tensor):
        dst.copy_(src.from_hifloat8())
    else:
        hif8: Any = dst
        data: torch.Tensor = hif8._data
        if not data.is_contiguous():
            raise RuntimeError("Transformer Engine cast kernels require contiguous data")
        src = src.expand(dst.size()).to(device=dst.device, memory_format=torch.contiguous_format)
        # cast_to_fp8_noalloc: cast into the HiFloat8 data in place
        data.copy_(src)
    return dst
