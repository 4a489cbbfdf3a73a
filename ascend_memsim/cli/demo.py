"""``ascend-memsim demo``: a guided tour of the rules through the pyacl face."""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from ..memory.constants import MallocPolicy, MemAttr, MiB
from ..memory.profiles import PROFILES, SizeRule, get_profile
from ..memory.units import format_bytes, plural
from ..observe.pictures import save_picture
from ..observe.replay import _capacity_key
from ..observe.viz import MapSnapshot, text_map
from ..runtime.runtime import Runtime

__all__ = ["cmd_demo"]


def _hbm_to_ddr(product: str, capacity: int, say: Any) -> None:
    """Step 7: on a part without HBM, aclrtGetMemInfo answers HBM queries from DDR; shown on
    ``product`` when it has no HBM, else on the first product without (310P)."""
    from .. import acl

    ddr_only = get_profile(product) if not get_profile(product).hbm_bytes else next(
        p for p in PROFILES.values() if not p.hbm_bytes)
    say(f"7. HBM answered from DDR: {ddr_only.name} has no HBM, so aclrtGetMemInfo answers its "
        f"HBM attributes")
    say("   from DDR (aclrtGetMemInfo's constraints, api_ref 11-01): a program written for a "
        "training card")
    say("   that asks for ACL_HBM_MEM still gets real figures.")
    with Runtime(ddr_only, sanitizer={"mode": "report", "leaks": False},
                 ddr_bytes=capacity) as rt:
        assert acl.rt.set_device(0) == 0
        ptr, ret = acl.rt.malloc(10 * MiB, int(MallocPolicy.HUGE_FIRST))
        assert ret == 0
        b = rt.block(ptr)
        assert b is not None
        say(f"  {'acl.rt.malloc(10 MiB, HUGE_FIRST)':44} -> {b.page.value} pages, footprint "
            f"{b.footprint} ({format_bytes(b.footprint)}), in {b.memory.value}")
        for name in ("ACL_HBM_MEM", "ACL_DDR_MEM", "ACL_HBM_MEM_HUGE", "ACL_DDR_MEM_HUGE"):
            free, total, _ = acl.rt.get_mem_info(int(getattr(MemAttr, name[4:])))
            same = "  <- answered from DDR" if name.startswith("ACL_HBM") else ""
            say(f"  {f'get_mem_info({name})':44} -> free {free}, total {total}{same}")
        assert acl.rt.free(ptr) == 0
        assert acl.rt.reset_device(0) == 0


def _one_gib_pages(product: str, say: Any) -> None:
    """Step 8: 1 GB huge pages (HUGE1G_ONLY), on ``product`` when it has them, else on the
    first product that does (A2). A device of its own, 4 GiB: each block takes a whole 1 GiB
    page, so the tour's small device could not hold one."""
    from .. import acl

    profile = get_profile(product)
    shown = profile if profile.huge1g else next(p for p in PROFILES.values() if p.huge1g)
    extra = ("HUGE_ONLY's +32 needs one more 2 MiB page" if shown.size_rule is
             SizeRule.ALIGN32_PLUS32 else "HUGE_ONLY takes 512 huge pages")
    say(f"8. 1 GB huge pages on {shown.name}: a 1 GiB request under HUGE1G_ONLY takes exactly "
        f"one 1 GiB page,")
    say(f"   the 1 GB policies skipping the +32 (memory.cpp, aclMallocMemInner); {extra}.")
    with Runtime(shown, sanitizer={"mode": "report", "leaks": False},
                 hbm_bytes=4 << 30) as rt:      # every part with 1 GB pages has HBM
        assert acl.rt.set_device(0) == 0
        for call, policy in (("HUGE1G_ONLY", MallocPolicy.HUGE1G_ONLY),
                             ("HUGE_ONLY", MallocPolicy.HUGE_ONLY)):
            ptr, ret = acl.rt.malloc(1 << 30, int(policy))
            b = rt.block(ptr)
            assert ret == 0 and b is not None
            say(f"  {f'acl.rt.malloc(1 GiB, {call})':44} -> {b.page.value} pages, rule size "
                f"{b.rule_size}, footprint {b.footprint} ({format_bytes(b.footprint)})")
        assert acl.rt.reset_device(0) == 0
    if not profile.huge1g:
        with Runtime(profile, sanitizer={"mode": "report", "leaks": False}):
            assert acl.rt.set_device(0) == 0
            _, ret = acl.rt.malloc(1 << 30, int(MallocPolicy.HUGE1G_ONLY))
            say(f"  on {profile.name}, which has no 1 GB pages: acl.rt.malloc(1 GiB, "
                f"HUGE1G_ONLY) -> ret {ret}")
            assert acl.rt.reset_device(0) == 0


def cmd_demo(args: argparse.Namespace, out: TextIO) -> int:
    """A guided tour of the rules on the default product, through the pyacl face."""
    from .. import acl

    HUGE_FIRST, HUGE_ONLY, NORMAL_ONLY = (int(MallocPolicy.HUGE_FIRST),
                                          int(MallocPolicy.HUGE_ONLY),
                                          int(MallocPolicy.NORMAL_ONLY))
    capacity = args.capacity

    def say(text: str = "") -> None:
        print(text, file=out)

    # The tour leaves blocks live on purpose: the sanitizer's leak reports would drown it.
    with Runtime(args.product, sanitizer={"mode": "report", "leaks": False},
                 **{_capacity_key(args.product): capacity}) as rt:
        profile = rt.profile
        plus32 = profile.size_rule is SizeRule.ALIGN32_PLUS32
        memory = profile.main_memory.value
        all_attr, huge_attr = ((MemAttr.HBM_MEM, MemAttr.HBM_MEM_HUGE) if memory == "HBM"
                               else (MemAttr.DDR_MEM, MemAttr.DDR_MEM_HUGE))
        say(f"ascend-memsim demo: device memory rules at work on {profile.description}")
        say(f"(a {format_bytes(capacity)} device, to keep the numbers small; the rules are "
            f"those of the real part)")
        say()
        assert acl.rt.set_device(0) == 0

        def show(call: str, ptr: int, ret: int, note: str = "") -> None:
            if ret:
                say(f"  {call:44} -> ret {ret}")
                return
            b = rt.block(ptr)
            assert b is not None
            say(f"  {call:44} -> {b.page.value} pages, rule size {b.rule_size}, footprint "
                f"{b.footprint} ({format_bytes(b.footprint)}){note}")

        if plus32:
            say(f"1. The +32 rule: on {profile.name} aclrtMalloc rounds the size up to 32 "
                f"bytes, then adds 32;")
            say("   aclrtMallocAlign32 only rounds. Blocks start on 64 bytes.")
        else:
            say(f"1. No +32 rule on {profile.name}: aclrtMalloc rounds the size up to 32 bytes "
                f"and adds nothing,")
            say("   as aclrtMallocAlign32 does (Atlas A2/A3 add 32). Blocks start on 64 bytes.")
        ptr, ret = acl.rt.malloc(100, HUGE_FIRST)
        show("acl.rt.malloc(100, HUGE_FIRST)", ptr, ret)
        ptr, ret = acl.rt.malloc_align32(100, HUGE_FIRST)
        show("acl.rt.malloc_align32(100, HUGE_FIRST)", ptr, ret)
        say()
        if plus32:
            say("2. So a 2 MiB request costs 4 MiB of huge pages: 2 MiB + 32 B needs two "
                "pages.")
        else:
            say("2. A 2 MiB request takes one 2 MiB huge page: the +32 does not apply here "
                "(on A2/A3 it costs 4 MiB).")
        ptr, ret = acl.rt.malloc(2 * MiB, HUGE_FIRST)
        show("acl.rt.malloc(2 MiB, HUGE_FIRST)", ptr, ret, "  <- +32 rule" if plus32 else "")
        ptr, ret = acl.rt.malloc_align32(2 * MiB, HUGE_FIRST)
        show("acl.rt.malloc_align32(2 MiB, HUGE_FIRST)", ptr, ret)
        say()
        say("3. HUGE_FIRST gives normal pages up to 1 MiB, huge pages above:")
        ptr, ret = acl.rt.malloc(1 * MiB, HUGE_FIRST)
        show("acl.rt.malloc(1 MiB, HUGE_FIRST)", ptr, ret)
        ptr, ret = acl.rt.malloc(1 * MiB + 1, HUGE_FIRST)
        show("acl.rt.malloc(1 MiB + 1, HUGE_FIRST)", ptr, ret)
        say()
        say("4. aclrtGetMemInfo agrees with the blocks: free + live footprints == total.")
        free, total, _ = acl.rt.get_mem_info(all_attr)
        huge_free, _, _ = acl.rt.get_mem_info(huge_attr)
        live = sum(b.footprint for b in rt.blocks())
        say(f"  {f'get_mem_info(ACL_{memory}_MEM)':30} -> free {free}, total {total}")
        say(f"  {f'get_mem_info(ACL_{memory}_MEM_HUGE)':30} -> free {huge_free} "
            f"(whole free 2 MiB pages)")
        say(f"  {free} + {live} (live footprints) == {total}: {free + live == total}")
        say()
        say("5. Fragmentation: fill the device with 1 MiB NORMAL_ONLY blocks, free every other.")
        fillers = []
        while True:
            ptr, ret = acl.rt.malloc(1 * MiB, NORMAL_ONLY)
            if ret:
                break
            fillers.append(ptr)
        for ptr in fillers[::2]:
            acl.rt.free(ptr)
        free, _, _ = acl.rt.get_mem_info(all_attr)
        huge_free, _, _ = acl.rt.get_mem_info(huge_attr)
        say(f"  {plural(len(fillers), 'block')} made, {len(fillers[::2])} freed: {memory} free "
            f"{format_bytes(free)}, but whole free 2 MiB pages: {huge_free}")
        ptr, ret = acl.rt.malloc(1 * MiB + 1, HUGE_FIRST)
        block = rt.block(ptr) if not ret else None
        show("acl.rt.malloc(1 MiB + 1, HUGE_FIRST)", ptr, ret,
             "  <- huge-page fallback" if block is not None and block.fallback else "")
        ptr, ret = acl.rt.malloc(1 * MiB + 1, HUGE_ONLY)
        say(f"  {'acl.rt.malloc(1 MiB + 1, HUGE_ONLY)':44} -> ret {ret} "
            f"(ACL_ERROR_RT_MEMORY_ALLOCATION); acl.get_recent_err_msg() explains:")
        for line in acl.get_recent_err_msg().splitlines():
            say(f"      {line}")
        say()
        say("6. The device now, one character per 2 MiB:")
        for line in text_map(MapSnapshot.of(rt.device(0)), cell=2 * MiB).splitlines():
            say(f"  {line}")
        if args.html:
            save_picture(args.html, snapshot=MapSnapshot.of(rt.device(0)),
                         title="ascend-memsim demo")
            say(f"\n  picture written to {args.html}")
        assert acl.rt.reset_device(0) == 0
    say()
    _hbm_to_ddr(args.product, capacity, say)
    say()
    _one_gib_pages(args.product, say)
    say()
    say("Next: ascend-memsim explain 2MiB --policy HUGE_FIRST   (how a size becomes a footprint)")
    say("      ascend-memsim profiles                            (the products and their rules)")
    say("      ascend-memsim run --trace t.jsonl your_script.py   (run a pyacl program here)")
    say("      ascend-memsim replay t.jsonl --product 950PR --bisect; ascend-memsim plot t.jsonl")
    return 0

