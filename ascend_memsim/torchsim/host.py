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
  real (or fake) CPU tensor, and its block of the host caching allocator is counted as
  pinned host memory, not on the device (:class:`PinnedMemory`: blocks of a power of two,
  kept when the copy dies until ``torch.npu.host_empty_cache()``; the result's
  ``host_pinned_peak``, and ``torch.npu.host_memory_stats()``).

A module moved (``model.to("npu")``, ``.half()``) keeps its parameter objects, as on the
machine: torch swaps a fake parameter's contents into the same object
(``torch.utils.swap_tensors``, which ``Module._apply`` takes for every ``FakeTensor``) where
the machine's real parameter takes ``param.data = moved``; the swap refuses a parameter
that something holds a weak reference to (DeepSpeed's ``WeakIdNameMap`` of parameter names
puts a ``weakref.finalize`` on each), which the machine's move never looks at. DECISION:
during the run that refusal is left out for a fake parameter (:func:`_swap_tensors`): the
weak references stay with the object, which is the parameter before and after, as they do
on the machine.

A module moved from real CPU tensors to the NPU keeps its tied parameters tied (one
``Parameter`` held by two modules: a language model's input embedding and output head).
On the machine the move changes such a parameter in place (``param.data = moved``: the new
tensor's type is the old one's), so every module that holds it sees the moved one; a real
tensor and a fake one are of different types, and ``Module._apply`` then gives each module
a new ``Parameter`` of its own, a second copy of the tied weight on the device. During the
run a move converts each tensor once and gives the modules that shared a parameter the one
moved parameter (:func:`_apply_keeping_ties`), as on the machine.
"""

from __future__ import annotations

import contextvars
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


#: host_memory_stats' Stats (c10's Stat: current, peak, allocated, freed)
_HOST_STATS = ("allocations", "allocated_bytes", "active_requests", "active_bytes")


class PinnedMemory:
    """Pinned host memory as torch's caching host allocator holds it, which torch_npu's
    default host allocator is (``NPUCachingHostAllocatorImpl`` derives from
    ``at::CachingHostAllocatorImpl``, ``aten/src/ATen/core/CachingHostAllocator.h``):

    - ``allocate`` rounds each copy's bytes up to a power of two (``PowerOf2Ceil``) and takes
      a free block of that size, or pins a new one (``allocate_host_memory``);
    - ``free`` (the copy dies) puts its block on the free list, still pinned;
    - ``empty_cache`` (``torch.npu.host_empty_cache()``) gives every free block back.

    :attr:`current` and :attr:`peak` are the pinned bytes held (blocks in use and cached: the
    host's memory the estimate reports, a peak over the whole run that the script's resets
    do not move); :meth:`stats` is ``host_memory_stats``'s nested dict. O(1) per copy (a
    free list per power of two). DECISION: the simulation takes no time, so the time
    counters are 0 with the count of calls. Thread-safe (a DataLoader pins on a thread of its
    own)."""

    def __init__(self) -> None:
        self.current = self.peak = 0
        # re-entrant: a copy's finalizer (_drop) may run from the collector while stats()
        # builds its dicts under the lock on the same thread
        self._lock = threading.RLock()
        #: the pinned copies alive (by identity: a tensor's == compares elements)
        self.pinned = WeakIdKeyDictionary()
        #: free blocks by size (a power of two): their count
        self._free: dict[int, int] = {}
        self._stats = {name: dict.fromkeys(("current", "peak", "allocated", "freed"), 0)
                       for name in _HOST_STATS}
        self.num_host_alloc = self.num_host_free = 0

    def _update(self, name: str, amount: int) -> None:
        stat = self._stats[name]
        stat["current"] += amount
        if amount > 0:
            stat["allocated"] += amount
            stat["peak"] = max(stat["peak"], stat["current"])
        else:
            stat["freed"] -= amount

    def add(self, t: torch.Tensor) -> torch.Tensor:
        nbytes = t.untyped_storage().nbytes()
        if nbytes == 0:
            return t                        # allocate(0): no block
        size = 1 << (nbytes - 1).bit_length()
        with self._lock:
            if self._free.get(size):
                self._free[size] -= 1
            else:
                self._update("allocations", 1)
                self._update("allocated_bytes", size)
                self.num_host_alloc += 1
                self.current += size
                self.peak = max(self.peak, self.current)
            self._update("active_requests", 1)
            self._update("active_bytes", size)
        self.pinned[t] = True
        weakref.finalize(t, self._drop, size)
        return t

    def _drop(self, size: int) -> None:
        with self._lock:
            self._update("active_requests", -1)
            self._update("active_bytes", -size)
            self._free[size] = self._free.get(size, 0) + 1

    def empty_cache(self) -> None:
        """host_empty_cache: every free block goes back to the host."""
        with self._lock:
            for size, count in self._free.items():
                self._update("allocations", -count)
                self._update("allocated_bytes", -size * count)
                self.num_host_free += count
                self.current -= size * count
            self._free.clear()

    def stats(self) -> dict[str, Any]:
        """host_memory_stats_as_nested_dict's dict."""
        with self._lock:
            out: dict[str, Any] = {name: dict(stat) for name, stat in self._stats.items()}
            out["num_host_alloc"], out["num_host_free"] = self.num_host_alloc, self.num_host_free
            for name, count in (("host_alloc_time", self.num_host_alloc),
                                ("host_free_time", self.num_host_free)):
                out[name] = {"total": 0, "max": 0, "min": 0, "count": count, "avg": 0}
            return out

    def reset_accumulated(self) -> None:
        """resetAccumulatedStats (the host allocator's): every Stat's allocated and freed,
        and the two counters, go to 0."""
        with self._lock:
            for stat in self._stats.values():
                stat["allocated"] = stat["freed"] = 0
            self.num_host_alloc = self.num_host_free = 0

    def reset_peak(self) -> None:
        """resetPeakStats (the host allocator's): each Stat's peak becomes its current."""
        with self._lock:
            for stat in self._stats.values():
                stat["peak"] = stat["current"]


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


class _NoWeakReferences:
    """What ``torch.utils`` sees of the ``weakref`` module while a fake parameter swaps."""

    @staticmethod
    def getweakrefs(obj: Any) -> list:
        return []


def _swap_tensors(swap: Callable[[Any, Any], None]) -> Callable[[Any, Any], None]:
    """``torch.utils.swap_tensors`` that swaps a fake ``t1`` even when weak references to it
    are held (see the module's docstring); its other checks stay. O(1)."""
    def swap_tensors(t1: Any, t2: Any) -> None:
        if not (isinstance(t1, FakeTensor) and weakref.getweakrefs(t1)):
            return swap(t1, t2)
        utils: Any = torch.utils
        module, utils.weakref = utils.weakref, _NoWeakReferences
        try:
            return swap(t1, t2)
        finally:
            utils.weakref = module

    return swap_tensors


#: whether a Module._apply is under way (its children's calls are part of it)
_APPLYING: contextvars.ContextVar[bool] = contextvars.ContextVar("applying", default=False)


def _apply_keeping_ties(apply: Callable[..., Any]) -> Callable[..., Any]:
    """``torch.nn.Module._apply`` that converts each tensor once and keeps tied parameters
    tied (see the module's docstring): the modules that held one parameter before hold the
    first module's converted one after. O(parameters) more than torch's own, for a module
    with tied parameters; torch's own, unchanged, for any other."""
    def keeping_ties(self: torch.nn.Module, fn: Callable[..., Any], *args: Any,
                     **kwargs: Any) -> Any:
        if _APPLYING.get():
            return apply(self, fn, *args, **kwargs)
        holders: dict[int, list[tuple[torch.nn.Module, str]]] = {}
        for module in self.modules():
            for name, p in module._parameters.items():
                if p is not None:
                    holders.setdefault(id(p), []).append((module, name))
        tied = [places for places in holders.values() if len(places) > 1]
        if not tied:
            return apply(self, fn, *args, **kwargs)
        done: dict[int, tuple[Any, Any]] = {}

        def once(t: Any) -> Any:
            # keyed by identity, with the tensor kept, so that an id is not reused
            seen = done.get(id(t))
            if seen is None or seen[0] is not t:
                seen = done[id(t)] = (t, fn(t))
            return seen[1]

        token = _APPLYING.set(True)
        try:
            out = apply(self, once, *args, **kwargs)
        finally:
            _APPLYING.reset(token)
        for (first, name), *others in tied:
            kept = first._parameters[name]
            for module, other in others:
                module._parameters[other] = kept
        return out

    return keeping_ties


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
    swap = torch.utils.swap_tensors
    torch.utils.swap_tensors = _swap_tensors(swap)
    module_apply = torch.nn.Module._apply
    torch.nn.Module._apply = _apply_keeping_ties(module_apply)  # type: ignore[method-assign,unused-ignore]

    def undo() -> None:
        tensor.pin_memory, tensor.is_pinned = pin_memory, is_pinned
        _worker._worker_loop = loop
        torch.utils.swap_tensors = swap
        torch.nn.Module._apply = module_apply  # type: ignore[method-assign,unused-ignore]

    return undo
