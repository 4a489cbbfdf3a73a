"""The stand-in ``torch_npu._C._distributed_c10d``: ``ProcessGroupHCCL`` (its ``Options``
carry a group's ``hccl_buffer_size``), from :mod:`ascend_memsim.torchsim.ranks.distributed`."""

from __future__ import annotations

from .._missing import not_modelled

__all__: list[str] = []  # ProcessGroupHCCL, read on first use (see __getattr__)

_missing = not_modelled("torch_npu._C._distributed_c10d")


def __getattr__(name: str) -> object:
    # read when first asked for: the distributed machinery imports torch.distributed
    if name == "ProcessGroupHCCL":
        from ...ranks.distributed import ProcessGroupHCCL

        return ProcessGroupHCCL
    return _missing(name)
