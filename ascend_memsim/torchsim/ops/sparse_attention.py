"""DeepSeek's sparse attention on the fake NPU: ``npu_lightning_indexer`` (the indexer that
picks each query's top-k keys) and ``npu_sparse_flash_attention`` (attention over those keys
only), with their gradients, and vllm-ascend's ``npu_sparse_attention_score``.

Schemas: ``op_plugin/config/op_plugin_functions.yaml`` (Ascend/op-plugin at 517f2e7d).
Outputs (the kernels ``op_plugin/ops/opapi/LightningIndexerKernelNpuOpApi.cpp``,
``SparseFlashAttentionKernelNpuOpApi.cpp`` and their gradients', which the meta
registrations in ``_meta_registrations.py`` follow):

- ``npu_lightning_indexer(query, key, weights)``: ``sparse_indices`` int32 (B, S1, N2,
  sparse_count) for a BSND query, (T, N2, sparse_count) for TND, N2 the key's heads
  (``key.size(1)`` for a TND key, ``key.size(2)`` otherwise); ``sparse_values`` of that
  shape in the query's dtype with ``return_value``, else an empty one;
  ``npu_lightning_indexer_grad``: d_query, d_key, d_weights like query, key, weights;
- ``npu_sparse_flash_attention(query, key, value, sparse_indices, scale_value)``:
  ``attention_out`` like the query (BSND or TND); ``softmax_max`` and ``softmax_sum``
  float32 (B, N2, S1, N1 / N2), or (N2, T, N1 / N2) for a 3-D query, with
  ``return_softmax_lse``, else empty ones; N2 is read as the kernel reads it,
  ``key.size(2)`` for a 4-D query and ``key.size(1)`` for a 3-D one (a TND key's heads);
  ``npu_sparse_flash_attention_grad``: d_query, d_key, d_value like query, key, value,
  d_query_rope and d_key_rope like query_rope and key_rope (an empty tensor of the query's,
  the key's dtype without one);
- ``npu_sparse_attention_score(query (T, N, D), key, value (blocks, block_size, KVHead,
  D), select_idx, block_table)``: like the query, float16 for a float8_e4m3fn one. This
  one is not torch_npu's: op-plugin and the torch_npu 2.14.0 wheel have no such operator.
  It is vllm-ascend's own kernel (``csrc/torch_binding.cpp`` defines
  ``_C_ascend::npu_sparse_attention_score``; ``csrc/attention/sparse_attention_score/
  sparse_attention_score_torch_adpt.h`` sizes its output and holds its checks, at
  vllm-project/vllm-ascend 182b75ea), which vllm-ascend's source calls as
  ``torch.ops._C_ascend.npu_sparse_attention_score`` and its kernel's tests as
  ``torch_npu.npu_sparse_attention_score`` (through ops-transformer's torch extension).
  DECISION: modelled under that second name, ``torch_npu.npu_sparse_attention_score`` and
  ``torch.ops.npu.npu_sparse_attention_score``, with vllm-ascend's schema; the ``_C_ascend``
  namespace, vllm-ascend's library, is not defined.

The kernels' and tilings' checks that decide the shapes are kept, with their messages:
empty or zero-sized inputs, ``sparse_count`` > 0, the layouts (query BSND or TND; the
indexer's key PA_BSND, BSND or TND and, unless paged, the query's), the query's
dimensions for its layout.

Autograd (``derivatives.yaml``):

- ``npu_lightning_indexer``: ``output_differentiability: [false, true]``; ``query, key,
  weights: npu_lightning_indexer_grad(query, key, grad, result0, weights,
  actual_seq_lengths_query, actual_seq_lengths_key, layout_query, sparse_mode, pre_tokens,
  next_tokens)``: the graph keeps query, key, weights, ``sparse_indices`` (result0) and the
  two length tensors; ``grad`` is ``sparse_values``'s;
- ``npu_sparse_flash_attention``: ``query, key, value, query_rope, key_rope:
  npu_sparse_flash_attention_grad(query, key, value, sparse_indices, grad, result0,
  result1, result2, scale_value, sparse_block_size, query_rope, key_rope,
  actual_seq_lengths_query, actual_seq_lengths_kv, layout_query, sparse_mode, pre_tokens,
  next_tokens, attention_mode)``: the graph keeps query, key, value, sparse_indices, the
  output, softmax_max, softmax_sum, query_rope, key_rope and the two length tensors. The
  formula names ``grad``, so torch's autograd generator makes the first output alone
  differentiable (``gen_differentiable_outputs``, ``torchgen/api/autograd.py``): the two
  softmax statistics are not.

DECISION: torch's ``register_autograd`` takes no keyword-only tensors, so the forward
schemas of the indexer and the sparse attention have no ``*`` here (op-plugin's put every
argument after ``scale_value`` / ``weights`` behind one): a call by keyword, as torch_npu's
page shows, is the same; a call passing those arguments by position, which torch_npu
refuses, is taken.

Workspace (``workspace_table.py``, ESTIMATE: 24 cube cores): the tilings ask, on Atlas
A2/A3: ``npu_lightning_indexer`` 16 MiB + per cube core 2,361,344 bytes
(``LiCalcWorkspaceSize``, ``attention/lightning_indexer/op_host/lightning_indexer_tiling.cpp``,
hicann/ops-transformer; 16 MiB + 4 * ceil(S2 / 128) * 128 * 4 bytes per cube core on the
950); ``npu_sparse_flash_attention`` 16 MiB + per cube core its double-buffered score,
probability and output blocks and 4 * 512 * 576 * 2 bytes for the gathered keys
(``SFAMlaTiling::GetWorkspaceSize``, ``sparse_flash_attention_tiling.cpp``; the largest
blocks, no flash decoding). ESTIMATE: the gradients' and vllm-ascend's tilings were not
read, left to the table's default.
"""

from __future__ import annotations

from typing import Any

import torch

from ._common import define

__all__ = ["register", "npu_lightning_indexer", "npu_lightning_indexer_grad",
           "npu_sparse_flash_attention", "npu_sparse_flash_attention_grad",
           "npu_sparse_attention_score"]

_MAX = 9223372036854775807
_SCHEMAS = (
    "npu_lightning_indexer(Tensor query, Tensor key, Tensor weights, "
    "Tensor? actual_seq_lengths_query=None, Tensor? actual_seq_lengths_key=None, "
    "Tensor? block_table=None, str layout_query=\"BSND\", str layout_key=\"BSND\", "
    f"int sparse_count=2048, int sparse_mode=3, int pre_tokens={_MAX}, "
    f"int next_tokens={_MAX}, bool return_value=False) -> (Tensor, Tensor)",
    "npu_lightning_indexer_grad(Tensor query, Tensor key, Tensor dy, Tensor sparse_indices, "
    "Tensor weights, Tensor? actual_seq_lengths_query=None, "
    "Tensor? actual_seq_lengths_key=None, str? layout=\"BSND\", int? sparse_mode=3, "
    f"int? pre_tokens={_MAX}, int? next_tokens={_MAX}) -> (Tensor, Tensor, Tensor)",
    "npu_sparse_flash_attention(Tensor query, Tensor key, Tensor value, "
    "Tensor sparse_indices, float scale_value, Tensor? block_table=None, "
    "Tensor? actual_seq_lengths_query=None, Tensor? actual_seq_lengths_kv=None, "
    "Tensor? query_rope=None, Tensor? key_rope=None, int sparse_block_size=1, "
    "str layout_query=\"BSND\", str layout_kv=\"BSND\", int sparse_mode=3, "
    f"int pre_tokens={_MAX}, int next_tokens={_MAX}, int attention_mode=0, "
    "bool return_softmax_lse=False, Tensor? sinks=None) -> (Tensor, Tensor, Tensor)",
    "npu_sparse_flash_attention_grad(Tensor query, Tensor key, Tensor value, "
    "Tensor sparse_indices, Tensor d_out, Tensor out, Tensor softmax_max, "
    "Tensor softmax_sum, float scale_value, int sparse_block_size, Tensor? query_rope=None, "
    "Tensor? key_rope=None, Tensor? actual_seq_qlen=None, Tensor? actual_seq_kvlen=None, "
    f"str? layout=\"BSND\", int? sparse_mode=3, int? pre_tokens={_MAX}, "
    f"int? next_tokens={_MAX}, int? attention_mode=0) "
    "-> (Tensor, Tensor, Tensor, Tensor, Tensor)",
    # vllm-ascend's csrc/torch_binding.cpp (its _C_ascend namespace)
    "npu_sparse_attention_score(Tensor query, Tensor key, Tensor value, Tensor select_idx, "
    "Tensor block_table, *, Tensor? select_num_idx=None, Tensor? q_dequant_scale=None, "
    "Tensor? k_dequant_scale=None, Tensor? v_dequant_scale=None, "
    "Tensor? actual_seq_lengths=None, Tensor? actual_seq_lengths_kv=None, "
    "str q_input_layout=\"TND\", str kv_input_layout=\"BNSD\", int num_key_value_heads=1, "
    "float scale_value=1.0, int block_size=128, int top_k=16, int inner_precise=0) -> Tensor",
)
_QUERY_DIMS = {"BSND": 4, "TND": 3}
_KEY_DIMS = {"BSND": 4, "PA_BSND": 4, "TND": 3}


def _check_sizes(*named: tuple) -> None:
    """The kernels' first check: no empty input ("Tensor query is empty."; a tensor with
    elements has no zero axis, which their next check refuses)."""
    for name, x in named:
        if x.numel() == 0:
            raise RuntimeError(f"Tensor {name} is empty.")


def _check_layout(op: str, name: str, x: Any, layout: str, dims: dict) -> None:
    """``x`` has the dimensions its layout names (the tilings' CheckShapeDim)."""
    if layout not in dims:
        raise RuntimeError(f"{op}: layout of {name} only supports {', '.join(dims)}, but got "
                           f"{layout}")
    if x.dim() != dims[layout]:
        raise RuntimeError(f"When the layout of {name} is {layout}, the {name} dimension must "
                           f"be {dims[layout]}, but got {x.dim()}")


# -- lightning indexer -------------------------------------------------------------------

def _indexer_shape(query: Any, key: Any, layout_query: str, layout_key: str,
                   sparse_count: int) -> tuple:
    """construct_lightning_indexer_output_tensor's size."""
    if layout_query == "BSND":
        return (query.shape[0], query.shape[1], key.shape[2], sparse_count)
    heads = key.shape[1] if layout_key == "TND" else key.shape[2]
    return (query.shape[0], heads, sparse_count)


def _indexer_fake(query, key, weights, actual_seq_lengths_query=None,
                  actual_seq_lengths_key=None, block_table=None, layout_query="BSND",
                  layout_key="BSND", sparse_count=2048, sparse_mode=3, pre_tokens=_MAX,
                  next_tokens=_MAX, return_value=False):
    op = "npu_lightning_indexer"
    _check_sizes(("query", query), ("key", key))
    if sparse_count <= 0:
        raise RuntimeError(f"sparse count should be greater than 0, but now is {sparse_count}")
    _check_layout(op, "query", query, layout_query, _QUERY_DIMS)
    _check_layout(op, "key", key, layout_key, _KEY_DIMS)
    if layout_key != "PA_BSND" and layout_key != layout_query:
        raise RuntimeError("When layout_key is non-PA, layout_query and layout_key must be "
                           "same")
    shape = _indexer_shape(query, key, layout_query, layout_key, sparse_count)
    values = query.new_empty(shape if return_value else (0,))
    return query.new_empty(shape, dtype=torch.int32), values


def _indexer_grad_fake(query, key, dy, sparse_indices, weights, actual_seq_lengths_query=None,
                       actual_seq_lengths_key=None, layout="BSND", sparse_mode=3,
                       pre_tokens=_MAX, next_tokens=_MAX):
    return torch.empty_like(query), torch.empty_like(key), torch.empty_like(weights)


def _setup_indexer(ctx: Any, inputs: tuple, output: tuple) -> None:
    (query, key, weights, lengths_q, lengths_k, _table, layout_query, _layout_key, _count,
     sparse_mode, pre_tokens, next_tokens, _return_value) = inputs
    sparse_indices, _values = output
    # derivatives.yaml: output_differentiability [false, true]; keeps query, key, result0,
    # weights and the two length tensors
    ctx.mark_non_differentiable(sparse_indices)
    ctx.save_for_backward(query, key, sparse_indices, weights, lengths_q, lengths_k)
    ctx.args = (layout_query, sparse_mode, pre_tokens, next_tokens)
    # the generated node gets an undefined gradient when sparse_values is unused
    ctx.set_materialize_grads(False)


def _indexer_grad(ctx: Any, _grad_indices: Any, grad: Any) -> tuple:
    if grad is None:
        return (None,) * 13
    query, key, sparse_indices, weights, lengths_q, lengths_k = ctx.saved_tensors
    layout, sparse_mode, pre_tokens, next_tokens = ctx.args
    d_query, d_key, d_weights = torch.ops.npu.npu_lightning_indexer_grad(
        query, key, grad, sparse_indices, weights, lengths_q, lengths_k, layout, sparse_mode,
        pre_tokens, next_tokens)
    return (d_query, d_key, d_weights) + (None,) * 10


# -- sparse flash attention --------------------------------------------------------------

def _sfa_fake(query, key, value, sparse_indices, scale_value, block_table=None,
              actual_seq_lengths_query=None, actual_seq_lengths_kv=None, query_rope=None,
              key_rope=None, sparse_block_size=1, layout_query="BSND", layout_kv="BSND",
              sparse_mode=3, pre_tokens=_MAX, next_tokens=_MAX, attention_mode=0,
              return_softmax_lse=False, sinks=None):
    _check_sizes(("query", query), ("key", key), ("sparse_indices", sparse_indices))
    if layout_query not in _QUERY_DIMS:
        raise RuntimeError(f"The layout of query only support BSND and TND, but got "
                           f"{layout_query}")
    _check_layout("npu_sparse_flash_attention", "query", query, layout_query, _QUERY_DIMS)
    out = torch.empty_like(query)
    if not return_softmax_lse:
        empty = query.new_empty((0,), dtype=torch.float32)
        return out, empty, empty.new_empty((0,))
    if query.dim() == 3:
        heads = key.shape[1]
        shape = (heads, query.shape[0], query.shape[1] // heads)
    else:
        heads = key.shape[2]
        shape = (query.shape[0], heads, query.shape[1], query.shape[2] // heads)
    return (out, query.new_empty(shape, dtype=torch.float32),
            query.new_empty(shape, dtype=torch.float32))


def _sfa_grad_fake(query, key, value, sparse_indices, d_out, out, softmax_max, softmax_sum,
                   scale_value, sparse_block_size, query_rope=None, key_rope=None,
                   actual_seq_qlen=None, actual_seq_kvlen=None, layout="BSND", sparse_mode=3,
                   pre_tokens=_MAX, next_tokens=_MAX, attention_mode=0):
    for name, x in (("query", query), ("key", key), ("value", value),
                    ("query_rope", query_rope), ("key_rope", key_rope)):
        if x is not None and x.dim() not in (3, 4):
            raise RuntimeError(f"The shapes of the input {name} should be 3 or 4 dimensional, "
                               f"but got {x.dim()}-dimensional")
    d_query_rope = (torch.empty_like(query_rope) if query_rope is not None
                    else query.new_empty((0,)))
    d_key_rope = torch.empty_like(key_rope) if key_rope is not None else key.new_empty((0,))
    return (torch.empty_like(query), torch.empty_like(key), torch.empty_like(value),
            d_query_rope, d_key_rope)


#: the forward's arguments the gradient reads, by position
_SFA_ARGS = {"scale_value": 4, "lengths_q": 6, "lengths_kv": 7, "query_rope": 8,
             "key_rope": 9, "sparse_block_size": 10, "layout_query": 11, "sparse_mode": 13,
             "pre_tokens": 14, "next_tokens": 15, "attention_mode": 16}


def _setup_sfa(ctx: Any, inputs: tuple, output: tuple) -> None:
    query, key, value, sparse_indices = inputs[:4]
    out, softmax_max, softmax_sum = output
    a = {name: inputs[i] for name, i in _SFA_ARGS.items()}
    # the formula names grad: only result0 is differentiable (gen_differentiable_outputs)
    ctx.mark_non_differentiable(softmax_max, softmax_sum)
    ctx.save_for_backward(query, key, value, sparse_indices, out, softmax_max, softmax_sum,
                          a["query_rope"], a["key_rope"], a["lengths_q"], a["lengths_kv"])
    ctx.args = (a["scale_value"], a["sparse_block_size"], a["layout_query"], a["sparse_mode"],
                a["pre_tokens"], a["next_tokens"], a["attention_mode"])
    ctx.set_materialize_grads(False)


def _sfa_grad(ctx: Any, grad: Any, _grad_max: Any, _grad_sum: Any) -> tuple:
    grads: list[Any] = [None] * 19
    if grad is None:
        return tuple(grads)
    (query, key, value, sparse_indices, out, softmax_max, softmax_sum, query_rope, key_rope,
     lengths_q, lengths_kv) = ctx.saved_tensors
    scale, block_size, layout, sparse_mode, pre_tokens, next_tokens, mode = ctx.args
    dq, dk, dv, dq_rope, dk_rope = torch.ops.npu.npu_sparse_flash_attention_grad(
        query, key, value, sparse_indices, grad, out, softmax_max, softmax_sum, scale,
        block_size, query_rope, key_rope, lengths_q, lengths_kv, layout, sparse_mode,
        pre_tokens, next_tokens, mode)
    grads[:3] = dq, dk, dv
    grads[_SFA_ARGS["query_rope"]] = dq_rope if query_rope is not None else None
    grads[_SFA_ARGS["key_rope"]] = dk_rope if key_rope is not None else None
    return tuple(grads)


# -- vllm-ascend's sparse attention score --------------------------------------------------

def _check_rank(x: Any, dims: int, message: str) -> None:
    if x.dim() != dims:
        raise RuntimeError(f"{message}, but got dim {x.dim()}")


def _check_fp8(q_scale: Any, k_scale: Any, v_scale: Any, inner_precise: int,
               *tensors: tuple) -> None:
    """CheckParams for a float8_e4m3fn query: key and value float8 too, the three dequant
    scales given (float32, 4-D), inner_precise 4."""
    for name, x in tensors:
        if x.dtype != torch.float8_e4m3fn:
            raise RuntimeError(f"{name} dtype must be float8_e4m3fn, got {x.dtype}")
    for name, scale in (("q_dequant_scale", q_scale), ("k_dequant_scale", k_scale),
                        ("v_dequant_scale", v_scale)):
        if scale is None:
            raise RuntimeError(f"{name} must be provided for float8_e4m3fn input.")
        if scale.dtype != torch.float32:
            raise RuntimeError(f"{name} dtype must be float32.")
        if scale.dim() != 4:
            raise RuntimeError(f"{name} must be a 4D tensor.")
    if inner_precise != 4:
        raise RuntimeError(f"inner_precise must be 4 (LOW_HIGH_MIXED) for float8_e4m3fn, got "
                           f"{inner_precise}")


def _sparse_score_fake(query, key, value, select_idx, block_table, *, select_num_idx=None,
                       q_dequant_scale=None, k_dequant_scale=None, v_dequant_scale=None,
                       actual_seq_lengths=None, actual_seq_lengths_kv=None,
                       q_input_layout="TND", kv_input_layout="BNSD", num_key_value_heads=1,
                       scale_value=1.0, block_size=128, top_k=16, inner_precise=0):
    # sparse_attention_score_torch_adpt.h: npu_sparse_attention_score and CheckParams
    if q_input_layout != "TND":
        raise RuntimeError("npu_sparse_attention_score only supports query TND layout")
    fp8 = query.dtype == torch.float8_e4m3fn
    if fp8:
        _check_fp8(q_dequant_scale, k_dequant_scale, v_dequant_scale, inner_precise,
                   ("query", query), ("key", key), ("value", value))
    _check_rank(query, 3, "query only supports TND layout [T,N,D]")
    for name, x in (("key", key), ("value", value)):
        _check_rank(x, 4, f"{name} only supports blocked KV layout "
                          f"[blockNum,blockSize,KVHead,D]")
    for name, x in (("query", query), ("key", key), ("value", value)):
        if x.numel() == 0:
            raise RuntimeError(f"{name} should not be empty.")
    _check_rank(select_idx, 3, "select_idx must be [KVHead, maxQSeqlen, TopK]")
    if select_idx.dtype != torch.int32:
        raise RuntimeError("select_idx dtype must be int32.")
    _check_rank(block_table, 2, "block_table must be [batch, maxBlocksPerBatch]")
    if block_table.dtype != torch.int32:
        raise RuntimeError("block_table dtype must be int32.")
    if num_key_value_heads <= 0:
        raise RuntimeError("num_key_value_heads must be positive.")
    if key.shape[2] != num_key_value_heads or value.shape[2] != num_key_value_heads:
        raise RuntimeError("num_key_value_heads must match key/value KVHead dim.")
    if select_idx.shape[0] != num_key_value_heads:
        raise RuntimeError("select_idx dim0 must equal num_key_value_heads.")
    if key.shape[1] != block_size or value.shape[1] != block_size:
        raise RuntimeError("key/value blockSize dim must match block_size.")
    if query.shape[1] % num_key_value_heads:
        raise RuntimeError("query heads must be divisible by num_key_value_heads.")
    if query.shape[2] != key.shape[3] or query.shape[2] != value.shape[3]:
        raise RuntimeError("query/key/value D dim must be equal.")
    if top_k <= 0:
        raise RuntimeError("top_k must be positive.")
    if actual_seq_lengths is None:
        raise RuntimeError("actual_seq_lengths must be provided.")
    if actual_seq_lengths_kv is None:
        raise RuntimeError("actual_seq_lengths_kv must be provided.")
    return query.new_empty(query.shape, dtype=torch.float16 if fp8 else query.dtype)


def register(lib: Any) -> None:
    """Define the family's operators in ``lib`` (the ``npu`` namespace), their fake kernels
    and autograd."""
    define(lib, _SCHEMAS, {
        "npu_lightning_indexer": _indexer_fake,
        "npu_lightning_indexer_grad": _indexer_grad_fake,
        "npu_sparse_flash_attention": _sfa_fake,
        "npu_sparse_flash_attention_grad": _sfa_grad_fake,
        "npu_sparse_attention_score": _sparse_score_fake,
    }, {
        "npu_lightning_indexer": (_indexer_grad, _setup_indexer),
        "npu_sparse_flash_attention": (_sfa_grad, _setup_sfa),
    })


def npu_lightning_indexer(query: Any, key: Any, weights: Any, **kwargs: Any) -> tuple:
    """``torch_npu.npu_lightning_indexer``: (sparse_indices int32, sparse_values); the
    graph keeps query, key, weights and the indices."""
    return torch.ops.npu.npu_lightning_indexer(query, key, weights, **kwargs)


def npu_lightning_indexer_grad(query: Any, key: Any, dy: Any, sparse_indices: Any,
                               weights: Any, *args: Any, **kwargs: Any) -> tuple:
    """``torch_npu.npu_lightning_indexer_grad``: (d_query, d_key, d_weights)."""
    return torch.ops.npu.npu_lightning_indexer_grad(query, key, dy, sparse_indices, weights,
                                                    *args, **kwargs)


def npu_sparse_flash_attention(query: Any, key: Any, value: Any, sparse_indices: Any,
                               scale_value: float, **kwargs: Any) -> tuple:
    """``torch_npu.npu_sparse_flash_attention``: (attention_out, softmax_max, softmax_sum);
    the graph keeps q, k, v, the indices, the output and the statistics."""
    return torch.ops.npu.npu_sparse_flash_attention(query, key, value, sparse_indices,
                                                    scale_value, **kwargs)


def npu_sparse_flash_attention_grad(query: Any, key: Any, value: Any, sparse_indices: Any,
                                    d_out: Any, out: Any, softmax_max: Any, softmax_sum: Any,
                                    scale_value: float, sparse_block_size: int, *args: Any,
                                    **kwargs: Any) -> tuple:
    """``torch_npu.npu_sparse_flash_attention_grad``: (d_query, d_key, d_value,
    d_query_rope, d_key_rope)."""
    return torch.ops.npu.npu_sparse_flash_attention_grad(
        query, key, value, sparse_indices, d_out, out, softmax_max, softmax_sum, scale_value,
        sparse_block_size, *args, **kwargs)


def npu_sparse_attention_score(query: Any, key: Any, value: Any, select_idx: Any,
                               block_table: Any, **kwargs: Any) -> Any:
    """vllm-ascend's ``npu_sparse_attention_score``: like the query (float16 for a float8
    one); not differentiable."""
    return torch.ops.npu.npu_sparse_attention_score(query, key, value, select_idx,
                                                    block_table, **kwargs)
