"""Products: what each simulated Ascend part has, and where each number comes from.

A :class:`Profile` is frozen; :meth:`Profile.with_overrides` makes a changed copy (tests
want a 64 MiB device). The registry is read-only to readers; :func:`register_profile` adds
a user's own product.

Capacities and system-reserved sizes are *not* in the vendor documentation; each figure below
says its source. ``hbm_bytes`` / ``ddr_bytes`` are the memory a part has; ``reserved_bytes``
the part of the main memory the system keeps, which the totals of ``aclrtGetMemInfo`` leave
out (:meth:`Profile.total`), as the vendor API does.

>>> get_profile("atlas a2").name
'A2'
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from types import MappingProxyType

from .args import as_int
from .constants import GiB, MiB
from .errors import InvalidArgument, InvalidArgumentType
from .units import parse_size

__all__ = [
    "Memory", "SizeRule", "Profile", "PROFILES", "DEFAULT_PRODUCT", "get_profile",
    "register_profile", "MEMORY_SPAN",
]


class Memory(str, Enum):
    """A kind of device memory; each is one address range per device."""

    HBM = "HBM"
    DDR = "DDR"


class SizeRule(str, Enum):
    """How aclrtMalloc rounds the requested size (api_ref 11-01, aclrtMalloc)."""

    #: ALIGN_UP(size, 32): Ascend 950PR/950DT.
    ALIGN32 = "align32"
    #: ALIGN_UP(size, 32) + 32, but only ALIGN_UP(size, 32) for 1 GB pages: Atlas A2/A3.
    ALIGN32_PLUS32 = "align32+32"


#: Each memory type of a device gets an address window this large; capacities must fit.
MEMORY_SPAN = 1 << 43


#: Page granularity by page kind, in bytes: a block's footprint is a multiple of its page's
#: size and starts on it. Normal pages are modelled at 64 bytes, the documented
#: sub-allocation rule (start = ALIGN_UP(m, 64)); huge pages are 2 MiB, and 1 GB pages 1 GiB.
PAGE_SIZES = MappingProxyType({"normal": 64, "huge": 2 * MiB, "huge1g": GiB})


@dataclass(frozen=True, slots=True)
class Profile:
    """One product as the simulator sees it. All sizes in bytes."""

    name: str
    description: str
    hbm_bytes: int
    ddr_bytes: int
    size_rule: SizeRule
    huge1g: bool
    usage_info: bool
    p2p: bool = True
    #: System-reserved bytes of the main memory: part of ``hbm_bytes`` / ``ddr_bytes`` (the
    #: memory the part has) but not of the total aclrtGetMemInfo reports, which a program sees
    #: (see :meth:`total`). 0 where no public source gives a figure.
    reserved_bytes: int = 0
    #: DVPP memory is a type of its own (aclrtCheckMemType's ACL_RT_MEM_TYPE_DVPP); False
    #: where it is ordinary device memory (Ascend 950PR/950DT)
    dvpp_type: bool = True
    device_count: int = 1
    aliases: tuple[str, ...] = ()
    #: what aclrtGetSocName (acl.get_soc_name) answers: the SoC_version of the part's
    #: platform config (hicann/runtime src/platform/platform_config/*/<soc>.ini)
    soc_name: str = ""
    #: aclrtHostRegister / HostRegisterV2 / HostGetDevicePointer / HostUnregister are
    #: supported (docs/zh/api_ref/11-02_host_memory_management.md: 950PR/DT, A3, A2; not
    #: the Atlas inference parts)
    host_register: bool = True
    #: the chip has STARS, which runs descriptor and offset copies (aclrtGetMemcpyDescSize,
    #: aclrtMemcpyAsyncWithDesc, aclrtMemcpyAsyncWithOffset): ``isStars`` and
    #: RT_FEATURE_TASK_MEMCPY_D2D_BY_OFFSET in hicann/runtime src/runtime/config/*/
    #: dev_info_reg.cc (910_B_93 and 950 have them, dc, the 310P, does not)
    stars: bool = True
    #: aclrtValueWrite / aclrtValueWait (11-09) are supported: RT_FEATURE_TASK_VALUE_WAIT in
    #: hicann/runtime src/runtime/config/*/dev_info_reg.cc (910_B_93 and 950 have it, dc,
    #: the 310P, does not; the 11-09 tables agree)
    value_wait: bool = True
    #: aclrtCmoAsync and the CMO descriptor calls (11-06) are supported: RT_FEATURE_TASK_CMO
    #: in the same files (910_B_93 and 950, not dc)
    cmo: bool = True
    #: aclrtCmoAsyncWithBarrier / aclrtCmoWaitBarrier (11-06) are supported:
    #: RT_FEATURE_TASK_ASYNC_CMO, only in the mini_v3 and as31xm1 configs (Atlas 200I/500 A2,
    #: the only part 11-06 lists for them); no built-in profile has it
    cmo_barrier: bool = False
    #: Where each number came from, by field name.
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        for name in ("hbm_bytes", "ddr_bytes", "reserved_bytes"):
            if isinstance(getattr(self, name), str):   # "64MiB", "1.5GiB": the one parser
                object.__setattr__(self, name, parse_size(getattr(self, name)))
        for name in ("hbm_bytes", "ddr_bytes", "device_count", "reserved_bytes"):
            value = as_int(getattr(self, name), f"profile {self.name}: {name}", 0, MEMORY_SPAN)
            object.__setattr__(self, name, value)
        for name in ("huge1g", "usage_info", "p2p", "dvpp_type", "host_register", "stars",
                     "value_wait", "cmo", "cmo_barrier"):
            if not isinstance(getattr(self, name), bool):
                raise InvalidArgumentType(f"profile {self.name}: {name} must be True or False, "
                                          f"got {getattr(self, name)!r}")
        if self.hbm_bytes % 64 or self.ddr_bytes % 64:
            raise InvalidArgument(f"profile {self.name}: capacities must be multiples of 64 bytes")
        if self.hbm_bytes == 0 and self.ddr_bytes == 0:
            raise InvalidArgument(f"profile {self.name}: a device needs some memory "
                                  f"(hbm_bytes or ddr_bytes)")
        if self.reserved_bytes % 64 or self.reserved_bytes >= self.capacity(self.main_memory):
            raise InvalidArgument(f"profile {self.name}: reserved_bytes={self.reserved_bytes} "
                                  f"must be a multiple of 64 below the main memory's "
                                  f"{self.capacity(self.main_memory)} bytes")
        if not 1 <= self.device_count <= 64:
            raise InvalidArgument(f"profile {self.name}: device_count={self.device_count} "
                                  f"is outside [1, 64]")
        try:
            object.__setattr__(self, "size_rule", SizeRule(self.size_rule))
        except ValueError:
            raise InvalidArgument(f"profile {self.name}: size_rule {self.size_rule!r} is not one "
                                  f"of {[r.value for r in SizeRule]}") from None

    @property
    def page_bytes(self) -> dict[str, int]:
        """The page sizes the part has, by page kind (``normal``, ``huge``, ``huge1g``): a
        block's footprint is a multiple of its page's size and starts on it, so these are the
        start alignments a property test checks.

        >>> get_profile("A3").page_bytes, get_profile("950PR").page_bytes
        ({'normal': 64, 'huge': 2097152, 'huge1g': 1073741824}, {'normal': 64, 'huge': 2097152})
        """
        return {kind: size for kind, size in PAGE_SIZES.items()
                if kind != "huge1g" or self.huge1g}

    @property
    def main_memory(self) -> Memory:
        """The memory aclrtMalloc draws from: HBM where the part has it, else DDR."""
        return Memory.HBM if self.hbm_bytes else Memory.DDR

    def capacity(self, memory: Memory) -> int:
        """Bytes of ``memory`` the part has per device, reserved ones included (0 when the
        part lacks it)."""
        return self.hbm_bytes if memory is Memory.HBM else self.ddr_bytes

    def total(self, memory: Memory) -> int:
        """The total aclrtGetMemInfo reports for ``memory``: its capacity without the
        system-reserved bytes (aclrtGetMemInfo docs: totals exclude reserved memory). The
        device allocates from exactly this many bytes."""
        reserved = self.reserved_bytes if memory is self.main_memory else 0
        return self.capacity(memory) - reserved

    def with_overrides(self, **changes: object) -> Profile:
        """A copy with some fields changed, e.g. ``with_overrides(hbm_bytes=64 * MiB)``.

        Raises:
            InvalidArgument: a field that does not exist, a value out of range, or HBM for
                a part that has none (a DDR-only part's capacity is ``ddr_bytes``).
        """
        known = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise InvalidArgument(f"unknown profile field(s) {unknown}; known: {sorted(known)}")
        changes = {k: v for k, v in changes.items() if v is not None}
        if not changes:
            return self
        if changes.get("hbm_bytes") and not self.hbm_bytes:
            # a DDR-only part given HBM would be a part that does not exist
            raise InvalidArgument(
                f"{self.name} has no HBM: its device memory is DDR ({self.ddr_bytes} bytes); "
                f"give its capacity as ddr_bytes=")
        main_key = "hbm_bytes" if changes.get("hbm_bytes", self.hbm_bytes) else "ddr_bytes"
        if main_key in changes and "reserved_bytes" not in changes:
            # DECISION: a capacity given for a simulation is the total its programs see
            # (Runtime("A2", hbm_bytes=64 * MiB) reports 64 MiB), so nothing is reserved.
            changes["reserved_bytes"] = 0
        sources = dict(self.sources)
        sources.update({k: "overridden for this simulation" for k in changes})
        # the field names were checked above; a value of the wrong type is the caller's
        return dataclasses.replace(self, sources=MappingProxyType(sources),
                                   **changes)  # type: ignore[arg-type]


_THIRD_PARTY = "third-party figure (vendor docs give none)"
_NO_RESERVE = ("0: no public source gives this part's system-reserved memory, so the total "
               "reported is the whole capacity")

#: What the two Ascend 950 parts share, with its sources.
_SOURCES_950 = {
    "size_rule": "api_ref 11-01, aclrtMalloc: ALIGN_UP(size, 32) on 950PR/950DT",
    "huge1g": ("DECISION: api_ref 25-02 (ACL_MEM_MALLOC_HUGE1G_ONLY) does not list 950PR/950DT "
               "among the parts without 1 GB pages; the simulator models them on A2/A3 only"),
    "usage_info": "api_ref 11-01, aclrtGetMemUsageInfo: not supported on 950PR/950DT",
    "dvpp_type": "aclrtCheckMemType notes (11-01_device_memory_malloc_and_free.md): "
                 "950PR/950DT have no separate DVPP memory type, it is ordinary device memory",
    "reserved_bytes": _NO_RESERVE,
}

_BUILTIN = (
    Profile(
        name="950PR", description="Ascend 950PR", hbm_bytes=128 * GiB, ddr_bytes=0,
        size_rule=SizeRule.ALIGN32, huge1g=False, usage_info=False, dvpp_type=False,
        aliases=("ascend950pr", "950pr", "ascend 950pr"),
        soc_name="Ascend950PR_9599",
        sources=MappingProxyType({
            "soc_name": ("SoC_version of hicann/runtime platform_config/cann-dev/"
                        "Ascend950PR_9599.ini (memory_size 128 GiB)"),
            "hbm_bytes": "128 GB: " + _THIRD_PARTY,
            **_SOURCES_950,
        })),
    Profile(
        name="950DT", description="Ascend 950DT", hbm_bytes=144 * GiB, ddr_bytes=0,
        size_rule=SizeRule.ALIGN32, huge1g=False, usage_info=False, dvpp_type=False,
        aliases=("ascend950dt", "950dt", "ascend 950dt"),
        soc_name="Ascend950DT_9591",
        sources=MappingProxyType({
            "soc_name": ("SoC_version of hicann/runtime platform_config/cann-dev/"
                        "Ascend950DT_9591.ini (memory_size 144 GiB)"),
            "hbm_bytes": "144 GB: " + _THIRD_PARTY,
            **_SOURCES_950,
        })),
    Profile(
        name="A2", description="Atlas A2 training/inference series (Ascend 910B)",
        hbm_bytes=64 * GiB, ddr_bytes=0, size_rule=SizeRule.ALIGN32_PLUS32, huge1g=True,
        usage_info=True, aliases=("atlas a2", "atlasa2", "910b", "ascend910b"),
        soc_name="Ascend910B2",
        reserved_bytes=64 * GiB - 65452113920,
        sources=MappingProxyType({
            "soc_name": ("SoC_version of hicann/runtime platform_config/cann/"
                        "Ascend910B2.ini (memory_size 64 GiB)"),
            "hbm_bytes": "64 GiB: memory_size=68719476736 in the runtime's platform config "
                         "(hicann/runtime src/platform/platform_config/cann/Ascend910B2.ini)",
            "reserved_bytes": "3116 MiB: 64 GiB less the total a 910B reports through "
                              "aclrtGetMemInfo, 65452113920 bytes (vllm-ascend issue #4404, "
                              "'total memory: 65452113920' on a 910B; driver-dependent)",
            "size_rule": "api_ref 11-01, aclrtMalloc: ALIGN_UP(size, 32) + 32 on Atlas A2/A3",
            "huge1g": "acl_rt.h aclrtMemMallocPolicy HUGE1G_ONLY; docs list A2/A3",
        })),
    Profile(
        name="A3", description="Atlas A3 training/inference series (per die; each die a device)",
        hbm_bytes=64 * GiB, ddr_bytes=0, size_rule=SizeRule.ALIGN32_PLUS32, huge1g=True,
        usage_info=True, device_count=2, aliases=("atlas a3", "atlasa3", "910c", "ascend910c"),
        soc_name="Ascend910_9392",
        sources=MappingProxyType({
            "soc_name": ("SoC_version of hicann/runtime platform_config/cann/"
                        "Ascend910_9392.ini (memory_size 64 GiB per die)"),
            "hbm_bytes": "64 GB per die: commonly cited, unverified; " + _THIRD_PARTY,
            "reserved_bytes": _NO_RESERVE,
            "device_count": "simulator default: one package of two dies",
            "size_rule": "api_ref 11-01, aclrtMalloc: ALIGN_UP(size, 32) + 32 on Atlas A2/A3",
            "huge1g": "acl_rt.h aclrtMemMallocPolicy HUGE1G_ONLY; docs list A2/A3",
        })),
    Profile(
        name="310P", description="DDR-only inference part (Ascend 310P, Atlas 300I)",
        hbm_bytes=0, ddr_bytes=24 * GiB, size_rule=SizeRule.ALIGN32_PLUS32, huge1g=False,
        usage_info=True, aliases=("ascend310p", "310p", "atlas 300i", "atlas300i"),
        soc_name="Ascend310P3", host_register=False, stars=False, value_wait=False, cmo=False,
        sources=MappingProxyType({
            "soc_name": ("SoC_version of hicann/runtime platform_config/cann/"
                        "Ascend310P3.ini (memory_size 24e9 bytes)"),
            "ddr_bytes": "24 GB LPDDR4X (Atlas 300I Pro card): " + _THIRD_PARTY,
            "reserved_bytes": _NO_RESERVE,
            "size_rule": ("api_ref 11-01, aclrtMalloc: the +32 rule's paragraph is tagged "
                          "npu=\"A3,910b,910,310p,310b\" in the document's source, so the "
                          "Atlas inference parts (310P) round as Atlas A2"),
            "huge1g": "api_ref 25-02, ACL_MEM_MALLOC_HUGE1G_ONLY: not on Atlas inference parts",
        })),
)

_registry: dict[str, Profile] = {}
_alias: dict[str, str] = {}

#: The registered profiles by name (read-only view).
PROFILES: Mapping[str, Profile] = MappingProxyType(_registry)

#: The product used when a simulation names none (acl.init without a memsim config).
DEFAULT_PRODUCT = "A2"


def _key(name: str) -> str:
    return re.sub(r"[\s_\-]+", " ", name.strip().lower())


def register_profile(profile: Profile, *, replace: bool = False) -> Profile:
    """Add a product to the registry under its name and aliases.

    Raises:
        InvalidArgument: the name or an alias is taken and ``replace`` is false.
    """
    if not isinstance(profile, Profile):
        raise InvalidArgumentType(f"register_profile takes a Profile, got {type(profile).__name__}")
    keys = {_key(profile.name), *(_key(a) for a in profile.aliases)}
    taken = sorted(k for k in keys if k in _alias and _alias[k] != profile.name)
    if (taken or profile.name in _registry) and not replace:
        raise InvalidArgument(f"profile name(s) already registered: {taken or [profile.name]}")
    _registry[profile.name] = profile
    for key in keys:
        _alias[key] = profile.name
    return profile


def get_profile(product: str | Profile) -> Profile:
    """The profile named ``product`` (short name or vendor spelling, any case).

    Raises:
        InvalidArgument: no such product; the message lists the known ones.
    """
    if isinstance(product, Profile):
        return product
    if not isinstance(product, str):
        raise InvalidArgumentType(f"product must be a str or Profile, got {type(product).__name__}")
    name = _alias.get(_key(product))
    if name is None:
        raise InvalidArgument(f"unknown product {product!r}; known: {sorted(_registry)}")
    return _registry[name]


for _profile in _BUILTIN:
    register_profile(_profile)
del _profile
