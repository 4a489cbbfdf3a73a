"""Framework allocators that sit on the simulated runtime as clients, calling it as the real
ones call aclrt: torch_npu's caching allocator (:mod:`.caching`), its ``PYTORCH_NPU_ALLOC_CONF``
(:mod:`.conf`), its statistics and out-of-memory error (:mod:`.stats`) and its workspace
allocator (:mod:`.workspace`).

A layer above ``runtime`` and below ``observe``: it imports only the memory constants and
errors and calls :class:`~ascend_memsim.runtime.runtime.Runtime` methods.
"""

from ..memory.errors import AllocatorConfigError, NpuOutOfMemoryError
from .caching import NpuCachingAllocator
from .conf import AllocatorConfig, alloc_conf_from_env, parse_alloc_conf
from .rules import add_pad_size, allocation_size, round_size
from .stats import format_size
from .workspace import NpuWorkspaceAllocator

__all__ = ["NpuCachingAllocator", "NpuWorkspaceAllocator",
           "AllocatorConfig", "AllocatorConfigError", "parse_alloc_conf", "alloc_conf_from_env",
           "NpuOutOfMemoryError", "format_size", "round_size", "allocation_size", "add_pad_size"]
