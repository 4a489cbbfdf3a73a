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
from ascend_memsim.faults import inject, parse_fault, parse_faults


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
        ptr, ret = acl.rt.malloc(64, 0)
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
        with pytest.raises(OutOfDeviceMemory, match="huge pages: .*refused by fault injection"):
            a2.malloc(4 * MiB, MallocPolicy.HUGE_ONLY)
        assert state(a2) == before
        # small HUGE_FIRST requests never wanted huge pages, but the fault still saw them
        assert a2.block(a2.malloc(100)).page is Page.NORMAL
        assert fault.calls == 3
    block2 = a2.block(a2.malloc(4 * MiB, MallocPolicy.HUGE_FIRST))
    assert block2.page is Page.HUGE and not block2.fallback
    assert huge_before[1] == a2.get_mem_info(acl.ACL_HBM_MEM_HUGE)[1]


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
            ptr, ret = acl.rt.malloc(64, 0)
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
    ({"size": "big"}, "not a size filter; write an int"),
    ({"policy": "HUGE_ONLY"}, "not a policy filter"),
    ({"huge_pages_exhausted": True, "pages": ["normal"]}, "refusing normal pages is FailWhen"),
    ({"huge_pages_exhausted": "yes"}, "write \"huge_pages_exhausted\": true"),
])
def test_impossible_specs_fail_at_configuration_saying_what_to_write(spec, says):
    with pytest.raises(InvalidArgument, match=says):
        parse_faults([spec])


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

    report = exhaustive(code, hbm_bytes=64 * MiB)
    assert [o.outcome for o in report.outcomes] == ["handled", "handled", "not reached"]
    assert report.ok


def test_exhaustive_needs_a_clean_fault_free_run():
    with pytest.raises(AssertionError, match="without faults the callable leaves 1 block"):
        exhaustive(lambda rt: rt.malloc(64), hbm_bytes=64 * MiB)
