"""The pytest plugin, run in-process by pytester: fixture, leak check, marker, options, xdist."""

import sys
from importlib.metadata import entry_points

import pytest

# The plugin imports the fixtures' machinery (and through it the simulator) when a test first
# asks for a fixture. pytester's in-process runs put sys.modules back as they found it, so a
# module first imported inside one inner run would be imported afresh by the next, beside the
# copies other modules still hold: the machinery is imported here, before any inner run, as
# a real session keeps it from the first fixture to its end.
import ascend_memsim.acl
import ascend_memsim.testing._memsim
import ascend_memsim.testing.npu_allocator  # noqa: F401

# Inner runs load the plugin through its entry point when the package is installed, else by name.
_INSTALLED = any(ep.value == "ascend_memsim.testing.plugin"
                 for ep in entry_points(group="pytest11"))
PLUGIN = () if _INSTALLED else ("-p", "ascend_memsim.testing.plugin")


def _has_xdist() -> bool:
    try:
        import xdist  # noqa: F401
    except ImportError:
        return False
    return True


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest(*PLUGIN, "-p", "no:cacheprovider", *args)


def test_leaking_test_fails_with_each_block_and_its_site(pytester):
    pytester.makepyfile(test_leaky="""
        def helper(rt):
            return rt.malloc(100)

        def test_leak(memsim):
            helper(memsim)
            keep = memsim.malloc_align32(4096)
            other = memsim.malloc(64)
            memsim.free(other)
        """)
    result = run(pytester)
    result.assert_outcomes(failed=1)            # the test's own failure, not a teardown error
    result.stdout.fnmatch_lines([
        "*memsim: test_leaky.py::test_leak leaked 2 device block(s)*",
        "*100-byte block at 0x*(aclrtMalloc, normal pages, HBM, footprint 192)*",
        "*test_leaky.py:5 in test_leak",
        "*test_leaky.py:2 in helper",
        "*4096-byte block at 0x*(aclrtMallocAlign32*",
        "*test_leaky.py:6 in test_leak",
    ])
    # Each block once in the report (newer pytest repeats the message in its short summary).
    report = result.stdout.str().split("short test summary info")[0]
    assert report.count("-byte block at") == 2 and "_pytest" not in report


def test_clean_test_passes_and_leak_check_can_be_turned_off(pytester):
    pytester.makepyfile("""
        import pytest
        from ascend_memsim import acl

        def test_clean(memsim):
            ptr, ret = acl.rt.malloc(1 << 20, 0)
            assert ret == 0 and memsim.block(ptr).size == 1 << 20
            assert acl.rt.free(ptr) == 0

        @pytest.mark.memsim(leak_check=False)
        def test_keeps_memory_on_purpose(memsim):
            memsim.malloc(100)

        def test_fresh_runtime_each_time(memsim):
            assert memsim.blocks() == []
            assert memsim.get_device() == 0
        """)
    run(pytester).assert_outcomes(passed=3)


def test_a_finished_tests_runtime_is_not_kept(pytester):
    # pytest keeps every item to the session's end: a runtime the item held would stay, its
    # devices and records with it, and each collection of the heap would walk them all
    pytester.makepyfile("""
        import gc, weakref
        import pytest

        held = []

        @pytest.mark.memsim(faults=[{"api": "aclrtMalloc", "nth": 99}])
        def test_one(memsim, memsim_faults):
            held.append(weakref.ref(memsim))

        def test_two():
            gc.collect()
            assert held and held[0]() is None
        """)
    run(pytester, "-p", "no:randomly").assert_outcomes(passed=2)


def test_blocks_discarded_by_reset_device_are_leaks(pytester):
    pytester.makepyfile(test_reset="""
        import pytest
        from ascend_memsim import acl

        def test_leak_reset(memsim):
            ptr, ret = acl.rt.malloc(100, 0)
            acl.rt.reset_device(0)  # drops the fixture's reference: the block is discarded
            acl.rt.set_device(0)
            kept, ret = acl.rt.malloc(64, 0)

        @pytest.mark.memsim(leak_check=False)
        def test_leak_check_off(memsim):
            acl.rt.malloc(100, 0)
            acl.rt.reset_device(0)

        def test_reset_after_free_is_clean(memsim):
            ptr, ret = acl.rt.malloc(100, 0)
            acl.rt.free(ptr)
            acl.rt.reset_device(0)
        """)
    result = run(pytester)
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines([
        "*memsim: test_reset.py::test_leak_reset leaked 2 device block(s)*",
        "*100-byte block at 0x*(discarded while live, by reset_device or finalize)",
        "*test_reset.py:5 in test_leak_reset",
        "*64-byte block at 0x*",
        "*test_reset.py:8 in test_leak_reset",
    ])


def test_sanitizer_keyword_sets_the_mode_and_leaks_are_listed_once(pytester):
    pytester.makepyfile(test_san="""
        import pytest
        from ascend_memsim import acl
        from ascend_memsim.memory.constants import ErrorCode, MallocFlag

        @pytest.mark.memsim(sanitizer="strict")
        def test_strict_refuses_a_readonly_write(memsim):
            assert memsim.sanitizer.mode == "strict"
            ptr = memsim.malloc_with_cfg(64, MallocFlag.USER_SPACE_READONLY)
            assert acl.rt.memset(ptr, 64, 1, 64) == ErrorCode.RT_PARAM_INVALID
            assert acl.rt.free(ptr) == 0
            leaked, ret = acl.rt.malloc(64, 0)

        @pytest.mark.memsim(sanitizer={"mode": "strict", "quarantine_bytes": 1 << 20})
        def test_dict_keeps_its_options(memsim):
            assert (memsim.sanitizer.mode, memsim.sanitizer.quarantine_bytes) == (
                "strict", 1 << 20)
            assert not memsim.sanitizer.leak_check

        @pytest.mark.memsim(sanitizer="off")
        def test_off(memsim):
            assert memsim.sanitizer.mode == "off"

        @pytest.mark.memsim(sanitizer="paranoid")
        def test_unknown_mode(memsim):
            pass
        """)
    result = run(pytester)
    result.assert_outcomes(passed=2, failed=1, errors=1)
    out = result.stdout.str()
    result.stdout.fnmatch_lines_random([
        "*memsim: test_san.py::test_strict_refuses_a_readonly_write leaked 1 device block(s)*",
        "*ERROR: Invalid write of 64 bytes at 0x* [[]readonly-write[]]",
        "*memsim settings of test_san.py::test_unknown_mode: sanitizer mode 'paranoid' is not "
        "one of*",
    ])
    # the fixture lists the leak; the sanitizer does not report it a second time
    assert "[leak]" not in out and "Leaked 64 bytes" not in out


def test_failing_test_is_not_also_reported_as_leaking(pytester):
    pytester.makepyfile("""
        def test_fails_midway(memsim):
            memsim.malloc(100)
            assert False, "the test's own failure"
        """)
    result = run(pytester)
    result.assert_outcomes(failed=1)
    assert "leaked" not in result.stdout.str()


def test_marker_sets_product_and_overrides_and_requests_the_fixture(pytester):
    pytester.makepyfile("""
        import pytest
        from ascend_memsim import current_runtime

        pytestmark = pytest.mark.memsim(product="950PR")

        def test_module_marker(memsim):
            assert memsim.profile.name == "950PR"
            # 950PR rounds to 32 bytes only: 100 -> 128 (A2 would give 160).
            assert memsim.block(memsim.malloc_align32(100)).rule_size == 128
            assert memsim.block(memsim.malloc(100)).rule_size == 128
            for block in memsim.blocks():
                memsim.free(block.ptr)

        @pytest.mark.memsim("A2", hbm_bytes=64 * 2**20, device_count=2)
        def test_closer_marker_wins(memsim):
            assert memsim.profile.name == "A2"
            assert memsim.get_mem_info(1) == (64 * 2**20, 64 * 2**20)
            assert memsim.device_count == 2

        @pytest.mark.memsim(device=None)
        def test_marker_alone_gives_a_runtime():
            rt = current_runtime()
            assert rt.profile.name == "950PR" and rt.devices() == []
        """)
    run(pytester).assert_outcomes(passed=3)


def test_product_option_ini_and_indirect_parameter(pytester):
    pytester.makepyfile("""
        import pytest

        def test_option(memsim):
            assert memsim.profile.name == "310P"

        @pytest.mark.parametrize("memsim", ["950DT", {"product": "A3", "hbm_bytes": 2**26}],
                                 indirect=True)
        def test_param(memsim):
            assert memsim.profile.name in ("950DT", "A3")
            if memsim.profile.name == "A3":
                assert memsim.profile.hbm_bytes == 2**26
        """)
    run(pytester, "--memsim-product", "310P").assert_outcomes(passed=3)
    pytester.makeini("[pytest]\nmemsim_product = 310P\n")
    run(pytester).assert_outcomes(passed=3)


def test_unknown_product_option_is_a_usage_error(pytester):
    pytester.makepyfile("def test_x(memsim): pass")
    result = run(pytester, "--memsim-product", "910Z")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*'910Z' is not a product; write one of *'A2'*"])


def test_bad_marker_arguments_fail_at_setup_saying_what_to_write(pytester):
    pytester.makepyfile("""
        import pytest

        @pytest.mark.memsim(prodcut="A2")
        def test_typo(memsim): pass

        @pytest.mark.memsim(product="910Z")
        def test_unknown_product(memsim): pass

        @pytest.mark.memsim(leak_check="no")
        def test_bad_flag(memsim): pass

        @pytest.mark.memsim(faults=[{"nth": 0, "api": "malloc"}])
        def test_impossible_fault(memsim): pass

        @pytest.mark.memsim(faults=[{"nth": 1, "api": "mallok"}])
        def test_unknown_api(memsim): pass

        @pytest.mark.parametrize("memsim", [3], indirect=True)
        def test_bad_param(memsim): pass
        """)
    result = run(pytester)
    result.assert_outcomes(errors=6)
    result.stdout.fnmatch_lines_random([
        "*unknown keyword 'prodcut' (did you mean 'product'?)*",
        "*unknown product '910Z'; known: *",
        "*leak_check='no': write True or False*",
        "*faults[[]0[]]: n=0: calls are counted from 1; write 1 *(\"nth\" in a spec)*",
        "*unknown allocation API 'mallok'; known: *'malloc'*",
        "*neither a product name nor a dict*",
    ])


def test_bad_settings_are_one_message_without_a_traceback_or_a_chain(pytester):
    pytester.makepyfile("""
        import pytest

        @pytest.mark.memsim(hbm_bytz=3)
        def test_typo(memsim): pass

        @pytest.mark.memsim(ops={"X": 3})
        def test_bad_kernel(memsim): pass

        @pytest.mark.memsim(device=99)
        def test_bad_device(memsim): pass
        """)
    result = run(pytester)
    result.assert_outcomes(errors=3)
    result.stdout.fnmatch_lines_random([
        "*unknown keyword 'hbm_bytz' (did you mean 'hbm_bytes'?)*",
        "memsim settings of *test_bad_kernel: the kernel for 'X' must be callable, got int*",
        "memsim settings of *test_bad_device: device id 99 is outside*",
    ])
    text = result.stdout.str()
    assert "During handling of the above exception" not in text
    assert "Traceback" not in text and "plugin.py" not in text


def test_marker_faults_fail_the_nth_call_with_the_real_code(pytester):
    pytester.makepyfile("""
        import pytest
        from ascend_memsim import acl

        @pytest.mark.memsim(faults=[{"nth": 2, "api": "malloc"},
                                    {"huge_pages_exhausted": True}])
        def test_second_malloc_fails(memsim, memsim_faults):
            a, ret = acl.rt.malloc(100, acl.ACL_MEM_MALLOC_HUGE_FIRST)
            assert ret == 0
            b, ret = acl.rt.malloc(100, acl.ACL_MEM_MALLOC_HUGE_FIRST)
            assert (b, ret) == (0, acl.ACL_ERROR_RT_MEMORY_ALLOCATION)
            # huge pages refused: a 4 MiB HUGE_FIRST request falls back to normal pages
            c, ret = acl.rt.malloc(4 << 20, acl.ACL_MEM_MALLOC_HUGE_FIRST)
            assert ret == 0 and memsim.block(c).fallback
            # the second call failed before the huge-page fault saw it
            assert [f.calls for f in memsim_faults] == [3, 2]
            acl.rt.free(a)
            acl.rt.free(c)
        """)
    run(pytester).assert_outcomes(passed=1)


def test_memsim_acl_option_makes_import_acl_the_simulator(pytester):
    pytester.makepyfile(mycode="""
        import acl  # written for Ascend hardware

        def roundtrip(size):
            ptr, ret = acl.rt.malloc(size, 0)
            assert ret == 0
            return acl.rt.free(ptr)
        """)
    pytester.makepyfile(test_code="""
        import mycode

        def test_runs_unchanged(memsim):
            assert mycode.roundtrip(1000) == 0
        """)
    pytester.syspathinsert()
    run(pytester, "--memsim-acl").assert_outcomes(passed=1)
    pytester.makeini("[pytest]\nmemsim_acl = true\n")
    run(pytester).assert_outcomes(passed=1)


def test_without_memsim_acl_import_acl_says_what_to_add(pytester):
    pytester.makepyfile(mycode="""
        import acl  # written for Ascend hardware
        """)
    pytester.makepyfile(test_code="""
        import mycode

        def test_runs_unchanged(memsim):
            pass
        """)
    pytester.syspathinsert()
    result = run(pytester)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([
        "mycode.py:1: in <module>",
        "E   ModuleNotFoundError: No module named 'acl': pyacl * is not installed here."
        "*--memsim-acl*memsim_acl = true*install_acl()*"])
    assert "find_spec" not in result.stdout.str()     # the hint's own frame is hidden


def test_the_acl_hint_keeps_what_code_relies_on(pytester):
    # It is still a ModuleNotFoundError named 'acl' (code that catches ImportError behaves),
    # find_spec still answers None, importorskip skips, and other modules fail as before.
    pytester.makepyfile(test_probe="""
        import importlib.util
        import sys

        import pytest

        def test_caught_as_import_error():
            try:
                import acl  # noqa: F401
            except ImportError as e:
                assert type(e) is ModuleNotFoundError and e.name == "acl"
                assert "--memsim-acl" in str(e)
            else:
                raise AssertionError("import acl succeeded")
            assert "acl" not in sys.modules

        def test_find_spec_answers_none():
            assert importlib.util.find_spec("acl") is None

        def test_other_modules_fail_as_before():
            with pytest.raises(ModuleNotFoundError) as e:
                import acl_nothing  # noqa: F401
            assert str(e.value) == "No module named 'acl_nothing'"

        def test_importorskip_skips_with_the_hint():
            pytest.importorskip("acl")
        """)
    before = list(sys.meta_path)
    result = run(pytester, "-rs")
    result.assert_outcomes(passed=3, skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED*No module named 'acl': *--memsim-acl*"])
    assert sys.meta_path == before          # the run took its finder away


def test_a_real_acl_still_wins_over_the_hint(pytester):
    pytester.makepyfile(acl="""
        WHO = "pyacl"
        """)
    pytester.makepyfile(test_real="""
        def test_real_acl():
            import acl
            assert acl.WHO == "pyacl"
        """)
    pytester.syspathinsert()
    run(pytester).assert_outcomes(passed=1)


def test_xdist_workers_share_no_state(pytester):
    pytest.importorskip("xdist", reason="pytest-xdist (the test extra) runs -n 2")
    pytester.makepyfile("""
        import pytest

        @pytest.mark.parametrize("i", range(8))
        def test_each_gets_a_fresh_device(memsim, i):
            # Addresses are deterministic: a fresh runtime always hands out the same first one.
            first = memsim.malloc(100)
            assert first == memsim.device(0).allocators[memsim.profile.main_memory].base
            if i == 5:
                return  # leaks: only this test may report it
            memsim.free(first)
        """)
    result = run(pytester, "-n", "2")
    result.assert_outcomes(passed=7, failed=1)
    result.stdout.fnmatch_lines(["*test_each_gets_a_fresh_device?5? leaked 1 device block*"])


def test_sanitizer_errors_fail_the_test_warnings_do_not_and_fail_on_chooses(pytester):
    pytester.makepyfile(test_findings="""
        import pytest
        from ascend_memsim import acl

        def test_double_free(memsim):           # report mode: the runtime's code, and a failure
            ptr, ret = acl.rt.malloc(100, 0)
            assert acl.rt.free(ptr) == 0
            assert acl.rt.free(ptr) == acl.ACL_ERROR_RT_PARAM_INVALID

        def test_padding_access_is_a_warning(memsim):
            ptr, ret = acl.rt.malloc(100, 0)
            acl.rt.memset(ptr, 128, 0, 120)     # past 100 bytes, inside the footprint
            acl.rt.free(ptr)

        @pytest.mark.memsim(fail_on="warning")
        def test_warnings_fail_when_asked(memsim):
            ptr, ret = acl.rt.malloc(100, 0)
            acl.rt.memset(ptr, 128, 0, 120)
            acl.rt.free(ptr)

        @pytest.mark.memsim(fail_on="never")
        def test_on_purpose(memsim):
            ptr, ret = acl.rt.malloc(100, 0)
            acl.rt.free(ptr)
            acl.rt.free(ptr)
        """)
    result = run(pytester)
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines_random([
        "FAILED test_findings.py::test_double_free*",
        "FAILED test_findings.py::test_warnings_fail_when_asked*",
        "*test_findings.py::test_double_free: 1 sanitizer finding(s) (double-free)*",
    ])
    # the ini option sets the default for every test
    pytester.makeini("[pytest]\nmemsim_fail_on = never\n")
    run(pytester).assert_outcomes(passed=3, failed=1)


def test_max_peak_fails_a_test_over_budget_and_names_the_sites(pytester):
    pytester.makepyfile(test_budget="""
        import pytest

        def grow(rt, n):
            blocks = []
            for _ in range(n):
                blocks.append(rt.malloc(8 << 20))
            return blocks

        @pytest.mark.memsim(max_peak="48MiB", hbm_bytes="256MiB")
        def test_over(memsim):
            blocks = grow(memsim, 6)            # 6 x (8 MiB + 32 B) = 6 x 10 MiB of pages
            small = memsim.malloc(100)
            for b in blocks + [small]:
                memsim.free(b)

        @pytest.mark.memsim(max_peak="1.5GiB")
        def test_under(memsim):
            memsim.free(memsim.malloc(64 << 20))
        """)
    result = run(pytester)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        "*test_budget.py::test_over: device 0 peaked at 60 MiB + 192 B*over the max_peak "
        "budget of 48 MiB*",
        "*60 MiB in 6 blocks: *test_budget.py:6 in grow",
        "*192 B in 1 block: *test_budget.py:12 in test_over",
    ])


def test_sizes_as_strings_and_bad_budgets(pytester):
    pytester.makepyfile(test_sizes="""
        import pytest

        @pytest.mark.memsim(hbm_bytes="64MiB")
        def test_capacity(memsim):
            assert memsim.profile.hbm_bytes == 64 << 20

        @pytest.mark.memsim(max_peak="lots")
        def test_bad(memsim):
            pass
        """)
    result = run(pytester)
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*memsim max_peak='lots': size 'lots' is not a size*"])


def test_verbose_run_ends_with_the_highest_peaks_and_ini_budget(pytester):
    pytester.makepyfile(test_peaks="""
        def test_small(memsim):
            memsim.free(memsim.malloc(100))

        def test_big(memsim):
            memsim.free(memsim.malloc(3 << 20))
        """)
    result = run(pytester, "-v")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*memsim: highest device peaks*",
                                 "*4 MiB  test_peaks.py::test_big",
                                 "*192 B  test_peaks.py::test_small"])
    assert "highest device peaks" not in run(pytester).stdout.str()
    if _has_xdist():        # the peaks travel from the workers with the reports
        run(pytester, "-v", "-n", "2").stdout.fnmatch_lines([
            "*memsim: highest device peaks*", "*4 MiB  test_peaks.py::test_big"])
    pytester.makeini("[pytest]\nmemsim_max_peak = 1MiB\n")
    run(pytester).assert_outcomes(passed=1, failed=1)


def test_a_fixture_leak_stays_a_teardown_error_and_the_body_is_not_blamed(pytester):
    pytester.makepyfile(test_fixture="""
        import pytest

        @pytest.fixture
        def buffer(memsim):
            return memsim.malloc(100)           # never freed: the fixture's leak

        def test_uses_it(memsim, buffer):
            memsim.free(memsim.malloc(64))
        """)
    result = run(pytester)
    result.assert_outcomes(passed=1, errors=1)


def test_the_readme_first_screen_shows_the_plugin_and_its_example_passes(pytester):
    # the README's first path (unit tests) reaches its example within the first screen
    import os
    import re

    readme = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          "README.md")
    with open(readme, encoding="utf-8") as f:
        text = f.read()
    first_screen = "\n".join(text.splitlines()[:45])
    assert "--memsim-acl" in first_screen and "def test_roundtrip(memsim)" in first_screen
    example = re.search(r"```python[^\n]*\n(def test_roundtrip\(memsim\).*?)```", text,
                        re.S).group(1)
    pytester.makepyfile(test_first=example)
    run(pytester, "--memsim-acl").assert_outcomes(passed=1)
    result = run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*No module named 'acl': *--memsim-acl*"])


def test_a_run_that_uses_no_fixture_does_not_import_the_simulator(pytester):
    # installing the package enables the plugin in every pytest run of the environment: one
    # that asks for none of it imports none of the simulator (benchmarks/bench_plugin.py
    # measures the time); the first memsim test imports it
    pytester.makeconftest("""
        import sys

        def pytest_sessionfinish(session):
            loaded = sorted(m for m in sys.modules if m.startswith("ascend_memsim."))
            with open("loaded.txt", "w") as f:
                f.write("\\n".join(loaded))
        """)
    pytester.makepyfile(test_plain="def test_nothing():\n    assert 1 + 1 == 2\n")
    pytester.runpytest_subprocess(*PLUGIN, "-p", "no:cacheprovider").assert_outcomes(passed=1)
    loaded = (pytester.path / "loaded.txt").read_text().split()
    assert "ascend_memsim.testing.plugin" in loaded
    heavy = [m for m in loaded if m.startswith(("ascend_memsim.runtime", "ascend_memsim.acl",
                                                "ascend_memsim.allocators",
                                                "ascend_memsim.testing._memsim"))]
    assert heavy == []
    pytester.makepyfile(test_plain="def test_device(memsim):\n    memsim.free(memsim.malloc(8))\n")
    pytester.runpytest_subprocess(*PLUGIN, "-p", "no:cacheprovider").assert_outcomes(passed=1)
    assert "ascend_memsim.runtime.runtime" in (pytester.path / "loaded.txt").read_text().split()


def test_each_sanitizer_finding_is_shown_once(pytester):
    # the failure lists the findings that fail the test; they are not printed again under
    # "Captured stderr"; a warning that fails nothing is printed once
    pytester.makepyfile(test_once="""
        from ascend_memsim import acl

        def test_double_free(memsim):
            ptr, ret = acl.rt.malloc(100, 0)
            acl.rt.free(ptr)
            acl.rt.free(ptr)

        def test_padding_warning_then_a_failure(memsim):
            ptr, ret = acl.rt.malloc(100, 0)
            acl.rt.memset(ptr, 128, 0, 120)
            acl.rt.free(ptr)
            assert False, "the body fails"
        """)
    result = run(pytester, "-rN")
    result.assert_outcomes(failed=2)
    text = result.stdout.str()
    first = text.split("test_padding_warning_then_a_failure")[0]
    assert first.count("double-free") == 2   # the failure's heading and its one report
    assert "Captured stderr" not in first
    # the body's own failure: its warning printed once, under Captured stderr
    second = text.split("_ test_padding_warning_then_a_failure _")[1]
    assert second.count("Captured stderr call") == 1
