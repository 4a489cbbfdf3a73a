"""The stand-in ``torch_npu.optim``: the fused optimizers (``torch_npu/optim/npu_fused_*.py``)
as torch's optimizers with the same states.

ESTIMATE: torch_npu's fused optimizers copy the parameters' gradients and their states into
one combined buffer per dtype (``npu_combine_tensors``) and step it as one tensor; the states
are as large as torch's (Adam's ``exp_avg`` and ``exp_avg_sq``, SGD's ``momentum_buffer``,
...), so each is modelled by the torch optimizer with those states. Not modelled: the
combined gradient buffer's one-time copy at the first step (one gradient's worth at most of
transient memory, while the gradients are copied in).
"""

from __future__ import annotations

from typing import Any

import torch

from .._missing import not_modelled

__all__ = ["NpuFusedOptimizerBase", "NpuFusedSGD", "NpuFusedAdadelta", "NpuFusedLamb",
           "NpuFusedAdam", "NpuFusedAdamW", "NpuFusedAdamP", "NpuFusedBertAdam",
           "NpuFusedRMSprop", "NpuFusedRMSpropTF"]

__getattr__ = not_modelled("torch_npu.optim")

NpuFusedOptimizerBase = torch.optim.Optimizer


class NpuFusedSGD(torch.optim.SGD):
    """Momentum buffers as torch.optim.SGD."""


class NpuFusedAdadelta(torch.optim.Adadelta):
    """square_avg and acc_delta as torch.optim.Adadelta."""


class NpuFusedAdam(torch.optim.Adam):
    """exp_avg and exp_avg_sq as torch.optim.Adam."""


class NpuFusedAdamW(torch.optim.AdamW):
    """exp_avg and exp_avg_sq as torch.optim.AdamW."""


class NpuFusedAdamP(torch.optim.Adam):
    """AdamP keeps Adam's exp_avg and exp_avg_sq."""


class NpuFusedLamb(torch.optim.Adam):
    """LAMB keeps Adam's exp_avg and exp_avg_sq (its trust ratio is computed per step)."""


class NpuFusedBertAdam(torch.optim.AdamW):
    """BERT's Adam keeps exp_avg and exp_avg_sq, with decoupled weight decay."""

    def __init__(self, params: Any, lr: float = 1e-3, warmup: float = -1,
                 t_total: int = -1, schedule: str = "warmup_linear", b1: float = 0.9,
                 b2: float = 0.99, e: float = 1e-6, weight_decay: float = 0.01,
                 max_grad_norm: float = -1) -> None:
        super().__init__(params, lr=lr, betas=(b1, b2), eps=e, weight_decay=weight_decay)


class NpuFusedRMSprop(torch.optim.RMSprop):
    """square_avg (and momentum_buffer, grad_avg) as torch.optim.RMSprop."""


class NpuFusedRMSpropTF(torch.optim.RMSprop):
    """TensorFlow's RMSprop keeps RMSprop's states."""
