"""The stand-in ``torch_npu.contrib.module.multihead_attention``: fairseq's multi-head
attention on torch_npu's fused ``npu_multi_head_attention`` (``torch_npu/contrib/module/
multihead_attention.py``).

Parameters, float32: the projections ``q_proj``, ``k_proj``, ``v_proj``, ``out_proj``
(Linear (embed_dim, embed_dim), k and v (embed_dim, kdim) and (embed_dim, vdim)), with
biases (embed_dim,) unless ``bias=False``, and with ``add_bias_kv`` ``bias_k`` and ``bias_v``
(1, 1, embed_dim). Its dropout is an ``NpuCachedDropout`` that gives the operator a mask made
ahead.

As in torch_npu, ``forward`` runs the operator only once ``_MHAConfig.set_fussion()`` has
been called and returns (None, None) before; the query, key and value are 2-D
(bsz * tgt_len, embed_dim), (bsz * src_len, ...), the key padding mask is the operator's
attention mask (a tensor), and the result is (bsz * tgt_len, embed_dim). The graph keeps the
operator's saved tensors (:mod:`.._ops.attention`): for bsz B, heads N, head size D and
lengths T, S, q (B, N, T, D), k and v (B, N, S, D), the scores (B, N, T, S) float32, the
probabilities (B, N, T, S) and the context (B * T, N * D), the bit dropout mask, and the
inputs and parameters. Whether the fused operator runs lives for the estimate
(:mod:`.._state`).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from .._ops.attention import npu_multi_head_attention
from .._ops.dense import npu_linear
from .._state import forget_at_exit
from ..function.matmul_transpose import MatmulApply
from .ensemble_dropout import NpuCachedDropout

__all__ = ["Matmul_transpose", "MultiheadAttention"]

dropout_class = NpuCachedDropout


def _quant_noise(module: Any, p: float, block_size: int) -> Any:
    """``module`` with quantisation noise on its weight in training (a forward pre-hook that
    drops random blocks of ``block_size``); the module itself when ``p`` <= 0.

    Raises:
        TypeError: the module is not a Linear, Embedding or Conv2d.
        ValueError: its sizes are not multiples of ``block_size``.
    """
    if p <= 0:
        return module
    if not isinstance(module, (torch.nn.Linear, torch.nn.Embedding, torch.nn.Conv2d)):
        raise TypeError("Expected isinstance(module, (nn.Linear, nn.Embedding, nn.Conv2d))")
    layer: Any = module
    is_conv = layer.weight.ndim == 4
    if not is_conv and layer.weight.size(1) % block_size != 0:
        raise ValueError("Input features must be a multiple of block sizes")
    if is_conv and layer.kernel_size == (1, 1) and layer.in_channels % block_size != 0:
        raise ValueError("Input channels must be a multiple of block sizes")
    if (is_conv and layer.kernel_size != (1, 1)
            and (layer.kernel_size[0] * layer.kernel_size[1]) % block_size != 0):
        raise ValueError("Kernel size must be a multiple of block size")

    def noise(mod: Any, inputs: Any) -> None:
        if not mod.training:
            return
        weight = mod.weight
        if not is_conv:
            rows, cols = weight.size(0), weight.size(1)
            mask = torch.zeros(cols // block_size * rows, device=weight.device)
            mask.bernoulli_(p)
            mask = mask.repeat_interleave(block_size, -1).view(-1, cols)
        elif mod.kernel_size == (1, 1):
            mask = torch.zeros(int(mod.in_channels // block_size * mod.out_channels),
                               device=weight.device)
            mask.bernoulli_(p)
            mask = mask.repeat_interleave(block_size, -1).view(-1, mod.in_channels)
        else:
            mask = torch.zeros(weight.size(0), weight.size(1), device=weight.device)
            mask.bernoulli_(p)
            mask = mask.unsqueeze(2).unsqueeze(3).repeat(1, 1, *mod.kernel_size)
        mod.weight.data = 1 / (1 - p) * weight.masked_fill(mask.to(torch.bool), 0)

    module.register_forward_pre_hook(noise)
    return module


class _NpuLinear(torch.nn.Linear):
    """A Linear on ``npu_linear`` for 2-D and 3-D inputs.

    Raises:
        RuntimeError: the input is neither 2-D nor 3-D.
    """

    def forward(self, input2: Any) -> Any:
        if input2.dim() == 3:
            shape = input2.size()
            out = npu_linear(input2.view(-1, self.in_features), self.weight, self.bias)
            return out.view(shape[0], shape[1], self.out_features)
        if input2.dim() == 2:
            return npu_linear(input2, self.weight, self.bias)
        raise RuntimeError("not support this dim")


class _MHAConfig:
    """Whether ``MultiheadAttention`` runs the fused operator (off until
    :meth:`set_fussion`)."""

    use_fussion_mha = False

    @classmethod
    def set_fussion(cls) -> None:
        cls.use_fussion_mha = True

        def forget() -> None:
            cls.use_fussion_mha = False

        forget_at_exit(cls, forget)


def Matmul_transpose(tensor1: Any, tensor2: Any) -> Any:
    """``tensor1 @ tensor2.transpose(-2, -1)`` (``matmul_transpose``)."""
    return MatmulApply.apply(tensor1, tensor2)


class MultiheadAttention(torch.nn.Module):
    """Multi-head attention on the fused operator.

    Raises:
        ValueError: embed_dim is not a multiple of num_heads, or self-attention with kdim or
            vdim other than embed_dim.
    """

    def __init__(self, embed_dim: int, num_heads: int, kdim: int | None = None,
                 vdim: int | None = None, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False,
                 self_attention: bool = False, encoder_decoder_attention: bool = False,
                 q_noise: float = 0.0, qn_block_size: int = 8) -> None:
        super().__init__()
        self.embed_dim = embed_dim
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self.qkv_same_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.num_heads = num_heads
        self.dropout_module = dropout_class(dropout, module_name=type(self).__name__)
        self.dropout_prob = dropout
        self.use_dropout_optim = dropout_class is NpuCachedDropout
        self.head_dim = embed_dim // num_heads
        if self.head_dim * num_heads != embed_dim:
            raise ValueError("embed_dim must be divisible by num_heads")
        self.scaling = self.head_dim ** -0.5
        self.self_attention = self_attention
        self.encoder_decoder_attention = encoder_decoder_attention
        if self_attention and not self.qkv_same_dim:
            raise ValueError("Self-attention requires query, key and value to be of the same "
                             "size")
        self.k_proj = _quant_noise(_NpuLinear(self.kdim, embed_dim, bias=bias), q_noise,
                                   qn_block_size)
        self.v_proj = _quant_noise(_NpuLinear(self.vdim, embed_dim, bias=bias), q_noise,
                                   qn_block_size)
        self.q_proj = _quant_noise(_NpuLinear(embed_dim, embed_dim, bias=bias), q_noise,
                                   qn_block_size)
        self.out_proj = _quant_noise(_NpuLinear(embed_dim, embed_dim, bias=bias), q_noise,
                                     qn_block_size)
        self.bias_k: Any = None
        self.bias_v: Any = None
        if add_bias_kv:
            self.bias_k = torch.nn.Parameter(torch.empty(1, 1, embed_dim))
            self.bias_v = torch.nn.Parameter(torch.empty(1, 1, embed_dim))
        self.add_zero_attn = add_zero_attn
        self.reset_parameters()
        self.onnx_trace = False
        self.tpu = False

    def prepare_for_onnx_export_(self) -> None:
        self.onnx_trace = True

    def prepare_for_tpu_(self, **kwargs: Any) -> None:
        self.tpu = True

    def reset_parameters(self) -> None:
        """Xavier-uniform projections (gain 1/sqrt(2) when q, k, v share a size), a zero
        output bias, Xavier-normal bias_k and bias_v."""
        gain = 1 / math.sqrt(2) if self.qkv_same_dim else 1.0
        for proj in (self.k_proj, self.v_proj, self.q_proj):
            torch.nn.init.xavier_uniform_(proj.weight, gain=gain)
        torch.nn.init.xavier_uniform_(self.out_proj.weight)
        if self.out_proj.bias is not None:
            torch.nn.init.constant_(self.out_proj.bias, 0.0)
        for extra in (self.bias_k, self.bias_v):
            if extra is not None:
                torch.nn.init.xavier_normal_(extra)

    def forward(self, query: Any, key: Any, value: Any, bsz: int, tgt_len: int, s_len: int,
                key_padding_mask: Any = None, incremental_state: Any = None,
                need_weights: bool = True, static_kv: bool = False, attn_mask: Any = None,
                before_softmax: bool = False, need_head_weights: bool = False) -> tuple:
        """(attention (bsz * tgt_len, embed_dim), None) once the fused operator is on, else
        (None, None), as torch_npu's."""
        if _MHAConfig.use_fussion_mha:
            return self.multi_attn(query, key, value, key_padding_mask, bsz, tgt_len), None
        return None, None

    def multi_attn(self, query: Any, key: Any, value: Any, key_padding_mask: Any, bsz: int,
                   tgt_len: int) -> Any:
        """The fused operator's output y, (bsz * tgt_len, embed_dim)."""
        src_len = key.size(0) // bsz
        dropout_mask = None
        if self.use_dropout_optim:
            dropout_mask = self.dropout_module(
                [(bsz, self.num_heads, tgt_len, src_len), query.dtype, query.device])
        out = npu_multi_head_attention(
            query, key, value, self.q_proj.weight, self.k_proj.weight, self.v_proj.weight,
            key_padding_mask, self.out_proj.weight, self.q_proj.bias, self.k_proj.bias,
            self.v_proj.bias, self.out_proj.bias, dropout_mask, self.num_heads, self.head_dim,
            src_len, tgt_len, self.dropout_prob, True)
        return out[0]

    def apply_sparse_mask(self, attn_weights: Any, tgt_len: int, src_len: int,
                          bsz: int) -> Any:
        return attn_weights

    def upgrade_state_dict_named(self, state_dict: dict, name: str) -> None:
        """Split an old checkpoint's ``in_proj_weight`` / ``in_proj_bias`` into the q, k and v
        projections' (views of them)."""
        prefix = name + "." if name != "" else ""
        for key in [k for k in state_dict if k.endswith(prefix + "in_proj_weight")]:
            weight = state_dict.pop(key)
            dim = int(weight.shape[0] / 3)
            for i, proj in enumerate(("q_proj", "k_proj", "v_proj")):
                state_dict[f"{prefix}{proj}.weight"] = weight[i * dim:(i + 1) * dim]
            bias = state_dict.pop(prefix + "in_proj_bias", None)
            if bias is not None:
                for i, proj in enumerate(("q_proj", "k_proj", "v_proj")):
                    state_dict[f"{prefix}{proj}.bias"] = bias[i * dim:(i + 1) * dim]
