"""Tensor-level replay of snapshots and traces through the caching allocator."""

import json
import pickle

import pytest

from ascend_memsim import MiB, Runtime
from ascend_memsim.allocators import NpuCachingAllocator, NpuOutOfMemoryError
from ascend_memsim.cli import main
from ascend_memsim.observe.tensor_replay import replay_tensors


def _workload(alloc):
    """A mixed workload on two streams that runs out of memory on a 128 MiB A2."""
    held = []
    for i in range(30):
        try:
            held.append(alloc.malloc((i % 7 + 1) * 3 * MiB + i * 1000, stream=i % 2))
        except NpuOutOfMemoryError:
            pass
        if i % 3 == 2:
            alloc.free(held.pop(0))


def _recorded(capacity, conf="", workload=_workload):
    with Runtime("A2", hbm_bytes=capacity, sanitizer="off") as rt:
        alloc = NpuCachingAllocator(rt, conf=conf)
        alloc.record_history()
        workload(alloc)
        return alloc.memory_snapshot(), alloc.memory_stats()


def test_self_consistency_pickle(tmp_path):
    snap, stats = _recorded(128 * MiB)
    assert stats["num_ooms"] > 0      # the workload does reach the OOM path
    path = tmp_path / "snap.pickle"
    path.write_bytes(pickle.dumps(snap))
    r = replay_tensors(str(path), "A2", capacity=128 * MiB)
    assert r.peak_allocated == stats["allocated_bytes.all.peak"]
    assert r.peak_reserved == stats["reserved_bytes.all.peak"]
    assert r.ooms == stats["num_ooms"]
    assert r.retries == stats["num_alloc_retries"]
    first_oom = next(i for i, e in enumerate(snap["device_traces"][0]) if e["action"] == "oom")
    assert r.first_failure["index"] == first_oom
    assert r.actions["rederived"]["segment_alloc"] > 0


def _fragmenting(alloc):
    """Twelve 6 MiB tensors, three of each four freed, then three 16 MiB ones: the default
    pins a 20 MiB segment per kept tensor; expandable segments merge the freed runs."""
    held = [alloc.malloc(6 * MiB) for _ in range(12)]
    for i, ptr in enumerate(held):
        if i % 4:
            alloc.free(ptr)
    for _ in range(3):
        alloc.malloc(16 * MiB)


def test_fragmenting_workload_fits_with_expandable_segments():
    snap, stats = _recorded(256 * MiB, workload=_fragmenting)
    assert stats["num_ooms"] == 0
    default = replay_tensors(snap, "A2", capacity=100 * MiB)
    expandable = replay_tensors(snap, "A2", capacity=100 * MiB,
                                alloc_conf="expandable_segments:True")
    assert not default.fits and default.first_failure["size"] == 16 * MiB
    assert default.first_failure["index"] >= 0
    assert expandable.fits and expandable.ooms == 0
    assert expandable.peak_reserved <= 100 * MiB


def _entry(action, addr, size, stream=0, **extra):
    return {"action": action, "addr": addr, "size": size, "stream": stream, "frames": [],
            **extra}


def test_seeding_from_segments_and_frees_before_the_trace():
    """Ring buffer lost the start: block 0x1000 is freed in the trace without an alloc, block
    0x3000 is live at the snapshot and never in the trace; both are allocated first."""
    snap = {
        "segments": [{"device": 0, "address": 0x1000, "total_size": 20 * MiB, "stream": 0,
                      "blocks": [
                          {"address": 0x3000, "size": 4 * MiB + 512,
                           "requested_size": 4 * MiB, "state": "active_allocated"},
                          {"address": 0x9000, "size": 2 * MiB, "requested_size": 2 * MiB,
                           "state": "inactive"}]}],
        "device_traces": [[
            _entry("free_requested", 0x1000, 8 * MiB),
            _entry("free_completed", 0x1000, 8 * MiB),
            _entry("alloc", 0x5000, 1 * MiB),
        ]],
    }
    r = replay_tensors(snap, "A2", capacity=256 * MiB)
    assert r.seeded == 2 and r.allocs == 1 and r.frees == 1
    # both seeds were live together before the free: 8 MiB + 4 MiB (+ pads)
    assert r.peak_allocated == (8 * MiB + 512) + (4 * MiB + 512)
    assert r.fits


def test_every_action_kind_is_counted():
    entries = [
        _entry("segment_alloc", 0x10, 20 * MiB),
        _entry("alloc", 0x10, 1 * MiB, stream=7),
        _entry("segment_map", 0x10, 20 * MiB),
        _entry("snapshot", 0, 0),
        _entry("free_requested", 0x10, 1 * MiB, stream=7),
        _entry("free_completed", 0x10, 1 * MiB, stream=7),
        _entry("alloc", 0x20, 3 * MiB),
        _entry("free", 0x20, 3 * MiB),
        {"action": "oom", "device_free": 0, "size": 2 * MiB, "stream": 0, "frames": []},
        _entry("segment_unmap", 0x10, 20 * MiB),
        _entry("segment_free", 0x10, 20 * MiB),
        _entry("user_defined", 0, 0),
        _entry("empty_cache", 0, 0),
        "not a dict",
    ]
    r = replay_tensors({"segments": [], "device_traces": [entries, [_entry("alloc", 1, 9)]]},
                       "A2", capacity=256 * MiB)
    assert r.actions["replayed"] == {"alloc": 2, "free_requested": 1, "free_completed": 1,
                                     "free": 1, "oom": 1}
    assert r.actions["rederived"] == {"segment_alloc": 1, "segment_map": 1,
                                      "segment_unmap": 1, "segment_free": 1}
    assert r.actions["counted"] == {"snapshot": 1}
    assert r.actions["skipped"] == {"user_defined": 1, "empty_cache": 1, "not an entry": 1,
                                    "device 1 entries": 1}
    # the recorded OOM's request fits here: allocated and freed at once
    assert r.allocs == 3 and r.frees == 3 and r.ooms == 0


def test_free_waits_for_free_completed():
    """Between free_requested and free_completed the block is not reusable."""
    entries = [_entry("alloc", 0x10, 30 * MiB), _entry("free_requested", 0x10, 30 * MiB),
               _entry("alloc", 0x20, 30 * MiB), _entry("free_completed", 0x10, 30 * MiB)]
    r = replay_tensors({"segments": [], "device_traces": [entries]}, "A2",
                       capacity=256 * MiB)
    assert r.peak_reserved == 2 * (30 * MiB + 2 * MiB)


def test_project_trace_mallocs_are_tensor_allocations(tmp_path):
    from ascend_memsim.observe.trace import Trace
    events = [{"event": "malloc", "ptr": 1, "size": 1 * MiB, "device": 0, "policy": 0,
               "api": "aclrtMalloc", "seq": 0},
              {"event": "free", "ptr": 1, "size": 1 * MiB, "device": 0, "seq": 1},
              {"event": "malloc", "ptr": 2, "size": 1 * MiB, "device": 0, "policy": 0,
               "api": "aclrtMalloc", "seq": 2}]
    path = tmp_path / "t.jsonl"
    path.write_text(Trace(events, header={"product": "A2"}).dumps())
    r = replay_tensors(str(path), "A2", capacity=256 * MiB)
    assert (r.allocs, r.frees) == (2, 1)
    # 1 MiB + 32 rounds above the small pool's 1 MiB: one 20 MiB large segment, reused
    assert r.peak_reserved == 20 * MiB and r.peak_allocated == 1 * MiB + 512
    path.write_text(Trace(events, header={"product": "310P"}).dumps())
    assert replay_tensors(str(path)).product == "310P"


def test_bad_sources():
    from ascend_memsim.memory.errors import AllocatorConfigError, InvalidArgument
    with pytest.raises(InvalidArgument):
        replay_tensors({"no": "snapshot"}, "A2")
    with pytest.raises(InvalidArgument):
        replay_tensors(42, "A2")
    with pytest.raises(AllocatorConfigError):
        replay_tensors({"segments": [], "device_traces": [[]]}, "A2", alloc_conf="bogus:1")
    bad = {"segments": [], "device_traces": [[_entry("alloc", 1, -5), _entry("alloc", 2, "x")]]}
    r = replay_tensors(bad, "A2", capacity=64 * MiB)
    assert len(r.problems) == 2 and r.actions["skipped"]["alloc"] == 2


def test_cli(tmp_path, capsys):
    snap, stats = _recorded(256 * MiB, workload=_fragmenting)
    path = tmp_path / "snap.pickle"
    path.write_bytes(pickle.dumps(snap))
    args = ["replay", str(path), "--allocator", "torch-npu", "--product", "A2",
            "--capacity", "100MiB"]
    assert main(args) == 1
    assert "out of memory" in capsys.readouterr().out
    assert main([*args, "--alloc-conf", "expandable_segments:True", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["fits"] and out["peak_allocated"] == stats["allocated_bytes.all.peak"]
    assert main([*args, "--alloc-conf", "bogus:1"]) == 2


def test_json_snapshot_files(tmp_path):
    snap, stats = _recorded(256 * MiB, workload=_fragmenting)
    for name, text in (("one.json", json.dumps(snap)), ("indented.json",
                                                        json.dumps(snap, indent=1))):
        path = tmp_path / name
        path.write_text(text)
        r = replay_tensors(str(path), "A2", capacity=256 * MiB)
        assert r.peak_allocated == stats["allocated_bytes.all.peak"] and r.fits


def test_imported_alone_replays(tmp_path):
    """``replay_tensors`` imported straight from its module (no other ascend_memsim name
    first) still finds the sanitizer registered, as ``observe.replay`` does."""
    import subprocess
    import sys

    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"format": "ascend-memsim-trace", "version": 1,
                                "product": "A2"}) + "\n")
    code = ("import sys\nfrom ascend_memsim.observe.tensor_replay import replay_tensors\n"
            "print(replay_tensors(sys.argv[1]).fits)")
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"


def _with_workspace(alloc):
    """An operator's 30 MiB workspace (a 32 MiB block, kept cached), then a 40 MiB tensor."""
    ws = alloc.workspace
    ws.free(ws.malloc(30 * MiB))
    alloc.free(alloc.malloc(40 * MiB))


def test_workspace_segments_are_seeded_as_such():
    """A snapshot's workspace blocks (``workspace_snapshot`` + ``segment_alloc`` + ``alloc``
    at the trace's start, NPUWorkspaceAllocator.cpp get_trace) are taken by the replay's
    workspace allocator, not replayed as a tensor that is never freed."""
    snap, stats = _recorded(256 * MiB, workload=_with_workspace)
    assert snap["device_traces"][0][0]["action"] == "workspace_snapshot"
    r = replay_tensors(snap, "A2", capacity=256 * MiB)
    assert r.workspace_seeded == 1 and r.seeded == 0
    assert r.actions["workspace"] == {"workspace_snapshot": 1, "segment_alloc": 1, "alloc": 1}
    assert r.allocs == 1 and r.frees == 1
    assert r.peak_allocated == stats["allocated_bytes.all.peak"] == 40 * MiB + 512
    assert r.peak_reserved == stats["reserved_bytes.all.peak"] == 42 * MiB
    assert r.peak_device == 32 * MiB + 42 * MiB    # the workspace block is on the device
    assert "1 workspace block" in str(r)
    # on a 64 MiB device the tensor fits only once the out-of-memory retry has emptied the
    # workspace cache (NPUCachingAllocator.cpp malloc: NPUWorkspaceAllocator::emptyCache)
    small = replay_tensors(snap, "A2", capacity=64 * MiB)
    assert small.fits and small.retries == 1 and small.workspace_seeded == 1


BASE = 0x7F0000000000
#: five live tensors of weights, as _profile_to_snapshot lists them: no 'address' per block
WEIGHTS = [3 * MiB, 1 * MiB + 100, 2 * MiB, 512 * 1024, 1 * MiB]


def _profile_like_snapshot(segment_address=BASE):
    """The layout of ``torch.cuda._memory_viz._profile_to_snapshot`` (and of torch 2.0-era
    snapshots): blocks carry no ``address``; MemoryViz walks each segment from its own."""
    blocks = []
    for size in WEIGHTS:
        blocks += [{"size": size, "requested_size": size, "state": "active_allocated",
                    "frames": []}, {"size": 4096, "state": "inactive"}]
    seg = {"device": 0, "address": segment_address, "stream": 0, "blocks": blocks,
           "total_size": sum(b["size"] for b in blocks)}
    step = BASE + 1024 * MiB
    trace = [{"action": "alloc", "addr": step, "size": 4 * MiB, "stream": 0, "frames": []},
             {"action": "free_requested", "addr": step, "size": 4 * MiB, "stream": 0},
             {"action": "free_completed", "addr": step, "size": 4 * MiB, "stream": 0}]
    return {"segments": [seg], "device_traces": [trace]}


def test_blocks_without_addresses_are_seeded_at_the_addresses_memoryviz_gives(tmp_path,
                                                                           capsys):
    with Runtime("A2", sanitizer="off") as rt:
        alloc = NpuCachingAllocator(rt)
        for size in [*WEIGHTS, 4 * MiB]:
            alloc.malloc(size)
        expected = alloc.memory_stats()
    r = replay_tensors(_profile_like_snapshot(), "A2")
    assert (r.seeded, r.allocs, r.frees, r.problems) == (5, 1, 1, [])
    assert r.peak_allocated == expected["allocated_bytes.all.peak"]
    assert r.peak_reserved == expected["reserved_bytes.all.peak"]
    # the command line replays it through the allocator (it has tensor entries) alike
    path = tmp_path / "profile.pickle"
    path.write_bytes(pickle.dumps(_profile_like_snapshot(), protocol=4))
    assert main(["replay", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["seeded"] == 5 and out["peak_allocated"] == r.peak_allocated


def test_blocks_that_cannot_be_seeded_are_counted_not_dropped_silently():
    snap = _profile_like_snapshot(segment_address=None)
    r = replay_tensors(snap, "A2")
    assert r.seeded == 0 and r.problems == [
        "5 blocks live before the trace not seeded: no address (none of its own and no "
        "segment address to walk from) or no size"]


def _tensor_allocs(n, size):
    return {"segments": [], "device_traces": [[
        {"action": "alloc", "addr": BASE + i * size, "size": size, "stream": 0}
        for i in range(n)]]}


@pytest.mark.parametrize("snap, message", [
    ({"segments": [], "device_traces": []}, "nothing to replay at the device's level"),
    ({"segments": [], "device_traces": [[{"action": "segment_alloc", "addr": "x", "size": 5},
                                         7]]}, "2 entries left out (warned about above)"),
    ({"segments": [{"device": 0}], "device_traces": [[
        {"action": "alloc", "addr": BASE, "size": "x", "stream": 0}]]},
     "nothing to replay through the caching allocator"),
])
def test_a_snapshot_with_nothing_to_replay_is_an_error(tmp_path, capsys, snap, message):
    path = tmp_path / "s.pickle"
    path.write_bytes(pickle.dumps(snap, protocol=4))
    for extra in ([], ["--bisect"]):
        assert main(["replay", str(path), "--quiet", *extra]) == 2
        captured = capsys.readouterr()
        assert message in captured.err and "fits" not in captured.out


def test_tensor_entries_at_the_device_level_name_the_option_that_replays_them(tmp_path,
                                                                             capsys):
    # 99 tensors of 1 GiB, no segment event: the device's calls are none, the tensors 99 GiB
    path = tmp_path / "tensors.pickle"
    path.write_bytes(pickle.dumps(_tensor_allocs(99, 1 << 30), protocol=4))
    assert main(["replay", str(path), "--quiet", "--allocator", "none"]) == 2
    err = capsys.readouterr().err
    assert "99 tensor allocations (alloc entries): --allocator torch-npu replays them" in err
    # by default they go through the caching allocator, which runs out at 60 GiB
    assert main(["replay", str(path), "--quiet", "--json"]) == 1
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert out["ooms"] == 1 and out["ended_at"] == out["first_failure"]["index"] == 60
    assert "replayed through torch_npu's caching allocator" in captured.err
    # a snapshot with both says what the device-level replay leaves out
    snap = _tensor_allocs(2, 1 * MiB)
    snap["device_traces"][0].insert(0, {"action": "segment_alloc", "addr": BASE,
                                        "size": 20 * MiB, "stream": 0})
    path.write_bytes(pickle.dumps(snap, protocol=4))
    assert main(["replay", str(path), "--quiet", "--allocator", "none"]) == 0
    assert "also holds 2 tensor allocations (alloc entries), which a replay of the device's " \
        "calls counts but does not replay; --allocator torch-npu" in capsys.readouterr().err


def test_by_default_a_torch_snapshot_replays_through_the_allocator_and_ends_at_its_first_oom(
        tmp_path, capsys):
    snap, _ = _recorded(256 * MiB, workload=_fragmenting)
    path = tmp_path / "snap.pickle"
    path.write_bytes(pickle.dumps(snap))
    args = ["replay", str(path), "--product", "A2", "--capacity", "100MiB", "--quiet"]
    assert main(args) == 1
    captured = capsys.readouterr()
    assert "through torch_npu's caching allocator (default conf) on A2 with 100 MiB" \
        in captured.out
    assert "--allocator none replays its segment calls" in captured.err
    # people's sizes in the text (torch's two decimals), exact bytes in --json
    assert "peak allocated 72.01 MiB" in captured.out and " + " not in captured.out
    assert "the replay ended at entry" in captured.out
    assert main([*args, "--json"]) == 1
    stopped = json.loads(capsys.readouterr().out)
    assert stopped["peak_allocated"] == 72 * MiB + 6 * 1024 and stopped["ended_at"] is not None
    assert main([*args, "--json", "--continue-after-oom"]) == 1
    whole = json.loads(capsys.readouterr().out)
    assert whole["ended_at"] is None and whole["ooms"] >= stopped["ooms"]
    assert whole["peaks_before_failure"]["peak_allocated"] == stopped["peak_allocated"]
    # the device's calls only on request, also ending where torch would
    assert main([*args, "--allocator", "none"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("replayed ") and "the replay ended at event" in out
    # the capacity searches take the same default
    assert main(["replay", str(path), "--product", "A2", "--bisect", "--quiet"]) == 0
    assert "every capacity from" in capsys.readouterr().out
    assert main(["replay", str(path), "--product", "A2", "--quiet",
                 "--sweep-conf", ";expandable_segments:True"]) == 0
    assert "allocator settings ranked" in capsys.readouterr().out


def test_the_projects_own_export_replays_the_device_calls(tmp_path, capsys):
    from ascend_memsim.observe.snapshot import memory_viz_bytes

    events = [{"event": "malloc", "ptr": BASE, "size": 1 * MiB, "device": 0, "seq": 0},
              {"event": "free", "ptr": BASE, "device": 0, "seq": 1}]
    path = tmp_path / "export.pickle"
    path.write_bytes(memory_viz_bytes(events, {"product": "A2"}))
    assert main(["replay", str(path), "--quiet"]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("replayed 2 of 2 events") and "note:" not in captured.err


def test_blocks_seeded_before_a_failure_are_counted_as_seeded():
    """A seed that fails ends the replay: the blocks seeded before it were counted as the
    trace's allocations (8 allocs, 0 seeded)."""
    with Runtime("A2", hbm_bytes=4096 * MiB, sanitizer="off") as rt:
        alloc = NpuCachingAllocator(rt)
        held = [alloc.malloc(1) for _ in range(8)] + [alloc.malloc(64 * MiB)]
        alloc.record_history()
        alloc.free(alloc.malloc(512))
        snap = alloc.memory_snapshot()
    assert held
    r = replay_tensors(snap, "A2", capacity=16 * MiB)
    assert (r.seeded, r.allocs, r.ooms, r.ended_at) == (8, 0, 1, -1)
