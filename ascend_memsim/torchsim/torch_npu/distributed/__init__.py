"""The stand-in ``torch_npu.distributed``: HCCL is the backend of a distributed estimate
(:mod:`ascend_memsim.torchsim.hccl`); the uneven collectives are not modelled."""

from __future__ import annotations

from typing import Any

from .._missing import not_modelled

__all__ = ["is_hccl_available", "reinit_process_group"]

__getattr__ = not_modelled("torch_npu.distributed")


def is_hccl_available() -> bool:
    return True


def reinit_process_group(group: Any = None, rebuild_link: bool = True) -> Any:
    """Rebuilds HCCL's links after a device fault: nothing to rebuild on a fake group."""
    return group
