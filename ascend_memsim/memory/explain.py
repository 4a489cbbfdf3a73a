"""How a request becomes a footprint, step by step, each step naming the rule that did it.

>>> print(explain(2 * 1024 * 1024, 0, product="A2"))  # doctest: +NORMALIZE_WHITESPACE
aclrtMalloc(size=2097152, policy=HUGE_FIRST) on Atlas A2 training/inference series (Ascend 910B)
  1. size rule: ALIGN_UP(2097152, 32) + 32 = 2097184  [api_ref 11-01, aclrtMalloc: Atlas A2/A3 round up to 32 bytes, then add 32]
  2. pages: size 2097152 > 1 MiB, so 2 MiB huge pages first, normal pages if none can be had  [acl_rt.h, ACL_MEM_MALLOC_HUGE_FIRST]
  3. huge pages: footprint ALIGN_UP(2097184, 2 MiB) = 4194304 (4 MiB), start aligned to 2 MiB  [memory model: footprint = rule size rounded up to the page size]
  => 4194304 bytes of HBM on huge pages (2097152 requested; 32 B of rounding padding, 2097120 B of page rounding)
  only if no huge page can be had: fallback, normal pages: footprint ALIGN_UP(2097184, 64 B) = 2097216 (2 MiB + 64 B), start aligned to 64 B  [memory model: footprint = rule size rounded up to the page size]
"""

from __future__ import annotations

from dataclasses import dataclass

from .constants import MallocPolicy
from .errors import OutOfDeviceMemory
from .profiles import DEFAULT_PRODUCT, Profile, SizeRule, get_profile
from .rules import (
    HUGE_FIRST_THRESHOLD,
    OUT_OF_RANGE_HUGE_FROM,
    PAGE_BYTES,
    Api,
    Page,
    align_up,
    plan,
    policy_name,
    rule_size,
)
from .units import format_bytes

__all__ = ["explain", "Explanation", "Step", "format_bytes", "HBM_TO_DDR"]


@dataclass(frozen=True, slots=True)
class Step:
    """One step of an explanation: what happened and the rule that made it happen."""

    text: str
    rule: str


@dataclass(frozen=True, slots=True)
class Explanation:
    """The result of :func:`explain`: the steps taken, the block the request gets on a device
    with room (its footprint starts on a multiple of ``alignment`` bytes), and the steps of the
    fallback, taken only when the first page kind cannot be had.

    DECISION: the fallback is a note after the result, not a numbered step: on a device with
    room the block never takes it (a closeup of a block that fell back shows it as taken).
    """

    request: str
    steps: tuple[Step, ...]
    size: int
    rule_size: int
    page: Page
    footprint: int
    memory: str
    alignment: int
    fallback: tuple[Step, ...] = ()

    def __str__(self) -> str:
        lines = [self.request]
        lines += [f"  {i}. {s.text}  [{s.rule}]" for i, s in enumerate(self.steps, 1)]
        lines.append(
            f"  => {self.footprint} bytes of {self.memory} on {self.page.value} pages "
            f"({self.size} requested; {self.rule_size - self.size} B of rounding padding, "
            f"{self.footprint - self.rule_size} B of page rounding)")
        if self.fallback:
            lines.append(f"  only if no {self.page.value} page can be had: "
                         + "; ".join(f"{s.text}  [{s.rule}]" for s in self.fallback))
        return "\n".join(lines)


_MODEL = "memory model: footprint = rule size rounded up to the page size"


#: Where the size rules are written: hicann/runtime docs/zh/api_ref/
#: 11-01_device_memory_malloc_and_free.md, one section per API.
_DOC = "api_ref 11-01"


def _rule_step(profile: Profile, size: int, page: Page, api: Api, policy: int) -> Step:
    aligned = align_up(size, 32)
    result = rule_size(profile, size, page, api, policy)
    if api is Api.MALLOC_ALIGN32:
        return Step(f"size rule: ALIGN_UP({size}, 32) = {result}",
                    f"{_DOC}, aclrtMallocAlign32: round up to 32 bytes only")
    if api in (Api.MALLOC_WITH_CFG, Api.MALLOC_FOR_TASK_SCHEDULER):
        return Step(f"size rule: ALIGN_UP({size}, 32) = {result} (no +32)",
                    f"runtime source: {api.value} passes the size unpadded; DevMalloc "
                    f"rounds it to 32 bytes (memory.cpp, api_impl.cc)")
    if profile.size_rule is SizeRule.ALIGN32:
        return Step(f"size rule: ALIGN_UP({size}, 32) = {result}",
                    f"{_DOC}, aclrtMalloc: Ascend 950PR/950DT round up to 32 bytes")
    if page is Page.HUGE1G:
        return Step(f"size rule: ALIGN_UP({size}, 32) = {result} (no +32 on 1 GB pages)",
                    f"{_DOC}, aclrtMalloc: 1 GB huge pages skip the extra 32 bytes")
    if result == aligned:
        # aclrtMallocCached with HUGE1G_ONLY_P2P: default pages, but the 1 GB policy's rule.
        return Step(f"size rule: ALIGN_UP({size}, 32) = {result} (no +32 for a 1 GB policy)",
                    "memory.cpp, aclrtMallocCachedImpl: isPadding = !huge1g for "
                    "HUGE1G_ONLY and HUGE1G_ONLY_P2P, whatever pages it then gets")
    return Step(f"size rule: ALIGN_UP({size}, 32) + 32 = {aligned + 32}",
                f"{_DOC}, aclrtMalloc: Atlas A2/A3 round up to 32 bytes, then add 32")


#: The HBM-to-DDR rule, as the vendor states it (api_ref 11-01, aclrtGetMemInfo, constraints):
#: "if the hardware does not support HBM, a query of HBM memory is turned into a query of DDR
#: memory; e.g. querying ACL_HBM_MEM actually queries ACL_DDR_MEM".
HBM_TO_DDR = (f"{_DOC}, aclrtGetMemInfo: on a part without HBM, a query of HBM memory is "
              f"answered from DDR")


def _ddr_step(profile: Profile) -> Step:
    return Step(f"memory: {profile.name} has no HBM, so the block is in DDR; "
                f"aclrtGetMemInfo(ACL_HBM_MEM) (and _HUGE, _NORMAL) reports DDR's figures, "
                f"so this footprint shows there too (the HBM-to-DDR rule)", HBM_TO_DDR)


def _page_step(size: int, base: MallocPolicy | None, policy: int, api: Api,
               pages: tuple[Page, ...]) -> Step:
    name = policy_name(policy, api)
    if base is None:
        kind = "huge pages, normal if none" if pages[0] is Page.HUGE else "normal pages"
        if api is Api.MALLOC_CACHED and policy in MallocPolicy._value2member_map_:
            return Step(f"pages: aclrtMallocCached gives {name} the default flags, so {kind} "
                        f"(huge from {format_bytes(OUT_OF_RANGE_HUGE_FROM)})",
                        "memory.cpp, aclrtMallocCachedImpl: only HUGE_FIRST, HUGE_ONLY, "
                        "NORMAL_ONLY and HUGE1G_ONLY get page flags")
        return Step(f"pages: policy {name}, so {kind} "
                    f"(huge from {format_bytes(OUT_OF_RANGE_HUGE_FROM)})",
                    "project DECISION: such a policy is a hint, not an error")
    rule = f"acl_rt.h, ACL_MEM_MALLOC_{base.name}"
    if base.name.startswith("HUGE_FIRST"):
        if pages == (Page.NORMAL,):
            return Step(f"pages: size {size} <= 1 MiB, so normal pages", rule)
        return Step(f"pages: size {size} > {format_bytes(HUGE_FIRST_THRESHOLD)}, so 2 MiB huge "
                    f"pages first, normal pages if none can be had", rule)
    labels = {Page.NORMAL: "normal pages only", Page.HUGE: "2 MiB huge pages only, else OOM",
              Page.HUGE1G: "1 GiB huge pages only, else OOM"}
    return Step(f"pages: {labels[pages[0]]}", rule)


def explain(size: int, policy: int = MallocPolicy.HUGE_FIRST, *,
            product: str | Profile = DEFAULT_PRODUCT, api: str | Api = Api.MALLOC) -> Explanation:
    """Show how ``size`` bytes under ``policy`` become a footprint on ``product`` via ``api``.

    Uses the very functions the simulated device uses, so it cannot disagree with it.

    Refuses, with the same exception (and code), every request that malloc on a fresh device
    of the product refuses.

    Raises:
        InvalidArgument, InvalidArgumentType: a bad size, policy, product or API, or a size
            whose rounding overflows size_t.
        FeatureNotSupported: 1 GB pages on a product without them.
        OutOfDeviceMemory: a footprint larger than the product's whole memory.
    """
    profile = get_profile(product)
    api = Api.parse(api)
    size, policy, base, readonly, pages = plan(profile, size, policy, api)
    capacity = profile.total(profile.main_memory)
    if all(align_up(rule_size(profile, size, p, api, policy), PAGE_BYTES[p]) > capacity
           for p in pages):
        # A device of the product holds no such footprint even when empty: malloc's refusal.
        raise OutOfDeviceMemory(
            f"{api.value}(size={size}, policy={policy_name(policy, api)}) can never fit on "
            f"{profile.description}: every footprint it may take is larger than the "
            f"{capacity} bytes of {profile.main_memory.value}")
    request = f"{api.value}(size={size}, policy={policy_name(policy, api)}) on {profile.description}"
    first_rule = rule_size(profile, size, pages[0], api, policy)
    steps = [_rule_step(profile, size, pages[0], api, policy),
             _page_step(size, base, policy, api, pages)]
    fallback: list[Step] = []
    for i, page in enumerate(pages):
        taken = fallback if i else steps
        rule = rule_size(profile, size, page, api, policy)
        if i and rule != first_rule:
            taken.append(_rule_step(profile, size, page, api, policy))
        granule = PAGE_BYTES[page]
        footprint = align_up(rule, granule)
        label = f"{page.value} pages" if i == 0 else f"fallback, {page.value} pages"
        taken.append(Step(
            f"{label}: footprint ALIGN_UP({rule}, {format_bytes(granule)}) = {footprint} "
            f"({format_bytes(footprint)}), start aligned to {format_bytes(granule)}", _MODEL))
    if not profile.hbm_bytes:
        steps.append(_ddr_step(profile))
    if readonly:
        steps.append(Step("USER_SPACE_READONLY: host writes to the block are refused",
                          "acl_rt.h, ACL_MEM_ACCESS_USER_SPACE_READONLY"))
    first = pages[0]
    return Explanation(request, tuple(steps), size, first_rule, first,
                       align_up(first_rule, PAGE_BYTES[first]), profile.main_memory.value,
                       PAGE_BYTES[first], tuple(fallback))
