"""The settings torch_npu reads from the environment when it starts, as the script sees them.

torch_npu reads ``PYTORCH_NPU_ALLOC_CONF`` (else ``PYTORCH_ALLOC_CONF``) when its caching
allocator is first used (``NPUAllocatorConfig::instance``), and ``TASK_QUEUE_ENABLE`` once,
at the first operator that asks (``OptionsManager::GetTaskQueueEnable``: 0 under
``ASCEND_LAUNCH_BLOCKING=1``, else the variable read as C's ``strtol`` reads it, default 1,
anything but 0, 1 or 2 an error). So a script that sets ``os.environ[...]`` at its top, before
its first NPU tensor, runs with those settings. DECISION: an estimate reads both at the
script's first NPU allocation, from ``os.environ`` as the script left it, unless the user
gave them (``--alloc-conf``, ``--task-queue``: these win), and says where each value came
from: the option, the environment the estimate started in, the script, or torch_npu's
default (:class:`Startup`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from ..allocators.conf import ACC_ALLOC_CONF_ENV, ALLOC_CONF_ENV, alloc_conf_from_env
from ..allocators.releases import NEWEST, TorchNpuRelease

__all__ = ["Startup", "task_queue_from_env", "TASK_QUEUE_ENV", "BLOCKING_ENV"]

TASK_QUEUE_ENV = "TASK_QUEUE_ENABLE"
BLOCKING_ENV = "ASCEND_LAUNCH_BLOCKING"
_NAMES = (ALLOC_CONF_ENV, ACC_ALLOC_CONF_ENV, TASK_QUEUE_ENV, BLOCKING_ENV)
_STRTOL = re.compile(r"\s*([+-]?\d+)")


def _strtol(text: str) -> int:
    """C's ``strtol(text, nullptr, 10)``: the leading integer, 0 when there is none."""
    match = _STRTOL.match(text)
    return int(match.group(1)) if match else 0


def task_queue_from_env(environ: Mapping[str, str]) -> tuple[int, str | None]:
    """(TASK_QUEUE_ENABLE as torch_npu reads it from ``environ``, the variable that decided
    it, None for the default).

    Raises:
        RuntimeError: a value other than 0, 1 or 2, with torch_npu's message.
    """
    if _strtol(environ.get(BLOCKING_ENV, "0")) == 1:
        return 0, BLOCKING_ENV
    text = environ.get(TASK_QUEUE_ENV)
    if text is None:
        return 1, None
    value = _strtol(text)
    if value not in (0, 1, 2):
        raise RuntimeError(f"TASK_QUEUE_ENABLE should be 0, 1 or 2 (it is {text!r})")
    return value, TASK_QUEUE_ENV


class Startup:
    """The allocator settings and TASK_QUEUE_ENABLE of one estimate: the user's, or read
    from the environment at the script's first NPU allocation (:meth:`read`), and where
    each came from (:attr:`sources`: ``"--alloc-conf"``, ``"PYTORCH_NPU_ALLOC_CONF in the
    environment"``, ``"PYTORCH_NPU_ALLOC_CONF, set by the script"``, ``"default"``, ...)."""

    def __init__(self, alloc_conf: str | None, task_queue: int | None,
                 release: TorchNpuRelease = NEWEST) -> None:
        self.alloc_conf, self.task_queue, self.release = alloc_conf, task_queue, release
        self.sources = {"alloc_conf": "--alloc-conf" if alloc_conf is not None else "default",
                        "task_queue": "--task-queue" if task_queue is not None else "default"}
        #: the variables as the estimate found them, to tell the script's from the caller's
        self._before = {name: os.environ.get(name) for name in _NAMES}
        #: whether something is still to be read at the first allocation
        self.pending = alloc_conf is None or task_queue is None

    def read(self) -> None:
        """Read what the user did not give from ``os.environ``, as torch_npu does at its
        first use.

        Raises:
            AllocatorConfigError: both allocator variables are set (torch_npu's error).
            RuntimeError: TASK_QUEUE_ENABLE is not 0, 1 or 2.
        """
        # what torch_npu reads once and caches; a value it refuses is refused again at the
        # next use, as its static initialiser throws again
        if self.alloc_conf is None:
            name, self.alloc_conf = alloc_conf_from_env(release=self.release)
            self.sources["alloc_conf"] = self._source(name)
        if self.task_queue is None:
            self.task_queue, name = task_queue_from_env(os.environ)
            self.sources["task_queue"] = self._source(name)
        self.pending = False

    def _source(self, name: str | None) -> str:
        if name is None:
            return "default"
        if os.environ.get(name) != self._before[name]:
            return f"{name}, set by the script"
        return f"{name} in the environment"
