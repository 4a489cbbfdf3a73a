"""The shipped Hypothesis strategies and the AllocatorMachine base, exercised on the simulator."""

from typing import ClassVar

import pytest
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis.stateful import Bundle, consumes, invariant, rule, run_state_machine_as_test

from ascend_memsim import (
    AclError,
    Api,
    GiB,
    InvalidArgument,
    InvalidArgumentType,
    InvalidMemoryType,
    MiB,
    Runtime,
    acl,
)
from ascend_memsim import strategies as ms
from ascend_memsim.testing.machine import AllocatorMachine


def test_boundary_sizes_sit_on_the_rule_edges():
    near = ms.boundary_sizes()
    assert {1, 31, 32, 33, 63, 64, 65} <= set(near)
    for edge in (1 * MiB, 2 * MiB, 1 * GiB):
        assert {edge - 33, edge - 32, edge - 1, edge, edge + 1, edge + 32, edge + 33} <= set(near)
    assert ms.boundary_sizes(100, 200) == [
        n for n in near if 100 <= n <= 200] and min(ms.boundary_sizes(5, 100)) >= 5


def test_sizes_reach_the_edges_and_multiples_of_32_plus_minus_1():
    assert find(ms.sizes(), lambda n: n == 2 * MiB + 33) == 2 * MiB + 33
    assert find(ms.sizes(), lambda n: n > 4096 and n % 32 == 31) % 32 == 31
    assert find(ms.sizes(max_size=64 * MiB), lambda n: n > 1 * MiB) == 1 * MiB + 1
    with pytest.raises(ValueError):
        ms.sizes(min_size=10, max_size=5)


@given(size=ms.sizes(max_size=96 * MiB), policy=ms.policies(), api=ms.apis())
def test_any_size_and_policy_either_allocates_or_fails_cleanly(size, policy, api):
    with Runtime("A2", hbm_bytes=64 * MiB) as rt:
        rt.set_device(0)
        before = rt.get_mem_info(1)
        call = {Api.MALLOC: rt.malloc, Api.MALLOC_ALIGN32: rt.malloc_align32,
                Api.MALLOC_CACHED: rt.malloc_cached, Api.MALLOC_WITH_CFG: rt.malloc_with_cfg,
                Api.MALLOC_FOR_TASK_SCHEDULER: rt.malloc_for_task_scheduler}[api]
        try:
            ptr = call(size, policy)
        except AclError:
            assert rt.get_mem_info(1) == before and rt.blocks() == []
        else:
            block = rt.block(ptr)
            assert block.size == size and block.rule_size >= size and block.rule_size % 32 == 0
            free, total = rt.get_mem_info(1)
            assert free + block.footprint == total
        rt.current_device().check_invariants()


@given(ms.bad_sizes())
def test_bad_sizes_are_refused_by_the_core_and_the_face(size):
    with Runtime("950PR", hbm_bytes=64 * MiB) as rt:
        rt.set_device(0)
        with pytest.raises((InvalidArgument, InvalidArgumentType)):
            rt.malloc(size)
        assert acl.rt.malloc(size, 0) == (0, acl.ACL_ERROR_INVALID_PARAM)


@given(ms.policies())
def test_every_policy_word_is_accepted_by_malloc(policy):
    # Out-of-enum values are hints, and aclrtMalloc reads a flagged word as one of them; only
    # 1 GB pages cannot fit a 64 MiB device.
    with Runtime("A2", hbm_bytes=64 * MiB) as rt:
        rt.set_device(0)
        ptr, ret = acl.rt.malloc(4096, policy)
        huge1g = policy in (6, 7)
        assert ret == (acl.ACL_ERROR_RT_MEMORY_ALLOCATION if huge1g else 0)
        if not ret:
            rt.free(ptr)


@given(ms.products(), ms.mem_attrs(out_of_range=True))
def test_products_and_mem_attrs(product, attr):
    with Runtime(product) as rt:
        rt.set_device(0)
        if attr > 17:
            with pytest.raises(InvalidMemoryType):
                rt.get_mem_info(attr)
        else:
            free, total = rt.get_mem_info(attr)
            assert 0 <= free <= total


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(ms.programs(max_steps=25, max_size=16 * MiB, free_all=True,
                   api_strategy=ms.apis(), policy_strategy=ms.policies()))
def test_whole_programs_free_everything_they_allocate(program):
    with Runtime("A2", hbm_bytes=64 * MiB) as rt:
        rt.set_device(0)
        results = ms.run_program(rt, program)
        assert len(results) == len(program)
        assert rt.blocks() == [] and rt.get_mem_info(1) == (64 * MiB, 64 * MiB)
        rt.current_device().check_invariants()


@given(ms.programs(max_steps=10))
def test_program_frees_name_an_earlier_live_malloc(program):
    live = set()
    for i, step in enumerate(program):
        if isinstance(step, ms.Free):
            assert step.index in live
            live.remove(step.index)
        else:
            live.add(i)


class RuntimeMachine(AllocatorMachine):
    """The simulator itself through the pyacl face; the base class checks the invariants."""

    ptrs = Bundle("ptrs")

    def setup(self):
        self.live = {}

    def user_extents(self):
        return self.live.items()

    @rule(target=ptrs, size=ms.sizes(max_size=24 * MiB), policy=ms.policies(flags=False))
    def malloc(self, size, policy):
        ptr, ret = acl.rt.malloc(size, policy)
        if ret:
            # out of memory, or 1 GB pages asked of a part without them
            no_1g = not self.runtime.profile.huge1g and policy in (6, 7)
            assert ret == (acl.ACL_ERROR_RT_FEATURE_NOT_SUPPORT if no_1g else
                           acl.ACL_ERROR_RT_MEMORY_ALLOCATION) and ptr == 0
            ptr = None
        else:
            self.live[ptr] = size
        return ptr

    @rule(ptr=consumes(ptrs))
    def free(self, ptr):
        if ptr is not None:
            assert acl.rt.free(ptr) == 0
            del self.live[ptr]

    @rule(ptr=ptrs)
    def double_free_or_interior_is_refused(self, ptr):
        if ptr is not None:
            with self.expect_findings("invalid-free"):
                assert acl.rt.free(ptr + 1) == acl.ACL_ERROR_RT_PARAM_INVALID

    def cleanup(self):
        for ptr in self.live:
            assert acl.rt.free(ptr) == 0


TestRuntimeMachine = RuntimeMachine.TestCase
TestRuntimeMachine.settings = settings(max_examples=40, stateful_step_count=25, deadline=None)


class ForgetfulMachine(RuntimeMachine):
    """Frees device memory but keeps reporting it as handed out: the base must object."""

    product = "950PR"

    @rule(ptr=consumes(RuntimeMachine.ptrs))
    def free(self, ptr):
        if ptr is not None:
            assert acl.rt.free(ptr) == 0  # and forgets to drop it from self.live

    def cleanup(self):
        pass


def test_the_base_machine_catches_memory_used_after_it_went_back_to_the_device():
    with pytest.raises(AssertionError, match="which no live device block holds"):
        run_state_machine_as_test(ForgetfulMachine, settings=settings(
            max_examples=100, derandomize=True, database=None, phases=[Phase.generate],
            report_multiple_bugs=False, deadline=None, print_blob=False))


def test_the_machine_leaves_no_runtime_active():
    from ascend_memsim import Runtime

    depth = len(Runtime.active)
    run_state_machine_as_test(RuntimeMachine, settings=settings(
        max_examples=3, database=None, deadline=None))
    assert len(Runtime.active) == depth



class DoubleFreeMachine(RuntimeMachine):
    """Frees a block, then frees it again: the call returns the runtime's code, and the
    sanitizer's double-free finding must fail the example (as in the pytest fixture)."""

    @rule(size=ms.sizes(max_size=1 * MiB))
    def free_twice(self, size):
        ptr, ret = acl.rt.malloc(size, 0)
        if ret == 0:
            assert acl.rt.free(ptr) == 0
            assert acl.rt.free(ptr) == acl.ACL_ERROR_RT_PARAM_INVALID


def test_the_machine_fails_on_sanitizer_findings_and_prints_only_the_final_ones(capfd):
    with pytest.raises(AssertionError) as failure:
        run_state_machine_as_test(DoubleFreeMachine, settings=settings(
            max_examples=50, derandomize=True, database=None, deadline=None,
            report_multiple_bugs=False, print_blob=False))
    message = str(failure.value)
    assert "DoubleFreeMachine: 1 sanitizer finding(s) (double-free)" in message
    assert "Invalid free of" in message and "already freed" in message
    out, err = capfd.readouterr()
    # nothing printed while Hypothesis explored and shrank (hundreds of findings before)
    assert "Invalid free" not in out + err


class ForgivingDoubleFreeMachine(DoubleFreeMachine):
    fail_on = "never"


class ExpectedDoubleFreeMachine(DoubleFreeMachine):
    @rule(size=ms.sizes(max_size=1 * MiB))
    def free_twice(self, size):
        with self.expect_findings("double-free"):
            super().free_twice(size)


@pytest.mark.parametrize("machine", [ForgivingDoubleFreeMachine, ExpectedDoubleFreeMachine])
def test_findings_the_machine_means_to_cause_do_not_fail_it(machine):
    run_state_machine_as_test(machine, settings=settings(
        max_examples=10, derandomize=True, database=None, deadline=None))


def test_a_bad_fail_on_is_refused():
    class Bad(RuntimeMachine):
        fail_on = "sometimes"

    with pytest.raises(ValueError, match=r"Bad\.fail_on='sometimes': write one of error"):
        run_state_machine_as_test(Bad, settings=settings(max_examples=1, database=None))


class BlocksMachine(RuntimeMachine):
    """Uses live_blocks(): the device holds exactly the blocks the rules allocated."""

    @invariant()
    def the_device_holds_exactly_our_blocks(self):
        blocks = self.live_blocks()
        assert {b.ptr: b.size for b in blocks} == self.live
        assert self.live_blocks(device=0) == blocks and self.live_blocks(device=1) == []


class On950PR(BlocksMachine):
    """A non-default product and capacity: the rules see a 950PR of 32 MiB."""

    product = "950PR"
    capacity = "32MiB"

    @rule()
    def the_runtime_is_the_chosen_product(self):
        assert self.runtime.profile.name == "950PR"
        assert self.runtime.get_mem_info(acl.ACL_HBM_MEM)[1] == 32 * MiB
        # 950PR rounds size + 32 up to 64 (A2 puts a 100-byte block in 192 bytes)
        ptr = self.runtime.malloc(100)
        assert self.runtime.block(ptr).footprint == 128
        self.runtime.free(ptr)


class On310P(BlocksMachine):
    """A part without HBM: ``capacity`` sizes its DDR, and the HBM figure is answered from
    DDR (no 64 MiB HBM made up on a part that has none)."""

    product = "310P"
    capacity = 16 * MiB

    @rule()
    def the_capacity_is_the_ddr(self):
        assert self.runtime.profile.name == "310P"
        assert self.runtime.get_mem_info(acl.ACL_DDR_MEM)[1] == 16 * MiB
        assert self.runtime.get_mem_info(acl.ACL_HBM_MEM)[1] == 16 * MiB
        assert all(b.memory.value == "DDR" for b in self.live_blocks())


_QUICK = settings(max_examples=15, stateful_step_count=15, deadline=None, database=None,
                  derandomize=True, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("machine", [BlocksMachine, On950PR, On310P])
def test_the_machine_simulates_the_product_and_capacity_its_class_names(machine):
    run_state_machine_as_test(machine, settings=_QUICK)


def test_the_product_choice_is_not_ignored():
    # the same rule on the default product fails: the test above would see a machine that
    # ignored `product`
    class OnTheDefault(On950PR):
        product = AllocatorMachine.product

    with pytest.raises(AssertionError):
        run_state_machine_as_test(OnTheDefault, settings=_QUICK)


@pytest.mark.parametrize("attrs, message", [
    ({"product": "95OPR"}, r"Bad\.product='95OPR' is not a product; write one of \[.*'950PR'"),
    ({"capacity": "lots"}, r"Bad\.capacity='lots': size 'lots' is not a size"),
])
def test_a_bad_product_or_capacity_is_refused_naming_the_attribute(attrs, message):
    Bad = type("Bad", (RuntimeMachine,), attrs)
    with pytest.raises(ValueError, match=message):
        run_state_machine_as_test(Bad, settings=settings(max_examples=1, database=None))


def test_overrides_keep_their_say_over_the_capacity():
    class Big(BlocksMachine):
        overrides: ClassVar[dict] = {"hbm_bytes": 128 * MiB}

        @rule()
        def total(self):
            assert self.runtime.get_mem_info(acl.ACL_HBM_MEM)[1] == 128 * MiB

    run_state_machine_as_test(Big, settings=_QUICK)


def test_the_readmes_property_test_holds_on_a_busy_machine(monkeypatch):
    # README.md's example, run as a reader runs it (Hypothesis's default settings), with each
    # draw stretched to 0.15 s as a loaded machine stretches it: 10 draws miss Hypothesis's
    # one-second budget for its first examples, which must not fail the example
    import os
    import re
    import time

    with open(os.path.join(os.path.dirname(__file__), "..", "README.md"), encoding="utf-8") as f:
        readme = f.read()
    block = next(b for b in re.findall(r"```python\n(.*?)```", readme, re.S)
                 if "ms.programs(" in b)
    drawing = ms.programs

    def slow_programs(**kwargs):
        return drawing(**kwargs).map(lambda program: (time.sleep(0.15), program)[1])

    monkeypatch.setattr(ms, "programs", slow_programs)
    previous = settings._current_profile
    settings.load_profile("default")
    try:
        # the block calls its test once (max_examples of the default profile, 100, at 0.15 s
        # each would be 15 s: the block's own settings are kept, the count is ours)
        block = (block.replace("@settings(", "@settings(max_examples=12, ", 1)
                 if "@settings(" in block else
                 "from hypothesis import settings\n"
                 + block.replace("@given(", "@settings(max_examples=12)\n@given(", 1))
        exec(compile(block, "README.md", "exec"), {"__name__": "readme_example"})
    finally:
        settings.load_profile(previous)
