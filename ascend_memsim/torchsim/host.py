"""The host side of an estimate: what a script does on the CPU runs as on the machine.

DECISION, the rule for CPU tensors: an operator whose tensor arguments are all real CPU
tensors runs for real, on the CPU, and so does a factory (``torch.randn``, ``torch.empty``,
...) of a CPU tensor of at most :data:`HOST_REAL_MAX` bytes; anything else is fake. So a data
pipeline's samples, batches, labels and metrics have their real values (a DataLoader's
sampler draws its real seed, an accuracy computed on the CPU is the real one), while a
model's weights, which are larger than that, stay fake wherever they are made: a 70B model
built on the CPU from its config costs the host nothing. Real CPU tensors become fake where
they meet the NPU (``.npu()``, ``.to("npu")``) or a fake tensor, as torch's fake tensors take
real inputs (:mod:`.session`).

A DataLoader runs as the script asks (:func:`install` patches it for the run):

- ``num_workers > 0``: its worker processes are forked as on the machine (the fake tensors'
  modes are left behind in the child, whose dataset then runs for real); a batch that still
  holds fake tensors (a dataset of tensors too large to be real) leaves the worker with
  real tensors of the same shapes and dtypes, filled with 0, the value of reads of tensors
  without values (:mod:`.limits`), since a fake tensor cannot cross to another process;
- ``pin_memory=True`` (and ``Tensor.pin_memory()`` anywhere): the pinned copy is made, as a
  real (or fake) CPU tensor, and its bytes are counted as pinned host memory until it
  dies (:class:`PinnedMemory`; the result's ``host_pinned_peak``), not on the device.
"""

from __future__ import annotations

import inspect
import threading
import weakref
from collections.abc import Callable
from typing import Any

import torch
import torch.utils.data._utils.worker as _worker
from torch._subclasses.fake_tensor import FakeTensor, unset_fake_temporarily
from torch.utils._python_dispatch import _disable_current_modes
from torch.utils._pytree import tree_leaves, tree_map
from torch.utils.weak import WeakIdKeyDictionary

__all__ = ["HOST_REAL_MAX", "runs_on_host", "PinnedMemory", "install"]

#: the largest CPU tensor a factory makes for real (see the module's DECISION): a batch of
#: token ids or a small image batch is under it; a weight matrix that matters is over it
HOST_REAL_MAX = 1 << 20

_META = torch.device("meta")


def runs_on_host(func: Any, args: tuple, kwargs: dict) -> bool:
    """Whether the operator ``func`` runs for real on the CPU (the module's DECISION). O(its
    arguments); a factory also runs once on the meta device to learn its size."""
    # the common case first, cheaply: an operator on a fake tensor
    if args and isinstance(args[0], FakeTensor):
        return False
    device = kwargs.get("device")
    if device is not None and torch.device(device).type != "cpu":
        return False
    tensors = False
    for a in tree_leaves((args, kwargs)):
        if isinstance(a, torch.Tensor):
            if isinstance(a, FakeTensor) or a.device.type != "cpu":
                return False
            tensors = True
    if tensors:
        return True
    if not _takes_device(func):
        return False
    try:
        with unset_fake_temporarily():
            out = func(*args, **{**kwargs, "device": _META})
    except Exception:
        return False
    return (isinstance(out, torch.Tensor)
            and out.numel() * out.element_size() <= HOST_REAL_MAX)


_TAKES_DEVICE: dict[Any, bool] = {}


def _takes_device(func: Any) -> bool:
    """Whether ``func`` (a factory) has a ``device`` argument; per operator, once."""
    found = _TAKES_DEVICE.get(func)
    if found is None:
        found = _TAKES_DEVICE[func] = any(a.name == "device" for a in func._schema.arguments)
    return found


class PinnedMemory:
    """Pinned host memory: the bytes of the pinned copies alive, and their peak. Each copy
    is counted from ``pin_memory()`` until it dies. Thread-safe (a DataLoader pins on a
    thread of its own)."""

    def __init__(self) -> None:
        self.current = self.peak = 0
        self._lock = threading.Lock()
        #: the pinned copies alive (by identity: a tensor's == compares elements)
        self.pinned = WeakIdKeyDictionary()

    def add(self, t: torch.Tensor) -> torch.Tensor:
        nbytes = t.untyped_storage().nbytes()
        with self._lock:
            self.current += nbytes
            self.peak = max(self.peak, self.current)
        self.pinned[t] = True
        weakref.finalize(t, self._drop, nbytes)
        return t

    def _drop(self, nbytes: int) -> None:
        with self._lock:
            self.current -= nbytes


def _real(value: Any) -> Any:
    """``value`` with each fake tensor made a real one of its shape and dtype, filled with 0."""
    def real(t: Any) -> Any:
        if isinstance(t, FakeTensor):
            with unset_fake_temporarily():
                return torch.zeros(tuple(t.shape), dtype=t.dtype)
        return t

    return tree_map(real, value)


#: torch's worker loop, as this module found it (in a spawned worker too, where nothing is
#: patched)
_WORKER_LOOP = _worker._worker_loop


class _RealBatchesLoop:
    """DataLoader's worker loop, run in the worker without the fake tensors' modes, its
    batches made real (see the module's DECISION). A stateless class at module level, so
    that a worker started by spawn or forkserver, which pickles its target, can take it."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        bound = inspect.signature(_WORKER_LOOP).bind(*args, **kwargs)
        bound.arguments["collate_fn"] = _RealCollate(bound.arguments["collate_fn"])
        with _disable_current_modes():
            return _WORKER_LOOP(*bound.args, **bound.kwargs)


class _RealCollate:
    """A collate function whose batches leave the worker real (picklable, as the loop)."""

    def __init__(self, collate: Callable[..., Any]) -> None:
        self.collate = collate

    def __call__(self, batch: Any) -> Any:
        return _real(self.collate(batch))


def install(pinned: PinnedMemory) -> Callable[[], None]:
    """Patch torch for the run (pinning counted in ``pinned``, DataLoader workers as the
    module says); a callable that undoes it."""
    tensor: Any = torch.Tensor
    pin_memory, is_pinned, loop = tensor.pin_memory, tensor.is_pinned, _worker._worker_loop

    def pin(self: torch.Tensor, device: Any = None) -> torch.Tensor:
        if self.device.type != "cpu":
            return pin_memory(self, device)
        return pinned.add(self.clone())

    def pinned_now(self: torch.Tensor, device: Any = None) -> bool:
        return self in pinned.pinned

    tensor.pin_memory, tensor.is_pinned = pin, pinned_now
    _worker._worker_loop = _RealBatchesLoop()

    def undo() -> None:
        tensor.pin_memory, tensor.is_pinned = pin_memory, is_pinned
        _worker._worker_loop = loop

    return undo
