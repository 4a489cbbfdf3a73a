"""``PYTORCH_NPU_ALLOC_CONF``: torch_npu's allocator settings, parsed as torch_npu parses them.

Sources: ``Ascend/pytorch`` ``torch_npu/csrc/core/npu/NPUAllocatorConfig.{h,cpp}``
(``NPUAllocatorConfig::parseArgs`` and its ``parse*`` helpers; the keys torch_npu owns) and
``pytorch/pytorch`` ``c10/core/AllocatorConfig.{h,cpp}`` (``ConfigTokenizer`` and
``AcceleratorAllocatorConfig::parseArgs``, which torch_npu calls for the common keys it
supports). Error texts are the sources' (without torch_npu's ``[ERROR] ... ERRxxxxx`` tail
and the ", " before it); an unknown key adds the closest known one ("Did you mean ...?"), and
a number that is not one names its key (std's own texts are just "stoull" / "stod").
:func:`alloc_conf_from_env` reads the environment as torch_npu does.

>>> conf = parse_alloc_conf("max_split_size_mb:64,garbage_collection_threshold:0.6")
>>> conf.max_split_size // MiB, conf.garbage_collection_threshold, conf.expandable_segments
(64, 0.6, False)
>>> try:
...     parse_alloc_conf("colour:blue")
... except AllocatorConfigError as e:
...     print(str(e), int(e.code))
Unrecognized key 'colour' in NPU allocator config 100000
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ..memory.constants import MiB
from ..memory.errors import AllocatorConfigError, InvalidArgumentType

if TYPE_CHECKING:
    from .releases import TorchNpuRelease

__all__ = ["AllocatorConfig", "AllocatorConfigError", "parse_alloc_conf", "alloc_conf_from_env",
           "ALLOC_CONF_ENV", "ACC_ALLOC_CONF_ENV", "SIZE_MAX",
           "K_LARGE_BUFFER", "K_ALIGN_ROUND_LARGE", "ROUNDUP_INTERVALS"]

#: std::numeric_limits<size_t>::max(): max_split_size's "unlimited" (c10 AllocatorConfig.h)
SIZE_MAX = (1 << 64) - 1
#: kLargeBuffer: "large" allocations may be packed in 20 MiB blocks (NPUAllocatorConfig.h)
K_LARGE_BUFFER = 20 * MiB
#: kMinLargeAlloc: allocations between 1 and 10 MiB may use kLargeBuffer (NPUAllocatorConfig.h)
K_MIN_LARGE_ALLOC = 10 * MiB
#: kAlignRoundLarge: base_addr_aligned_kb's default and upper bound, 16 KiB (NPUAllocatorConfig.h)
K_ALIGN_ROUND_LARGE = 16384
#: kRoundUpPowerOfTwoIntervals: 1 MiB .. 64 GiB (c10 AllocatorConfig.cpp)
ROUNDUP_INTERVALS = 16

# torch_npu's own keys (NPUAllocatorConfig::getKeys) and the common keys it supports
# (kNPUSupportAccKeys in NPUAllocatorConfig.cpp); c10's keys it refuses are the rest of
# AcceleratorAllocatorConfig::getKeys.
_NPU_KEYS = frozenset({
    "pin_memory_expandable_segments", "pinned_mem_register", "base_addr_aligned_kb", "page_size",
    "segment_size_mb", "multi_stream_lazy_reclaim", "pinned_reserve_segment_size_mb",
    "per_process_memory_fraction", "release_lock_on_npumalloc", "throw_on_npumalloc_oom"})
_SUPPORTED_ACC_KEYS = frozenset({
    "max_split_size_mb", "garbage_collection_threshold", "roundup_power2_divisions",
    "expandable_segments", "pinned_use_background_threads", "large_segment_size_mb",
    "max_non_split_rounding_mb", "pinned_max_round_threshold_mb", "pinned_max_cached_size_mb"})
_ACC_KEYS = _SUPPORTED_ACC_KEYS | {
    "backend", "release_lock_on_cudamalloc", "release_lock_on_hipmalloc",
    "pinned_use_cuda_host_register", "pinned_use_hip_host_register",
    "pinned_num_register_threads"}


@dataclass(frozen=True, slots=True)
class AllocatorConfig:
    """The settings, in bytes where torch_npu keeps bytes; defaults are torch_npu's."""

    max_split_size: int = SIZE_MAX
    max_non_split_rounding_size: int = K_LARGE_BUFFER
    garbage_collection_threshold: float = 0.0
    #: one division count per power-of-two interval from 1 MiB (index 0) to 64 GiB
    roundup_power2_divisions: tuple[int, ...] = (0,) * ROUNDUP_INTERVALS
    expandable_segments: bool = False
    large_segment_size: int = K_LARGE_BUFFER
    base_addr_aligned_size: int = K_ALIGN_ROUND_LARGE
    page_size_1g: bool = False
    segment_size: int = 0
    multi_stream_lazy_reclaim: bool = False
    per_process_memory_fraction: float = 1.0
    release_lock_on_npumalloc: bool = False
    throw_on_npumalloc_oom: bool = False
    #: host (pinned) allocator settings: parsed and kept, not used by the device allocator
    pinned: dict[str, Any] = field(default_factory=dict)
    text: str = ""

    def divisions_for(self, size: int) -> int:
        """roundup_power2_divisions(size): the count for ``size``'s interval
        (c10 AllocatorConfig.cpp ``AcceleratorAllocatorConfig::roundup_power2_divisions``)."""
        index = max(0, size.bit_length() - 1 - 20)
        return self.roundup_power2_divisions[min(index, ROUNDUP_INTERVALS - 1)]


class _Tokens:
    """c10's ConfigTokenizer: keys, values and the characters ``,:[]``; whitespace dropped."""

    def __init__(self, text: str) -> None:
        self.items: list[str] = []
        buf = ""
        for ch in text:
            if ch in ",:[]":
                if buf:
                    self.items.append(buf)
                    buf = ""
                self.items.append(ch)
            elif not ch.isspace():
                buf += ch
        if buf:
            self.items.append(buf)

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> str:
        if i >= len(self.items):
            raise AllocatorConfigError("Index out of bounds in ConfigTokenizer")
        return self.items[i]

    def check_token(self, i: int, token: str) -> None:
        # ConfigTokenizer::checkToken only checks the index; its bool result is ignored by
        # every caller, so a wrong separator passes, as in torch.
        self[i]

    def to_size(self, i: int, key: str) -> int:
        return int(_number(self[i], int, key))  # an int already (kind int)

    def to_double(self, i: int, key: str) -> float:
        return _number(self[i], float, key)

    def to_bool(self, i: int) -> bool:
        token = self[i]
        if token not in ("True", "False"):
            raise AllocatorConfigError(
                f"Expected 'True' or 'False' at index {i} in ConfigTokenizer but got '{token}'")
        return token == "True"

    def skip_key(self, i: int) -> int:
        self.check_token(i + 1, ":")
        i += 2
        if self[i] != "[":
            return i
        i += 1
        while i < len(self.items) and self.items[i] != "]":
            i += 1
        if i >= len(self.items):
            raise AllocatorConfigError(
                "Expected closing bracket ']' in ConfigTokenizer but reached end of config")
        return i


def _number(token: str, kind: type, key: str) -> int | float:
    """``key``'s value ``token`` read as c10's ConfigTokenizer::toSizeT / toDouble read it
    (``std::stoull`` / ``std::stod``), in time linear in its length.

    DECISION: the whole token must be a number: stoull would read "64MB" as 64 and ignore
    the tail; the simulator refuses it, naming the key and what stoull would have read.
    std's own messages are only "stoull" / "stod"; these say which key and value.
    """
    name = "stoull" if kind is int else "stod"
    shown = token if len(token) <= 24 else token[:20] + "..."
    if kind is int:
        if token.isascii() and token.isdigit():
            # more than 20 digits is past SIZE_MAX, not worth converting (and Python's int()
            # refuses past 4300 digits)
            value = int(token) if len(token.lstrip("0")) <= 20 else SIZE_MAX + 1
            if value <= SIZE_MAX:
                return value
            raise AllocatorConfigError(f"{name}: value '{shown}' out of range for {key} "
                                       f"(at most {SIZE_MAX})")
    else:
        try:
            return float(token)
        except ValueError:
            pass
    lead = re.match(r"[0-9]+", token) if kind is int else None
    hint = (f": write a whole number, {key}:{lead.group()}" if lead else
            ": write a whole number" if kind is int else ": write a number")
    raise AllocatorConfigError(f"{name}: invalid value '{shown}' for {key}{hint}")


def _is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _bool_value(tok: _Tokens, i: int, key: str) -> tuple[int, bool]:
    # the NPUAllocatorConfig::parse{PinnedMemRegister,MultiStreamLazyReclaim,...} helpers
    tok.check_token(i + 1, ":")
    i += 2
    if i >= len(tok):
        raise AllocatorConfigError(f"Error, expecting {key} value")
    if tok[i] not in ("True", "False"):
        raise AllocatorConfigError(f"Expected a single True/False argument for {key}")
    return i, tok[i] == "True"


def _parse_common(tok: _Tokens, values: dict[str, Any]) -> None:
    """AcceleratorAllocatorConfig::parseArgs (c10 AllocatorConfig.cpp) for the common keys."""
    i = 0
    while i < len(tok):
        key = tok[i]
        if key in ("max_split_size_mb", "max_non_split_rounding_mb"):
            tok.check_token(i + 1, ":")
            i += 2
            mb = tok.to_size(i, key)
            if mb < K_LARGE_BUFFER // MiB:
                raise AllocatorConfigError(
                    f"CachingAllocator option {key} too small, must be >= {K_LARGE_BUFFER // MiB}")
            name = ("max_split_size" if key == "max_split_size_mb"
                    else "max_non_split_rounding_size")
            values[name] = min(mb, SIZE_MAX // MiB) * MiB
        elif key == "large_segment_size_mb":
            # AcceleratorAllocatorConfig::parseLargeSegmentSize
            tok.check_token(i + 1, ":")
            i += 2
            mb = tok.to_size(i, key)
            if mb <= K_MIN_LARGE_ALLOC // MiB:
                raise AllocatorConfigError(
                    "CachingAllocator option large_segment_size_mb must be > "
                    f"{K_MIN_LARGE_ALLOC // MiB} MB")
            values["large_segment_size"] = min(mb, SIZE_MAX // MiB) * MiB
        elif key == "garbage_collection_threshold":
            tok.check_token(i + 1, ":")
            i += 2
            value = tok.to_double(i, key)
            if not 0 < value < 1.0:
                raise AllocatorConfigError(
                    "garbage_collect_threshold is invalid, set it in (0.0, 1.0)")
            values["garbage_collection_threshold"] = value
        elif key == "roundup_power2_divisions":
            i = _parse_divisions(tok, i, values)
        elif key == "expandable_segments":
            tok.check_token(i + 1, ":")
            i += 2
            values["expandable_segments"] = tok.to_bool(i)
        elif key == "pinned_use_background_threads":
            tok.check_token(i + 1, ":")
            i += 2
            values["pinned"][key] = tok.to_bool(i)
        else:
            i = tok.skip_key(i)
        if i + 1 < len(tok):
            tok.check_token(i + 1, ",")
            i += 1
        i += 1


_DIVISIONS = "roundup_power2_divisions"


def _parse_divisions(tok: _Tokens, i: int, values: dict[str, Any]) -> int:
    """AcceleratorAllocatorConfig::parseRoundUpPower2Divisions: ``n`` for every interval, or
    ``[64:8,256:4,>:1]`` (interval boundaries in MiB, powers of two; ``>`` for the rest)."""
    divisions = [0] * ROUNDUP_INTERVALS
    tok.check_token(i + 1, ":")
    i += 2
    if tok[i] == "[":
        first, last_index = True, 0
        i += 1
        while i < len(tok) and tok[i] != "]":
            value_index = i
            tok.check_token(i + 1, ":")
            i += 2
            value = tok.to_size(i, _DIVISIONS)
            if value != 0 and not _is_pow2(value):
                raise AllocatorConfigError(
                    "For roundups, the divisions has to be power of 2 or 0 to disable roundup ")
            if tok[value_index] == ">":
                divisions[last_index + 1:] = [value] * (ROUNDUP_INTERVALS - last_index - 1)
            else:
                boundary = tok.to_size(value_index, _DIVISIONS)
                if not _is_pow2(boundary):
                    raise AllocatorConfigError(
                        "For roundups, the intervals have to be power of 2 ")
                index = min(boundary.bit_length() - 1, ROUNDUP_INTERVALS - 1)
                if first:
                    divisions[:index] = [value] * index
                    first = False
                divisions[index] = value
                last_index = index
            if tok[i + 1] != "]":
                tok.check_token(i + 1, ",")
                i += 1
            i += 1
        if i >= len(tok):
            raise AllocatorConfigError(
                "Expected closing bracket ']' in ConfigTokenizer but reached end of config")
    else:
        value = tok.to_size(i, _DIVISIONS)
        if not _is_pow2(value):
            raise AllocatorConfigError("For roundups, the divisions has to be power of 2 ")
        divisions = [value] * ROUNDUP_INTERVALS
    values["roundup_power2_divisions"] = tuple(divisions)
    return i


def _parse_npu(tok: _Tokens, values: dict[str, Any]) -> None:
    """NPUAllocatorConfig::parseArgs's second pass: the keys torch_npu owns."""
    i = 0
    while i < len(tok):
        key = tok[i]
        if key in ("pin_memory_expandable_segments", "pinned_mem_register"):
            i, values["pinned"][key] = _bool_value(tok, i, key)
        elif key in ("multi_stream_lazy_reclaim", "release_lock_on_npumalloc",
                     "throw_on_npumalloc_oom"):
            i, values[key] = _bool_value(tok, i, key)
        elif key == "base_addr_aligned_kb":
            # NPUAllocatorConfig::parseAddrAlignSize
            tok.check_token(i + 1, ":")
            i += 2
            if i >= len(tok):
                raise AllocatorConfigError("Error, expecting base_addr_aligned_kb value")
            text = tok[i]
            if not text.isascii() or not text.isdigit():
                raise AllocatorConfigError(
                    "CachingAllocator option base_addr_aligned_kb is invalid.")
            # stoi, then "the same length as its number" and the range; DECISION: a number
            # past int's range (stoi's std::out_of_range, "stoi") gets the range message,
            # which names the key
            if (len(text) > 10 or str(int(text)) != text
                    or int(text) > K_ALIGN_ROUND_LARGE // 1024):
                raise AllocatorConfigError("CachingAllocator option base_addr_aligned_kb error, "
                                           "must be [0~16], dtype is int")
            values["base_addr_aligned_size"] = int(text) * 1024
        elif key == "page_size":
            # NPUAllocatorConfig::parsePageSize
            if i + 2 >= len(tok):
                raise AllocatorConfigError("page_size requires format 'page_size:1g'")
            i += 2
            if tok[i] != "1g":
                raise AllocatorConfigError(f"Unsupported page_size value: {tok[i]}")
            values["page_size_1g"] = True
        elif key == "segment_size_mb":
            # NPUAllocatorConfig::parseSegmentSizeMb (deprecated for large_segment_size_mb)
            tok.check_token(i + 1, ":")
            i += 2
            if i >= len(tok):
                raise AllocatorConfigError("Error, expecting segment_size_mb value")
            text = tok[i]
            if not text.isascii() or not text.isdigit():
                raise AllocatorConfigError("CachingAllocator option segment_size_mb is invalid.")
            # DECISION: past int's range (stoi's std::out_of_range) gets the range message too
            digits = text.lstrip("0") or "0"
            if len(digits) > 10 or not 20 <= int(digits) <= 512:
                raise AllocatorConfigError("CachingAllocator option segment_size_mb error, "
                                           "must be [20, 512], dtype is int")
            values["segment_size"] = int(text) * MiB
        elif key == "per_process_memory_fraction":
            # NPUAllocatorConfig::parsePerProcessMemoryFraction
            tok.check_token(i + 1, ":")
            i += 2
            if i >= len(tok):
                raise AllocatorConfigError("Error, expecting per_process_memory_fraction value")
            value = tok.to_double(i, key)
            if not 0.0 <= value <= 1.0:
                raise AllocatorConfigError(
                    "per_process_memory_fraction is invalid, set it in [0.0, 1.0]")
            values["per_process_memory_fraction"] = value
        elif key == "pinned_reserve_segment_size_mb":
            tok.check_token(i + 1, ":")
            i += 2
            values["pinned"][key] = tok.to_size(i, key)
        else:
            i = tok.skip_key(i)
        if i + 1 < len(tok):
            tok.check_token(i + 1, ",")
            i += 1
        i += 1


def _did_you_mean(key: str) -> str:
    """". Did you mean 'k'?" for the key torch_npu takes that is closest to ``key``, or "".
    torch_npu's message ends "in NPU allocator config, " before its error code; the
    simulator ends it there and adds the suggestion."""
    if len(key) > 64:
        return ""
    close = difflib.get_close_matches(key, sorted(_SUPPORTED_ACC_KEYS | _NPU_KEYS), n=1)
    return f". Did you mean '{close[0]}'?" if close else ""


#: the most characters of a setting or key that a message shows: a 110 KB setting echoed in
#: full (twice, with the key) buried what was wrong
SHOWN_CHARS = 60


def shown(text: str, limit: int = SHOWN_CHARS) -> str:
    """``text`` for a message: at most ``limit`` characters, the cut ones counted.

    >>> shown("x" * 100, 10)
    'xxxxxxxxxx... (100 characters)'
    """
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def parse_alloc_conf(text: object = "", release: TorchNpuRelease | None = None
                     ) -> AllocatorConfig:
    """Parse a ``PYTORCH_NPU_ALLOC_CONF`` string as NPUAllocatorConfig::parseArgs does (of
    ``release``'s branch for the keys it knows: :mod:`.releases`; the newest by default).

    Keys are checked first (unknown: "Unrecognized key"; a c10 key torch_npu does not take:
    "torch_npu not support key"), then the common keys, then torch_npu's, then the
    incompatibilities (expandable_segments with max_split_size_mb or
    garbage_collection_threshold). Cost: linear in the string's length.

    Raises:
        AllocatorConfigError (a ValueError): the string torch_npu refuses, with its message.
        InvalidArgumentType: not a str.
    """
    if not isinstance(text, str):
        raise InvalidArgumentType(
            f"PYTORCH_NPU_ALLOC_CONF must be a str, not {type(text).__name__}")
    values: dict[str, Any] = {"pinned": {}}
    if not text:
        return AllocatorConfig()
    tok = _Tokens(text)
    i = 0
    while i < len(tok):
        key = tok[i]
        if release is not None and not release.newest and key not in release.keys:
            raise AllocatorConfigError(f"{release.unknown_key(shown(key))} (torch_npu "
                                       f"{release.version} does not know it)")
        if key not in _ACC_KEYS and key not in _NPU_KEYS:
            raise AllocatorConfigError(
                f"Unrecognized key '{shown(key)}' in NPU allocator config"
                f"{_did_you_mean(key)}")
        if key not in _SUPPORTED_ACC_KEYS and key not in _NPU_KEYS:
            raise AllocatorConfigError(
                f"torch_npu not support key '{shown(key)}' in NPU allocator config"
                f"{_did_you_mean(key)}")
        i = tok.skip_key(i)
        if i + 1 < len(tok):
            tok.check_token(i + 1, ",")
            i += 1
        i += 1
    _parse_common(tok, values)
    _parse_npu(tok, values)
    conf = replace(AllocatorConfig(), text=text, **values)
    if conf.expandable_segments and (conf.max_split_size != SIZE_MAX
                                     or conf.garbage_collection_threshold != 0):
        raise AllocatorConfigError(
            "`max_split_size_mb` or `garbage_collection_threshold`, cannot be enabled with "
            "`expandable_segments`, please set `expandable_segments` to `False`.")
    return conf


#: where torch_npu reads its allocator settings at start-up (``NPUAllocatorConfig::instance``,
#: ``NPUAllocatorConfig.cpp``): its own variable, or (torch_npu 2.10 and later) the
#: accelerator-wide one torch reads for every device type
ALLOC_CONF_ENV = "PYTORCH_NPU_ALLOC_CONF"
ACC_ALLOC_CONF_ENV = "PYTORCH_ALLOC_CONF"


def alloc_conf_from_env(environ: Mapping[str, str] | None = None,
                        release: TorchNpuRelease | None = None) -> tuple[str | None, str]:
    """(the variable, its settings) as torch_npu takes them from ``environ`` (default
    ``os.environ``): ``PYTORCH_NPU_ALLOC_CONF``, else ``PYTORCH_ALLOC_CONF`` (from 2.10:
    ``release``'s rule, the newest by default); ``(None, "")`` when neither is set
    (torch_npu's defaults). A variable set to "" counts as set, as ``c10::utils::get_env``
    reports it.

    Raises:
        AllocatorConfigError: both are set, with torch_npu's message.
    """
    if environ is None:
        environ = os.environ
    npu, acc = environ.get(ALLOC_CONF_ENV), environ.get(ACC_ALLOC_CONF_ENV)
    if release is not None and not release.reads_acc_env:
        acc = None
    if npu is not None and acc is not None:
        raise AllocatorConfigError(f"Both {ALLOC_CONF_ENV} and {ACC_ALLOC_CONF_ENV} have been "
                                   f"set, please set only one of them.")
    if npu is not None:
        return ALLOC_CONF_ENV, npu
    if acc is not None:
        return ACC_ALLOC_CONF_ENV, acc
    return None, ""
