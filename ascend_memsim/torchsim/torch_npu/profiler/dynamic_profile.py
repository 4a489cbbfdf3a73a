"""The stand-in ``torch_npu.profiler.dynamic_profile``: a profile switched on from a config
file while the job runs; in an estimate nothing is recorded (see :mod:`..profiler`)."""

from __future__ import annotations

from typing import Any

from .._missing import not_modelled

__all__ = ["init", "step", "start", "set_state"]

__getattr__ = not_modelled("torch_npu.profiler.dynamic_profile")


def init(path: str, *args: Any, **kwargs: Any) -> None:
    pass


def step() -> None:
    pass


def start(config_path: Any = None, *args: Any, **kwargs: Any) -> None:
    pass


def set_state(*args: Any, **kwargs: Any) -> None:
    pass
