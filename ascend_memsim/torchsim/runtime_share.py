"""The runtime's own share of a rank's device: what CANN and torch_npu hold before the first
tensor (the context, its streams, the operator binaries loaded, torch_npu's own buffers).

No vendor page gives these figures, so each is an ESTIMATE, said so in every report, and the
user sets their own (``runtime_share=``, ``--runtime-share``) from a measurement: on the
card, ``total - free`` of ``torch.npu.mem_get_info()`` right after ``set_device`` and the
first collective's group is made, less nothing else.

What is *not* in these figures: the memory the system keeps and ``aclrtGetMemInfo`` never
reports (the product's ``reserved_bytes``, e.g. 3116 MiB on an A2, the difference between
64 GiB and the 65452113920 bytes a 910B reports, vllm-ascend #4404); the simulated device's
capacity already leaves it out. An idle 910B2 shows 3381-3382 MB used in ``npu-smi`` with no
process (vllm-ascend #4284), which is that reserve, not this share.

DECISION: the share is taken from the rank's device as one ``aclrtMallocWithCfg`` block
under the RUNTIME module id before the script runs, so it narrows what the caching
allocator and HCCL can have, as the real context does.
"""

from __future__ import annotations

from ..memory.constants import MODULE_NAMES, MallocAttrType, MallocPolicy, MiB

__all__ = ["RUNTIME_SHARES", "runtime_share", "take_runtime_share"]

_ESTIMATE = ("ESTIMATE (no vendor figure): the context, default streams, operator binaries "
             "and torch_npu's start-up buffers; measure total - free after set_device on "
             "the card and pass it as runtime_share")

#: product name -> (bytes, where the figure comes from)
RUNTIME_SHARES: dict[str, tuple[int, str]] = {
    "A2": (512 * MiB, _ESTIMATE),
    "A3": (512 * MiB, _ESTIMATE),
    "950PR": (512 * MiB, _ESTIMATE),
    "950DT": (512 * MiB, _ESTIMATE),
    "310P": (256 * MiB, _ESTIMATE),
}
_DEFAULT = (512 * MiB, _ESTIMATE)

_RUNTIME_MODULE = next(m for m, name in MODULE_NAMES.items() if name == "RUNTIME")


def runtime_share(product: str, override: int | None = None) -> tuple[int, str]:
    """(bytes, source) of ``product``'s runtime share; ``override`` (bytes) is the user's.

    Raises:
        ValueError: a negative override.
    """
    if override is not None:
        if type(override) is not int or override < 0:
            raise ValueError(f"runtime_share must be a whole number of bytes >= 0, got "
                             f"{override!r}")
        return override, "set by the user"
    return RUNTIME_SHARES.get(product, _DEFAULT)


def take_runtime_share(runtime, size: int) -> int:
    """Take ``size`` bytes on ``runtime``'s current device for the runtime's own share; the
    block's address (0 for 0 bytes).

    Raises:
        OutOfDeviceMemory: the device cannot hold it.
    """
    if not size:
        return 0
    return runtime.malloc_with_cfg(size, MallocPolicy.HUGE_FIRST,
                                   {MallocAttrType.MODULE_ID: _RUNTIME_MODULE})
