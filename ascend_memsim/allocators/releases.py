"""torch_npu releases: the allocator behaviours that changed between them, for
``estimate --torch-npu VERSION``.

Each release line is read from its branch of ``Ascend/pytorch`` (``v2.1.0`` ... ``v2.12.0``;
2.13 and later from ``master``, which builds 2.13 to 2.15):

- **the settings it knows** (``NPUAllocatorConfig::parseArgs`` in
  ``torch_npu/csrc/core/npu/NPUAllocatorConfig.cpp``; from 2.10 the common keys come from
  torch's ``AcceleratorAllocatorConfig``, the ones in ``kNPUSupportAccKeys``). A key a
  release does not know is refused with that release's message: "Unrecognized
  CachingAllocator option: KEY" up to 2.9, "Unrecognized key 'KEY' in NPU allocator config"
  from 2.10;
- **``set_per_process_memory_fraction``** (``DeviceCachingAllocator::setMemoryFraction`` in
  ``NPUCachingAllocator.cpp``): up to 2.9 any call caps the segments at the fraction of the
  device's total, 1.0 included (``allowed_memory_maximum = fraction * device_total;
  set_fraction = true``), and a cap turns on ``garbage_collection_threshold``; from 2.10
  (Ascend/pytorch PR-34238) 1.0 removes the cap, and the cap can be set in
  ``PYTORCH_NPU_ALLOC_CONF`` (``per_process_memory_fraction``);
- **``PYTORCH_ALLOC_CONF``**, torch's accelerator-wide variable, is read from 2.10
  (``NPUAllocatorConfig::instance``); earlier releases read ``PYTORCH_NPU_ALLOC_CONF`` only.

>>> release("2.6.0").caps_at_one, release("2.14").caps_at_one, release("2.14").branch
(True, False, 'master')
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["TorchNpuRelease", "RELEASES", "NEWEST", "release"]

# the keys each branch's parseArgs compares (and, from 2.10, its kNPUSupportAccKeys)
_BASE = frozenset({"max_split_size_mb", "garbage_collection_threshold", "expandable_segments"})
_V23 = _BASE | {"base_addr_aligned_kb", "page_size"}
_V26 = _V23 | {"segment_size_mb", "multi_stream_lazy_reclaim", "pinned_mem_register",
               "roundup_power2_divisions"}
_V27 = _V26 | {"max_non_split_rounding_mb", "pin_memory_expandable_segments",
               "release_lock_on_npumalloc"}
_V28 = _V26 | {"pin_memory_expandable_segments", "pinned_use_background_threads"}
_V29 = _V27 | {"pinned_use_background_threads"}
_V210 = _V29 | {"per_process_memory_fraction", "pinned_reserve_segment_size_mb"}
_V211 = _V210 | {"large_segment_size_mb"}
_NEWEST = _V211 | {"throw_on_npumalloc_oom", "pinned_max_round_threshold_mb",
                   "pinned_max_cached_size_mb"}


@dataclass(frozen=True)
class TorchNpuRelease:
    """The allocator behaviours of one torch_npu release line (see the module)."""

    version: str
    branch: str
    #: the PYTORCH_NPU_ALLOC_CONF keys it knows
    keys: frozenset[str]
    #: set_per_process_memory_fraction caps the segments even at 1.0 (up to 2.9)
    caps_at_one: bool
    #: PYTORCH_ALLOC_CONF is read (from 2.10)
    reads_acc_env: bool

    @property
    def newest(self) -> bool:
        return self.branch == "master"

    def unknown_key(self, key: str) -> str:
        """This release's refusal of a key it does not know."""
        if self.caps_at_one:
            return f"Unrecognized CachingAllocator option: {key}"
        return f"Unrecognized key '{key}' in NPU allocator config"


def _line(version: str, keys: frozenset[str], branch: str | None = None) -> TorchNpuRelease:
    old = int(version.split(".")[1]) < 10
    return TorchNpuRelease(version, branch or f"v{version}.0", keys, old, not old)


RELEASES = {r.version: r for r in (
    _line("2.1", _BASE | {"base_addr_aligned_kb", "page_size", "segment_size_mb"}),
    _line("2.2", _BASE), _line("2.3", _V23, "v2.3.1"), _line("2.4", _V23),
    _line("2.5", _V23, "v2.5.1"), _line("2.6", _V26), _line("2.7", _V27, "v2.7.1"),
    _line("2.8", _V28), _line("2.9", _V29), _line("2.10", _V210), _line("2.11", _V211),
    _line("2.12", _V211),
    _line("2.13", _NEWEST, "master"), _line("2.14", _NEWEST, "master"),
    _line("2.15", _NEWEST, "master"))}
#: the newest release the model knows, the default
NEWEST = RELEASES["2.15"]

_VERSION = re.compile(r"v?([0-9]{1,3})\.([0-9]{1,3})(?:\.[0-9]{1,4})?"
                      r"(?:[.+]?(?:post|rc|dev|a|b)[0-9]{0,6})?")


def release(text: str) -> TorchNpuRelease:
    """The release line of a torch_npu version ("2.6", "2.6.0", "2.7.1.post2", "v2.9.0").

    Raises:
        ValueError: not a version, or one the model does not know (the message lists them).
    """
    match = _VERSION.fullmatch(text.strip()) if isinstance(text, str) else None
    found = RELEASES.get(f"{match.group(1)}.{match.group(2)}") if match else None
    if found is None:
        shown = text[:40] + "..." if isinstance(text, str) and len(text) > 40 else text
        raise ValueError(f"torch_npu {shown!r}: the model knows the release lines "
                         f"{', '.join(RELEASES)} (a version such as 2.6 or 2.7.1.post2)")
    return found
