"""The documented allocation rules as small pure functions: policies, page kinds, rounding.

A request becomes a block in three documented steps (see :mod:`ascend_memsim.memory.explain`,
which reuses these functions, so the explanation cannot drift from the behaviour):

1. the *rule size*: the product's rounding of the requested size for the API
   (hicann/runtime docs/zh/api_ref/11-01_device_memory_malloc_and_free.md, aclrtMalloc /
   aclrtMallocAlign32): :func:`rule_size`;
2. the *page kinds* to try, in order, from the policy (acl_rt.h, aclrtMemMallocPolicy):
   :func:`parse_policy`, :func:`page_order`;
3. the *footprint*: the rule size rounded up to the page size (:data:`PAGE_BYTES`), placed
   on a page boundary (the project's memory model, a DECISION: see
   docs/reference/rules.md).

Also the address layout: each device owns one window of addresses (:func:`device_base`).
"""

from __future__ import annotations

from enum import Enum
from typing import NamedTuple

from .args import SIZE_MAX, UINT32_MAX, as_int, as_size
from .constants import MallocFlag, MallocPolicy, MiB
from .errors import FeatureNotSupported, InvalidArgument
from .profiles import MEMORY_SPAN, PAGE_SIZES, Memory, Profile, SizeRule

__all__ = [
    "Page", "Api", "PhysicalApi", "parse_api", "Request", "align_up", "rule_size", "page_order",
    "parse_policy",
    "policy_name", "device_base", "device_of", "DEVICE_SPAN", "MEMORY_OFFSET", "UVM_BASE",
    "UVM_END",
    "HUGE_FIRST_THRESHOLD", "OUT_OF_RANGE_HUGE_FROM", "PAGE_BYTES", "POLICY_MIN",
    "CACHED_POLICIES", "DEFAULT_POLICY", "P2P_POLICIES", "fallback_note", "plan",
]

#: The default policy, HUGE_FIRST, as a plain int: a default of this kind takes the device's
#: fast argument path (an IntEnum member would be checked again on every call).
DEFAULT_POLICY = int(MallocPolicy.HUGE_FIRST)


class Page(str, Enum):
    """The page kind backing a block."""

    NORMAL = "normal"
    HUGE = "huge"
    HUGE1G = "huge1g"


#: Page granularity by page kind (profiles.PAGE_SIZES, the one place the sizes are written).
PAGE_BYTES = {page: PAGE_SIZES[page.value] for page in Page}

#: HUGE_FIRST gives normal pages to a request of at most this many bytes (acl_rt.h comment
#: on ACL_MEM_MALLOC_HUGE_FIRST).
HUGE_FIRST_THRESHOLD = 1 * MiB

#: DECISION: a policy outside the enum is a hint (memory.cpp passes it on as RT_MEMORY_DEFAULT,
#: no error); huge pages from this size up.
OUT_OF_RANGE_HUGE_FROM = 2 * MiB


class Api(str, Enum):
    """Which allocation entry point made a block; the API decides the rounding rule."""

    MALLOC = "aclrtMalloc"
    MALLOC_ALIGN32 = "aclrtMallocAlign32"
    MALLOC_CACHED = "aclrtMallocCached"
    MALLOC_WITH_CFG = "aclrtMallocWithCfg"
    MALLOC_FOR_TASK_SCHEDULER = "aclrtMallocForTaskScheduler"

    @classmethod
    def parse(cls, name: str | Api) -> Api:
        """An API from its C name or pyacl name (``"aclrtMallocAlign32"``, ``"malloc_align32"``).

        Raises:
            InvalidArgument: no such allocation API.
        """
        if isinstance(name, Api):
            return name
        for api in cls:
            if name in (api.value, api.pyacl_name, api.name.lower()):
                return api
        raise InvalidArgument(f"unknown allocation API {name!r}; known: "
                              f"{[a.pyacl_name for a in cls]}")

    @property
    def pyacl_name(self) -> str:
        """``malloc_align32`` for aclrtMallocAlign32."""
        return self.name.lower()


class PhysicalApi(str, Enum):
    """The allocation entry points of physical memory (11-04), which make handles, not blocks.

    Kept apart from :class:`Api`, which names the APIs that make blocks (traces, replay and
    the size rules read it), so fault injection can name them (:func:`parse_api`).
    """

    MALLOC_PHYSICAL = "aclrtMallocPhysical"

    @property
    def pyacl_name(self) -> str:
        """``malloc_physical`` for aclrtMallocPhysical."""
        return self.name.lower()


def parse_api(name: str | Api | PhysicalApi) -> Api | PhysicalApi:
    """An allocation API, of blocks or of physical memory, from its C or pyacl name.

    Raises:
        InvalidArgument: no such allocation API.
    """
    if isinstance(name, PhysicalApi):
        return name
    for api in PhysicalApi:
        if name in (api.value, api.pyacl_name):
            return api
    try:
        return Api.parse(name)
    except InvalidArgument:
        raise InvalidArgument(f"unknown allocation API {name!r}; known: "
                              f"{[a.pyacl_name for a in (*Api, *PhysicalApi)]}") from None


#: The policies aclrtMallocCached maps to page flags of their own (memory.cpp,
#: aclrtMallocCachedImpl); it maps every other value, the _P2P ones included, to
#: RT_MEMORY_DEFAULT and goes on, which the simulator treats as the out-of-enum hint rule.
CACHED_POLICIES = frozenset({MallocPolicy.HUGE_FIRST, MallocPolicy.HUGE_ONLY,
                             MallocPolicy.NORMAL_ONLY, MallocPolicy.HUGE1G_ONLY})

_FLAG_BITS = int(MallocFlag.LOW_BAND_WIDTH | MallocFlag.HIGH_BAND_WIDTH
                 | MallocFlag.USER_SPACE_READONLY)
_READONLY = int(MallocFlag.USER_SPACE_READONLY)  # a plain int: IntFlag's & is slow

# Address layout (DECISION): device d owns [DEVICE_SPAN * (d + 1), DEVICE_SPAN * (d + 2));
# inside it HBM starts at offset 0 and DDR at MEMORY_SPAN. So a pointer names its device.
DEVICE_SPAN = 2 * MEMORY_SPAN
MEMORY_OFFSET = {Memory.HBM: 0, Memory.DDR: MEMORY_SPAN}
#: Managed (unified) memory's addresses, one range per process: "[0x90000000000ULL,
#: 0x90000000000ULL+3TB)" (hicann/runtime docs/zh/api_ref/11-05_unified_addressing.md,
#: aclrtMemManagedAdvise). Below the first device's window: the host part of the layout.
UVM_BASE = 0x900_0000_0000
UVM_END = UVM_BASE + (3 << 40)


def device_base(device_id: int) -> int:
    """The first address of device ``device_id``'s window."""
    return DEVICE_SPAN * (device_id + 1)


def device_of(ptr: int) -> int:
    """The device whose window holds ``ptr`` (-1 below the first device)."""
    return ptr // DEVICE_SPAN - 1


def align_up(n: int, k: int) -> int:
    """ALIGN_UP[n, k] of the vendor docs: ((n - 1) // k + 1) * k, for n >= 1.

    >>> align_up(100, 32), align_up(96, 32)
    (128, 96)
    """
    return -(-n // k) * k


def parse_policy(policy: int, api: Api | PhysicalApi) -> tuple[MallocPolicy | None, bool]:
    """Split a checked policy word into (base policy or None if outside the enum, readonly).

    Only the APIs that take an aclrtMallocConfig read the flag bits (acl_rt.h: aclrtMallocWithCfg
    may OR a bandwidth flag and USER_SPACE_READONLY into the policy). For the others a flagged
    word is a value outside the enum, as memory.cpp's if/else chain treats it.
    aclrtMallocCached maps any policy but its four (:data:`CACHED_POLICIES`) to the default
    (memory.cpp, aclrtMallocCachedImpl), so for it a _P2P policy is a hint too (no P2P
    memory). For HUGE1G_ONLY_P2P that source still drops the +32 padding while it allocates
    default pages: :func:`rule_size` follows it (its ``policy`` argument).
    """
    if api in _CFG_APIS and policy >= 0:
        readonly = bool(policy & _READONLY)
        value = policy & ~_FLAG_BITS
    else:
        readonly, value = False, policy
    base = _POLICY_BY_VALUE.get(value)
    if api is Api.MALLOC_CACHED and base not in CACHED_POLICIES:
        base = None
    return base, readonly


_POLICY_BY_VALUE = {int(p): p for p in MallocPolicy}
_CFG_APIS = frozenset({Api.MALLOC_WITH_CFG, Api.MALLOC_FOR_TASK_SCHEDULER})
#: The C type of a policy is an enum: any int32 or uint32 value can be passed. Values outside
#: the enum are hints (see OUT_OF_RANGE_HUGE_FROM), so the range check only refuses what C
#: cannot hold.
POLICY_MIN = -(1 << 31)
#: The policies memory.cpp never pads (``huge1g`` in aclMallocMemInner, aclrtMallocCachedImpl).
_HUGE1G_POLICIES = frozenset({int(MallocPolicy.HUGE1G_ONLY), int(MallocPolicy.HUGE1G_ONLY_P2P)})
_HUGE_FIRST = (MallocPolicy.HUGE_FIRST, MallocPolicy.HUGE_FIRST_P2P)
_HUGE_ONLY = (MallocPolicy.HUGE_ONLY, MallocPolicy.HUGE_ONLY_P2P)
_NORMAL_ONLY = (MallocPolicy.NORMAL_ONLY, MallocPolicy.NORMAL_ONLY_P2P)
P2P_POLICIES = frozenset({MallocPolicy.HUGE_FIRST_P2P, MallocPolicy.HUGE_ONLY_P2P,
                  MallocPolicy.NORMAL_ONLY_P2P, MallocPolicy.HUGE1G_ONLY_P2P})


def page_order(profile: Profile, size: int, base: MallocPolicy | None) -> tuple[Page, ...]:
    """The page kinds to try, in order, for ``size`` bytes under ``base`` policy.

    Raises:
        FeatureNotSupported: 1 GB pages on a product without them.
    """
    if base in _HUGE_FIRST:
        # acl_rt.h: HUGE_FIRST uses normal pages up to 1 MiB, else huge pages falling back.
        return (Page.NORMAL,) if size <= HUGE_FIRST_THRESHOLD else (Page.HUGE, Page.NORMAL)
    if base in _HUGE_ONLY:
        return (Page.HUGE,)
    if base in _NORMAL_ONLY:
        return (Page.NORMAL,)
    if base is None:
        # DECISION: an out-of-enum policy behaves as HUGE_FIRST with a 2 MiB threshold.
        return (Page.HUGE, Page.NORMAL) if size >= OUT_OF_RANGE_HUGE_FROM else (Page.NORMAL,)
    if not profile.huge1g:
        raise FeatureNotSupported(
            f"{base.name} needs 1 GB huge pages, which {profile.description} does not have")
    return (Page.HUGE1G,)


def rule_size(profile: Profile, size: int, page: Page, api: Api | PhysicalApi,
              policy: int | None = None) -> int:
    """The size after the product's rounding rule for ``api`` (vendor chapter, aclrtMalloc).

    aclrtMalloc and aclrtMallocCached: ALIGN_UP(size, 32) + 32 on the products whose rule
    adds 32, except for the two 1 GB policies (memory.cpp, aclMallocMemInner and
    aclrtMallocCachedImpl: ``isPadding = !huge1g``, huge1g being HUGE1G_ONLY or
    HUGE1G_ONLY_P2P; GetAlignedAndPaddingSize). ``policy``, the checked policy word, matters
    for aclrtMallocCached only: it gives HUGE1G_ONLY_P2P default pages, yet no padding.
    Without it, 1 GB pages stand for the 1 GB policies (as they do for aclrtMalloc).
    aclrtMallocAlign32:
    ALIGN_UP(size, 32). aclrtMallocWithCfg and aclrtMallocForTaskScheduler: ALIGN_UP(size, 32)
    on every product: memory.cpp (aclrtMallocInnerWithCfg) passes the size unpadded to
    rtsMalloc, and the runtime's DevMalloc (api_impl.cc) only rounds it to 32 bytes.
    DECISION: a size within 31 of 2**64, which that rounding wraps around, is refused as an
    overflow (ACL_ERROR_INVALID_PARAM), as for aclrtMalloc.

    >>> from ascend_memsim.memory.profiles import get_profile
    >>> rule_size(get_profile("A2"), 2 * MiB, Page.HUGE, Api.MALLOC) - 2 * MiB
    32
    >>> rule_size(get_profile("A2"), 100, Page.NORMAL, Api.MALLOC_CACHED,
    ...           MallocPolicy.HUGE1G_ONLY_P2P)
    128
    """
    aligned = -(-size // 32) * 32
    if (api is Api.MALLOC_ALIGN32 or api in _CFG_APIS or profile.size_rule is SizeRule.ALIGN32
            or page is Page.HUGE1G or policy in _HUGE1G_POLICIES):
        return aligned
    return aligned + 32


def plan(profile: Profile, size: object, policy: object,
         api: Api) -> tuple[int, int, MallocPolicy | None, bool, tuple[Page, ...]]:
    """Check an allocation's size and policy as the runtime does, and plan it: (size, policy,
    base policy, readonly, page kinds to try). One function for the device and for
    :func:`~ascend_memsim.memory.explain.explain`, so explain refuses what malloc refuses.

    Raises:
        InvalidArgument, InvalidArgumentType: size 0 or not a size_t, a policy outside
            int32/uint32, or a size whose rounding overflows size_t (memory.cpp,
            GetAlignedAndPaddingSize: ACL_ERROR_INVALID_PARAM).
        FeatureNotSupported: 1 GB pages on a product without them.
    """
    size = as_size(size)
    policy = as_int(policy, "policy", POLICY_MIN, UINT32_MAX)
    base, readonly = parse_policy(policy, api)
    pages = page_order(profile, size, base)
    if rule_size(profile, size, pages[0], api, policy) > SIZE_MAX:
        raise InvalidArgument(f"size={size} overflows size_t when rounded up by "
                              f"{api.value}'s size rule")
    return size, policy, base, readonly, pages


class Request(NamedTuple):
    """One allocation request, as checked, before it is placed."""

    device_id: int
    api: Api | PhysicalApi
    size: int
    policy: int
    module: int
    #: the page kinds the policy lets it try, in order (HUGE_FIRST above 1 MiB: huge, normal)
    pages: tuple[Page, ...] = ()


def policy_name(policy: int, api: Api | PhysicalApi | None = None) -> str:
    """``HUGE_FIRST|USER_SPACE_READONLY`` for a policy word (flags split off as ``api`` reads
    them; with no ``api``, as aclrtMallocWithCfg does)."""
    if policy >= 0 and (api is None or api in _CFG_APIS):
        base, flags = policy & ~_FLAG_BITS, [f.name for f in MallocFlag if policy & f]
    else:
        base, flags = policy, []
    known = _POLICY_BY_VALUE.get(base)
    name = known.name if known is not None else f"{base:#x} (outside the enum)"
    # a flag's name is None only for a combination; iterating the class yields named members
    return "|".join([name, *flags])  # type: ignore[list-item]


def fallback_note(request: Request, pages: tuple[Page, ...]) -> str:
    """Why a fallback to another page kind did or did not happen, for the OOM message."""
    if len(pages) > 1:
        return (f"fallback tried: {pages[0].value} pages first, then "
                f"{', '.join(p.value for p in pages[1:])} pages; none could be had")
    base = parse_policy(request.policy, request.api)[0]
    name = policy_name(request.policy, request.api)
    if base in _HUGE_FIRST:
        return (f"no fallback: {name} gives a request of at most {HUGE_FIRST_THRESHOLD} bytes "
                f"normal pages only")
    if base is None:
        return (f"no fallback: a policy outside the enum gives a request below "
                f"{OUT_OF_RANGE_HUGE_FROM} bytes normal pages only")
    return f"no fallback: {name} allows {pages[0].value} pages only"
