"""torch_npu's option table (``torch_npu._C._npu_setOption`` / ``_npu_getOption``) as the
stand-in keeps it, and the switches read from it: ``torch_npu.npu.matmul`` and ``conv``
(``allow_hf32``, ``cube_math_type``), ``CubeMathType``, ``use_compatible_impl`` and
``are_compatible_impl_enabled``.

Sources (the torch_npu 2.14.0 wheel): ``torch_npu/npu/npu_config.py`` (``_CubeMathType``,
``_allowHF32Matmul``, ``_allowHF32Conv``: what each attribute reads and what a set refuses)
and ``torch_npu/npu/__init__.py`` (``use_compatible_impl``, ``are_compatible_impl_enabled``,
``matmul = npu_config._allowHF32Matmul()``, ``conv = npu_config._allowHF32Conv()``).

DECISION: none of these changes what the device holds in the model. HF32 and the cube math
type choose the precision of the cube units (the same tensors either way); the compatible
implementations (``TORCH_NPU_USE_COMPATIBLE_IMPL``) change some operators' kernels (op-plugin
reads it once, at an operator's first call), which the stand-in's operators do not follow:
turning them on is said in the estimate's notes.
"""

from __future__ import annotations

import os
from enum import IntEnum
from typing import Any

from .._missing import not_modelled
from ._state import active

__all__ = ["CubeMathType", "matmul", "conv", "use_compatible_impl",
           "are_compatible_impl_enabled", "set_options", "get_option", "reset"]

__getattr__ = not_modelled("torch_npu.npu._options")

#: the options set by the script (name -> value, a str as torch_npu passes them)
_table: dict[str, str] = {}

#: what the estimate's notes say of the compatible implementations
COMPATIBLE_NOTE = ("torch_npu.npu.use_compatible_impl(True) at {where}: the compatible "
                   "implementations of operators are not modelled; the figures are the "
                   "default implementations'")


def reset() -> None:
    """The table as a new process has it (an estimate's start): empty, but for
    ``TORCH_NPU_USE_COMPATIBLE_IMPL`` read from the environment, as torch_npu initialises that
    option (``REGISTER_OPTION_INIT_BY_ENV`` in ``EnvVariables.cpp``)."""
    _table.clear()
    value = os.environ.get("TORCH_NPU_USE_COMPATIBLE_IMPL")
    if value is not None:
        _table["TORCH_NPU_USE_COMPATIBLE_IMPL"] = value


def set_options(options: dict) -> None:
    """``_npu_setOption``: keep each option's value as a str. O(len(options))."""
    for name, value in options.items():
        _table[str(name)] = str(value)


def get_option(name: str) -> str | None:
    """``_npu_getOption``: the option's value, or None when it was never set."""
    return _table.get(name)


class CubeMathType(IntEnum):
    """How the cube units compute float32 matmuls (``npu_config._CubeMathType``)."""

    KEEP_DTYPE = 0
    ALLOW_FP32_DOWN_PRECISION = 1
    USE_FP16 = 2
    USE_HF32 = 3
    # torch_npu keeps the deprecated name as an alias of USE_FP32_ADD
    FORCE_GRP_ACC_FOR_FP32 = 4
    USE_FP32_ADD = 4


class _Switches:
    """A namespace whose attributes are options (as ``torch.backends.cuda.matmul``); an
    attribute it does not know reads None and a set of one is dropped, as torch_npu's
    classes do (their ``__setattr__`` stores nothing, their ``__getattr__`` answers None)."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return self._read(name)

    def __setattr__(self, name: str, value: Any) -> None:
        self._write(name, value)

    def _read(self, name: str) -> Any:
        return None

    def _write(self, name: str, value: Any) -> None:
        pass


def _hf32(value: Any) -> str:
    if not isinstance(value, bool):
        raise TypeError(f"allow_hf32 must be a bool, but got {type(value).__name__}")
    return "enable" if value else "disable"


class _Matmul(_Switches):
    """``torch_npu.npu.matmul``: ``allow_hf32`` (default False: float32 matmuls keep
    float32) and ``cube_math_type`` (a :class:`CubeMathType`, None until set)."""

    def _read(self, name: str) -> Any:
        if name == "allow_hf32":
            return get_option("ALLOW_MATMUL_HF32") == "enable"
        if name == "cube_math_type":
            value = get_option("CUBE_MATH_TYPE")
            return CubeMathType(int(value)) if value else None
        return None

    def _write(self, name: str, value: Any) -> None:
        if name == "allow_hf32":
            set_options({"ALLOW_MATMUL_HF32": _hf32(value)})
        elif name == "cube_math_type":
            if not isinstance(value, CubeMathType):
                raise TypeError("value should be one of Enum CubeMathType when setting "
                                f"cube_math_type, but got {type(value)}")
            set_options({"CUBE_MATH_TYPE": str(value.value)})

    def __repr__(self) -> str:
        return "<torch_npu.npu.matmul>"


class _Conv(_Switches):
    """``torch_npu.npu.conv``: ``allow_hf32`` (default True: torch_npu reads an option never
    set, or set empty, as enabled)."""

    def _read(self, name: str) -> Any:
        if name == "allow_hf32":
            return get_option("ALLOW_CONV_HF32") in (None, "", "enable")
        return None

    def _write(self, name: str, value: Any) -> None:
        if name == "allow_hf32":
            set_options({"ALLOW_CONV_HF32": _hf32(value)})

    def __repr__(self) -> str:
        return "<torch_npu.npu.conv>"


matmul = _Matmul()
conv = _Conv()


def use_compatible_impl(is_enable: Any) -> None:
    """Turn torch_npu's compatible operator implementations on or off (any truth value, as
    torch_npu takes it). Turning them on is noted in the estimate's result: the stand-in's
    operators keep their default implementations (see the module's DECISION)."""
    set_options({"TORCH_NPU_USE_COMPATIBLE_IMPL": "1" if is_enable else "0"})
    session = active()
    if is_enable and session is not None:
        from ...limits import where

        note = COMPATIBLE_NOTE.format(where=where(session))
        if note not in session.notes:
            session.notes.append(note)


def are_compatible_impl_enabled() -> bool:
    """Whether the compatible implementations are on (the option is "1")."""
    return get_option("TORCH_NPU_USE_COMPATIBLE_IMPL") == "1"


reset()
