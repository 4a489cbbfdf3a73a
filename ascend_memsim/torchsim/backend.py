"""The ``npu`` device in torch: PrivateUse1 renamed ``npu``, its device module
:mod:`ascend_memsim.torchsim.torch_npu.npu`, once per process.

torch lets a process name its PrivateUse1 backend once and register one device module for
it (``torch.utils.rename_privateuse1_backend``, ``torch._register_device_module``), with no
way back; ``torch.utils.backend_registration._setup_privateuseone_for_python_backend`` adds
the device guard and hooks autograd needs for a backend written in Python. So the device
stays named after the first estimate; :mod:`.npu` answers "no device" outside one
(``torch.npu.is_available()`` is False, ``device_count()`` 0).
"""

from __future__ import annotations

import torch

__all__ = ["ensure_npu_backend"]


def ensure_npu_backend() -> None:
    """Name PrivateUse1 ``npu`` and register :mod:`.npu` as ``torch.npu`` (once).

    Raises:
        RuntimeError: PrivateUse1 already has another name (the real torch_npu is imported,
            or another backend is), or ``torch.npu`` is another module.
    """
    from .torch_npu import npu

    name = torch._C._get_privateuse1_backend_name()
    if name == "npu" and getattr(torch, "npu", None) is npu:
        return
    if name != "privateuseone":
        raise RuntimeError(
            f"torch's PrivateUse1 device is already named {name!r} in this process (is the "
            f"real torch_npu imported?); ascend-memsim's fake NPU needs it: estimate in a "
            f"process without it")
    from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

    _setup_privateuseone_for_python_backend(rename="npu", backend_module=npu)
    from .autocast import register_autocast
    from .fused import register_fused_ops
    from .ops import register_ops

    register_autocast()
    register_fused_ops()
    register_ops()
