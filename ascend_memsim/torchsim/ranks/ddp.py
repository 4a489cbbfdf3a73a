"""``torch.nn.parallel.DistributedDataParallel`` on fake tensors: torch's own DDP and its C++
Reducer run, with the three steps that read tensor values replaced for the run.

What DDP holds on the device, and where torch says so (``torch/nn/parallel/distributed.py``):

- **Buckets**: the Reducer (``dist.Reducer``, ``reducer.cpp``) keeps, per bucket, one flat
  tensor on the parameters' device the size of its parameters' gradients; gradients are
  copied into it and it is all-reduced through the group's communicator (so the group's HCCL
  buffer is made at DDP's first collective). Buckets are at most ``bucket_cap_mb`` (25 MiB),
  the first ``dist._DEFAULT_FIRST_BUCKET_BYTES`` (1 MiB) when the default is kept
  (``_BucketCapacityConfig.create``), filled in the order gradients become ready, about the
  reverse of ``model.parameters()`` (the comment at ``dist.Reducer(...)`` in
  ``_ddp_init_helper``).
- ``gradient_as_bucket_view=False`` (the default): each ``param.grad`` is a tensor of its own
  and the bucket a copy, so gradients cost twice; ``True``: "gradients will be views pointing
  to different offsets of allreduce communication buckets" (the argument's docstring).
- ``broadcast_buffers`` / ``find_unused_parameters`` / ``no_sync()`` are torch's own code.

The buckets count as gradients in the estimate's summary (what DDP's constructor made and
keeps).

What this module changes while a distributed estimate runs (:func:`install`):

1. ``_verify_param_shape_across_processes`` (``torch/distributed/utils.py``) writes the
   parameters' shapes into a tensor and compares the ranks' copies; fake tensors have no
   values. DECISION: it is skipped (every rank runs the same script); the communicator it
   would make first is made by the broadcast of ``_sync_module_states`` just after.
2. The fake process group's work holds a future of None (``FakeWork::getFuture``), where the
   Reducer reads the all-reduced bucket back: see :func:`.distributed._with_tensors_future`.
3. The bucket rebuild after the first backward (``Reducer::rebuild_buckets``, called from
   ``DistributedDataParallel._pre_forward``) broadcasts the bucket indices from rank 0 in a
   CPU tensor and reads them back. DECISION: the rebuild is skipped and the Reducer is made
   at construction with the buckets the rebuild would make: the rebuild's size limits
   (``compute_bucket_size_limits`` gives them to the C++ Reducer for rebuilding: the first
   bucket's cap, then ``bucket_cap_mb``) over the parameters in reverse order (the order a
   model used as defined makes its gradients ready). Torch's first iteration uses one bucket
   of every gradient (``compute_bucket_size_limits``: ``[sys.maxsize]`` unless
   ``find_unused_parameters`` or ``static_graph``): the same bytes, in one block.
4. ``find_unused_parameters=True``: the Reducer keeps a pinned host map of the parameters
   used (``reducer.cpp`` asserts ``is_pinned()``, which a fake tensor is not) and reads it
   after the all-reduce. DECISION: DDP runs with it False, and the run notes it; the
   device memory is the same (the map is one int per parameter; every bucket is made at
   construction either way). A parameter left unused does not stop the run (the check that
   would, in ``Reducer::rebuild_buckets``, is skipped, 3.): its bucket is not all-reduced
   there, where torch all-reduces it with the unused gradient as zeros.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
import torch.distributed as dist

from ..categories import GRADS

__all__ = ["install"]


def _ready_order_assignment(assign: Any) -> Any:
    """``dist._compute_bucket_assignment_by_size`` over the parameters in reverse (the order
    their gradients become ready), returned last bucket first, as DDP reverses it back."""

    def assignment(tensors: list, limits: list, *args: Any, **kwargs: Any) -> tuple:
        n = len(tensors)
        order = list(reversed(range(n)))
        sparse = args[0] if args else kwargs.get("expect_sparse_gradient", [False] * n)
        buckets, caps = assign([tensors[i] for i in order], limits,
                               [sparse[i] for i in order], *args[1:])
        buckets = [[order[i] for i in bucket] for bucket in buckets]
        return list(reversed(buckets)), list(reversed(caps))

    return assignment


def _rebuild_limits(config: Any, static_graph: bool, find_unused_parameters: bool) -> tuple:
    """The limits the Reducer rebuilds its buckets with, for the first assignment too."""
    if config.has_custom_per_bucket_caps:
        limits = list(config.per_bucket_bytes_caps)
    elif config.first_bucket_bytes_cap < config.bucket_bytes_cap:
        limits = [config.first_bucket_bytes_cap, config.bucket_bytes_cap]
    else:
        limits = [config.bucket_bytes_cap]
    return limits, []


def _constructor(init: Any, session: Any) -> Any:
    """``DistributedDataParallel.__init__`` with ``find_unused_parameters`` False (4. above),
    its buckets counted as gradients."""
    signature = inspect.signature(init)

    def __init__(*args: Any, **kwargs: Any) -> None:
        bound = signature.bind(*args, **kwargs)
        if bound.arguments.get("find_unused_parameters"):
            bound.arguments["find_unused_parameters"] = False
            note = ("DistributedDataParallel's find_unused_parameters=True ran as False (the "
                    "same device memory)")
            if note not in session.notes:
                session.notes.append(note)
        before = session.live_storages()
        init(*bound.args, **bound.kwargs)
        # what the constructor made and keeps: the Reducer's buckets, gradients' copies
        session.classify_made_since(before, GRADS)

    return __init__


def install(patch: Any, session: Any) -> None:
    """Replace DDP's value-reading steps with ``patch(owner, name, value)`` (which keeps the
    old value to put back); notes go to ``session``."""
    import torch.nn.parallel.distributed as ddp

    patch(ddp, "_verify_param_shape_across_processes", lambda *args, **kwargs: None)
    patch(dist, "_compute_bucket_assignment_by_size",
          _ready_order_assignment(dist._compute_bucket_assignment_by_size))
    patch(ddp._BucketCapacityConfig, "compute_bucket_size_limits", _rebuild_limits)
    patch(torch._C._distributed_c10d.Reducer, "_rebuild_buckets", lambda self: False)
    parallel = ddp.DistributedDataParallel
    patch(parallel, "__init__", _constructor(parallel.__init__, session))
