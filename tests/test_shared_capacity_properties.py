"""A Hypothesis state machine over two or three simulated processes sharing one device:
mallocs, aclrtMallocPhysical, frees, device resets and finalizes in any order keep the sum of
what each process holds equal to what the machine counts, at most the device's capacity, and
every allocation that failed did not fit (no page kind it may use fits in what the processes
together leave free, or in a free run of its own process's address space)."""

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from ascend_memsim import MiB, Runtime, acl
from ascend_memsim.memory.errors import OutOfDeviceMemory
from ascend_memsim.memory.rules import (
    PAGE_BYTES,
    Api,
    align_up,
    page_order,
    parse_policy,
    rule_size,
)

PROCESSES = 3
CAPACITY = 32 * MiB
POLICIES = (acl.ACL_MEM_MALLOC_HUGE_FIRST, acl.ACL_MEM_MALLOC_HUGE_ONLY,
            acl.ACL_MEM_MALLOC_NORMAL_ONLY)
HUGE = 2 * MiB
#: aclrtMallocPhysical's prop: 2 MiB pages of device 0
PHYSICAL = {"memAttr": acl.ACL_HBM_MEM_HUGE, "location": {"id": 0, "type": 1}}
SIZES = st.one_of(st.integers(1, 64 * 1024), st.integers(MiB, 12 * MiB),
                  st.sampled_from([2 * MiB, 2 * MiB - 32, 8 * MiB]))


def _footprints(rt, size, policy):
    """(page kind, footprint) of each page kind an aclrtMalloc of ``size`` may use."""
    base, _ = parse_policy(policy, Api.MALLOC)
    return [(page, align_up(rule_size(rt.profile, size, page, Api.MALLOC, policy),
                            PAGE_BYTES[page]))
            for page in page_order(rt.profile, size, base)]


def _placeable(device, footprint, align):
    """True when ``device``'s own address space has a run for ``footprint`` at ``align``,
    with the blocks the sanitizer's quarantine holds given back (a malloc takes them)."""
    alloc = device.allocators[device.profile.main_memory]
    held = [block.ptr for block in device.held()]
    journal = alloc.release_tentatively(held) if held else None
    try:
        return alloc.find(footprint, align) is not None
    finally:
        if journal:
            alloc.undo_release(journal)


class SharedCapacityMachine(RuleBasedStateMachine):
    @initialize(sanitized=st.lists(st.booleans(), min_size=2, max_size=PROCESSES))
    def start(self, sanitized):
        # A process with the sanitizer keeps freed blocks in its quarantine (held, not drawn).
        modes = [{"output": None} if on else "off" for on in sanitized]
        first = Runtime("A2", hbm_bytes=CAPACITY, sanitizer=modes[0])
        self.procs = [first] + [first.spawn_process(sanitizer=mode) for mode in modes[1:]]
        for rt in self.procs:
            rt.set_device(0)
        #: per process: ptr -> footprint of its live blocks (the model)
        self.live: list[dict[int, int]] = [{} for _ in self.procs]

    def teardown(self):
        for rt in self.procs:
            rt.close()

    def _used(self):
        return sum(sum(blocks.values()) for blocks in self.live)

    @rule(who=st.integers(0, PROCESSES - 1), size=SIZES, policy=st.sampled_from(POLICIES))
    def malloc(self, who, size, policy):
        who %= len(self.procs)
        rt = self.procs[who]
        room = CAPACITY - self._used()
        try:
            ptr = rt.malloc(size, policy)
        except OutOfDeviceMemory:
            for page, footprint in _footprints(rt, size, policy):
                assert footprint > room or not _placeable(rt.device(0), footprint,
                                                          PAGE_BYTES[page]), (page, footprint)
            return
        footprint = rt.block(ptr).footprint
        assert footprint <= room
        self.live[who][ptr] = footprint

    @rule(who=st.integers(0, PROCESSES - 1), pages=st.integers(1, 6))
    def malloc_physical(self, who, pages):
        who %= len(self.procs)
        rt = self.procs[who]
        footprint = pages * HUGE
        room = CAPACITY - self._used()
        try:
            handle = rt.vmm.malloc_physical(footprint, PHYSICAL)
        except OutOfDeviceMemory:
            assert footprint > room or not _placeable(rt.device(0), footprint, HUGE)
            return
        assert footprint <= room
        self.live[who][("handle", handle)] = footprint

    @precondition(lambda self: any(self.live))
    @rule(data=st.data())
    def free(self, data):
        who = data.draw(st.sampled_from([i for i, blocks in enumerate(self.live) if blocks]))
        key = data.draw(st.sampled_from(sorted(self.live[who], key=str)))
        if isinstance(key, tuple):
            self.procs[who].vmm.free_physical(key[1])
        else:
            self.procs[who].free(key)
        del self.live[who][key]

    @rule(who=st.integers(0, PROCESSES - 1))
    def reset_device(self, who):
        who %= len(self.procs)
        rt = self.procs[who]
        rt.reset_device(0)  # the last reference: the blocks go
        self.live[who].clear()
        rt.set_device(0)

    @rule(who=st.integers(0, PROCESSES - 1))
    def finalize(self, who):
        who %= len(self.procs)
        rt = self.procs[who]
        rt.close()  # aclFinalize
        self.live[who].clear()
        rt.set_device(0)

    @invariant()
    def accounting_is_exact(self):
        used = self._used()
        assert used <= CAPACITY
        main = self.procs[0].profile.main_memory
        views = [rt.device(0) for rt in self.procs]
        assert [view.drawn_bytes(main) for view in views] == [sum(b.values()) for b in self.live]
        assert views[0].budget.free(main) == CAPACITY - used
        for rt, view in zip(self.procs, views):
            assert rt.get_mem_info(acl.ACL_HBM_MEM) == (CAPACITY - used, CAPACITY)
            view.check_invariants()


TestSharedCapacity = SharedCapacityMachine.TestCase
