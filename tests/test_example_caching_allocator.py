"""The example caching allocator, tested with the plugin, the strategies, the state machine and
fault injection; the deliberate bugs in the example are found by the tools."""

import importlib
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    consumes,
    invariant,
    multiple,
    rule,
    run_state_machine_as_test,
)

from ascend_memsim import MiB, Page, install_acl, uninstall_acl
from ascend_memsim.checks.faults import FailWhen
from ascend_memsim.strategies import sizes
from ascend_memsim.testing.exhaustive import exhaustive
from ascend_memsim.testing.machine import AllocatorMachine

# The example does `import acl`, as code written for hardware does; `pytest --memsim-acl` would
# make that resolve to the simulator for a whole run; here it is done for the import only.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
_previous = install_acl()
try:
    cache_mod = importlib.import_module("caching_allocator")
finally:
    uninstall_acl(_previous)
    sys.path.pop(0)

CachingAllocator = cache_mod.CachingAllocator
NPUOutOfMemoryError = cache_mod.NPUOutOfMemoryError


@pytest.mark.memsim(hbm_bytes=64 * MiB)
def test_rounding_and_segments(memsim):
    cache = CachingAllocator()
    a = cache.malloc(100)
    b = cache.malloc(100)
    assert b - a == 512  # 512-byte rounding, carved from one segment
    (segment,) = memsim.blocks()
    # a 2 MiB segment through malloc_align32 costs exactly one huge page
    assert (segment.size, segment.footprint, segment.page) == (2 * MiB, 2 * MiB, Page.HUGE)
    big = cache.malloc(3 * MiB)
    assert cache.reserved_bytes == 22 * MiB and memsim.block(big).size == 20 * MiB
    for ptr in (a, b, big):
        cache.free(ptr)
    assert cache.allocated_bytes == 0 and len(memsim.blocks()) == 2
    cache.empty_cache()
    assert memsim.blocks() == []


@pytest.mark.memsim(faults=[{"nth": 1, "api": "malloc_align32"}])
def test_a_failed_segment_allocation_is_retried_after_emptying_the_cache(memsim, memsim_faults):
    cache = CachingAllocator()
    ptr = cache.malloc(1000)
    assert memsim_faults[0].calls == 2 and len(memsim_faults[0].injected) == 1
    cache.free(ptr)
    cache.empty_cache()


@pytest.mark.memsim(faults=[{"huge_pages_exhausted": True}])
def test_segments_fall_back_to_normal_pages_when_huge_pages_run_out(memsim):
    cache = CachingAllocator()
    ptr = cache.malloc(5 * MiB)
    (segment,) = memsim.blocks()
    assert segment.page is Page.NORMAL and segment.fallback
    cache.free(ptr)
    cache.empty_cache()


def test_out_of_memory_is_reported_and_leaves_the_cache_usable(memsim):
    cache = CachingAllocator()
    keep = cache.malloc(100)
    with FailWhen(size=(20 * MiB, None)).installed(memsim):
        with pytest.raises(NPUOutOfMemoryError, match="cannot allocate a 20971520-byte segment"):
            cache.malloc(3 * MiB)
    assert cache.allocated_bytes == 512
    cache.free(keep)
    cache.empty_cache()
    assert memsim.blocks() == []


def test_exhaustive_fault_injection_finds_the_leak_in_user_code():
    def run(step):
        def program(rt):
            cache = CachingAllocator()
            try:
                step(cache, tokens=3072)  # 12 MiB buffers: one segment each
            finally:
                cache.empty_cache()
        # every call from the failing site fails, so the cache's retry fails too
        return exhaustive(program, expected=NPUOutOfMemoryError, times=None, hbm_bytes=64 * MiB)

    buggy = run(cache_mod.attention_step)
    assert [o.outcome for o in buggy.outcomes] == ["handled", "leaked"]
    assert "in attention_step" in str(buggy) and "leaked 12582912-byte block" in str(buggy)
    assert run(cache_mod.attention_step_fixed).ok


class CacheMachine(AllocatorMachine):
    """Random malloc/free/empty_cache programs against the cache, on a 64 MiB device."""

    allocator = CachingAllocator
    blocks = Bundle("blocks")

    def setup(self):
        self.cache = self.allocator()
        self.sizes = {}

    def user_extents(self):
        return self.cache.extents()

    def cleanup(self):
        for ptr in list(self.sizes):
            self.cache.free(ptr)
        self.cache.empty_cache()
        assert self.runtime.blocks() == [], "the cache kept segments after empty_cache"

    @rule(target=blocks, size=sizes(max_size=24 * MiB))
    def malloc(self, size):
        try:
            ptr = self.cache.malloc(size)
        except NPUOutOfMemoryError:
            return multiple()
        self.sizes[ptr] = size
        return ptr

    @rule(ptr=consumes(blocks))
    def free(self, ptr):
        self.cache.free(ptr)
        del self.sizes[ptr]

    @rule()
    def empty_cache(self):
        self.cache.empty_cache()

    @invariant()
    def handed_out_blocks_do_not_overlap(self):
        extents = sorted(self.cache.extents())
        for (p, n), (q, _) in zip(extents, extents[1:]):
            assert p + n <= q, f"blocks at {p:#x} and {q:#x} overlap"

    @invariant()
    def reserved_equals_the_device_blocks(self):
        assert self.cache.reserved_bytes == sum(b.size for b in self.runtime.blocks())


TestCachingAllocator = CacheMachine.TestCase
TestCachingAllocator.settings = settings(max_examples=60, stateful_step_count=30,
                                         suppress_health_check=[HealthCheck.too_slow])


class BuggyCacheMachine(CacheMachine):
    allocator = cache_mod.BuggyCachingAllocator


def test_the_state_machine_finds_the_empty_cache_bug():
    with pytest.raises(AssertionError, match="freed to the device while still in use"):
        run_state_machine_as_test(BuggyCacheMachine, settings=settings(
            max_examples=300, stateful_step_count=20, derandomize=True, database=None,
            phases=[Phase.generate], report_multiple_bugs=False, deadline=None, print_blob=False,
            suppress_health_check=list(HealthCheck)))


@pytest.mark.parametrize("memsim", ["A2", "950PR", "310P"], indirect=True)
def test_alloc_free_programs_leave_nothing_behind_on_each_product(memsim):
    # Drawn inside the test so the product parameter and Hypothesis compose.
    from hypothesis import given

    @settings(max_examples=20, deadline=None)
    @given(st.lists(st.tuples(sizes(max_size=12 * MiB), st.booleans()), max_size=12))
    def check(steps):
        cache = CachingAllocator()
        live = []
        for size, free_one in steps:
            if free_one and live:
                cache.free(live.pop())
            else:
                try:
                    live.append(cache.malloc(size))
                except NPUOutOfMemoryError:
                    pass
        for ptr in live:
            cache.free(ptr)
        cache.empty_cache()
        assert memsim.blocks() == []

    check()
