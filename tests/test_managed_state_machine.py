"""A state machine over managed memory (11-05), through the pyacl face, against a model.

Rules: allocate (sizes around 2 MiB, some too big), free (live and already freed pointers),
write bytes from the host or from device memory, advise a range of pages, prefetch a range
on a stream and synchronise, aclrtMalloc / aclrtFree of ordinary blocks in the same device
memory. It keeps:

* the device's free memory is total minus the ordinary blocks' footprints minus every live
  managed allocation's size rounded up to 2 MiB (managed memory is charged to its device);
* live allocations lie in the managed range and do not overlap;
* every page's advice and last prefetch location read back as the model has them, and a
  range whose pages disagree reads as invalid;
* the bytes the host reads are the bytes last written, by whichever side;
* every failed call leaves the figures and the allocations as they were.
"""

import hypothesis.strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, invariant, rule

import ascend_memsim.acl as acl
from ascend_memsim import MiB, Runtime
from ascend_memsim.memory.rules import UVM_BASE, UVM_END

G = 2 * MiB
ATTRS = acl.ACL_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, acl.ACL_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION
LOCATIONS = [{"type": 1, "id": 0}, {"type": 1, "id": 1}, {"type": 2, "id": 0}]
NONE = {"type": 0, "id": -1}


def _up(n):
    return -(-n // G) * G


class ManagedMachine(RuleBasedStateMachine):
    allocs = Bundle("allocs")
    blocks = Bundle("blocks")

    def __init__(self):
        super().__init__()
        self.rt = Runtime("A2", hbm_bytes=64 * MiB, device_count=2, sanitizer="off")
        self.rt.__enter__()
        acl.rt.set_device(0)
        self.total = self.rt.get_mem_info(acl.ACL_HBM_MEM)[1]
        self.stream = acl.rt.create_stream()[0]
        #: ptr -> [size, {page: (read_mostly, preferred, prefetched)}, bytes written at 0]
        self.live = {}
        self.freed = set()
        #: ptr -> footprint of ordinary blocks
        self.ordinary = {}

    def teardown(self):
        self.rt.__exit__(None, None, None)

    def _state(self):
        return (self.rt.get_mem_info(acl.ACL_HBM_MEM),
                [(a.ptr, a.size, sorted(a.pages.items())) for a in self.rt.managed.allocations()])

    def _page(self, ptr, page):
        return self.live[ptr][1].get(page, (0, NONE, NONE))

    def _holder(self, addr, length):
        """(allocation, its first page) holding ``[addr, addr + length)``, or (None, 0)."""
        for ptr, (size, _, _) in self.live.items():
            if ptr <= addr and addr + length <= ptr + _up(size):
                return ptr, (addr - ptr) // G
        return None, 0

    @rule(target=allocs, size=st.sampled_from([1, 100, G, G + 1, 3 * G, 40 * MiB, 0]))
    def alloc(self, size):
        before = self._state()
        ptr, ret = acl.rt.mem_alloc_managed(size, acl.ACL_RT_MEM_ATTACH_GLOBAL)
        if ret:
            assert ret in (acl.ACL_ERROR_RT_MEMORY_ALLOCATION, acl.ACL_ERROR_RT_PARAM_INVALID)
            assert self._state() == before
            return None
        assert UVM_BASE <= ptr < UVM_END and ptr % G == 0
        self.live[ptr] = [size, {}, b""]
        self.freed.discard(ptr)
        return ptr

    @rule(ptr=consumes(allocs))
    def free(self, ptr):
        if ptr is None:
            return
        before = self._state()
        ret = acl.rt.free(ptr)
        if ptr in self.freed:
            assert ret == acl.ACL_ERROR_RT_PARAM_INVALID and self._state() == before
            return
        assert ret == 0
        del self.live[ptr]
        self.freed.add(ptr)

    @rule(target=blocks, size=st.sampled_from([100, G, 3 * G]))
    def malloc(self, size):
        ptr, ret = acl.rt.malloc(size, 0)
        if ret:
            return None
        self.ordinary[ptr] = self.rt.block(ptr).footprint
        return ptr

    @rule(ptr=consumes(blocks))
    def free_block(self, ptr):
        if ptr is not None:
            assert acl.rt.free(ptr) == 0
            del self.ordinary[ptr]

    @rule(ptr=allocs, data=st.binary(min_size=1, max_size=32), through_device=st.booleans(),
          blocks=st.lists(blocks, max_size=1))
    def write(self, ptr, data, through_device, blocks):
        if ptr not in self.live:
            return
        buffer = bytes(data)
        src = acl.util.bytes_to_ptr(buffer) if len(buffer) > 1 else None
        if src is None:
            return
        block = next((b for b in blocks if b in self.ordinary), None)
        if through_device and block is not None:
            assert acl.rt.memcpy(block, len(buffer), src, len(buffer), 1) == 0
            src = block
        assert acl.rt.memcpy(ptr, len(buffer), src, len(buffer), 1) == 0
        old = self.live[ptr][2]
        self.live[ptr][2] = buffer + old[len(buffer):]

    @rule(ptr=allocs, first=st.integers(0, 3), pages=st.integers(1, 3),
          advise=st.sampled_from([0, 1, 2, 3, 6]), where=st.sampled_from(LOCATIONS))
    def advise(self, ptr, first, pages, advise, where):
        if ptr not in self.live:
            return
        before = self._state()
        ret = acl.rt.mem_managed_advise(ptr + first * G, pages * G, advise, where)
        # the range may lie in the allocation after this one
        ptr, first = self._holder(ptr + first * G, pages * G)
        if ptr is None or advise > 5:
            assert ret == acl.ACL_ERROR_RT_PARAM_INVALID and self._state() == before
            return
        assert ret == 0
        for page in range(first, first + pages):
            mostly, preferred, prefetched = self._page(ptr, page)
            if advise in (0, 1):
                mostly = int(advise == 0)
            else:
                preferred = where if advise == 2 else NONE
            self.live[ptr][1][page] = (mostly, preferred, prefetched)

    @rule(ptr=allocs, first=st.integers(0, 2), where=st.sampled_from(LOCATIONS))
    def prefetch(self, ptr, first, where):
        if ptr not in self.live:
            return
        ret = acl.rt.mem_managed_prefetch_async(ptr + first * G, G, where, 0, self.stream)
        ptr, first = self._holder(ptr + first * G, G)
        if ptr is None:
            assert ret == acl.ACL_ERROR_RT_PARAM_INVALID and self.rt.streams.pending == 0
            return
        assert ret == 0 and acl.rt.synchronize_stream(self.stream) == 0
        mostly, preferred, _ = self._page(ptr, first)
        self.live[ptr][1][first] = (mostly, preferred, where)

    @invariant()
    def memory_is_charged_to_the_device(self):
        free = self.rt.get_mem_info(acl.ACL_HBM_MEM)[0]
        managed = sum(_up(size) for size, _, _ in self.live.values())
        assert free == self.total - sum(self.ordinary.values()) - managed
        self.rt.device(0).check_invariants()
        spans = sorted((p, p + _up(s)) for p, (s, _, _) in self.live.items())
        for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
            assert end <= start

    @invariant()
    def attributes_and_bytes_read_back(self):
        for ptr, (size, _, written) in self.live.items():
            count = _up(size) // G
            states = [self._page(ptr, p) for p in range(count)]
            values, ret = acl.rt.mem_managed_get_attrs(
                [*ATTRS, acl.ACL_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION], ptr, size,
                [4, 8, 8])
            assert ret == 0
            same = {repr(s[1]) for s in states}
            prefetched = {repr(s[2]) for s in states}
            assert values == [int(all(s[0] for s in states)),
                              states[0][1] if len(same) == 1 else NONE,
                              states[0][2] if len(prefetched) == 1 else NONE]
            if written:
                assert acl.util.ptr_to_bytes(ptr, len(written)) == written


TestManagedMachine = ManagedMachine.TestCase
