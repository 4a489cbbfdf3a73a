"""torch_npu's mixture-of-experts operators on the fake NPU: token permute and unpermute
(with their gradients), the routing (``npu_moe_init_routing``, ``_v2``,
``npu_moe_gating_top_k_softmax``, ``npu_moe_finalize_routing``,
``npu_moe_compute_expert_tokens``) and ``npu_grouped_matmul``.

Schemas: ``op_plugin/config/op_plugin_functions.yaml`` (Ascend/op-plugin at 517f2e7d).
Outputs, from the kernels (``op_plugin/ops/opapi/*.cpp``, ``gen_opapi`` entries,
``op_plugin/utils/KernelNpuOutputSize.cpp``):

- ``npu_moe_token_permute(tokens (T, H), indices (T,) or (T, K), num_out_tokens)``:
  ``permuted_tokens`` (n, H) in ``tokens``' dtype, n = min(num_out_tokens, T*K) when
  num_out_tokens > 0, else T*K + num_out_tokens (``npu_moe_token_permute_out_size``);
  ``sorted_indices`` int32 (T*K,); its gradient ``npu_moe_token_permute_grad_v2``:
  (tokens_size_0, H) in ``tokens_dtype``;
- ``npu_moe_token_unpermute(permuted (n, H), sorted_indices (T*K,), probs (T, K))``:
  (T*K / K, H) in ``permuted``'s dtype, K = probs.size(1) or 1
  (``npu_moe_token_unpermute_out_size``); its gradient ``npu_moe_token_unpermute_grad_v2``:
  (permuted_tokens_size_0, H) in that dtype, and ``grad_probs`` like ``probs``, or a 0-d
  tensor without probs (``npu_moe_token_unpermute_grad_v2_probs_out_size`` gives ``{}``);
- ``npu_moe_init_routing(x (N, H), row_idx (N, K), expert_idx (N, K), active_num)``:
  expanded_x (min(N, active_num)*K, H), expanded_row_idx and expanded_expert_idx (N*K,)
  like the indices (``MoeInitRoutingKernelNpuOpApi.cpp``);
- ``npu_moe_init_routing_v2`` (``MoeInitRoutingV2KernelNpuOpApi.cpp``, the
  ``aclnnMoeInitRoutingV3`` path of a current CANN): expanded_x (rows, H), rows = N*K, or
  min(active_num, N*K) when active_num > 0, or (expert_num, expert_capacity, H) with
  drop_pad_mode 1, in x's dtype (quant_mode -1) or int8 (0, 1); expanded_row_idx int32
  (N*K,); the expert token counts int64 (range,) for expert_tokens_num_type 0 and 1 and
  (expert_num, 2) for 2, allocated whatever ``expert_tokens_num_flag`` says (torch_npu's
  meta registration says () without the flag; the kernel is followed); expanded_scale
  float32 (rows,) or (expert_num*expert_capacity,). The other quant modes (MX, FP8, HiF8,
  int4) are not modelled: they raise;
- ``npu_moe_gating_top_k_softmax(x (..., E), k)``: y (..., k) in x's dtype, expert_idx and
  row_idx int32 (..., k) (``MoeGatingTopKSoftmaxKernelNpuOpApi.cpp``);
- ``npu_moe_finalize_routing(rows, ..., scales, expanded_src_to_dst_row, ..., k)``:
  (scales.size(0) or expanded_src_to_dst_row.size(0) / k, H) in ``rows``' dtype, H the last
  axis of ``rows`` (2-D, or (E, C, H) with drop/pad) (``MoeFinalizeRoutingV2KernelNpuOpApi.cpp``,
  the V2/V4 kernels; without them it is like ``skip1``);
- ``npu_moe_compute_expert_tokens(sorted_experts, num_expert)``: (num_expert,) in the input's
  dtype (``gen_opapi``);
- ``npu_grouped_matmul(x, weight, ...)`` (``GroupedMatmulKernelNpuOpApi.cpp``; a single 3-D
  weight (E, K, N) counts E weights): with ``split_item`` 0/1, one tensor per x (its shape
  with the last axis N_i), or per group when ``group_list`` is given (rows from the
  group_list's values: a ``List`` of ints is read, a tensor's values are data the fake
  tensors do not have, so the estimate stops there), or per weight (x.size(0), N_i) with
  ``group_type`` 2 (K split); with ``split_item`` 2/3, one tensor (sum of x's rows, N), or
  (len(group_list), M, N) with ``group_type`` 2. N is 8 x the weight's last axis for an
  int32 (packed int4) weight; the output dtype is ``output_dtype`` or x's. The tensor
  overload requires ``group_type`` (the kernel's check). The float4 and float32-packed
  weights are not modelled (their N is the weight's).

Autograd (``derivatives.yaml``): ``npu_moe_token_permute``: ``tokens:
npu_moe_token_permute_grad_v2(grad, result1, tokens.sym_size(0), tokens.scalar_type(), topK,
padded_mode)``: the graph keeps ``sorted_indices`` (result1). ``npu_moe_token_unpermute``
reaches autograd through ``_npu_moe_token_unpermute`` (its ``AutogradPrivateUse1``
dispatch): ``permuted_tokens, probs: npu_moe_token_unpermute_grad_v2(grad, sorted_indices,
..., probs, padded_mode, restore_shape, permuted_tokens_for_backward)``: the graph keeps
``sorted_indices``, ``probs``, and ``permuted_tokens`` only when ``probs`` is given, the CANN
is older than 9.1.0 or the SoC is Ascend950 (``MoeTokenUnpermuteKernelNpuOpApi.cpp``,
``need_save_permuted_tokens``; the estimate's CANN and product). ``npu_grouped_matmul`` has
no derivative in op-plugin, and none here: its callers (MindSpeed's
``grouped_matmul_util.py``) write their own backward around it. The routing operators have
none either.

Workspace (``workspace_table.py``, hicann/ops-transformer): 16 MiB for
``npu_moe_token_unpermute`` and the two gradients (``GetLibApiWorkSpaceSize``,
``moe_token_unpermute_tiling.cpp``, ``moe_token_unpermute_grad_tiling.cpp``,
``moe_token_permute_grad_tiling.cpp``), ``npu_moe_finalize_routing`` (``WORKSPACE_RESERVED``,
``moe_finalize_routing_v2_tiling.cpp``) and ``npu_grouped_matmul`` (``SYS_WORKSPACE_SIZE``,
``grouped_matmul_tiling.cpp``; ESTIMATE: the quantised templates' extra is not added); 0 for
``npu_moe_gating_top_k_softmax`` (its tilings set 0); 16 MiB + num_expert * cores * 4 for
``npu_moe_compute_expert_tokens`` (``moe_compute_expert_tokens_tiling.cpp``; ESTIMATE: 48
cores). ESTIMATE: ``npu_moe_token_permute`` and the two init routings (a sort workspace
that depends on the sizes) are left to the table's default.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._subclasses.fake_tensor import DataDependentOutputException

from ._common import cann, define, dtype_of, product

__all__ = ["register", "npu_moe_token_permute", "npu_moe_token_permute_grad_v2",
           "npu_moe_token_unpermute", "npu_moe_token_unpermute_grad_v2",
           "npu_moe_init_routing", "npu_moe_init_routing_v2", "npu_moe_gating_top_k_softmax",
           "npu_moe_finalize_routing", "npu_moe_compute_expert_tokens", "npu_grouped_matmul"]

_GMM_ARGS = ("*, Tensor[]? bias=None, Tensor[]? scale=None, Tensor[]? offset=None, "
             "Tensor[]? antiquant_scale=None, Tensor[]? antiquant_offset=None, "
             "Tensor[]? per_token_scale=None, {group_list}, Tensor[]? activation_input=None, "
             "Tensor[]? activation_quant_scale=None, Tensor[]? activation_quant_offset=None, "
             "int? split_item=0, int? group_type=None, int? group_list_type=0, "
             "int? act_type=0, ")
_SCHEMAS = (
    "npu_moe_token_permute(Tensor tokens, Tensor indices, int? num_out_tokens=None, "
    "bool padded_mode=False) -> (Tensor, Tensor)",
    "npu_moe_token_permute_grad_v2(Tensor grad_permuted_tokens, Tensor sorted_indices, "
    "int tokens_size_0, ScalarType tokens_dtype, int num_topK, bool padded_mode=False) "
    "-> Tensor",
    "npu_moe_token_unpermute(Tensor permuted_tokens, Tensor sorted_indices, "
    "Tensor? probs=None, bool padded_mode=False, int[]? restore_shape=None) -> Tensor",
    "npu_moe_token_unpermute_grad_v2(Tensor grad_unpermuted_tokens, Tensor sorted_indices, "
    "int permuted_tokens_size_0, ScalarType permuted_tokens_dtype, Tensor? probs=None, "
    "bool padded_mode=False, int[]? restore_shape=None, Tensor? permuted_tokens=None) "
    "-> (Tensor, Tensor)",
    "npu_moe_init_routing(Tensor x, Tensor row_idx, Tensor expert_idx, int active_num) "
    "-> (Tensor, Tensor, Tensor)",
    "npu_moe_init_routing_v2(Tensor x, Tensor expert_idx, *, Tensor? scale=None, "
    "Tensor? offset=None, int active_num=-1, int expert_capacity=-1, int expert_num=-1, "
    "int drop_pad_mode=0, int expert_tokens_num_type=0, bool expert_tokens_num_flag=False, "
    "int quant_mode=-1, int[2] active_expert_range=[], int row_idx_type=0, "
    "int? x_dtype=None) -> (Tensor, Tensor, Tensor, Tensor)",
    "npu_moe_gating_top_k_softmax(Tensor x, Tensor? finished=None, int k=1) "
    "-> (Tensor, Tensor, Tensor)",
    "npu_moe_finalize_routing(Tensor expanded_permuted_rows, Tensor? skip1, Tensor? skip2, "
    "Tensor? bias, Tensor? scales, Tensor expanded_src_to_dst_row, "
    "Tensor? export_for_source_row, int? drop_pad_mode=0, int? k=1) -> Tensor",
    "npu_moe_compute_expert_tokens(Tensor sorted_expert_for_source_row, int num_expert) "
    "-> Tensor",
    "npu_grouped_matmul(Tensor[] x, Tensor[] weight, "
    + _GMM_ARGS.format(group_list="Tensor? group_list=None")
    + "int[]? tuning_config=None, int? output_dtype=None, int? x_dtype=None, "
      "int? weight_dtype=None, int? scale_dtype=None, int? per_token_scale_dtype=None) "
      "-> Tensor[]",
    "npu_grouped_matmul.List(Tensor[] x, Tensor[] weight, "
    + _GMM_ARGS.format(group_list="int[]? group_list=None")
    + "ScalarType? output_dtype=None) -> Tensor[]",
)


# -- token permute and unpermute ---------------------------------------------------------

def _permute_fake(tokens, indices, num_out_tokens=None, padded_mode=False):
    if tokens.dim() != 2:
        raise RuntimeError(f"The dims of input tokens should be 2 dimensional, but got "
                           f"{tokens.dim()}-dimensional.")
    flat = indices.numel()
    wanted = num_out_tokens or 0
    rows = min(wanted, flat) if wanted > 0 else wanted + flat
    return (tokens.new_empty((rows, tokens.shape[1])),
            tokens.new_empty((flat,), dtype=torch.int32))


def _permute_grad_fake(grad, sorted_indices, tokens_size_0, tokens_dtype, num_topk,
                       padded_mode=False):
    return grad.new_empty((tokens_size_0, grad.shape[1]), dtype=tokens_dtype)


def _unpermute_fake(permuted, sorted_indices, probs=None, padded_mode=False,
                    restore_shape=None):
    topk = probs.shape[1] if probs is not None else 1
    return permuted.new_empty((sorted_indices.shape[0] // topk, permuted.shape[-1]))


def _unpermute_grad_fake(grad, sorted_indices, size_0, dtype, probs=None, padded_mode=False,
                         restore_shape=None, permuted_tokens=None):
    grad_probs = (torch.empty_like(probs) if probs is not None
                  else grad.new_empty(()))
    return grad.new_empty((size_0, grad.shape[1]), dtype=dtype), grad_probs


def _setup_permute(ctx: Any, inputs: tuple, output: tuple) -> None:
    tokens, indices, _num_out, padded_mode = inputs
    _permuted, sorted_indices = output
    # derivatives.yaml: keeps result1 and tokens' size(0), dtype, and topK
    ctx.save_for_backward(sorted_indices)
    ctx.args = (tokens.shape[0], tokens.dtype, 1 if indices.dim() == 1 else indices.shape[-1],
                padded_mode)
    ctx.set_materialize_grads(False)


def _permute_grad(ctx: Any, grad: Any, _grad_indices: Any) -> tuple:
    if grad is None:
        return None, None, None, None
    (sorted_indices,) = ctx.saved_tensors
    size_0, dtype, topk, padded_mode = ctx.args
    return (torch.ops.npu.npu_moe_token_permute_grad_v2(grad, sorted_indices, size_0, dtype,
                                                         topk, padded_mode),
            None, None, None)


def _keeps_permuted_tokens(probs: Any) -> bool:
    """MoeTokenUnpermuteKernelNpuOpApi.cpp's need_save_permuted_tokens: probs given, a CANN
    older than 9.1.0, or Ascend950."""
    return probs is not None or cann() < (9, 1, 0) or product().startswith("950")


def _setup_unpermute(ctx: Any, inputs: tuple, output: Any) -> None:
    permuted, sorted_indices, probs, padded_mode, restore_shape = inputs
    kept = permuted if _keeps_permuted_tokens(probs) else None
    ctx.save_for_backward(sorted_indices, probs, kept)
    ctx.args = (permuted.shape[0], permuted.dtype, padded_mode, restore_shape)


def _unpermute_grad(ctx: Any, grad: Any) -> tuple:
    sorted_indices, probs, kept = ctx.saved_tensors
    size_0, dtype, padded_mode, restore_shape = ctx.args
    grad_permuted, grad_probs = torch.ops.npu.npu_moe_token_unpermute_grad_v2(
        grad, sorted_indices, size_0, dtype, probs, padded_mode, restore_shape, kept)
    return grad_permuted, None, grad_probs if probs is not None else None, None, None


# -- routing -----------------------------------------------------------------------------

def _init_routing_fake(x, row_idx, expert_idx, active_num):
    n, k = x.shape[0], expert_idx.shape[1]
    active = min(n, active_num)
    return (x.new_empty((active * k, x.shape[1])), row_idx.new_empty((n * k,)),
            expert_idx.new_empty((n * k,)))


def _init_routing_v2_fake(x, expert_idx, *, scale=None, offset=None, active_num=-1,
                          expert_capacity=-1, expert_num=-1, drop_pad_mode=0,
                          expert_tokens_num_type=0, expert_tokens_num_flag=False,
                          quant_mode=-1, active_expert_range=(), row_idx_type=0,
                          x_dtype=None):
    if quant_mode not in (-1, 0, 1):
        raise RuntimeError(f"npu_moe_init_routing_v2: quant_mode {quant_mode} is not modelled "
                           f"by ascend-memsim (-1, 0 and 1 are)")
    if x.dim() != 2 or expert_idx.dim() != 2:
        raise RuntimeError("The x and the expert_idx should be 2-Dimension.")
    bs, h, k = x.shape[0], x.shape[1], expert_idx.shape[1]
    dtype = x.dtype if quant_mode == -1 else torch.int8
    if drop_pad_mode == 1:
        expanded_x = x.new_empty((expert_num, expert_capacity, h), dtype=dtype)
        scale_rows = expert_num * expert_capacity
    else:
        scale_rows = bs * k if active_num <= 0 else min(active_num, bs * k)
        expanded_x = x.new_empty((scale_rows, h), dtype=dtype)
    low, high = active_expert_range if len(active_expert_range) == 2 else (0, expert_num)
    counts = ((high - low,) if expert_tokens_num_type < 2 else (expert_num, 2))
    return (expanded_x, x.new_empty((bs * k,), dtype=torch.int32),
            x.new_empty(counts, dtype=torch.int64),
            x.new_empty((scale_rows,), dtype=torch.float32))


def _gating_fake(x, finished=None, k=1):
    if x.dim() not in (2, 3):
        raise RuntimeError("The x should be 2D or 3D")
    shape = (*x.shape[:-1], k)
    return (x.new_empty(shape), x.new_empty(shape, dtype=torch.int32),
            x.new_empty(shape, dtype=torch.int32))


def _finalize_fake(rows, skip1, skip2, bias, scales, src_to_dst, expert_for_row,
                   drop_pad_mode=0, k=1):
    k = 1 if k is None else k
    dim0 = src_to_dst.shape[0]
    if scales is not None:
        dim0 = scales.shape[0]
    elif k > 0:
        dim0 //= k
    return rows.new_empty((dim0, rows.shape[2 if rows.dim() == 3 else 1]))


def _expert_tokens_fake(sorted_experts, num_expert):
    return sorted_experts.new_empty((num_expert,))


# -- grouped matmul ----------------------------------------------------------------------

def _n_of(weight: Any) -> int:
    """N of a weight: its last axis, 8 per int32 (packed int4) element."""
    n = int(weight.shape[-1])
    return n * 8 if weight.dtype == torch.int32 else n


def _check_dims(split_item: int, num_x: int, num_weight: int, num_groups: int) -> None:
    """GroupedMatmulKernelNpuOpApi.cpp ``check_dims``, its messages."""
    if num_x == 0 or num_weight == 0:
        raise RuntimeError("Invalid inputs: neither x nor weight could be empty.")
    if split_item not in (0, 1, 2, 3):
        raise RuntimeError(f"Invalid value of split_item [{split_item}], which should only "
                           f"be one of 0/1/2/3.")
    if split_item in (0, 1):
        if num_groups and not (num_x == 1 and num_weight == num_groups):
            raise RuntimeError(
                f"Invalid inputs. When split_item = 0 or 1 and input group_list is not None, "
                f"length of x must be 1 and length of weight that of group_list. Actual "
                f"lengths: x [{num_x}], weight [{num_weight}], group_list [{num_groups}].")
        if not num_groups and num_x != num_weight:
            raise RuntimeError(f"When split_item = 0 or 1 and input group_list is None, the "
                               f"num of x tensors must equal the num of weight tensors.Actual "
                               f"lengths: x [{num_x}], weight [{num_weight}].")


def _gmm_fake(x, weight, *, group_list=None, split_item=0, group_type=None,
              output_dtype=None, **_options):
    split_item = 0 if split_item is None else split_item
    listed = isinstance(group_list, (list, tuple))
    if not listed and group_type is None:
        raise RuntimeError("Requires manual passing group_type, current is None.")
    single = len(weight) == 1 and weight[0].dim() == 3
    num_weight = weight[0].shape[0] if single else len(weight)
    num_groups = (len(group_list) if listed
                  else group_list.shape[0] if group_list is not None else 0)
    _check_dims(split_item, len(x), num_weight, num_groups)
    dtype = dtype_of(output_dtype, x[0].dtype)
    n0 = _n_of(weight[0])

    def n_at(i: int) -> int:
        return n0 if single else _n_of(weight[i])

    if split_item in (0, 1):
        if group_type == 2:
            return [x[0].new_empty((x[0].shape[0], n_at(i)), dtype=dtype)
                    for i in range(num_weight)]
        if num_groups:
            if not listed:
                # the kernel reads group_list's values (.item()) for the rows
                raise DataDependentOutputException(torch.ops.npu.npu_grouped_matmul.default)
            bounds = [0, *group_list]
            return [x[0].new_empty((bounds[i + 1] - bounds[i], n_at(i)), dtype=dtype)
                    for i in range(num_groups)]
        return [xi.new_empty((*xi.shape[:-1], n_at(i)), dtype=dtype) for i, xi in enumerate(x)]
    rows = sum(int(xi.shape[0]) for xi in x)
    if len(x) == 1 and group_type == 2:
        return [x[0].new_empty((num_groups, x[0].shape[0], n0), dtype=dtype)]
    return [x[0].new_empty((rows, n0), dtype=dtype)]


def register(lib: Any) -> None:
    """Define the family's operators in ``lib`` (the ``npu`` namespace), their fake kernels
    and autograd."""
    define(lib, _SCHEMAS, {
        "npu_moe_token_permute": _permute_fake,
        "npu_moe_token_permute_grad_v2": _permute_grad_fake,
        "npu_moe_token_unpermute": _unpermute_fake,
        "npu_moe_token_unpermute_grad_v2": _unpermute_grad_fake,
        "npu_moe_init_routing": _init_routing_fake,
        "npu_moe_init_routing_v2": _init_routing_v2_fake,
        "npu_moe_gating_top_k_softmax": _gating_fake,
        "npu_moe_finalize_routing": _finalize_fake,
        "npu_moe_compute_expert_tokens": _expert_tokens_fake,
        "npu_grouped_matmul": _gmm_fake,
        "npu_grouped_matmul.List": _gmm_fake,
    }, {
        "npu_moe_token_permute": (_permute_grad, _setup_permute),
        "npu_moe_token_unpermute": (_unpermute_grad, _setup_unpermute),
    })


def npu_moe_token_permute(tokens: Any, indices: Any, num_out_tokens: Any = None,
                          padded_mode: bool = False) -> tuple:
    """``torch_npu.npu_moe_token_permute``: (permuted_tokens, sorted_indices int32)."""
    return torch.ops.npu.npu_moe_token_permute(tokens, indices, num_out_tokens, padded_mode)


def npu_moe_token_permute_grad_v2(grad_permuted_tokens: Any, sorted_indices: Any,
                                  tokens_size_0: int, tokens_dtype: Any, num_topK: int,
                                  padded_mode: bool = False) -> Any:
    """``torch_npu.npu_moe_token_permute_grad_v2``: (tokens_size_0, H) in tokens_dtype."""
    return torch.ops.npu.npu_moe_token_permute_grad_v2(
        grad_permuted_tokens, sorted_indices, tokens_size_0, tokens_dtype, num_topK,
        padded_mode)


def npu_moe_token_unpermute(permuted_tokens: Any, sorted_indices: Any, probs: Any = None,
                            padded_mode: bool = False, restore_shape: Any = None) -> Any:
    """``torch_npu.npu_moe_token_unpermute``: the tokens back in their order, weighted."""
    return torch.ops.npu.npu_moe_token_unpermute(permuted_tokens, sorted_indices, probs,
                                                 padded_mode, restore_shape)


def npu_moe_token_unpermute_grad_v2(grad_unpermuted_tokens: Any, sorted_indices: Any,
                                    permuted_tokens_size_0: int, permuted_tokens_dtype: Any,
                                    probs: Any = None, padded_mode: bool = False,
                                    restore_shape: Any = None,
                                    permuted_tokens: Any = None) -> tuple:
    """``torch_npu.npu_moe_token_unpermute_grad_v2``: (grad_permuted_tokens, grad_probs)."""
    return torch.ops.npu.npu_moe_token_unpermute_grad_v2(
        grad_unpermuted_tokens, sorted_indices, permuted_tokens_size_0, permuted_tokens_dtype,
        probs, padded_mode, restore_shape, permuted_tokens)


def npu_moe_init_routing(x: Any, row_idx: Any, expert_idx: Any, active_num: int) -> tuple:
    """``torch_npu.npu_moe_init_routing``: (expanded_x, expanded_row_idx,
    expanded_expert_idx)."""
    return torch.ops.npu.npu_moe_init_routing(x, row_idx, expert_idx, active_num)


def npu_moe_init_routing_v2(x: Any, expert_idx: Any, **kwargs: Any) -> tuple:
    """``torch_npu.npu_moe_init_routing_v2``: (expanded_x, expanded_row_idx,
    expert_token_cumsum_or_count, expanded_scale)."""
    return torch.ops.npu.npu_moe_init_routing_v2(x, expert_idx, **kwargs)


def npu_moe_gating_top_k_softmax(x: Any, finished: Any = None, k: int = 1) -> tuple:
    """``torch_npu.npu_moe_gating_top_k_softmax``: (y, expert_idx, row_idx)."""
    return torch.ops.npu.npu_moe_gating_top_k_softmax(x, finished, k)


def npu_moe_finalize_routing(expanded_permuted_rows: Any, skip1: Any, skip2: Any, bias: Any,
                             scales: Any, expanded_src_to_dst_row: Any,
                             export_for_source_row: Any, drop_pad_mode: Any = 0,
                             k: Any = 1) -> Any:
    """``torch_npu.npu_moe_finalize_routing``: the experts' rows summed back per token."""
    return torch.ops.npu.npu_moe_finalize_routing(
        expanded_permuted_rows, skip1, skip2, bias, scales, expanded_src_to_dst_row,
        export_for_source_row, drop_pad_mode, k)


def npu_moe_compute_expert_tokens(sorted_expert_for_source_row: Any, num_expert: int) -> Any:
    """``torch_npu.npu_moe_compute_expert_tokens``: (num_expert,) token counts."""
    return torch.ops.npu.npu_moe_compute_expert_tokens(sorted_expert_for_source_row,
                                                       num_expert)


def npu_grouped_matmul(x: Any, weight: Any, **kwargs: Any) -> list:
    """``torch_npu.npu_grouped_matmul``: a list of tensors (see the module's docstring);
    not differentiable (op-plugin has no derivative for it)."""
    return torch.ops.npu.npu_grouped_matmul(x, weight, **kwargs)
