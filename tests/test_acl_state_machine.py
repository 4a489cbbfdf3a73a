"""A state machine over the whole pyacl face, checked against a simple model.

The model re-derives every rule on its own: the product's rounding, the page order of each
policy, the footprint, and exact first-fit over a plain list of live intervals. It predicts
each pointer, each out-of-memory, each error code and every get_mem_info figure.
"""

from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    precondition,
    rule,
)
from spec_model import expected_pages, expected_rule
from test_acl import pyacl_cfg

from ascend_memsim import MiB, Runtime, acl
from ascend_memsim.memory.rules import device_base

CAPACITY = 16 * MiB
HUGE = 2 * MiB
PRODUCTS = ["A2", "950PR"]

sizes = st.one_of(
    st.integers(1, 4096),
    st.sampled_from([MiB - 1, MiB, MiB + 1, 2 * MiB - 32, 2 * MiB, 2 * MiB + 1, 3 * MiB]),
    st.integers(1, 5 * MiB),
)
policies = st.sampled_from([0, 1, 2, 3, 4, 5, 8, 0x1000, 0x100002, -1])
apis = st.sampled_from(["malloc", "malloc_align32", "malloc_cached", "malloc_with_cfg"])


def align_up(n, k):
    return -(-n // k) * k


class ModelDevice:
    def __init__(self, product: str) -> None:
        self.product = product
        self.base = device_base(0)
        self.live: dict[int, tuple[int, int]] = {}  # ptr -> (size, footprint)

    def footprint(self, size, page, api):
        return align_up(expected_rule(self.product, size, api), HUGE if page == "huge" else 64)

    def first_fit(self, footprint, align):
        cursor = self.base
        for ptr in sorted(self.live):
            start = align_up(cursor, align)
            if start + footprint <= ptr:
                return start
            cursor = max(cursor, ptr + self.live[ptr][1])
        start = align_up(cursor, align)
        return start if start + footprint <= self.base + CAPACITY else None

    def malloc(self, size, policy, api):
        for page in expected_pages(self.product, size, policy, api):
            fp = self.footprint(size, page, api)
            ptr = self.first_fit(fp, HUGE if page == "huge" else 64)
            if ptr is not None:
                self.live[ptr] = (size, fp)
                return ptr
        return None

    def free_bytes(self):
        return CAPACITY - sum(fp for _, fp in self.live.values())

    def free_huge_pages(self):
        busy = set()
        for ptr, (_, fp) in self.live.items():
            busy.update(range((ptr - self.base) // HUGE, (ptr + fp - 1 - self.base) // HUGE + 1))
        return CAPACITY // HUGE - len(busy)


BAD_CALLS = [
    lambda: acl.rt.malloc(0, 0), lambda: acl.rt.malloc(1.5, 0), lambda: acl.rt.malloc(None, 0),
    lambda: acl.rt.malloc(-1, 0), lambda: acl.rt.malloc(2 * CAPACITY, 0),
    lambda: acl.rt.malloc(100, acl.ACL_MEM_MALLOC_HUGE1G_ONLY),
    lambda: acl.rt.malloc(100, 1 << 40), lambda: acl.rt.malloc(100, -(1 << 31) - 1),
    lambda: acl.rt.malloc((1 << 64) - 1, 0), lambda: acl.rt.malloc_cached(0, 3),
    lambda: acl.rt.malloc_with_cfg(100, 0, pyacl_cfg((9, 1))),
    lambda: acl.rt.malloc_with_cfg(100, 0, pyacl_cfg((1, 16))),
    lambda: acl.rt.free(0), lambda: acl.rt.free("x"), lambda: acl.rt.free(0x1234),
    lambda: acl.rt.free(device_base(0) + 8), lambda: acl.rt.get_mem_info(99),
    lambda: acl.rt.set_device(5), lambda: acl.rt.check_mem_type([], 2, 0),
    lambda: acl.rt.memset(0, 10, 1, 10), lambda: acl.rt.memcpy(0x1234, 10, 0x5678, 10, 1),
    lambda: acl.rt.memcpy(device_base(0), 10, device_base(0) + 64, 20, 3),
    lambda: acl.op.execute_v2("NoSuchOp", [], [], [], [], 0, 0),
    lambda: acl.op.execute_v2("Add", (1,), [], [], [], 0, 0),
    lambda: acl.mdl.load_from_file("/nonexistent/model.om"), lambda: acl.mdl.unload(99),
    lambda: acl.destroy_data_buffer(0x1234), lambda: acl.rt.record_event(0x1234, 0),
    lambda: acl.rt.create_event_with_flag(0x4), lambda: acl.rt.launch_callback(print, 1, 0, 0),
]


class AclMachine(RuleBasedStateMachine):
    ptrs = Bundle("ptrs")

    @initialize(product=st.sampled_from(PRODUCTS))
    def start(self, product):
        self.runtime = Runtime(product, hbm_bytes=CAPACITY).__enter__()
        assert acl.rt.set_device(0) == 0
        self.model = ModelDevice(product)
        self.freed: set[int] = set()

    def teardown(self):
        if hasattr(self, "runtime"):
            self.runtime.__exit__(None, None, None)

    @rule(target=ptrs, size=sizes, policy=policies, api=apis)
    def malloc(self, size, policy, api):
        call = getattr(acl.rt, api)
        # pyacl's malloc_with_cfg takes a cfg dict, {} for none
        ptr, ret = call(size, policy, {}) if api == "malloc_with_cfg" else call(size, policy)
        expected = self.model.malloc(size, policy, api)
        if expected is None:
            assert (ptr, ret) == (0, acl.ACL_ERROR_RT_MEMORY_ALLOCATION)
            return 0
        assert (ptr, ret) == (expected, 0)
        self.freed.discard(ptr)
        return ptr

    @rule(ptr=consumes(ptrs))
    def free(self, ptr):
        ret = acl.rt.free(ptr)
        if ptr == 0:
            assert ret == acl.ACL_ERROR_INVALID_PARAM
        elif ptr in self.model.live:
            assert ret == 0
            del self.model.live[ptr]
            self.freed.add(ptr)
        else:
            assert ret == acl.ACL_ERROR_RT_PARAM_INVALID

    @precondition(lambda self: self.freed)
    @rule(data=st.data())
    def double_free(self, data):
        ptr = data.draw(st.sampled_from(sorted(self.freed)))
        if ptr not in self.model.live:
            assert acl.rt.free(ptr) == acl.ACL_ERROR_RT_PARAM_INVALID

    @rule(ptr=ptrs, offset=st.integers(1, 4096))
    def interior_free_is_refused(self, ptr, offset):
        if ptr in self.model.live and ptr + offset not in self.model.live:
            assert acl.rt.free(ptr + offset) == acl.ACL_ERROR_RT_PARAM_INVALID

    @rule(ptr=ptrs)
    def check_mem_type(self, ptr):
        expected = 1 if ptr in self.model.live else 0
        if ptr:
            assert acl.rt.check_mem_type([ptr], acl.ACL_RT_MEM_TYPE_DEV, 0) == (expected, 0)

    def snapshot(self):
        device = self.runtime.current_device()
        return ([(b.ptr, b.size, b.footprint, b.page) for b in device.blocks()],
                [acl.rt.get_mem_info(attr) for attr in range(18)], device.usage(),
                device._serial, device.allocators[device.profile.main_memory].find(64, 64))

    @rule(call=st.sampled_from(BAD_CALLS))
    def a_failed_call_changes_nothing(self, call):
        before = self.snapshot()
        result = call()
        assert (result if isinstance(result, int) else result[-1]) != 0
        assert self.snapshot() == before

    @invariant()
    def figures_agree(self):
        if not hasattr(self, "model"):
            return
        free = self.model.free_bytes()
        for attr in (acl.ACL_HBM_MEM, acl.ACL_HBM_MEM_NORMAL, acl.ACL_MEM_NORMAL,
                     acl.ACL_MEM_P2P_NORMAL):
            assert acl.rt.get_mem_info(attr) == (free, CAPACITY, 0)
        huge = self.model.free_huge_pages() * HUGE
        for attr in (acl.ACL_HBM_MEM_HUGE, acl.ACL_MEM_HUGE, acl.ACL_HBM_MEM_P2P_HUGE):
            assert acl.rt.get_mem_info(attr) == (huge, CAPACITY, 0)
        assert acl.rt.get_mem_info(acl.ACL_DDR_MEM) == (0, 0, 0)
        self.runtime.current_device().check_invariants()


TestAclMachine = AclMachine.TestCase
