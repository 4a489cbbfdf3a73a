"""torch_npu's sizing rules: the pad, rounding, pools and segment sizes, and the warning of
its 1 GiB page fallback.

Source: ``Ascend/pytorch`` ``torch_npu/csrc/core/npu/NPUCachingAllocator.cpp`` ("the source";
the constants at its top, ``AddPadSize``, ``round_size``, ``roundup_power2_next_division``,
``get_allocation_size``), ``NPUAllocatorConfig.h`` and ``interface/AclInterface.cpp``.
"""

from __future__ import annotations

import re
import warnings

from ..memory.constants import MiB
from ..memory.errors import InvalidArgument, InvalidArgumentType
from .conf import AllocatorConfig

__all__ = ["round_size", "allocation_size", "add_pad_size", "cann_tuple", "DEFAULT_CANN",
           "PAGE_1G_CANN", "K_MIN_BLOCK_SIZE", "K_SMALL_SIZE", "K_SMALL_BUFFER",
           "K_MIN_LARGE_ALLOC", "K_ROUND_LARGE", "K_EXTRA_LARGE_BUFFER",
           "PAGE_1G_FALLBACK_WARNING", "warn_page_1g_fallback"]

# The source's constants (anonymous namespace at the top; NPUAllocatorConfig.h for the rest).
K_MIN_BLOCK_SIZE = 512           # all sizes are rounded to at least 512 bytes
K_SMALL_SIZE = 1 * MiB           # largest "small" allocation is 1 MiB
K_SMALL_BUFFER = 2 * MiB         # "small" allocations are packed in 2 MiB blocks
K_MIN_LARGE_ALLOC = 10 * MiB     # allocations between 1 and 10 MiB may use kLargeBuffer
K_ROUND_LARGE = 2 * MiB          # round up large allocs to 2 MiB
K_EXTRA_LARGE_BUFFER = 1 << 30   # page_size:1g packs large allocations in 1 GiB blocks

#: the source's kMinDel32PaddingSizeCannVersion ("9.1.0"): from this CANN on, Ascend 950 parts
#: get no +32 pad; kMinCannVersion ("8.1.RC1") is the first with 1 GiB pages
_NO_PAD_CANN = (9, 1, 0)
PAGE_1G_CANN = (8, 1, 0)
#: DECISION: the CANN version assumed when none is given is the newest the source knows
DEFAULT_CANN = "9.1.0"


#: torch_npu's warning (TORCH_NPU_WARN_ONCE) when memory on 1 GiB pages fails and is asked for
#: again on 2 MiB pages: its ``AclrtMallocAlign32`` (``HUGE1G_ONLY`` -> ``HUGE_FIRST``) and
#: ``AclrtMallocPhysical`` (``ACL_HBM_MEM_HUGE1G`` -> ``ACL_HBM_MEM_HUGE``) wrappers in
#: ``torch_npu/csrc/core/npu/interface/AclInterface.cpp``, same size, after any failure (the
#: missing space after "memory." is the source's)
PAGE_1G_FALLBACK_WARNING = (
    "The malloc 1G large-page physical memory failed, so malloc 2M page memory."
    "Using the 2M memory page may result in performance degradation. This warning occurs "
    "because the PYTORCH_NPU_ALLOC_CONF = page_size:1g configuration is enabled, but the "
    "pre-allocated number of 1G large pages is insufficient or 1G large-page memory "
    "pre-allocation is not enabled.")


def warn_page_1g_fallback() -> None:
    """Warn as torch_npu does before asking again on 2 MiB pages: a UserWarning (torch shows
    a c10 warning as one), attributed to the allocator's call so Python's default filter
    shows it once per place, as TORCH_NPU_WARN_ONCE shows it once per process."""
    warnings.warn(PAGE_1G_FALLBACK_WARNING, UserWarning, stacklevel=3)


#: a CANN version as CANN names its releases: "8.0.0", "8.1.RC1", "8.0.RC3.alpha002"
_CANN_VERSION = re.compile(r"\d{1,3}\.\d{1,3}(?:\.[0-9A-Za-z]{1,16}){0,3}")


def cann_tuple(version: object) -> tuple[int, int, int]:
    """The first three fields of a CANN version as numbers (an ``RCn`` or ``Tn`` field
    counts as 0, so "8.1.RC1" comes before "8.1.0"), for comparing versions as torch_npu's
    version checks do.

    >>> cann_tuple("8.1.RC1"), cann_tuple("9.1.0")
    ((8, 1, 0), (9, 1, 0))

    Raises:
        InvalidArgumentType: not a string.
        InvalidArgument: not a version (``major.minor`` then up to three more fields).
    """
    if not isinstance(version, str):
        raise InvalidArgumentType(f"the CANN version must be a string such as '8.1.RC1', "
                                  f"not {type(version).__name__}")
    if not _CANN_VERSION.fullmatch(version):
        raise InvalidArgument(f"the CANN version must read like '8.1.RC1' or '9.1.0', got "
                              f"{version[:40]!r}")
    parts = [int(field) if field.isdigit() else 0 for field in version.split(".")[:3]]
    major, minor, patch = (parts + [0, 0, 0])[:3]
    return major, minor, patch


def add_pad_size(soc_name: str, cann: str = DEFAULT_CANN) -> int:
    """AddPadSize (the source): 0 on Ascend 950 with CANN >= 9.1.0, else 32 bytes.

    >>> add_pad_size("Ascend910B2"), add_pad_size("Ascend950PR_9599"), \
add_pad_size("Ascend950PR_9599", "8.5.0")
    (32, 0, 32)
    """
    if soc_name.startswith("Ascend950") and cann_tuple(cann) >= _NO_PAD_CANN:
        return 0
    return 32


def _roundup_power2_next_division(size: int, divisions: int) -> int:
    """roundup_power2_next_division (the source): the next of ``divisions`` equal steps
    between the powers of two around ``size``."""
    if size & (size - 1) == 0:
        return size
    power2_floor = 1 << (size.bit_length() - 1)
    division = power2_floor >> (divisions.bit_length() - 1)
    if division == 0:
        return power2_floor << 1
    floor = size & ~(division - 1)
    return size if floor == size else floor + division


def round_size(size: int, conf: AllocatorConfig, pad: int) -> int:
    """round_size (the source): add the pad, then at least 512 bytes, in 512-byte steps, or
    the next power-of-two division when roundup_power2_divisions asks for it.

    >>> round_size(1 * MiB, AllocatorConfig(), 32), round_size(1, AllocatorConfig(), 0)
    (1049088, 512)
    """
    size += pad
    if size < K_MIN_BLOCK_SIZE:
        return K_MIN_BLOCK_SIZE
    divisions = conf.divisions_for(size)
    if divisions > 1 and size > K_MIN_BLOCK_SIZE * divisions:
        return _roundup_power2_next_division(size, divisions)
    return -(-size // K_MIN_BLOCK_SIZE) * K_MIN_BLOCK_SIZE


def allocation_size(size: int, conf: AllocatorConfig) -> int:
    """get_allocation_size (the source): the segment a rounded ``size`` needs: 2 MiB for the
    small pool, large_segment_size (20 MiB) below 10 MiB, else a multiple of 2 MiB.

    >>> [allocation_size(s * MiB, AllocatorConfig()) // MiB for s in (1, 2, 10, 64)]
    [2, 20, 10, 64]
    """
    if size <= K_SMALL_SIZE:
        return K_SMALL_BUFFER
    if size < K_MIN_LARGE_ALLOC:
        return conf.large_segment_size
    return -(-size // K_ROUND_LARGE) * K_ROUND_LARGE
