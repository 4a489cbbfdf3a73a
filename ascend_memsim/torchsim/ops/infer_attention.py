"""torch_npu's inference attention on the fake NPU: ``npu_fused_infer_attention_score`` (and
``_v2``), ``npu_incre_flash_attention``, ``npu_prompt_flash_attention``,
``npu_scaled_masked_softmax`` and its gradient, the paged KV cache's
``npu_scatter_pa_kv_cache`` and ``npu_gather_pa_kv_cache``, ``npu_scatter_nd_update_``
(vllm-ascend's cache writes), ``npu_kv_rmsnorm_rope_cache`` (MLA's cache write),
``npu_attention_update``.

Schemas: ``op_plugin/config/op_plugin_functions.yaml`` (Ascend/op-plugin at 517f2e7d).
Outputs (the torch_npu 2.14.0 wheel's ``torch_npu/op_plugin/meta/_meta_registrations.py``
and op-plugin's kernels):

- ``npu_fused_infer_attention_score``, ``_v2`` (``infer_attention_out_shape``,
  ``infer_lse_out_shape``): the output's layout is the part of ``input_layout`` after ``_``
  (``BNSD_BSND`` gives BSND), its head size the value's (a paged value: (blocks, block,
  H) gives H / kv heads, 4-D its last axis, 5-D size(2) * size(4); 8 x for an int32 value,
  2 x for a float4 one in v2), or the query's when either is 0; dtype the query's, int8 with
  ``quant_scale2`` / ``quant_scale_out`` (v2: ``out_dtype`` if given), float16 (or the
  query_rope's, or ``out_dtype``) for an int8 (float8, hifloat8) query; ``softmax_lse``
  float32 (B, N, S, 1), (T, N, 1) for the TND-like layouts, when asked for
  (``softmax_lse_flag``, ``return_softmax_lse``), else an empty tensor;
- ``npu_incre_flash_attention``: like the query (int8 with ``quant_scale2``, float16 for an
  int8 query);
- ``npu_prompt_flash_attention``: like the query, (T, N, Dv) for TND, the BNSD query's
  (B, S, N, D) for BNSD_BSND, dtype as above (the meta registration for torch 2.2 and
  later);
- ``npu_scaled_masked_softmax(x, mask)`` and its gradient: like ``x`` and ``y_grad``
  (``op_plugin/ops/aclops/ScaledMaskedSoftmaxKernelNpu.cpp``);
- ``npu_scatter_pa_kv_cache``, ``npu_gather_pa_kv_cache``: write their ``Tensor(a!)``
  arguments in place and return nothing (``ScatterPaKvCacheNpuOpApi.cpp``,
  ``GatherPaKvCacheKernelNpuOpApi.cpp``): no memory; ``npu_scatter_nd_update_(x, indices,
  updates)`` writes ``x`` and returns it (``scatter_nd_update__meta``);
- ``npu_kv_rmsnorm_rope_cache(kv (B, N, S, D), gamma (Dv,), cos, sin (B, N, S, Dk), index,
  k_cache, ckv_cache)`` (``KvRmsNormRopeCacheNpuOpApi.cpp``): writes the RMS-normed part
  (Dv) and the rotated part (Dk) of ``kv`` into ``ckv_cache`` and ``k_cache`` and returns
  them (``std::tie(k_cache, ckv_cache, k_rope, c_kv)``: no new memory, though the schema
  marks no alias and the meta registration says ``empty_like``; the kernel is followed, as
  for ``npu_apply_rotary_pos_emb``), and two new tensors in kv's dtype, ``k_rope``
  (B, N, S, Dk) and ``c_kv`` (B, N, S, Dv), made whatever ``is_output_kv`` says:
  Dk = cos.size(3), Dv = gamma.size(0); with a 4-D ``v`` whose last axis is 128, the
  ``aclnnKvRmsNormRopeCacheV2`` path: Dk = 192, Dv = 128. DECISION: that V2 kernel is taken
  as present (the kernel asks the CANN whether it has it; the estimate's CANN is a recent
  one). The kernel's checks are kept: kv and cos 4-D, gamma 1-D;
- ``npu_attention_update(lse, local_out, update_type)``: out like ``local_out[0]``, lse_out
  like ``lse[0]`` when ``update_type`` is 1 (``AttentionUpdateKernelNpuOpApi.cpp``; an
  undefined tensor otherwise, an empty one here).

Autograd: ``derivatives.yaml`` has ``npu_scaled_masked_softmax``: ``x:
npu_scaled_masked_softmax_backward(grad, result, mask, scale, fixed_triu_mask)``: the graph
keeps the output and the mask. The others have no derivative (inference operators).

Not modelled: the ``.out`` overloads of the fused infer attention (vllm-ascend's graph mode,
with a caller's workspace). Workspace: ESTIMATE, left to the table's default (their tilings
were not read).
"""

from __future__ import annotations

from typing import Any

import torch

from ._common import define, dtype_of

__all__ = ["register", "npu_fused_infer_attention_score", "npu_fused_infer_attention_score_v2",
           "npu_incre_flash_attention", "npu_prompt_flash_attention", "npu_scaled_masked_softmax",
           "npu_scaled_masked_softmax_backward", "npu_scatter_pa_kv_cache",
           "npu_gather_pa_kv_cache", "npu_scatter_nd_update_", "npu_kv_rmsnorm_rope_cache",
           "npu_attention_update"]


def _opt(names: str, kind: str = "Tensor?") -> str:
    """Optional schema arguments, defaulting to None."""
    return "".join(f"{kind} {name}=None, " for name in names.split())


_MAX = 2147483647
_QKV = "Tensor query, Tensor key, Tensor value, *, "
_FIA = (
    "npu_fused_infer_attention_score(" + _QKV + _opt("pse_shift atten_mask")
    + _opt("actual_seq_lengths actual_seq_lengths_kv", "SymInt[]?")
    + _opt("dequant_scale1 quant_scale1 dequant_scale2 quant_scale2 quant_offset2 "
           "antiquant_scale antiquant_offset key_antiquant_scale key_antiquant_offset "
           "value_antiquant_scale value_antiquant_offset block_table query_padding_size "
           "kv_padding_size key_shared_prefix value_shared_prefix")
    + _opt("actual_shared_prefix_len", "SymInt[]?")
    + _opt("query_rope key_rope key_rope_antiquant_scale")
    + f"int num_heads=1, float scale=1.0, int pre_tokens={_MAX}, int next_tokens={_MAX}, "
      "str input_layout=\"BSH\", int num_key_value_heads=0, int sparse_mode=0, "
      "int inner_precise=0, int block_size=0, int antiquant_mode=0, int key_antiquant_mode=0, "
      "int value_antiquant_mode=0, bool softmax_lse_flag=False) -> (Tensor, Tensor)")
_FIA_V2 = (
    "npu_fused_infer_attention_score_v2(" + _QKV
    + _opt("query_rope key_rope pse_shift atten_mask")
    + _opt("actual_seq_qlen actual_seq_kvlen", "SymInt[]?")
    + _opt("block_table dequant_scale_query dequant_scale_key dequant_offset_key "
           "dequant_scale_value dequant_offset_value dequant_scale_key_rope quant_scale_out "
           "quant_offset_out quant_scale_p learnable_sink")
    + f"int num_query_heads=1, int num_key_value_heads=0, float softmax_scale=1.0, "
      f"int pre_tokens={_MAX}, int next_tokens={_MAX}, str input_layout=\"BSH\", "
      "int sparse_mode=0, int block_size=0, int query_quant_mode=0, int key_quant_mode=0, "
      "int value_quant_mode=0, int inner_precise=0, bool return_softmax_lse=False, "
    + _opt("query_dtype key_dtype value_dtype query_rope_dtype key_rope_dtype "
           "key_shared_prefix_dtype value_shared_prefix_dtype dequant_scale_query_dtype "
           "dequant_scale_key_dtype dequant_scale_value_dtype dequant_scale_key_rope_dtype "
           "out_dtype", "int?").removesuffix(", ")
    + ") -> (Tensor, Tensor)")
_SCHEMAS = (
    _FIA,
    _FIA_V2,
    "npu_incre_flash_attention(" + _QKV + _opt("padding_mask atten_mask pse_shift")
    + _opt("actual_seq_lengths", "SymInt[]?")
    + _opt("antiquant_scale antiquant_offset block_table dequant_scale1 quant_scale1 "
           "dequant_scale2 quant_scale2 quant_offset2 kv_padding_size")
    + "int num_heads=1, float scale_value=1.0, str input_layout=\"BSH\", "
      "int num_key_value_heads=0, int block_size=0, int inner_precise=1) -> Tensor",
    "npu_prompt_flash_attention(" + _QKV + _opt("padding_mask atten_mask pse_shift")
    + _opt("actual_seq_lengths", "int[]?")
    + _opt("deq_scale1 quant_scale1 deq_scale2 quant_scale2 quant_offset2")
    + f"int num_heads=1, float scale_value=1.0, int pre_tokens={_MAX}, int next_tokens=0, "
      "str input_layout=\"BSH\", int num_key_value_heads=0, int[]? actual_seq_lengths_kv=None, "
      "int sparse_mode=0) -> Tensor",
    "npu_scaled_masked_softmax(Tensor x, Tensor mask, Scalar scale=1, "
    "bool fixed_triu_mask=False) -> Tensor",
    "npu_scaled_masked_softmax_backward(Tensor y_grad, Tensor y, Tensor mask, Scalar scale, "
    "bool fixed_triu_mask) -> Tensor",
    "npu_scatter_pa_kv_cache(Tensor key, Tensor value, Tensor(a!) key_cache, "
    "Tensor(b!) value_cache, Tensor slot_mapping, *, Tensor? compress_lens=None, "
    "Tensor? compress_seq_offsets=None, Tensor? seq_lens=None, str? cache_mode='PA_NZ') -> ()",
    "npu_gather_pa_kv_cache(Tensor key_cache, Tensor value_cache, Tensor block_tables, "
    "Tensor seq_lens, Tensor(a!) key, Tensor(b!) value, *, Tensor? seq_offset=None, "
    "bool is_seq_lens_cumsum=False) -> ()",
    "npu_scatter_nd_update_(Tensor(a!) self, Tensor indices, Tensor updates) -> Tensor(a!)",
    "npu_kv_rmsnorm_rope_cache(Tensor kv, Tensor gamma, Tensor cos, Tensor sin, Tensor index, "
    "Tensor k_cache, Tensor ckv_cache, *, Tensor? k_rope_scale=None, Tensor? c_kv_scale=None, "
    "Tensor? k_rope_offset=None, Tensor? c_kv_offset=None, Tensor? v=None, "
    "float epsilon=1e-5, str cache_mode='Norm', bool is_output_kv=False) "
    "-> (Tensor, Tensor, Tensor, Tensor)",
    "npu_attention_update(Tensor[] lse, Tensor[] local_out, int update_type) "
    "-> (Tensor, Tensor)",
)

#: input_layout -> (the query's layout, the output's layout, the query's dimensions)
#: (get_query_and_attention_out_layout's LAYOUT_MAP)
_LAYOUTS = {
    "BSH": ("BSH", "BSH", 3), "BSND": ("BSND", "BSND", 4), "BNSD": ("BNSD", "BNSD", 4),
    "TND": ("TND", "TND", 3), "NTD": ("NTD", "NTD", 3), "NSD": ("NSD", "NSD", 3),
    "BNSD_BSND": ("BNSD", "BSND", 4), "BSH_BNSD": ("BSH", "BNSD", 3),
    "BSND_BNSD": ("BSND", "BNSD", 4), "NTD_TND": ("NTD", "TND", 3),
    "BSH_NBSD": ("BSH", "NBSD", 3), "BSND_NBSD": ("BSND", "NBSD", 4),
    "BNSD_NBSD": ("BNSD", "NBSD", 4), "TND_NTD": ("TND", "NTD", 3),
}


def _bsnd(q: Any, layout: str, heads: int) -> tuple[int, int, int, int]:
    """(B, S, N, D) of the query (get_query_b_s_n_d); T as S and B 1 for TND and NTD."""
    s = [int(d) for d in q.shape]
    return {"BSH": lambda: (s[0], s[1], heads, s[2] // heads),
            "BSND": lambda: (s[0], s[1], s[2], s[3]), "BNSD": lambda: (s[0], s[2], s[1], s[3]),
            "NSD": lambda: (1, s[1], s[0], s[2]), "TND": lambda: (1, s[0], s[1], s[2]),
            "NTD": lambda: (1, s[1], s[0], s[2])}[layout]()


def _value_d(value: Any, block_table: Any, layout: str, kv_heads: int, scale: int) -> int:
    """The value's head size (get_value_d), times ``scale`` for a packed value."""
    v = [int(d) for d in value.shape]
    if block_table is not None:
        d = {3: lambda: v[2] // kv_heads, 4: lambda: v[3], 5: lambda: v[2] * v[4]}[len(v)]()
    elif layout == "BSH":
        d = v[2] // kv_heads
    else:
        d = v[3] if layout in ("BNSD", "BSND") else v[2]
    return d * scale


def _infer_shapes(query: Any, value: Any, block_table: Any, input_layout: str, heads: int,
                  kv_heads: int, scale: int) -> tuple[list[int], list[int]]:
    """(attention_out's shape, softmax_lse's shape) of the fused infer attention."""
    if input_layout not in _LAYOUTS:
        raise RuntimeError(f"Layout {input_layout} is not supported!")
    q_layout, out_layout, q_dim = _LAYOUTS[input_layout]
    if query.dim() != q_dim:
        raise RuntimeError(f"Layout {q_layout}, queryDims({query.dim()}) must be {q_dim}!")
    if heads <= 0:
        raise RuntimeError(f"numHeads should be greater than 0, but got {heads}")
    b, s, n, d = _bsnd(query, q_layout, heads)
    value_d = _value_d(value, block_table, q_layout, kv_heads or heads, scale)
    out_d = d if value_d == 0 or d == 0 else value_d
    out = {"BSH": [b, s, n * out_d], "BSND": [b, s, n, out_d], "BNSD": [b, n, s, out_d],
           "NBSD": [n, b, s, out_d], "TND": [s, n, out_d], "NTD": [n, s, out_d],
           "NSD": [n, s, out_d]}[out_layout]
    if out_layout == "BSH" and (n * value_d == 0 or query.shape[2] == 0):
        out[2] = int(query.shape[2])
    tnd_like = input_layout in ("TND", "NTD", "TND_NTD", "NTD_TND")
    return out, ([s, n, 1] if tnd_like else [b, n, s, 1])


def _fia_fake(query, key, value, **kw):
    heads = kw.get("num_heads", 1)
    packed = 8 if value.dtype == torch.int32 else 1
    out, lse = _infer_shapes(query, value, kw.get("block_table"), kw.get("input_layout", "BSH"),
                             heads, kw.get("num_key_value_heads", 0), packed)
    if kw.get("quant_scale2") is not None:
        dtype = torch.int8
    elif query.dtype == torch.int8:
        rope = kw.get("query_rope")
        dtype = rope.dtype if rope is not None else torch.float16
    else:
        dtype = query.dtype
    return (query.new_empty(out, dtype=dtype),
            query.new_empty(lse if kw.get("softmax_lse_flag") else [0], dtype=torch.float32))


def _fia_v2_fake(query, key, value, **kw):
    heads = kw.get("num_query_heads", 1)
    packed = (8 if value.dtype == torch.int32
              else 2 if kw.get("value_dtype") in (296, 297) else 1)
    out, lse = _infer_shapes(query, value, kw.get("block_table"), kw.get("input_layout", "BSH"),
                             heads, kw.get("num_key_value_heads", 0), packed)
    out_dtype, rope = kw.get("out_dtype"), kw.get("query_rope")
    low_precision = (query.dtype in (torch.int8, torch.float8_e4m3fn)
                     or (query.dtype == torch.uint8 and kw.get("query_dtype") == 290))
    if kw.get("quant_scale_out") is not None:
        dtype = dtype_of(out_dtype, torch.int8)
    elif low_precision:
        dtype = dtype_of(out_dtype, rope.dtype if rope is not None else torch.float16)
    else:
        dtype = query.dtype
    return (query.new_empty(out, dtype=dtype),
            query.new_empty(lse if kw.get("return_softmax_lse") else [0], dtype=torch.float32))


def _out_dtype(query: Any, quant_scale2: Any) -> torch.dtype:
    """int8 with quant_scale2, float16 for an int8 query, else the query's."""
    if quant_scale2 is not None:
        return torch.int8
    return torch.float16 if query.dtype == torch.int8 else query.dtype


def _ifa_fake(query, key, value, **kw):
    return query.new_empty(query.shape, dtype=_out_dtype(query, kw.get("quant_scale2")))


def _pfa_fake(query, key, value, **kw):
    layout = kw.get("input_layout", "BSH")
    q = list(query.shape)
    shape = ([q[0], q[1], value.shape[2]] if layout == "TND"
             else [q[0], q[2], q[1], q[3]] if layout == "BNSD_BSND" else q)
    return query.new_empty(shape, dtype=_out_dtype(query, kw.get("quant_scale2")))


def _softmax_fake(x, mask, scale=1, fixed_triu_mask=False):
    return torch.empty_like(x)


def _softmax_backward_fake(y_grad, y, mask, scale, fixed_triu_mask):
    return torch.empty_like(y_grad)


def _in_place(*args, **kwargs):
    return None


def _returns_self(x, *args):
    return x


#: KvRmsNormRopeCacheNpuOpApi.cpp: the V2 kernel's Dk and Dv (V1 takes cos's and gamma's)
_V2_DK, _V2_DV = 192, 128


def _kv_rmsnorm_rope_cache_fake(kv, gamma, cos, sin, index, k_cache, ckv_cache, *,
                                k_rope_scale=None, c_kv_scale=None, k_rope_offset=None,
                                c_kv_offset=None, v=None, epsilon=1e-5, cache_mode="Norm",
                                is_output_kv=False):
    for name, x, dims in (("kv", kv, 4), ("gamma", gamma, 1), ("cos", cos, 4)):
        if x.dim() != dims:
            raise RuntimeError(f"{dims}D tensor expected for input {name}")
    v2 = v is not None and v.dim() == 4 and v.shape[3] == _V2_DV
    dk, dv = (_V2_DK, _V2_DV) if v2 else (cos.shape[3], gamma.shape[0])
    lead = tuple(kv.shape[:3])
    # the caches are written in place and returned (std::tie(k_cache, ckv_cache, ...))
    return k_cache, ckv_cache, kv.new_empty((*lead, dk)), kv.new_empty((*lead, dv))


def _attention_update_fake(lse, local_out, update_type):
    lse_out = torch.empty_like(lse[0]) if update_type == 1 else lse[0].new_empty((0,))
    return torch.empty_like(local_out[0]), lse_out


def _setup_softmax(ctx: Any, inputs: tuple, output: Any) -> None:
    _x, mask, scale, fixed_triu_mask = inputs
    # derivatives.yaml: x: npu_scaled_masked_softmax_backward(grad, result, mask, ...)
    ctx.save_for_backward(output, mask)
    ctx.args = (scale, fixed_triu_mask)


def _softmax_grad(ctx: Any, grad: Any) -> tuple:
    y, mask = ctx.saved_tensors
    scale, fixed_triu_mask = ctx.args
    return (torch.ops.npu.npu_scaled_masked_softmax_backward(grad, y, mask, scale,
                                                              fixed_triu_mask),
            None, None, None)


def register(lib: Any) -> None:
    """Define the family's operators in ``lib`` (the ``npu`` namespace), their fake kernels
    and autograd."""
    define(lib, _SCHEMAS, {
        "npu_fused_infer_attention_score": _fia_fake,
        "npu_fused_infer_attention_score_v2": _fia_v2_fake,
        "npu_incre_flash_attention": _ifa_fake,
        "npu_prompt_flash_attention": _pfa_fake,
        "npu_scaled_masked_softmax": _softmax_fake,
        "npu_scaled_masked_softmax_backward": _softmax_backward_fake,
        "npu_scatter_pa_kv_cache": _in_place,
        "npu_gather_pa_kv_cache": _in_place,
        "npu_scatter_nd_update_": _returns_self,
        "npu_kv_rmsnorm_rope_cache": _kv_rmsnorm_rope_cache_fake,
        "npu_attention_update": _attention_update_fake,
    }, {
        "npu_scaled_masked_softmax": (_softmax_grad, _setup_softmax),
    })


def npu_fused_infer_attention_score(query: Any, key: Any, value: Any, **kwargs: Any) -> tuple:
    """``torch_npu.npu_fused_infer_attention_score``: (attention_out, softmax_lse)."""
    return torch.ops.npu.npu_fused_infer_attention_score(query, key, value, **kwargs)


def npu_fused_infer_attention_score_v2(query: Any, key: Any, value: Any,
                                       **kwargs: Any) -> tuple:
    """``torch_npu.npu_fused_infer_attention_score_v2``: (attention_out, softmax_lse)."""
    return torch.ops.npu.npu_fused_infer_attention_score_v2(query, key, value, **kwargs)


def npu_incre_flash_attention(query: Any, key: Any, value: Any, **kwargs: Any) -> Any:
    """``torch_npu.npu_incre_flash_attention``: the attention of the new tokens."""
    return torch.ops.npu.npu_incre_flash_attention(query, key, value, **kwargs)


def npu_prompt_flash_attention(query: Any, key: Any, value: Any, **kwargs: Any) -> Any:
    """``torch_npu.npu_prompt_flash_attention``: the attention of the prompt."""
    return torch.ops.npu.npu_prompt_flash_attention(query, key, value, **kwargs)


def npu_scaled_masked_softmax(x: Any, mask: Any, scale: Any = 1,
                              fixed_triu_mask: bool = False) -> Any:
    """``torch_npu.npu_scaled_masked_softmax``: like ``x``; the graph keeps the output and
    the mask."""
    return torch.ops.npu.npu_scaled_masked_softmax(x, mask, scale, fixed_triu_mask)


def npu_scaled_masked_softmax_backward(y_grad: Any, y: Any, mask: Any, scale: Any,
                                       fixed_triu_mask: bool) -> Any:
    """``torch_npu.npu_scaled_masked_softmax_backward``: like ``y_grad``."""
    return torch.ops.npu.npu_scaled_masked_softmax_backward(y_grad, y, mask, scale,
                                                            fixed_triu_mask)


def npu_scatter_pa_kv_cache(key: Any, value: Any, key_cache: Any, value_cache: Any,
                            slot_mapping: Any, **kwargs: Any) -> None:
    """``torch_npu.npu_scatter_pa_kv_cache``: writes the caches in place."""
    torch.ops.npu.npu_scatter_pa_kv_cache(key, value, key_cache, value_cache, slot_mapping,
                                          **kwargs)


def npu_gather_pa_kv_cache(key_cache: Any, value_cache: Any, block_tables: Any, seq_lens: Any,
                           key: Any, value: Any, **kwargs: Any) -> None:
    """``torch_npu.npu_gather_pa_kv_cache``: writes ``key`` and ``value`` in place."""
    torch.ops.npu.npu_gather_pa_kv_cache(key_cache, value_cache, block_tables, seq_lens, key,
                                         value, **kwargs)


def npu_scatter_nd_update_(self: Any, indices: Any, updates: Any) -> Any:
    """``torch_npu.npu_scatter_nd_update_``: ``self``, written in place."""
    return torch.ops.npu.npu_scatter_nd_update_(self, indices, updates)


def npu_kv_rmsnorm_rope_cache(kv: Any, gamma: Any, cos: Any, sin: Any, index: Any,
                              k_cache: Any, ckv_cache: Any, **kwargs: Any) -> tuple:
    """``torch_npu.npu_kv_rmsnorm_rope_cache``: (k_cache, ckv_cache, written in place;
    k_rope, c_kv, new)."""
    return torch.ops.npu.npu_kv_rmsnorm_rope_cache(kv, gamma, cos, sin, index, k_cache,
                                                   ckv_cache, **kwargs)


def npu_attention_update(lse: Any, local_out: Any, update_type: int) -> tuple:
    """``torch_npu.npu_attention_update``: (out, lse_out)."""
    return torch.ops.npu.npu_attention_update(lse, local_out, update_type)
