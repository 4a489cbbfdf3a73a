"""The stand-in ``torch_npu.profiler``: a profile records nothing in an estimate.

DECISION: ``profile`` runs the block and counts ``step()`` calls but writes no trace (fake
tensors run no kernels, so there is nothing to time, and a run for memory should leave no
files behind); its ``on_trace_ready`` handler is never called. The settings classes take the
same arguments as torch_npu's (``torch_npu/profiler/experimental_config.py``), so a script
that builds them runs unchanged.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from typing import Any

from torch.profiler import ProfilerAction
from torch.profiler import schedule as schedule

from .._missing import not_modelled

__all__ = ["profile", "ProfilerActivity", "supported_activities", "tensorboard_trace_handler",
           "schedule", "ProfilerAction", "_ExperimentalConfig", "supported_profiler_level",
           "supported_ai_core_metrics", "supported_export_type", "ProfilerLevel", "AiCMetrics",
           "ExportType", "HostSystem"]

__getattr__ = not_modelled("torch_npu.profiler")


class ProfilerActivity(enum.Enum):
    CPU = "CPU"
    NPU = "NPU"


class ProfilerLevel:
    Level0 = "Level0"
    Level1 = "Level1"
    Level2 = "Level2"
    Level_none = "Level_none"


class AiCMetrics:
    PipeUtilization = "ACL_AICORE_PIPE_UTILIZATION"
    ArithmeticUtilization = "ACL_AICORE_ARITHMETIC_UTILIZATION"
    Memory = "ACL_AICORE_MEMORY_BANDWIDTH"
    MemoryL0 = "ACL_AICORE_L0B_AND_WIDTH"
    MemoryUB = "ACL_AICORE_MEMORY_UB"
    ResourceConflictRatio = "ACL_AICORE_RESOURCE_CONFLICT_RATIO"
    L2Cache = "ACL_AICORE_L2_CACHE"
    MemoryAccess = "ACL_AICORE_MEMORY_ACCESS"
    AiCoreNone = "ACL_AICORE_NONE"


class ExportType:
    Db = "db"
    Text = "text"


class HostSystem:
    CPU = "cpu"
    MEM = "mem"
    DISK = "disk"
    NETWORK = "network"
    OSRT = "osrt"
    NUMA = "numa"


def supported_activities() -> set:
    return set(ProfilerActivity)


def supported_profiler_level() -> set:
    return {ProfilerLevel.Level0, ProfilerLevel.Level1, ProfilerLevel.Level2,
            ProfilerLevel.Level_none}


def supported_ai_core_metrics() -> set:
    return {v for k, v in vars(AiCMetrics).items() if not k.startswith("_")}


def supported_export_type() -> set:
    return {ExportType.Db, ExportType.Text}


class _ExperimentalConfig:
    """The profiler's settings: kept as given, used for nothing."""

    def __init__(self, **kwargs: Any) -> None:
        self.__dict__.update(kwargs)


def tensorboard_trace_handler(dir_name: str | None = None, worker_name: str | None = None,
                              analyse_flag: bool = True, async_mode: bool = False
                              ) -> Callable[[Any], None]:
    """A handler that writes nothing (see the module's DECISION)."""
    def handler(prof: Any) -> None:
        return None

    return handler


class profile:
    """torch_npu.profiler.profile: runs the block; ``step()`` counts, nothing is recorded."""

    def __init__(self, activities: Iterable[Any] | None = None, schedule: Any = None,
                 on_trace_ready: Any = None, record_shapes: bool = False,
                 profile_memory: bool = False, with_stack: bool = False,
                 with_flops: bool = False, with_modules: bool = False,
                 experimental_config: Any = None, **kwargs: Any) -> None:
        self.step_num = 0

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def step(self) -> None:
        self.step_num += 1

    def export_chrome_trace(self, path: str) -> None:
        pass

    def __enter__(self) -> profile:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass
