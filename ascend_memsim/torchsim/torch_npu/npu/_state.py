"""The stand-in ``torch.npu``'s link to the running estimate: which session answers, and the
device index rules every function of :mod:`torch_npu.npu <..npu>` shares."""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["active", "set_active"]

#: the running estimate's Session (set by Session.__enter__ and __exit__)
_current: Any = None


def active() -> Any:
    """The running estimate's session, or None."""
    return _current


def set_active(session: Any) -> None:
    """Make ``session`` the one that answers (None: no estimate runs)."""
    global _current
    _current = session


def _session() -> Any:
    session = active()
    if session is None:
        raise RuntimeError("no NPU: the stand-in torch_npu answers only inside "
                           "ascend_memsim.torchsim.estimate (ascend-memsim estimate)")
    return session


def _own() -> int:
    """The NPU the running estimate's tensors are on (0, or a rank's LOCAL_RANK)."""
    session = active()
    return 0 if session is None else session.device


def _index(device: Any = None) -> int:
    """The device index of ``device`` (None, an int, "npu", "npu:0", torch.device)."""
    if device is None:
        return _own()
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "npu":
            raise ValueError(f"expected an npu device, got {device}")
        return _own() if device.index is None else device.index
    if isinstance(device, int) and not isinstance(device, bool):
        return device
    raise TypeError(f"invalid device: {device!r}")


def _check(device: Any) -> None:
    if _index(device) != _own():
        raise RuntimeError(f"invalid device {device!r}: the estimate simulates one NPU "
                           f"(device {_own()})")
