"""torch_npu's fused attention on the fake NPU: ``torch_npu.npu_fusion_attention``, its
gradient ``torch_npu.npu_fusion_attention_grad``, and ``F.scaled_dot_product_attention``
routed to them as torch_npu routes it.

The operators are ``torch.ops.npu.npu_fusion_attention`` and
``torch.ops.npu.npu_fusion_attention_grad`` (torch_npu's namespace), with torch_npu's
documented schemas (``Ascend/op-plugin`` ``docs/context/torch_npu-npu_fusion_attention.md``,
``op_plugin/config/op_plugin_functions.yaml``), a fake kernel giving the outputs'
shapes and dtypes (``op_plugin/ops/opapi/FlashAttentionKernelNpuOpApi.cpp``):

- ``attention_out``: the query's layout with the value's head size (BSH, SBH: heads *
  Dv; BNSD, BSND, TND: Dv), the query's dtype;
- ``softmax_max``, ``softmax_sum``: float32, (B, N, Sq, 8), or (T, N, 8) for TND;
- ``softmax_out``: an empty tensor (0 elements) of the query's dtype ("reserved");
- ``seed``, ``offset``: the Philox state of the dropout mask (0 here), ``numels``: the
  mask's elements, B*N*Sq*Skv (N * sum of q_i*kv_i for TND).

Autograd saves what torch_npu's generated ``NpuFusionAttentionBackward0`` saves (its
``derivatives.yaml`` entry): query, key, value, pse, padding_mask, atten_mask, sink and
the results 0 to 3 (attention_out, softmax_max, softmax_sum, softmax_out); the backward is
``npu_fusion_attention_grad``, which gives dq, dk, dv like query, key, value, dpse like pse
(an empty tensor without one) and dsink like sink (an empty float32 tensor without one).
No Sq x Skv score matrix is ever made. The schemas are the newest torch_npu's, with
``softmax_layout``, ``sink``, ``dropout_mask``, ``seed`` and ``offset``
(``op_plugin_functions.yaml``).

The dropout mask (``0 < keep_prob < 1``): torch_npu's ``dropout_gen_mask`` makes a uint8
tensor of ``ceil(numels / 128) * 128 / 8`` bytes for the call unless the caller gives one
(``dropout_mask``), and the gradient makes it again from seed and offset; the mask is not
saved. :func:`npu_fusion_attention` and
:func:`npu_fusion_attention_grad` (the stand-in module's functions) take it for the call.
DECISION: on the current stream (torch_npu takes it on the secondary stream when
``gen_mask_parallel``); a direct call of ``torch.ops.npu.*`` takes no mask.

SDPA (:func:`scaled_dot_product_attention`): torch_npu overrides
``aten::scaled_dot_product_attention`` for its device
(``op_plugin/ops/opapi/ScaledDotProductAttentionKernelNpuOpApi.cpp``, torch 2.5 and later).
On Atlas A2/A3 and the 950 (SoC >= Ascend910B1) it calls
``npu_fusion_attention`` (BNSD, head_num = query heads, keep_prob = 1 - dropout_p,
is_causal as sparse_mode 2 with a 2048 x 2048 ``triu`` bool mask, a bool mask inverted
with ``logical_not``) when the dtype is float16, bfloat16 or float32, the mask is absent or
bool, query, key and value are 4-D, heads <= 2048, head size <= 512 and the query's heads a
multiple of the key's; float32 with a head size not a multiple of 4, and everything else,
takes torch's math path (a bool mask made a float one first). DECISION: torch_npu's
"compatible" mode (its ``CheckCompatibleImpl``, off by default) is not modelled, nor its
fused-infer-attention branch (it needs what the first branch already accepts). torch_npu
registers the override for the device's backend key (``op_plugin_functions.yaml`` lists it
under ``official``, not under ``autograd``, where autograd-key kernels go), so it serves
training, ``no_grad`` and ``torch.inference_mode`` alike: here it is installed for
autograd's key of the device (training and ``no_grad``), and under
``torch.inference_mode``, which skips that key and hands the operator whole to the
dispatch modes, the estimate's tracker calls it (``session.py``).
"""

from __future__ import annotations

from typing import Any

import torch

from .torch_npu import npu as _npu

__all__ = ["register_fused_ops", "npu_fusion_attention", "npu_fusion_attention_grad",
           "scaled_dot_product_attention"]

_MAX = 2147483647
_LAYOUTS = ("BSH", "SBH", "BNSD", "BSND", "TND")
_FWD = ("npu_fusion_attention(Tensor query, Tensor key, Tensor value, int head_num, "
        "str input_layout, Tensor? pse=None, Tensor? padding_mask=None, "
        "Tensor? atten_mask=None, float scale=1., float keep_prob=1., "
        "int pre_tockens=2147483647, int next_tockens=2147483647, int inner_precise=0, "
        "int[]? prefix=None, int[]? actual_seq_qlen=None, int[]? actual_seq_kvlen=None, "
        "int sparse_mode=0, bool gen_mask_parallel=True, bool sync=False, "
        "str softmax_layout=\"\", Tensor? sink=None, Tensor? dropout_mask=None, int seed=0, "
        "int offset=0) -> (Tensor, Tensor, Tensor, Tensor, int, int, int)")
_GRAD = ("npu_fusion_attention_grad(Tensor query, Tensor key, Tensor value, Tensor dy, "
         "int head_num, str input_layout, *, Tensor? pse=None, Tensor? padding_mask=None, "
         "Tensor? atten_mask=None, Tensor? softmax_max=None, Tensor? softmax_sum=None, "
         "Tensor? softmax_in=None, Tensor? attention_in=None, float scale_value=1., "
         "float keep_prob=1., int pre_tockens=2147483647, int next_tockens=2147483647, "
         "int inner_precise=0, int seed=0, int offset=0, int numels=0, int[]? prefix=None, "
         "int[]? actual_seq_qlen=None, int[]? actual_seq_kvlen=None, int sparse_mode=0, "
         "bool gen_mask_parallel=True, bool sync=False, str softmax_layout=\"\", "
         "Tensor? sink=None) -> (Tensor, Tensor, Tensor, Tensor, Tensor)")
#: ScaledDotProductAttentionKernelNpuOpApi.cpp: N_LIMIT, D_LIMIT, ATTENMASK_LIMIT
_N_LIMIT, _D_LIMIT, _MASK = 2048, 512, 2048

_libs: list = []


def _check(query: Any, key: Any, value: Any, layout: str, keep_prob: float,
           sparse_mode: int, seq_q: Any, seq_kv: Any, dy: Any = None) -> str:
    """torch_npu's argument checks (FlashAttentionKernelNpuOpApi.cpp), its messages."""
    for name, t in (("query", query), ("key", key), ("value", value), ("dy", dy)):
        if t is not None and t.dim() not in (3, 4):
            raise RuntimeError(f"The shapes of the input {name} should be 3 or 4 dimensional, "
                               f"but got {t.dim()}-dimensional")
    if not 0 < keep_prob <= 1:
        raise RuntimeError(f"The keep_prob value must be in range of (0, 1], but got "
                           f"{keep_prob}")
    upper = layout.upper()
    if upper == "TND":
        if not (0 <= sparse_mode < 5 or 5 < sparse_mode <= 8):
            raise RuntimeError(f"The sparse_mode value must be in range of [0,5) or (5,8], "
                               f"but got {sparse_mode}")
        if not seq_q or not seq_kv or len(seq_q) != len(seq_kv):
            raise RuntimeError("the size of actual_seq_qlen and actual_seq_kvlen must be the "
                               "same and cannot be empty.")
    elif not 0 <= sparse_mode <= 6:
        raise RuntimeError(f"The sparse_mode value must be in range of [0,6], but got "
                           f"{sparse_mode}")
    if upper not in _LAYOUTS:
        raise RuntimeError(f"The input_layout should be BSH/SBH/BNSD/BSND/TND"
                           f"(case-insensitive), but got {layout}")
    return upper


def _dims(query: Any, key: Any, value: Any, head_num: int, layout: str,
          seq_q: Any, seq_kv: Any) -> tuple[list[int], list[int], int]:
    """(attention_out's shape, softmax_max's shape, numels) as torch_npu computes them."""
    q, k, v = query.shape, key.shape, value.shape
    if layout in ("BSH", "SBH"):
        b, s0, s1 = (q[0], q[1], k[1]) if layout == "BSH" else (q[1], q[0], k[0])
        d = q[2] // head_num if head_num else 0
        groups = k[2] // d if d else 0
        d2 = v[2] // groups if d and k[2] and groups else d
        out = [b, s0, head_num * d2] if layout == "BSH" else [s0, b, head_num * d2]
        return out, [b, head_num, s0, 8], b * head_num * s0 * s1
    if layout == "TND":
        n = q[1]
        pairs = zip(seq_q, seq_kv)
        prev_q = prev_kv = 0
        accum = 0
        for sq, skv in pairs:
            accum += (sq - prev_q) * (skv - prev_kv)
            prev_q, prev_kv = sq, skv
        return [q[0], n, v[2]], [q[0], n, 8], n * accum
    b, n, s0, s1 = ((q[0], q[1], q[2], k[2]) if layout == "BNSD"
                    else (q[0], q[2], q[1], k[1]))
    out = [b, n, s0, v[3]] if layout == "BNSD" else [b, s0, n, v[3]]
    return out, [b, head_num, s0, 8], b * n * s0 * s1


def _forward_fake(query, key, value, head_num, input_layout, pse=None, padding_mask=None,
                  atten_mask=None, scale=1.0, keep_prob=1.0, pre_tockens=_MAX,
                  next_tockens=_MAX, inner_precise=0, prefix=None, actual_seq_qlen=None,
                  actual_seq_kvlen=None, sparse_mode=0, gen_mask_parallel=True, sync=False,
                  softmax_layout="", sink=None, dropout_mask=None, seed=0, offset=0):
    layout = _check(query, key, value, input_layout, keep_prob, sparse_mode,
                    actual_seq_qlen, actual_seq_kvlen)
    _check_softmax_layout(softmax_layout, layout)
    out_shape, stat_shape, numels = _dims(query, key, value, head_num, layout,
                                          actual_seq_qlen, actual_seq_kvlen)
    out = query.new_empty(out_shape)
    softmax_max = query.new_empty(stat_shape, dtype=torch.float32)
    softmax_sum = query.new_empty(stat_shape, dtype=torch.float32)
    return out, softmax_max, softmax_sum, query.new_empty((0,)), seed, offset, numels


def _check_softmax_layout(softmax_layout: str, layout: str) -> None:
    """The newest torch_npu's softmax_layout: "" or "TND", which only a TND input takes
    (FlashAttentionKernelNpuOpApi.cpp; the statistics keep their shapes either way)."""
    if softmax_layout not in ("", "TND"):
        raise RuntimeError("only supported softmax_layout=TND")
    if softmax_layout == "TND" and layout != "TND":
        raise RuntimeError("softmax_layout=TND only supported when input_layout_str=TND")


def _grad_fake(query, key, value, dy, head_num, input_layout, *, pse=None, padding_mask=None,
               atten_mask=None, softmax_max=None, softmax_sum=None, softmax_in=None,
               attention_in=None, scale_value=1.0, keep_prob=1.0, pre_tockens=_MAX,
               next_tockens=_MAX, inner_precise=0, seed=0, offset=0, numels=0, prefix=None,
               actual_seq_qlen=None, actual_seq_kvlen=None, sparse_mode=0,
               gen_mask_parallel=True, sync=False, softmax_layout="", sink=None):
    _check(query, key, value, input_layout, keep_prob, sparse_mode, actual_seq_qlen,
           actual_seq_kvlen, dy)
    dpse = torch.empty_like(pse) if pse is not None else query.new_empty((0,))
    # like the sink, or an empty float32 tensor without one
    dsink = (torch.empty_like(sink) if sink is not None
             else key.new_empty((0,), dtype=torch.float32))
    return (torch.empty_like(query), torch.empty_like(key), torch.empty_like(value), dpse,
            dsink)


# the arguments' positions in the forward schema (setup_context gets them positionally)
_NAMES = ("query", "key", "value", "head_num", "input_layout", "pse", "padding_mask",
          "atten_mask", "scale", "keep_prob", "pre_tockens", "next_tockens", "inner_precise",
          "prefix", "actual_seq_qlen", "actual_seq_kvlen", "sparse_mode", "gen_mask_parallel",
          "sync", "softmax_layout", "sink", "dropout_mask", "seed", "offset")
_DEFAULTS = (None, None, 1.0, 1.0, _MAX, _MAX, 0, None, None, None, 0, True, False, "", None,
             None, 0, 0)
_SINK = _NAMES.index("sink")


def _setup_context(ctx: Any, inputs: tuple, output: tuple) -> None:
    args = dict(zip(_NAMES, tuple(inputs) + _DEFAULTS[len(inputs) - 5:]))
    out, softmax_max, softmax_sum, softmax_out, seed, offset, numels = output
    # torch_npu's NpuFusionAttentionBackward0 keeps these (and only these) tensors
    # (op-plugin's derivatives.yaml; not the dropout mask: the gradient makes it again)
    ctx.save_for_backward(args["query"], args["key"], args["value"], args["pse"],
                          args["padding_mask"], args["atten_mask"], out, softmax_max,
                          softmax_sum, softmax_out, args["sink"])
    # the generated C++ node gets undefined gradients for unused outputs; an
    # autograd.Function would make zeros of softmax_max and softmax_sum
    ctx.set_materialize_grads(False)
    ctx.args = {name: args[name] for name in _NAMES[8:_SINK] + ("head_num", "input_layout")}
    ctx.rng = (seed, offset, numels)


def _backward(ctx: Any, grad: Any, *_unused: Any) -> tuple:
    if grad is None:                  # only the statistics were used: nothing to give back
        return (None,) * len(_NAMES)
    q, k, v, pse, padding_mask, atten_mask, out, smax, ssum, sout, sink = ctx.saved_tensors
    a = ctx.args
    seed, offset, numels = ctx.rng
    dq, dk, dv, dpse, dsink = npu_fusion_attention_grad(
        q, k, v, grad, a["head_num"], a["input_layout"], pse=pse, padding_mask=padding_mask,
        atten_mask=atten_mask, softmax_max=smax, softmax_sum=ssum, softmax_in=sout,
        attention_in=out, scale_value=a["scale"], keep_prob=a["keep_prob"],
        pre_tockens=a["pre_tockens"], next_tockens=a["next_tockens"],
        inner_precise=a["inner_precise"], seed=seed, offset=offset, numels=numels,
        prefix=a["prefix"], actual_seq_qlen=a["actual_seq_qlen"],
        actual_seq_kvlen=a["actual_seq_kvlen"], sparse_mode=a["sparse_mode"],
        gen_mask_parallel=a["gen_mask_parallel"], sync=a["sync"],
        softmax_layout=a["softmax_layout"], sink=sink)
    grads: list[Any] = [None] * len(_NAMES)
    grads[:3] = dq, dk, dv
    grads[5] = dpse if pse is not None else None
    grads[_SINK] = dsink if sink is not None else None
    return tuple(grads)


def _drop_mask(query: Any, keep_prob: float, numels: int) -> Any:
    """The dropout mask torch_npu makes for one call (dropout_gen_mask_impl), or None."""
    if not 0 < keep_prob < 1:
        return None
    return torch.empty(-(-numels // 128) * 128 // 8, dtype=torch.uint8, device=query.device)


def npu_fusion_attention(query: Any, key: Any, value: Any, head_num: int, input_layout: str,
                         pse: Any = None, padding_mask: Any = None, atten_mask: Any = None,
                         scale: float = 1.0, keep_prob: float = 1.0, pre_tockens: int = _MAX,
                         next_tockens: int = _MAX, inner_precise: int = 0, prefix: Any = None,
                         actual_seq_qlen: Any = None, actual_seq_kvlen: Any = None,
                         sparse_mode: int = 0, gen_mask_parallel: bool = True,
                         sync: bool = False, softmax_layout: str = "", sink: Any = None,
                         dropout_mask: Any = None, seed: int = 0, offset: int = 0) -> tuple:
    """``torch_npu.npu_fusion_attention``: (attention_out, softmax_max, softmax_sum,
    softmax_out, seed, offset, numels); the dropout mask is held for the call, unless the
    caller gives one (``dropout_mask``)."""
    layout = _check(query, key, value, input_layout, keep_prob, sparse_mode, actual_seq_qlen,
                    actual_seq_kvlen)
    mask = None
    if dropout_mask is None:
        mask = _drop_mask(query, keep_prob, _dims(query, key, value, head_num, layout,
                                                  actual_seq_qlen, actual_seq_kvlen)[2])
    result = torch.ops.npu.npu_fusion_attention(
        query, key, value, head_num, input_layout, pse, padding_mask, atten_mask, scale,
        keep_prob, pre_tockens, next_tockens, inner_precise, prefix, actual_seq_qlen,
        actual_seq_kvlen, sparse_mode, gen_mask_parallel, sync, softmax_layout, sink,
        dropout_mask, seed, offset)
    del mask
    return result


def npu_fusion_attention_grad(query: Any, key: Any, value: Any, dy: Any, head_num: int,
                              input_layout: str, **kwargs: Any) -> tuple:
    """``torch_npu.npu_fusion_attention_grad``: (dq, dk, dv, dpse, dsink); the dropout mask
    made again from seed and offset is held for the call."""
    mask = _drop_mask(query, kwargs.get("keep_prob", 1.0), kwargs.get("numels", 0))
    result = torch.ops.npu.npu_fusion_attention_grad(query, key, value, dy, head_num,
                                                     input_layout, **kwargs)
    del mask
    return result


def _fused_sdpa_applies(query: Any, key: Any, value: Any, attn_mask: Any) -> bool:
    """The conditions of torch_npu's scaled_dot_product_attention for npu_fusion_attention
    (ScaledDotProductAttentionKernelNpuOpApi.cpp, V2R5 and later)."""
    session = _npu.active()
    if session is None or session.product == "310P":     # SoC < Ascend910B1
        return False
    if query.dtype == torch.float32 and any(t.shape[-1] % 4 for t in (query, key, value)):
        return False
    return (query.dtype in (torch.float16, torch.bfloat16, torch.float32)
            and (attn_mask is None or attn_mask.dtype == torch.bool)
            and query.dim() == key.dim() == value.dim() == 4
            and query.shape[1] <= _N_LIMIT and query.shape[3] <= _D_LIMIT
            and key.shape[1] <= _N_LIMIT and key.shape[1] > 0
            and query.shape[1] % key.shape[1] == 0 and query.shape[1] // key.shape[1] > 0)


def _broadcast(mask: Any, query: Any, key: Any) -> Any:
    """preprocess_attn_mask_for_npu: a mask that broadcasts to (B, N, Sq, Skv) and is not
    (Sq, Skv), (B, N|1, Sq, Skv) or (1, 1, Sq, Skv) is expanded to it (a view)."""
    b, n, sq, skv = query.shape[0], query.shape[1], query.shape[2], key.shape[2]
    target = (b, n, sq, skv)
    if not 2 <= mask.dim() <= 4 or any(m not in (1, t) for m, t in
                                       zip(mask.shape, target[4 - mask.dim():])):
        return mask
    s = mask.shape
    if mask.dim() == 2 and tuple(s) == (sq, skv):
        return mask
    if mask.dim() == 4 and s[2] == sq and s[3] == skv and (
            (s[0] == b and s[1] in (n, 1)) or (s[0] == 1 and s[1] == 1)):
        return mask
    return mask.expand(target)


def scaled_dot_product_attention(query: Any, key: Any, value: Any, attn_mask: Any = None,
                                 dropout_p: float = 0.0, is_causal: bool = False,
                                 scale: Any = None, enable_gqa: bool = False) -> Any:
    """torch_npu's aten::scaled_dot_product_attention for the NPU."""
    if _fused_sdpa_applies(query, key, value, attn_mask):
        if is_causal:
            if attn_mask is not None:
                raise RuntimeError("The attn_mask should be none when is_causal is true, but "
                                   "got 1-value")
            mask = torch.triu(torch.ones(_MASK, _MASK, dtype=torch.bool, device=query.device),
                              1)
        elif attn_mask is not None:
            mask = torch.logical_not(_broadcast(attn_mask, query, key))
        else:
            mask = None
        inner = 2 if (not is_causal and query.shape[2] > 1 and attn_mask is not None) else 0
        return npu_fusion_attention(
            query, key, value, query.shape[1], "BNSD", None, None, mask,
            scale if scale is not None else 1.0 / float(query.shape[-1]) ** 0.5,
            1.0 - dropout_p, _MAX, 0 if is_causal else _MAX, inner, None, None, None,
            2 if is_causal else 0, True, False)[0]
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        converted = torch.zeros_like(attn_mask, dtype=query.dtype)
        converted.masked_fill_(attn_mask.logical_not(), float("-inf"))
        attn_mask = converted
    return torch.ops.aten._scaled_dot_product_attention_math(
        query, key, value, attn_mask, dropout_p, is_causal, None, scale=scale,
        enable_gqa=enable_gqa)[0]


def register_fused_ops() -> None:
    """Define the npu operators, their fake kernels and autograd, and torch_npu's SDPA for
    the NPU (once per process, with the ``npu`` device)."""
    if _libs:
        return
    lib = torch.library.Library("npu", "FRAGMENT")
    lib.define(_FWD)
    lib.define(_GRAD)
    torch.library.register_fake("npu::npu_fusion_attention", _forward_fake, lib=lib)
    torch.library.register_fake("npu::npu_fusion_attention_grad", _grad_fake, lib=lib)
    torch.library.register_autograd("npu::npu_fusion_attention", _backward,
                                    setup_context=_setup_context, lib=lib)
    aten = torch.library.Library("aten", "IMPL")
    aten.impl("scaled_dot_product_attention", scaled_dot_product_attention,
              "AutogradPrivateUse1")
    _libs.extend((lib, aten))
