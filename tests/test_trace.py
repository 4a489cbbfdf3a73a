"""Traces: recording, JSON Lines round trip, RMM CSV import, bad input."""

import io
import json

import pytest

from ascend_memsim import InvalidArgument, MiB, OutOfDeviceMemory, Runtime
from ascend_memsim.observe.trace import Recorder, TraceFormatError, load, loads, read_rmm_csv


def _record(stacks=False):
    with Runtime("A2", hbm_bytes=16 * MiB) as rt, Recorder(rt, stacks=stacks) as rec:
        rt.set_device(0)
        a = rt.malloc(100)
        b = rt.malloc(3 * MiB, 1)
        with pytest.raises(OutOfDeviceMemory):
            rt.malloc(64 * MiB, 1)
        rt.free(a)
        rt.reset_device(0)
    return rec.trace, b


def test_recorder_records_every_event_with_sequence_numbers():
    trace, b = _record()
    kinds = [e["event"] for e in trace.events]
    assert kinds == ["set_device", "malloc", "malloc", "malloc_failed", "free", "reset",
                     "reset_device"]
    assert [e["seq"] for e in trace.events] == list(range(7))
    malloc = trace.events[2]
    assert malloc["api"] == "aclrtMalloc" and malloc["policy"] == 1
    assert malloc["footprint"] == 4 * MiB and malloc["page"] == "huge" and malloc["ptr"] == b
    assert malloc["fallback"] is False and malloc["thread"] == 0 and malloc["device"] == 0
    failed = trace.events[3]
    assert failed["code"] == 207001 and "no fallback" in failed["error"]
    assert trace.events[5]["leaked"] == [b]
    assert trace.header["product"] == "A2" and trace.header["hbm_bytes"] == 16 * MiB


def test_save_load_round_trip(tmp_path):
    trace, _ = _record()
    path = tmp_path / "t.jsonl"
    trace.save(str(path))
    again = load(str(path))
    assert again.events == trace.events
    assert again.header["product"] == "A2" and not again.problems
    assert again.lines == list(range(2, 2 + len(trace.events)))


def test_stacks_name_the_callers_file():
    trace, _ = _record(stacks=True)
    malloc = trace.events[1]
    assert any("test_trace.py" in frame for frame in malloc["stack"])
    assert not any("ascend_memsim" in frame for frame in malloc["stack"])


def test_unknown_events_are_recorded_generically(a2):
    class Stream:
        handle = 7

    with Recorder(a2) as rec:
        rec("memcpy", a2.device(0), {"dst": 1, "src": 2, "count": 3, "kind": 1,
                                     "stream": Stream()})
        rec("something_new", a2.device(0), {"what": object()})
    memcpy, other = rec.trace.events
    assert memcpy["stream"] == 7 and memcpy["count"] == 3 and memcpy["event"] == "memcpy"
    assert other["what"].startswith("<object")
    json.loads(rec.trace.dumps().splitlines()[-1])


RMM_SAMPLE = """Thread,Time,Action,Pointer,Size,Stream
140573312345856,10:30:45.123456,allocate,0x7f8a40000000,1024,0x7f8a38001020
140573312345856,10:30:45.234567,allocate,0x7f8a40000400,2048,0x0
140573312345999,10:30:45.245678,allocate failure,0x0,4096,0x7f8a38001020
140573312345856,10:30:45.345678,free,0x7f8a40000000,1024,0x7f8a38001020
"""


def test_rmm_csv_import(tmp_path):
    path = tmp_path / "rmm_log.csv"
    path.write_text(RMM_SAMPLE)
    trace = load(str(path))
    assert not trace.problems
    kinds = [e["event"] for e in trace.events]
    assert kinds == ["malloc", "malloc", "malloc_failed", "free"]
    first = trace.events[0]
    assert first["ptr"] == 0x7F8A40000000 and first["size"] == 1024
    assert first["stream"] == 0x7F8A38001020 and trace.events[1]["stream"] == 0
    assert [e["thread"] for e in trace.events] == [0, 0, 1, 0]
    assert trace.lines == [2, 3, 4, 5]


def test_rmm_deallocate_spelling_is_read():
    trace = read_rmm_csv(["Thread,Time,Action,Pointer,Size,Stream",
                          "1,0.5,allocate,0x40,64,0", "1,0.6,deallocate,0x40,64,0"])
    assert [e["event"] for e in trace.events] == ["malloc", "free"]


def test_bad_rmm_lines_are_reported_with_line_numbers():
    text = ("Thread,Time,Action,Pointer,Size,Stream\n"
            "1,t,allocate,0x40,64,0\n"
            "1,t,allocate,0x80\n"             # truncated
            "1,t,explode,0x80,64,0\n"         # unknown action
            "1,t,allocate,0x80,-5,0\n"        # negative size
            "1,t,allocate,zzz,64,0\n")        # bad pointer
    trace = loads(text, "log.csv")
    assert len(trace.events) == 1
    assert [p.split(":")[1] for p in trace.problems] == ["3", "4", "5", "6"]
    assert "truncated" in trace.problems[0] and "unknown action 'explode'" in trace.problems[1]
    assert "negative size -5" in trace.problems[2]
    with pytest.raises(TraceFormatError, match=r"log\.csv:3"):
        loads(text, "log.csv", strict=True)


def test_bad_json_lines_are_reported_with_line_numbers():
    good = json.dumps({"event": "malloc", "size": 64, "ptr": 4096, "device": 0})
    text = "\n".join([good, '{"event": "malloc", "size": 6', '[1, 2]',
                      json.dumps({"event": "malloc", "size": -1, "ptr": 1}),
                      json.dumps({"size": 3}), json.dumps({"event": "free", "ptr": "x"}),
                      json.dumps({"format": "ascend-memsim-trace", "version": 99})])
    trace = loads(text, "t.jsonl")
    assert len(trace.events) == 1
    assert [p.split(":")[1] for p in trace.problems] == ["2", "3", "4", "5", "6", "7"]
    assert "truncated" in trace.problems[0]
    assert "size=-1 is below 1" in trace.problems[2]
    with pytest.raises(TraceFormatError, match=r"t\.jsonl:2"):
        loads(text, "t.jsonl", strict=True)


def test_unreadable_file_is_a_clear_error(tmp_path):
    with pytest.raises(InvalidArgument, match="cannot read trace"):
        load(str(tmp_path / "missing.jsonl"))
    empty = loads("Thread,Time,Action,Pointer,Size,Stream\n")
    assert not empty.events and not empty.problems


def test_unreadable_or_ill_typed_json_lines_are_problems_not_crashes():
    lines = ['{"event": "malloc", "size": ' + "9" * 5000 + ', "ptr": 1}',    # int() digit limit
             "[" * 100000 + "]" * 100000,                                    # nested too deeply
             json.dumps({"event": "malloc", "size": 100, "ptr": 1, "stream": [1]}),
             json.dumps({"event": "free", "ptr": 1, "stream": {"a": 1}}),
             json.dumps({"event": "malloc", "size": 0, "ptr": 1}),
             json.dumps({"event": "malloc", "size": 64, "ptr": 1, "module": "APP"}),
             json.dumps({"event": "malloc", "size": 64, "ptr": 1, "module": 16}),
             json.dumps({"event": "malloc", "size": 64, "ptr": 1, "policy": 1 << 40}),
             json.dumps({"event": "malloc", "size": 64, "ptr": 1, "stream": "s1",
                         "module": 300}),
             json.dumps({"event": "malloc_failed", "size": 0})]
    trace = loads("\n".join(lines), "t.jsonl")
    assert [p.split(":")[1] for p in trace.problems] == [str(n) for n in range(1, 9)]
    assert "cannot read the line" in trace.problems[0]
    assert "nested too deeply" in trace.problems[1]
    assert "'stream' must be null, an integer or a string" in trace.problems[2]
    assert "size=0 is below 1" in trace.problems[4]
    assert "'module' must be an integer" in trace.problems[5]
    assert "module id 16 has no entry" in trace.problems[6]
    assert "policy=1099511627776 is above 0xffffffff" in trace.problems[7]
    assert trace.lines == [9, 10]           # module > 255 counts as APP; a failure of size 0
    with pytest.raises(TraceFormatError, match=r"t\.jsonl:1: cannot read"):
        loads("\n".join(lines), "t.jsonl", strict=True)


def test_bad_rmm_rows_csv_errors_negative_and_decimal_looking_pointers():
    text = ("Thread,Time,Action,Pointer,Size,Stream\n"
            "1,t,allocate,0x40," + "1" * 200_000 + ",0\n"   # larger than the csv field limit
            "1,t,allocate,0x1e5,64,0\n"                      # 0x-prefixed: hexadecimal
            "1,t,free,-64,64,0\n"                            # negative pointer
            "1,t,allocate,1e5,64,0\n"                        # neither decimal nor 0x hex
            "1,t,allocate,485,64,0\n")                       # decimal
    trace = loads(text, "log.csv")
    assert [p.split(":")[1] for p in trace.problems] == ["2", "4", "5"]
    assert "cannot read the CSV line: field larger than field limit" in trace.problems[0]
    assert "negative pointer -64" in trace.problems[1]
    assert "cannot read the pointer" in trace.problems[2]
    assert [e["ptr"] for e in trace.events] == [0x1E5, 485] and trace.lines == [3, 6]


def test_recorder_header_follows_the_runtime_at_stop():
    from ascend_memsim.memory.profiles import get_profile

    with Runtime("A2", hbm_bytes=16 * MiB) as rt:
        rec = Recorder(rt)
        rec.start()
        rt.profile = get_profile("950PR")      # as acl.init may, before any device exists
        rec.stop()
    assert rec.trace.header["product"] == "950PR"


# -- every field checked against the trace's own schema, once, where the trace is read ---------

GOOD_MALLOC = {"event": "malloc", "size": 100, "ptr": 4096, "device": 0, "stream": None,
               "api": "aclrtMallocAlign32", "policy": 1, "module": 33, "seq": 0, "thread": 0,
               "rule_size": 128, "footprint": 2 * MiB, "page": "huge", "memory": "HBM",
               "fallback": False, "stack": ["t.py:1 in f"]}
BAD_FIELDS = [("stack", [["x"]]), ("stack", None), ("stack", 5), ("stack", "t.py:1 in f"),
              ("device", 100_000_000), ("device", 64), ("device", -1), ("device", "0"),
              ("stream", [1]), ("stream", True), ("api", "aclrtFree"), ("api", None),
              ("policy", 1 << 32), ("policy", "0"), ("module", -1), ("size", 0),
              ("size", 1.5), ("ptr", 0), ("seq", -1), ("thread", "main"),
              ("rule_size", -1), ("footprint", None), ("page", "giant"), ("memory", "L2"),
              ("fallback", 0), ("code", "207001"), ("error", 5), ("leaked", [0]),
              ("leaked", 5), ("event", ""), ("format", "other")]


def test_every_field_the_schema_names_is_checked_when_read():
    from test_trace_schema import errors

    good = json.dumps(GOOD_MALLOC)
    assert not errors(GOOD_MALLOC)
    lines = [good] + [json.dumps({**GOOD_MALLOC, key: value}) for key, value in BAD_FIELDS]
    trace = loads("\n".join(lines), "t.jsonl")
    assert trace.events == [GOOD_MALLOC]
    assert len(trace.problems) == len(BAD_FIELDS)
    for number, ((key, value), problem) in enumerate(zip(BAD_FIELDS, trace.problems), 2):
        # the schema refuses each line too, and the problem names the line
        assert errors({**GOOD_MALLOC, key: value}), (key, value)
        assert problem.startswith(f"t.jsonl:{number}: "), problem
    assert "frame 0 is a list of 1 item" in trace.problems[0]
    assert "device 100000000 is outside [0, 64)" in trace.problems[4]


def test_the_fast_check_of_common_lines_agrees_with_the_full_one():
    from ascend_memsim.observe.fields import _check_event, _valid

    free = {"event": "free", "ptr": 4096, "device": 0, "size": 100, "footprint": 192,
            "seq": 1, "thread": 0, "stream": "s", "stack": []}
    for base in (GOOD_MALLOC, free):
        assert _valid(dict(base)) and _check_event(dict(base), "t") == base
        for key, value in BAD_FIELDS:
            record = {**base, key: value}
            if _valid(dict(record)):
                # the fast path passes only what the full check passes unchanged
                assert _check_event(dict(record), "t") == record, (key, value)


def test_trace_warnings_read_as_file_diagnostics_not_acl_errors(tmp_path, capsys):
    from ascend_memsim.cli import main

    path = tmp_path / "t.jsonl"
    path.write_text('{"event": "malloc", "size": -1, "ptr": 1}\n'
                    '{"event": "malloc", "size": 64, "ptr": 1}\n')
    assert main(["stats", str(path), "--quiet"], out=io.StringIO()) == 0
    err = capsys.readouterr().err
    assert f"warning: {path}:1: size=-1 is below 1\n" in err
    assert "ACL_ERROR" not in err and "100000" not in err
    assert "[ACL" not in loads("x\n{\"event\": \"free\", \"ptr\": 1}").problems[0]
