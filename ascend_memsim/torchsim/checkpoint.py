"""Checkpoints in an estimate: ``torch.save`` of fake tensors and ``torch.load`` of any file
read shapes and dtypes, never weights.

DECISION, saving: a fake tensor is written as a record of its shape, stride, dtype, device
and ``requires_grad`` (:func:`fake_tensor`), in torch's own file format, so a script's
``torch.save(model.state_dict(), path)`` and its resume run unchanged. Such a file cannot be
mistaken for weights: outside an estimate, ``torch.load`` of it fails with a message that
says what wrote it (:class:`NotWeights`). Tensors that shared a storage are saved as records
apart, and load as storages apart.

DECISION, loading (:func:`install` patches ``torch.load`` for the run): storages are read by
mapping the file (``mmap=True``; a file object is read whole), so a checkpoint larger than
the host's memory loads; each tensor that ``map_location`` (or, without one, the device it
was saved from) puts on the NPU becomes a fake NPU tensor of its shape and dtype, allocated
on the simulated device as ``torch.load(..., map_location="npu")`` allocates it on the
machine. Tensors that stay on the CPU keep their real values, from the mapped file.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor, unset_fake_temporarily
from torch.utils._pytree import tree_map

__all__ = ["NotWeights", "fake_tensor", "install"]

#: the device a load puts tensors on (torch.load's map_location), while one runs
_MAP_LOCATION: contextvars.ContextVar[Any] = contextvars.ContextVar("map_location",
                                                                     default=None)
#: whether an estimate is running (records load as fake tensors only then; a flag of the
#: process, not of a context: the script's threads load too)
_active = [False]


_META = torch.device("meta")


class NotWeights(RuntimeError):
    """A file written by an estimate, loaded outside one: it holds shapes, not weights."""


def _target(map_location: Any, saved: str) -> str:
    """The device a tensor saved from ``saved`` loads onto under ``map_location``.

    DECISION: a callable ``map_location`` is taken to keep storages on the CPU, as its
    common form does (``lambda storage, location: storage``); one that moves them elsewhere
    is not called (it would make real storages on a device the estimate has not)."""
    if callable(map_location):
        return "cpu"
    if map_location is None:
        return saved
    if isinstance(map_location, dict):
        return str(map_location.get(saved, saved))
    return str(torch.device(map_location))


def fake_tensor(shape: tuple, stride: tuple, dtype: torch.dtype, device: str,
                requires_grad: bool) -> torch.Tensor:
    """A saved fake tensor, read back: a meta tensor of its shape that names the device the
    load puts it on (``_memsim_device``); the load makes it a fake tensor there (see the
    module's DECISION).

    Raises:
        NotWeights: outside an estimate.
    """
    if not _active[0]:
        raise NotWeights(
            "this file was written by an ascend-memsim estimate (ascend-memsim estimate, or "
            "ascend_memsim.torchsim.estimate): its tensors are shapes and dtypes without "
            "values, not weights; load it in an estimate, or save the real model on a "
            "machine with an NPU")
    t = torch.empty_strided(shape, stride, dtype=dtype, device=_META)
    t._memsim_device = _target(_MAP_LOCATION.get(), device)  # type: ignore[attr-defined,unused-ignore]
    return t.requires_grad_(requires_grad) if requires_grad and t.is_floating_point() else t


def _reduce_fake(self: torch.Tensor, protocol: int) -> tuple:
    return (fake_tensor, (tuple(self.shape), tuple(self.stride()), self.dtype,
                          str(self.device), self.requires_grad))


@contextlib.contextmanager
def _fakes_as_records() -> Iterator[None]:
    before = FakeTensor.__dict__.get("__reduce_ex__")
    FakeTensor.__reduce_ex__ = _reduce_fake  # type: ignore[method-assign,assignment,unused-ignore]
    try:
        yield
    finally:
        if before is None:
            del FakeTensor.__reduce_ex__
        else:
            FakeTensor.__reduce_ex__ = before  # type: ignore[method-assign,unused-ignore]


def _on_devices(obj: Any, locations: dict[int, str], map_location: Any) -> Any:
    """``obj`` (containers of tensors, or a module) with each record made a fake tensor on
    its device, and each real tensor that belongs on the NPU a fake NPU tensor."""
    def place(t: Any) -> Any:
        if not isinstance(t, torch.Tensor) or isinstance(t, FakeTensor):
            return t
        device = getattr(t, "_memsim_device", None)
        if device is None:
            saved = locations.get(t.untyped_storage().data_ptr(), "cpu")
            device = _target(map_location, saved)
            if torch.device(device).type != "npu":
                return t
            # a copy of the real tensor: a scalar keeps its value (an optimizer's step)
            out = t.detach().to(device)
        else:
            out = torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=t.dtype,
                                      device=device)
        if isinstance(t, torch.nn.Parameter):
            return torch.nn.Parameter(out, requires_grad=t.requires_grad)
        return out.requires_grad_(t.requires_grad) if t.requires_grad else out

    if isinstance(obj, torch.nn.Module):
        return obj._apply(place)
    return tree_map(place, obj)


def install() -> Callable[[], None]:
    """Patch ``torch.save`` and ``torch.load`` for the run; a callable that undoes it."""
    save, load = torch.save, torch.load
    _active[0] = True

    def save_records(obj: object, f: Any, *args: Any, **kwargs: Any) -> None:
        with _fakes_as_records():
            save(obj, f, *args, **kwargs)

    def load_shapes(f: Any, map_location: Any = None, *args: Any, **kwargs: Any) -> Any:
        locations: dict[int, str] = {}

        def keep_on_cpu(storage: Any, location: str) -> Any:
            locations[storage.data_ptr()] = location
            return storage

        if isinstance(f, (str, os.PathLike)) and kwargs.get("mmap") is None:
            kwargs["mmap"] = True
        token = _MAP_LOCATION.set(map_location)
        try:
            with torch.serialization.safe_globals([fake_tensor]), unset_fake_temporarily():
                obj = load(f, keep_on_cpu, *args, **kwargs)
        finally:
            _MAP_LOCATION.reset(token)
        return _on_devices(obj, locations, map_location)

    torch.save, torch.load = save_records, load_shapes

    def undo() -> None:
        torch.save, torch.load = save, load
        _active[0] = False

    return undo
