"""The fast search (compiled columns, capacities answered by a replay at another, settings
that replay alike, worker processes) gives exactly the answers of the plain one, which
replays ``replay_tensors`` at every capacity it asks."""

import json
import warnings

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ascend_memsim import KiB, MiB, Runtime
from ascend_memsim.allocators import NpuCachingAllocator, NpuOutOfMemoryError
from ascend_memsim.allocators.conf import parse_alloc_conf
from ascend_memsim.memory.allocator import Allocator
from ascend_memsim.memory.errors import InvalidArgument
from ascend_memsim.memory.profiles import get_profile
from ascend_memsim.observe.tensor_replay import load_source, replay_tensors
from ascend_memsim.plan import fit_capacity, sweep_settings
from ascend_memsim.plan.columns import compile_source, replay_columns

#: settings of every kind the fast path treats apart: no identity interval (a fraction,
#: expandable segments), settings that replay alike (max_split_size_mb), 1 GiB pages
SETTINGS = ["", "max_split_size_mb:20", "max_split_size_mb:32", "max_split_size_mb:512",
            "roundup_power2_divisions:4", "expandable_segments:True", "page_size:1g",
            "per_process_memory_fraction:0.9,garbage_collection_threshold:0.5"]

_size = st.one_of(st.integers(1, 900 * KiB), st.integers(1, 48) .map(lambda n: n * MiB // 2),
                  st.integers(1, 40 * MiB))
_op = st.tuples(st.sampled_from(["alloc", "alloc", "free", "oom"]), _size,
                st.integers(0, 1), st.integers(0, 30))


def _recorded(script, start):
    """The snapshot of ``script`` run through the project's allocator (recorded from op
    ``start`` on, so blocks allocated before are seeds); an "oom" op asks for more than the
    device has and catches the error, as a job that survives it."""
    with Runtime("A2", hbm_bytes=4096 * MiB, sanitizer="off") as rt:
        alloc = NpuCachingAllocator(rt)
        live = []
        for i, (kind, size, stream, pick) in enumerate(script):
            if i == start:
                alloc.record_history()
            if kind == "free" and live:
                alloc.free(live.pop(pick % len(live)))
            elif kind == "oom":
                try:
                    alloc.malloc(8192 * MiB)
                except NpuOutOfMemoryError:
                    pass
            elif kind != "free":
                live.append(alloc.malloc(size, stream))
        if start >= len(script):
            alloc.record_history()
            alloc.free(alloc.malloc(512))
        return alloc.memory_snapshot()


def _answers(found):
    out = found.as_dict()
    for key in ("replays", "seconds"):
        out.pop(key)
    for r in out.get("results", ()):
        r.pop("replays"), r.pop("seconds")
    out.pop("same_as", None)
    return out


#: each example replays a search's capacities one by one: a quarter of the profile's examples
_SLOW = settings(deadline=None, max_examples=max(8, settings.default.max_examples // 4),
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

#: a job whose fit is not monotone (tests/test_fit.py's DIP, as a script)
_DIP = [("alloc", 114688, 0, 0), ("alloc", 12582912, 0, 0), ("alloc", 12058624, 0, 0),
        ("free", 0, 0, 2), ("free", 0, 0, 0), ("free", 0, 0, 0), ("alloc", 13107200, 0, 0),
        ("alloc", 12582912, 0, 0), ("free", 0, 0, 1), ("free", 0, 0, 0),
        ("alloc", 1979392, 0, 0), ("alloc", 246784, 0, 0), ("alloc", 14680064, 0, 0)]


@_SLOW
@given(st.lists(_op, min_size=1, max_size=24), st.integers(0, 30),
       st.sampled_from(SETTINGS), st.sampled_from([0, 1, 3, 16]),
       st.sampled_from([64, 96, 160]))
@example(_DIP, 0, "", 2, 96)
@example(_DIP, 3, "max_split_size_mb:20", 16, 160)
def test_fast_search_gives_the_plain_answers(script, start, conf, window, top_mib):
    snap = _recorded(script, start)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")     # page_size:1g's fallback warning
        try:
            plain = fit_capacity(snap, "A2", alloc_conf=conf, top=top_mib * MiB, window=window,
                                 _plain=True)
        except InvalidArgument:
            # nothing to replay: the fast search says so too
            with pytest.raises(InvalidArgument):
                fit_capacity(snap, "A2", alloc_conf=conf, top=top_mib * MiB, window=window)
            return
        fast = fit_capacity(snap, "A2", alloc_conf=conf, top=top_mib * MiB, window=window)
    assert _answers(fast) == _answers(plain)
    assert fast.replays <= plain.replays


@_SLOW
@given(st.lists(_op, min_size=1, max_size=20), st.integers(0, 30),
       st.lists(st.sampled_from(SETTINGS), min_size=1, max_size=5, unique=True))
@example(_DIP, 0, ["", "max_split_size_mb:32", "max_split_size_mb:512"])
def test_fast_sweep_gives_the_plain_answers(script, start, confs):
    snap = _recorded(script, start)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            plain = sweep_settings(snap, "A2", candidates=confs, top=128 * MiB, window=2,
                                   _plain=True)
        except InvalidArgument:
            return
        fast = sweep_settings(snap, "A2", candidates=confs, top=128 * MiB, window=2)
    assert _answers(fast) == _answers(plain)
    # a setting answered by another's search replays alike: checked above, row by row
    assert set(fast.same_as) <= set(confs) and not set(fast.same_as.values()) & set(
        fast.same_as)


@_SLOW
@given(st.lists(_op, min_size=1, max_size=24), st.integers(0, 30), st.sampled_from(SETTINGS),
       st.integers(16, 80))
def test_a_run_is_the_replay_at_every_capacity_of_its_interval(script, start, conf, mib):
    """replay_columns gives replay_tensors' figures, and at each capacity of the run's
    interval a plain replay gives the same run."""
    snap = _recorded(script, start)
    columns = compile_source(*load_source(snap), "<snapshot>", None)
    profile = get_profile("A2")
    parsed = parse_alloc_conf(conf)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run = replay_columns(columns, profile, mib * MiB, parsed, "9.1.0")
        keys = ("fits", "peak_allocated", "peak_reserved", "peak_device", "retries",
                "first_failure", "allocs", "frees", "seeded", "ooms", "ended_at")

        def figures(r, failure=True):
            d = r.as_dict()
            return {k: d[k] for k in keys if failure or k != "first_failure"}

        assert figures(run.result) == figures(replay_tensors(snap, "A2", capacity=mib * MiB,
                                                             alloc_conf=conf))
        assert run.covers(mib * MiB) or run.lo == run.hi == mib * MiB
        for c in (run.lo, min(run.hi, 4096 * MiB) - 2 * MiB, min(run.hi, 4096 * MiB) - 64):
            c = c // 64 * 64
            if run.covers(c) and c >= 2 * MiB and c != mib * MiB:
                # the same run (the message of a failure names the capacity: not compared)
                again = replay_tensors(snap, "A2", capacity=c, alloc_conf=conf)
                assert figures(run.result, False) == figures(again, False)


def test_settings_that_replay_alike_are_said_and_not_replayed():
    snap = _recorded(_DIP, 0)
    sweep = sweep_settings(snap, "A2", candidates=["", "max_split_size_mb:32",
                                                   "max_split_size_mb:512",
                                                   "max_split_size_mb:20"])
    # the largest request (14 MiB) makes a 16 MiB segment, the 1.9 MiB one a 20 MiB one:
    # under 32 and 512 MiB, not under 20 (the largest request alone said 16 MiB)
    assert sweep.same_as == {"max_split_size_mb:32": "", "max_split_size_mb:512": ""}
    rows = {r.alloc_conf: r for r in sweep.results}
    assert rows["max_split_size_mb:32"].replays == 0 and rows[""].replays > 0
    assert "same as (default): max_split_size_mb:32, max_split_size_mb:512" in str(sweep)
    assert sweep.as_dict()["same_as"] == sweep.same_as


def test_workers_give_the_same_answers():
    snap = _recorded(_DIP, 0)
    one = sweep_settings(snap, "A2", candidates=SETTINGS[:5], top=128 * MiB, jobs=1)
    two = sweep_settings(snap, "A2", candidates=SETTINGS[:5], top=128 * MiB, jobs=2)
    assert _answers(two) == _answers(one) and two.same_as == one.same_as
    a = fit_capacity(snap, "A2", top=128 * MiB, jobs=1)
    b = fit_capacity(snap, "A2", top=128 * MiB, jobs=2)
    assert _answers(b) == _answers(a)


def test_a_trace_file_is_read_once_per_search(tmp_path, monkeypatch):
    from ascend_memsim.observe import stream
    from ascend_memsim.observe.trace import Trace
    events = [{"event": "malloc", "ptr": 0x1000 + i, "size": (i % 5 + 1) * 3 * MiB,
               "device": 0, "policy": 0, "api": "aclrtMalloc", "seq": i} for i in range(12)]
    path = tmp_path / "t.jsonl"
    path.write_text(Trace(events, header={"product": "A2"}).dumps())
    reads = []
    real = stream.TraceStream.records
    monkeypatch.setattr(stream.TraceStream, "records",
                        lambda self, *a, **k: reads.append(1) or real(self, *a, **k))
    fast = sweep_settings(str(path), top=256 * MiB, candidates=["", "max_split_size_mb:64"])
    assert len(reads) == 1 and fast.replays > 1
    reads.clear()
    plain = sweep_settings(str(path), top=256 * MiB, candidates=["", "max_split_size_mb:64"],
                           _plain=True)
    assert len(reads) == plain.replays
    assert _answers(fast) == _answers(plain)


def test_top_free_start_and_a_main_allocator_of_ones_own():
    a = Allocator(1 << 20, base=1 << 30)
    assert a.top_free_start() == (1 << 30)
    a.allocate(1 << 20)
    assert a.top_free_start() == (1 << 30) + (1 << 20)
    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer="off") as rt:
        device = rt.device(0)
        main = device.allocators[rt.profile.main_memory]
        with pytest.raises(InvalidArgument, match="same range"):
            device.use_main_allocator(Allocator(main.capacity // 2, base=main.base))
        mine = Allocator(main.capacity, base=main.base)
        device.use_main_allocator(mine)
        rt.set_device(0)
        rt.malloc(MiB)
        assert len(mine) == 1
        with pytest.raises(InvalidArgument, match="empty device"):
            device.use_main_allocator(Allocator(main.capacity, base=main.base))


def test_the_command_line_takes_jobs(tmp_path, capsys):
    import json
    import pickle

    from ascend_memsim.cli import main
    path = tmp_path / "dip.pickle"
    path.write_bytes(pickle.dumps(_recorded(_DIP, 0)))
    base = ["replay", str(path), "--product", "A2", "--capacity", "128MiB", "--json", "--quiet"]
    out = {}
    for jobs in ("1", "2"):
        assert main([*base, "--sweep", "--jobs", jobs]) == 0
        out[jobs] = json.loads(capsys.readouterr().out)
    assert _answers(_Dict(out["1"])) == _answers(_Dict(out["2"]))
    assert "max_split_size_mb:32" in out["1"]["same_as"]
    assert main([*base, "--bisect", "--jobs", "0"]) == 2
    assert "jobs must be from 1" in capsys.readouterr().err


class _Dict:
    """A JSON answer as ``_answers`` reads an answer object."""

    def __init__(self, d):
        self.d = d

    def as_dict(self):
        return json.loads(json.dumps(self.d))


def test_a_worker_that_dies_mid_search_stops_it_with_exit_2_not_an_answer(tmp_path, capsys,
                                                                          monkeypatch):
    # a worker killed (kill -9, the host's OOM killer) mid-search: BrokenProcessPool; the
    # search gives no answer from part of its replays
    import pickle

    from ascend_memsim.cli import main
    from ascend_memsim.plan import search as plan_search

    monkeypatch.setattr(plan_search, "_replay_task", _dies)
    monkeypatch.setattr(plan_search, "_search_task", _dies)
    path = tmp_path / "dip.pickle"
    path.write_bytes(pickle.dumps(_recorded(_DIP, 0)))
    code = main(["replay", str(path), "--product", "A2", "--capacity", "128MiB", "--quiet",
                 "--sweep", "--jobs", "2"])
    err = capsys.readouterr().err
    assert code == 2
    assert "a worker process ended before its work was done" in err and "Traceback" not in err


def _dies(task):
    """A worker's task that ends its process (a module's function: the pool pickles it)."""
    import os

    os._exit(9)
