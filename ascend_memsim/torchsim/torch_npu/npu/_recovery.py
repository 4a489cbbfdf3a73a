"""``torch_npu.npu.stop_device`` and ``restart_device`` (``torch_npu/npu/_recovery.py``): the
device fault recovery a training framework runs after a hardware fault.

On the machine (``torch_npu/csrc/npu/Module.cpp``): ``stop_device`` sets the device's task
queues to ``STOP_EXIT`` and aborts its queued tasks (``aclrtDeviceTaskAbort``); from then on
every operator the script launches fails with "FORCE STOP" (``NPUQueue.cpp``) until
``restart_device``, which repairs the fault's memory (``aclrtRepairError``, or
``aclrtMemUceRepair`` on older CANN), frees the blocks waiting for events
(``NPUCachingAllocator::cleanEvent``) and, with ``rebuild_all_resources``, marks every block
of the device unsafe, which op-plugin's checks then refuse as input ("There is unsafe data
in the input tensor") until the script writes each tensor again.

DECISION: refused, the verdict unknown, with the script's line. The estimate's device never
faults, so the state these calls act on (which memory the fault hit, which tensors the
script rewrites before it goes on) is not something the estimate has; following one path
through them would be a guess. The way out is the one for any step the estimate cannot
follow: leave the recovery path out of the estimate.
"""

from __future__ import annotations

from typing import Any, NoReturn

from ...limits import UnsupportedFeature, where
from .._missing import not_modelled
from ._state import _session

__all__ = ["stop_device", "restart_device"]

__getattr__ = not_modelled("torch_npu.npu._recovery")


def _refuse(name: str, device_id: Any) -> NoReturn:
    if not isinstance(device_id, int):
        # THNPModule_stopDevice_wrap: THPUtils_unpackLong
        raise TypeError(f"{name}: device_id must be an int, not {type(device_id).__name__}")
    session = _session()
    raise session.stop(UnsupportedFeature(
        f"torch_npu.npu.{name} at {where(session)}: device fault recovery is not simulated "
        f"(the estimate's device never faults; after a stop every operator fails until "
        f"restart_device, whose repair depends on the fault). The way out: leave the "
        f"recovery path out of the estimate (it runs with ASCEND_MEMSIM_ESTIMATE=1 in the "
        f"environment)"))


def stop_device(device_id: int) -> int:
    """Stop ``device_id`` for fault recovery: refused in an estimate.

    Raises:
        TypeError: ``device_id`` is not an int.
        UnsupportedFeature: always, in an estimate (see the module's DECISION).
    """
    _refuse("stop_device", device_id)


def restart_device(device_id: int, rebuild_all_resources: bool = False,
                   disable_tensor_unsafe_check: bool = False) -> None:
    """Restart ``device_id`` after :func:`stop_device`: refused in an estimate.

    Raises:
        TypeError: ``device_id`` is not an int.
        UnsupportedFeature: always, in an estimate (see the module's DECISION).
    """
    _refuse("restart_device", device_id)
