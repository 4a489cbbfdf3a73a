"""Hugging Face's training stack under an estimate: transformers' ``Trainer`` and what trains
through it (TRL's ``SFTTrainer``, PEFT's adapters, LLaMA-Factory's ``run_exp``), run as they
are, with three things adapted for the run (:func:`install`, taking effect when the script
imports each library):

- **checkpoints in safetensors** (``safetensors.torch.save_file`` / ``save``, which
  ``PreTrainedModel.save_pretrained``, PEFT's adapter save and accelerate's save all call):
  safetensors writes a tensor's bytes from its ``data_ptr()`` (``safetensors/torch.py``,
  ``_to_ndarray``), which for a fake tensor is no memory of its own (the process crashes,
  or writes whatever lies there). DECISION: a save
  with fake tensors writes a valid safetensors file of the real file's size and layout
  (header: each tensor's dtype, shape and offsets, as ``safetensors``' format document
  says), whose data is a hole: zeros that take no disk (a sparse file), written in the time
  of the header whatever the model's size. The header's metadata says so
  (``"ascend_memsim"``); the format gives a loader outside an estimate no way to refuse it,
  so outside one such a file loads as zeros. Inside one, a resume reads it back as any
  checkpoint (its tensors go to the NPU as fake tensors of their shapes).
- **cached device probes**: transformers' ``is_torch_npu_available``
  (``transformers/utils/import_utils.py``) and accelerate's ``is_npu_available``
  (``accelerate/utils/imports.py``) keep their first answer (``functools.lru_cache``); asked
  before an estimate (no NPU outside one) they would answer "no NPU" inside it, and asked
  inside one "NPU" after it. Their caches are emptied as the run starts and again as it
  ends, so each run asks afresh, as a process of its own would.
- **the settings that shape the peak**: ``Trainer.train`` notes the micro-batch, gradient
  accumulation, precision, gradient checkpointing, optimizer, the PEFT adapter (PEFT's own
  ``get_nb_trainable_parameters``), data parallelism, and LLaMA-Factory's or TRL's own
  settings, into the session's ``stack_settings``, which the estimate prints as one line.

Nothing here imports a Hugging Face library: each adaptation is applied when its module is
imported (already, or later by the script: a post-import hook on ``sys.meta_path``), and
undone when the run ends.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

from .imports import Adaptations

__all__ = ["install", "trainer_settings", "sparse_safetensors_header", "MARK"]

#: the metadata entry a checkpoint written from fake tensors carries
MARK = ("ascend_memsim", "written by an ascend-memsim estimate from fake tensors: shapes and "
        "dtypes, the data a hole of zeros, not weights")

#: modules whose functools caches of device probes are emptied as a run starts and ends
_PROBES = ("transformers.utils.import_utils", "accelerate.utils.imports")


def install(session: Any) -> Callable[[], None]:
    """Apply this module's adaptations for ``session``'s run (each when its library is
    imported); a callable that undoes them."""
    run = Adaptations(session)
    run.watch("safetensors.torch", _save_shapes)
    run.watch("transformers.trainer", _note_settings)
    _forget_probes()

    def undo() -> None:
        run.undo()
        _forget_probes()

    return undo


# -- the device probes' caches ---------------------------------------------------------------


def _forget_probes() -> None:
    """Empty the functools caches of the device probes of :data:`_PROBES` (those imported)."""
    for name in _PROBES:
        module = sys.modules.get(name)
        for value in list(vars(module).values()) if module is not None else ():
            clear = getattr(value, "cache_clear", None)
            if callable(clear) and getattr(value, "__module__", None) == name:
                clear()


# -- safetensors -----------------------------------------------------------------------------


class _Shapes(dict):
    """What ``safetensors.torch._flatten_as_ptr`` gives for a save that holds fake tensors:
    name -> (the format's dtype name, shape, bytes)."""


def sparse_safetensors_header(shapes: dict[str, tuple[str, list[int], int]],
                              metadata: dict[str, str] | None) -> tuple[bytes, int]:
    """The header of a safetensors file of ``shapes`` (name -> dtype name, shape, bytes):
    the 8-byte little-endian length, the JSON header padded with spaces to 8 bytes (as
    safetensors pads it), and the data's bytes after it. Tensors are laid out by element
    size, largest first, then by name, as safetensors lays them out. O(n log n) in tensors.

    >>> head, data = sparse_safetensors_header({"w": ("BF16", [2, 3], 12)}, {"format": "pt"})
    >>> data, len(head) % 8, json.loads(head[8:])["w"]["data_offsets"]
    (12, 0, [0, 12])
    """
    header: dict[str, Any] = {"__metadata__": {**(metadata or {}), MARK[0]: MARK[1]}}
    offset = 0
    for name, (dtype, shape, nbytes) in sorted(
            shapes.items(), key=lambda kv: (-_itemsize(kv[1]), kv[0])):
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset,
                                                                        offset + nbytes]}
        offset += nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(len(text) + 8) % 8)
    return len(text).to_bytes(8, "little") + text, offset


def _itemsize(entry: tuple[str, list[int], int]) -> int:
    count = 1
    for d in entry[1]:
        count *= d
    return entry[2] // count if count else 0


#: what _save_shapes uses of safetensors.torch (safetensors 0.8: save_file and save call
#: serialize_file / serialize on _flatten_as_ptr's specs)
_SAFETENSORS_NAMES = ("_flatten_as_ptr", "serialize_file", "serialize", "_TYPES",
                      "_evaluate_tensors_for_save")


def _save_shapes(module: Any, session: Any) -> Callable[[], None]:
    """Patch ``safetensors.torch`` for the run (the module's DECISION): its
    ``_flatten_as_ptr`` (called by ``save_file`` and ``save``) gives :class:`_Shapes` for a
    save with fake tensors, after safetensors' own checks; ``serialize_file`` writes such a
    save as a sparse file, ``serialize`` as bytes."""
    from torch._subclasses.fake_tensor import FakeTensor

    if not all(hasattr(module, name) for name in _SAFETENSORS_NAMES):
        # another safetensors than the one read (0.8): left as it is
        return lambda: None
    flatten, write, serialize = module._flatten_as_ptr, module.serialize_file, module.serialize
    names = {dtype: name for name, dtype in module._TYPES.items()}

    def flatten_shapes(tensors: Any, keep_alive: list) -> Any:
        if not (isinstance(tensors, dict)
                and any(isinstance(v, FakeTensor) for v in tensors.values())):
            return flatten(tensors, keep_alive)
        # safetensors' checks: a dict of dense tensors, none sharing memory
        module._evaluate_tensors_for_save(tensors)
        shapes = _Shapes()
        for key, v in tensors.items():
            if not v.is_contiguous():
                raise ValueError(f"You are trying to save a non contiguous tensor: `{key}` "
                                 f"which is not allowed.")
            name = names.get(v.dtype)
            if name is None:
                raise ValueError(f"cannot save `{key}` ({v.dtype}) from fake tensors: "
                                 f"safetensors' dtype table has no name for it")
            shapes[key] = (name, list(v.shape), v.numel() * v.element_size())
        return shapes

    def serialize_file(flattened: Any, filename: Any, metadata: Any = None) -> None:
        if not isinstance(flattened, _Shapes):
            write(flattened, filename, metadata=metadata)
            return
        head, nbytes = sparse_safetensors_header(flattened, metadata)
        with open(filename, "wb") as f:
            f.write(head)
            # the data: a hole the size of the weights (no disk, no time)
            f.truncate(len(head) + nbytes)

    def serialize_bytes(flattened: Any, metadata: Any = None) -> Any:
        if not isinstance(flattened, _Shapes):
            return serialize(flattened, metadata=metadata)
        head, nbytes = sparse_safetensors_header(flattened, metadata)
        return head + bytes(nbytes)

    module._flatten_as_ptr, module.serialize_file = flatten_shapes, serialize_file
    module.serialize = serialize_bytes

    def undo() -> None:
        module._flatten_as_ptr, module.serialize_file = flatten, write
        module.serialize = serialize

    return undo


# -- the settings that shape the peak ----------------------------------------------------------


def trainer_settings(trainer: Any) -> dict[str, str]:
    """The settings of ``trainer`` (a transformers ``Trainer``, or a subclass: TRL's, or
    LLaMA-Factory's) that shape the device's peak, by name: what the summary's settings line
    says."""
    args, model = trainer.args, trainer.model
    settings = {
        "micro-batch": str(args.per_device_train_batch_size),
        "gradient accumulation": str(args.gradient_accumulation_steps),
        "precision": "bf16" if args.bf16 else "fp16" if args.fp16 else "fp32",
        "gradient checkpointing": "on" if (args.gradient_checkpointing or getattr(
            model, "is_gradient_checkpointing", False)) else "off",
        "optimizer": str(getattr(args.optim, "value", args.optim)),
    }
    if args.world_size > 1:
        settings["data parallel"] = (f"{args.world_size} ranks"
                                     + (", DeepSpeed" if args.deepspeed else
                                        f", DDP buckets {args.ddp_bucket_cap_mb or 25} MB"))
    count = getattr(model, "get_nb_trainable_parameters", None)
    config = getattr(model, "peft_config", None)
    if callable(count) and isinstance(config, dict) and config:
        peft = next(iter(config.values()))
        kind = str(getattr(peft.peft_type, "value", peft.peft_type))
        rank = getattr(peft, "r", None)
        targets = getattr(peft, "target_modules", None)
        if targets is not None and not isinstance(targets, str):
            targets = ",".join(sorted(targets))
        trainable, total = count()
        settings["PEFT"] = (kind + (f" r={rank}" if rank is not None else "")
                            + (f" on {targets}" if targets else "")
                            + f", {trainable:,} of {total:,} parameters trained")
    finetuning = getattr(trainer, "finetuning_args", None)
    if finetuning is not None and hasattr(finetuning, "finetuning_type"):
        settings["LLaMA-Factory"] = (f"stage {getattr(finetuning, 'stage', '?')}, "
                                     f"finetuning {finetuning.finetuning_type}")
    if getattr(args, "packing", None) is not None and hasattr(args, "max_length"):
        settings["TRL SFT"] = (f"max_length {args.max_length}, packing "
                               + (getattr(args, "packing_strategy", "on") if args.packing
                                  else "off"))
    return settings


def _note_settings(module: Any, session: Any) -> Callable[[], None]:
    """Patch ``transformers.trainer.Trainer.train`` for the run: its settings
    (:func:`trainer_settings`) go into ``session.stack_settings`` as training starts."""
    trainer_class = module.Trainer
    train = trainer_class.train

    def noted_train(self: Any, *args: Any, **kwargs: Any) -> Any:
        settings = getattr(session, "stack_settings", None)
        if isinstance(settings, dict):
            try:
                settings.update(trainer_settings(self))
            except Exception:
                # a Trainer of another shape than the one read: the line is a note, and
                # the training runs without it
                pass
        return train(self, *args, **kwargs)

    noted_train.__wrapped__ = train  # type: ignore[attr-defined]
    trainer_class.train = noted_train

    def undo() -> None:
        trainer_class.train = train

    return undo
