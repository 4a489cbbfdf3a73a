"""torch_npu's BERT-era attention operators on the fake NPU, for ``torch_npu.contrib``:
the fused attention score, the fused layer norm + Q/K/V projection, their gradients, and
the fused multi-head attention of ``contrib.module.MultiheadAttention``.

Outputs (Ascend/op-plugin at 517f2e7d, ``op_plugin/ops/aclops/``; the torch_npu 2.14.0
wheel's ``_meta_registrations.py`` agrees where it has them):

- ``npu_fused_attention_score_fwd(q, k, v, mask, scale, keep_prob)`` (q, k, v (B, N, S, D);
  ``FusedAttentionScoreKernelNpu.cpp``): the context (B * S, N * D) and the softmax
  (B, N, S, S) in q's dtype, and a byte dropout mask uint8 (B * N * S * S,);
  ``npu_fused_attention_score_grad(grad (B * S, N * D), softmax, q, k, v, mask, ...)``:
  three gradients like grad, with grad confused-transposed to (B, N, S, D) for the call;
- ``npu_fused_attention_layernorm_qkv_fwd(x (B * S, H), kq, kk, kv, gamma, beta, ...,
  seq_len S, num_heads N)`` (``FusedAttentionLnQKV.cpp``): the norm like x; q, k, v
  (B, N, S, H / N) and the mean and variance (B * S,) in the kernels' dtype;
  ``npu_fused_attention_qkv_grad`` (``FusedAttentionQKVGradKernelNpu.cpp``): the hidden
  states' gradient like them, the kernels' like the kernels, the biases' (kernel.size(0),);
  ``npu_layernorm_grad``: like the input, the weight and the bias;
- ``npu_multi_head_attention(query (B * T, E), key, value (B * S, E), ..., heads, head_dim,
  S, T, dropout_prob, softmax_use_float)`` (``MultiHeadAttentionKernelNpu.cpp``): y and the
  context (B * T, heads * head_dim), q_res (B, heads, T, head_dim), k_res and v_res
  (B, heads, S, head_dim), the scores (B, heads, T, S) (float32 with ``softmax_use_float``)
  and the probabilities (B, heads, T, S) in query's dtype, and a bit dropout mask uint8
  (B * heads * T * S / 8,). Only y is differentiable; its derivative keeps query, key,
  value, the four weights and biases, the mask and the six results after it, and its
  backward gives the four weights' gradients (heads * head_dim,) * 2, query's (B * T, E),
  key's and value's (B * S, E) and the biases' (1, heads * head_dim) (autograd sums them
  to the biases' shapes). T, S, the heads and the head size must be multiples of 16.

O(1) in the tensors' sizes: nothing is computed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["npu_fused_attention_score_fwd", "npu_fused_attention_score_grad",
           "npu_fused_attention_layernorm_qkv_fwd", "npu_fused_attention_qkv_grad",
           "npu_layernorm_grad", "npu_multi_head_attention",
           "npu_multi_head_attention_backward"]

#: MultiHeadAttentionKernelNpu.cpp: FZ_ALIGN_NUM
_ALIGN = 16


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise RuntimeError(message)


def npu_fused_attention_score_fwd(query_layer: Any, key_layer: Any, value_layer: Any,
                                  attention_mask: Any, scale: Any, keep_prob: float,
                                  query_transpose: bool = False, key_transpose: bool = False,
                                  bmm_score_transpose_a: bool = False,
                                  bmm_score_transpose_b: bool = False,
                                  value_transpose: bool = False,
                                  dx_transpose: bool = False) -> tuple:
    """``torch_npu.npu_fused_attention_score_fwd``: (context (B * S, N * D), softmax
    (B, N, S, S), byte mask (B * N * S * S,) uint8)."""
    _check(query_layer.dim() >= 4, "query_layer must be at least 4-dimensional")
    b, n, s, d = query_layer.shape[:4]
    softmax = query_layer.new_empty((b, n, s, s))
    return (query_layer.new_empty((b * s, n * d)), softmax,
            query_layer.new_empty((softmax.numel(),), dtype=torch.uint8))


def npu_fused_attention_score_grad(grad_output: Any, softmax_output: Any, query_layer: Any,
                                   key_layer: Any, value_layer: Any, mask: Any, scale: Any,
                                   keep_prob: float, query_transpose: bool = False,
                                   key_transpose: bool = False, value_transpose: bool = False,
                                   dx_transpose: bool = False) -> tuple:
    """``torch_npu.npu_fused_attention_score_grad``: the gradients of the query, key and
    value layers, each like ``grad_output``."""
    _check(query_layer.dim() >= 4, "query_layer must be at least 4-dimensional")
    grads = tuple(torch.empty_like(grad_output) for _ in range(3))
    # grad_output confusion-transposed to (B, N, S, D) for the kernel, for the call
    permuted = torch.empty_like(grad_output)
    del permuted
    return grads


def npu_fused_attention_layernorm_qkv_fwd(x: Any, kernel_query: Any, kernel_key: Any,
                                          kernel_value: Any, gamma: Any, beta: Any,
                                          bias_query: Any = None, bias_key: Any = None,
                                          bias_value: Any = None, seq_len: int = 128,
                                          num_heads: int = 12, eps: float = 1e-05) -> list:
    """``torch_npu.npu_fused_attention_layernorm_qkv_fwd``: [norm, q, k, v (B, N, S, H / N),
    mean, variance (B * S,)]."""
    _check(seq_len != 0 and num_heads != 0, "seq_len and num_heads cannot be equal to 0.")
    _check(x.dim() >= 2, f"x must be at least 2 dimensions, but got {x.dim()}")
    _check(x.size(0) % seq_len == 0 and x.size(1) % num_heads == 0,
           "In npu_fused_attention_layernorm_qkv_fwd, x.size(0) should be divisible by "
           "seq_len and x.size(1) should be divisible by num_heads.")
    qkv = (x.size(0) // seq_len, num_heads, seq_len, x.size(1) // num_heads)
    return [torch.empty_like(x), kernel_query.new_empty(qkv), kernel_key.new_empty(qkv),
            kernel_value.new_empty(qkv), kernel_query.new_empty((x.size(0),)),
            kernel_query.new_empty((x.size(0),))]


def npu_fused_attention_qkv_grad(grad_output_query: Any, grad_output_key: Any,
                                 grad_output_value: Any, query_kernel: Any, key_kernel: Any,
                                 value_kernel: Any, hidden_states: Any,
                                 grad_output_ln: Any) -> list:
    """``torch_npu.npu_fused_attention_qkv_grad``: [hidden states', three kernels' and three
    biases' gradients]."""
    kernels = (query_kernel, key_kernel, value_kernel)
    return [torch.empty_like(hidden_states), *(torch.empty_like(k) for k in kernels),
            *(k.new_empty((k.size(0),)) for k in kernels)]


def npu_layernorm_grad(grad_out: Any, input: Any, normalized_shape: Sequence[int], mean: Any,
                       rstd: Any, weight: Any = None, bias: Any = None) -> tuple:
    """``torch_npu.npu_layernorm_grad``: (like input, like weight, like bias)."""
    return (torch.empty_like(input), None if weight is None else torch.empty_like(weight),
            None if bias is None else torch.empty_like(bias))


_MHA_TENSORS = ("query", "key", "value", "query_weight", "key_weight", "value_weight",
                "attn_mask", "out_proj_weight", "query_bias", "key_bias", "value_bias",
                "out_proj_bias", "dropout_mask")


class _MultiHeadAttention(torch.autograd.Function):
    """npu_multi_head_attention's autograd: keeps query, key, value, the weights and
    biases, and results 1 to 7 (derivatives.yaml); only y is differentiable."""

    @staticmethod
    def forward(ctx: Any, *args: Any) -> tuple:
        t = dict(zip(_MHA_TENSORS, args))
        heads, head_dim, src_len, tgt_len, dropout_prob, softmax_use_float = args[13:]
        query = t["query"]
        batch = query.size(0) // tgt_len
        width = heads * head_dim
        scores = (batch, heads, tgt_len, src_len)
        results = (
            query.new_empty((query.size(0), width)),
            query.new_empty((batch * heads * tgt_len * src_len // 8,), dtype=torch.uint8),
            query.new_empty((batch, heads, tgt_len, head_dim)),
            query.new_empty((batch, heads, src_len, head_dim)),
            query.new_empty((batch, heads, src_len, head_dim)),
            query.new_empty(scores, dtype=torch.float32 if softmax_use_float else None),
            query.new_empty(scores),
            query.new_empty((query.size(0), width)),
        )
        kept = [t[name] for name in _MHA_TENSORS if name not in ("attn_mask", "dropout_mask")]
        ctx.save_for_backward(*kept, *results[1:])
        ctx.args = (heads, head_dim, src_len, tgt_len, dropout_prob, softmax_use_float)
        ctx.mark_non_differentiable(*results[1:])
        ctx.set_materialize_grads(False)
        return results

    @staticmethod
    def backward(ctx: Any, grad: Any, *_rest: Any) -> tuple:
        none = (None,) * (len(_MHA_TENSORS) + 6)
        if grad is None:
            return none
        (q, k, v, wq, wk, wv, wo, bq, bk, bv, bo, mask, q_res, k_res, v_res, scores, probs,
         context) = ctx.saved_tensors
        heads, head_dim, src_len, tgt_len, dropout_prob, softmax_use_float = ctx.args
        grads = npu_multi_head_attention_backward(
            q, k, v, wq, wk, wv, wo, bq, bk, bv, bo, q_res, k_res, v_res, scores, probs,
            context, grad, mask, heads, head_dim, src_len, tgt_len, dropout_prob,
            softmax_use_float)
        wq_g, wk_g, wv_g, wo_g, q_g, k_g, v_g, bq_g, bk_g, bv_g, bo_g = grads
        out = list(none)
        out[:12] = (q_g, k_g, v_g, wq_g, wk_g, wv_g, None, wo_g,
                    bq_g if bq is not None else None, bk_g if bk is not None else None,
                    bv_g if bv is not None else None, bo_g if bo is not None else None)
        return tuple(out)


def npu_multi_head_attention(query: Any, key: Any, value: Any, query_weight: Any,
                             key_weight: Any, value_weight: Any, attn_mask: Any,
                             out_proj_weight: Any, query_bias: Any, key_bias: Any,
                             value_bias: Any, out_proj_bias: Any, dropout_mask: Any,
                             attn_head_num: int, attn_dim_per_head: int, src_len: int,
                             tgt_len: int, dropout_prob: float, softmax_use_float: bool) -> tuple:
    """``torch_npu.npu_multi_head_attention``: (y, dropout mask, q_res, k_res, v_res,
    scores, probabilities, context)."""
    for name, value_ in (("query", query), ("key", key), ("value", value),
                         ("query_weight", query_weight), ("key_weight", key_weight),
                         ("value_weight", value_weight), ("attn_mask", attn_mask),
                         ("out_proj_weight", out_proj_weight)):
        if not isinstance(value_, torch.Tensor):
            raise TypeError(f"npu_multi_head_attention(): argument '{name}' must be Tensor, "
                            f"not {type(value_).__name__}")
    _check(tgt_len > 0 and src_len > 0 and attn_head_num > 0 and attn_dim_per_head > 0,
           "tgt_len, src_len, attn_head_num, attn_dim_per_head should not equal zero.")
    _check(all(n % _ALIGN == 0 for n in (tgt_len, src_len, attn_head_num, attn_dim_per_head)),
           "tgt_len, src_len, attn_head_num, attn_dim_per_head should align to 16.")
    return _MultiHeadAttention.apply(
        query, key, value, query_weight, key_weight, value_weight, attn_mask, out_proj_weight,
        query_bias, key_bias, value_bias, out_proj_bias, dropout_mask, attn_head_num,
        attn_dim_per_head, src_len, tgt_len, dropout_prob, softmax_use_float)


def npu_multi_head_attention_backward(query: Any, key: Any, value: Any, query_weight: Any,
                                      key_weight: Any, value_weight: Any,
                                      out_proj_weight: Any, query_bias: Any, key_bias: Any,
                                      value_bias: Any, out_proj_bias: Any, query_res: Any,
                                      key_res: Any, value_res: Any, attn_scores: Any,
                                      attn_res: Any, context: Any, y_grad: Any,
                                      dropout_mask: Any, attn_head_num: int,
                                      attn_dim_per_head: int, src_len: int, tgt_len: int,
                                      dropout_prob: float, softmax_use_float: bool) -> tuple:
    """``torch_npu.npu_multi_head_attention_backward``: the four weights', query's, key's,
    value's and the four biases' gradients."""
    width = attn_head_num * attn_dim_per_head
    batch = query.size(0) // tgt_len
    weights = tuple(w.new_empty((width, width))
                    for w in (query_weight, key_weight, value_weight, out_proj_weight))
    inputs = (query.new_empty((query.size(0), width)),
              key.new_empty((batch * src_len, width)),
              value.new_empty((batch * src_len, width)))
    # DECISION: an absent bias gets a gradient too (the query's dtype), which is dropped
    biases = tuple((b if b is not None else query).new_empty((1, width))
                   for b in (query_bias, key_bias, value_bias, out_proj_bias))
    return (*weights, *inputs, *biases)
