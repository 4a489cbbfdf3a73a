"""torch's ``FakeTensorMode`` as an estimate runs it: for a device that is never real.

The changes to it, each for a reason of its own:

- its converter memoises each fake tensor it makes from a fresh meta tensor with a weak
  reference, and ``Module.to`` swaps a fake parameter for its moved copy with
  ``torch.utils.swap_tensors``, which refuses a tensor with a weak reference; a fresh meta
  tensor can never be looked up again, so :class:`_Converter` does not memoise it;
- no constant folding onto the device (torch would run the operator on the real device when
  ``torch.npu.is_available()``), also for ``Tensor.to`` when it reaches the mode whole (inside
  a subclass's dispatch, as DTensor's random-number tracker moves the generator's state, a
  real CPU tensor, to the device): it is decomposed into ``_to_copy``, whose folding torch
  already skips for a device;
- a deep copy keeps the mode (``copy.deepcopy`` of a module, as ``nn.TransformerEncoder``
  makes its layers: a copied mode would make its tensors foreign ones);
- ``set_`` with a storage is not cached (the dispatch cache keeps its key's arguments, so
  the storage would never die).
"""

from __future__ import annotations

from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorConverter, FakeTensorMode
from torch.utils._pytree import tree_leaves

__all__ = ["FakeMode"]


class _Converter(FakeTensorConverter):
    """FakeTensorConverter without the memo of fresh meta tensors (see the module's
    docstring)."""

    def from_meta_and_device(self, fake_mode: FakeTensorMode, t: torch.Tensor,
                             device: torch.device, pytype: Any = None,
                             dispatch_keys: Any = None) -> FakeTensor:
        return FakeTensor(fake_mode, t, device, pytype=pytype, dispatch_keys=dispatch_keys)


_TO = torch.ops.aten.to

_SET_STORAGE = frozenset({torch.ops.aten.set_.source_Storage,
                          torch.ops.aten.set_.source_Storage_storage_offset})


class FakeMode(FakeTensorMode):
    """FakeTensorMode for a device that is never real: no constant folding onto it (torch
    would run the operator on the real device when ``torch.npu.is_available()``), and
    :class:`_Converter`. A deep copy of a fake tensor (``copy.deepcopy`` of a module, as
    ``nn.TransformerEncoder`` makes its layers) keeps this mode: a copied mode would make
    its tensors foreign ones, converted again and memoised."""

    def __init__(self) -> None:
        super().__init__(allow_non_fake_inputs=True)
        self.fake_tensor_converter.__class__ = _Converter

    def __deepcopy__(self, memo: dict) -> FakeMode:
        return self

    def _dispatch_impl(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        # torch folds aten.to of real tensors by running it for real (only _to_copy is
        # checked for a device): decomposed, it reaches _to_copy, which is checked
        if func.overloadpacket is _TO and not any(
                isinstance(a, FakeTensor) for a in tree_leaves((args, kwargs))):
            with self:
                return func.decompose(*args, **kwargs)
        return super()._dispatch_impl(func, types, args, kwargs)

    def _cached_dispatch_impl(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        # torch's dispatch cache keeps its key's arguments: for set_ with a storage, the
        # storage, which then never dies and its block is never given back
        if func in _SET_STORAGE:
            return self._dispatch_impl(func, types, args, kwargs)
        return super()._cached_dispatch_impl(func, types, args, kwargs)

    @property
    def avoid_device_init(self) -> bool:
        return True
