"""The stand-in ``torch_npu._C``: the extension's submodules that scripts reach directly
(``torch_npu._C._distributed_c10d.ProcessGroupHCCL.Options`` for a group's HCCL settings)."""

from . import _distributed_c10d

__all__ = ["_distributed_c10d"]
