"""A state machine over stream-ordered memory pools (11-10), through the pyacl face.

Rules: malloc async / free async on two streams of two pools, synchronise a stream or the
device, trim to, set the release threshold and the reuse switches, and aclrtMalloc /
aclrtFree of ordinary blocks in the same device memory. It keeps, against a model:

* each pool's used bytes are its live blocks rounded up to 2 MiB, and its reserved bytes
  never fall below them;
* the device's free memory is total minus the ordinary blocks' footprints minus every
  pool's reserved bytes (the pool's memory is charged to the device);
* no two live blocks (pool or ordinary) overlap; a live pool block stays writable;
* after a synchronisation, a pool holds no more than max(threshold, used) (the release
  threshold, 11-10), and trim_to(n) leaves at most max(n, used) once every free has run;
* every failed call leaves everything as it was.
"""

import hypothesis.strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, invariant, rule

import ascend_memsim.acl as acl
from ascend_memsim import MiB, Runtime

G = 2 * MiB
RESERVED = acl.ACL_RT_MEM_POOL_ATTR_RESERVED_MEM_CURRENT
USED = acl.ACL_RT_MEM_POOL_ATTR_USED_MEM_CURRENT


def _up(n):
    return -(-n // G) * G


class PoolMachine(RuleBasedStateMachine):
    pool_blocks = Bundle("pool_blocks")
    blocks = Bundle("blocks")

    def __init__(self):
        super().__init__()
        self.rt = Runtime("A2", hbm_bytes=64 * MiB, sanitizer="off")
        self.rt.__enter__()
        acl.rt.set_device(0)
        self.total = self.rt.get_mem_info(acl.ACL_HBM_MEM)[1]
        self.streams = [acl.rt.create_stream()[0] for _ in range(2)]
        self.pools = []
        for size in (16 * MiB, 8 * MiB):
            props = {"location": {"id": 0, "type": 1}, "maxSize": size}
            self.pools.append(acl.rt.mem_pool_create(props)[0])
        #: ptr -> (pool, size asked)
        self.live = {}
        #: ptr -> the stream a pool block was made for
        self.on = {}
        #: ptr -> footprint of ordinary blocks
        self.ordinary = {}

    def teardown(self):
        self.rt.__exit__(None, None, None)

    def _state(self):
        return (self.rt.get_mem_info(acl.ACL_HBM_MEM),
                [(acl.rt.mem_pool_get_attr(p, RESERVED), acl.rt.mem_pool_get_attr(p, USED))
                 for p in self.pools], self.rt.streams.pending)

    def _reserved(self, pool):
        return acl.rt.mem_pool_get_attr(pool, RESERVED)[0]

    @rule(target=pool_blocks, pool=st.integers(0, 1), stream=st.integers(0, 1),
          size=st.sampled_from([1, 100, G, G + 1, 5 * MiB, 9 * MiB]))
    def malloc_async(self, pool, stream, size):
        before = self._state()
        ptr, ret = acl.rt.mem_pool_malloc_async(size, self.pools[pool], self.streams[stream])
        if ret:
            assert ret in (acl.ACL_ERROR_RT_INTERNAL_ERROR, acl.ACL_ERROR_RT_MEMORY_ALLOCATION)
            assert self._state() == before
            return None
        assert ptr % G == 0
        self.live[ptr] = (self.pools[pool], size)
        self.on[ptr] = stream
        # the new block is the program's: it can be written
        assert acl.rt.memset_async(ptr, size, 1, size, self.streams[stream]) == 0
        return ptr

    @rule(ptr=consumes(pool_blocks), stream=st.integers(0, 1))
    def free_async(self, ptr, stream):
        if ptr is None:
            return
        if self.on.pop(ptr) != stream:
            # freeing on another stream: it first waits for the work queued on the block
            # (without the wait, the free may run first: use after free, which the sanitizer
            # reports and the queued write then fails)
            event, _ = acl.rt.create_event()
            acl.rt.record_event(event, self.streams[1 - stream])
            acl.rt.stream_wait_event(self.streams[stream], event)
        assert acl.rt.mem_pool_free_async(ptr, self.streams[stream]) == 0
        del self.live[ptr]

    @rule(ptr=pool_blocks, stream=st.integers(0, 1))
    def free_async_again_is_refused_or_fine(self, ptr, stream):
        if ptr is None or ptr in self.live:
            return
        before = self._state()
        assert acl.rt.mem_pool_free_async(ptr, self.streams[stream]) == \
            acl.ACL_ERROR_RT_PARAM_INVALID
        assert self._state() == before

    @rule(stream=st.integers(0, 2))
    def synchronize(self, stream):
        if stream == 2:
            assert acl.rt.synchronize_device() == 0
        else:
            assert acl.rt.synchronize_stream(self.streams[stream]) == 0
        for pool in self.pools:
            threshold = acl.rt.mem_pool_get_attr(
                pool, acl.ACL_RT_MEM_POOL_ATTR_RELEASE_THRESHOLD)[0]
            used = acl.rt.mem_pool_get_attr(pool, USED)[0]
            if stream == 2:
                assert self._reserved(pool) <= max(threshold, used)

    @rule(pool=st.integers(0, 1), keep=st.sampled_from([0, G, 4 * MiB, 8 * MiB, 17 * MiB]))
    def trim_to(self, pool, keep):
        handle = self.pools[pool]
        acl.rt.synchronize_device()
        before = self._state()
        used = acl.rt.mem_pool_get_attr(handle, USED)[0]
        ret = acl.rt.mem_pool_trim_to(handle, keep)
        size = (16 if pool == 0 else 8) * MiB
        if keep > size or (keep < used and keep < before[1][pool][0][0]):
            assert ret == acl.ACL_ERROR_RT_INTERNAL_ERROR
            assert self._state() == before
        else:
            assert ret == 0
            assert self._reserved(handle) <= max(keep, used)

    @rule(pool=st.integers(0, 1), threshold=st.sampled_from([0, G, 6 * MiB, 64 * MiB]))
    def set_threshold(self, pool, threshold):
        ret = acl.rt.mem_pool_set_attr(self.pools[pool],
                                       acl.ACL_RT_MEM_POOL_ATTR_RELEASE_THRESHOLD, threshold)
        assert ret == (0 if threshold <= (16 if pool == 0 else 8) * MiB
                       else acl.ACL_ERROR_RT_INTERNAL_ERROR)

    @rule(pool=st.integers(0, 1), attr=st.sampled_from([1, 2, 3]), on=st.booleans())
    def set_reuse(self, pool, attr, on):
        assert acl.rt.mem_pool_set_attr(self.pools[pool], attr, int(on)) == 0
        assert acl.rt.mem_pool_get_attr(self.pools[pool], attr) == (int(on), 0)

    @rule(target=blocks, size=st.sampled_from([100, MiB, 3 * MiB]))
    def malloc(self, size):
        ptr, ret = acl.rt.malloc(size, 0)
        if ret:
            return None
        self.ordinary[ptr] = self.rt.block(ptr).footprint
        return ptr

    @rule(ptr=consumes(blocks))
    def free(self, ptr):
        if ptr is not None:
            assert acl.rt.free(ptr) == 0
            del self.ordinary[ptr]

    @invariant()
    def accounting_is_exact(self):
        reserved = 0
        for pool in self.pools:
            used, ret = acl.rt.mem_pool_get_attr(pool, USED)
            assert ret == 0
            assert used == sum(_up(size) for p, size in self.live.values() if p == pool)
            assert self._reserved(pool) >= used
            reserved += self._reserved(pool)
            self.rt.pools.get(pool, "check").segments.check_invariants()
        free = self.rt.get_mem_info(acl.ACL_HBM_MEM)[0]
        assert free == self.total - sum(self.ordinary.values()) - reserved
        self.rt.device(0).check_invariants()

    @invariant()
    def blocks_do_not_overlap(self):
        spans = sorted([(p, p + _up(s)) for p, (_, s) in self.live.items()]
                       + [(p, p + f) for p, f in self.ordinary.items()])
        for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
            assert end <= start


TestPoolMachine = PoolMachine.TestCase
