"""``estimate_ranks()``: run a torch_npu training script as every rank of a distributed job,
one rank after another in this process, each on its own simulated device with its HCCL
communicators and the runtime's share; will it fit on every card?

Each rank runs as torchrun starts it: ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``LOCAL_WORLD_SIZE``, ``GROUP_RANK`` (the node), ``MASTER_ADDR`` / ``MASTER_PORT`` in the
environment, ``torch.distributed`` answered by a fake process group (:mod:`.distributed`).

DECISION: one simulated runtime per rank (a rank is a process of its own, and a
:class:`~ascend_memsim.runtime.runtime.Runtime` is one process's runtime), with the node's
``cards_per_node`` devices; the rank's tensors, communicators and runtime share are on device
``LOCAL_RANK``. Ranks run one after another and each gives everything back at its end, so
they never compete for a device; nodes are ``cards_per_node`` consecutive ranks.

DECISION: which ranks are traced. Up to ``TRACE_ALL_UP_TO`` (8) ranks, or with
``trace_all``, every rank. Above, rank 0 runs first and tells the job's layout (every group
the script makes, members or not: every rank makes every group); ranks are then alike when,
for each group smaller than the world they are in, in the order made, the group's size and
their place in it (first, middle, last, only) are the same; the lowest rank of each class is
traced and stands for it. First and last matter (a pipeline's first stage holds the
embedding and the most microbatches under 1F1B, the last the head); middle members of a
group are taken as alike, and the lowest (under Megatron's layout the earliest pipeline
stage, which holds the most in flight) stands for them.
"""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from ...memory.profiles import DEFAULT_PRODUCT, get_profile
from ..estimate import (
    EstimateResult,
    _collect_young,
    _environment,
    check_item_value,
    fill_result,
    run_target,
    workspace_table,
)
from ..limits import DEFAULT_ITEM_VALUE, EstimateStopped
from ..runtime_share import runtime_share as share_of
from ..session import Session
from ..stacks.process_state import forget as forget_process_state
from ..standin import install_torch_npu, uninstall_torch_npu
from .distributed import World
from .report import RankClass, RankFigures, RanksResult

__all__ = ["estimate_ranks", "TRACE_ALL_UP_TO", "MAX_WORLD_SIZE", "DEFAULT_CARDS_PER_NODE",
           "class_key"]

#: up to this many ranks every rank is traced
TRACE_ALL_UP_TO = 8
#: DECISION: the most ranks an estimate takes (2**20 cards): a world size past any cluster
#: built is refused before anything is made (each rank is given its class, O(world size))
MAX_WORLD_SIZE = 1 << 20
#: DECISION: cards per node when not given (an Atlas 800T A2 server holds 8 NPUs)
DEFAULT_CARDS_PER_NODE = 8


def class_key(rank: int, layout: list[tuple[int, ...]], world_size: int) -> tuple:
    """What makes ``rank`` alike to another: for each group smaller than the world that it
    is in, in the order made, the group's size and the rank's place (first, middle, last,
    only)."""
    key = []
    for ranks in layout:
        if len(ranks) >= world_size or rank not in ranks:
            continue
        at = ranks.index(rank)
        place = ("only" if len(ranks) == 1 else "first" if at == 0
                 else "last" if at == len(ranks) - 1 else "middle")
        key.append((len(ranks), place))
    return tuple(key)


@contextlib.contextmanager
def _rank_environment(values: dict[str, str]) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _run_rank(target: str | Callable[[], Any], argv: Sequence[str], rank: int,
              spec: dict) -> tuple[RankFigures, list]:
    """Run ``target`` as ``rank``; its figures and the job's layout it saw."""
    cards = spec["cards_per_node"]
    local = rank % cards
    table = workspace_table(spec["workspace"], spec["product"])
    session = Session(spec["product"], spec["capacity"], spec["alloc_conf"],
                      cann=spec["cann"], device=local, device_count=cards, workspace=table,
                      task_queue=spec["task_queue"], history=spec["history"],
                      item_value=spec["item_value"], torch_npu=spec["torch_npu"])
    table.product = session.product
    name = target if isinstance(target, str) else getattr(target, "__name__", repr(target))
    result = EstimateResult(str(name), session.product, session.capacity, session.alloc_conf)
    share, source = share_of(session.product, spec["runtime_share"])
    result.runtime_share, result.runtime_share_source = share, source
    env = {"RANK": str(rank), "WORLD_SIZE": str(spec["world_size"]),
           "LOCAL_RANK": str(local), "LOCAL_WORLD_SIZE": str(cards),
           "GROUP_RANK": str(rank // cards), "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": "29500", **spec["environ"]}
    world = World(session, rank, spec["world_size"])
    # FakeTensorMode's dispatch cache is the class's: an output made for "npu" (no index) on
    # the last rank's device would come back on that device
    FakeTensorMode.cache_clear()
    # each rank is a process of its own on the machine: no library state from the last one
    forget_process_state()
    previous = install_torch_npu()
    try:
        with _environment(), _rank_environment(env), _collect_young(), session:
            try:
                session.take_runtime_share(share)
                with world:
                    result.status = run_target(target, argv)
            except (torch.OutOfMemoryError, EstimateStopped):
                result.status = 1
            gc.collect()
        fill_result(result, session)
        if spec["history"]:
            result.snapshot = session.snapshot()
            # the snapshot's trace starts with the workspace allocator's entries: each
            # communicator's place counts them
            head = len(result.snapshot["device_traces"][local]) - \
                session.allocator.history_length()
            for comm in world.communicators.all():
                comm.entry += head
        workspace = session.allocator.workspace.memory_stats().get("reserved_bytes.peak", 0)
        figures = RankFigures(rank, local, rank // cards, result, share, workspace,
                              world.communicators.all())
    finally:
        uninstall_torch_npu(previous)
        session.close()
        FakeTensorMode.cache_clear()
    return figures, world.layout


def estimate_ranks(target: str | Callable[[], Any], argv: list[str] | tuple = (), *,
                   world_size: int, product: str = DEFAULT_PRODUCT,
                   capacity: int | None = None, alloc_conf: str | None = None,
                   cann: str | None = None, cards_per_node: int = DEFAULT_CARDS_PER_NODE,
                   hccl_buffsize: int | None = None, p2p_buffsize: int | None = None,
                   runtime_share: int | None = None, trace_all: bool = False,
                   workspace: Mapping[str, Any] | bool | None = None,
                   task_queue: int | None = None, history: bool = False,
                   item_value: float | None = DEFAULT_ITEM_VALUE,
                   torch_npu: str | None = None) -> RanksResult:
    """Run ``target`` (as :func:`~ascend_memsim.torchsim.estimate` runs it) as each rank of
    a ``world_size``-rank job on ``product`` cards (``capacity`` bytes each, default the
    product's), ``cards_per_node`` to a node; each rank's device total is the caching
    allocator's peak reserved bytes + the workspace allocator's + its HCCL communicators +
    the runtime's share (``runtime_share`` bytes, default the product's ESTIMATE).
    ``hccl_buffsize`` / ``p2p_buffsize`` (MB) set ``HCCL_BUFFSIZE`` / ``P2P_HCCL_BUFFSIZE``
    for the run (default: the environment's, else 200 and 20). ``trace_all`` traces every
    rank, not one per class (see the module's docstring). ``workspace``, ``task_queue``,
    ``item_value`` and ``torch_npu`` are :func:`~ascend_memsim.torchsim.estimate`'s, for
    every rank.
    ``history`` keeps each traced rank's torch_npu snapshot (``rank(r).estimate.snapshot``,
    every trace entry) and each communicator's place in it
    (:attr:`~.hccl.Communicator.entry`), which the searches of :mod:`.search` replay.

    Raises:
        ValueError: a world size below 1, cards per node outside [1, 64], a negative
            runtime share, buffer sizes out of range.
        InvalidArgument: an unknown product or a bad capacity.
        AllocatorConfigError: an ``alloc_conf`` torch_npu refuses.
    """
    check_item_value(item_value)
    for label, value, low in (("world_size", world_size, 1),
                              ("cards_per_node", cards_per_node, 1),
                              ("hccl_buffsize", hccl_buffsize, 1),
                              ("p2p_buffsize", p2p_buffsize, 0)):
        if value is not None and (type(value) is not int or value < low):
            raise ValueError(f"{label} must be a whole number >= {low}, got {value!r}")
    if world_size > MAX_WORLD_SIZE:
        raise ValueError(f"world_size must be at most {MAX_WORLD_SIZE:,} (no cluster has more "
                         f"cards), got {world_size:,}")
    if cards_per_node > 64:
        raise ValueError(f"cards_per_node must be at most 64, got {cards_per_node}")
    share, share_source = share_of(get_profile(product).name, runtime_share)
    environ = {}
    if hccl_buffsize is not None:
        environ["HCCL_BUFFSIZE"] = str(hccl_buffsize)
    if p2p_buffsize is not None:
        environ["P2P_HCCL_BUFFSIZE"] = str(p2p_buffsize)
    from .hccl import HcclSettings

    settings = HcclSettings.from_environ({**os.environ, **environ})
    spec: dict[str, Any]
    spec = {"product": product, "capacity": capacity, "alloc_conf": alloc_conf, "cann": cann,
            "cards_per_node": min(cards_per_node, world_size), "world_size": world_size,
            "runtime_share": runtime_share, "environ": environ, "workspace": workspace,
            "task_queue": task_queue, "history": history, "item_value": item_value,
            "torch_npu": torch_npu}
    every = trace_all or world_size <= TRACE_ALL_UP_TO
    first, layout = _run_rank(target, argv, 0, spec)
    classes: list[RankClass] = []
    if every:
        runs = [first] + [_run_rank(target, argv, r, spec)[0] for r in range(1, world_size)]
        for figures in runs:
            classes.append(RankClass((figures.rank,), figures, ()))
    else:
        members: dict[tuple, list[int]] = {}
        for r in range(world_size):
            members.setdefault(class_key(r, layout, world_size), []).append(r)
        for key, ranks in members.items():
            figures = first if ranks[0] == 0 else _run_rank(target, argv, ranks[0], spec)[0]
            classes.append(RankClass(tuple(ranks), figures, key))
    return RanksResult(
        source=first.estimate.source, product=first.estimate.product,
        capacity=first.estimate.capacity, world_size=world_size,
        cards_per_node=spec["cards_per_node"], alloc_conf=first.estimate.alloc_conf,
        hccl_buffsize=settings.buffsize, p2p_buffsize=settings.p2p_buffsize,
        runtime_share=share, runtime_share_source=share_source,
        traced="every rank" if every else "one rank per class", classes=classes)
