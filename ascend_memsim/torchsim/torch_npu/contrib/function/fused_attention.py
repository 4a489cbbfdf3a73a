"""The stand-in ``torch_npu.contrib.function.fused_attention``: BERT's self-attention (and
its layer norm) as torch_npu's fused operators (``torch_npu/contrib/function/
fused_attention.py``): ``npu_fused_attention`` and the deprecated
``npu_fused_attention_with_layernorm``.

Both take hidden states (B * S, H) with H 768 or 1024 and B * S a multiple of 32, an
attention mask (B, 1, S, S), kernels (H, H) and biases (H,), 64 features a head. The graph
keeps what torch_npu's autograd functions keep: the three kernels, the query, key and value
layers (B, N, S, 64), the hidden states, the softmax (B, N, S, S) and the byte dropout mask
(B * N * S * S,), and with the layer norm the norm, its mean and variance (B * S,), gamma and
beta. DECISION: torch_npu checks the shapes and the private formats (FRACTAL_NZ for the
states, mask and kernels) on its first call only; here the shapes are checked on every call
and the formats not at all (the stand-in keeps every tensor in ND).
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

from ....ops.layout import npu_confusion_transpose, npu_format_cast
from .._ops.attention import (
    npu_fused_attention_layernorm_qkv_fwd,
    npu_fused_attention_qkv_grad,
    npu_fused_attention_score_fwd,
    npu_fused_attention_score_grad,
    npu_layernorm_grad,
)
from .._ops.dense import npu_linear

__all__ = ["npu_fused_attention", "npu_fused_attention_with_layernorm"]

#: torch_npu's format number of FRACTAL_NZ, the layout the fused operators take
_NZ = 29
_HIDDEN = (1024, 768)
_HEAD = 64


def _check_shapes(hidden_states: Any, attention_mask: Any, *kernels: Any) -> None:
    """torch_npu's ``_check_compatibility_once``, its shape checks and messages."""
    if (hidden_states.dim() != 2 or hidden_states.shape[0] % 32 != 0
            or hidden_states.shape[1] not in _HIDDEN):
        raise RuntimeError("fused attention check compatibility failed, shape of "
                           "hidden_states not matches")
    if (attention_mask.dim() != 4 or attention_mask.shape[1] != 1
            or attention_mask.shape[2] != attention_mask.shape[3]):
        raise RuntimeError("fused attention check compatibility failed, shape of "
                           "attention_mask not matches")
    if any(k.shape[0] not in _HIDDEN for k in kernels):
        raise RuntimeError("fused attention check compatibility failed, shape of kernel not "
                           "matches")


def _bsnc(hidden_states: Any, attention_mask: Any) -> tuple:
    """(B, S, N, 64) of the hidden states and the mask."""
    b = attention_mask.shape[0]
    return b, hidden_states.shape[0] // b, hidden_states.shape[1] // _HEAD, _HEAD


def _layer(hidden_states: Any, kernel: Any, bias: Any, bsnc: tuple) -> Any:
    """A projection as (B, N, S, 64) in FRACTAL_NZ: npu_linear, a confusion transpose and a
    format cast, each a new tensor."""
    projected = npu_linear(hidden_states, kernel.t(), bias)
    return npu_format_cast(npu_confusion_transpose(projected, (0, 2, 1, 3), bsnc, False), _NZ)


class _FusedAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, hidden_states: Any, attention_mask: Any, query_kernel: Any,
                key_kernel: Any, value_kernel: Any, query_bias: Any, key_bias: Any,
                value_bias: Any, scale: Any = 1, keep_prob: float = 0) -> Any:
        _check_shapes(hidden_states, attention_mask, query_kernel, key_kernel, value_kernel)
        bsnc = _bsnc(hidden_states, attention_mask)
        with torch.no_grad():
            q, k, v = (_layer(hidden_states, w, b, bsnc) for w, b in (
                (query_kernel, query_bias), (key_kernel, key_bias), (value_kernel, value_bias)))
        context, softmax, mask = npu_fused_attention_score_fwd(q, k, v, attention_mask, scale,
                                                               keep_prob)
        ctx.args = (scale, keep_prob)
        ctx.save_for_backward(query_kernel, key_kernel, value_kernel, q, k, v, hidden_states,
                              softmax, mask)
        return context

    @staticmethod
    def backward(ctx: Any, grad: Any) -> tuple:
        wq, wk, wv, q, k, v, hidden, softmax, mask = ctx.saved_tensors
        dq, dk, dv = npu_fused_attention_score_grad(grad, softmax, q, k, v, mask, *ctx.args)
        grads = npu_fused_attention_qkv_grad(dq, dk, dv, wq, wk, wv, hidden,
                                             npu_format_cast(torch.zeros_like(hidden), _NZ))
        dh, dwq, dwk, dwv, dbq, dbk, dbv = grads
        return dh, None, dwq, dwk, dwv, dbq, dbk, dbv, None, None


class _FusedAttentionWithLayerNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, hidden_states: Any, attention_mask: Any, query_kernel: Any,
                key_kernel: Any, value_kernel: Any, query_bias: Any, key_bias: Any,
                value_bias: Any, gamma: Any, beta: Any, scale: Any = 1,
                keep_prob: float = 0) -> tuple:
        warnings.warn("torch_npu.contrib.npu_fused_attention_with_layernorm is deprecated and "
                      "will be removed in a future version. Use torch_npu.npu_fusion_attention "
                      "and torch.nn.LayerNorm instead.", FutureWarning, stacklevel=3)
        _check_shapes(hidden_states, attention_mask, query_kernel, key_kernel, value_kernel)
        _b, s, n, _d = _bsnc(hidden_states, attention_mask)
        norm, q, k, v, mean, variance = npu_fused_attention_layernorm_qkv_fwd(
            hidden_states, query_kernel, key_kernel, value_kernel, gamma, beta, query_bias,
            key_bias, value_bias, s, n)
        context, softmax, mask = npu_fused_attention_score_fwd(q, k, v, attention_mask, scale,
                                                               keep_prob)
        ctx.args = (scale, keep_prob)
        ctx.save_for_backward(query_kernel, key_kernel, value_kernel, q, k, v, hidden_states,
                              softmax, mask, norm, mean, variance, gamma, beta)
        return context, norm

    @staticmethod
    def backward(ctx: Any, grad: Any, grad_norm: Any) -> tuple:
        (wq, wk, wv, q, k, v, hidden, softmax, mask, norm, mean, variance, gamma,
         beta) = ctx.saved_tensors
        dq, dk, dv = npu_fused_attention_score_grad(grad, softmax, q, k, v, mask, *ctx.args)
        dh, dwq, dwk, dwv, dbq, dbk, dbv = npu_fused_attention_qkv_grad(
            dq, dk, dv, wq, wk, wv, norm, npu_format_cast(grad_norm, _NZ))
        dh, dgamma, dbeta = npu_layernorm_grad(dh, hidden, (dh.shape[1],), mean, variance,
                                               gamma, beta)
        return dh, None, dwq, dwk, dwv, dbq, dbk, dbv, dgamma, dbeta, None, None


npu_fused_attention = _FusedAttention.apply
npu_fused_attention_with_layernorm = _FusedAttentionWithLayerNorm.apply
