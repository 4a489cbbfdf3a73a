"""NPU memory made otherwise than by an operator's output: storage constructors, storage
resizes, DLPack, and the addresses code reads back; and the CUDA device, which an Ascend
machine has not.

Every way a script can make NPU memory is counted and freed, or stops the run with its line
(``tests/test_torchsim_storages.py`` lists them). What this module adds, for the run
(:func:`install`), to what the tracker sees of operators:

- ``torch.UntypedStorage(n, device="npu")`` (and the typed storages built on it): a fake
  storage of ``n`` bytes, allocated (torch's constructor would ask the device's allocator,
  which the fake device has not);
- ``storage.resize_(n)`` on an NPU storage: the block is made again at the new size, or
  given back at 0 (FSDP frees and remakes its gathered parameters so), as torch_npu's
  allocator does for a resize;
- ``to_dlpack`` / ``from_dlpack`` of a fake tensor: the same storage, as DLPack shares it;
- ``data_ptr()`` of a fake NPU tensor or storage: its simulated device address (the block's
  address and the tensor's offset), so code that tells storages apart by address (HF's
  ``save_pretrained`` looks for shared weights so) sees them apart; a fake CPU tensor's is a
  number that differs between live storages and is never 0 for a non-empty one.

DECISION: a tensor on a CUDA device stops the run at its line (:func:`cuda_refusal`): on an
Ascend machine torch is not built with CUDA and the script would fail there; counted as 0
bytes it would give a silent "fits". The way out is Ascend's own: ``import
torch_npu.contrib.transfer_to_npu``, which makes CUDA calls NPU calls.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.utils.dlpack as _dlpack
from torch._subclasses.fake_tensor import FakeTensor

from .limits import EstimateStopped, where

__all__ = ["install", "cuda_refusal"]


def cuda_refusal(session: Any) -> EstimateStopped:
    """The stop of a script that made a tensor on a CUDA device (see the module's
    DECISION)."""
    return EstimateStopped(
        f"a tensor on a CUDA device at {where(session)}: an Ascend machine has none (torch "
        f"is not built with CUDA there, and the script would fail at this line). The way "
        f"out, Ascend's own: import torch_npu.contrib.transfer_to_npu at the top of the "
        f"script, which makes CUDA calls NPU calls; or write device='npu'")


class _FakeCapsule:
    """What ``to_dlpack`` of a fake tensor gives: the tensor, to be shared again."""

    __slots__ = ("tensor",)

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor


def install(session: Any) -> Callable[[], None]:
    """Patch torch for the run as the module says; a callable that undoes it."""
    storage_cls: Any = torch.UntypedStorage
    tensor_cls: Any = torch.Tensor
    saved = {"new": storage_cls.__dict__.get("__new__"), "resize": storage_cls.resize_,
             "data_ptr": tensor_cls.data_ptr, "storage_ptr": storage_cls.data_ptr,
             "to_dlpack": _dlpack.to_dlpack, "from_dlpack": _dlpack.from_dlpack,
             "torch_from_dlpack": torch.from_dlpack}
    new_storage = saved["new"] or torch._C.StorageBase.__new__

    def make(cls: Any, *args: Any, **kwargs: Any) -> Any:
        device = kwargs.get("device")
        if device is not None and torch.device(device).type == "npu" and cls is storage_cls:
            data = args[0] if args else 0
            size = data if isinstance(data, int) else len(data)   # a size, or its bytes
            return torch.empty(size, dtype=torch.uint8, device=device).untyped_storage()
        return new_storage(cls, *args, **kwargs)

    def resize(self: Any, size: int) -> Any:
        with session._tracker.lock:
            out = saved["resize"](self, size)
            # a fake tensor's storage is a meta one: a tracked storage is an NPU tensor's
            if id(self) in session._storages:
                session.track_storage(self)
        return out

    def address(t: Any, base: int) -> int:
        rec = session.storage_of(t) if t.device.type == "npu" else None
        if rec is not None and rec.ptr:
            return int(rec.ptr + base)
        return 0 if t.untyped_storage().nbytes() == 0 else id(t.untyped_storage()) + base

    def data_ptr(self: torch.Tensor) -> int:
        if not isinstance(self, FakeTensor):
            return int(saved["data_ptr"](self))
        return address(self, int(self.storage_offset()) * self.element_size())

    def storage_ptr(self: Any) -> int:
        rec = session._storages.get(id(self))
        if rec is not None and rec.ptr:
            return int(rec.ptr)
        if self.device.type != "meta":
            return int(saved["storage_ptr"](self))
        # a fake tensor's storage, not on the NPU (or given back)
        return 0 if self.nbytes() == 0 else id(self)

    def to_dlpack(t: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        if isinstance(t, FakeTensor):
            return _FakeCapsule(t)
        return saved["to_dlpack"](t, *args, **kwargs)

    def from_dlpack(ext: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
        if isinstance(ext, _FakeCapsule):
            return ext.tensor.detach()
        if isinstance(ext, FakeTensor):
            return ext.detach()
        return saved["from_dlpack"](ext, *args, **kwargs)

    storage_cls.__new__ = make
    storage_cls.resize_ = resize
    tensor_cls.data_ptr = data_ptr
    storage_cls.data_ptr = storage_ptr
    dlpack: Any = _dlpack
    torch_module: Any = torch
    dlpack.to_dlpack, dlpack.from_dlpack, torch_module.from_dlpack = to_dlpack, from_dlpack, \
        from_dlpack

    def undo() -> None:
        if saved["new"] is None:
            del storage_cls.__new__
        else:
            storage_cls.__new__ = saved["new"]
        storage_cls.resize_ = saved["resize"]
        tensor_cls.data_ptr = saved["data_ptr"]
        storage_cls.data_ptr = saved["storage_ptr"]
        dlpack.to_dlpack, dlpack.from_dlpack = saved["to_dlpack"], saved["from_dlpack"]
        torch_module.from_dlpack = saved["torch_from_dlpack"]

    return undo
