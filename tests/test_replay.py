"""Replay: first failing event, bisected capacity, streams, bad traces."""

import pytest

from ascend_memsim import MiB, Runtime
from ascend_memsim.memory.errors import InvalidArgument
from ascend_memsim.observe.replay import parse_size, replay, smallest_capacity
from ascend_memsim.observe.trace import Recorder, Trace, loads


def _trace(*events, product="A2"):
    out = []
    for i, (kind, ptr, size, *rest) in enumerate(events):
        e = {"event": kind, "ptr": ptr, "size": size, "device": 0, "policy": 0,
             "api": "aclrtMalloc", "seq": i}
        if rest:
            e["stream"] = rest[0]
        out.append(e)
    return Trace(out, header={"product": product})


THREE_2MIB = _trace(("malloc", 1, 2 * MiB), ("malloc", 2, 2 * MiB), ("malloc", 3, 2 * MiB))


def test_first_failing_event_is_reported():
    result = replay(THREE_2MIB, "A2", capacity=10 * MiB)
    assert not result.fits and result.failures == 1 and result.mallocs == 2
    failure = result.first_failure
    assert failure.index == 2 and failure.line == 4
    assert failure.live_bytes == 8 * MiB and failure.free_bytes == 2 * MiB
    assert failure.largest_free_run == 2 * MiB and failure.code == 207001
    assert "fallback tried" in failure.message
    text = str(result)
    assert "first failure: event 2 (line 4)" in text


def test_same_trace_fits_on_950pr_and_with_align32():
    assert replay(THREE_2MIB, "950PR", capacity=6 * MiB).fits
    assert replay(THREE_2MIB, "A2", capacity=6 * MiB, api="aclrtMallocAlign32").fits
    assert not replay(THREE_2MIB, "A2", capacity=6 * MiB).fits


def test_bisection_finds_the_smallest_capacity():
    coarse = smallest_capacity(THREE_2MIB, "A2")
    assert coarse.capacity == 12 * MiB and coarse.step == 2 * MiB
    assert coarse.below is not None and not coarse.below.fits
    # in 64-byte steps the third request falls back to normal pages: 2 MiB + 64 B
    fine = smallest_capacity(THREE_2MIB, "A2", step=64)
    assert fine.capacity == 10 * MiB + 64
    assert replay(THREE_2MIB, "A2", capacity=fine.capacity).fits
    assert not replay(THREE_2MIB, "A2", capacity=fine.capacity - 64).fits
    assert smallest_capacity(THREE_2MIB, "950PR").capacity == 6 * MiB
    assert "12 MiB" in str(coarse)


def test_policy_override_changes_the_outcome():
    # HUGE_ONLY: no fallback, so 10 MiB + 64 B is not enough any more
    assert not replay(THREE_2MIB, "A2", capacity=10 * MiB + 64, policy=1).fits
    assert replay(THREE_2MIB, "A2", capacity=10 * MiB + 64, policy=0).fits


def test_a_trace_that_fits_nowhere_says_why():
    trace = _trace(("malloc", 1, 2 * MiB))
    trace.events[0]["policy"] = 6   # HUGE1G_ONLY: not on 950PR
    result = smallest_capacity(trace, "950PR")
    assert result.capacity is None and "1 GB" in result.reason


def test_double_free_and_unknown_events_are_reported_not_fatal():
    trace = _trace(("malloc", 1, 100), ("free", 1, 100), ("free", 1, 100), ("free", 9, 1),
                   ("malloc", 2, 100))
    trace.events.append({"event": "memcpy", "device": 0, "count": 4})
    result = replay(trace, "A2", capacity=4 * MiB)
    assert result.fits and result.mallocs == 2 and result.frees == 1
    assert len(result.problems) == 2
    assert result.problems[0].startswith("<trace>:4: free of 0x1, which is not live")
    assert ":5:" in result.problems[1]
    assert result.skipped == {"memcpy": 1}


def test_free_of_a_failed_malloc_is_not_a_problem():
    trace = _trace(("malloc", 1, 8 * MiB), ("free", 1, 8 * MiB))
    result = replay(trace, "A2", capacity=4 * MiB)
    assert result.failures == 1 and not result.problems


def test_streams_are_kept_apart():
    trace = _trace(("malloc", 1, 1 * MiB, 0xA), ("malloc", 2, 3 * MiB, 0xB),
                   ("free", 1, 1 * MiB, 0xA), ("malloc", 3, 1 * MiB, 0xA),
                   ("malloc", 4, 3 * MiB, 0xB))
    result = replay(trace, "A2", capacity=64 * MiB)
    one_mib, three_mib_huge = 1 * MiB + 64, 4 * MiB
    assert result.peak_by_stream == {0xA: one_mib, 0xB: 2 * three_mib_huge}
    failing = replay(trace, "A2", capacity=8 * MiB)
    assert failing.first_failure.live_by_stream == {0xA: one_mib, 0xB: three_mib_huge}
    assert "stream 10" in str(failing.first_failure)


def test_recorded_failures_are_probed_and_released():
    trace = _trace(("malloc_failed", 0, 3 * MiB), ("malloc", 1, 3 * MiB))
    result = replay(trace, "A2", capacity=4 * MiB)
    assert result.fits and result.recorded_failures == 1
    assert result.recorded_failures_now_fit == 1


def test_recorded_trace_replays_identically_and_progress_is_reported():
    with Runtime("A2", hbm_bytes=32 * MiB) as rt, Recorder(rt) as rec:
        rt.set_device(0)
        ptrs = [rt.malloc(s) for s in (100, 2 * MiB, 3 * MiB, 5000)]
        rt.free(ptrs[1])
        rt.malloc(1 * MiB)
    calls = []
    result = replay(loads(rec.trace.dumps()), progress=lambda d, t: calls.append((d, t)),
                    timeline=True, keep_runtime=True)
    try:
        assert result.capacity == 32 * MiB and result.fits
        replayed = sorted((b.size, b.footprint, b.page.value)
                          for b in result.runtime.device(0).blocks())
        recorded = sorted((e["size"], e["footprint"], e["page"]) for e in rec.trace.events
                          if e["event"] == "malloc" and e["ptr"] != ptrs[1])
        assert replayed == recorded
    finally:
        result.runtime.close()
    assert calls[-1] == (len(rec.trace), len(rec.trace))
    final = result.timeline.points[-1][1]
    assert final["APP"] == sum(f for _, f, _ in recorded)
    assert max(sum(by.values()) for _, by in result.timeline.points) == result.peak_bytes


def test_parse_size_forms():
    assert parse_size("2MiB") == 2 * MiB and parse_size("1GiB") == 1 << 30
    assert parse_size("123") == 123 and parse_size("0x40") == 64 and parse_size("1.5KiB") == 1536
    for bad in ("", "12x", "MiB", "1.3B"):
        with pytest.raises(InvalidArgument):
            parse_size(bad)
    with pytest.raises(InvalidArgument):
        smallest_capacity(THREE_2MIB, step=100)


def test_parse_size_refuses_overflow_infinity_and_negatives_and_reads_exponents():
    assert parse_size("1e3") == 1000 and parse_size("1.5e3") == 1500
    assert parse_size("2e0MiB") == 2 * MiB and parse_size("0x1e3") == 0x1E3
    for bad in ("1.0e999", "1e400", "1e308TiB"):
        with pytest.raises(InvalidArgument, match=f"size '{bad}' is not a size"):
            parse_size(bad)
    for bad in ("-2MiB", "-1e3", "-1.5KiB", -5):
        with pytest.raises(InvalidArgument, match="is negative"):
            parse_size(bad)
    with pytest.raises(InvalidArgument, match="not a size"):
        parse_size("9" * 5000)


def test_bisection_of_a_trace_beyond_the_simulated_span_is_an_answer_not_an_error():
    huge = _trace(("malloc", 1, 1 << 44))
    result = smallest_capacity(huge, "A2")
    assert result.capacity is None and result.runs == 0
    assert "does not fit on A2 at any simulated capacity" in str(result)
    assert "largest simulated capacity" in result.reason
    # the doubling stops at the largest capacity (8 TiB) and tries it: the +32 rule makes
    # these 7 TiB of requests take 7 TiB + 4 MiB
    tib = 1 << 40
    near = _trace(("malloc", 1, 4 * tib), ("malloc", 2, 3 * tib))
    result = smallest_capacity(near, "A2", step=tib)
    assert result.capacity == 8 * tib and result.runs >= 2
    full = _trace(("malloc", 1, 4 * tib), ("malloc", 2, 4 * tib))
    result = smallest_capacity(full, "A2", step=tib)
    assert result.capacity is None and "not even the largest simulated capacity" in result.reason


def test_a_trace_header_capacity_that_is_not_a_multiple_of_64_is_named():
    trace = _trace(("malloc", 1, 100))
    trace.header["hbm_bytes"] = 100
    with pytest.raises(InvalidArgument, match="the trace header's hbm_bytes=100"):
        replay(trace)
    assert replay(trace, capacity=64 * MiB).fits


def test_bisection_starts_from_the_high_water_mark_and_matches_a_linear_search():
    import random

    rng = random.Random(7)
    events, live, ptr = [], [], 0
    for _ in range(300):
        if live and rng.random() < 0.45:
            p, size = live.pop(rng.randrange(len(live)))
            events.append(("free", p, size))
        else:
            ptr += 1
            size = rng.choice((100, 5000, 70_000, 1 * MiB, 3 * MiB))
            events.append(("malloc", ptr, size))
            live.append((ptr, size))
    trace = _trace(*events)
    step = 2 * MiB
    found = smallest_capacity(trace, "A2", step=step)
    roomy = replay(trace, "A2", capacity=found.capacity + 64 * step, keep_runtime=True)
    at_mark = replay(trace, "A2", capacity=-(-roomy.high_water // step) * step,
                     keep_runtime=True)
    try:  # from the high-water mark up, the very same placements
        assert at_mark.fits
        assert ([b.ptr for b in roomy.runtime.device(0).blocks()]
                == [b.ptr for b in at_mark.runtime.device(0).blocks()])
    finally:
        roomy.runtime.close()
        at_mark.runtime.close()
    capacity = step
    while not replay(trace, "A2", capacity=capacity, stop_at_failure=True).fits:
        capacity += step
    assert found.capacity == capacity  # this trace's first fit is also the smallest
    assert found.runs <= 2 + (capacity // step).bit_length()


def test_a_long_recorded_frame_is_cut_in_the_failure_text():
    trace = loads("\n".join([
        '{"format": "ascend-memsim-trace", "version": 1, "product": "A2"}',
        '{"event": "malloc", "size": 1073741824, "ptr": 64, "stack": ["' + "z" * 100_000
        + '"]}']), "t.jsonl")
    text = str(replay(trace, capacity=64 * MiB))
    assert "z" * 200 + "... (99800 more characters)" in text
    assert max(map(len, text.splitlines())) < 400


def test_an_unknown_product_in_the_header_is_an_error_naming_the_file():
    trace = loads('{"format": "ascend-memsim-trace", "version": 1, "product": "Z9"}\n',
                  "t.jsonl")
    for run in (replay, smallest_capacity):
        with pytest.raises(InvalidArgument, match=r"t\.jsonl: the trace header names "
                                                  r"product 'Z9'.*--product"):
            run(trace)
    assert replay(trace, "A2").fits


def test_a_trace_built_in_memory_is_checked_as_a_file_is():
    from ascend_memsim.observe.trace import TraceFormatError

    bad = Trace([{"event": "malloc", "size": 64, "ptr": 64, "stack": [["x"]]}], name="mine")
    # once a TypeError from deep inside replay (an unhashable stack)
    with pytest.raises(TraceFormatError, match=r"mine: event 0 \(line 2\): 'stack'"):
        replay(bad, "A2")
    shared = ["t.py:1 in f"]
    good = Trace([{"event": "malloc", "size": 64, "ptr": 64 * i, "stack": shared}
                  for i in range(1, 4)])
    assert replay(good, "A2").mallocs == 3


@pytest.mark.parametrize("text", ["\uff15MiB", "\uff11\uff12", "\u0663KiB"])
def test_parse_size_refuses_digits_of_other_scripts(text):
    # int() reads them; a size on a command line or in a config is written in ASCII
    with pytest.raises(InvalidArgument, match="ASCII"):
        parse_size(text)


def test_the_recorded_capacity_goes_with_the_trace_and_the_report_says_so(tmp_path):
    """Issue 36, item 10: replay --product 950PR took 950PR's 128 GiB while the player kept
    the recorded 32 MiB, and neither said which or why."""
    from ascend_memsim.memory.errors import OutOfDeviceMemory
    from ascend_memsim.observe.player import save_player

    with Runtime("A2", hbm_bytes=32 * MiB) as rt, Recorder(rt) as rec:
        rt.set_device(0)
        for _ in range(3):
            rt.malloc(6 * MiB)
        with pytest.raises(OutOfDeviceMemory):
            rt.malloc(24 * MiB)
    trace = loads(rec.trace.dumps())
    on_950 = replay(trace, "950PR")
    assert (on_950.capacity, on_950.fits) == (32 * MiB, False)
    assert "capacity 32 MiB as recorded on A2 (950PR has 128 GiB; --capacity sets it)" in str(
        on_950)
    assert "capacity 1 GiB as given" in str(replay(trace, "950PR", capacity=1 << 30))
    # a trace that records no capacity replays on the product's own
    assert "capacity 128 GiB 950PR's own" in str(replay(THREE_2MIB, "950PR"))
    written = save_player(str(tmp_path / "p.html"), trace, ["950PR", "A2"])
    assert "on 950PR and A2 on 32 MiB as recorded on A2 (950PR has 128 GiB" in written["summary"]
