"""Example tests for each allocation rule of SPEC.md sections 3-4, per product and API."""

import pytest

from ascend_memsim import (
    Api,
    Device,
    FeatureNotSupported,
    GiB,
    InvalidArgument,
    InvalidArgumentType,
    InvalidPointer,
    MallocPolicy,
    MiB,
    OutOfDeviceMemory,
    Page,
    get_profile,
)
from ascend_memsim.memory.constants import MODULE_APP, MallocFlag
from ascend_memsim.memory.rules import device_base, device_of

P = MallocPolicy


def make(product="A2", **overrides):
    overrides.setdefault("hbm_bytes", 64 * MiB) if get_profile(product).hbm_bytes else None
    overrides.setdefault("ddr_bytes", 64 * MiB) if get_profile(product).ddr_bytes else None
    return Device(get_profile(product).with_overrides(**overrides))


def snapshot(dev):
    return ([(b.ptr, b.footprint) for b in dev.blocks()],
            [list(a.free_runs()) for a in dev.allocators.values()], dev.usage())


# -- sizes -------------------------------------------------------------------------------------

@pytest.mark.parametrize("product, size, rule", [
    ("A2", 1, 64), ("A2", 32, 64), ("A2", 33, 96), ("A2", 100, 160),
    ("A3", 100, 160), ("310P", 100, 160),
    ("950PR", 1, 32), ("950PR", 100, 128), ("950DT", 96, 96),
])
def test_malloc_rounding_rule_per_product(product, size, rule):
    dev = make(product)
    block = dev.allocate(size, P.NORMAL_ONLY)
    assert block.rule_size == rule
    assert block.footprint == -(-rule // 64) * 64


@pytest.mark.parametrize("api", [Api.MALLOC, Api.MALLOC_CACHED])
def test_malloc_and_malloc_cached_use_the_product_rule(api):
    assert make("A2").allocate(100, P.NORMAL_ONLY, api=api).rule_size == 160
    assert make("950PR").allocate(100, P.NORMAL_ONLY, api=api).rule_size == 128


@pytest.mark.parametrize("api", [Api.MALLOC_WITH_CFG, Api.MALLOC_FOR_TASK_SCHEDULER])
@pytest.mark.parametrize("product", ["A2", "A3", "950PR", "310P"])
def test_cfg_apis_round_to_32_only(api, product):
    """memory.cpp (aclrtMallocInnerWithCfg) passes the size to rtsMalloc unpadded and the
    runtime's DevMalloc (api_impl.cc) rounds it to 32 bytes: no +32 on any product. (This
    test used to expect the +32 of aclrtMalloc, a project decision the source overrules.)"""
    dev = make(product)
    assert dev.allocate(100, P.NORMAL_ONLY, api=api).rule_size == 128
    assert dev.allocate(2 * MiB, P.HUGE_FIRST, api=api).footprint == 2 * MiB


@pytest.mark.parametrize("product", ["A2", "A3", "950PR", "310P"])
def test_malloc_align32_rounds_to_32_only(product):
    block = make(product).allocate(100, P.NORMAL_ONLY, api=Api.MALLOC_ALIGN32)
    assert block.rule_size == 128


def test_a2_two_mib_costs_four_mib_of_huge_pages_but_two_via_align32():
    dev = make("A2")
    plain = dev.allocate(2 * MiB, P.HUGE_FIRST)
    assert (plain.page, plain.rule_size, plain.footprint) == (Page.HUGE, 2 * MiB + 32, 4 * MiB)
    aligned = dev.allocate(2 * MiB, P.HUGE_FIRST, api=Api.MALLOC_ALIGN32)
    assert (aligned.page, aligned.footprint) == (Page.HUGE, 2 * MiB)
    on_950 = make("950PR").allocate(2 * MiB, P.HUGE_FIRST)
    assert on_950.footprint == 2 * MiB


def test_one_gib_pages_skip_the_extra_32_bytes():
    dev = make("A2", hbm_bytes=4 * GiB)
    block = dev.allocate(GiB, P.HUGE1G_ONLY)
    assert (block.page, block.rule_size, block.footprint) == (Page.HUGE1G, GiB, GiB)
    assert block.ptr % GiB == 0


# -- pages -------------------------------------------------------------------------------------

@pytest.mark.parametrize("size, page", [(MiB, Page.NORMAL), (MiB + 1, Page.HUGE),
                                        (100, Page.NORMAL)])
@pytest.mark.parametrize("policy", [P.HUGE_FIRST, P.HUGE_FIRST_P2P])
def test_huge_first_threshold_is_one_mib(size, page, policy):
    assert make().allocate(size, policy).page is page


def test_huge_only_and_normal_only():
    dev = make()
    assert dev.allocate(100, P.HUGE_ONLY).page is Page.HUGE
    assert dev.allocate(100, P.HUGE_ONLY).footprint == 2 * MiB
    assert dev.allocate(8 * MiB, P.NORMAL_ONLY).page is Page.NORMAL


@pytest.mark.parametrize("policy", [8, 0xFF, 0x55])
def test_out_of_enum_policy_is_a_hint_not_an_error(policy):
    dev = make()
    assert dev.allocate(2 * MiB - 1, policy).page is Page.NORMAL
    assert dev.allocate(2 * MiB, policy).page is Page.HUGE


@pytest.mark.parametrize("product", ["950PR", "950DT", "310P"])
@pytest.mark.parametrize("policy", [P.HUGE1G_ONLY, P.HUGE1G_ONLY_P2P])
def test_huge1g_only_on_a2_a3(product, policy):
    dev = make(product)
    with pytest.raises(FeatureNotSupported) as info:
        dev.allocate(GiB, policy)
    assert info.value.code == 207000
    assert len(dev) == 0


def test_p2p_policies_mark_blocks_p2p():
    dev = make()
    assert dev.allocate(100, P.NORMAL_ONLY_P2P).p2p
    assert not dev.allocate(100, P.NORMAL_ONLY).p2p


def test_flags_or_into_the_policy():
    dev = make()
    block = dev.allocate(100, P.NORMAL_ONLY | MallocFlag.USER_SPACE_READONLY
                         | MallocFlag.HIGH_BAND_WIDTH, api=Api.MALLOC_WITH_CFG)
    assert block.readonly and block.page is Page.NORMAL


@pytest.mark.parametrize("policy", [P.HUGE_FIRST_P2P, P.HUGE_ONLY_P2P, P.NORMAL_ONLY_P2P,
                                    P.HUGE1G_ONLY_P2P, 8, P.HUGE_ONLY | 0x100, -1, 2**32 - 1])
def test_malloc_cached_takes_every_policy_and_other_values_are_hints(policy):
    """memory.cpp (aclrtMallocCachedImpl) maps every policy but its four to RT_MEMORY_DEFAULT
    and goes on (the vendor chapter: aclrtMallocCached is equivalent to aclrtMalloc); it used
    to be 100000 here. So the _P2P policies and flagged words are hints: huge pages from
    2 MiB, normal below, and no P2P memory."""
    dev = make()
    small = dev.allocate(100, policy, api=Api.MALLOC_CACHED)
    big = dev.allocate(2 * MiB, policy, api=Api.MALLOC_CACHED)
    assert (small.page, big.page) == (Page.NORMAL, Page.HUGE)
    assert not small.p2p and not big.p2p
    # memory.cpp, aclrtMallocCachedImpl: isPadding = !huge1g, HUGE1G_ONLY_P2P included,
    # although it then takes default pages (it was 160 here)
    assert small.rule_size == (128 if policy == P.HUGE1G_ONLY_P2P else 160)
    for ok, page in ((P.HUGE_FIRST, Page.NORMAL), (P.HUGE_ONLY, Page.HUGE),
                     (P.NORMAL_ONLY, Page.NORMAL)):
        assert dev.allocate(100, ok, api=Api.MALLOC_CACHED).page is page


# -- placement, fallback, out of memory ---------------------------------------------------------

def test_the_out_of_memory_message_gives_the_footprint_the_allocation_would_have():
    """aclrtMallocCached with HUGE1G_ONLY_P2P is not padded (memory.cpp): the message gave
    the padded footprint (5242880) for a request whose footprint is 5242816."""
    dev = make(hbm_bytes=4 * MiB)
    size = 5 * MiB - 64
    with pytest.raises(OutOfDeviceMemory) as failed:
        dev.allocate(size, P.HUGE1G_ONLY_P2P, api=Api.MALLOC_CACHED)
    assert f"normal pages: footprint {size} bytes" in str(failed.value)

def test_start_is_64_aligned_and_on_the_page():
    dev = make()
    ptrs = [dev.allocate(s, p) for s, p in [(1, 2), (33, 2), (3 * MiB, 0), (5, 1)]]
    for b in ptrs:
        assert b.ptr % 64 == 0 and b.ptr % {Page.NORMAL: 64, Page.HUGE: 2 * MiB}[b.page] == 0
    dev.check_invariants()


def test_huge_first_falls_back_when_fragmentation_leaves_no_huge_page():
    dev = make(hbm_bytes=8 * MiB)
    # Pin one small block in each 2 MiB page: plenty of free bytes, no free huge page.
    blocks, pins = [], []
    for _ in range(4):
        blocks.append(dev.allocate(3 * MiB // 2, P.NORMAL_ONLY, api=Api.MALLOC_ALIGN32))
        pins.append(dev.allocate(64, P.NORMAL_ONLY))
    assert {device_of(p.ptr) for p in pins} == {0}
    assert len({(p.ptr - device_base(0)) // (2 * MiB) for p in pins}) == 4
    for b in blocks:
        dev.free(b.ptr)
    assert dev.mem_info(4) == (0, 8 * MiB)  # no whole huge page free
    fallback = dev.allocate(1536 * 1024, P.HUGE_FIRST, api=Api.MALLOC_ALIGN32)
    assert fallback.page is Page.NORMAL and fallback.fallback
    with pytest.raises(OutOfDeviceMemory):
        dev.allocate(1536 * 1024, P.HUGE_ONLY)
    assert len(pins) == 4
    dev.check_invariants()


def test_no_fallback_while_a_huge_page_fits():
    dev = make()
    block = dev.allocate(3 * MiB, P.HUGE_FIRST)
    assert block.page is Page.HUGE and not block.fallback


def test_out_of_memory_leaves_the_device_as_it_was():
    dev = make(hbm_bytes=4 * MiB)
    dev.allocate(MiB, P.NORMAL_ONLY)
    before = snapshot(dev)
    with pytest.raises(OutOfDeviceMemory) as info:
        dev.allocate(4 * MiB, P.HUGE_FIRST)
    assert info.value.code == 207001
    message = str(info.value)
    assert "huge pages: footprint 6291456" in message and "largest free run" in message
    assert snapshot(dev) == before
    # the next address handed out is the one it would have been
    assert dev.allocate(64, P.NORMAL_ONLY).ptr == device_base(0) + MiB + 64


def test_device_fills_exactly_to_capacity():
    dev = make(hbm_bytes=MiB)
    ptrs = [dev.malloc(32, P.NORMAL_ONLY, api=Api.MALLOC_ALIGN32) for _ in range(MiB // 64)]
    assert dev.mem_info(1) == (0, MiB)
    with pytest.raises(OutOfDeviceMemory):
        dev.malloc(1, P.NORMAL_ONLY)
    for p in ptrs:
        dev.free(p)
    assert dev.mem_info(1) == (MiB, MiB)


def test_addresses_are_deterministic_and_name_their_device():
    runs = []
    for _ in range(2):
        dev = make()
        runs.append([dev.malloc(s, P.HUGE_FIRST) for s in (100, 3 * MiB, 7)])
    assert runs[0] == runs[1]
    other = Device(get_profile("A3").with_overrides(hbm_bytes=64 * MiB), 1)
    ptr = other.malloc(100)
    assert device_of(ptr) == 1 and device_of(runs[0][0]) == 0


def test_ddr_only_part_allocates_from_ddr():
    dev = make("310P")
    block = dev.allocate(100)
    assert block.memory.value == "DDR"


# -- free --------------------------------------------------------------------------------------

def test_free_releases_at_once_and_coalesces():
    dev = make()
    ptrs = [dev.malloc(1000, P.NORMAL_ONLY) for _ in range(10)]
    for p in ptrs:
        dev.free(p)
    assert dev.mem_info(1) == (64 * MiB, 64 * MiB)
    assert len(list(dev.allocators[get_profile("A2").main_memory].free_runs())) == 1


@pytest.mark.parametrize("bad, error, code", [
    (0, InvalidArgument, 100000), (None, InvalidArgumentType, 100000),
    ("0x1000", InvalidArgumentType, 100000), (1.0, InvalidArgumentType, 100000),
    (True, InvalidArgumentType, 100000), (-5, InvalidArgument, 100000),
    (1 << 64, InvalidArgument, 100000),
])
def test_free_rejects_bad_pointers_with_codes(bad, error, code):
    dev = make()
    dev.malloc(100)
    before = snapshot(dev)
    with pytest.raises(error) as info:
        dev.free(bad)
    assert info.value.code == code
    assert snapshot(dev) == before


def test_free_of_interior_freed_or_unknown_pointers_is_rt_param_invalid():
    dev = make()
    ptr = dev.malloc(1000)
    with pytest.raises(InvalidPointer, match="bytes inside the 1000-byte block"):
        dev.free(ptr + 64)
    with pytest.raises(InvalidPointer, match="not the start of a live block"):
        dev.free(ptr + 10 * MiB)
    dev.free(ptr)
    with pytest.raises(InvalidPointer) as info:
        dev.free(ptr)
    assert info.value.code == 107000


# -- arguments ---------------------------------------------------------------------------------

@pytest.mark.parametrize("size, error", [
    (0, InvalidArgument), (-1, InvalidArgument), (1 << 64, InvalidArgument),
    (True, InvalidArgumentType), (1.5, InvalidArgumentType), (None, InvalidArgumentType),
    ("100", InvalidArgumentType),
])
def test_bad_sizes_are_refused_and_change_nothing(size, error):
    dev = make()
    dev.malloc(100)
    before = snapshot(dev)
    with pytest.raises(error, match="size") as info:
        dev.malloc(size)
    assert info.value.code == 100000
    assert snapshot(dev) == before


def test_absurd_size_is_out_of_memory_unless_rounding_overflows():
    with pytest.raises(OutOfDeviceMemory):
        make().malloc((1 << 64) - 96)
    # memory.cpp: size + appendSize overflowing size_t is ACL_ERROR_INVALID_PARAM
    for size, api in [((1 << 64) - 1, Api.MALLOC), ((1 << 64) - 32, Api.MALLOC),
                      ((1 << 64) - 31, Api.MALLOC_ALIGN32)]:
        with pytest.raises(InvalidArgument, match="overflows"):
            make().malloc(size, api=api)


@pytest.mark.parametrize("policy", [-(1 << 31) - 1, 1 << 32, 1.0, None, "HUGE_FIRST"])
def test_bad_policy_types_and_ranges(policy):
    with pytest.raises((InvalidArgument, InvalidArgumentType), match="policy") as info:
        make().malloc(100, policy)
    assert info.value.code == 100000


@pytest.mark.parametrize("module", [16, 26, 77, 200, -1, "APP"])
def test_unknown_module_ids_are_refused(module):
    with pytest.raises((InvalidArgument, InvalidArgumentType), match="module") as info:
        make().malloc(100, module=module)
    assert info.value.code == 100000


def test_module_ids_above_255_count_as_app():
    dev = make()
    assert dev.allocate(100, module=1000).module == MODULE_APP


def test_numpy_integers_are_accepted_as_sizes():
    np = pytest.importorskip("numpy", reason="numpy is an optional extra")
    assert make().allocate(np.int64(100)).size == 100


# -- queries -----------------------------------------------------------------------------------

def test_block_at_finds_interior_addresses():
    dev = make()
    block = dev.allocate(100)
    assert dev.block_at(block.ptr + 150) is block
    assert dev.block_at(block.ptr + block.footprint) is None
    assert dev.block_at(block.ptr - 1) is None


def test_usage_by_component_with_peaks():
    dev = make()
    a = dev.malloc(100, module=3)  # HCCL
    dev.malloc(1000, module=3)
    dev.malloc(5000)
    dev.free(a)
    assert dev.usage() == [("APP", 5056, 5056), ("HCCL", 1088, 1280)]


def test_reset_returns_leaks_and_starts_afresh():
    dev = make()
    p = dev.malloc(100)
    leaked = dev.reset()
    assert [b.ptr for b in leaked] == [p]
    assert len(dev) == 0 and dev.malloc(100) == p


def test_injected_failures_reach_observers_and_do_not_blame_fragmentation():
    from ascend_memsim.memory.errors import OutOfDeviceMemory as OOM

    dev = make()
    seen = []
    dev.observers.append(lambda event, device, info: seen.append(event))

    def refuse_huge(request):
        return {Page.HUGE}

    def fail(request):
        raise OOM("injected")

    dev.interceptors.append(refuse_huge)
    with pytest.raises(OutOfDeviceMemory) as info:
        dev.allocate(4 * MiB, P.HUGE_ONLY)
    assert "refused by fault injection" in str(info.value)
    assert "fragmentation" not in str(info.value)
    dev.interceptors[:] = [fail]
    with pytest.raises(OutOfDeviceMemory):
        dev.allocate(100)
    assert seen == ["malloc_failed", "malloc_failed"]
    assert len(dev) == 0


@pytest.mark.parametrize("bad", [[1], "0x10", None])
def test_block_lookups_refuse_non_integers(bad):
    dev = make()
    with pytest.raises(InvalidArgumentType):
        dev.block(bad)
    with pytest.raises(InvalidArgumentType):
        dev.block_at(bad)


def test_only_the_cfg_apis_read_flag_bits():
    word = P.NORMAL_ONLY | MallocFlag.USER_SPACE_READONLY
    with_cfg = make().allocate(3 * MiB, word, api=Api.MALLOC_WITH_CFG)
    assert (with_cfg.page, with_cfg.readonly) == (Page.NORMAL, True)
    plain = make().allocate(3 * MiB, word)  # outside the enum for aclrtMalloc: huge from 2 MiB
    assert (plain.page, plain.readonly) == (Page.HUGE, False)


@pytest.mark.parametrize("policy", [-1, -(1 << 31), 1 << 31])
def test_any_c_enum_value_is_a_hint(policy):
    assert make().allocate(3 * MiB, policy).page is Page.HUGE
    assert make().allocate(100, policy).page is Page.NORMAL
