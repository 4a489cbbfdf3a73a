"""What an estimate cannot follow as the NPU would, and what it does instead: compiled graphs
(``torch.compile``), ACL graph capture (``torch_npu.npu.NPUGraph``) and the values of
tensors (``.item()``).

- ``torch.compile`` (and ``Module.compile``): TorchDynamo compiles nothing while a
  ``TorchDispatchMode`` that is not an infrastructure mode is active
  (``torch/_dynamo/convert_frame.py``: "non-infra torch dispatch mode present, this is not
  supported today in torch.compile"), and the estimate's fake tensors and storage tracker
  are such modes: the compiled callable runs eagerly, operator by operator. DECISION: let it
  run so (traced, as eager mode), with the eager backend (nothing is compiled either way, and
  the default backend's import costs seconds; ``fullgraph=True`` would fail on a frame
  Dynamo skips), and say it in the result: the figures are eager mode's, and a compiled
  graph may hold fewer activations (fused operators, AOT autograd's choice of saved tensors).
- ACL graphs (``torch_npu.npu.NPUGraph``, ``graph``, ``make_graphed_callables``,
  ``graph_pool_handle``; ``Ascend/pytorch`` ``torch_npu/npu/graphs.py``): a captured graph's
  tensors live in a private memory pool for as long as the graph does, which the estimate's
  allocator model has no pool for. DECISION: refused with the line and the way out (run the
  step uncaptured during the estimate), not guessed; ``is_current_stream_capturing()`` is
  False.
- ``.item()``, ``float(t)``, ``int(t)``, ``bool(t)``, ``.tolist()`` and ``.numpy()`` need
  values fake tensors do not have. DECISION: each such read gives ``item_value``
  (:data:`DEFAULT_ITEM_VALUE`, 0, unless the user gives another) in the tensor's kind (bool:
  not zero; ``.tolist()`` and ``.numpy()`` every element), and the result counts the reads
  with their first lines (:data:`VALUE_SITES`). 0 is the value ordinary training loops
  pass with: a logged loss of 0, GradScaler's and ``clip_grad_norm_``'s checks finding no
  inf or NaN (``isnan(t).any()`` is False), a DataLoader's seed. A finite value is finite:
  a bool read of ``torch.isfinite(t)`` (through ``all``, ``any`` and copies,
  :data:`HEALTHY_KEPT`) gives True, so ``if torch.isfinite(loss).all():`` takes the step as
  on the machine. ``item_value=None`` (the command line's ``--item-value stop``) stops the
  script at the first read instead
  (:class:`DataDependentOperation`). A read of a tensor whose value torch knows
  (one made from a Python number) still gives the true value.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor, unset_fake_temporarily
from torch.utils._pytree import tree_leaves, tree_map
from torch.utils.weak import WeakIdKeyDictionary

__all__ = ["EstimateStopped", "DataDependentOperation", "data_dependent", "UnsupportedFeature",
           "install", "ValueReads", "graph_refusal", "custom_allocator_refusal", "where",
           "DEFAULT_ITEM_VALUE", "VALUE_SITES"]

#: what a read of a tensor's value gives by default (see the module's DECISION)
DEFAULT_ITEM_VALUE = 0.0
#: the distinct lines of value reads the result lists
VALUE_SITES = 5
_aten = torch.ops.aten
#: operators whose bool output is all True when their input is (torch.isfinite's output is
#: marked so where it is called: torch decomposes it before the tracker sees it)
HEALTHY_KEPT = frozenset({
    _aten.all.default, _aten.all.dim, _aten.all.dims, _aten.any.default, _aten.any.dim,
    _aten.any.dims, _aten.clone.default, _aten._to_copy.default, _aten.view.default,
    _aten.reshape.default, _aten.squeeze.default, _aten.unsqueeze.default,
    _aten.alias.default, _aten.detach.default, _aten.lift_fresh.default,
})

#: what the summary says of a script that used torch.compile
COMPILE_NOTE = ("torch.compile at {where} ran eagerly (TorchDynamo compiles nothing under fake "
                "tensors): the figures are eager mode's; a compiled graph may hold fewer "
                "activations")

# torch warns of the estimate's own global module hook when a compiled module runs
_HOOK_WARNING = r"Using `torch.compile\(module\)` when there are global hooks"
# and when its own code reads a fake tensor's data pointer (FSDP compares storages so)
_DATA_PTR_WARNING = r"Accessing the data pointer of FakeTensor is deprecated"


class EstimateStopped(RuntimeError):
    """The script did something the estimate cannot follow; the message names it, the
    script's line and the way out."""

    #: a traceback of it shows the script's frames only (cli/script.py)
    _ascend_memsim_user_error = True


class DataDependentOperation(EstimateStopped):
    """An operator whose output (its shape, or a Python value) depends on the tensors'
    values, which fake tensors do not have."""


def data_dependent(session: Any, name: str, reason: str) -> DataDependentOperation:
    """The stop of the script at ``name`` (an operator, or a read such as ".item()"), which
    needs values the fake tensors do not have (``reason``), recorded in ``session``."""
    way_out = ("or let reads give a value: --item-value X (item_value=X)"
               if name.startswith(".") else
               "or give it a shape that does not depend on the data (a fixed mask size)")
    error = DataDependentOperation(
        f"{name} at {where(session)} needs the values of a tensor, and the estimate's "
        f"tensors have shapes but no values ({reason}). The way out: leave this step out of "
        f"the estimate (it runs with ASCEND_MEMSIM_ESTIMATE=1 in the environment), {way_out}")
    session.stop(error)
    return error


class UnsupportedFeature(EstimateStopped):
    """A feature the estimate refuses (ACL graph capture): the message says why."""


def custom_allocator_refusal(session: Any, name: str) -> UnsupportedFeature:
    """The refusal of a custom allocator taking the place of torch_npu's caching one."""
    return UnsupportedFeature(
        f"{name} at {where(session)}: a custom allocator (NPUPluggableAllocator) would take "
        f"the place of torch_npu's caching allocator, and its policy is in its .so, which the "
        f"estimate cannot run. The way out: leave the default allocator in place during the "
        f"estimate (if not os.environ.get('ASCEND_MEMSIM_ESTIMATE'): ...); a MemPool over a "
        f"custom allocator is modelled, its segments counted as torch_npu's own")


def where(session: Any) -> str:
    """The script's line that called into the estimate, as ``file:line in name``."""
    frames = session.frames()
    return (f"{frames[0]['filename']}:{frames[0]['line']} in {frames[0]['name']}"
            if frames else "an unknown line")


#: the Library holding the NPU's kernel of aten::_local_scalar_dense (once per process)
_SCALAR_READ: list = []


def _register_scalar_read() -> None:
    """The NPU's own kernel of ``aten::_local_scalar_dense``: a read of the value, as the
    tracker gives it. torch reaches the backend's kernel past the dispatch modes when it
    makes a tensor from a list of device scalars (``torch.tensor([t1, t2])``, the data read
    with the Python key excluded: ``torch/csrc/utils/tensor_new.cpp``), as Megatron-core's
    local fallback of Apex's ``multi_tensor_l2norm`` does
    (``megatron/core/utils.py``, ``local_multi_tensor_l2_norm``)."""
    if _SCALAR_READ:
        return
    from .torch_npu.npu._state import active

    def read(tensor: torch.Tensor) -> Any:
        session = active()
        if session is None:
            raise RuntimeError("no NPU: the stand-in torch_npu answers only inside an "
                               "estimate")
        return session.values.read(session, tensor, ".item()")

    lib = torch.library.Library("aten", "IMPL")
    lib.impl("_local_scalar_dense", read, "PrivateUse1")
    _SCALAR_READ.append(lib)


def install(session: Any) -> Any:
    """Put ``torch.compile`` in the estimate's hands for the session; a callable that undoes
    it."""
    _register_scalar_read()
    original = torch.compile

    def compile(model: Any = None, **kwargs: Any) -> Any:
        note = COMPILE_NOTE.format(where=where(session))
        if note not in session.notes:
            session.notes.append(note)
        if model is None:
            return lambda fn: original(fn, backend="eager")
        return original(model, backend="eager")

    torch.compile = compile
    tolist, numpy = torch.Tensor.tolist, torch.Tensor.numpy

    fake_tolist_before = FakeTensor.tolist

    def fake_tolist(self: torch.Tensor) -> Any:
        if not isinstance(self, FakeTensor):
            return tolist(self)
        value = session.values.read(session, self, ".tolist()")
        with unset_fake_temporarily():
            return tolist(_filled(value, self))

    def fake_numpy(self: torch.Tensor, *, force: bool = False) -> Any:
        # a real tensor's too: numpy() detaches it, which the fake mode would make a fake one
        with unset_fake_temporarily():
            if not isinstance(self, FakeTensor):
                return numpy(self, force=force)
        value = session.values.read(session, self, ".numpy()")
        with unset_fake_temporarily():
            return numpy(_filled(value, self))

    # patched for the run (methods the checker takes as fixed; FakeTensor has a tolist of
    # its own), put back by undo
    torch.Tensor.tolist = fake_tolist  # type: ignore[method-assign,assignment,unused-ignore]
    FakeTensor.tolist = fake_tolist  # type: ignore[method-assign,assignment,unused-ignore]
    torch.Tensor.numpy = fake_numpy  # type: ignore[method-assign,assignment,unused-ignore]
    isfinite, tensor_isfinite = torch.isfinite, torch.Tensor.isfinite

    def healthy(fn: Any) -> Any:
        def finite(t: torch.Tensor) -> torch.Tensor:
            out = fn(t)
            session.values.healthy[out] = True
            return out

        return finite

    torch.isfinite = healthy(isfinite)
    torch.Tensor.isfinite = healthy(tensor_isfinite)  # type: ignore[method-assign,unused-ignore]
    # the filters as they were come back when the session ends (the script's own included:
    # its process would end there too)
    kept = warnings.catch_warnings()
    kept.__enter__()
    warnings.filterwarnings("ignore", message=_HOOK_WARNING, category=UserWarning)
    warnings.filterwarnings("ignore", message=_DATA_PTR_WARNING, category=UserWarning)

    def undo() -> None:
        torch.compile = original
        torch.Tensor.tolist = tolist  # type: ignore[method-assign,unused-ignore]
        FakeTensor.tolist = fake_tolist_before  # type: ignore[method-assign,unused-ignore]
        torch.Tensor.numpy = numpy  # type: ignore[method-assign,unused-ignore]
        torch.isfinite = isfinite
        torch.Tensor.isfinite = tensor_isfinite  # type: ignore[method-assign,unused-ignore]
        kept.__exit__(None, None, None)

    return undo


class ValueReads:
    """The reads of tensors' values in one estimate: what they give (``item_value``; None:
    the first read stops the script), how many were made, their first distinct lines, and
    the bool tensors that are all True when every value is finite (see the module's
    DECISION)."""

    __slots__ = ("item_value", "count", "sites", "healthy", "shadows")

    def __init__(self, item_value: float | None) -> None:
        self.item_value = item_value
        self.count = 0
        self.sites: list[str] = []
        self.healthy = WeakIdKeyDictionary()
        #: NPU scalars whose value is known: the real CPU tensor holding it (see follow)
        self.shadows = WeakIdKeyDictionary()

    def follow(self, func: Any, args: tuple, kwargs: dict, out: Any) -> None:
        """Keep the real value of an NPU scalar (a tensor of one element) made from
        values that are known (real CPU tensors, Python numbers, other known scalars): an
        optimizer's step counter, a scale, a constant moved to the NPU. The operator runs
        again on the real values, on the CPU; a known scalar that an operator changes from
        unknown values is forgotten. O(the operator's arguments), and only for operators
        whose output is an NPU scalar or that write a known one."""
        shadows = self.shadows
        written = _written(func)
        if not (shadows and written) and not (
                isinstance(out, FakeTensor) and out.device.type == "npu"):
            return
        scalar = (isinstance(out, FakeTensor) and out.device.type == "npu"
                  and out.numel() == 1 and func not in _NOT_KNOWN)
        if not scalar and not (shadows and written):
            return
        known = True

        def real(a: Any) -> Any:
            nonlocal known
            if isinstance(a, FakeTensor):
                shadow = shadows.get(a)
                if shadow is None:
                    known = False
                return shadow
            if isinstance(a, torch.device) and a.type == "npu":
                return _CPU
            if isinstance(a, torch.UntypedStorage):
                known = False
            return a

        real_args, real_kwargs = tree_map(real, (args, kwargs))
        value = None
        if known:
            if "device" in real_kwargs:
                real_kwargs["device"] = _CPU
            try:
                with unset_fake_temporarily():
                    value = func(*real_args, **real_kwargs)
            except Exception:
                # what the CPU cannot run, the values are not known of
                known = False
        if not known:
            # what the operator wrote is no longer known (positional, out=, lists of them)
            names = {func._schema.arguments[i].name for i in written}
            for t in tree_leaves(([args[i] for i in written if i < len(args)],
                                  [v for k, v in kwargs.items() if k in names])):
                if isinstance(t, FakeTensor):
                    shadows.pop(t, None)
            return
        if scalar and isinstance(value, torch.Tensor):
            shadows[out] = value

    def read(self, session: Any, tensor: torch.Tensor, how: str) -> Any:
        """A read of ``tensor``'s value (``how``: ".item()", ".tolist()", ...), counted;
        ``item_value`` in the tensor's kind.

        Raises:
            DataDependentOperation: ``item_value`` is None (stop at the first read).
        """
        shadow = self.shadows.get(tensor)
        if shadow is not None:
            with unset_fake_temporarily():
                return shadow.item()
        value = self.item_value
        if value is None:
            raise data_dependent(session, how, "the read of a value, with --item-value stop")
        self.count += 1
        if len(self.sites) < VALUE_SITES:
            site = f"{where(session)} ({how})"
            if site not in self.sites:
                self.sites.append(site)
        if tensor.dtype is torch.bool:
            return True if tensor in self.healthy else bool(value)
        if tensor.dtype.is_floating_point or tensor.dtype.is_complex:
            # the value as the tensor's dtype holds it (1e308 in float32 is inf)
            with unset_fake_temporarily():
                return torch.tensor(float(value), dtype=tensor.dtype).item()
        return int(value)


_CPU = torch.device("cpu")
#: factories whose values are whatever the memory held: never known
_UNINITIALIZED = frozenset({_aten.empty.memory_format, _aten.empty_strided.default,
                            _aten.empty_like.default, _aten.new_empty.default,
                            _aten.new_empty_strided.default})
_NOT_KNOWN_CACHE: dict[Any, bool] = {}


class _NotKnown:
    """Operators whose NPU scalar is not followed: uninitialised memory, and random draws
    (run again on the CPU they would move the script's CPU generator)."""

    def __contains__(self, func: Any) -> bool:
        found = _NOT_KNOWN_CACHE.get(func)
        if found is None:
            found = _NOT_KNOWN_CACHE[func] = (
                func in _UNINITIALIZED
                or torch.Tag.nondeterministic_seeded in getattr(func, "tags", ()))
        return found


_NOT_KNOWN = _NotKnown()
_WRITTEN: dict[Any, tuple[int, ...]] = {}


def _written(func: Any) -> tuple[int, ...]:
    """The positions of the arguments ``func`` writes (its schema's ``Tensor(a!)``)."""
    found = _WRITTEN.get(func)
    if found is None:
        found = _WRITTEN[func] = tuple(
            i for i, a in enumerate(func._schema.arguments)
            if a.alias_info is not None and a.alias_info.is_write)
    return found


def _filled(value: Any, tensor: torch.Tensor) -> torch.Tensor:
    """A real CPU tensor of ``tensor``'s shape and dtype, every element ``value`` (call with
    the fake mode unset)."""
    return torch.full(tuple(tensor.shape), value, dtype=tensor.dtype)


def graph_refusal(session: Any, name: str) -> UnsupportedFeature:
    """The refusal of ACL graph capture (``name``, called at the script's line)."""
    return UnsupportedFeature(
        f"{name} at {where(session)}: ACL graph capture is not simulated (a captured "
        f"graph replays its operators on the tensors of a private memory pool fixed at "
        f"capture, and the estimate captures no graph). The "
        f"way out: run the step uncaptured during the estimate (if "
        f"os.environ.get('ASCEND_MEMSIM_ESTIMATE'): call it directly); its peak is the "
        f"memory the graph's pool would hold")
