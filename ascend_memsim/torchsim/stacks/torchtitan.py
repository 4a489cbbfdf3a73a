"""torchtitan under an estimate, as torchtitan-npu runs it: torchtitan's own training entry
point (``python -m torchtitan.train --module llama3 --config llama3_debugmodel ...``, its
``Trainer``) on the simulated NPU, each rank of ``estimate --world-size N`` (or of a
``torchrun`` command) a process of its own, FSDP2, tensor parallelism and activation
checkpointing applied by torchtitan from its own settings.

torchtitan-npu (hicann/torchtitan-npu at e0aecaf0, ``torchtitan_npu/entry.py``, ``main``)
is torchtitan's ``train.main`` with patches applied at its import; its wheel needs the real
torch_npu, so an estimate runs
torchtitan itself and makes torchtitan-npu's choices that reach memory for it
(:func:`install`, each when its torchtitan module is imported):

- **the device**: torchtitan picks its device once, at the import of
  ``torchtitan.tools.utils`` (``get_device_info``: torch's ``_get_available_device_type``),
  and copies it by name into the modules that import it. Under an estimate that is "npu",
  as with torch_npu imported; a torchtitan imported before the run (no NPU then: "cuda")
  has the choice made again as the run starts, as a new process would make it, and put
  back when it ends.
- **the attention**: torchtitan-npu's entry replaces each decoder layer's FlexAttention
  (torchtitan's default for its language models) with ``ScaledDotProductAttention``
  (``_SKIP_FLEX_TO_SDPA_REWRITE_MODELS`` keeps it for ``vlm``), as FlexAttention has no NPU
  kernel (torch refuses an ``npu`` tensor in it); on the NPU torch_npu serves SDPA with its
  fused attention (``npu_fusion_attention``, which the estimate counts as such). Done here
  after torchtitan's ``ConfigManager.parse_args`` (:func:`npu_attention`), where the entry
  does it.
- **the settings that shape the peak** (parallel degrees, local batch and sequence,
  gradient accumulation, activation checkpointing, FSDP2's mixed precision and resharding,
  the optimizer, the attention) go into the session's ``stack_settings`` when
  ``Trainer.init_distributed`` has made the device meshes (:func:`trainer_settings`),
  which is where torchtitan-npu takes hold of the trainer's config too
  (``patches/torchtitan/trainer_init_distributed.py``).
- **the end of training**: rank 0 sleeps 2 seconds "for other ranks to complete"
  (``Trainer.train``); ranks here run one after another, none is left to wait for, so its
  ``time.sleep`` does nothing. DECISION: a wait with no effect on memory is skipped.

Between ranks (:mod:`.process_state`): spmd_types' mesh-axis names and mesh stack
(torchtitan's default ``spmd_backend``), which its own ``_reset`` and
``_clear_mesh_stack`` forget.

What torchtitan-npu changes that is not reproduced is listed, with its effect on memory, in
``docs/guide/stack-torchtitan.md``. Written against torchtitan 0.3.0 (its ``--module`` /
``--config`` registry; the TOML ``--job.config_file`` of earlier releases is gone).

Nothing here imports torchtitan: each adaptation is applied when its module is imported
(already, or later by the script, through a hook first on ``sys.meta_path``), and undone
when the run ends.
"""

from __future__ import annotations

import importlib
import importlib.abc
import sys
import time
from collections.abc import Callable
from typing import Any

from . import process_state
from .imports import Adaptations

__all__ = ["install", "npu_attention", "trainer_settings"]

#: the models whose FlexAttention torchtitan-npu's entry keeps
#: (``torchtitan_npu/entry.py``, ``_SKIP_FLEX_TO_SDPA_REWRITE_MODELS``)
KEEP_FLEX = frozenset({"vlm"})

def install(session: Any) -> Callable[[], None]:
    """Apply this module's adaptations for ``session``'s run (each when its torchtitan
    module is imported); a callable that undoes them."""
    run = Adaptations(session)
    run.watch("torchtitan.tools.utils", _choose_device)
    run.watch("torchtitan.config.manager", _npu_config)
    run.watch("torchtitan.trainer", _trainer)
    return run.undo


# -- the device ----------------------------------------------------------------------------


def _choose_device(utils: Any, session: Any) -> Callable[[], None]:
    """Make torchtitan's device choice afresh (``get_device_info``), in
    ``torchtitan.tools.utils`` and in each torchtitan module that copied it by name; the
    old choice is put back in the modules that held it when the run ends."""
    old = (utils.device_type, utils.device_module)
    new = utils.get_device_info()
    changed: list[Any] = []
    if new != old:
        for name, module in list(sys.modules.items()):
            if (name.startswith("torchtitan.") and module is not None
                    and getattr(module, "device_type", None) == old[0]
                    and getattr(module, "device_module", old[1]) is old[1]):
                changed.append(module)
                _set_choice(module, new)

    def undo() -> None:
        for module in changed:
            _set_choice(module, old)

    return undo


def _set_choice(module: Any, choice: tuple[str, Any]) -> None:
    module.device_type = choice[0]
    if hasattr(module, "device_module"):
        module.device_module = choice[1]


# -- the attention -------------------------------------------------------------------------


def npu_attention(config: Any) -> int:
    """Replace each decoder layer's FlexAttention of the trainer config ``config`` with
    ``ScaledDotProductAttention``, as torchtitan-npu's entry does (``torchtitan_npu/entry.py``,
    ``main``: not for the models of :data:`KEEP_FLEX`, nor for a model that is not a
    ``Decoder``); the number of layers changed. O(layers)."""
    common = importlib.import_module("torchtitan.models.common")
    decoder = importlib.import_module("torchtitan.models.common.decoder")
    flex, sdpa = common.FlexAttention, common.ScaledDotProductAttention
    spec = getattr(config, "model_spec", None)
    if (spec is None or spec.name in KEEP_FLEX
            or not isinstance(spec.model, decoder.Decoder.Config)):
        return 0
    changed = 0
    for layer in spec.model.layers:
        attention = layer.attention
        if isinstance(getattr(attention, "inner_attention", None), flex.Config):
            attention.inner_attention = sdpa.Config()
            # the torchtitan torchtitan-npu follows has the mask's kind on the layer's
            # attention; the entry sets it to "causal" (0.3.0 has no such field)
            if hasattr(attention, "mask_type"):
                attention.mask_type = "causal"
            changed += 1
    return changed


def _npu_config(manager: Any, session: Any) -> Callable[[], None]:
    """Patch ``ConfigManager.parse_args``: the config it gives has torchtitan-npu's
    attention (:func:`npu_attention`), noted in the settings."""
    owner = manager.ConfigManager
    parse_args = owner.__dict__["parse_args"]

    def npu_parse_args(self: Any, *args: Any, **kwargs: Any) -> Any:
        config = parse_args(self, *args, **kwargs)
        if npu_attention(config):
            session.stack_settings["attention"] = (
                "SDPA (npu_fusion_attention), FlexAttention replaced as torchtitan-npu's "
                "entry does")
        return config

    npu_parse_args.__wrapped__ = parse_args  # type: ignore[attr-defined]
    owner.parse_args = npu_parse_args

    def undo() -> None:
        owner.parse_args = parse_args

    return undo


# -- the trainer ---------------------------------------------------------------------------


class _NoWait:
    """``time`` as ``torchtitan.trainer`` uses it, without its sleep (the module's
    DECISION)."""

    @staticmethod
    def sleep(seconds: float) -> None:
        return None

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


def trainer_settings(config: Any, parallel_dims: Any) -> dict[str, str]:
    """The settings of a torchtitan ``Trainer.Config`` ``config`` and its ``ParallelDims``
    that shape the device's peak, by name: what the summary's settings line says."""
    degrees = [(name, getattr(parallel_dims, attr, 1)) for name, attr in (
        ("dp_replicate", "dp_replicate"), ("dp_shard", "dp_shard"), ("cp", "cp"),
        ("tp", "tp"), ("pp", "pp"), ("ep", "ep"))]
    parallelism = config.parallelism
    used = [f"{name} {degree}" + (" (FSDP2)" if name == "dp_shard" else "")
            + (" (sequence parallel)" if name == "tp" and parallelism.enable_sequence_parallel
               else "")
            for name, degree in degrees if degree > 1]
    training = config.training
    batch_degree = parallel_dims.dp_replicate * parallel_dims.dp_shard
    global_batch = training.global_batch_size
    if global_batch < 0:
        global_batch = training.local_batch_size * batch_degree
    checkpointing = config.activation_checkpoint
    settings = {
        "parallelism": ", ".join(used) if used else "none",
        "local batch": f"{training.local_batch_size} x {training.seq_len} tokens",
        # torchtitan/trainer.py: global batch // (local batch x data-parallel degree)
        "gradient accumulation": str(max(1, global_batch // max(
            1, training.local_batch_size * batch_degree))),
        "activation checkpointing": ("none" if checkpointing is None else
                                     type(checkpointing).__qualname__.split(".")[0]),
        "mixed precision": (f"params {training.mixed_precision_param}, reduce "
                            f"{training.mixed_precision_reduce} (FSDP2)"),
        "FSDP reshard after forward": str(parallelism.fsdp_reshard_after_forward),
    }
    optimizer = getattr(config, "optimizer", None)
    groups = getattr(optimizer, "param_groups", None) or []
    names = sorted({str(getattr(g, "optimizer_name", "?")) for g in groups})
    if names:
        settings["optimizer"] = (f"{'/'.join(names)} "
                                 f"({getattr(optimizer, 'implementation', '?')})")
    if training.enable_cpu_offload:
        settings["CPU offload"] = "on"
    return settings


def _trainer(trainer: Any, session: Any) -> Callable[[], None]:
    """Patch ``torchtitan.trainer``: ``Trainer.init_distributed`` notes the settings
    (:func:`trainer_settings`); its ``time`` does not sleep (the module's DECISION)."""
    owner = trainer.Trainer
    init_distributed = owner.__dict__["init_distributed"]

    def noted_init_distributed(self: Any, *args: Any, **kwargs: Any) -> Any:
        parallel_dims = init_distributed(self, *args, **kwargs)
        session.stack_settings.update(trainer_settings(self.config, parallel_dims))
        return parallel_dims

    noted_init_distributed.__wrapped__ = init_distributed  # type: ignore[attr-defined]
    owner.init_distributed = noted_init_distributed
    clock = trainer.time
    trainer.time = _NoWait()

    def undo() -> None:
        owner.init_distributed = init_distributed
        trainer.time = clock

    return undo


# -- between ranks -------------------------------------------------------------------------


def _spmd_mesh_axes(module: Any) -> None:
    # spmd_types/_mesh_axis.py: the names given to each mesh axis and the process groups'
    # axes; _reset is its own ("when the distributed environment is torn down")
    module._reset()


def _spmd_state(module: Any) -> None:
    # spmd_types/_state.py: the stack of meshes entered (thread-local)
    module._clear_mesh_stack()


process_state.register("spmd_types._mesh_axis", _spmd_mesh_axes)
process_state.register("spmd_types._state", _spmd_state)
