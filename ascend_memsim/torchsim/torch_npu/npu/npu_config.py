"""The stand-in ``torch_npu.npu.npu_config`` (``torch_npu/npu/npu_config.py``): switches that
change how operators compile, dump or share the AI cores, none of which changes what the
device holds. Each is accepted and kept, so a script that sets them runs; what it reads back
is what it set."""

from __future__ import annotations

import os
from typing import Any

from .._missing import not_modelled

__all__ = ["set_aoe", "init_dump", "set_dump", "finalize_dump", "set_mm_bmm_format_nd",
           "get_mm_bmm_format_nd", "is_jit_compile_false", "set_device_limit",
           "get_device_limit", "set_stream_limit", "get_stream_limit", "reset_stream_limit"]

__getattr__ = not_modelled("torch_npu.npu.npu_config")

_state: dict[str, Any] = {}


def reset() -> None:
    """The switches as a new process has them (an estimate's start)."""
    _state.clear()
    _state.update({"mm_bmm_nd": True, "device_limits": {}, "stream_limits": {}})


reset()


def set_aoe(dump_path: str) -> None:
    """AOE tuning's dump folder: kept; nothing is tuned in an estimate."""
    _state["aoe"] = dump_path


def init_dump() -> None:
    """Starts the operators' data dump: nothing runs to dump."""


def set_dump(cfg_file: str) -> None:
    """The dump's config file, which must exist (as torch_npu checks)."""
    if not os.path.exists(cfg_file):
        raise AssertionError(f"cfg_file {cfg_file} path does not exists.")


def finalize_dump() -> None:
    """Ends the operators' data dump."""


def set_mm_bmm_format_nd(is_nd: bool = True) -> None:
    """Whether matmuls keep ND format (the layout, not the bytes: shapes are modelled ND)."""
    _state["mm_bmm_nd"] = bool(is_nd)


def get_mm_bmm_format_nd() -> bool:
    return bool(_state["mm_bmm_nd"])


def is_jit_compile_false() -> bool:
    """True: operators run from precompiled binaries (torch_npu's default since jit_compile
    turned False)."""
    return True


def _check_limits(cube_num: int, vector_num: int) -> None:
    for name, value in (("cube_num", cube_num), ("vector_num", vector_num)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, but got {type(value).__name__}")


def set_device_limit(device: int, cube_num: int = -1, vector_num: int = -1) -> None:
    """The AI cube and vector cores a device's operators may use: kept (time, not memory)."""
    if isinstance(device, bool) or not isinstance(device, int):
        raise TypeError(f"device must be an int, but got {type(device).__name__}")
    _check_limits(cube_num, vector_num)
    _state["device_limits"][device] = {"cube_core_num": cube_num, "vector_core_num": vector_num}


def get_device_limit(device: int) -> dict:
    return dict(_state["device_limits"].get(device, {"cube_core_num": -1,
                                                       "vector_core_num": -1}))


def set_stream_limit(stream: Any, cube_num: int = -1, vector_num: int = -1) -> None:
    """The cores a stream's operators may use: kept (time, not memory)."""
    if stream is None:
        raise AssertionError("stream cannot be None")
    _check_limits(cube_num, vector_num)
    _state["stream_limits"][stream] = {"cube_core_num": cube_num, "vector_core_num": vector_num}


def get_stream_limit(stream: Any) -> dict:
    if stream is None:
        raise AssertionError("stream cannot be None")
    return dict(_state["stream_limits"].get(stream, {"cube_core_num": -1,
                                                       "vector_core_num": -1}))


def reset_stream_limit(stream: Any) -> None:
    if stream is None:
        raise AssertionError("stream cannot be None")
    _state["stream_limits"].pop(stream, None)
