"""torch_npu's legacy typed tensors and storages (``torch.npu.FloatTensor(2, 3)``,
``torch.npu.HalfStorage(n)``), as torch's own for CUDA: a size makes an uninitialised NPU
tensor (or storage) of the dtype, data makes one from the data; ``isinstance`` answers for
NPU tensors of the dtype."""

from __future__ import annotations

from typing import Any

import torch

_DTYPES = {"BFloat16": torch.bfloat16, "Bool": torch.bool, "Byte": torch.uint8,
           "Char": torch.int8, "Double": torch.float64, "Float": torch.float32,
           "Half": torch.float16, "Int": torch.int32, "Long": torch.int64,
           "Short": torch.int16}

__all__ = [f"{name}{kind}" for name in _DTYPES for kind in ("Tensor", "Storage")]


class _TensorMeta(type):
    dtype: torch.dtype

    def __instancecheck__(cls, instance: object) -> bool:
        return (isinstance(instance, torch.Tensor) and instance.device.type == "npu"
                and instance.dtype is cls.dtype)


def _typed_tensor(name: str, dtype: torch.dtype) -> type:
    def new(cls: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
        if len(args) == 1 and not isinstance(args[0], int):
            return torch.tensor(args[0], dtype=dtype, device="npu")
        return torch.empty(*args, dtype=dtype, device="npu")

    return _TensorMeta(name, (), {"dtype": dtype, "is_cuda": False, "is_npu": True,
                                  "__new__": new, "__module__": __name__})


def _typed_storage(name: str, dtype: torch.dtype) -> type:
    def new(cls: Any, size: int = 0, **kwargs: Any) -> Any:
        return torch.TypedStorage(size, dtype=dtype, device="npu")

    return type(name, (), {"dtype": dtype, "__new__": new, "__module__": __name__})


for _name, _dtype in _DTYPES.items():
    globals()[f"{_name}Tensor"] = _typed_tensor(f"{_name}Tensor", _dtype)
    globals()[f"{_name}Storage"] = _typed_storage(f"{_name}Storage", _dtype)
