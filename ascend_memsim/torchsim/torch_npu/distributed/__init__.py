"""The stand-in ``torch_npu.distributed``: HCCL is the backend of a distributed estimate
(:mod:`ascend_memsim.torchsim.ranks.hccl`), and torch_npu's own collectives with per-rank sizes.

The uneven collectives (``torch_npu/distributed/distributed_c10d.py`` for the Python checks;
``ProcessGroupHCCL::_allgather_base_uneven`` / ``_reduce_scatter_base_uneven`` in
``torch_npu/csrc/distributed/ProcessGroupHCCL.cpp`` for the rest):

- ``all_gather_into_tensor_uneven(output, input, output_split_sizes=None, group=None,
  async_op=False)``: rank ``i``'s ``input`` lands in ``output``'s rows
  ``[sum(splits[:i]), sum(splits[:i+1]))`` (HcclAllGatherV);
- ``reduce_scatter_tensor_uneven(output, input, input_split_sizes=None, op=SUM, group=None,
  async_op=False)``: the rows of ``input`` reduced over the ranks, rank ``i`` receiving its
  ``splits[i]`` rows in ``output`` (HcclReduceScatterV);
- ``all_to_all_vc(output, input, send_count_matrix, group=None, async_op=False)``: rank
  ``i`` sends ``send_count_matrix[i][j]`` elements to rank ``j`` (HcclAlltoAllVC); every
  rank passes the same square matrix.

Each writes into tensors the caller made, so what it costs on the device is the group's
HCCL communicator on its first use
(:meth:`~ascend_memsim.torchsim.ranks.distributed.World.use_group`), and for ``op=AVG`` the
in-place division of the output by the group's size (``PREMUL_SUM``: the in-place scaling of
the input), as ``ProcessGroupHCCL`` runs them. The split sizes are
checked as torch_npu checks them (empty: ``dim 0`` must divide equally; else one size per
rank, summing to ``dim 0``); the fake process group moves no data.

DECISION: ``all_to_all_vc``'s documented rules on the buffers ("total numel must equal the
sum of this rank's sending row" / "receiving column", "in-place not supported") are checked
here (the HCCL binding that enforces them is not in the sources read), with a RuntimeError
as torch_npu's checks raise. What HCCL does with an all-gather whose input differs from this
rank's split is not in the sources: it is not checked.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

from .._missing import not_modelled

__all__ = ["is_hccl_available", "reinit_process_group", "reduce_scatter_tensor_uneven",
           "all_gather_into_tensor_uneven", "all_to_all_vc"]

__getattr__ = not_modelled("torch_npu.distributed")


def is_hccl_available() -> bool:
    return True


def reinit_process_group(group: Any = None, rebuild_link: bool = True) -> Any:
    """Rebuilds HCCL's links after a device fault: nothing to rebuild on a fake group."""
    return group


# -- the uneven collectives ------------------------------------------------------------------

def _group(group: Any, name: str, output: Any, input: Any) -> Any:
    """The process group to run on (None: the default group), or None when this rank is not
    in ``group`` or a tensor is not on the NPU (torch_npu warns and does nothing)."""
    import torch.distributed.distributed_c10d as c10d

    if c10d._rank_not_in_group(group):
        c10d._warn_not_in_group(name)
        return None
    for t in (output, input):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected tensors, got {type(t).__name__}")
    if output.device.type != "npu" or input.device.type != "npu":
        warnings.warn("Support for Tensors is limited to those of type npu", stacklevel=3)
        return None
    if group is None or group is c10d.GroupMember.WORLD:
        group = c10d._get_default_group()
    return group


def _use(group: Any) -> None:
    """The group's HCCL communicator, on its first use (``group._get_backend(npu)`` first:
    a group without an HCCL backend fails there, as in torch_npu)."""
    from ...ranks.distributed import current_world

    world = current_world()
    if world is None or group.group_name not in world.groups:
        raise RuntimeError("No backend type associated with device type npu")
    world.use_group(group)


def _check_buffers(output: torch.Tensor, input: torch.Tensor) -> None:
    """``check_npu_single_tensor`` for each, and one dtype (ProcessGroupHCCL.cpp)."""
    for t in (output, input):
        if t.is_sparse:
            raise RuntimeError("Tensors must be NPU and dense")
        if not t.is_contiguous(memory_format=torch.contiguous_format) and \
                not t.is_contiguous(memory_format=torch.channels_last):
            raise RuntimeError("Tensors must be contiguous")
    if input.dtype != output.dtype:
        raise RuntimeError("output tensor must have the same type as input tensor")


def _splits(split_sizes: Any, tensor: torch.Tensor, size: int) -> list[int]:
    """``fill_equal_split_sizes_when_empty`` then ``check_split_sizes``: one size per rank,
    summing to ``tensor``'s dim 0. O(size)."""
    rows = int(tensor.size(0)) if tensor.dim() else 1
    if not split_sizes:
        if size <= 0:
            raise RuntimeError(f"Invalid group size within current process group {size}")
        if rows % size:
            raise RuntimeError("Tensor's dim 0 does not divide equally across group size")
        return [rows // size] * size
    splits = list(split_sizes)
    if any(isinstance(s, bool) or not isinstance(s, int) for s in splits):
        raise TypeError("split sizes must be ints")
    if len(splits) != size:
        raise RuntimeError("Number of tensor splits not equal to group size")
    if sum(splits) != rows:
        raise RuntimeError("Split sizes doesn't match total dim 0 size")
    return splits


def _done(output: torch.Tensor, async_op: bool) -> Any:
    """What the call returns: None, or (``async_op``) a work whose future holds ``output``."""
    if not async_op:
        return None
    from torch._C._distributed_c10d import _create_work_from_future

    future: torch.futures.Future = torch.futures.Future()
    future.set_result([output])
    return _create_work_from_future(future)


def all_gather_into_tensor_uneven(output: torch.Tensor, input: torch.Tensor,
                                  output_split_sizes: Any = None, group: Any = None,
                                  async_op: bool = False) -> Any:
    """Gather each rank's ``input`` into ``output``, rank ``i`` into its
    ``output_split_sizes[i]`` rows (equal rows when None); None, or a work (``async_op``).

    Raises:
        RuntimeError: the dtypes differ, a tensor is not contiguous, the split sizes do not
            fit ``output`` or the group, or the group has no HCCL backend.
        ValueError: no process group has been made.
    """
    pg = _group(group, "all_gather_into_tensor_uneven", output, input)
    if pg is None:
        return None
    _check_buffers(output, input)
    _splits(output_split_sizes, output, pg.size())
    _use(pg)
    return _done(output, async_op)


def reduce_scatter_tensor_uneven(output: torch.Tensor, input: torch.Tensor,
                                 input_split_sizes: Any = None, op: Any = None,
                                 group: Any = None, async_op: bool = False) -> Any:
    """Reduce ``input`` over the ranks and give rank ``i`` its ``input_split_sizes[i]`` rows
    in ``output`` (``op``: a ``ReduceOp``, SUM when None); None, or a work (``async_op``).

    Raises:
        RuntimeError: as :func:`all_gather_into_tensor_uneven`, for ``input``'s splits.
        ValueError: no process group has been made.
    """
    import torch.distributed as dist

    op = dist.ReduceOp.SUM if op is None else op
    pg = _group(group, "reduce_scatter_tensor_uneven", output, input)
    if pg is None:
        return None
    _check_buffers(output, input)
    _splits(input_split_sizes, input, pg.size())
    _use(pg)
    if op == dist.ReduceOp.PREMUL_SUM:
        # ProcessGroupHCCL's pre-processing: the input scaled in place on the HCCL stream
        input.mul_(1.0)
    elif op == dist.ReduceOp.AVG:
        # and its post-processing: the output divided in place by the group's size
        output.div_(pg.size())
    return _done(output, async_op)


def all_to_all_vc(output: torch.Tensor, input: torch.Tensor, send_count_matrix: Any,
                  group: Any = None, async_op: bool = False) -> Any:
    """Send ``send_count_matrix[me][j]`` elements of ``input`` to each rank ``j`` and receive
    ``send_count_matrix[i][me]`` from each rank ``i`` into ``output``, each laid out by rank
    in order; None, or a work (``async_op``). O(ranks^2) for the matrix.

    Raises:
        ValueError: the matrix is not square over the group's ranks (torch_npu's check).
        RuntimeError: ``input`` does not hold this rank's row, ``output`` its column, or the
            two share a storage.
    """
    pg = _group(group, "all_to_all_vc", output, input)
    if pg is None:
        return None
    import torch.distributed as dist

    size = dist.get_world_size(pg)
    if len(send_count_matrix) != size:
        raise ValueError(f"send_count_matrix must have {size} rows (group size), "
                         f"got {len(send_count_matrix)}")
    for row in send_count_matrix:
        if len(row) != size:
            raise ValueError(f"send_count_matrix must be a square [{size}][{size}] matrix; "
                             f"got a row of length {len(row)}")
    counts = [[int(v) for v in row] for row in send_count_matrix]
    if any(v < 0 for row in counts for v in row):
        raise ValueError("send_count_matrix holds element counts: none may be negative")
    me = pg.rank()
    sends, receives = sum(counts[me]), sum(row[me] for row in counts)
    if input.numel() != sends:
        raise RuntimeError(f"all_to_all_vc: input has {input.numel()} elements, this rank "
                           f"sends {sends} (the sum of its row of send_count_matrix)")
    if output.numel() != receives:
        raise RuntimeError(f"all_to_all_vc: output has {output.numel()} elements, this rank "
                           f"receives {receives} (the sum of its column of send_count_matrix)")
    if output.untyped_storage()._cdata == input.untyped_storage()._cdata:
        raise RuntimeError("all_to_all_vc: output must not share the memory of input "
                           "(in-place is not supported by HCCL)")
    _use(pg)
    return _done(output, async_op)
