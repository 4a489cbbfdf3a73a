"""A state machine over virtual memory and ordinary device memory, through the pyacl face.

Rules: reserve / release address ranges, malloc_physical / free_physical, map / unmap,
write through a mapping, and aclrtMalloc / aclrtFree blocks in the same device memory.
It keeps:

* mapped bytes survive: what was written through any mapping of a handle reads back through
  every mapping of it, across maps and unmaps of other handles and pages;
* free + live block footprints + physical footprints == total (aclrtGetMemInfo);
* no address is both in a block and in a mapping;
* every failed call leaves everything as it was;
* a handle's memory goes back to the device exactly when it is freed and no longer mapped.
"""

import hypothesis.strategies as st
import numpy as np
from hypothesis import settings
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, invariant, rule

import ascend_memsim.acl as acl
from ascend_memsim import MiB, Runtime

PROP = {"handleType": 0, "allocationType": 0, "memAttr": acl.ACL_HBM_MEM_HUGE,
        "location": {"id": 0, "type": 1}, "reserve": 0}
PAGE = 2 * MiB


class VirtualMemoryMachine(RuleBasedStateMachine):
    reservations = Bundle("reservations")
    handles = Bundle("handles")
    mappings = Bundle("mappings")
    blocks = Bundle("blocks")

    def __init__(self):
        super().__init__()
        self.rt = Runtime("A2", hbm_bytes=64 * MiB, sanitizer="off")
        self.rt.__enter__()
        self.rt.set_device(0)
        self.device = self.rt.device(0)
        #: handle -> {offset: bytes written}
        self.written = {}
        #: handle -> size, for the live (not freed) handles
        self.sizes = {}
        #: va -> handle of each live mapping
        self.maps = {}
        #: va -> size of each live reservation
        self.reserved = {}

    def teardown(self):
        self.rt.__exit__(None, None, None)

    # -- helpers -----------------------------------------------------------------------------

    def state(self):
        space = self.rt.vmm.space
        vmm = None if space is None or not (space.reservations or space.handles) else (
            [(r.ptr, r.size, list(r.maps)) for r in space.reservations.values()],
            sorted((h.handle, h.refs, tuple(sorted(h.maps))) for h in space.handles.values()))
        d = self.device
        return (vmm, d.mem_info(acl.ACL_HBM_MEM), tuple(d.allocators[d.profile.main_memory]
                                                        .free_runs()),
                [(b.ptr, b.footprint) for b in d.blocks()], dict(d.physical))

    def call(self, fn, *args):
        """``fn(*args)``; on failure, check that nothing changed. The result and the code."""
        before = self.state()
        result = fn(*args)
        code = result[-1] if isinstance(result, tuple) else result
        if code:
            assert self.state() == before, (fn.__name__, args, acl.get_recent_err_msg())
        return result, code

    # -- rules -------------------------------------------------------------------------------

    @rule(target=reservations, pages=st.integers(1, 6), flags=st.sampled_from([0, 1, 2]))
    def reserve(self, pages, flags):
        (va, code) = self.call(acl.rt.reserve_mem_address, pages * PAGE, 0, 0, flags)[0]
        assert (code == 0) == (flags in (0, 1))
        if code == 0:
            assert all(va + pages * PAGE <= o or o + n <= va for o, n in self.reserved.items())
            self.reserved[va] = pages * PAGE
        return (va, pages * PAGE) if code == 0 else (0, 0)

    @rule(reservation=consumes(reservations))
    def release(self, reservation):
        va, size = reservation
        _, code = self.call(acl.rt.release_mem_address, va)
        inside = [m for m in self.maps if va <= m < va + size]
        assert (code == 0) == (va in self.reserved and not inside)
        if code == 0:
            del self.reserved[va]

    @rule(target=handles, pages=st.integers(1, 6))
    def malloc_physical(self, pages):
        free = self.device.mem_info(acl.ACL_HBM_MEM)[0]
        (handle, code), _ = self.call(acl.rt.malloc_physical, pages * PAGE, PROP, 0)
        if code == 0:
            self.sizes[handle] = pages * PAGE
            self.written[handle] = {}
            assert self.device.mem_info(acl.ACL_HBM_MEM)[0] == free - pages * PAGE
        else:
            assert code == acl.ACL_ERROR_RT_MEMORY_ALLOCATION
        return handle

    @rule(handle=consumes(handles))
    def free_physical_rule(self, handle):
        self.free_physical(handle)

    def free_physical(self, handle):
        free = self.device.mem_info(acl.ACL_HBM_MEM)[0]
        _, code = self.call(acl.rt.free_physical, handle)
        assert (code == 0) == (handle in self.sizes)
        if code == 0:
            size = self.sizes.pop(handle)
            still_mapped = handle in self.maps.values()
            # 11-04: the memory goes back at the last unmap
            assert self.device.mem_info(acl.ACL_HBM_MEM)[0] == free + (0 if still_mapped
                                                                       else size)

    @rule(target=mappings, reservation=reservations, page=st.integers(0, 3), handle=handles)
    def map(self, reservation, page, handle):
        va, _ = reservation
        ptr = va + page * PAGE
        _, code = self.call(acl.rt.map_mem, ptr, self.sizes.get(handle, PAGE), 0, handle, 0)
        if code == 0:
            end = ptr + self.sizes[handle]
            # inside one live reservation (not necessarily the one drawn: ranges may touch)
            assert any(o <= ptr and end <= o + n for o, n in self.reserved.items())
            for other, h in self.maps.items():
                assert end <= other or other + self.space_size(h) <= ptr
            self.maps[ptr] = handle
            return ptr
        return 0

    @rule(target=mappings, pages=st.integers(1, 3))
    def map_new(self, pages):
        """Reserve, allocate and map in one step (the common path, so writes happen often)."""
        (va, code) = self.call(acl.rt.reserve_mem_address, 4 * PAGE, 0, 0, 0)[0]
        assert code == 0
        self.reserved[va] = 4 * PAGE
        (handle, code), _ = self.call(acl.rt.malloc_physical, pages * PAGE, PROP, 0)
        if code:
            return 0
        self.sizes[handle] = pages * PAGE
        self.written[handle] = {}
        assert self.call(acl.rt.map_mem, va + PAGE, pages * PAGE, 0, handle, 0)[1] == 0
        self.maps[va + PAGE] = handle
        return va + PAGE

    @rule(ptr=mappings)
    def free_mapped_handle(self, ptr):
        """aclrtFreePhysical of a handle that is mapped: its memory stays until the last unmap."""
        handle = self.maps.get(ptr)
        if handle in self.sizes:
            self.free_physical(handle)

    def space_size(self, handle):
        return self.rt.vmm.space.mapping_at(next(p for p, h in self.maps.items()
                                                 if h == handle)).size

    @rule(ptr=consumes(mappings))
    def unmap(self, ptr):
        free = self.device.mem_info(acl.ACL_HBM_MEM)[0]
        size = self.rt.vmm.space.mapping_at(ptr).size if ptr in self.maps else 0
        _, code = self.call(acl.rt.unmap_mem, ptr)
        assert (code == 0) == (ptr in self.maps)
        if code == 0:
            handle = self.maps.pop(ptr)
            gone = handle not in self.sizes and handle not in self.maps.values()
            if gone:
                self.written.pop(handle, None)
            # a freed handle's memory goes back at its last unmap, not before (11-04)
            assert self.device.mem_info(acl.ACL_HBM_MEM)[0] == free + (size if gone else 0)

    @rule(ptr=mappings, offset=st.integers(0, 4 * MiB), length=st.integers(1, 4096),
          seed=st.integers(0, 255))
    def write(self, ptr, offset, length, seed):
        if ptr not in self.maps:
            return
        handle = self.maps[ptr]
        offset %= self.space_size(handle)
        length = min(length, self.space_size(handle) - offset)
        data = bytes((seed + i) % 256 for i in range(length))
        buf = np.frombuffer(data, np.uint8).copy()
        _, code = self.call(acl.rt.memcpy, ptr + offset, length, acl.util.numpy_to_ptr(buf),
                            length, 1)
        assert code == 0, acl.get_recent_err_msg()
        self.written[handle] = {o: d for o, d in self.written[handle].items()
                                if o + len(d) <= offset or offset + length <= o}
        self.written[handle][offset] = data

    @rule(target=blocks, size=st.integers(1, 6 * MiB))
    def malloc(self, size):
        (ptr, code), _ = self.call(acl.rt.malloc, size, 0)
        return ptr if code == 0 else 0

    @rule(ptr=consumes(blocks))
    def free(self, ptr):
        self.call(acl.rt.free, ptr)

    # -- invariants --------------------------------------------------------------------------

    @invariant()
    def mapped_bytes_survive(self):
        for ptr, handle in self.maps.items():
            for offset, data in self.written[handle].items():
                out = np.zeros(len(data), np.uint8)
                assert acl.rt.memcpy(acl.util.numpy_to_ptr(out), len(out), ptr + offset,
                                     len(out), 2) == 0
                assert bytes(out) == data

    @invariant()
    def footprints_add_up(self):
        d = self.device
        free, total = d.mem_info(acl.ACL_HBM_MEM)
        live = sum(b.footprint for b in d.blocks())
        assert free + live + sum(d.physical.values()) == total
        d.check_invariants()
        if self.rt.vmm.space is not None:
            self.rt.vmm.space.check_invariants()

    @invariant()
    def no_address_is_both(self):
        space = self.rt.vmm.space
        for block in self.device.blocks():
            assert space is None or space.mapping_at(block.ptr) is None
            assert space is None or space.mapping_at(block.end - 1) is None
        for ptr in self.maps:
            assert self.rt.block_at(ptr) is None


VirtualMemoryMachine.TestCase.settings = settings(settings(), stateful_step_count=30)
TestVirtualMemory = VirtualMemoryMachine.TestCase
