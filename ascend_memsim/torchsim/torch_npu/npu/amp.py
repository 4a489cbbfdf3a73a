"""The stand-in ``torch_npu.npu.amp``: ``autocast`` and ``GradScaler`` for the ``npu`` device
(``torch_npu/npu/amp/``), ``custom_fwd`` and ``custom_bwd`` as torch.amp's on ``npu``."""

from __future__ import annotations

import functools
from typing import Any

import torch

from .._missing import not_modelled

__all__ = ["autocast", "GradScaler", "custom_fwd", "custom_bwd"]

__getattr__ = not_modelled(__name__.replace("ascend_memsim.torchsim.", ""))


def autocast(enabled: bool = True, dtype: torch.dtype = torch.float16,
             cache_enabled: bool = True) -> torch.autocast:
    """torch_npu.npu.amp.autocast: torch.autocast on the npu device."""
    return torch.autocast("npu", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)


class GradScaler(torch.amp.GradScaler):
    """torch_npu.npu.amp.GradScaler on fake tensors.

    DECISION: the step is always taken. torch's scaler reads whether any gradient was
    infinite (a ``.item()`` of a tensor the estimate has no value of); a skipped step would
    allocate less, so assuming none is the side that does not underestimate."""

    def __init__(self, init_scale: float = 2.0 ** 16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000,
                 enabled: bool = True, **kwargs: Any) -> None:
        super().__init__("npu", init_scale=init_scale, growth_factor=growth_factor,
                         backoff_factor=backoff_factor, growth_interval=growth_interval,
                         enabled=enabled)

    def _maybe_opt_step(self, optimizer: Any, optimizer_state: Any, *args: Any,
                        **kwargs: Any) -> Any:
        return optimizer.step(*args, **kwargs)


custom_fwd = functools.partial(torch.amp.custom_fwd, device_type="npu")
custom_bwd = functools.partial(torch.amp.custom_bwd, device_type="npu")
