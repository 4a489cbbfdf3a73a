"""What a tracked storage holds (parameters, gradients, optimizer state, activations and
temporaries): the module, gradient and optimizer hooks a :class:`~.session.Session` installs
move each storage's bytes to its category, so the summary can say what was live at the peak.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._python_dispatch import is_traceable_wrapper_subclass

__all__ = ["CATEGORIES", "StorageCategories", "wrapped"]

#: what the bytes at the peak are, in the summary's order
CATEGORIES = ("parameters", "gradients", "optimizer state", "activations and temporaries")
PARAMS, GRADS, OPTIM, ACTS = CATEGORIES
#: the attribute that marks a parameter whose gradient the session's hook classifies
_HOOKED = "_ascend_memsim_grad_hooked"


def wrapped(t: torch.Tensor) -> list[torch.Tensor] | None:
    """For a tensor subclass that wraps others (a DTensor: its local shard), the tensors it
    wraps; None for a tensor that holds a storage of its own. Such a subclass holds no
    memory itself (under fake tensors its own storage reports the global size, which no
    device holds): what it wraps does."""
    if t.__class__ is FakeTensor or not is_traceable_wrapper_subclass(t):
        return None
    names, _ = t.__tensor_flatten__()
    return [x for x in (getattr(t, n) for n in names) if isinstance(x, torch.Tensor)]


class StorageCategories:
    """The hooks of a session that classify its storages; the session supplies
    ``storage_of``, ``_storages``, ``totals`` (bytes per category) and ``in_optimizer``."""

    totals: dict[str, int]
    in_optimizer: bool
    #: marks the parameters this session hooked (an object of its own: no reference to the
    #: session stays on a parameter), and the hooks' handles, removed when it ends
    _token: object
    _hooks: list
    _storages: dict[int, Any]
    storage_of: Callable[[Any], Any]

    def classify(self, t: Any, category: str) -> None:
        """Count ``t``'s storage (or those of the tensors it wraps) as ``category`` from
        now on."""
        inner = wrapped(t) if t is not None else None
        if inner is not None:
            for x in inner:
                self.classify(x, category)
            return
        rec = self.storage_of(t)
        if rec is not None and rec.category != category:
            self.totals[rec.category] -= rec.size
            self.totals[category] += rec.size
            rec.category = category

    def live_storages(self) -> set[int]:
        """The keys of the NPU storages live now (for :meth:`classify_made_since`)."""
        return set(self._storages)

    def classify_made_since(self, before: set[int], category: str) -> None:
        """Count the storages made since ``before`` (:meth:`live_storages`) and still live as
        ``category`` from now on. O(live storages)."""
        totals = self.totals
        for key, rec in self._storages.items():
            if key not in before and rec.category != category:
                totals[rec.category] -= rec.size
                totals[category] += rec.size
                rec.category = category

    def _forward_pre_hook(self, module: torch.nn.Module, args: Any) -> None:
        # torch.nn.Module's own methods: a module may shadow them (Megatron-core's
        # DistributedDataParallel keeps its gradient buffers in a list named ``buffers``)
        for p in torch.nn.Module.parameters(module, recurse=False):
            self.classify(p, PARAMS)
            # the mark is an attribute, not a weak reference: a module move swaps its
            # parameters (torch.utils.swap_tensors), which refuses a tensor with one
            if p.requires_grad and getattr(p, _HOOKED, None) is not self._token:
                setattr(p, _HOOKED, self._token)
                self._hooks.append(p.register_post_accumulate_grad_hook(self._grad_hook))
        for b in torch.nn.Module.buffers(module, recurse=False):
            self.classify(b, PARAMS)

    def _grad_hook(self, p: torch.Tensor) -> None:
        self.classify(p.grad, GRADS)

    def _optimizer_pre_hook(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        for group in optimizer.param_groups:
            for p in group["params"]:
                self.classify(p, PARAMS)
                self.classify(p.grad, GRADS)
        self.in_optimizer = True

    def _optimizer_post_hook(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self.in_optimizer = False
        for state in optimizer.state.values():
            for value in state.values():
                self.classify(value, OPTIM)
