"""Traces read as a stream: the same events as a whole load, the same replay, nothing held."""

import json
import random

import pytest

from ascend_memsim import MiB, OutOfDeviceMemory, Runtime
from ascend_memsim.cli import main
from ascend_memsim.memory.errors import TraceFormatError
from ascend_memsim.observe import stream as stream_module
from ascend_memsim.observe.plain import safe_unpickle
from ascend_memsim.observe.replay import replay, smallest_capacity
from ascend_memsim.observe.snapshot import memory_viz_bytes
from ascend_memsim.observe.stream import Event, open_trace
from ascend_memsim.observe.trace import Recorder, dumps_rmm_csv, load


def _recorded(stacks=True):
    # a block left live for the reset event: the sanitizer's leak report is not wanted
    with Runtime("A2", hbm_bytes=16 * MiB, sanitizer="off") as rt, \
            Recorder(rt, stacks=stacks) as rec:
        rt.set_device(0)
        a = rt.malloc(100)
        b = rt.malloc(3 * MiB, 1)
        with pytest.raises(OutOfDeviceMemory):
            rt.malloc(64 * MiB, 1)
        rt.free(a)
        rt.free(b)
        rt.malloc(5 * MiB)
        rt.reset_device(0)
    return rec.trace


BAD_JSONL = "\n".join([
    json.dumps({"format": "ascend-memsim-trace", "version": 1, "product": "A2"}),
    json.dumps({"event": "malloc", "size": 64, "ptr": 4096, "device": 0}),
    '{"event": "malloc", "size": 6', "[1, 2]", "", "   ",
    json.dumps({"event": "malloc", "size": -1, "ptr": 1}),
    '{"event": "malloc", "size": ' + "9" * 5000 + ', "ptr": 1}',
    "[" * 100000 + "]" * 100000,
    json.dumps({"event": "malloc", "size": 100, "ptr": 1, "stream": [1]}),
    json.dumps({"event": "malloc", "size": 64, "ptr": 1, "module": 16}),
    json.dumps({"event": "malloc", "size": 64, "ptr": 8, "stream": "s1", "module": 300}),
    json.dumps({"event": "malloc", "size": 64, "ptr": 9, "api": None, "policy": 2}),
    json.dumps({"event": "malloc_failed", "size": 0}),
    json.dumps({"event": "free", "ptr": 4096, "stream": True}),
    json.dumps({"event": "custom", "device": 1, "note": [1, "x"]}) + "  ",
    json.dumps({"event": "free", "ptr": 4096}),
]) + "\n"

BAD_RMM = ("Thread,Time,Action,Pointer,Size,Stream\n"
           "1,t,allocate,0x40,64,0\n"
           "1,t,allocate,0x80\n"
           "1,t,explode,0x80,64,0\n"
           "1,t,allocate,0x40," + "1" * 200_000 + ",0\n"
           "2,t,allocate,485,64,0x10\n"
           "\n"
           "1,t,allocate failure,(nil),99,0\n"
           "1,t,free,0x40,64,0\n")


def _files(tmp_path):
    """One file of every format load reads: name -> path."""
    trace = _recorded()
    out = {}
    out["jsonl"] = tmp_path / "t.jsonl"
    trace.save(str(out["jsonl"]))
    out["bad.jsonl"] = tmp_path / "bad.jsonl"
    out["bad.jsonl"].write_text(BAD_JSONL)
    out["rmm.csv"] = tmp_path / "rmm.csv"
    out["rmm.csv"].write_text(dumps_rmm_csv(trace))
    out["bad.csv"] = tmp_path / "bad.csv"
    out["bad.csv"].write_text(BAD_RMM)
    pickled = memory_viz_bytes(trace.events, trace.header)
    out["pickle"] = tmp_path / "snap.pickle"
    out["pickle"].write_bytes(pickled)
    snapshot = safe_unpickle(pickled)
    out["indented.json"] = tmp_path / "snap.json"
    out["indented.json"].write_text(json.dumps(snapshot, indent=2))
    out["one-line.json"] = tmp_path / "snap1.json"
    out["one-line.json"].write_text(json.dumps(snapshot))
    return {k: str(v) for k, v in out.items()}


def test_streaming_gives_what_a_whole_load_gives_in_every_format(tmp_path):
    for kind, path in _files(tmp_path).items():
        whole = load(path)
        stream = open_trace(path)
        assert stream.header == whole.header, kind
        for _ in range(2):   # each pass reads the file again
            events = list(stream)
            assert [e.as_dict() for e in events] == whole.events, kind
            assert [e.line for e in events] == whole.lines, kind
            assert stream.problems == whole.problems, kind
            assert stream.events == len(whole.events)
        assert stream.load().events == whole.events
        assert stream.kind == {"rmm.csv": "rmm-csv", "bad.csv": "rmm-csv", "jsonl": "jsonl",
                               "bad.jsonl": "jsonl"}.get(kind, "snapshot")
        for event, fields in zip(events, whole.events):
            assert event.get("event") == fields["event"]
            assert all(event.get(k) == (tuple(v) if k == "stack" else v)
                       for k, v in fields.items())
            assert event.get("no such field", 7) == 7
    # eight bad lines, and a malloc whose "api" is null, which the schema's enum refuses
    assert len(load(_files(tmp_path)["bad.jsonl"]).problems) == 9


def test_records_share_stacks_and_names(tmp_path):
    path = tmp_path / "t.jsonl"
    with Runtime("A2", hbm_bytes=16 * MiB) as rt, Recorder(rt, stacks=True) as rec:
        rt.set_device(0)
        for _ in range(3):
            rt.free(rt.malloc(100))   # one line: one stack for every malloc
    rec.trace.save(str(path))
    mallocs = [e for e in open_trace(str(path)) if e.kind == "malloc"]
    assert len(mallocs) == 3 and isinstance(mallocs[0].stack, tuple)
    assert mallocs[0].stack is mallocs[1].stack is mallocs[2].stack
    assert mallocs[0].api is mallocs[2].api and mallocs[0].kind is mallocs[1].kind
    assert Event.of({"event": "free", "ptr": 64}).as_dict() == {"event": "free", "ptr": 64,
                                                               "device": 0}


def test_strict_and_unknown_formats_are_refused_as_by_load(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(BAD_JSONL)
    with pytest.raises(TraceFormatError, match=r"bad\.jsonl:3"):
        list(open_trace(str(bad), strict=True))
    noise = tmp_path / "noise.txt"
    noise.write_text("hello\nworld\n")
    with pytest.raises(TraceFormatError, match="not a trace in any known format"):
        open_trace(str(noise))
    with pytest.raises(TraceFormatError, match="not a trace in any known format"):
        load(str(noise))
    binary = tmp_path / "b.jsonl"
    binary.write_bytes(b'{"event": "free", "ptr": 64, "note": "\xff"}\n')
    (event,) = open_trace(str(binary))
    assert event.rest == {"note": "\ufffd"}


def _result_fields(result):
    failure = result.first_failure
    return (result.replayed, result.total, result.mallocs, result.frees, result.failures,
            result.peak_bytes, result.peak_index, result.peak_by_stream, result.high_water,
            result.peak_sites, result.problems, result.skipped, result.recorded_failures,
            result.recorded_failures_now_fit,
            failure and (failure.index, failure.line, failure.event, failure.message))


def _churn(path, events, seed=3, stacks=False):
    """A training-loop-like trace written line by line: LIFO-ish frees, two streams."""
    rng = random.Random(seed)
    live = []
    ptr = 1 << 40
    with open(path, "w") as f:
        f.write(json.dumps({"format": "ascend-memsim-trace", "version": 1,
                            "product": "A2"}) + "\n")
        for seq in range(events):
            if live and (rng.random() < 0.47 or len(live) > 200):
                p, stream = live.pop(len(live) - 1 - min(len(live) - 1,
                                                         int(rng.expovariate(1.5))))
                record = {"event": "free", "ptr": p, "stream": stream}
            else:
                ptr += 4096
                stream = rng.choice((0, 1, "s2"))
                record = {"event": "malloc", "size": rng.choice((512, 4096, 1 << 20)) *
                          rng.randint(1, 8), "ptr": ptr, "stream": stream, "policy": 0,
                          "api": "aclrtMalloc"}
                if stacks:
                    record["stack"] = [f"train.py:{rng.randint(1, 5)} in step"]
                live.append((ptr, stream))
            record.update(seq=seq, device=0)
            f.write(json.dumps(record) + "\n")


def test_replay_of_a_stream_equals_replay_of_the_loaded_list(tmp_path):
    files = _files(tmp_path)
    churn = tmp_path / "churn.jsonl"
    _churn(churn, 3000, stacks=True)
    files["churn"] = str(churn)
    for kind, path in files.items():
        for capacity in (64 * MiB, 6 * MiB):
            whole = replay(load(path), "A2", capacity=capacity, timeline=True,
                           keep_runtime=True)
            streamed = replay(open_trace(path), "A2", capacity=capacity, timeline=True,
                              keep_runtime=True)
            try:
                assert _result_fields(streamed) == _result_fields(whole), (kind, capacity)
                assert streamed.timeline.points == whole.timeline.points
                assert streamed.timeline.failures == whole.timeline.failures
                addresses = [sorted((b.ptr, b.size) for b in r.runtime.device(0).blocks())
                             for r in (whole, streamed)]
                assert addresses[0] == addresses[1]
            finally:
                whole.runtime.close()
                streamed.runtime.close()
    found = [smallest_capacity(source, "A2") for source in (load(str(churn)),
                                                            open_trace(str(churn)))]
    assert found[0].capacity == found[1].capacity and found[0].runs == found[1].runs


class _Counted(Event):
    """An Event that counts how many of its kind are alive."""

    __slots__ = ()
    alive = made = most = 0

    def __init__(self):
        cls = _Counted
        cls.made += 1
        cls.alive += 1
        cls.most = max(cls.most, cls.alive)

    def __del__(self):
        _Counted.alive -= 1


class _Generated:
    """A stream made on the fly: ``events`` malloc/free records, never a list of them."""

    name, header, problems = "<generated>", {"product": "A2"}, []

    def __init__(self, events):
        self.n = events

    def records(self, progress=None):
        rng = random.Random(5)
        live = []
        for index in range(self.n):
            if live and (rng.random() < 0.5 or len(live) > 100):
                fields = {"event": "free", "ptr": live.pop()}
            else:
                live.append(index + 1)
                fields = {"event": "malloc", "ptr": index + 1,
                          "size": 4096 * rng.randint(1, 9)}
            event = _Counted()
            stream_module._Compactor(lambda e=event: e)(fields, index + 1)
            # the replay holds at most the record before this one
            assert _Counted.alive <= 2, (index, _Counted.alive)
            yield event


def test_a_long_trace_is_replayed_without_holding_its_events(tmp_path, monkeypatch):
    _Counted.alive = _Counted.made = _Counted.most = 0
    result = replay(_Generated(30_000), capacity=64 * MiB, timeline=True)
    assert result.replayed == result.total == 30_000 and result.fits
    assert _Counted.made == 30_000 and _Counted.most <= 2 and _Counted.alive == 0
    # the same for a file: the reader makes the counting records
    path = tmp_path / "long.jsonl"
    _churn(path, 20_000)
    stream = open_trace(str(path))
    _Counted.alive = _Counted.made = _Counted.most = 0
    monkeypatch.setattr(stream_module, "Event", _Counted)
    seen = []
    result = replay(stream, capacity=64 * MiB, timeline=True,
                    progress=lambda done, total: seen.append((done, total)))
    assert result.replayed == 20_000 and _Counted.made == 20_000
    assert _Counted.most <= 2, _Counted.most   # the record replayed and the one being read
    size = path.stat().st_size
    assert seen[-1] == (size, size) and len(seen) >= 2
    assert all(0 <= d <= t == size for d, t in seen)


def test_the_timeline_of_a_long_trace_is_bounded_and_keeps_the_peak(tmp_path):
    path = tmp_path / "long.jsonl"
    _churn(path, 30_000)
    result = replay(open_trace(str(path)), capacity=64 * MiB, timeline=True)
    timeline = result.timeline
    assert timeline.bucket > 1 and len(timeline.points) <= 2002
    totals = [sum(by.values()) for _, by in timeline.points]
    assert max(totals) == result.peak_bytes
    peak_point = timeline.points[totals.index(max(totals))]
    assert peak_point[0] == result.peak_index
    indices = [i for i, _ in timeline.points]
    assert indices == sorted(indices) and indices[0] == -1
    exact = replay(load(str(path)), capacity=64 * MiB, keep_runtime=True)
    try:
        live = sum(b.footprint for b in exact.runtime.device(0).blocks())
    finally:
        exact.runtime.close()
    assert totals[-1] == live   # the last point is the state at the end
    out = tmp_path / "p.svg"
    assert main(["plot", str(path), "--quiet", "--capacity", "64MiB", "-o", str(out),
                 "--what", "timeline"]) == 0
    assert f"each point the highest of {timeline.bucket} events" in out.read_text()


def test_map_and_stats_read_the_stream(tmp_path, capsys):
    path = tmp_path / "churn.jsonl"
    _churn(path, 2000)
    assert main(["map", str(path), "--quiet", "--capacity", "64MiB", "--at", "end"]) == 0
    assert "at the end" in capsys.readouterr().out
    assert main(["map", str(path), "--quiet", "--capacity", "64MiB", "--at", "2000"]) != 0
    assert "it has 2000 events" in capsys.readouterr().err
    assert main(["stats", str(path), "--quiet", "--capacity", "64MiB"]) == 0
    assert "replayed 2000 of 2000 events" in capsys.readouterr().out


def test_a_terminal_gets_a_progress_bar_for_reading_and_replaying(tmp_path):
    import io

    from ascend_memsim.observe.replay import tty_progress

    class Tty(io.StringIO):
        def isatty(self):
            return True

    path = tmp_path / "churn.jsonl"
    _churn(path, 40_000)
    assert tty_progress(io.StringIO()) is None    # not a terminal: nothing drawn
    screen = Tty()
    replay(open_trace(str(path)), capacity=64 * MiB, progress=tty_progress(screen))
    drawn = screen.getvalue()
    assert "replay   0%" not in drawn.split("\r")[-1] and drawn.endswith("replay 100%\n")
    assert drawn.count("\r") >= 3
    screen = Tty()
    smallest_capacity(open_trace(str(path)), "A2", progress=tty_progress(screen))
    assert "bisection: replay 1, 100%" in screen.getvalue()
    assert "bisection: replay 2, " in screen.getvalue()
