"""PyTorch / torch_npu memory snapshots in (pickle and JSON), memory_viz and RMM CSV out.

The snapshot files here are written in torch's layout by hand (torch is not a dependency):
the keys of torch/csrc/cuda/Module.cpp and torch_npu/csrc/npu/Module.cpp memorySnapshot.
"""

import io
import itertools
import json
import os
import pickle
import pickletools
import re
import struct
import tracemalloc

import pytest
from work_budget import within_budget

from ascend_memsim import InvalidArgument, MiB, OutOfDeviceMemory, Runtime
from ascend_memsim.cli import main
from ascend_memsim.observe.plain import SnapshotError, safe_unpickle
from ascend_memsim.observe.replay import replay
from ascend_memsim.observe.snapshot import PICKLE_PROTOCOL, to_memory_viz
from ascend_memsim.observe.trace import (
    Recorder,
    TraceFormatError,
    dumps_rmm_csv,
    from_snapshot,
    load,
    rmm_csv_lines,
)

BASE = 0x7F0000000000
FRAMES = [{"filename": "model.py", "line": 42, "name": "forward"},
          {"filename": "train.py", "line": 7, "name": "main"}]


def torch_snapshot():
    """A snapshot as torch.cuda.memory._snapshot() returns it (CUDA and torch_npu keys)."""
    seg = {"device": 0, "address": BASE, "total_size": 2 * MiB, "allocated_size": 512,
           "active_size": 512, "requested_size": 500, "stream": 0, "segment_type": "small",
           "segment_pool_id": (0, 0), "is_expandable": False, "frames": [],
           "blocks": [{"address": BASE, "size": 512, "requested_size": 500,
                       "state": "active_allocated", "frames": FRAMES},
                      {"address": BASE + 512, "size": 2 * MiB - 512, "requested_size": 0,
                       "state": "inactive", "frames": []}]}
    trace = [
        {"action": "segment_alloc", "addr": BASE + 4 * MiB, "size": 20 * MiB, "stream": 0,
         "time_us": 10, "frames": FRAMES},
        {"action": "alloc", "addr": BASE + 4 * MiB, "size": 512, "stream": 0, "time_us": 11},
        {"action": "free_requested", "addr": BASE + 4 * MiB, "size": 512, "stream": 0,
         "time_us": 12},
        {"action": "free_completed", "addr": BASE + 4 * MiB, "size": 512, "stream": 0,
         "time_us": 13},
        {"action": "segment_free", "addr": BASE + 4 * MiB, "size": 20 * MiB, "stream": 0,
         "time_us": 14},
        {"action": "workspace_snapshot", "addr": 0, "size": 0, "stream": 0, "time_us": 15},
        {"action": "oom", "device_free": 1024, "size": 1 << 40, "stream": 0, "time_us": 16},
    ]
    return {"segments": [seg], "device_traces": [trace],
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": ""}}


def run(*argv):
    out = io.StringIO()
    return main(list(argv), out=out), out.getvalue()


def test_a_dump_snapshot_pickle_becomes_malloc_and_free_events(tmp_path):
    path = tmp_path / "snap.pickle"
    path.write_bytes(pickle.dumps(torch_snapshot()))         # _dump_snapshot: pickle.dump
    trace = load(str(path))
    assert not trace.problems
    kinds = [(e["event"], e.get("ptr"), e["size"]) for e in trace.events]
    # the live segment older than the ring buffer first, then the segment calls in time order
    assert kinds == [("malloc", BASE, 2 * MiB), ("malloc", BASE + 4 * MiB, 20 * MiB),
                     ("free", BASE + 4 * MiB, 20 * MiB), ("malloc_failed", None, 1 << 40)]
    malloc = trace.events[1]
    assert malloc["stack"] == ["train.py:7 in main", "model.py:42 in forward"]
    assert malloc["stream"] is None and malloc["device"] == 0
    assert malloc["api"] == "aclrtMallocAlign32" and malloc["policy"] == 0
    assert "1024 bytes free" in trace.events[3]["error"]
    assert trace.header["ignored_actions"] == {"alloc": 1, "free_completed": 1,
                                               "free_requested": 1, "workspace_snapshot": 1}


def test_the_same_snapshot_as_json_gives_the_same_events(tmp_path):
    pickled, as_json = tmp_path / "s.pickle", tmp_path / "s.json"
    pickled.write_bytes(pickle.dumps(torch_snapshot(), protocol=4))
    as_json.write_text(json.dumps(torch_snapshot(), indent=2))
    assert load(str(as_json)).events == load(str(pickled)).events


def test_without_device_traces_the_segments_are_the_live_set(tmp_path):
    snap = torch_snapshot()
    del snap["device_traces"]
    snap["segments"].append(dict(snap["segments"][0], address=BASE + 64 * MiB, device=1,
                                 total_size=20 * MiB, frames=FRAMES))
    path = tmp_path / "s.pickle"
    path.write_bytes(pickle.dumps(snap))
    trace = load(str(path))
    assert [(e["event"], e["device"], e["size"]) for e in trace.events] == [
        ("malloc", 0, 2 * MiB), ("malloc", 1, 20 * MiB)]
    assert trace.events[1]["stack"][-1] == "model.py:42 in forward"
    # the old torch_npu form: a bare list of segments
    path.write_bytes(pickle.dumps(snap["segments"]))
    assert len(load(str(path)).events) == 2


def test_a_free_of_a_segment_older_than_the_ring_buffer_allocates_it_first(tmp_path):
    snap = {"segments": [], "device_traces": [[
        {"action": "segment_free", "addr": BASE, "size": 4 * MiB, "stream": 0}]]}
    path = tmp_path / "s.pickle"
    path.write_bytes(pickle.dumps(snap))
    trace = load(str(path))
    assert [e["event"] for e in trace.events] == ["malloc", "free"]
    assert not replay(trace, "A2").problems


def test_the_unpickler_builds_plain_data_only(tmp_path):
    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self):
            return (os.mkdir, (str(marker),))

    path = tmp_path / "evil.pickle"
    path.write_bytes(pickle.dumps({"segments": [Evil()]}))
    with pytest.raises(TraceFormatError, match=r"refers to posix\.mkdir|refers to os\.mkdir"):
        load(str(path))
    assert not marker.exists()
    code, _ = run("replay", str(path))
    assert code == 2 and not marker.exists()
    with pytest.raises(SnapshotError, match="truncated"):
        safe_unpickle(pickle.dumps(torch_snapshot())[:50])
    # sets and bytes need no class, but are not what a snapshot holds
    for odd in ({1, 2}, b"raw", bytearray(b"x"), frozenset()):
        with pytest.raises(SnapshotError, match=f"holds a {type(odd).__name__}"):
            safe_unpickle(pickle.dumps({"segments": [{"frames": [odd]}]}, protocol=5))


@pytest.mark.parametrize("content", [b'{"hello": 1}', b"\x00\x01binary", b"", b"not a trace\n",
                                     pickle.dumps({"hello": 1}), pickle.dumps([1, 2])])
def test_a_file_in_no_known_format_is_an_error_not_an_empty_trace(tmp_path, content, capsys):
    path = tmp_path / "x.json"
    path.write_bytes(content)
    with pytest.raises(TraceFormatError):
        load(str(path))
    for command in ("replay", "stats", "map", "plot"):
        code, text = run(command, str(path), "--quiet")
        assert code == 2 and "fits" not in text
    assert "not a" in capsys.readouterr().err


def test_replay_bisects_a_snapshot_on_another_product(tmp_path):
    path = tmp_path / "snap.pickle"
    path.write_bytes(pickle.dumps(torch_snapshot()))
    code, text = run("replay", str(path), "--product", "950PR", "--bisect", "--quiet",
                     "--allocator", "none")
    assert code == 0
    # 2 MiB + 20 MiB live at once, each a whole number of huge pages on 950PR (no +32)
    assert "smallest capacity on 950PR that fits the whole trace: 22 MiB" in text


def _recorded(tmp_path):
    # the last block is left for reset_device to discard, on purpose
    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer={"mode": "report", "leaks": False}) as rt, \
            Recorder(rt, stacks=True) as rec:
        rt.set_device(0)
        a = rt.malloc(100)
        b = rt.malloc(2 * MiB)
        with pytest.raises(OutOfDeviceMemory):
            rt.malloc(128 * MiB, 1)
        rt.free(a)
        rt.free(b)
        rt.malloc(3 * MiB)
        rt.reset_device(0)
    path = tmp_path / "t.jsonl"
    rec.trace.save(str(path))
    return rec.trace, path


def _calls(trace):
    """The events replay acts on, as the formats carry them."""
    keep = ("event", "ptr", "size", "device", "stream", "api", "policy", "stack")
    out = []
    for e in trace.events:
        if e["event"] == "reset":       # a reset's discarded blocks come back as frees
            out += [{"event": "free", "ptr": p, "device": e["device"]} for p in e["leaked"]]
        elif e["event"] in ("malloc", "free", "malloc_failed"):
            out.append({k: e[k] for k in keep if k in e and not (e["event"] == "free"
                                                                 and k not in ("event", "ptr",
                                                                               "device"))})
    return out


def test_memory_viz_export_round_trip(tmp_path):
    trace, path = _recorded(tmp_path)
    out = tmp_path / "snap.pickle"
    code, text = run("export", str(path), "--format", "memory-viz", "-o", str(out))
    assert code == 0 and "snap.pickle written" in text
    data = out.read_bytes()
    assert data[:2] == b"\x80" + bytes([PICKLE_PROTOCOL])    # MemoryViz.js reads 2..4 only
    snap = safe_unpickle(data)                               # plain data only
    actions = [e["action"] for e in snap["device_traces"][0]]
    # torch's order for each free; the block the reset discards is freed the same way
    free = ["free_requested", "free_completed", "segment_free"]
    assert actions == ["segment_alloc", "alloc", "segment_alloc", "alloc", "oom",
                       *free, *free, "segment_alloc", "alloc", *free]
    first = snap["device_traces"][0][0]
    assert first["size"] == 192 and first["requested_size"] == 100     # 128 + 32, 64 B pages
    assert first["frames"][0]["name"] == "_recorded"                   # innermost first
    assert snap["device_traces"][0][2]["size"] == 4 * MiB              # 2 MiB + 32 B: 2 pages
    assert snap["segments"] == []                                      # all freed at reset
    again = load(str(out))
    assert _calls(again) == _calls(trace)
    assert replay(again, "A2").peak_bytes == replay(trace, "A2").peak_bytes


def test_memory_viz_segments_hold_blocks_whose_sizes_add_up():
    with Runtime("A2", hbm_bytes=64 * MiB) as rt, Recorder(rt) as rec:
        rt.set_device(0)
        rt.malloc(2 * MiB)
        rt.malloc(100, 2)
        snap = to_memory_viz(rec.trace.events, rec.trace.header)
        rt.reset_device(0)
    assert len(snap["segments"]) == 2
    for seg in snap["segments"]:
        # _memory_viz.segsum asserts free + allocated == total_size
        assert sum(b["size"] for b in seg["blocks"]) == seg["total_size"]
        assert all(b["requested_size"] < b["size"] for b in seg["blocks"])
        assert {"device", "address", "stream", "segment_type", "frames"} <= set(seg)
    assert [s["total_size"] for s in snap["segments"]] == [4 * MiB, 192]


def test_memory_viz_footprint_of_an_unpadded_policy_follows_the_rule():
    """An event without a recorded footprint gets the rules' one: aclrtMallocCached with
    HUGE1G_ONLY_P2P (7) is not padded, so 100 bytes take 128, not 192 (as it was)."""
    event = {"event": "malloc", "ptr": BASE, "size": 100, "api": "aclrtMallocCached",
             "policy": 7, "device": 0, "stream": 0}
    snap = to_memory_viz([event], {"product": "A2"})
    assert [s["total_size"] for s in snap["segments"]] == [128]


def test_memory_viz_refuses_a_malloc_event_it_cannot_place():
    """A malloc event with neither a footprint nor an integer size raises SnapshotError
    naming it (it was a TypeError from the rules' fallback)."""
    for size in (None, "64", 1.5):
        event = {"event": "malloc", "ptr": BASE, "size": size, "device": 0, "stream": 0}
        with pytest.raises(SnapshotError, match="neither a footprint nor an integer size"):
            to_memory_viz([event], {"product": "A2"})
    event = {"event": "malloc", "ptr": BASE, "size": None, "footprint": 2 * MiB, "device": 0}
    assert [s["total_size"] for s in to_memory_viz([event])["segments"]] == [2 * MiB]


RMM_LINE = re.compile(r"^\d+,\d\d:\d\d:\d\d\.\d{6},(allocate,0x[0-9a-f]+|free,0x[0-9a-f]+|"
                      r"allocate failure,\(nil\)),\d+,(0|0x[0-9a-f]+),"
                      r"(aclrtMalloc\w*,0x[0-9a-f]+,\d*|,,)$")


def test_rmm_csv_export_is_rmms_format_and_round_trips(tmp_path):
    trace, path = _recorded(tmp_path)
    out = tmp_path / "log.csv"
    assert run("export", str(path), "--format", "rmm-csv", "-o", str(out))[0] == 0
    lines = out.read_text().splitlines()
    # RMM's six columns, then what RMM cannot say (its reader takes columns by name)
    assert lines[0] == "Thread,Time,Action,Pointer,Size,Stream,Api,Policy,Module"
    assert all(RMM_LINE.match(line) for line in lines[1:]), lines
    assert lines[3].split(",")[2:6] == ["allocate failure", "(nil)", str(128 * MiB), "0"]
    again = load(str(out))
    keep = ("event", "ptr", "size", "stream")
    assert [{k: e[k] for k in keep if k in e} for e in again.events] == [
        {k: (0 if k == "stream" and e[k] is None else e[k]) for k in keep if k in e}
        for e in trace.events if e["event"] in ("malloc", "free", "malloc_failed")]
    # and exporting what was read gives the same file
    assert dumps_rmm_csv(again) == out.read_text()


def test_rmm_csv_export_of_several_devices_needs_a_device(tmp_path):
    with Runtime("A2", hbm_bytes=64 * MiB, device_count=2) as rt, Recorder(rt) as rec:
        for device in (0, 1):
            rt.set_device(device)
            rt.free(rt.malloc(100))
    path = tmp_path / "t.jsonl"
    rec.trace.save(str(path))
    code, _ = run("export", str(path), "--format", "rmm-csv", "-o", str(tmp_path / "x.csv"))
    assert code == 2
    code, _ = run("export", str(path), "--format", "rmm-csv", "--device", "1",
                  "-o", str(tmp_path / "x.csv"))
    assert code == 0 and len((tmp_path / "x.csv").read_text().splitlines()) == 3


def test_an_unreadable_torch_npu_snapshot_says_how_to_fix_it(tmp_path, monkeypatch):
    # torch_npu's _dump_snapshot creates the file with S_IWUSR only; root reads it anyway,
    # so the refusal is simulated
    path = str(tmp_path / "snap.pickle")
    real_open = os.open

    def refuse(name, *args, **kwargs):
        if name == path:
            raise PermissionError(13, "Permission denied", name)
        return real_open(name, *args, **kwargs)

    monkeypatch.setattr(os, "open", refuse)
    with pytest.raises(InvalidArgument, match="chmod u\\+r"):
        load(path)


#: The opcodes torch/utils/viz/MemoryViz.js's unpickler implements (its switch over the
#: opcode byte); any other opcode makes memory_viz refuse the file.
MEMORY_VIZ_OPCODES = set(b"}](ueasdlt)KMJGXN.qrhj") | {0x85, 0x86, 0x87, 0x8A, 0x8C, 0x88, 0x89,
                                                     0x94, 0x95, 0x80}


def test_the_export_uses_only_opcodes_memory_viz_reads(tmp_path):
    _, path = _recorded(tmp_path)
    out = tmp_path / "snap.pickle"
    assert run("export", str(path), "--format", "memory-viz", "-o", str(out))[0] == 0
    used = {op.code.encode("latin-1")[0] for op, _, _ in pickletools.genops(out.read_bytes())}
    assert used <= MEMORY_VIZ_OPCODES, sorted(hex(c) for c in used - MEMORY_VIZ_OPCODES)


# -- hostile pickles: time and memory bounded by the file's size --------------------------------

def _work(fn, *args, budget=200_000):
    """``fn(*args)`` and the function calls it made, stopped past ``budget``."""
    return within_budget(fn, *args, budget=budget)


def test_a_pickle_that_holds_itself_is_refused():
    cycle = []
    cycle.append(cycle)
    through_dict = {"segments": []}
    through_dict["segments"].append({"frames": [through_dict]})
    for obj in ({"segments": cycle}, through_dict):
        data = pickle.dumps(obj, protocol=4)
        with pytest.raises(SnapshotError, match="contains itself"):
            _work(safe_unpickle, data)


def test_shared_lists_are_walked_once():
    shared = []
    for _ in range(40):
        shared = [shared, shared]       # 2**40 paths, 41 distinct lists
    data = pickle.dumps({"segments": shared}, protocol=4)
    obj, calls = _work(safe_unpickle, data)
    assert calls < 2_000
    trace, _ = _work(from_snapshot, obj, "shared.pickle")
    assert not trace.events and len(trace.problems) == 2


def test_a_memo_index_beyond_the_file_is_refused_before_it_is_allocated():
    # CPython sizes the unpickler's memo by the index: this would take 16 MiB, 1 << 26 a GiB
    for bomb in (b"\x80\x04N" + b"r" + struct.pack("<I", 1 << 20) + b".",
                 b"\x80\x02Np1048576\n."):
        with pytest.raises(SnapshotError, match="memo index 1048576"):
            safe_unpickle(bomb)
    # pickles of every protocol store small indices: all read
    value = {"segments": [], "device_traces": [[{"action": "alloc"}] * 3]}
    for protocol in range(6):
        assert safe_unpickle(pickle.dumps(value, protocol=protocol)) == value


def test_a_frame_list_shared_by_many_entries_is_read_once():
    # torch shares one frame list among the entries of one allocation site
    # (torch/csrc/profiler/combined_traceback.cpp, py_symbolize)
    def read(depth):
        frames = [{"filename": f"f{i}.py", "line": i, "name": "g"} for i in range(depth)]
        entries = [{"action": "segment_alloc", "addr": BASE + i * MiB, "size": 512,
                    "stream": 0, "frames": frames} for i in range(500)]
        data = pickle.dumps({"segments": [], "device_traces": [entries]}, protocol=4)
        return _work(from_snapshot, safe_unpickle(data), "s.pickle")

    (_, shallow_calls), (deep, deep_calls) = read(1), read(100)
    assert len(deep.events) == 500 and not deep.problems
    assert deep.events[0]["stack"] is deep.events[499]["stack"]
    assert len(deep.events[0]["stack"]) == 100
    # 100 frames cost what 1 does, plus reading them once (not 500 x 99 frames more)
    assert deep_calls < shallow_calls + 5_000, (shallow_calls, deep_calls)


def test_an_entry_named_twice_by_the_pickle_is_read_once():
    entry = {"action": "segment_alloc", "addr": BASE, "size": 512, "stream": 0}
    segment = {"device": 0, "address": BASE + MiB, "total_size": 512}
    per_device = [entry, entry]
    data = pickle.dumps({"segments": [segment, segment],
                         "device_traces": [per_device, per_device]}, protocol=4)
    trace = from_snapshot(safe_unpickle(data), "s.pickle")
    assert [e["ptr"] for e in trace.events] == [BASE + MiB, BASE]
    assert len(trace.problems) == 3
    assert all("of its own" in p for p in trace.problems)


def test_frame_fields_of_the_wrong_type_read_as_unknown():
    frames = [{"filename": ["a"] * 10, "line": 1 << 5000, "name": 7}]
    snap = {"segments": [{"device": 0, "address": BASE, "total_size": 512,
                          "frames": frames}]}
    trace = from_snapshot(safe_unpickle(pickle.dumps(snap)), "s.pickle")
    assert trace.events[0]["stack"] == ["?:0 in ?"]


def test_an_exported_live_segment_keeps_its_api_and_policy():
    with Runtime("A2", hbm_bytes=64 * MiB) as rt, Recorder(rt) as rec:
        rt.set_device(0)
        rt.malloc_align32(2 * MiB, 2)
        snap = to_memory_viz(rec.trace.events, rec.trace.header)
        rt.reset_device(0)
    snap["device_traces"] = []      # as a snapshot taken without a trace: segments only
    event = from_snapshot(snap, "s").events[0]
    assert (event["api"], event["policy"]) == ("aclrtMallocAlign32", 2)


# -- the RMM log keeps what RMM cannot say -------------------------------------------------

def test_replaying_an_exported_rmm_log_peaks_where_the_recording_does(tmp_path):
    # the recorded run peaks at 8 MiB: aclrtMallocAlign32 adds no 32 bytes, so 2 MiB is one
    # huge page; read back as plain aclrtMalloc each would take two (12 MiB)
    with Runtime("A2", hbm_bytes=64 * MiB) as rt, Recorder(rt) as rec:
        rt.set_device(0)
        blocks = [rt.malloc_align32(2 * MiB), rt.malloc_align32(2 * MiB, 2),
                  rt.malloc(2 * MiB)]
        for ptr in blocks:
            rt.free(ptr)
    path = tmp_path / "t.jsonl"
    rec.trace.save(str(path))
    csv_path = tmp_path / "t.csv"
    assert run("export", str(path), "--format", "rmm-csv", "-o", str(csv_path))[0] == 0
    original = replay(load(str(path)))
    again = replay(load(str(csv_path)), "A2", capacity=64 * MiB)
    assert original.peak_bytes == again.peak_bytes == 8 * MiB
    assert [(e["api"], e["policy"]) for e in load(str(csv_path)).events
            if e["event"] == "malloc"] == [("aclrtMallocAlign32", 0),
                                           ("aclrtMallocAlign32", 2), ("aclrtMalloc", 0)]
    # RMM's six columns alone (a log RMM wrote): aclrtMalloc with HUGE_FIRST
    plain = tmp_path / "rmm.csv"
    plain.write_text("".join(",".join(line.split(",")[:6]) + "\n"
                             for line in csv_path.read_text().splitlines()))
    assert replay(load(str(plain)), "A2", capacity=64 * MiB).peak_bytes == 12 * MiB
    # replay --api sets one API for every malloc
    assert replay(load(str(plain)), "A2", capacity=64 * MiB,
                  api="aclrtMallocAlign32").peak_bytes == 6 * MiB


def test_the_rmm_log_is_written_as_the_trace_is_read():
    endless = ({"event": "malloc", "size": 64, "ptr": 64 * (i + 1), "device": 0}
               for i in itertools.count())
    lines = list(itertools.islice(rmm_csv_lines(endless), 4))
    assert lines[0].startswith("Thread,Time,Action,Pointer,Size,Stream,")
    assert lines[3].split(",")[2:4] == ["allocate", "0xc0"]


def test_an_export_stopped_by_a_second_device_leaves_no_file(tmp_path):
    trace = "\n".join(json.dumps({"event": "malloc", "size": 64, "ptr": 64, "device": d})
                      for d in (0, 1)) + "\n"
    path = tmp_path / "t.jsonl"
    path.write_text(trace)
    out = tmp_path / "t.csv"
    code, _ = run("export", str(path), "--format", "rmm-csv", "-o", str(out))
    assert code == 2 and not out.exists()


def test_exporting_an_rmm_log_takes_memory_independent_of_the_trace_length(tmp_path):
    def peak(events):
        path = tmp_path / f"t{events}.jsonl"
        with open(path, "w") as f:
            for i in range(events // 2):
                f.write(json.dumps({"event": "malloc", "size": 64, "ptr": 64 * (i + 1)})
                        + "\n" + json.dumps({"event": "free", "ptr": 64 * (i + 1)}) + "\n")
        tracemalloc.start()
        try:
            assert run("export", str(path), "--format", "rmm-csv", "-o",
                       str(tmp_path / "o.csv"), "--device", "0")[0] == 0
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    peak(100)       # the first run imports what export uses
    small, large = peak(1_000), peak(8_000)
    # eight times the events, well under twice the memory (the whole trace would be eight)
    assert large < 2 * small, (small, large)


def test_max_entries_keeps_the_last_entries_as_torchs_ring_buffer(tmp_path):
    with Runtime("A2", hbm_bytes=64 * MiB) as rt, Recorder(rt) as rec:
        rt.set_device(0)
        kept = rt.malloc_align32(2 * MiB)
        for _ in range(50):
            rt.free(rt.malloc(100))
        last = rt.malloc(3 * MiB)
    path = tmp_path / "t.jsonl"
    rec.trace.save(str(path))
    out = tmp_path / "ring.pickle"
    assert run("export", str(path), "--format", "memory-viz", "--max-entries", "7",
               "-o", str(out))[0] == 0
    snap = safe_unpickle(out.read_bytes())
    assert len(snap["device_traces"][0]) == 7
    assert [s["address"] for s in snap["segments"]] == sorted([kept, last])
    # read back: the block live before the kept entries is allocated first, with its API
    again = load(str(out))
    first = again.events[0]
    assert (first["ptr"], first["api"]) == (kept, "aclrtMallocAlign32")
    assert replay(again, "A2", capacity=64 * MiB).peak_bytes == \
        replay(rec.trace, "A2", capacity=64 * MiB).peak_bytes
    assert run("export", str(path), "--format", "memory-viz", "--max-entries", "0",
               "-o", str(tmp_path / "x.pickle"))[0] == 2


def test_a_snapshot_header_field_of_the_wrong_type_is_a_problem_naming_the_file():
    snap = {"segments": [{"device": 0, "address": BASE, "total_size": 512}],
            "memsim": {"product": 5, "hbm_bytes": 64 * MiB}}
    trace = from_snapshot(snap, "snap.pickle")
    assert trace.problems == ["snap.pickle: 'memsim': header 'product' must be a string, "
                              "got 5; the recorded product and capacity are ignored"]
    assert "product" not in trace.header and replay(trace, "A2").fits


def test_workspace_segments_replay_with_huge_only():
    """A segment named by a ``workspace_snapshot`` entry is the workspace allocator's:
    torch_npu took it with AclrtMallocAlign32(..., ACL_MEM_MALLOC_HUGE_ONLY)
    (NPUWorkspaceAllocator.cpp malloc), the caching allocator's with HUGE_FIRST."""
    from ascend_memsim.allocators import NpuCachingAllocator
    from ascend_memsim.observe.snapshot import read_snapshot

    with Runtime("A2", hbm_bytes=256 * MiB, sanitizer="off") as rt:
        alloc = NpuCachingAllocator(rt)
        alloc.record_history()
        alloc.malloc(1 * MiB)
        w = alloc.workspace.malloc(3 * MiB)
        snap = alloc.memory_snapshot()
    events, _header, problems = read_snapshot(snap)
    assert problems == []
    policy = {e["ptr"]: e["policy"] for e in events if e["event"] == "malloc"}
    assert policy[w] == 1 and len(policy) == 2
    # the caching allocator's segment (the one holding x) keeps HUGE_FIRST
    assert [policy[p] for p in policy if p != w] == [0]


WIDE = 1 << 100_000


def _wide_snapshot(field):
    """A snapshot whose ``field`` (of its segment_alloc entry, or of its segment) is an
    integer of 100,000 bits; the other entry and segment are good."""
    entry = {"action": "segment_alloc", "addr": BASE, "size": 4 * MiB, "stream": 0}
    seg = {"device": 0, "address": BASE + 64 * MiB, "total_size": 2 * MiB, "stream": 0,
           "blocks": []}
    (seg if field == "total_size" else entry)[field] = WIDE
    good = {"action": "segment_alloc", "addr": BASE + 8 * MiB, "size": 2 * MiB, "stream": 0}
    return {"segments": [seg], "device_traces": [[entry, good]]}


@pytest.mark.parametrize("field", ["size", "module", "total_size", "time_us"])
@pytest.mark.parametrize("form", ["pickle", "json"])
def test_an_integer_wider_than_64_bits_is_named_with_its_field_and_file(tmp_path, capsys,
                                                                        field, form):
    snap = _wide_snapshot(field)
    path = tmp_path / f"wide.{form}"
    if form == "pickle":
        path.write_bytes(pickle.dumps(snap, protocol=4))
    else:
        import sys
        old = sys.get_int_max_str_digits()
        sys.set_int_max_str_digits(0)
        try:
            path.write_text(json.dumps(snap))
        finally:
            sys.set_int_max_str_digits(old)
    trace = load(str(path))
    where = "segments[0]" if field == "total_size" else "device_traces[0][0]"
    assert trace.problems == [f"{path}: {where}: field '{field}' is an integer of "
                              + ("100001 bits" if form == "pickle" else "30103 digits")
                              + "; every integer of a snapshot fits in 64 bits (damaged or "
                                "hostile); ignored"]
    code, text = run("replay", str(path), "--quiet")
    err = capsys.readouterr().err
    assert code == 0 and "Exceeds the limit" not in text + err
    assert f"warning: {path}: {where}: field '{field}'" in err
    assert "2 mallocs, 0 frees, 0 failed" in text     # the good entry and segment replay


def test_tensor_entries_with_fields_outside_64_bits_are_named(tmp_path):
    from ascend_memsim.observe.tensor_replay import replay_tensors

    entries = [{"action": "alloc", "addr": WIDE, "size": 512, "stream": 0},
               {"action": "alloc", "addr": BASE, "size": WIDE, "stream": 0},
               {"action": "alloc", "addr": BASE + 1024, "size": 512, "stream": [1]},
               {"action": "free_completed", "addr": [BASE], "size": 512, "stream": 0},
               {"action": "alloc", "addr": BASE + 2048, "size": 512, "stream": 0}]
    r = replay_tensors({"segments": [], "device_traces": [entries]}, "A2", name="wide.pickle")
    assert r.allocs == 1 and r.problems == [
        "wide.pickle: entry 0: field 'addr' is an integer of 100001 bits; every integer of a "
        "snapshot fits in 64 bits; ignored",
        "wide.pickle: entry 1: field 'size' is an integer of 100001 bits; every integer of a "
        "snapshot fits in 64 bits; ignored",
        "wide.pickle: entry 2: field 'stream' is a list of 1 item, not an integer; ignored",
        "wide.pickle: entry 3: field 'addr' is a list of 1 item, not an integer; ignored"]
    assert r.actions["skipped"] == {"alloc": 3, "free_completed": 1}


def test_a_snapshot_of_many_bad_entries_lists_the_first_problems_and_counts_the_rest():
    # a file that names a bad entry a million times costs its reader a line, not a million
    from ascend_memsim.observe.snapshot import MAX_PROBLEMS, read_snapshot

    bad = {"action": "bogus", "addr": 4096, "size": 512}    # an unknown action: a problem
    entries = [dict(bad) for _ in range(5000)]
    events, _, problems = read_snapshot({"segments": [], "device_traces": [entries]})
    assert events == [] and len(problems) == MAX_PROBLEMS + 1
    assert problems[-1].startswith(f"... and {5000 - MAX_PROBLEMS:,} more problems like")
