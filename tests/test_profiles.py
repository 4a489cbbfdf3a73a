"""Products: names, rules, sources, overrides and user-defined profiles."""

import pytest

from ascend_memsim import (
    GiB,
    InvalidArgument,
    InvalidArgumentType,
    MiB,
    Profile,
    Runtime,
    get_profile,
)
from ascend_memsim.memory.constants import MemAttr
from ascend_memsim.memory.profiles import PROFILES, Memory, SizeRule, register_profile


@pytest.mark.parametrize("spelling, name", [
    ("950PR", "950PR"), ("Ascend 950PR", "950PR"), ("ascend950dt", "950DT"),
    ("A2", "A2"), ("Atlas A2", "A2"), ("atlas-a3", "A3"), ("910B", "A2"), ("310P", "310P"),
    ("Atlas 300I", "310P"),
])
def test_short_and_vendor_spellings(spelling, name):
    assert get_profile(spelling).name == name


@pytest.mark.parametrize("bad", ["H100", "", "A9"])
def test_unknown_products_list_the_known(bad):
    with pytest.raises(InvalidArgument, match="known"):
        get_profile(bad)


def test_rules_per_product():
    assert {n: (p.size_rule, p.huge1g, p.usage_info) for n, p in PROFILES.items()
            if n in ("950PR", "950DT", "A2", "A3", "310P")} == {
        "950PR": (SizeRule.ALIGN32, False, False),
        "950DT": (SizeRule.ALIGN32, False, False),
        "A2": (SizeRule.ALIGN32_PLUS32, True, True),
        "A3": (SizeRule.ALIGN32_PLUS32, True, True),
        "310P": (SizeRule.ALIGN32_PLUS32, False, True),
    }
    assert get_profile("310P").hbm_bytes == 0 and get_profile("310P").ddr_bytes > 0


def test_every_capacity_says_its_source():
    for profile in PROFILES.values():
        for field in ("hbm_bytes", "ddr_bytes"):
            if getattr(profile, field):
                assert profile.sources.get(field), (profile.name, field)


def test_overrides_are_per_simulation():
    small = get_profile("A2").with_overrides(hbm_bytes=64 * MiB)
    assert small.hbm_bytes == 64 * MiB and get_profile("A2").hbm_bytes == 64 * GiB
    assert small.sources["hbm_bytes"] == "overridden for this simulation"
    with Runtime("A2", hbm_bytes=64 * MiB, device_count=3) as rt:
        assert rt.device_count == 3 and rt.profile.hbm_bytes == 64 * MiB


@pytest.mark.parametrize("change", [dict(hbm_bytes=100), dict(hbm_bytes=-64), dict(colour=1),
                                    dict(device_count=0), dict(hbm_bytes=1 << 50),
                                    dict(hbm_bytes=0)])
def test_bad_overrides_are_refused(change):
    with pytest.raises((InvalidArgument, InvalidArgumentType)) as info:
        get_profile("A2").with_overrides(**change)
    assert info.value.code == 100000


def test_users_can_register_their_own_product():
    mine = Profile(name="TestChip", description="a test chip", hbm_bytes=32 * MiB,
                   ddr_bytes=16 * MiB, size_rule="align32", huge1g=False, usage_info=True,
                   aliases=("test chip",))
    register_profile(mine, replace=True)
    with Runtime("test chip") as rt:
        rt.set_device(0)
        assert rt.block(rt.malloc(100)).rule_size == 128
        assert rt.get_mem_info(0) == (16 * MiB, 16 * MiB)
    with pytest.raises(InvalidArgument, match="already registered"):
        register_profile(mine)


@pytest.mark.parametrize("change", [dict(huge1g="no"), dict(usage_info=1), dict(p2p="yes"),
                                    dict(size_rule="bogus"), dict(device_count=1.0)])
def test_profile_values_must_have_their_type(change):
    with pytest.raises((InvalidArgument, InvalidArgumentType)) as info:
        get_profile("950PR").with_overrides(**change)
    assert info.value.code == 100000


def test_numpy_capacities_are_taken():
    np = pytest.importorskip("numpy", reason="numpy is an optional extra")
    assert get_profile("A2").with_overrides(hbm_bytes=np.int64(64 * MiB)).hbm_bytes == 64 * MiB


def test_totals_leave_out_system_reserved_memory():
    """aclrtGetMemInfo's total excludes system-reserved memory. A2: 64 GiB of HBM
    (Ascend910B3.ini memory_size) of which a 910B reports 65452113920 bytes as its total
    (vllm-ascend issue #4404); the other parts have no public figure, so 0."""
    a2 = get_profile("A2")
    assert a2.hbm_bytes == 64 * GiB and a2.total(Memory.HBM) == 65452113920
    assert "4404" in a2.sources["reserved_bytes"]
    for name in ("950PR", "950DT", "A3", "310P"):
        profile = get_profile(name)
        assert profile.reserved_bytes == 0 and "no public source" in profile.sources[
            "reserved_bytes"]
    with Runtime("A2") as rt:
        rt.set_device(0)
        free, total = rt.get_mem_info(MemAttr.HBM_MEM)
        assert (free, total) == (65452113920, 65452113920)
        ptr = rt.malloc(100)
        assert rt.get_mem_info(MemAttr.HBM_MEM) == (total - 192, total)
        rt.free(ptr)


def test_a_capacity_given_for_a_simulation_is_its_total():
    profile = get_profile("A2").with_overrides(hbm_bytes=64 * MiB)
    assert profile.reserved_bytes == 0 and profile.total(Memory.HBM) == 64 * MiB
    both = get_profile("A2").with_overrides(hbm_bytes=64 * MiB, reserved_bytes=4 * MiB)
    assert both.total(Memory.HBM) == 60 * MiB
    with pytest.raises(InvalidArgument):
        get_profile("A2").with_overrides(hbm_bytes=64 * MiB, reserved_bytes=64 * MiB)
    with pytest.raises(InvalidArgument):
        get_profile("A2").with_overrides(reserved_bytes=100)


def test_hbm_for_a_ddr_only_part_is_refused_with_its_memories_named():
    # Runtime("310P", hbm_bytes=...) made a part that does not exist: HBM on a DDR-only part
    from ascend_memsim import MiB, Runtime
    from ascend_memsim.memory.errors import InvalidArgument

    with pytest.raises(InvalidArgument, match="310P has no HBM: its device memory is DDR"):
        Runtime("310P", hbm_bytes=64 * MiB)
    with Runtime("310P", ddr_bytes=64 * MiB) as rt:
        rt.set_device(0)
        ptr = rt.malloc(MiB)
        assert rt.block(ptr).memory == rt.profile.main_memory
        rt.free(ptr)
        assert rt.profile.total(rt.profile.main_memory) == 64 * MiB
