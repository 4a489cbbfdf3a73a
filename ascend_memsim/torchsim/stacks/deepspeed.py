"""DeepSpeed under an estimate: its own engine, ZeRO optimizers (stages 1, 2, 3, offload) and
accelerator run on the simulated machine as on an Ascend one.

:func:`install` is called when a session starts; it costs a scan of ``sys.modules`` and a
finder on ``sys.meta_path``, and does the rest only when the script imports ``deepspeed``:

- the script's ``import deepspeed`` runs DeepSpeed afresh, with ``torch_npu`` importable, so
  DeepSpeed chooses its NPU accelerator itself (``deepspeed/accelerator/real_accelerator.py``,
  ``get_accelerator``: ``import torch_npu`` succeeds, ``accelerator_name = "npu"``) and
  binds its op builders to ``deepspeed/ops/op_builder/npu/``;
- CANN's environment, as its ``set_env.sh`` leaves it on every Ascend machine
  (:data:`CANN_ENVIRONMENT`), is set for the run: DeepSpeed's NPU op builders read
  ``ASCEND_HOME_PATH`` when made (``op_builder/npu/builder.py``,
  ``NPUOpBuilder.installed_cann_path``, a ``KeyError`` without it), and DeepSpeed makes one
  while it starts its communication (``deepspeed/comm/torch.py``, ``build_shm_op``);
- the C++ ops DeepSpeed builds at first use (``OpBuilder.load``, then ``jit_load``, with
  CANN's headers and libraries on the machine) are answered by what the machine's built op
  does to memory, or stop the run at the line that asks (:meth:`_Run.load_op`);
- ZeRO's model states are counted as DeepSpeed and the ZeRO paper name them
  (:meth:`_Run.classify`), and the settings that shape them are named in the result
  (``stack_settings``), with the host memory that offload holds.

DECISION, a fresh DeepSpeed per run: on the machine each rank is a process of its own, and
DeepSpeed keeps process-wide state from its import on (the accelerator it chose, op builders
bound to that accelerator's classes, its process groups, ``deepspeed.comm``'s backend, the
logger's handlers). DeepSpeed modules imported before the run (by the caller, a test, or
an estimate before this one) are set aside for the run and put back after it, and the ones
the run imported are forgotten, so each run, and each rank, imports DeepSpeed as its process
would; the ``DeepSpeed`` logger's handlers are put back as they were (each import adds one).
What ZeRO-3's ``zero.Init`` leaves on torch's classes is put back too
(:func:`_torch_classes`): its exit sets ``torch.nn.Module.__init_subclass__`` to the bound
method it saved (``partition_parameters.py``, ``unpatch_init_and_builtins``), which stops
``__init_subclass__`` chaining past ``Module`` for every class made after it (a class of
``nn.Module`` and another base with an ``__init_subclass__``: torchtitan's models).

DECISION, the environment: the names CANN's ``set_env.sh`` exports with a value that is a
directory of the toolkit (:data:`CANN_ENVIRONMENT`, the toolkit's default install path), set
when the script imports DeepSpeed and only where the environment has none (a user's own
wins), taken away when the run ends. The search paths it also extends (``PATH``,
``LD_LIBRARY_PATH``, ``PYTHONPATH``) are left alone: they would point this host's own
searches at directories it has not.

DECISION, DeepSpeed's cross-rank checks (``deepspeed/runtime/zero/utils.py``,
``assert_ints_same_as_other_ranks``, ``assert_lst_len_same_as_other_ranks``): they broadcast
rank 0's list and compare its values, which fake tensors have not (a read gives 0, so the
check would fail on every rank). Every rank runs the same script, so they agree as on a
healthy machine: the checks pass; their 8-byte device tensors are left out.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import logging
import math
import os
import sys
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook

from ...allocators.stats import format_size
from ..categories import GRADS, OPTIM, PARAMS
from ..limits import UnsupportedFeature, where
from .imports import AfterImport

__all__ = ["install", "CANN_ENVIRONMENT", "ANSWERED_OPS", "HOST_SETTING"]

_PACKAGE = "deepspeed"
#: the toolkit's default install path, which ``set_env.sh`` exports
_CANN_HOME = "/usr/local/Ascend/ascend-toolkit/latest"
#: what CANN's ``set_env.sh`` (``ascend-toolkit/set_env.sh``) exports as a directory of the
#: toolkit; ``ASCEND_HOME_PATH`` is what DeepSpeed reads
CANN_ENVIRONMENT = {
    "ASCEND_TOOLKIT_HOME": _CANN_HOME,
    "ASCEND_HOME_PATH": _CANN_HOME,
    "ASCEND_AICPU_PATH": _CANN_HOME,
    "ASCEND_OPP_PATH": _CANN_HOME + "/opp",
    "TOOLCHAIN_HOME": _CANN_HOME + "/toolkit",
}
#: the ops DeepSpeed builds at first use that the estimate answers, and how
ANSWERED_OPS = {
    "cpu_adam": "DeepSpeed's cpu_adam op (compiled with CANN at first use on the machine) "
                "ran as the estimate's own in-place Adam update of the host's tensors, as "
                "the op's own (csrc/adam/cpu_adam_impl.cpp, ds_adam_step): no device memory",
}

#: the result's setting that holds the host memory offloaded model states took at most
HOST_SETTING = "host memory of offloaded model states"
#: ZeRO optimizer methods whose new device storages hold gradients (the buckets, the
#: gradient partitions, a step's fp32 gradients; the inner optimizer's own states stay
#: optimizer state), by class: stage 1 and 2, stage 3
_GRADIENT_METHODS = ("setup_buckets", "reduce_independent_p_g_buckets_and_remove_grads",
                     "reduce_ready_partitions_and_remove_grads", "reduce_gradients",
                     "independent_gradient_partition_epilogue",
                     "overlapping_partition_gradients_reduce_epilogue", "step")
#: per ZeRO optimizer class (module, class): its attributes holding model states, by what
#: they hold (DeepSpeed 0.19's names; a missing one is skipped)
_STATES = {
    ("deepspeed.runtime.zero.stage_1_and_2", "DeepSpeedZeroOptimizer"): {
        PARAMS: ("bit16_groups_flat",),
        OPTIM: ("single_partition_of_fp32_groups",),
        GRADS: ("grads_in_partition", "averaged_gradients", "ipg_buckets"),
    },
    ("deepspeed.runtime.zero.stage3", "DeepSpeedZeroOptimizer_Stage3"): {
        PARAMS: ("fp16_partitioned_groups_flat", "persistent_parameters"),
        OPTIM: ("fp32_partitioned_groups_flat",),
        GRADS: ("grad_partitions_flat_buffer", "ipg_buckets"),
    },
}
#: what ``cpuinfo.get_cpu_info`` gave in this process (see _Run.probe_cpu_once)
_CPU_INFO: dict[str, Any] = {}
#: the most nested containers a walk of an optimizer's attributes enters
_DEPTH = 3


def _ours(name: str) -> bool:
    return name == _PACKAGE or name.startswith(_PACKAGE + ".")


class _Run:
    """One run's DeepSpeed: the modules set aside, the environment set, the adaptations."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.hidden = {n: m for n, m in sys.modules.items() if _ours(n)}
        for name in self.hidden:
            del sys.modules[name]
        #: the environment's values before the run, of the names set (None: unset)
        self.environ: dict[str, str | None] = {}
        self.logger = _logger_state()
        #: the inner optimizers of the ZeRO optimizers made during the run
        self.inner: weakref.WeakSet = weakref.WeakSet()
        #: the most host memory the ZeRO optimizers' CPU tensors held (offload), bytes
        self.host_peak = 0
        self.hooks: list = []
        #: (object, name, value) put back when the run ends
        self.restore: list[tuple[Any, str, Any]] = []
        self.classes = _torch_classes()
        self.finder = AfterImport(_PACKAGE.__eq__, self.adapt,
                                  found=lambda name: self.set_environment()).install()

    # -- the run's DeepSpeed ----------------------------------------------------------------

    def set_environment(self) -> None:
        """CANN's environment for the run (see the module's docstring), once."""
        if self.environ:
            return
        for name, value in CANN_ENVIRONMENT.items():
            if name not in os.environ:
                self.environ[name] = None
                os.environ[name] = value

    def adapt(self, package: Any) -> None:
        """The run's adaptations, once ``deepspeed`` has run (its ``__init__`` imports the
        engine, the ZeRO optimizers, the op builders and the accelerator)."""
        run = self
        builder = _name("deepspeed.ops.op_builder.builder", "OpBuilder")

        def load(op: Any, verbose: bool = False) -> Any:
            return run.load_op(op)

        builder.load = load
        utils = sys.modules["deepspeed.runtime.zero.utils"]
        _replace_everywhere({utils.assert_ints_same_as_other_ranks: _agree,
                             utils.assert_lst_len_same_as_other_ranks: _agree})
        pinned = self.session.pinned

        def empty_pinned(accelerator: Any, tensor: torch.Tensor, shape: Any) -> torch.Tensor:
            # pin_memory(make_copy=False), pin_empty, pin_empty_like: a pinned buffer of
            # the host's, counted as a pinned copy is (host.py)
            return pinned.add(tensor.new_empty(shape))

        accelerator = _name("deepspeed.accelerator.abstract_accelerator", "DeepSpeedAccelerator")
        accelerator._torch_empty_pinned = empty_pinned
        for (module, name), states in _STATES.items():
            self.adapt_optimizer(_name(module, name), states)
        # ZeRO-3 gathers a module's parameters (and prefetches the next ones) here
        self.wrap(_name("deepspeed.runtime.zero.partitioned_param_coordinator",
                        "PartitionedParameterCoordinator"), "fetch_sub_module", PARAMS)
        self.probe_cpu_once()
        engine = _name("deepspeed.runtime.engine", "DeepSpeedEngine")
        engine_init = engine.__init__

        def made(engine_self: Any, *args: Any, **kwargs: Any) -> None:
            engine_init(engine_self, *args, **kwargs)
            settings = run.session.stack_settings
            # the engine's settings first, the host memory its optimizer holds after them
            host = settings.pop(HOST_SETTING, None)
            settings.update(_settings(engine_self))
            if host is not None:
                settings[HOST_SETTING] = host

        engine.__init__ = made
        self.hooks.append(register_optimizer_step_pre_hook(self.before_inner_step))

    def probe_cpu_once(self) -> None:
        """``cpuinfo.get_cpu_info`` probed once per process, for the run (DECISION: it starts
        a Python process of its own each call, about a second, and DeepSpeed's CPU Adam asks
        it of every rank only to warn of fp16 on AMD CPUs; each rank would probe the same
        host)."""
        try:
            cpuinfo: Any = importlib.import_module("cpuinfo")
        except ImportError:             # DeepSpeedCPUAdam will say so itself
            return
        probe = cpuinfo.get_cpu_info

        def get_cpu_info() -> Any:
            if not _CPU_INFO:
                _CPU_INFO.update(probe())
            return dict(_CPU_INFO)

        cpuinfo.get_cpu_info = get_cpu_info
        self.restore.append((cpuinfo, "get_cpu_info", probe))

    def adapt_optimizer(self, cls: Any, states: dict[str, tuple[str, ...]]) -> None:
        """Count ``cls``'s model states by what they hold (:meth:`classify`)."""
        run = self
        init, step = cls.__init__, cls.step

        def made(opt: Any, *args: Any, **kwargs: Any) -> None:
            init(opt, *args, **kwargs)
            inner = getattr(opt, "optimizer", None)
            if inner is not None:
                run.inner.add(inner)
            run.classify(opt, states)

        def stepped(opt: Any, *args: Any, **kwargs: Any) -> Any:
            with run.new_storages(GRADS):
                done = step(opt, *args, **kwargs)
            run.classify(opt, states)
            return done

        cls.__init__ = made
        cls.step = stepped
        for name in _GRADIENT_METHODS:
            if name != "step" and name in vars(cls):
                self.wrap(cls, name, GRADS)

    def wrap(self, cls: Any, name: str, category: str) -> None:
        """The device storages ``cls.name`` makes hold ``category``."""
        method, run = getattr(cls, name), self

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            with run.new_storages(category):
                return method(*args, **kwargs)

        setattr(cls, name, wrapped)

    @contextlib.contextmanager
    def new_storages(self, category: str) -> Iterator[None]:
        """New device storages hold ``category`` in the block (the inner optimizer's own
        states stay optimizer state: the session says so while it steps)."""
        session = self.session
        previous, session.new_category = session.new_category, category
        try:
            yield
        finally:
            session.new_category = previous

    def classify(self, opt: Any, states: dict[str, tuple[str, ...]]) -> None:
        """DECISION: ZeRO's model states counted as the ZeRO paper and DeepSpeed's estimators
        count them: parameters are the 16-bit weights (ZeRO-3: its partitions and the
        parameters it keeps whole), gradients the 16-bit gradient buckets and partitions
        (and a step's fp32 gradients), optimizer state the fp32 weights and Adam's two
        moments ("optimizer states ... 32-bit weights, and the first, and second moment
        estimates", DeepSpeed's ZeRO tutorial; 12 bytes a parameter). Then the host memory
        the optimizer's CPU tensors hold (offload). O(the optimizer's tensors)."""
        session = self.session
        for category, names in states.items():
            for name in names:
                for t in _tensors(getattr(opt, name, None), _DEPTH):
                    session.classify(t, category)
        held = _host_bytes(opt, states)
        if held > self.host_peak:
            self.host_peak = held
            session.stack_settings[HOST_SETTING] = (
                f"{held:,} bytes ({format_size(held)}, at its largest)")

    def before_inner_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        """After the session's own pre-step hook, which counts an optimizer's parameters as
        parameters: a ZeRO optimizer's inner one steps the fp32 weights, which are
        optimizer state (:meth:`classify`)."""
        if optimizer in self.inner:
            for group in optimizer.param_groups:
                for p in group["params"]:
                    self.session.classify(p, OPTIM)

    def load_op(self, op: Any) -> Any:
        """``OpBuilder.load`` during the run: an op of :data:`ANSWERED_OPS`, or the stop of
        the run where DeepSpeed would build one the estimate cannot.

        DECISION: an op DeepSpeed compiles at first use (its C++ sources with CANN's headers
        and ``libascendcl``) cannot be built here, and what it does to memory is in its
        .so: the run stops at the line that asks, naming the op, rather than go on without
        it and give a silent "fits". ``cpu_adam`` (ZeRO-Offload's optimizer) is answered:
        its step updates the host's fp32 weights and Adam's moments in place and takes no
        device memory (``csrc/adam/cpu_adam_impl.cpp``, ``ds_adam_step``), which
        :class:`_CpuAdam` does.

        Raises:
            UnsupportedFeature: any other op.
        """
        session = self.session
        note = ANSWERED_OPS.get(op.name)
        if note is not None:
            if note not in session.notes:
                session.notes.append(note)
            return _CpuAdam()
        frames = session.frames()
        outside = next((f for f in frames if _PACKAGE + os.sep not in f["filename"]), None)
        called = (f" (called from {outside['filename']}:{outside['line']} in "
                  f"{outside['name']})" if outside is not None else "")
        error = UnsupportedFeature(
            f"DeepSpeed builds its C++ op {op.name!r} ({type(op).__name__}) at "
            f"{where(session)}{called}: on the machine it is compiled at first use with "
            f"CANN's toolkit, which the estimate cannot do, and what it does to memory is "
            f"in the built op. The way out: leave the feature that needs it out of the "
            f"estimate (the run has ASCEND_MEMSIM_ESTIMATE=1 in its environment); the ops "
            f"the estimate answers: {', '.join(sorted(ANSWERED_OPS))}")
        session.stop(error)
        raise error

    # -- the end ------------------------------------------------------------------------------

    def undo(self) -> None:
        """Put back what the run changed: DeepSpeed's modules, the environment, the logger,
        the hooks."""
        for hook in self.hooks:
            hook.remove()
        for owner, name, value in reversed(self.restore):
            setattr(owner, name, value)
        _put_back(self.classes)
        self.finder.remove()
        for name in [n for n in sys.modules if _ours(n)]:
            del sys.modules[name]
        sys.modules.update(self.hidden)
        for name, value in self.environ.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        _restore_logger(self.logger)
        self.session.notes[:] = [note for note in self.session.notes
                                 if not _import_compile_note(note)]


#: what ``zero.Init`` sets on torch's classes (``partition_parameters.py``,
#: ``patch_init_and_builtins``) and does not take away
_ZERO_INIT_NAMES = ((torch.nn.Module, ("__init_subclass__", "_old_init_subclass", "_old_apply",
                                       "apply")),
                    (torch.Tensor, ("__old_new__", "__new__")))
_ABSENT = object()


def _torch_classes() -> list[tuple[type, str, Any]]:
    """The class attributes of :data:`_ZERO_INIT_NAMES` as they are (:data:`_ABSENT` where
    the class's own ``__dict__`` has none)."""
    return [(cls, name, vars(cls).get(name, _ABSENT))
            for cls, names in _ZERO_INIT_NAMES for name in names]


def _put_back(saved: list[tuple[type, str, Any]]) -> None:
    """Make each class attribute of ``saved`` what it was."""
    for cls, name, value in saved:
        if vars(cls).get(name, _ABSENT) is value:
            continue
        if value is _ABSENT:
            delattr(cls, name)
        else:
            setattr(cls, name, value)


def _import_compile_note(note: str) -> bool:
    """Whether ``note`` is the session's note of a ``torch.compile`` that one of DeepSpeed's
    modules applies as it is imported.

    DECISION: DeepSpeed decorates its Muon optimizer's functions with ``torch.compile`` when
    it imports them (``deepspeed/runtime/zero/muon/original_muon.py``), which the session
    notes as a compiled graph run eagerly; that is DeepSpeed's import, not the script's
    compile, and it would be said of every ZeRO run (DeepSpeed imports Muon to check the
    optimizer's type): left out of the result."""
    return (note.startswith("torch.compile at") and " in <module> " in note
            and f"{os.sep}{_PACKAGE}{os.sep}" in note)


def _name(module: str, name: str) -> Any:
    """``module.name`` of the run's DeepSpeed (imported by then: ``deepspeed/__init__.py``
    imports the engine, the ZeRO optimizers, the op builders and the accelerator).

    Raises:
        RuntimeError: this DeepSpeed has not that name (a release the adaptations do not
            know).
    """
    found = getattr(sys.modules.get(module), name, None)
    if found is None:
        raise RuntimeError(f"the estimate adapts DeepSpeed 0.17 and later, whose {module} "
                           f"has {name}; this DeepSpeed has not")
    return found


def _logger_state() -> tuple[Any, list, int, bool] | None:
    """The ``DeepSpeed`` logger's handlers, level and propagation, if it exists."""
    known = logging.Logger.manager.loggerDict.get("DeepSpeed")
    if not isinstance(known, logging.Logger):
        return None
    return known, list(known.handlers), known.level, known.propagate


def _restore_logger(state: tuple[Any, list, int, bool] | None) -> None:
    known = logging.Logger.manager.loggerDict.get("DeepSpeed")
    if not isinstance(known, logging.Logger):
        return
    if state is None:
        known.handlers.clear()
        return
    _, handlers, level, propagate = state
    known.handlers[:] = handlers
    known.setLevel(level)
    known.propagate = propagate


def _replace_everywhere(replace: dict[Any, Any]) -> None:
    """Each of DeepSpeed's modules that holds a key of ``replace`` under any name holds its
    value instead (``from ... import name`` copies a function into the importer).
    O(DeepSpeed's module-level names)."""
    for name, module in list(sys.modules.items()):
        if not _ours(name) or module is None:
            continue
        for attr, value in list(vars(module).items()):
            try:
                new = replace.get(value)
            except TypeError:           # an unhashable value
                continue
            if new is not None:
                setattr(module, attr, new)


def _agree(values: Any) -> None:
    """DeepSpeed's cross-rank checks during the run: the ranks agree (see the module's
    docstring)."""
    return None


def _tensors(value: Any, depth: int) -> Iterator[torch.Tensor]:
    """The tensors in ``value``: a tensor, or lists, tuples, dicts and objects with a
    ``buffer`` (DeepSpeed's buckets) holding them, ``depth`` levels down."""
    if isinstance(value, torch.Tensor):
        yield value
        return
    if depth <= 0 or value is None:
        return
    if isinstance(value, dict):
        value = list(value.values())
    elif hasattr(value, "buffer") and not isinstance(value, (list, tuple)):
        value = [value.buffer]
    if isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item, depth - 1)


def _host_bytes(opt: Any, states: dict[str, tuple[str, ...]]) -> int:
    """The host memory a ZeRO optimizer's model states hold (offload): each CPU storage
    once, of its attributes of ``states`` and of its inner optimizer's parameters, their
    gradients and its states. O(those tensors)."""
    found = [t for names in states.values() for name in names
             for t in _tensors(getattr(opt, name, None), _DEPTH)]
    inner = getattr(opt, "optimizer", None)
    if isinstance(inner, torch.optim.Optimizer):
        for group in inner.param_groups:
            for p in group["params"]:
                found.append(p)
                if p.grad is not None:
                    found.append(p.grad)
        for state in inner.state.values():
            found.extend(v for v in state.values() if isinstance(v, torch.Tensor))
    seen: dict[int, int] = {}
    for t in found:
        if t.device.type == "cpu":
            storage = t.untyped_storage()
            seen[storage._cdata] = storage.nbytes()
    return sum(seen.values())


def _count(value: Any) -> str:
    """A count of elements as the summary writes it: 500,000,000."""
    return f"{int(value):,}"


def _settings(engine: Any) -> dict[str, str]:
    """The DeepSpeed settings that shape a rank's memory, as its configuration names them."""
    stage = engine.zero_optimization_stage()
    out = {"zero_optimization.stage": str(stage),
           "precision": ("bf16" if engine.bfloat16_enabled() else
                         "fp16" if engine.fp16_enabled() else "fp32"),
           "train_micro_batch_size_per_gpu": str(engine.train_micro_batch_size_per_gpu()),
           "gradient_accumulation_steps": str(engine.gradient_accumulation_steps())}
    if stage:
        out["reduce_bucket_size"] = _count(engine.zero_reduce_bucket_size())
        out["overlap_comm"] = str(engine.zero_overlap_comm()).lower()
        out["contiguous_gradients"] = str(engine.zero_contiguous_gradients()).lower()
    if stage in (1, 2):
        out["allgather_bucket_size"] = _count(engine.zero_allgather_bucket_size())
    if stage == 3:
        out["stage3_prefetch_bucket_size"] = _count(engine.zero_prefetch_bucket_size())
        out["stage3_max_live_parameters"] = _count(engine.zero_max_live_parameters())
        out["stage3_param_persistence_threshold"] = _count(
            engine.zero_param_persistence_threshold())
    for key, offload in (("offload_optimizer", engine.zero_offload_optimizer()),
                         ("offload_param", engine.zero_offload_param())):
        device = getattr(offload, "device", None)
        # an enum, or its value (DeepSpeed's config models keep enum values)
        device = getattr(device, "value", device)
        if device not in (None, "none"):
            pinned = " (pin_memory)" if getattr(offload, "pin_memory", False) else ""
            out[key] = f"{device}{pinned}"
    return out


class _CpuAdam:
    """DeepSpeed's ``cpu_adam`` op as the machine's build answers it
    (``csrc/adam/cpu_adam.cpp``: ``create_adam``, ``adam_update``, ``destroy_adam``): Adam's
    step on the host's tensors, in place (AdamW's decoupled weight decay or Adam's L2 term,
    as the optimizer was made). O(the parameter's elements) on the host; no device memory.
    A step's rollback and ZenFlow's functions are not modelled."""

    def __init__(self) -> None:
        #: optimizer id -> whether it is AdamW
        self.adamw: dict[int, bool] = {}

    def create_adam(self, opt_id: int, lr: float, beta1: float, beta2: float, eps: float,
                    weight_decay: float, adamw_mode: bool, *args: Any) -> int:
        self.adamw[opt_id] = bool(adamw_mode)
        return 0

    def destroy_adam(self, opt_id: int) -> int:
        self.adamw.pop(opt_id, None)
        return 0

    def adam_update(self, opt_id: int, step: int, lr: float, beta1: float, beta2: float,
                    eps: float, weight_decay: float, bias_correction: bool,
                    params: torch.Tensor, grads: torch.Tensor, exp_avg: torch.Tensor,
                    exp_avg_sq: torch.Tensor) -> int:
        adamw = self.adamw.get(opt_id, True)
        with torch.no_grad():
            grad = grads.to(exp_avg.dtype)
            if weight_decay and not adamw:
                grad = grad.add(params.to(exp_avg.dtype), alpha=weight_decay)
            exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
            exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            first = 1 - beta1 ** step if bias_correction else 1.0
            second = 1 - beta2 ** step if bias_correction else 1.0
            denominator = exp_avg_sq.sqrt().div_(math.sqrt(second)).add_(eps)
            if weight_decay and adamw:
                params.mul_(1 - lr * weight_decay)
            params.addcdiv_(exp_avg.to(params.dtype), denominator.to(params.dtype),
                            value=-lr / first)
        return 0

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"DeepSpeed's cpu_adam op: {name} is not modelled by the "
                             f"estimate (a step's rollback, ZenFlow's overlapped optimizer)")


def install(session: Any) -> Callable[[], None]:
    """Ready DeepSpeed's adaptations for ``session``'s run (they take effect if the script
    imports deepspeed); a callable that undoes them. O(imported modules)."""
    return _Run(session).undo
