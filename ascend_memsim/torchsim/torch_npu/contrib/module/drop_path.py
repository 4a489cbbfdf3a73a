"""The stand-in ``torch_npu.contrib.module.drop_path``: Swin Transformer's drop path
(stochastic depth) with its random tensors made ahead (``torch_npu/contrib/module/
drop_path.py``).

As ``NpuCachedDropout``: the first calls of each (shape, device, dtype, ndim) return the
input and ask for a random tensor; once ``enable_droppath_ensemble(model)`` has hooked the
model, each forward of it first makes the tensors asked for, (batch, 1, ...) in the input's
dtype, on the drop-path stream, and a call that finds one takes it: x / keep_prob * random,
whose graph keeps the random tensor. The state lives for the estimate (:mod:`.._state`).
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from ...npu import Stream, current_stream, stream
from .._state import forget_at_exit

__all__ = ["NpuDropPath"]


def _npu_drop_path(x: Any, random_tensor: Any, keep_prob: float = 0.) -> Any:
    random_tensor += keep_prob
    random_tensor.floor_()
    return x.div(keep_prob) * random_tensor


class _DropPathTask:
    """The random tensors asked for one (shape, device, dtype, ndim) and those made."""

    def __init__(self, shape: Any, device: Any, dtype: Any, ndim: int,
                 drop_prob: float) -> None:
        self.shape = shape
        self.device = device
        self.dtype = dtype
        self.ndim = ndim
        self.drop_prob = drop_prob
        self.request_count = 0
        self.rand_queue: list[Any] = []


class NpuDropPath(torch.nn.Module):
    """Drop path with ``drop_prob``; the identity outside training or at 0.

    Raises:
        RuntimeError: the input is not a tensor.
    """

    task_dict: ClassVar[dict[tuple, _DropPathTask]] = {}
    droppath_stream: ClassVar[Any] = None

    def __init__(self, drop_prob: Any = None) -> None:
        super().__init__()
        self.drop_prob = drop_prob
        self.keep_prob = 1 - drop_prob

    def forward(self, x: Any) -> Any:
        if self.drop_prob == 0. or not self.training:
            return x
        if not isinstance(x, torch.Tensor):
            raise RuntimeError("input type error!")
        key = (x.shape, x.device, x.dtype, x.ndim)
        tasks = NpuDropPath.task_dict
        if key not in tasks:
            _forget_with_the_estimate()
            tasks[key] = _DropPathTask(x.shape, x.device, x.dtype, x.ndim, self.drop_prob)
            tasks[key].request_count += 1
        elif not tasks[key].rand_queue:
            tasks[key].request_count += 1
        else:
            return _npu_drop_path(x, tasks[key].rand_queue.pop(0), self.keep_prob)
        return x

    @classmethod
    def enable_droppath_ensemble(cls, model: torch.nn.Module) -> None:
        """Hook ``model``: its forward waits for the drop-path stream and makes the random
        tensors asked for on it."""
        if cls.droppath_stream is None:
            _forget_with_the_estimate()
            cls.droppath_stream = Stream()

        def wait(module: Any, inputs: Any) -> None:
            current_stream().wait_stream(cls.droppath_stream)

        def make_random(module: Any, inputs: Any) -> None:
            with stream(cls.droppath_stream), torch.no_grad():
                for task in cls.task_dict.values():
                    for _ in range(task.request_count - len(task.rand_queue)):
                        shape = (task.shape[0],) + (1,) * (task.ndim - 1)
                        task.rand_queue.append(torch.rand(shape, dtype=task.dtype,
                                                          device=task.device))

        model.register_forward_pre_hook(wait)
        model.register_forward_pre_hook(make_random)


def _forget_with_the_estimate() -> None:
    def forget() -> None:
        NpuDropPath.task_dict.clear()
        NpuDropPath.droppath_stream = None

    forget_at_exit(NpuDropPath, forget)
