"""The stand-in ``torch_npu.contrib.module.ensemble_dropout``: fairseq's dropout with its
masks made ahead, after each forward of the model (``torch_npu/contrib/module/
ensemble_dropout.py``).

``NpuCachedDropout`` (``NpuFairseqDropout``) counts the calls of each (shape, dtype, device,
p) on the class: the first calls return the input unchanged and ask for a mask; once
``enable_dropout_ensemble(model)`` has hooked the model, each forward of it makes as many bit
masks (``npu_dropout_gen_mask``, uint8 (ceil(numel / 128) * 16,)) as were asked, and a call
that finds one takes it and applies it (``npu_dropout_do_mask``, whose graph keeps the
mask). So the masks of the next step are held between steps: one per dropout call of a
step. Given ``[shape, dtype, device]`` instead of a tensor, a call gives the mask itself (or
None), as ``MultiheadAttention`` asks. The state lives for the estimate (:mod:`.._state`).
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from ...npu import Stream, current_stream
from .._ops.dropout import npu_dropout_do_mask, npu_dropout_gen_mask
from .._state import forget_at_exit

__all__ = ["NpuCachedDropout", "NpuFairseqDropout"]


class _DropOutTask:
    """The masks asked for one (shape, dtype, device, p) and those made."""

    def __init__(self, shape: Any, dtype: Any, device: Any, p: float) -> None:
        self.shape = shape
        self.dtype = dtype
        self.device = device
        self.p = p
        self.request_count = 0
        self.mask_queue: list[tuple[Any, Any]] = []


class NpuCachedDropout(torch.nn.Dropout):
    """Dropout with masks made after the model's forward, for the next one.

    Raises:
        RuntimeError: the input is neither a tensor nor a [shape, dtype, device] list.
    """

    task_dict: ClassVar[dict[tuple, _DropOutTask]] = {}
    dropout_stream: ClassVar[Any] = None

    def __init__(self, p: float, module_name: str | None = None) -> None:
        super().__init__(p)
        self.module_name = module_name

    def forward(self, x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            shape, dtype, device = x.shape, x.dtype, x.device
            apply, given = True, x
        elif isinstance(x, list):
            shape, dtype, device = x
            apply, given = False, None
        else:
            raise RuntimeError("input type error!")
        if self.p == 0:
            return given
        key = (shape, dtype, device, self.p)
        tasks = NpuCachedDropout.task_dict
        if key not in tasks:
            _forget_with_the_estimate()
            tasks[key] = _DropOutTask(shape, dtype, device, self.p)
            tasks[key].request_count += 1
            return given
        task = tasks[key]
        if not task.mask_queue:
            task.request_count += 1
            return given
        mask, _event = task.mask_queue.pop(0)
        if apply:
            return npu_dropout_do_mask(x, mask, self.p)[0]
        return mask

    @classmethod
    def enable_dropout_ensemble(cls, model: torch.nn.Module) -> None:
        """Hook ``model``: its forward waits for the dropout stream, then makes the masks
        asked for (on the current stream)."""
        if cls.dropout_stream is None:
            _forget_with_the_estimate()
            cls.dropout_stream = Stream()

        def wait(module: Any, inputs: Any) -> None:
            current_stream().wait_stream(cls.dropout_stream)

        def make_masks(module: Any, inputs: Any, outputs: Any) -> None:
            for task in cls.task_dict.values():
                for _ in range(task.request_count - len(task.mask_queue)):
                    mask = npu_dropout_gen_mask(task.shape, p=task.p, dtype=task.dtype,
                                                device=task.device)
                    task.mask_queue.append((mask, None))

        model.register_forward_pre_hook(wait)
        model.register_forward_hook(make_masks)


def _forget_with_the_estimate() -> None:
    def forget() -> None:
        NpuCachedDropout.task_dict.clear()
        NpuCachedDropout.dropout_stream = None

    forget_at_exit(NpuCachedDropout, forget)


NpuFairseqDropout = NpuCachedDropout
