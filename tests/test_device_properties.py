"""Property tests of the alignment, footprint and accounting rules across products and APIs."""

from hypothesis import given
from hypothesis import strategies as st
from spec_model import expected_pages, expected_rule

from ascend_memsim import Api, Device, MiB, Page, get_profile
from ascend_memsim.memory.constants import MemAttr
from ascend_memsim.memory.errors import FeatureNotSupported, InvalidArgument, OutOfDeviceMemory
from ascend_memsim.memory.rules import PAGE_BYTES

PRODUCTS = ["950PR", "950DT", "A2", "A3", "310P"]
CAPACITY = 32 * MiB

sizes = st.one_of(
    st.integers(1, 2048),
    st.integers(0, 8).flatmap(lambda k: st.sampled_from([32 * k + d for d in (-1, 0, 1)
                                                         if 32 * k + d > 0])),
    st.sampled_from([MiB - 1, MiB, MiB + 1, 2 * MiB - 33, 2 * MiB - 32, 2 * MiB, 2 * MiB + 1]),
    st.integers(1, 6 * MiB),
)
policies = st.sampled_from([0, 1, 2, 3, 4, 5, 6, 7, 9, -1, 0x100, 0x1002, 0x100005])
apis = st.sampled_from(list(Api))
steps = st.lists(st.tuples(st.booleans(), sizes, policies, apis), max_size=40)


def make(product):
    profile = get_profile(product)
    memory = {"hbm_bytes": CAPACITY} if profile.hbm_bytes else {"ddr_bytes": CAPACITY}
    return Device(profile.with_overrides(**memory))


@given(product=st.sampled_from(PRODUCTS), program=steps)
def test_blocks_obey_the_rules_and_the_figures_add_up(product, program):
    dev = make(product)
    alloc = dev.allocators[dev.profile.main_memory]
    live = []
    for release, size, policy, api in program:
        if release and live:
            dev.free(live.pop(size % len(live)))
            continue
        name = api.pyacl_name
        pages = expected_pages(product, size, policy, name)
        huge = -(-expected_rule(product, size, name, policy) // (2 * MiB)) * 2 * MiB
        huge_fits = alloc.find(huge, 2 * MiB) is not None
        try:
            block = dev.allocate(size, policy, api=api)
        except OutOfDeviceMemory:
            assert pages is not None
            continue
        except (InvalidArgument, FeatureNotSupported):
            assert pages is None
            continue
        assert pages is not None
        live.append(block.ptr)
        # size rule, page granularity, start alignment
        if block.page is not Page.HUGE1G:
            assert block.rule_size == expected_rule(product, size, name, policy)
        granule = PAGE_BYTES[block.page]
        assert block.footprint == -(-block.rule_size // granule) * granule
        assert block.ptr % 64 == 0 and block.ptr % granule == 0
        # fallback happens exactly when the first page kind did not fit
        assert block.page.value in pages
        assert block.fallback == (pages[0] == "huge" and not huge_fits)
        assert block.page.value == (pages[-1] if block.fallback else pages[0])
    blocks = list(dev.blocks())
    for a, b in zip(blocks, blocks[1:]):
        assert a.end <= b.ptr, "blocks overlap"
    used = sum(b.footprint for b in blocks)
    for attr in MemAttr:
        free, total = dev.mem_info(attr)
        assert 0 <= free <= total
        if attr in (MemAttr.HBM_MEM, MemAttr.MEM_NORMAL, MemAttr.MEM_P2P_NORMAL):
            assert free + used == total == CAPACITY
    dev.check_invariants()
