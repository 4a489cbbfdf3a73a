"""The npu_allocator fixture and marker, run in-process by pytester: budgets on the caching
allocator's allocated and reserved peaks, tensors left allocated, settings."""

from test_pytest_plugin import run


def test_within_budgets_passes_on_the_product_and_capacity_of_the_marker(pytester):
    pytester.makepyfile("""
        import pytest
        from ascend_memsim import MiB
        from ascend_memsim.allocators import NpuCachingAllocator

        @pytest.mark.npu_allocator(product="A2", capacity="1GiB", max_allocated="100MiB",
                                   max_reserved="120MiB")
        def test_fits(npu_allocator, memsim):
            assert isinstance(npu_allocator, NpuCachingAllocator)
            assert memsim.profile.name == "A2" and memsim.profile.hbm_bytes == 1 << 30
            x = npu_allocator.malloc(1 * MiB)
            assert npu_allocator.block_size(x) == 1049088     # 1 MiB + 32 -> 512-byte steps
            y = npu_allocator.malloc(64 * MiB)
            npu_allocator.free(x)
            npu_allocator.free(y)
            # the cache is kept: the segments are not the test's device leaks

        @pytest.mark.npu_allocator(product="950PR", capacity="256MiB",
                                   conf="expandable_segments:True")
        def test_expandable(npu_allocator, memsim):
            assert memsim.profile.name == "950PR" and memsim.profile.hbm_bytes == 256 << 20
            ptrs = [npu_allocator.malloc(3 * MiB) for _ in range(4)]
            for p in ptrs:
                npu_allocator.free(p)

        def test_fixture_without_marker(npu_allocator):
            npu_allocator.free(npu_allocator.malloc(100))

        def test_record_stream(npu_allocator, memsim):
            s = memsim.streams.create_stream()
            p = npu_allocator.malloc(3 * MiB)
            npu_allocator.record_stream(p, s)
            npu_allocator.free(p)             # pending until the stream's event completes
            kept = npu_allocator.malloc(3 * MiB, s)
            # left allocated on purpose? no: freed, and the pending block goes back too
            npu_allocator.free(kept)
        """)
    run(pytester).assert_outcomes(passed=4)


def test_over_budget_fails_with_peak_budget_and_the_malloc_that_reached_it(pytester):
    pytester.makepyfile(test_budget="""
        import pytest
        from ascend_memsim import MiB

        def make(alloc, size):
            return alloc.malloc(size)

        @pytest.mark.npu_allocator(capacity="1GiB", max_allocated="100MiB")
        def test_allocated(npu_allocator):
            x = npu_allocator.malloc(20 * MiB)
            y = make(npu_allocator, 90 * MiB)
            npu_allocator.free(y)
            npu_allocator.free(x)

        @pytest.mark.npu_allocator(capacity="1GiB", max_reserved="30MiB")
        def test_reserved(npu_allocator):
            x = npu_allocator.malloc(1 * MiB)       # a 20 MiB segment (large_segment_size)
            y = npu_allocator.malloc(12 * MiB, 1)   # another stream: its own 14 MiB segment
            npu_allocator.free(y)
            npu_allocator.free(x)
        """)
    result = run(pytester)
    result.assert_outcomes(failed=2)        # the tests' own failures, not teardown errors
    result.stdout.fnmatch_lines([
        "*npu_allocator: test_budget.py::test_allocated: allocated bytes peaked at "
        "110 MiB + 1 KiB (115344384 bytes), over the max_allocated budget of 100 MiB;",
        "*reached by malloc(90 MiB) on stream 0, at",
        "*test_budget.py:10 in test_allocated",
        "*test_budget.py:5 in make",
    ])
    result.stdout.fnmatch_lines([
        "*npu_allocator: test_budget.py::test_reserved: reserved bytes peaked at 34 MiB "
        "(35651584 bytes), over the max_reserved budget of 30 MiB (allocated then "
        "13 MiB + 1 KiB, reserved but unallocated 20 MiB + 1023 KiB);",
        "*reached by malloc(12 MiB) on stream 1, at",
        "*test_budget.py:17 in test_reserved",
    ])
    out = result.stdout.str().split("short test summary info")[0]
    assert "max_reserved" not in out.split("test_reserved")[0]     # test_allocated: one budget
    assert "leaked" not in out                                      # no device leaks on top


def test_tensors_left_allocated_fail_the_test_unless_leak_check_is_off(pytester):
    pytester.makepyfile(test_leaks="""
        import pytest
        from ascend_memsim import MiB

        def test_leak(npu_allocator):
            kept = npu_allocator.malloc(3 * MiB, 2)
            npu_allocator.free(npu_allocator.malloc(1000))

        @pytest.mark.npu_allocator(leak_check=False)
        def test_kept_on_purpose(npu_allocator):
            npu_allocator.malloc(3 * MiB)

        def test_body_fails(npu_allocator):
            npu_allocator.malloc(3 * MiB)
            assert False, "the body's own failure"
        """)
    result = run(pytester)
    result.assert_outcomes(passed=1, failed=2, errors=0)
    result.stdout.fnmatch_lines([
        "*npu_allocator: test_leaks.py::test_leak left 1 tensor(s) allocated in the caching "
        "allocator; free them, or write @pytest.mark.npu_allocator(leak_check=False)*",
        "*3 MiB at 0x* on stream 2 (block of 3 MiB + 512 B)",
        "*allocated at",
        "*test_leaks.py:5 in test_leak",
    ])
    out = result.stdout.str().split("short test summary info")[0]
    assert out.count("tensor(s) allocated") == 1
    # the segments go back at the end: never reported as the device's leaked blocks
    assert "device block(s)" not in out


def test_bad_settings_are_reported_with_the_keyword_and_torch_npus_words(pytester):
    pytester.makepyfile(test_bad="""
        import pytest

        @pytest.mark.npu_allocator(confs="expandable_segments:True")
        def test_typo(npu_allocator):
            pass

        @pytest.mark.npu_allocator(conf="expandable_segments:maybe")
        def test_conf(npu_allocator):
            pass

        @pytest.mark.npu_allocator(max_reserved="lots")
        def test_size(npu_allocator):
            pass

        @pytest.mark.npu_allocator(product="no-such-part")
        def test_product(npu_allocator):
            pass
        """)
    result = run(pytester)
    result.assert_outcomes(errors=4)
    result.stdout.fnmatch_lines([
        "*unknown keyword 'confs' (did you mean 'conf'?)*",
        "*test_bad.py::test_conf: Expected 'True' or 'False' * but got 'maybe'",
        "*max_reserved='lots'*",
        "*no-such-part*",
    ])


def test_memsim_marker_overrides_the_allocator_markers_device_settings(pytester):
    pytester.makepyfile("""
        import pytest

        @pytest.mark.memsim(product="950PR", hbm_bytes="128MiB")
        @pytest.mark.npu_allocator(product="A2", capacity="1GiB", cann="8.0.0")
        def test_override(npu_allocator, memsim):
            assert memsim.profile.name == "950PR" and memsim.profile.hbm_bytes == 128 << 20
            # 950 with CANN 8.0.0 still pads (the pad is 0 from 9.1.0): 1 MiB + 32 -> +512
            p = npu_allocator.malloc(1 << 20)
            assert npu_allocator.block_size(p) == (1 << 20) + 512
            npu_allocator.free(p)
        """)
    run(pytester).assert_outcomes(passed=1)


def test_budgeted_allocator_keeps_its_sites_under_threads():
    import threading

    from ascend_memsim import MiB, Runtime
    from ascend_memsim.testing.npu_allocator import BudgetedAllocator

    with Runtime("A2", hbm_bytes=256 * MiB, sanitizer="off") as rt:
        alloc = BudgetedAllocator(rt)

        def work(seed: int) -> None:
            for i in range(300):
                ptr = alloc.malloc((seed * 7919 + i * 104729) % (3 * MiB) + 1, seed % 2)
                alloc.free(ptr)

        threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert alloc.sites == {}
        assert alloc.allocated_peak.value == alloc.memory_stats()["allocated_bytes.all.peak"]
        assert alloc.reserved_peak.value == alloc.memory_stats()["reserved_bytes.all.peak"]
        alloc.release_all()
        assert alloc.memory_stats()["reserved_bytes.all.current"] == 0
