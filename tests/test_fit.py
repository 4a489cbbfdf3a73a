"""Will it fit, and with which settings: plan.fit and replay --allocator --bisect / --sweep."""

import json
import pickle

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from ascend_memsim import GiB, MiB, Runtime
from ascend_memsim.allocators import NpuCachingAllocator, NpuOutOfMemoryError
from ascend_memsim.cli import main
from ascend_memsim.memory.errors import AllocatorConfigError, InvalidArgument, InvalidArgumentType
from ascend_memsim.observe import tensor_replay
from ascend_memsim.observe.tensor_replay import replay_tensors
from ascend_memsim.plan.fit import (
    DEFAULT_WINDOW,
    MAX_WINDOW,
    default_candidates,
    fit_capacity,
    sweep_settings,
)

#: A job whose fit is not monotone in the capacity on an A2 (found by a seeded search over
#: random workloads, then shrunk): 32-40 MiB fit, 42 MiB fails, 44 MiB and up fit. At 40 MiB
#: the 12.5 MiB tensor finds no room for its 14 MiB segment above the cached ones, so the
#: allocator frees its cached segments and packs it lower; at 42 MiB it fits above them, and
#: the last 14 MiB tensor's 16 MiB segment then finds two 14 MiB holes and no longer run;
#: at 44 MiB the run above holds it.
DIP = [("alloc", 0, 114688), ("alloc", 1, 12582912), ("alloc", 2, 12058624), ("free", 2),
       ("free", 0), ("free", 1), ("alloc", 3, 13107200), ("alloc", 4, 12582912), ("free", 4),
       ("free", 3), ("alloc", 5, 1979392), ("alloc", 6, 246784), ("alloc", 7, 14680064)]


def _recorded(ops, capacity=4096 * MiB):
    """The torch_npu snapshot of ``ops`` run through the project's own allocator."""
    with Runtime("A2", hbm_bytes=capacity, sanitizer="off") as rt:
        alloc = NpuCachingAllocator(rt)
        alloc.record_history()
        ptrs = {}
        for op in ops:
            if op[0] == "alloc":
                ptrs[op[1]] = alloc.malloc(op[2])
            else:
                alloc.free(ptrs.pop(op[1]))
        return alloc.memory_snapshot()


def _fits(snap, capacity, conf=""):
    return replay_tensors(snap, "A2", capacity=capacity, alloc_conf=conf,
                          stop_at_failure=True).fits


def test_non_monotone_fit_reports_both_answers():
    snap = _recorded(DIP)
    # the fixture's shape, by plain replays at each capacity
    assert [_fits(snap, c * MiB) for c in range(26, 50, 2)] == [
        False, False, False, True, True, True, True, True, False, True, True, True]
    told = []
    r = fit_capacity(snap, "A2", progress=lambda runs, capacity: told.append((runs, capacity)))
    assert [runs for runs, _ in told] == list(range(r.replays))
    # a capacity a replay at another answers (every segment placed alike) is not replayed
    replayed = sorted(c for _, c in told)
    assert set(replayed) <= {c for c, _ in r.trials} and len(replayed) < len(r.trials)
    assert r.lower_bound == 26 * MiB
    assert r.smallest == 32 * MiB and r.smallest_exact
    assert r.smallest_checked_from == 26 * MiB
    assert r.all_fit_from == 44 * MiB and r.failing_between == [42 * MiB]
    assert r.all_fit_checked_to == (44 + 2 * DEFAULT_WINDOW) * MiB
    assert r.failure is not None and r.failure["size"] == 14680064
    assert r.peak_reserved == 42 * MiB and r.retries == 1
    # bounded: top, hint, galloping + bisection, and the two windows
    assert r.replays <= 2 + 2 * 15 + 6 * DEFAULT_WINDOW
    text = str(r)
    assert "smallest capacity that fits:  32 MiB (exact" in text
    assert "every capacity from 44 MiB up fits" in text
    assert "fit is not monotone: 42 MiB fails between them" in text


def test_a_replay_ends_at_the_first_failure_as_torch_ends_the_job():
    snap = _recorded(DIP)
    stopped = replay_tensors(snap, "A2", capacity=20 * MiB)     # the default
    whole = replay_tensors(snap, "A2", capacity=20 * MiB, stop_at_failure=False)
    assert (whole.ooms, whole.allocs) == (3, 5) and (stopped.ooms, stopped.allocs) == (1, 2)
    assert stopped.first_failure == whole.first_failure
    assert stopped.ended_at == stopped.first_failure["index"] and whole.ended_at is None
    assert f"the replay ended at entry {stopped.ended_at}" in str(stopped)
    assert not stopped.peaks_after_failure
    # replayed on, the peaks after the failure are told apart as not the job's
    assert whole.peaks_before_failure == {"peak_allocated": stopped.peak_allocated,
                                          "peak_reserved": stopped.peak_reserved,
                                          "peak_device": stopped.peak_device}
    assert whole.peaks_after_failure == (whole.peak_allocated > stopped.peak_allocated
                                         or whole.peak_reserved > stopped.peak_reserved
                                         or whole.peak_device > stopped.peak_device)


_op = st.tuples(st.booleans(), st.integers(1, 24), st.integers(0, 20))


#: a script whose job fits at 24 MiB, fails from 26 to 38 MiB and fits from 40 MiB up
_DIPPING = [(False, 21, 11), (False, 23, 5), (True, 18, 19), (True, 20, 19), (False, 1, 14),
            (False, 1, 11), (False, 9, 16), (False, 24, 19), (True, 12, 17), (False, 2, 12),
            (True, 7, 14), (True, 16, 3)]


@given(st.lists(_op, min_size=1, max_size=16), st.sampled_from([0, 2, 64]))
@example(_DIPPING, 2)
@example(_DIPPING, 64)
def test_search_claims_hold_against_every_capacity(script, window):
    """Every claim of the search, checked by replaying each capacity of a small range: what
    it says fails fails, what it says fits fits; a window over the whole range gives the
    exact answers."""
    ops, live, n = [], [], 0
    for free, half_mib, pick in script:
        if free and live:
            ops.append(("free", live.pop(pick % len(live))))
        else:
            ops.append(("alloc", n, half_mib * MiB // 2 + pick * 4096))
            live.append(n)
            n += 1
    snap = _recorded(ops)
    top = 96 * MiB
    r = fit_capacity(snap, "A2", top=top, window=window)
    if not r.fits:
        assert not _fits(snap, top)
        return
    step = r.step
    each = {c: _fits(snap, c) for c in range(step, top + 1, step)}
    assert not any(each[c] for c in range(step, r.lower_bound, step))
    assert all(each[c] == ok for c, ok in r.trials)
    assert each[r.smallest] and not any(
        each[c] for c in range(r.smallest_checked_from, r.smallest, step))
    assert all(each[c] for c in range(r.all_fit_from, r.all_fit_checked_to + 1, step))
    assert r.all_fit_from == r.lower_bound or not each[r.all_fit_from - step]
    assert not any(each[c] for c in r.failing_between)
    smallest = min(c for c, ok in each.items() if ok)
    from_here = min(c for c in each if all(each[d] for d in each if d >= c))
    if r.smallest_exact:
        assert r.smallest == smallest
    if window == 64:    # the window covers the whole range: both answers are exact
        assert (r.smallest, r.all_fit_from) == (smallest, from_here)


@given(st.lists(st.booleans(), min_size=1, max_size=200), st.integers(0, 199),
       st.integers(0, 40))
@example([True, False, False, True, True, True, False, True, True], 0, 2)
# the upward scan's budget ran out on a failure: "fits from" was a capacity never replayed
@example([True, False, False, False, False, False], 0, 1)
@example([True, False, False, False, False, True, True, False, True], 0, 1)
def test_the_search_over_any_fit_pattern(pattern, hint_at, window):
    """The search's steps over an arbitrary pattern of fitting capacities (the last fits, as
    the top must): every claim is true of the pattern, the cost stays within its bound, and
    a window over the whole range gives the exact answers."""
    from ascend_memsim.plan.search import _answers, _probe
    pattern = [*pattern, True]
    step, lower = 64, 64
    top = lower + (len(pattern) - 1) * step
    each = {lower + i * step: ok for i, ok in enumerate(pattern)}
    seen = {top: True}

    def fits(c):
        assert lower <= c <= top and c % step == 0
        seen[c] = each[c]
        return each[c]

    hint = min(top, lower + hint_at * step)
    found = _probe(fits, lower, hint, top, step, window)
    assert len(seen) <= 2 + 3 * len(pattern).bit_length() + 6 * window
    smallest, checked_from, all_from, checked_to, between = _answers(seen, lower, step, found)
    assert each[found] and (found == lower or not each[found - step])
    assert each[smallest] and not any(each[c] for c in range(checked_from, smallest, step))
    assert all(each[c] for c in range(all_from, checked_to + 1, step))
    assert all_from == lower or not each[all_from - step]
    assert not any(each[c] for c in between) and all(smallest < c < all_from for c in between)
    # the scan above goes on until `window` steps in a row fit, within its 4 * window budget
    if all_from + window * step <= found + 4 * window * step:
        assert checked_to >= min(top, all_from + window * step)
    first = min(c for c, ok in each.items() if ok)
    from_here = min(c for c in each if all(each[d] for d in each if d >= c))
    if checked_from == lower:
        assert smallest == first
    if window >= len(pattern):
        assert (smallest, all_from, checked_to) == (first, from_here, top)


def _fragmenting():
    """Twelve 6 MiB tensors, three of each four freed, then three 16 MiB ones: the default
    keeps a 20 MiB segment per kept tensor; expandable segments merge the freed runs."""
    ops = [("alloc", i, 6 * MiB) for i in range(12)]
    ops += [("free", i) for i in range(12) if i % 4]
    ops += [("alloc", 12 + i, 16 * MiB) for i in range(3)]
    return ops


def test_sweep_finds_a_setting_that_fits_where_the_default_does_not(tmp_path, capsys):
    path = tmp_path / "frag.pickle"
    path.write_bytes(pickle.dumps(_recorded(_fragmenting(), 256 * MiB)))
    sweep = sweep_settings(str(path), "A2")
    best = sweep.best
    default = next(r for r in sweep.results if r.alloc_conf == "")
    assert best.alloc_conf == "expandable_segments:True"
    assert best.all_fit_from == 80 * MiB < default.smallest == default.all_fit_from
    assert sweep.results[-1].alloc_conf == "page_size:1g"   # 1 GiB segments: last
    assert sweep.replays == sum(r.replays for r in sweep.results)
    # the device confirms it: at the best setting's capacity it fits, the default fails
    capacity = f"{best.all_fit_from // MiB}MiB"
    args = ["replay", str(path), "--allocator", "torch-npu", "--product", "A2",
            "--capacity", capacity]
    assert main([*args, "--alloc-conf", best.alloc_conf]) == 0
    assert main(args) == 1
    assert "out of memory" in capsys.readouterr().out
    assert main([*args[:-2], "--sweep", "--quiet"]) == 0
    text = capsys.readouterr().out
    rows = [line.split()[0] for line in text.splitlines()[2:-1]]
    assert rows[:2] == ["expandable_segments:True", "(default)"]


def test_sweep_reads_the_file_once(tmp_path, monkeypatch):
    path = tmp_path / "frag.pickle"
    path.write_bytes(pickle.dumps(_recorded(_fragmenting(), 256 * MiB)))
    opened = []
    real = tensor_replay._open_file
    monkeypatch.setattr(tensor_replay, "_open_file", lambda p: opened.append(p) or real(p))
    sweep = sweep_settings(str(path), "A2", candidates=["", "expandable_segments:True"])
    assert len(opened) == 1 and sweep.replays > 2


def test_json_shapes(tmp_path, capsys):
    path = tmp_path / "dip.json"
    path.write_text(json.dumps(_recorded(DIP)))
    base = ["replay", str(path), "--allocator", "torch-npu", "--product", "A2", "--json"]
    assert main([*base, "--bisect"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"smallest", "all_fit_from", "smallest_exact", "smallest_checked_from",
            "all_fit_checked_to", "failing_between", "lower_bound", "top", "step", "trials",
            "replays", "seconds", "fits", "peak_reserved", "retries", "failure"} <= set(out)
    assert (out["smallest"], out["all_fit_from"]) == (32 * MiB, 44 * MiB)
    assert [42 * MiB, False] in out["trials"]
    assert main([*base, "--sweep-conf", ";expandable_segments:True"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["alloc_conf"] for r in out["results"]] == ["expandable_segments:True", ""]
    assert out["replays"] == sum(r["replays"] for r in out["results"])


def test_capacity_is_the_top_of_the_search(tmp_path, capsys):
    path = tmp_path / "dip.json"
    path.write_text(json.dumps(_recorded(DIP)))
    base = ["replay", str(path), "--allocator", "torch-npu", "--product", "A2", "--bisect"]
    assert main([*base, "--capacity", "65MiB", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["top"] == 64 * MiB and out["all_fit_checked_to"] == 64 * MiB
    # nothing fits at the top: exit 1, the failure there
    assert main([*base, "--capacity", "30MiB"]) == 1
    assert "does not fit at 30 MiB" in capsys.readouterr().out
    assert main([*base[:-1], "--sweep", "--capacity", "30MiB"]) == 1


def test_a_project_trace_is_searched_on_its_product(tmp_path):
    from ascend_memsim.observe.trace import Trace
    events = [{"event": "malloc", "ptr": 0x1000 + i, "size": 12 * MiB, "device": 0, "policy": 0,
               "api": "aclrtMalloc", "seq": i} for i in range(3)]
    path = tmp_path / "t.jsonl"
    path.write_text(Trace(events, header={"product": "A3"}).dumps())
    r = fit_capacity(str(path), top=256 * MiB)
    # 12 MiB + 32 rounds to a 14 MiB segment each
    assert r.product == "A3" and r.smallest == r.all_fit_from == 42 * MiB


def test_bad_options(tmp_path, capsys):
    path = tmp_path / "dip.json"
    path.write_text(json.dumps(_recorded(DIP)))
    base = ["replay", str(path), "--product", "A2"]
    assert main([*base, "--sweep", "--allocator", "none"]) == 2
    assert "give --allocator torch-npu" in capsys.readouterr().err
    # a search counts any failure as not fitting: replaying on after one means nothing there
    assert main([*base, "--bisect", "--continue-after-oom"]) == 2
    assert "--continue-after-oom" in capsys.readouterr().err
    alloc = [*base, "--allocator", "torch-npu"]
    assert main([*alloc, "--sweep", "--alloc-conf", "expandable_segments:True"]) == 2
    assert "--sweep-conf" in capsys.readouterr().err
    assert main([*alloc, "--sweep-conf", "expandable_segments:True;bogus:1"]) == 2
    err = capsys.readouterr().err
    assert "Unrecognized key 'bogus' in NPU allocator config" in err and "'bogus:1'" in err
    assert main([*alloc, "--sweep-conf", "expandable_segments:True,max_split_size_mb:64"]) == 2
    assert "cannot be enabled with `expandable_segments`" in capsys.readouterr().err
    assert main([*alloc, "--bisect", "--alloc-conf", "max_split_size_mb:5"]) == 2
    assert main([*alloc, "--bisect", "--window", "-1"]) == 2
    assert main([*alloc, "--bisect", "--step", "100"]) == 2
    assert main([*alloc, "--bisect", "--capacity", "1MiB"]) == 2
    snap = _recorded(DIP)
    with pytest.raises(InvalidArgumentType):
        fit_capacity(snap, "A2", step=True)
    with pytest.raises(InvalidArgument):
        fit_capacity(snap, "A2", window=MAX_WINDOW + 1)
    with pytest.raises(InvalidArgument):
        sweep_settings(snap, "A2", candidates=[])
    with pytest.raises(InvalidArgumentType):
        sweep_settings(snap, "A2", candidates=["", 3])
    with pytest.raises(InvalidArgument, match="a non-empty list"):
        sweep_settings(snap, "A2", candidates="expandable_segments:True")
    with pytest.raises(AllocatorConfigError, match="in the setting 'colour:blue'"):
        sweep_settings(snap, "A2", candidates=["", "colour:blue"])
    with pytest.raises(InvalidArgument):
        fit_capacity({"no": "snapshot"}, "A2")
    with pytest.raises(InvalidArgumentType):
        sweep_settings(snap, "A2", cann=8.1)
    # a string that is no CANN version was once taken as 0.0.0 (no 1 GiB pages, the pad)
    with pytest.raises(InvalidArgument, match="CANN version must read like"):
        fit_capacity(snap, "A2", cann="latest")
    assert main([*alloc, "--bisect", "--cann", "banana"]) == 2
    assert "the CANN version must read like '8.1.RC1'" in capsys.readouterr().err
    # nothing fits at the top: the JSON says so
    assert main([*alloc, "--bisect", "--capacity", "30MiB", "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert not out["fits"] and out["smallest"] is None and out["failure"]["size"] == 14680064


def test_the_help_names_the_default_window():
    from ascend_memsim.cli import HELP_DEFAULT_WINDOW
    assert HELP_DEFAULT_WINDOW == DEFAULT_WINDOW


def test_default_candidates():
    a2 = default_candidates("A2")
    assert a2[:2] == ["", "expandable_segments:True"] and "page_size:1g" in a2
    # no 1 GiB pages on 950PR; none before CANN 8.1.RC1 (IsMallocPage1GMem)
    assert "page_size:1g" not in default_candidates("950PR")
    assert "page_size:1g" not in default_candidates("A2", "8.0.0")
    assert not any("garbage_collection_threshold" in c for c in a2)


def test_malloc_failures_seen_by_the_recording_are_searched_too():
    """A recorded OOM entry is a request the search must satisfy as well."""
    def job(alloc):
        a = alloc.malloc(30 * MiB)
        try:
            alloc.malloc(60 * MiB)
        except NpuOutOfMemoryError:
            pass
        alloc.free(a)

    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer="off") as rt:
        alloc = NpuCachingAllocator(rt)
        alloc.record_history()
        job(alloc)
        snap = alloc.memory_snapshot()
    r = fit_capacity(snap, "A2", top=256 * MiB)
    assert r.smallest == r.all_fit_from == 94 * MiB   # 32 + 62 MiB segments together


def test_figures_one_step_apart_never_read_alike():
    """Issue 36, item 14: "smallest capacity seen to fit: 10.65 GiB" beside "with 10.65 GiB:
    first failure". Two figures that round alike print exact; the others stay short."""
    from ascend_memsim.plan.results import FitSearch

    step = 2 * MiB
    smallest = 5453 * step                                  # 10.65 GiB, as is one step less
    result = FitSearch("job.pickle", "A2", "", step, top=32 * GiB, lower_bound=4 * GiB,
                       smallest=smallest, smallest_checked_from=4 * GiB,
                       all_fit_from=smallest, all_fit_checked_to=smallest + 4 * step,
                       failure={"index": 7, "size": 600 * MiB, "stream": 0, "message": "oom"},
                       trials=[(smallest - step, False), (smallest, True)], replays=2)
    text = str(result)
    assert "capacity that fits:  10 GiB + 666 MiB (" in text
    assert "with 10 GiB + 664 MiB: first failure" in text
    assert "from 4 GiB (the peak allocated" in text and "to 32 GiB in steps of 2 MiB" in text
