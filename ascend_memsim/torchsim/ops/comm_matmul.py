"""torch_npu's communication + matmul operators (MC2) on the fake NPU:
``npu_all_gather_base_mm``, ``npu_mm_reduce_scatter_base`` (tensor parallelism),
``npu_alltoallv_gmm`` and ``npu_gmm_alltoallv`` (expert parallelism).

Schemas: ``op_plugin/config/op_plugin_functions.yaml`` (Ascend/op-plugin at 517f2e7d).
Each takes the HCCL group's name (``hcom``, from
``group._get_backend(torch.device("npu")).get_hccl_comm_name(rank)``) and the group's size as
a plain int (``world_size``, ``ep_world_size``): the output shapes follow that argument, as
the kernels size them, so under ``ascend-memsim estimate --world-size N`` a script that passes
``dist.get_world_size(group)`` (the stand-in's world gives each rank the job's size, see
:mod:`..ranks.distributed`) gets the rows each rank would get. Outputs (the kernels,
``op_plugin/ops/opapi/*.cpp``, which the meta registrations in ``_meta_registrations.py``
follow):

- ``npu_all_gather_base_mm(x1 (M, K), x2 (K, N), hcom, world_size)``
  (``AllGatherBaseMatmulKernelNpuOpApi.cpp``): ``output`` (M * world_size, N), or (M, N)
  with ``gather_index`` 1; ``gather_out`` (the gathered x1, (M * world_size, K); x2's
  (K * world_size, N) with ``gather_index`` 1) when ``gather_output``, else an empty
  tensor. ``output``'s dtype is x1's, or with ``x2_scale`` float16 for an int64 scale and
  else ``output_dtype`` (bfloat16 by default); ``gather_out`` is in x1's dtype;
- ``npu_mm_reduce_scatter_base(x1 (M, K), x2 (K, N), hcom, world_size)``
  (``MatmulReduceScatterBaseKernelNpuOpApi.cpp``): (M / world_size, N), dtype as above;
- ``npu_alltoallv_gmm(gmm_x (BSK, H1), gmm_weight (e, H1, N1), hcom, ep_world_size,
  send_counts, recv_counts)`` (``AllToAllvGmmNpuOpApi.cpp``): ``gmm_y`` (A, N1), A =
  sum(recv_counts), N1 = gmm_weight.size(1) with ``trans_gmm_weight``; ``mm_y`` (BS, N2) of
  the shared expert (mm_x (BS, H2), mm_weight (H2, N2), or (N2, H2) with
  ``trans_mm_weight``) when both are given, else None; ``permute_out`` (A, H1) with
  ``permute_out_flag``, else None; all in their inputs' dtypes;
- ``npu_gmm_alltoallv(gmm_x (A, H1), gmm_weight (e, H1, N1), ...)``
  (``GmmAllToAllvNpuOpApi.cpp``): ``y`` (BSK, N1), BSK = sum(recv_counts), and ``mm_y``
  as above.

The kernels' checks are kept: ``world_size`` in 2, 4, 8, 16, 32, 2-D operands whose K axes
agree, M a multiple of ``world_size`` for the reduce-scatter, and no quantisation on the
``ai_cpu`` communication below Ascend 950. For the two expert-parallel operators
(Atlas A3 only, inference), their pages (``docs/zh/custom_APIs/torch_npu/
torch_npu-npu_alltoallv_gmm.md``, ``-npu_gmm_alltoallv.md``) give ``ep_world_size`` 8, 16,
32, 64 or 128, ``send_counts`` and ``recv_counts`` of e * ep_world_size entries (at most
256), and the rows of ``gmm_x`` their sender's sum; these are checked too (the kernels
leave them to the tiling, which refuses them).

Autograd: none of the four has a ``derivatives.yaml`` entry; their callers (MindSpeed's
``ascend_turbo``, the LoRA layers of MindSpeed-LLM) write their own backward around them.

HCCL: the operators use the group's communicator, which torch_npu makes when the script
asks for the group's name (``get_hccl_comm_name(rank, init_comm=True)``, the default, makes
it if it is not made yet: the ProcessGroupHCCL page of torch_npu's API reference); they
make none themselves. DECISION: ``hcom`` is not checked against the estimate's groups (any
string names a group); the shapes follow ``world_size`` alone, as the kernels' do.

Workspace (``workspace_table.py``): the A2
tilings (hicann/ops-transformer ``mc2/all_gather_matmul/op_host/op_tiling/
all_gather_matmul_tiling.cpp`` ``MC2SetWorkspace``, ``mc2/matmul_reduce_scatter/.../
matmul_reduce_scatter_tiling.cpp`` ``MC2SetWorkspaceReduceScatter``) ask 16 MiB + the
weight's ND-to-NZ copy (K and N aligned to 256 bytes of elements) + the gathered x1 when
``gather_output`` is False, or + the full (M, N) product for the reduce-scatter, + N
float32 for a bias; the A3 expert-parallel tilings (``allto_allv_grouped_mat_mul_tiling.cpp``,
``grouped_mat_mul_allto_allv_tiling.cpp``) 16 MiB + A * H1 * itemsize (twice without
``permute_out_flag``), and 16 MiB + A * N1 * 2.
"""

from __future__ import annotations

from typing import Any

import torch

from ._common import define, product

__all__ = ["register", "npu_all_gather_base_mm", "npu_mm_reduce_scatter_base",
           "npu_alltoallv_gmm", "npu_gmm_alltoallv"]

_EP = ("Tensor gmm_x, Tensor gmm_weight, str hcom, int ep_world_size, int[] send_counts, "
       "int[] recv_counts, *, Tensor? send_counts_tensor=None, Tensor? recv_counts_tensor=None, "
       "Tensor? mm_x=None, Tensor? mm_weight=None, bool trans_gmm_weight=False, "
       "bool trans_mm_weight=False, ")
_SCHEMAS = (
    "npu_all_gather_base_mm(Tensor self, Tensor x2, str hcom, int world_size, *, "
    "Tensor? bias=None, Tensor? x1_scale=None, Tensor? x2_scale=None, int gather_index=0, "
    "bool gather_output=True, int comm_turn=0, ScalarType? output_dtype=None, "
    "str? comm_mode=None) -> (Tensor, Tensor)",
    "npu_mm_reduce_scatter_base(Tensor self, Tensor x2, str hcom, int world_size, *, "
    "str reduce_op='sum', Tensor? bias=None, Tensor? x1_scale=None, Tensor? x2_scale=None, "
    "int comm_turn=0, ScalarType? output_dtype=None, str? comm_mode=None) -> Tensor",
    "npu_alltoallv_gmm(" + _EP + "bool permute_out_flag=False, str? comm_mode=None) "
    "-> (Tensor, Tensor, Tensor)",
    "npu_gmm_alltoallv(" + _EP + "str? comm_mode=None) -> (Tensor, Tensor)",
)
#: the kernels' TORCH_CHECK on world_size (AllGatherBaseMatmulKernelNpuOpApi.cpp,
#: MatmulReduceScatterBaseKernelNpuOpApi.cpp)
_TP_SIZES = (2, 4, 8, 16, 32)
#: ep_world_size on the operators' pages
_EP_SIZES = (8, 16, 32, 64, 128)
_MAX_COUNTS = 256


# -- tensor parallelism --------------------------------------------------------------------

def _check_mm(x1: Any, x2: Any, world_size: int) -> None:
    """The checks both TP kernels make first, with their messages."""
    if world_size not in _TP_SIZES:
        raise RuntimeError(f"world_size should be in [2, 4, 8, 16, 32], but the actual value "
                           f"is {world_size}.")
    if x1.dim() != 2 or x2.dim() != 2:
        raise RuntimeError(f"Both inputs of mm are required to be 2D, but the actual inputs "
                           f"are {x1.dim()}D and {x2.dim()}D.")
    if x1.shape[1] != x2.shape[0]:
        raise RuntimeError(f"The K-axis in the two inputs of Matmul must be equal, but in "
                           f"reality, the K-axis of x1 is {x1.shape[1]} and the K-axis of x2 "
                           f"is {x2.shape[0]}.")


def _mm_dtype(x1: Any, x2_scale: Any, output_dtype: Any, comm_mode: Any) -> torch.dtype:
    """The product's dtype: x1's, or for a quantised call float16 (an int64 x2_scale) or
    output_dtype (bfloat16 by default). Quantisation needs a comm_mode other than the
    default ai_cpu below Ascend 950 (the kernels' check)."""
    if x2_scale is None:
        return x1.dtype
    if comm_mode in (None, "ai_cpu") and not product().startswith("950"):
        raise RuntimeError("When comm_mode is ai_cpu, quantization not supported.")
    if x2_scale.dtype == torch.int64:
        return torch.float16
    return torch.bfloat16 if output_dtype is None else output_dtype


def _all_gather_mm_fake(x1, x2, hcom, world_size, *, bias=None, x1_scale=None, x2_scale=None,
                        gather_index=0, gather_output=True, comm_turn=0, output_dtype=None,
                        comm_mode=None):
    _check_mm(x1, x2, world_size)
    dtype = _mm_dtype(x1, x2_scale, output_dtype, comm_mode)
    rows = x1.shape[0] * world_size if gather_index == 0 else x1.shape[0]
    out = x1.new_empty((rows, x2.shape[1]), dtype=dtype)
    if not gather_output:
        return out, x1.new_empty((0,))
    gathered = x1 if gather_index == 0 else x2
    return out, x1.new_empty((gathered.shape[0] * world_size, gathered.shape[1]))


def _mm_reduce_scatter_fake(x1, x2, hcom, world_size, *, reduce_op="sum", bias=None,
                            x1_scale=None, x2_scale=None, comm_turn=0, output_dtype=None,
                            comm_mode=None):
    _check_mm(x1, x2, world_size)
    if x1.shape[0] % world_size:
        raise RuntimeError("The M-axis in input of Matmul should be be divisible by "
                           "world_size.")
    dtype = _mm_dtype(x1, x2_scale, output_dtype, comm_mode)
    return x1.new_empty((x1.shape[0] // world_size, x2.shape[1]), dtype=dtype)


# -- expert parallelism ----------------------------------------------------------------------

def _check_ep(name: str, gmm_x: Any, gmm_weight: Any, ep_world_size: int, send_counts: list,
              recv_counts: list, sent_rows: int) -> None:
    """The operators' documented constraints that decide the shapes (their pages)."""
    if ep_world_size not in _EP_SIZES:
        raise RuntimeError(f"{name}: ep_world_size should be 8, 16, 32, 64 or 128, but got "
                           f"{ep_world_size}")
    if gmm_x.dim() != 2 or gmm_weight.dim() != 3:
        raise RuntimeError(f"{name}: gmm_x must be 2-D and gmm_weight 3-D, but got "
                           f"{gmm_x.dim()}-D and {gmm_weight.dim()}-D")
    expected = gmm_weight.shape[0] * ep_world_size
    for label, counts in (("send_counts", send_counts), ("recv_counts", recv_counts)):
        if len(counts) != expected or len(counts) > _MAX_COUNTS:
            raise RuntimeError(f"{name}: {label} must hold e * ep_world_size = {expected} "
                               f"entries (at most {_MAX_COUNTS}), but holds {len(counts)}")
        if any(c < 0 for c in counts):
            raise RuntimeError(f"{name}: {label} must not be negative")
    if gmm_x.shape[0] != sent_rows:
        raise RuntimeError(f"{name}: gmm_x has {gmm_x.shape[0]} rows but the counts it sends "
                           f"sum to {sent_rows}")


def _shared_expert(mm_x: Any, mm_weight: Any, trans_mm_weight: bool) -> Any:
    """mm_y (BS, N2) when mm_x and mm_weight are both given, else None (the kernels'
    undefined tensor)."""
    if mm_x is None or mm_weight is None:
        return None
    n2 = mm_weight.shape[0] if trans_mm_weight else mm_weight.shape[1]
    return mm_x.new_empty((mm_x.shape[0], n2))


def _alltoallv_gmm_fake(gmm_x, gmm_weight, hcom, ep_world_size, send_counts, recv_counts, *,
                        send_counts_tensor=None, recv_counts_tensor=None, mm_x=None,
                        mm_weight=None, trans_gmm_weight=False, trans_mm_weight=False,
                        permute_out_flag=False, comm_mode=None):
    # the rows this rank sends are gmm_x's (BSK = sum of send_counts)
    _check_ep("npu_alltoallv_gmm", gmm_x, gmm_weight, ep_world_size, send_counts, recv_counts,
              sum(send_counts))
    received = sum(recv_counts)
    n1 = gmm_weight.shape[1] if trans_gmm_weight else gmm_weight.shape[2]
    permute_out = (gmm_x.new_empty((received, gmm_x.shape[1])) if permute_out_flag
                   else None)
    return (gmm_x.new_empty((received, n1)), _shared_expert(mm_x, mm_weight, trans_mm_weight),
            permute_out)


def _gmm_alltoallv_fake(gmm_x, gmm_weight, hcom, ep_world_size, send_counts, recv_counts, *,
                        send_counts_tensor=None, recv_counts_tensor=None, mm_x=None,
                        mm_weight=None, trans_gmm_weight=False, trans_mm_weight=False,
                        comm_mode=None):
    # gmm_x holds the A rows this rank computed and sends back (A = sum of send_counts)
    _check_ep("npu_gmm_alltoallv", gmm_x, gmm_weight, ep_world_size, send_counts, recv_counts,
              sum(send_counts))
    n1 = gmm_weight.shape[1] if trans_gmm_weight else gmm_weight.shape[2]
    return (gmm_x.new_empty((sum(recv_counts), n1)),
            _shared_expert(mm_x, mm_weight, trans_mm_weight))


def register(lib: Any) -> None:
    """Define the family's operators in ``lib`` (the ``npu`` namespace) and their fake
    kernels."""
    define(lib, _SCHEMAS, {
        "npu_all_gather_base_mm": _all_gather_mm_fake,
        "npu_mm_reduce_scatter_base": _mm_reduce_scatter_fake,
        "npu_alltoallv_gmm": _alltoallv_gmm_fake,
        "npu_gmm_alltoallv": _gmm_alltoallv_fake,
    })


def npu_all_gather_base_mm(self: Any, x2: Any, hcom: str, world_size: int,
                           **kwargs: Any) -> tuple:
    """``torch_npu.npu_all_gather_base_mm``: (allgather(x1) @ x2, the gathered x1 or an
    empty tensor); not differentiable."""
    return torch.ops.npu.npu_all_gather_base_mm(self, x2, hcom, world_size, **kwargs)


def npu_mm_reduce_scatter_base(self: Any, x2: Any, hcom: str, world_size: int,
                               **kwargs: Any) -> Any:
    """``torch_npu.npu_mm_reduce_scatter_base``: this rank's (M / world_size, N) share of
    x1 @ x2 summed over the group; not differentiable."""
    return torch.ops.npu.npu_mm_reduce_scatter_base(self, x2, hcom, world_size, **kwargs)


def npu_alltoallv_gmm(gmm_x: Any, gmm_weight: Any, hcom: str, ep_world_size: int,
                      send_counts: Any, recv_counts: Any, **kwargs: Any) -> tuple:
    """``torch_npu.npu_alltoallv_gmm``: (gmm_y, mm_y or None, permute_out or None)."""
    return torch.ops.npu.npu_alltoallv_gmm(gmm_x, gmm_weight, hcom, ep_world_size,
                                           send_counts, recv_counts, **kwargs)


def npu_gmm_alltoallv(gmm_x: Any, gmm_weight: Any, hcom: str, ep_world_size: int,
                      send_counts: Any, recv_counts: Any, **kwargs: Any) -> tuple:
    """``torch_npu.npu_gmm_alltoallv``: (y, mm_y or None)."""
    return torch.ops.npu.npu_gmm_alltoallv(gmm_x, gmm_weight, hcom, ep_world_size,
                                           send_counts, recv_counts, **kwargs)
