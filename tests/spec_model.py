"""SPEC.md section 4 written out again, independently of the code under test.

Property tests and state machines compare the simulator with these few lines, so a rule
cannot be checked against itself. APIs are named the pyacl way (``"malloc_align32"``).
"""

MiB = 1 << 20
CFG_APIS = ("malloc_with_cfg", "malloc_for_task_scheduler")
ADDS_32 = ("A2", "A3", "310P")


def expected_pages(product: str, size: int, policy: int, api: str) -> list[str] | None:
    """The page kinds to try, in order; None when the call must be refused."""
    # only the cfg APIs read flag bits; elsewhere a flagged word is outside the enum
    base = policy & ~0x101100 if api in CFG_APIS and policy >= 0 else policy
    if api == "malloc_cached" and base not in (0, 1, 2, 6):
        # SPEC 4: aclrtMallocCached maps any other policy to the default (a hint)
        base = -1
    if base in (0, 3):
        return ["normal"] if size <= MiB else ["huge", "normal"]
    if base in (1, 4):
        return ["huge"]
    if base in (2, 5):
        return ["normal"]
    if base in (6, 7):
        return ["huge1g"] if product in ("A2", "A3") else None
    return ["huge", "normal"] if size >= 2 * MiB else ["normal"]


def expected_rule(product: str, size: int, api: str, policy: int | None = None) -> int:
    """The size after the product's rounding rule (not on 1 GB pages, which skip the +32).

    The cfg APIs never add 32 (issue 9: the runtime's aclrtMallocInnerWithCfg passes the size
    unpadded and DevMalloc rounds it to 32 only). Nor do the two 1 GB policies, whatever
    pages they get (memory.cpp: ``isPadding = !huge1g``, also in aclrtMallocCachedImpl,
    which gives HUGE1G_ONLY_P2P default pages).
    """
    aligned = -(-size // 32) * 32
    padded = (product in ADDS_32 and api != "malloc_align32" and api not in CFG_APIS
              and policy not in (6, 7))
    return aligned + 32 if padded else aligned
