"""``torch.distributed`` for one rank of a simulated job: the ``hccl`` backend is torch's
fake process group (``torch._C._distributed_c10d.FakeProcessGroup``, which moves no data and
gives every collective its output shapes), and each group's HCCL communicator takes its
buffer on the rank's device on the group's first collective (:mod:`.hccl`).

During a rank's run (:class:`World`, entered by the ranks runner):

- ``init_process_group`` gets a ``FakeStore`` (no rendezvous, no other process), the rank
  and world size the runner set (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` as torchrun sets
  them);
- every group the script makes (``init_process_group``, ``new_group``, ``new_subgroups``,
  device meshes: all go through ``distributed_c10d._new_process_group_helper``) is recorded
  with its global ranks, also the groups this rank is not a member of (every rank makes
  every group), so the runner knows the job's layout from one rank's run; a device mesh's
  tensor of ranks is a real one (``init_device_mesh`` runs outside the fake tensors), since
  torch reads its values (``tolist``) as it makes the mesh;
- FSDP's storage resizes (FSDP2's and the first FSDP's), by which it frees and remakes the
  parameters it gathers, reach the session (:meth:`World._follow_storage_resizes`);
- a group whose backend is not HCCL (``gloo`` for CPU-side groups) gets torch's ``fake``
  backend: no device memory, no rendezvous;
- each ``c10d`` operator (seen by :class:`_Collectives`, a dispatch mode above the
  estimate's tracker) makes its group's communicator on first use, or the pair's
  point-to-point one for a send or receive (:mod:`.hccl` says when);
- ``batch_isend_irecv`` runs its operations one by one as a coalesced batch (torch_npu then
  uses the group's communicator, not the pairs').

``torch_npu._C._distributed_c10d.ProcessGroupHCCL.Options`` is a stand-in whose
``hccl_config`` (``{"hccl_buffer_size": MB}``) sets the group's buffer.

DECISION: torch lets a backend name be registered once per process; ``hccl`` stays
registered after the first distributed estimate, and outside one its groups cannot be made
(RuntimeError), as with the ``npu`` device itself.
"""

from __future__ import annotations

import importlib
import inspect
import pickle
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.device_mesh as mesh_module
import torch.distributed.distributed_c10d as c10d
from torch._C._distributed_c10d import FakeProcessGroup, FakeStore, _create_work_from_future
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

from .hccl import Communicators, HcclBufferError, group_buffer_size

__all__ = ["World", "GroupInfo", "ensure_hccl_backend", "ProcessGroupHCCL", "current_world"]

#: the rank being run (set by World.__enter__)
_world: World | None = None

#: the helpers by which FSDP resizes a storage, each module holding its own name of them:
#: FSDP2's ``free_storage`` / ``alloc_storage``, FSDP's and DDP's mixed precision hook's
#: ``_free_storage`` / ``_alloc_storage`` (``torch/distributed/utils.py``)
_RESIZERS = (
    ("torch.distributed.fsdp._fully_shard._fsdp_param", ("free_storage", "alloc_storage")),
    ("torch.distributed.fsdp._fully_shard._fsdp_param_group", ("alloc_storage",)),
    ("torch.distributed.fsdp._flat_param", ("_free_storage", "_alloc_storage")),
    ("torch.distributed.utils", ("_free_storage", "_alloc_storage")),
    ("torch.distributed.algorithms.ddp_comm_hooks.mixed_precision_hooks", ("_free_storage",)),
)

#: what World._patch saves for a name the patched object did not have
_ABSENT = object()

#: c10d operators that send to or receive from one peer (the int after the group)
_POINT_TO_POINT = {"send", "recv_"}


@dataclass(frozen=True)
class GroupInfo:
    """A process group of the job: its name, global ranks, and ``hccl_buffer_size`` (MB)."""

    name: str
    ranks: tuple[int, ...]
    buffsize: int | None = None


class ProcessGroupHCCL:
    """Stand-in of ``torch_npu._C._distributed_c10d.ProcessGroupHCCL`` (its ``Options``)."""

    class Options:
        """``ProcessGroupHCCL.Options``: ``hccl_config`` (``hccl_buffer_size``, MB, an
        int; ``group_name``), ``is_high_priority_stream``."""

        def __init__(self, is_high_priority_stream: bool = False) -> None:
            self.hccl_config: dict = {}
            self.is_high_priority_stream = is_high_priority_stream
            self.global_ranks_in_group: list = []
            self.group_id = ""


def _create_backend(common: Any, options: Any) -> Any:
    """The ``hccl`` backend's creator (torch's extended API): a fake process group, the
    group's buffer size noted."""
    world = _world
    if world is None:
        raise RuntimeError("the hccl backend of ascend-memsim answers only inside a "
                           "distributed estimate (ascend-memsim estimate --world-size N)")
    ranks = tuple(common.global_ranks_in_group) or tuple(range(world.world_size))
    world.groups[str(common.group_id)] = GroupInfo(str(common.group_id), ranks,
                                                   group_buffer_size(options))
    # (torch's stubs give _create_internal fewer arguments than its C extension takes)
    backend = FakeProcessGroup._create_internal(common.group_rank,  # type: ignore[call-arg,unused-ignore]
                                                common.group_size, None)
    # the backend's group, for its get_hccl_comm_name (the backend is held here, so its id
    # is not reused while the rank runs)
    world.backends[id(backend)] = (backend, str(common.group_id))
    return backend


def ensure_hccl_backend() -> None:
    """Register the ``hccl`` backend for the ``npu`` device (once per process)."""
    import torch.testing._internal.distributed.fake_pg  # noqa: F401  (the "fake" backend)

    if "HCCL" in dist.Backend._plugins:
        if dist.Backend._plugins["HCCL"].creator_fn is not _create_backend:
            raise RuntimeError("torch.distributed's hccl backend is already registered in "
                               "this process (is the real torch_npu imported?)")
        return
    dist.Backend.register_backend("hccl", _create_backend, extended_api=True,
                                  devices=["npu"])
    _register_coalesced_meta()


#: the Library that holds the Meta kernels of _register_coalesced_meta (once per process)
_META_KERNELS: list = []


def _register_coalesced_meta() -> None:
    """Meta kernels (what fake tensors run) for the c10d operators torch registers for CPU,
    CUDA and PrivateUse1 only (``torch/csrc/distributed/c10d/Ops.cpp``; the dispatcher has
    no Meta kernel for them): the coalesced collectives ``dist._coalescing_manager`` issues
    (Megatron-core's gradient buckets and distributed optimizer) and ``gather_into_tensor_``.
    Each writes its outputs in place and gives a work whose future holds them, as the fake
    process group moves no data; once per process."""
    if _META_KERNELS:
        return
    lib = torch.library.Library("c10d", "IMPL")

    def work(tensors: list) -> Any:
        future: torch.futures.Future = torch.futures.Future()
        future.set_result(list(tensors))
        return _create_work_from_future(future).boxed()

    lib.impl("allreduce_coalesced_",
             lambda tensors, pg, op, async_op=True, timeout=-1: work(tensors), "Meta")
    lib.impl("allgather_coalesced_",
             lambda outputs, inputs, pg, async_op=True:
             work([t for ts in outputs for t in ts]), "Meta")
    lib.impl("allgather_into_tensor_coalesced_",
             lambda outputs, inputs, pg, async_op=True: work(outputs), "Meta")
    lib.impl("reduce_scatter_tensor_coalesced_",
             lambda outputs, inputs, pg, op, async_op=True, timeout=-1: work(outputs), "Meta")
    lib.impl("gather_into_tensor_",
             lambda output, input, pg, root, async_op=True, timeout=-1:
             (output, work([output])), "Meta")
    _META_KERNELS.append(lib)


def current_world() -> World | None:
    """The rank being run, or None outside a distributed estimate."""
    return _world


def _non_hccl_to_fake(backend: Any) -> Any:
    text = str(backend).lower()
    if "hccl" not in text:
        return dist.Backend("fake")
    return dist.Backend(text.replace("gloo", "fake").replace("nccl", "fake"))


class World:
    """One rank's view of the job while its script runs: the groups, the communicators on
    its device, the patches of ``torch.distributed`` (a context manager)."""

    def __init__(self, session: Any, rank: int, world_size: int) -> None:
        self.session, self.rank, self.world_size = session, rank, world_size
        #: group name -> GroupInfo, for the groups this rank is a member of
        self.groups: dict[str, GroupInfo] = {}
        #: the global ranks of every group the script made, members or not, in order
        self.layout: list[tuple[int, ...]] = []
        self.communicators = Communicators(session.runtime,
                                           session.allocator.history_length)
        self.coalescing = False
        #: id of each HCCL backend made -> (the backend, its group's name)
        self.backends: dict[int, tuple[Any, str]] = {}
        self._saved: list[tuple[Any, str, Any]] = []
        self._mode = _Collectives(self)

    # -- life ------------------------------------------------------------------------------

    def __enter__(self) -> World:
        global _world
        if _world is not None:
            raise RuntimeError("a distributed estimate is already running in this process")
        ensure_hccl_backend()
        _world = self
        helper = c10d._new_process_group_helper
        signature = inspect.signature(helper)
        init = c10d.init_process_group

        def new_process_group_helper(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(*args, **kwargs)
            ranks = tuple(bound.arguments.get("global_ranks_in_group") or ())
            self.layout.append(ranks or tuple(range(self.world_size)))
            bound.arguments["backend"] = _non_hccl_to_fake(bound.arguments["backend"])
            return helper(*bound.args, **bound.kwargs)

        def init_process_group(backend: Any = None, init_method: Any = None,
                               timeout: Any = None, world_size: int = -1, rank: int = -1,
                               store: Any = None, **kwargs: Any) -> None:
            extra = {} if timeout is None else {"timeout": timeout}
            init(backend or "hccl", world_size=self.world_size, rank=self.rank,
                 store=FakeStore(), **extra, **kwargs)

        def batch_isend_irecv(p2p_op_list: list) -> list:
            self.coalescing = True
            try:
                return [op.op(op.tensor, op.peer, op.group, op.tag) for op in p2p_op_list]
            finally:
                self.coalescing = False

        self._patch(c10d, "_new_process_group_helper", new_process_group_helper)
        make_mesh = mesh_module.init_device_mesh

        def init_device_mesh(*args: Any, **kwargs: Any) -> Any:
            # a device mesh is a layout of ranks: its tensor is small, on the CPU, and read
            # for its values (tolist) as the mesh is made, so it is a real tensor, made
            # outside the fake tensors
            with _disable_current_modes():
                return make_mesh(*args, **kwargs)

        for module in (mesh_module, dist):
            self._patch(module, "init_device_mesh", init_device_mesh)
        # device_mesh.py holds its own name of init_process_group (a mesh made before any
        # group makes the default one)
        for module in (c10d, dist, mesh_module):
            self._patch(module, "init_process_group", init_process_group)
        for module in (c10d, dist):
            self._patch(module, "batch_isend_irecv", batch_isend_irecv)
            self._patch(module, "all_gather_object", _all_gather_object)
        self._follow_storage_resizes()
        self._classify_fsdp2_shards()
        self._patch(FakeProcessGroup, "get_hccl_comm_name", self._comm_name_method())
        from torch.distributed.tensor import _random as dtensor_random

        self._patch(dtensor_random.OffsetBasedRNGTracker, "_get_device_state",
                    _rng_state_on_host)
        if self.session.device:
            self._patch(torch.Tensor, "to", _to_own_device(torch.Tensor.to,
                                                           self.session.device))
        from . import ddp

        ddp.install(self._patch, self.session)
        self._mode.__enter__()
        return self

    def _follow_storage_resizes(self) -> None:
        """FSDP frees the parameters it all-gathers, and makes them again, by resizing their
        storage (``storage.resize_(0)``, ``resize_(n)``), a storage method no dispatch mode
        sees: after each of its helpers (:data:`_RESIZERS`) the session is told, and gives
        the block back or takes one of the new size, as torch_npu's allocator does for a
        storage's resize."""
        track = self.session.track

        def resized(original: Any) -> Any:
            def resize(tensor: torch.Tensor, *args: Any) -> Any:
                done = original(tensor, *args)
                track(tensor)
                return done
            return resize

        for path, names in _RESIZERS:
            try:
                module = importlib.import_module(path)
            except ImportError:         # a torch without it
                continue
            for name in names:
                self._patch(module, name, resized(getattr(module, name)))

    def _classify_fsdp2_shards(self) -> None:
        """FSDP2's sharded parameters and their gradients counted as what they are from the
        first forward on. The session's module hooks see a module's own parameters as it
        runs, which under FSDP2 are the all-gathered ones (``FSDPParamGroup.pre_forward``
        swaps them in); the shards it keeps between steps, and the sharded gradients its
        reduce-scatter gives (``foreach_reduce``: ``sharded_param.grad = ...``), would
        otherwise count as activations until the optimizer's first step. O(parameters of
        the group) per call."""
        try:
            from torch.distributed.fsdp._fully_shard._fsdp_param_group import FSDPParamGroup
        except ImportError:         # a torch without FSDP2
            return
        from ..categories import GRADS, PARAMS

        classify = self.session.classify
        pre_forward, post_backward = FSDPParamGroup.pre_forward, FSDPParamGroup.post_backward

        def classified_pre_forward(group: Any, *args: Any, **kwargs: Any) -> Any:
            for fsdp_param in group.fsdp_params:
                classify(fsdp_param.sharded_param, PARAMS)
            return pre_forward(group, *args, **kwargs)

        def classified_post_backward(group: Any, *args: Any, **kwargs: Any) -> Any:
            done = post_backward(group, *args, **kwargs)
            for fsdp_param in group.fsdp_params:
                classify(fsdp_param.sharded_param.grad, GRADS)
            return done

        self._patch(FSDPParamGroup, "pre_forward", classified_pre_forward)
        self._patch(FSDPParamGroup, "post_backward", classified_post_backward)

    def _comm_name_method(self) -> Callable[..., str]:
        """``ProcessGroupHCCL.get_hccl_comm_name(rankid, init_comm=True)`` for the HCCL
        backends of the run (``torch_npu/csrc/distributed/Init.cpp``,
        ``ProcessGroupHCCL::getHcclCommName``): the group's communicator, made now unless
        ``init_comm`` is False (then "" if it is not made yet), and its name, which the
        MC2 operators take as ``hcom``. DECISION: the name is the group's (HCCL makes up
        its own, which no script reads for anything but passing it back)."""
        world = self

        def get_hccl_comm_name(backend: Any, rankid: int, *args: Any, **kwargs: Any) -> str:
            if not isinstance(rankid, int) or rankid < 0:
                raise RuntimeError(f"Invalid rank {rankid}")
            entry = world.backends.get(id(backend))
            if entry is None or entry[0] is not backend:
                raise RuntimeError("get_hccl_comm_name: not an HCCL group of this estimate")
            info = world.groups[entry[1]]
            if not kwargs.get("init_comm", True) and not world.communicators.made(info.name):
                return ""
            session = world.session
            try:
                world.communicators.for_group(info.name, info.ranks, info.buffsize,
                                              session.frames())
            except HcclBufferError as e:
                session.out_of_memory(str(e), e.size, session.frames())
            return info.name

        return get_hccl_comm_name

    def _patch(self, module: Any, name: str, value: Any) -> None:
        """Set ``module.name`` for the run (a name it did not have is removed after)."""
        self._saved.append((module, name, getattr(module, name, _ABSENT)))
        setattr(module, name, value)

    def __exit__(self, *exc: Any) -> None:
        global _world
        try:
            self._mode.__exit__(*exc)
            if dist.is_initialized():
                dist.destroy_process_group()
        finally:
            for module, name, value in reversed(self._saved):
                if value is _ABSENT:
                    delattr(module, name)
                else:
                    setattr(module, name, value)
            self._saved.clear()
            _world = None

    # -- collectives -----------------------------------------------------------------------

    def collective(self, opname: str, args: tuple) -> None:
        """Make the communicator ``opname`` (a c10d operator's name) needs on this rank's
        device, if it is the first use."""
        pg, peer = None, None
        for i, arg in enumerate(args):
            if isinstance(arg, torch.ScriptObject):
                try:
                    pg = dist.ProcessGroup.unbox(arg)
                except (RuntimeError, TypeError):
                    continue
                if opname in _POINT_TO_POINT and i + 1 < len(args):
                    peer = args[i + 1]
                break
        # not an HCCL group (torch's fake backend for gloo), or the pair's communicator
        if pg is None or not self.use_group(pg, peer):
            return
        if opname == "barrier":
            # ProcessGroupHCCL::barrier: a one-element float on the device, all-reduced
            torch.ones(1, device=torch.device("npu", self.session.device))

    def use_group(self, pg: Any, peer: int | None = None) -> bool:
        """Make the communicator a collective of ``pg`` (an HCCL group of this rank) uses
        on this rank's device, if it is the first use: the pair's for a send or receive
        with ``peer`` (not coalesced), when P2P communicators are on, else the group's; an
        HCCL group's operators that are not c10d operators (torch_npu's uneven
        collectives) call it themselves. False when ``pg`` is not an HCCL group of this
        rank, or the pair's communicator served.

        Raises:
            torch.OutOfMemoryError: the device cannot hold the communicator's buffer (at the
                script's line).
        """
        info = self.groups.get(pg.group_name)
        if info is None:
            return False
        session = self.session
        # torch's deprecation wrapper (all_gather_into_tensor) is not the script's line
        frames = [f for f in session.frames()
                  if not f["filename"].endswith("typing_extensions.py")]
        try:
            if peer is not None and not self.coalescing:
                me = info.ranks[pg.rank()]
                if self.communicators.for_pair(info.name, info.ranks,
                                               (me, info.ranks[peer]), frames):
                    return False
            self.communicators.for_group(info.name, info.ranks, info.buffsize, frames)
        except HcclBufferError as e:
            session.out_of_memory(str(e), e.size, frames)
        return True


class _Collectives(TorchDispatchMode):
    """Sees each c10d operator before the estimate's tracker and fake tensors do."""

    def __init__(self, world: World) -> None:
        super().__init__()
        self.world = world

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        if func.namespace != "c10d":
            return func(*args, **(kwargs or {}))
        self.world.collective(func._opname, args)
        return _with_tensors_future(func(*args, **(kwargs or {})))


def _all_gather_object(object_list: list, obj: Any, group: Any = None,
                       weights_only: bool = False) -> None:
    """``torch.distributed.all_gather_object`` on the fake process group: the object's bytes
    go to the group's device and through its all-gather (so its communicator is made, as
    torch's own function makes it, ``distributed_c10d.py``), and every rank's entry is a copy
    of this rank's object.

    DECISION: the other ranks' objects are this rank's: every rank runs the same script, and
    the fake process group moves no bytes (torch's own function would unpickle bytes it never
    received). Megatron-core gathers each rank's optimizer parameter-group keys this way
    (``megatron/core/optimizer/__init__.py``, ``_get_param_groups``), the same on every
    rank of a job."""
    if c10d._rank_not_in_group(group):
        return
    data = pickle.dumps(obj)
    size = dist.get_world_size(group)
    device = c10d._get_object_coll_device(group)
    mine = torch.empty(len(data), dtype=torch.uint8, device=device)
    gathered = torch.empty(len(data) * size, dtype=torch.uint8, device=device)
    dist.all_gather_into_tensor(gathered, mine, group=group)
    for i in range(size):
        # (this rank's own bytes, just made)
        object_list[i] = pickle.loads(data)


def _to_own_device(to: Any, index: int) -> Any:
    """``Tensor.to`` (and so ``Module.to``) with an "npu" device without an index put on the
    rank's device ``index``, as torch_npu's device guard puts it (the current device).

    torch fills the missing index from the backend's device guard
    (``aten/src/ATen/native/TensorConversions.cpp``, ``ensure_has_index``), and the guard
    torch gives a backend written in Python always answers device 0
    (``torch/csrc/acc/Module.cpp``, ``PythonDeviceGuard::getDevice``): without this a rank
    on card 1 would move its model to card 0."""
    own = torch.device("npu", index)

    def bare(device: Any) -> bool:
        if isinstance(device, str):
            return device == "npu"
        return (isinstance(device, torch.device) and device.type == "npu"
                and device.index is None)

    def to_(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        if args and bare(args[0]):
            args = (own, *args[1:])
        if bare(kwargs.get("device")):
            kwargs["device"] = own
        return to(self, *args, **kwargs)

    return to_


def _rng_state_on_host(tracker: Any) -> torch.Tensor:
    """DTensor's random-number tracker's ``_get_device_state``
    (``torch/distributed/tensor/_random.py``, ``OffsetBasedRNGTracker``), which a random
    operator on a DTensor (a sharded parameter's ``normal_`` at FSDP2's or TP's weight
    initialisation) calls: the generator's state as ``get_rng_state`` gives it, a real CPU
    tensor, not moved to the device first. torch moves it there and back (for its own
    checks) before giving it to ``set_rng_state``; a fake tensor's values are lost on the
    way, and a state without values cannot be set. What is not counted: the state's 16 bytes
    on the device (one 512-byte block, for the operator's duration)."""
    return tracker._device_handle.get_rng_state()


def _with_tensors_future(out: Any) -> Any:
    """A collective's ``(tensors, work)`` with a work whose future holds the tensors.

    The fake process group's work has a future completed with None
    (``torch/csrc/distributed/c10d/FakeProcessGroup.hpp``, ``FakeWork::getFuture``); a
    real backend's future holds the output tensors, which DDP's Reducer reads back
    (``comm.cpp`` ``parseHookResult``: "expected the hook result is either a Tensor or a
    TensorList") and communication hooks pass on (``fut.value()[0]``)."""
    if (isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], torch.ScriptObject)
            and isinstance(out[0], list) and out[0]
            and all(isinstance(t, torch.Tensor) for t in out[0])):
        future: torch.futures.Future = torch.futures.Future()
        future.set_result(out[0])
        return out[0], _create_work_from_future(future).boxed()
    return out
