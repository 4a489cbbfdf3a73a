"""Fault injection: each kind, the spec parser, the acl.init config key, exhaustive mode."""

import json
import threading

import pytest

from ascend_memsim import (
    AclError,
    FailNth,
    FailRandomly,
    FailWhen,
    FeatureNotSupported,
    HugePagesExhausted,
    InvalidArgument,
    InvalidPointer,
    MallocPolicy,
    MiB,
    OutOfDeviceMemory,
    Page,
    Runtime,
    acl,
    exhaustive,
)
from ascend_memsim.checks.faults import inject, parse_fault, parse_faults


def state(rt):
    """What a failed call must not change."""
    device = rt.current_device()
    device.check_invariants()
    return rt.get_mem_info(1), [(b.ptr, b.footprint) for b in rt.blocks()], device.usage()


def test_fail_nth_fails_exactly_the_nth_matching_call_and_changes_nothing(a2):
    fault = FailNth(3, api="malloc").install(a2)
    a2.malloc(100)
    a2.malloc_align32(100)  # another API: not counted
    a2.malloc(100)
    before = state(a2)
    with pytest.raises(OutOfDeviceMemory, match=r"injected fault FailNth\(3.*call #3 to "
                                                r"aclrtMalloc\(size=200"):
        a2.malloc(200)
    assert state(a2) == before
    a2.malloc(100)
    assert (fault.calls, len(fault.injected), fault.injected[0].size) == (4, 1, 200)
    fault.uninstall()
    assert a2.interceptors == []


def test_fail_nth_times_none_means_memory_runs_out_from_then_on(a2):
    with FailNth(2, times=None, error="OutOfDeviceMemory").installed(a2):
        a2.malloc(64)
        for _ in range(3):
            ptr, ret = acl.rt.malloc(64, 0)
            assert (ptr, ret) == (0, acl.ACL_ERROR_RT_MEMORY_ALLOCATION)
    a2.malloc(64)


def test_error_by_code_gives_that_code_through_the_face(a2):
    with FailNth(1, error=207000):
        _ptr, ret = acl.rt.malloc(64, 0)
    assert ret == acl.ACL_ERROR_RT_FEATURE_NOT_SUPPORT
    with FailNth(1, error=FeatureNotSupported).installed(a2):
        assert acl.rt.malloc(64, 0)[1] == 207000
    with FailNth(1, error=107000).installed(a2), pytest.raises(AclError) as info:
        a2.malloc(64)
    assert int(info.value.code) == 107000 and not isinstance(info.value, InvalidPointer)


def test_fail_when_size_policy_and_device_filters(a2):
    with FailWhen(size=(2 * MiB, None)).installed(a2):
        a2.malloc(2 * MiB - 1)
        with pytest.raises(OutOfDeviceMemory):
            a2.malloc(2 * MiB)
    with FailWhen(policy=[MallocPolicy.HUGE_ONLY, MallocPolicy.HUGE_ONLY_P2P]).installed(a2):
        a2.malloc(4 * MiB, MallocPolicy.HUGE_FIRST)
        with pytest.raises(OutOfDeviceMemory):
            a2.malloc(4 * MiB, MallocPolicy.HUGE_ONLY)
    with FailWhen(size=lambda n: n % 2 == 1, api=["malloc", "aclrtMallocAlign32"]).installed(a2):
        a2.malloc_cached(33)
        with pytest.raises(OutOfDeviceMemory):
            a2.malloc_align32(33)
    with Runtime("A3", hbm_bytes=64 * MiB) as rt, FailWhen(device=1).installed(rt):
        rt.set_device(0)
        rt.malloc(64)
        rt.set_device(1)
        with pytest.raises(OutOfDeviceMemory):
            rt.malloc(64)


def test_fail_randomly_is_seeded_and_bounded(a2):
    def pattern(fault):
        outcomes = []
        with fault.installed(a2):
            for _ in range(200):
                ptr, ret = acl.rt.malloc(64, 0)
                outcomes.append(ret)
                if not ret:
                    acl.rt.free(ptr)
        return outcomes

    first = pattern(FailRandomly(0.3, seed=7))
    assert first == pattern(FailRandomly(0.3, seed=7))
    assert first != pattern(FailRandomly(0.3, seed=8))
    assert 20 < first.count(207001) < 100
    assert set(pattern(FailRandomly(0.0))) == {0}
    assert set(pattern(FailRandomly(1))) == {207001}


def test_huge_pages_exhausted_drives_the_huge_first_fallback(a2):
    huge_before = a2.get_mem_info(acl.ACL_HBM_MEM_HUGE)
    with HugePagesExhausted().installed(a2) as fault:
        block = a2.block(a2.malloc(4 * MiB, MallocPolicy.HUGE_FIRST))
        assert (block.page, block.fallback) == (Page.NORMAL, True)
        before = state(a2)
        with pytest.raises(OutOfDeviceMemory, match=r"huge pages: .*refused by fault injection"):
            a2.malloc(4 * MiB, MallocPolicy.HUGE_ONLY)
        assert state(a2) == before
        # small HUGE_FIRST requests never wanted huge pages, but the fault still saw them
        assert a2.block(a2.malloc(100)).page is Page.NORMAL
        assert fault.calls == 3
    block2 = a2.block(a2.malloc(4 * MiB, MallocPolicy.HUGE_FIRST))
    assert block2.page is Page.HUGE and not block2.fallback
    assert huge_before[1] == a2.get_mem_info(acl.ACL_HBM_MEM_HUGE)[1]


def test_huge_pages_exhausted_counts_only_requests_that_wanted_a_refused_page(a2):
    with HugePagesExhausted().installed(a2) as fault:
        a2.malloc(4 * MiB, MallocPolicy.NORMAL_ONLY)
        a2.malloc(MiB, MallocPolicy.HUGE_FIRST)  # up to 1 MiB: normal pages only
        with pytest.raises(OutOfDeviceMemory, match="no free run holds 1073741824"):
            a2.malloc(4 * MiB, MallocPolicy.HUGE1G_ONLY)  # 1 GB pages: not refused, too big
        a2.malloc(4 * MiB, MallocPolicy.HUGE_FIRST_P2P)
        with pytest.raises(OutOfDeviceMemory):
            a2.malloc(64, MallocPolicy.HUGE_ONLY)
        a2.malloc(2 * MiB, 0x7F)  # out of the enum: HUGE_FIRST from 2 MiB
        a2.malloc(2 * MiB - 1, 0x7F)
    assert fault.calls == 7
    assert [(r.size, r.policy) for r in fault.injected] == [
        (4 * MiB, MallocPolicy.HUGE_FIRST_P2P), (64, MallocPolicy.HUGE_ONLY), (2 * MiB, 0x7F)]
    with HugePagesExhausted(pages=["huge1g"]).installed(a2) as only_1g:
        a2.malloc(4 * MiB, MallocPolicy.HUGE_ONLY)
        a2.malloc(4 * MiB, MallocPolicy.HUGE_FIRST)
    assert (only_1g.calls, only_1g.injected) == (2, [])


def test_huge_pages_exhausted_given_to_the_runtime_directly_counts_the_same():
    fault = HugePagesExhausted()
    with Runtime("950PR", hbm_bytes=64 * MiB, interceptors=[fault]) as rt:
        rt.set_device(0)
        rt.malloc(100, MallocPolicy.HUGE_FIRST)
        assert rt.block(rt.malloc(4 * MiB, MallocPolicy.HUGE_FIRST)).fallback
    assert (fault.calls, [r.size for r in fault.injected]) == (2, [4 * MiB])


def test_huge1g_pages_can_be_refused_too():
    with Runtime("A2", hbm_bytes=4 << 30) as rt:
        rt.set_device(0)
        with HugePagesExhausted(pages=["huge1g"]).installed(rt):
            with pytest.raises(OutOfDeviceMemory):
                rt.malloc(1 << 30, MallocPolicy.HUGE1G_ONLY)
            assert rt.block(rt.malloc(4 * MiB, MallocPolicy.HUGE_ONLY)).page is Page.HUGE


def test_fault_counting_is_thread_safe(a2):
    fault = FailNth(50, api="malloc").install(a2)
    results = []

    def worker():
        a2.set_device(0)
        for _ in range(25):
            _ptr, ret = acl.rt.malloc(64, 0)
            results.append(ret)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert fault.calls == 100 and results.count(207001) == 1


def test_inject_takes_objects_and_specs_and_uninstalls(a2):
    with inject(FailNth(1, api="malloc_align32"), {"huge_pages_exhausted": True}) as faults:
        assert a2.interceptors == faults
        with pytest.raises(OutOfDeviceMemory):
            a2.malloc_align32(1)
    assert a2.interceptors == []


def test_fresh_copy_has_new_counters_and_the_same_seed(a2):
    fault = FailRandomly(0.5, seed=3, api="malloc")
    with fault.installed(a2):
        for _ in range(10):
            try:
                a2.malloc(64)
            except OutOfDeviceMemory:
                pass
    twin = fault.fresh()
    assert (twin.calls, twin.injected, twin.probability, twin.seed) == (0, [], 0.5, 3)
    assert twin.api == fault.api
    assert twin._random.random() == FailRandomly(0.5, seed=3)._random.random()
    with pytest.raises(InvalidArgument, match="already installed"):
        FailNth(1).install(a2).install(a2)


@pytest.mark.parametrize("spec, kind", [
    ({"nth": 2, "api": "malloc", "times": 3}, FailNth),
    ({"probability": 0.5, "seed": 1}, FailRandomly),
    ({"huge_pages_exhausted": True, "pages": ["huge", "huge1g"]}, HugePagesExhausted),
    ({"size": {"min": 1024}, "policy": 1, "error": "FeatureNotSupported"}, FailWhen),
])
def test_specs_make_each_kind(spec, kind):
    assert type(parse_fault(spec)) is kind


@pytest.mark.parametrize("spec, says", [
    ({"nth": 0}, "counted from 1; write 1"),
    ({"nth": -3, "api": "malloc"}, "counted from 1"),
    ({"nth": 1, "times": 0}, "times=0: write a count >= 1"),
    ({"probability": 1.5}, r"outside \[0, 1\]; write e.g. probability=0.1"),
    ({"probability": -0.1}, r"outside \[0, 1\]"),
    ({"nth": 1, "api": "memcpy"}, "unknown allocation API 'memcpy'; known: .*'malloc_align32'"),
    ({"nht": 1}, "unknown fault spec key.*'nht' \\(did you mean 'nth'\\?\\)"),
    ({"nth": 1, "probability": 0.5}, "one kind"),
    ({"nth": 1, "seed": 3}, "'seed' only goes with 'probability'"),
    ({"nth": 1, "error": "Boom"}, "write one of .*OutOfDeviceMemory \\(207001\\)"),
    ({}, "empty fault spec would fail every call"),
    ({"size": "big"}, "size 'big' is not a size"),
    ({"policy": "HUGE_ONLY"}, "not a policy filter"),
    ({"huge_pages_exhausted": True, "pages": ["normal"]}, "refusing normal pages is FailWhen"),
    ({"huge_pages_exhausted": "yes"}, "write \"huge_pages_exhausted\": true"),
    ({"size": {}}, "no bound, so it matches every call; give 'min' and/or 'max'"),
    ({"size": [None, None]}, "no bound"),
    ({"size": {"min": 5, "max": 1}}, "min 5 > max 1, so it never fires; write min <= max"),
    ({"size": -5}, r"size=-5 is not an allocation size; write a size from 1 to \d+"),
    ({"size": 2**70}, "not an allocation size"),
    ({"size": {"min": -1}}, r"size min=-1 is not an allocation size; write a bound from 1"),
    ({"size": [1, 2**64]}, "size max=18446744073709551616 is not an allocation size"),
    ({"size": {"min": 1.5}}, "not a size filter; write an int"),
    ({"size": {"min": True}}, "not a size filter"),
    ({"policy": -1}, r"-1 is not a policy word \(0 to 0xFFFFFFFF"),
    ({"policy": [1, 2**32]}, "4294967296 is not a policy word"),
    ({"policy": []}, "not a policy filter"),
    ({"policy": [1, "HUGE_ONLY"]}, "not a policy filter"),
    ({"nth": "2"}, "n='2' is a str, not an int: calls are counted from 1"),
    ({"nth": True}, "n=True is a bool, not an int"),
    ({"nth": 1, "times": 1.0}, "times=1.0 is a float, not an int: write a count >= 1"),
    ({"probability": 0.5, "seed": "7"}, "seed='7' is a str, not an int: write an int seed"),
    ({"nth": 1, "device": -1}, "device=-1: write a device id >= 0"),
])
def test_impossible_specs_fail_at_configuration_saying_what_to_write(spec, says):
    with pytest.raises(InvalidArgument, match=says):
        parse_faults([spec])


@pytest.mark.parametrize("size, hits, misses", [
    (range(-10, 3), [1, 2], [3]),
    (range(100, 0, -7), [100, 2], [1, 101]),
    ({"max": 2**64 - 1}, [1, 2**40], []),
    ((64, 64), [64], [63, 65]),
])
def test_size_filters_that_can_fire_are_accepted(size, hits, misses):
    fault = FailWhen(size=size)
    assert [fault._size(n) for n in hits + misses] == [True] * len(hits) + [False] * len(misses)


@pytest.mark.parametrize("size", [range(5, 1), range(-10, 1), range(0, 2**70, 2**65),
                                  range(2**64, 2**65)])
def test_size_ranges_that_hold_no_allocation_size_are_refused(size):
    with pytest.raises(InvalidArgument, match=r"holds no allocation size .*never fire"):
        FailWhen(size=size)


def test_numpy_integers_are_accepted_wherever_an_int_is():
    np = pytest.importorskip("numpy", reason="numpy integers are what the check is about")
    fault = FailNth(np.int64(2), times=np.int32(2), size=np.int64(100), device=np.int64(0),
                    policy=np.uint32(MallocPolicy.HUGE_ONLY))
    assert (fault.n, fault.times, fault.device) == (2, 2, 0)
    assert type(fault.n) is int and repr(fault).startswith("FailNth(2, times=2")
    assert FailWhen(size={"min": np.uint64(1), "max": np.int64(5)})._size(5)
    seeded = FailRandomly(np.float64(0.5), seed=np.int64(3))
    assert seeded.seed == 3
    assert seeded._random.random() == FailRandomly(0.5, seed=3)._random.random()
    assert type(parse_fault({"nth": np.int16(1), "policy": [np.uint32(0)]})) is FailNth


def test_bad_spec_position_is_named():
    with pytest.raises(InvalidArgument, match=r"faults\[1\]: probability=2"):
        parse_faults([{"nth": 1}, {"probability": 2}])
    with pytest.raises(TypeError, match="list of fault specs"):
        parse_faults("nth=1")


def test_acl_init_config_installs_faults(tmp_path):
    config = tmp_path / "acl.json"
    config.write_text(json.dumps({"memsim": {"hbm_bytes": 64 * MiB, "faults": [
        {"nth": 2, "api": "malloc"}, {"huge_pages_exhausted": True}]}}))
    assert acl.init(str(config)) == 0
    try:
        assert acl.rt.set_device(0) == 0
        first, ret = acl.rt.malloc(4 * MiB, acl.ACL_MEM_MALLOC_HUGE_FIRST)
        assert ret == 0
        assert acl.rt.malloc(64, 0) == (0, acl.ACL_ERROR_RT_MEMORY_ALLOCATION)
        assert "injected fault FailNth(2" in acl.get_recent_err_msg()
        huge, ret = acl.rt.malloc(4 * MiB, acl.ACL_MEM_MALLOC_HUGE_ONLY)
        assert (huge, ret) == (0, acl.ACL_ERROR_RT_MEMORY_ALLOCATION)
        assert acl.rt.free(first) == 0
    finally:
        acl.finalize()


def test_acl_init_refuses_an_impossible_fault(tmp_path):
    config = tmp_path / "acl.json"
    config.write_text(json.dumps({"memsim": {"faults": [{"probability": 3}]}}))
    assert acl.init(str(config)) == acl.ACL_ERROR_INVALID_PARAM
    assert "faults[0]: probability=3 is outside [0, 1]" in acl.get_recent_err_msg()
    assert acl.finalize() == acl.ACL_ERROR_REPEAT_FINALIZE


# -- exhaustive mode ---------------------------------------------------------------------------

class Fails(Exception):
    """The code under test's own way of reporting an allocation failure."""


def careful(rt):
    a = rt.malloc(1000)
    try:
        b = rt.malloc(2000)
    except OutOfDeviceMemory:
        rt.free(a)
        raise Fails("no memory") from None
    rt.free(b)
    rt.free(a)


def careless(rt):
    a = rt.malloc(1000)
    b = rt.malloc(2000)  # if this fails, `a` leaks
    rt.free(b)
    rt.free(a)


def test_exhaustive_reports_every_site_handled_for_careful_code():
    report = exhaustive(careful, expected=(Fails, OutOfDeviceMemory), hbm_bytes=64 * MiB)
    assert [o.outcome for o in report.outcomes] == ["handled", "handled"]
    # the first failure propagates OutOfDeviceMemory: a crash unless that is expected too
    assert [o.outcome for o in exhaustive(careful, expected=Fails).outcomes] == [
        "crashed", "handled"]
    assert report.ok and "0 crashed or leaked" in str(report)
    report.raise_if_failed()


def test_exhaustive_finds_the_leak_and_names_both_sites():
    report = exhaustive(careless, hbm_bytes=64 * MiB)
    assert [o.outcome for o in report.outcomes] == ["handled", "leaked"]
    leak = report.failures[0]
    assert leak.request.size == 2000 and [b.size for b in leak.leaked] == [1000]
    text = str(report)
    assert "leaked: aclrtMalloc(size=2000" in text
    assert "in careless" in text and "leaked 1000-byte block" in text
    with pytest.raises(AssertionError, match="1 crashed or leaked"):
        report.raise_if_failed()


def test_exhaustive_finds_a_crash_on_the_error_path():
    def code(rt):
        ptr, ret = acl.rt.malloc(1000, 0)
        if ret != 0:
            # forgot to return: frees NULL, which the runtime refuses
            pass
        if acl.rt.free(ptr) != 0:
            raise RuntimeError(f"aclrtFree failed: {acl.get_recent_err_msg()}")

    report = exhaustive(code, product="950PR", hbm_bytes=64 * MiB)
    (only,) = report.outcomes
    assert only.outcome == "crashed" and isinstance(only.exception, RuntimeError)
    assert "ptr is NULL" in str(only.exception)


def test_exhaustive_distinguishes_sites_by_stack_and_skips_unreached_ones():
    calls = {"n": 0}

    def helper(rt):
        return rt.malloc(64)

    def code(rt):
        calls["n"] += 1
        ptrs = []
        try:
            for _ in range(3):
                ptrs.append(helper(rt))  # one site, three calls
            ptrs.append(rt.malloc(64))  # a second site
            if calls["n"] == 1:
                ptrs.append(rt.malloc(128))  # only in the fault-free run
        finally:
            for p in ptrs:
                rt.free(p)

    report = exhaustive(code, by="site", hbm_bytes=64 * MiB)
    assert [o.outcome for o in report.outcomes] == ["handled", "handled", "not reached"]
    assert report.ok
    # by call (the default): each of the loop's three calls fails in a run of its own
    calls["n"] = 0
    report = exhaustive(code, hbm_bytes=64 * MiB)
    assert [(o.occurrence, o.outcome) for o in report.outcomes] == [
        (1, "handled"), (2, "handled"), (3, "handled"), (1, "handled"), (1, "not reached")]


def test_exhaustive_fails_the_third_call_of_a_loop_where_the_bug_is():
    def code(rt):
        ptrs = []
        try:
            for _ in range(3):
                ptrs.append(rt.malloc(64))  # one line, three calls
        except OutOfDeviceMemory:
            if ptrs:
                rt.free(ptrs[0])  # forgets the rest: leaks only when the third call fails
            raise
        for p in ptrs:
            rt.free(p)

    assert exhaustive(code, by="site", hbm_bytes=64 * MiB).ok  # the old view: one site
    report = exhaustive(code, hbm_bytes=64 * MiB)
    assert [o.outcome for o in report.outcomes] == ["handled", "handled", "leaked"]
    (leak,) = report.failures
    assert leak.occurrence == 3 and [b.size for b in leak.leaked] == [64]
    assert "(call #3 from the site) failing at" in str(report)
    assert str(report).startswith("3 allocation call(s) failed one at a time: 1 crashed")
    with pytest.raises(ValueError, match="by='line': write 'call'"):
        exhaustive(code, by="line", hbm_bytes=64 * MiB)


@pytest.mark.parametrize("expected", [5, "OutOfDeviceMemory", (Fails, 5), int, None])
def test_exhaustive_refuses_a_bad_expected_before_running_anything(expected):
    ran = []
    with pytest.raises(TypeError, match=r"expected=.* is not an exception class or a tuple of "
                                        r"them; write e\.g\. expected=\(MyError, "
                                        r"OutOfDeviceMemory\)"):
        exhaustive(ran.append, expected=expected, hbm_bytes=64 * MiB)
    assert ran == []


def test_exhaustive_takes_a_list_of_expected_classes():
    report = exhaustive(careful, expected=[Fails, OutOfDeviceMemory], hbm_bytes=64 * MiB)
    assert report.ok


def test_exhaustive_needs_a_clean_fault_free_run():
    with pytest.raises(AssertionError, match="without faults the callable leaves 1 block"):
        exhaustive(lambda rt: rt.malloc(64), hbm_bytes=64 * MiB)


def test_a_faults_repr_and_message_show_its_filters_as_written():
    def big(n):
        return n > 1000

    assert repr(FailWhen(size=(2 * MiB, None), policy=[1, 2])) == (
        "FailWhen(size=(2097152, None), policy=[HUGE_ONLY, NORMAL_ONLY])")
    assert repr(FailNth(2, size="2MiB", policy=0x63)) == "FailNth(2, size='2MiB', policy=0x63)"
    assert repr(FailWhen(size=big)) == "FailWhen(size=big)"
    assert repr(FailWhen(size=lambda n: n > 1)) == "FailWhen(size=<lambda>)"
    with Runtime("A2", hbm_bytes=64 * MiB) as rt, FailWhen(size={"min": 2000}).installed(rt):
        rt.set_device(0)
        with pytest.raises(OutOfDeviceMemory, match=r"injected fault FailWhen\(size=\{'min': "
                                                    r"2000\}\) failed call #1"):
            rt.malloc(4096)
