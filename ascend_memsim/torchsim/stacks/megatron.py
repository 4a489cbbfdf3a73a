"""Megatron-core under an estimate: its own code runs, its local layers (the spec without
Transformer Engine, ``get_gpt_layer_local_spec``), its tensor, pipeline and data parallel
groups, its ``DistributedDataParallel`` and distributed optimizer, each rank on its card.

What Megatron-core finds on an Ascend machine without Transformer Engine and Apex, it falls
back from by itself (it warns at import): ``WrappedTorchNorm`` for the norms
(``megatron/core/models/backends.py``), torch's ``Adam``/``AdamW`` for the optimizer and the
local ``multi_tensor_applier`` / ``multi_tensor_l2norm`` / ``multi_tensor_scale``
(``megatron/core/optimizer/__init__.py``, ``optimizer.py``, ``clip_grads.py``); ``torch.cuda``
is the NPU through ``torch_npu.contrib.transfer_to_npu``, as Ascend's migration guide has it.
What this module adds while an estimate runs (:func:`install`; each change is made when the
module it concerns is imported, at once if it already is, and undone when the run ends):

- **Parameter types**: Megatron-core picks the parameters its optimizers copy to fp32 by
  their CUDA type names (``param.type() in ['torch.cuda.HalfTensor',
  'torch.cuda.BFloat16Tensor']``: ``DistributedOptimizer._build_model_and_main_param_groups``,
  ``Float16OptimizerWithFloat16Params.__init__``; ``clip_grads.py`` asserts
  ``'torch.cuda.FloatTensor'``), where torch_npu's tensors answer ``torch.npu.*``. MindSpeed,
  through which Megatron runs on Ascend, renames them (``mindspeed/megatron_adaptor.py``,
  ``torch_adaptation``: ``type_wrapper`` on ``torch.Tensor.type``). DECISION: the same rename
  while Megatron-core is imported, and the run says so in a note.
- **What its buffers hold** (the summary's categories): each ``_ParamAndGradBuffer``'s
  ``grad_data`` (the main gradients, ``param.main_grad`` views into it) counts as gradients
  and its ``param_data`` (the parameters' storage under the distributed optimizer) as
  parameters; the fp32 main parameters of a mixed-precision optimizer
  (``shard_fp32_from_float16_groups``, ``fp32_from_float16_groups``) count as optimizer
  state, as Megatron's own figures count them (``docs/user-guide/features/dist_optimizer.md``:
  "bf16 parameters, fp32 gradients: 6 + 12/d" bytes a parameter, the 12 being the fp32 main
  parameter and Adam's two states, sharded over the d data-parallel ranks).
- **Process state**: the ranks of an estimate run one after another in this process, so what
  Megatron-core keeps for its process (the parallel groups and the global memory buffer of
  ``parallel_state``, the RNG tracker, the micro-batch calculator, the rerun state machine)
  is forgotten before each rank (:mod:`.process_state`).
- **Settings**: the parallel layout (TP, PP and this rank's stage, DP, CP, sequence
  parallel, virtual stages), the distributed optimizer and the main gradients' dtype, the
  micro-batches of each step and the recompute settings go to the result's settings line.

What Megatron-core itself refuses without Transformer Engine or Apex (the estimate reports its
error, as the machine would): sequence parallel (``WrappedTorchNorm``: "sequence parallel not
supported by torch LayerNorm"), context parallel (``DotProductAttention``: "Context
parallelism is only supported by TEDotProductAttention!"), and the fused kernels it imports
by name when asked for (``masked_softmax_fusion`` with 16-bit inputs,
``gradient_accumulation_fusion``), which MindSpeed replaces on Ascend.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import torch

from ..categories import GRADS, OPTIM, PARAMS
from . import process_state
from .imports import AfterImport

__all__ = ["install", "TYPE_NOTE", "JIT_NOTE"]

#: the note of a run in which torch.Tensor.type() gave CUDA names (see the module)
TYPE_NOTE = ("Tensor.type() gave torch.cuda.* names for NPU tensors while Megatron-core ran, "
             "as MindSpeed's adaptor makes it (Megatron-core's optimizers pick their fp32 "
             "main parameters by those names)")


#: the note of a run that imported megatron.core.jit (see _eager_jit)
JIT_NOTE = ("Megatron-core's jit_fuser functions ran eagerly, operator by operator, as "
            "MindSpeed runs them on Ascend (its jit_fuser off)")


# -- process state, forgotten before each rank ----------------------------------------------

def _calling(name: str) -> Callable[[Any], None]:
    """A reset that calls the module's own ``name`` (Megatron's reset of that state), if
    the installed Megatron-core has it."""
    def reset(module: Any) -> None:
        destroy = getattr(module, name, None)
        if destroy is not None:
            destroy()

    return reset


def _forget_rng_tracker(module: Any) -> None:
    if hasattr(module, "_CUDA_RNG_STATE_TRACKER"):
        module._CUDA_RNG_STATE_TRACKER = None
        module._CUDA_RNG_STATE_TRACKER_INITIALIZED = False


# parallel_state.destroy_model_parallel: Megatron's own reset of its groups and of the global
# memory buffer (whose tensors are on the last rank's card)
process_state.register("megatron.core.parallel_state", _calling("destroy_model_parallel"))
process_state.register("megatron.core.tensor_parallel.random", _forget_rng_tracker)
process_state.register("megatron.core.num_microbatches_calculator",
                       _calling("destroy_num_microbatches_calculator"))
process_state.register("megatron.core.rerun_state_machine",
                       _calling("destroy_rerun_state_machine"))


# -- the run ---------------------------------------------------------------------------------

_ABSENT = object()


class _Run:
    """One estimate's changes to Megatron-core: ``patch`` keeps what it replaced, ``undo``
    puts it back."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.saved: list[tuple[Any, str, Any]] = []
        self.done: set[str] = set()
        #: whether a Megatron-core module was loaded during the run, and the jit_fuser
        #: turned off (noted at the end only if the run used Megatron-core)
        self.loaded = self.jit_off = False

    def patch(self, owner: Any, name: str, value: Any) -> None:
        # a class's own entry (an inherited method, torch.Tensor.type, has none: undone by
        # removing ours)
        self.saved.append((owner, name, owner.__dict__.get(name, _ABSENT)))
        setattr(owner, name, value)

    def used(self) -> bool:
        """Whether the run used Megatron-core: a module of it loaded during the run, or its
        parallel state made (the state of an earlier run is forgotten at the start of each,
        :mod:`.process_state`)."""
        state = sys.modules.get("megatron.core.parallel_state")
        made = getattr(state, "model_parallel_is_initialized", None)
        return self.loaded or (made is not None and bool(made()))

    def undo(self) -> None:
        if self.jit_off and self.used() and JIT_NOTE not in self.session.notes:
            self.session.notes.append(JIT_NOTE)
        while self.saved:
            owner, name, value = self.saved.pop()
            if value is _ABSENT:
                delattr(owner, name)
            else:
                setattr(owner, name, value)

    def adapt(self, name: str, module: Any) -> None:
        """Make the changes that concern the module ``name``, once a run."""
        if name in self.done:
            return
        self.done.add(name)
        _ADAPT[name](self, module)

    def active(self) -> bool:
        from ..torch_npu.npu import active

        return active() is self.session


def _cuda_type_names(run: _Run, module: Any) -> None:
    """``torch.Tensor.type()`` with the CUDA names for NPU tensors (see the module)."""
    type_ = torch.Tensor.type
    session = run.session

    def type(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        out = type_(self, *args, **kwargs)
        if isinstance(out, str) and out.startswith("torch.npu."):
            if TYPE_NOTE not in session.notes and run.active():
                session.notes.append(TYPE_NOTE)
            return "torch.cuda." + out[len("torch.npu."):]
        return out

    run.patch(torch.Tensor, "type", type)


def _eager_jit(run: _Run, module: Any) -> None:
    """Megatron-core's ``jit_fuser`` off (its own ``disable_jit_fuser``) for the modules
    imported from now on, as MindSpeed turns it off (``megatron.core.jit.jit_fuser =
    dummy_jit``, ``mindspeed/megatron_adaptor.py``); the fake tensors run a compiled function
    eagerly in any case (:mod:`..limits`), and the run says it once, not once a function."""
    if not hasattr(module, "disable_jit_fuser"):
        return
    before = module.jit_fuser
    module.disable_jit_fuser()
    run.saved.append((module, "jit_fuser", before))
    run.jit_off = True


def _buffers(run: _Run, module: Any) -> None:
    """A ``_ParamAndGradBuffer``'s storages counted as what they hold."""
    buffer = getattr(module, "_ParamAndGradBuffer", None) or \
        getattr(module, "ParamAndGradBuffer", None)
    if buffer is None:
        return
    init = buffer.__init__
    session = run.session

    def __init__(self: Any, ddp_config: Any, *args: Any, **kwargs: Any) -> None:
        init(self, ddp_config, *args, **kwargs)
        if not run.active():
            return
        session.classify(getattr(self, "grad_data", None), GRADS)
        if getattr(self, "param_data", None) is not None:
            session.classify(self.param_data, PARAMS)
        _note_ddp(session, ddp_config, getattr(self, "grad_dtype", None))

    run.patch(buffer, "__init__", __init__)


def _optimizers(run: _Run, module: Any) -> None:
    """The fp32 main parameters of Megatron's mixed-precision optimizers counted as
    optimizer state, at their making and at each step (the session's own step hook counts
    an optimizer's parameters as parameters first)."""
    for cls in (getattr(module, "Float16OptimizerWithFloat16Params", None),
                getattr(module, "DistributedOptimizer", None)):
        if cls is not None and "__init__" in cls.__dict__:
            run.patch(cls, "__init__", _main_params_as_state(run, cls.__init__))


def _main_params_as_state(run: _Run, init: Callable[..., None]) -> Callable[..., None]:
    session = run.session

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        if not run.active():
            return
        groups = (getattr(self, "shard_fp32_from_float16_groups", None)
                  or getattr(self, "fp32_from_float16_groups", None) or [])
        main = [p for group in groups for p in group if p is not None]

        def classify(*_: Any) -> None:
            if run.active():
                for p in main:
                    session.classify(p, OPTIM)

        classify()
        inner = getattr(self, "optimizer", None)
        if main and inner is not None:
            # after the session's global pre-hook, which counts the parameters it steps as
            # parameters (torch runs the global pre-hooks first: Optimizer.profile_hook_step)
            inner.register_step_pre_hook(classify)
            inner.register_step_post_hook(classify)

    return __init__


_SCHEDULES = {"forward_backward_no_pipelining": "no pipelining",
              "forward_backward_pipelining_without_interleaving": "1F1B",
              "forward_backward_pipelining_with_interleaving": "interleaved 1F1B"}


def _schedules(run: _Run, module: Any) -> None:
    """The micro-batches of each step, as the script gives them to the schedule."""
    session = run.session
    for name, label in _SCHEDULES.items():
        schedule = getattr(module, name, None)
        if schedule is not None:
            run.patch(module, name, _noting_schedule(run, session, schedule, label))


def _noting_schedule(run: _Run, session: Any, schedule: Callable[..., Any],
                     label: str) -> Callable[..., Any]:
    def forward_backward(*args: Any, **kwargs: Any) -> Any:
        if run.active():
            _note_layout(session)
            count, size = kwargs.get("num_microbatches"), kwargs.get("micro_batch_size")
            length = kwargs.get("seq_length")
            _note(session, "micro-batches",
                  f"{count} x {size} x {length} tokens ({label}"
                  + (", forward only)" if kwargs.get("forward_only") else ")"))
            config = _model_config(kwargs.get("model"))
            if config is not None:
                _note_config(session, config)
        return schedule(*args, **kwargs)

    return forward_backward


def _model_config(model: Any) -> Any:
    chunk = model[0] if isinstance(model, (list, tuple)) and model else model
    return getattr(chunk, "config", None)


# -- settings --------------------------------------------------------------------------------

def _note(session: Any, name: str, value: str) -> None:
    session.stack_settings[name] = value


def _note_layout(session: Any) -> None:
    """The parallel layout of this rank, from ``parallel_state`` once it is initialised."""
    state = sys.modules.get("megatron.core.parallel_state")
    try:
        if state is None or not state.model_parallel_is_initialized():
            return
    except AttributeError:      # a Megatron-core without it
        return
    version = getattr(sys.modules.get("megatron.core.package_info"), "__version__", "")
    _note(session, "Megatron-core", version or "?")
    pp = state.get_pipeline_model_parallel_world_size()
    _note(session, "TP", str(state.get_tensor_model_parallel_world_size()))
    _note(session, "PP", f"{pp} (stage {state.get_pipeline_model_parallel_rank()})")
    virtual = state.get_virtual_pipeline_model_parallel_world_size()
    if virtual:
        _note(session, "virtual stages", str(virtual))
    _note(session, "DP", str(state.get_data_parallel_world_size()))
    _note(session, "CP", str(state.get_context_parallel_world_size()))


def _note_ddp(session: Any, ddp_config: Any, grad_dtype: Any) -> None:
    _note_layout(session)
    _note(session, "distributed optimizer",
          "on" if getattr(ddp_config, "use_distributed_optimizer", False) else "off")
    if grad_dtype is not None:
        _note(session, "main gradients", str(grad_dtype).replace("torch.", ""))
    if getattr(ddp_config, "overlap_grad_reduce", False):
        _note(session, "overlap grad reduce", f"on (buckets of {ddp_config.bucket_size})")


def _note_config(session: Any, config: Any) -> None:
    _note(session, "sequence parallel", "on" if config.sequence_parallel else "off")
    granularity = getattr(config, "recompute_granularity", None)
    if granularity:
        method = getattr(config, "recompute_method", None)
        layers = getattr(config, "recompute_num_layers", None)
        _note(session, "recompute", granularity
              + (f", {method} x {layers} layers" if method else ""))
    else:
        _note(session, "recompute", "off")


# -- when a module is imported ---------------------------------------------------------------

#: module name -> the change to make when it is imported
_ADAPT: dict[str, Callable[[_Run, Any], None]] = {
    "megatron.core": _cuda_type_names,
    "megatron.core.jit": _eager_jit,
    "megatron.core.distributed.param_and_grad_buffer": _buffers,
    "megatron.core.optimizer.optimizer": _optimizers,
    "megatron.core.optimizer.distrib_optimizer": _optimizers,
    "megatron.core.pipeline_parallel.schedules": _schedules,
}


def install(session: Any) -> Callable[[], None]:
    """Adapt Megatron-core for ``session``'s run (see the module), now for what is imported
    and at their import for the rest; the callable that undoes it. O(1) when the script
    never imports Megatron-core."""
    run = _Run(session)

    def loaded(module: Any) -> None:
        run.loaded = True
        run.adapt(module.__name__, module)

    finder = AfterImport(_ADAPT.__contains__, loaded).install()
    for name in _ADAPT:
        module = sys.modules.get(name)
        if module is not None:
            run.adapt(name, module)

    def undo() -> None:
        finder.remove()
        run.undo()

    return undo
