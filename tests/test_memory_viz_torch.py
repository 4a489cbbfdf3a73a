"""torch's own memory tools read the project's snapshots and agree with its figures.

``torch.cuda._memory_viz`` (``segsum``, ``trace``, ``segments``, ``memory``, ``compare``,
``filter_alloc_free_pairs``, ``trace_plot``) is what ``python -m torch.cuda._memory_viz``
runs on a ``_dump_snapshot`` pickle. Here it is called in-process on the memory_viz export of
a trace (``ascend-memsim export --format memory-viz``, :func:`to_memory_viz`) and on the
caching allocator's :meth:`~ascend_memsim.allocators.NpuCachingAllocator.memory_snapshot`, and
its totals are checked against ``ascend-memsim stats`` and ``memory_stats()``. The flame
graphs are taken as the lines torch feeds to flamegraph.pl (``format_flamegraph`` is
torch's own hook), so nothing is downloaded.
"""

import io
import json
import pickle
import re

import pytest

from ascend_memsim import GiB, MiB, OutOfDeviceMemory, Runtime, acl
from ascend_memsim.allocators import NpuCachingAllocator, NpuOutOfMemoryError
from ascend_memsim.cli import main
from ascend_memsim.observe.snapshot import to_memory_viz
from ascend_memsim.observe.trace import Recorder

pytest.importorskip("torch", reason="torch's memory tools are tested when torch is installed "
                                    "(pip install -e '.[test,torch]')")
from torch.cuda import _memory_viz as viz

PROP = {"memAttr": acl.ACL_HBM_MEM_HUGE, "location": {"id": 0, "type": 1}}


def _lines(text: str) -> str:
    """torch's format_flamegraph hook: the folded lines themselves."""
    return text


def _folded_total(folded: str) -> int:
    return sum(int(line.rsplit(" ", 1)[1]) for line in folded.splitlines())


def _job(tmp_path):
    """A two-device job: blocks freed, one live at the end, an out-of-memory error, a
    physical handle, two streams, and a device reset that discards live blocks (googlenet's
    ending). Saved as a trace; returns (trace path, events)."""
    with Runtime("A2", hbm_bytes=64 * MiB, device_count=2,
                 sanitizer={"mode": "report", "leaks": False}) as rt, \
            Recorder(rt, stacks=True) as rec:
        rt.set_device(0)
        a = rt.malloc(100)
        rt.malloc(2 * MiB)                    # discarded by the reset below
        rt.malloc_align32(5 * MiB)            # discarded too
        with pytest.raises(OutOfDeviceMemory):
            rt.malloc(128 * MiB)
        rt.free(a)
        rt.vmm.malloc_physical(3 * MiB, PROP)
        rt.malloc(126_000)                    # discarded too
        rt.reset_device(0)
        rt.set_device(1)
        rt.malloc(7 * MiB)                    # live at the end
        rt.free(rt.malloc(1000))
        rt.malloc(300)                        # live at the end
    path = tmp_path / "job.jsonl"
    rec.trace.save(str(path))
    return path, rec.trace


def _cli(*argv: str) -> str:
    out = io.StringIO()
    assert main(list(argv), out) == 0
    return out.getvalue()


@pytest.fixture
def exported(tmp_path):
    """(snapshot as torch's pickle.load reads the exported file, stats per device)."""
    path, _ = _job(tmp_path)
    out = tmp_path / "job.pickle"
    _cli("export", str(path), "--format", "memory-viz", "-o", str(out))
    with open(out, "rb") as f:
        snapshot = pickle.load(f)             # as _memory_viz's _read does
    stats = json.loads(_cli("stats", str(path), "--json", "--quiet"))["devices"]
    return snapshot, {int(d): s for d, s in stats.items()}


def _live(stats: dict, stat: str) -> int:
    """Bytes of blocks handed out (a physical handle is memory no tensor holds yet)."""
    return stats[f"{stat}.all.current"] - stats.get(f"{stat}.physical.current", 0)


def test_segsum_totals_are_the_stats(exported):
    snapshot, stats = exported
    text = viz.segsum(snapshot)          # asserts free + allocated == reserved per segment
    reserved = sum(s["footprint_bytes.all.current"] for s in stats.values())
    requested = sum(_live(s, "requested_bytes") for s in stats.values())
    assert f"total_reserved: {viz.Bytes(reserved)}\n" in text
    assert f"total_allocated: {viz.Bytes(requested)}\n" in text
    assert sum(seg["total_size"] for seg in snapshot["segments"]) == reserved
    assert sum(viz.calc_active(seg) for seg in snapshot["segments"]) == \
        sum(_live(s, "footprint_bytes") for s in stats.values())


def _timeline_end(entries: list) -> int:
    """Where MemoryViz's active memory timeline ends: each alloc adds its size, each
    free_completed takes it away (torch/utils/viz/MemoryViz.js)."""
    allocated = {}
    for e in entries:
        if e["action"] == "alloc":
            allocated[e["addr"]] = e["size"]
        elif e["action"] == "free_completed":
            allocated.pop(e["addr"])
    return sum(allocated.values())


def test_the_allocation_timeline_ends_at_what_stats_says(exported):
    """Issue 25 item 9: a block a device reset discards is freed in the timeline too (the
    export wrote only segment_free for it, so the timeline ended with it allocated)."""
    snapshot, stats = exported
    for device, entries in enumerate(snapshot["device_traces"]):
        assert _timeline_end(entries) == _live(stats[device], "footprint_bytes")
    assert _timeline_end(snapshot["device_traces"][0]) == 0      # all gone at the reset


def test_filter_alloc_free_pairs_leaves_the_live_allocations(exported, capsys):
    """Issue 25 item 10: every free_completed follows its free_requested, so torch pairs
    each alloc with its free and keeps only what is still allocated."""
    snapshot, stats = exported
    filtered = viz.filter_alloc_free_pairs(snapshot)
    assert "free_completed without free_requested" not in capsys.readouterr().out
    for device, entries in enumerate(filtered["device_traces"]):
        actions = {e["action"] for e in entries}
        assert not actions & {"free_requested", "free_completed"}
        assert sum(e["size"] for e in entries if e["action"] == "alloc") == \
            _live(stats[device], "footprint_bytes")
    page = viz.trace_plot(snapshot, filter_freed=True)
    assert "MemoryViz.js" in page and "Active Memory Timeline" in page


def test_trace_names_every_free(exported):
    snapshot, _ = exported
    text = viz.trace(snapshot)
    frees = sum(e["action"] == "free_requested" for d in snapshot["device_traces"] for e in d)
    assert frees == 5                  # a, the three the reset discards, one on device 1
    # "del <name>" for each free_requested, and its completion names the same allocation
    assert len(re.findall(r"^del [a-z]+\d* # ", text, re.M)) == frees
    assert len(re.findall(r"^# free completed for [a-z]+\d* ", text, re.M)) == frees
    assert "raise OutOfMemoryError # 128.0MiB requested" in text
    assert "Device 0 ----" in text and "Device 1 ----" in text


def test_segments_and_memory_flame_graphs_add_up_to_the_reserved_bytes(exported):
    snapshot, stats = exported
    reserved = sum(s["footprint_bytes.all.current"] for s in stats.values())
    by_segment = viz.segments(snapshot, format_flamegraph=_lines)
    by_place = viz.memory(snapshot, format_flamegraph=_lines)
    assert _folded_total(by_segment) == _folded_total(by_place) == reserved
    # the recorded stack is the flame graph's frames (outermost first)
    assert "test_memory_viz_torch.py" in by_place and "_job" in by_place


def test_compare_shows_the_segments_made_in_between(tmp_path, capsys):
    _, trace = _job(tmp_path)
    events = trace.events
    cut = next(i for i, e in enumerate(events) if e["event"] == "set_device"
               and e.get("device") == 1)
    before = to_memory_viz(events[:cut], trace.header)["segments"]
    after = to_memory_viz(events, trace.header)["segments"]
    folded = viz.compare(before, after, format_flamegraph=_lines)
    printed = capsys.readouterr().out
    assert "only_before = []" in printed
    new = {(s["address"], s["total_size"]) for s in after} - \
        {(s["address"], s["total_size"]) for s in before}
    assert len(new) == 2 and all(line.startswith("only_after;") for line in folded.splitlines())
    assert _folded_total(folded) == sum(size for _, size in new)


# -- the caching allocator's memory_snapshot() --------------------------------------------------

@pytest.mark.parametrize("conf", ["", "expandable_segments:True"])
def test_the_caching_allocators_snapshot_reads_as_torch_npus(conf, capsys):
    with Runtime("A2", hbm_bytes=256 * MiB, sanitizer="off") as rt:
        alloc = NpuCachingAllocator(rt, conf=conf)
        alloc.record_history()
        before = alloc.memory_snapshot()
        for n in (100, 3 * MiB, 30 * MiB):
            alloc.malloc(n)
        for n in (5000, 12 * MiB, 700):
            alloc.free(alloc.malloc(n))
        with pytest.raises(NpuOutOfMemoryError):
            alloc.malloc(1 * GiB)
        alloc.workspace.malloc(4 * MiB, 0)     # after the OOM, whose retry empties its cache
        snap = alloc.memory_snapshot()
        stats = alloc.memory_stats()
        workspace = alloc.workspace.memory_stats()["reserved_bytes.current"]
    reserved = stats["reserved_bytes.all.current"] + workspace
    text = viz.segsum(snap)
    assert f"total_reserved: {viz.Bytes(reserved)}\n" in text
    assert f"total_allocated: {viz.Bytes(stats['requested_bytes.all.current'])}\n" in text
    assert sum(s["total_size"] for s in snap["segments"]) == reserved
    assert sum(viz.calc_active(s) for s in snap["segments"]) == \
        stats["allocated_bytes.all.current"]
    assert "raise OutOfMemoryError # 1.0GiB requested" in viz.trace(snap)
    filtered = viz.filter_alloc_free_pairs(snap)
    assert "without free_requested" not in capsys.readouterr().out
    # the three live tensors (their requested sizes) and the workspace block (its size:
    # 4 MiB + 32 rounded up to 2 MiB)
    allocs = [e["size"] for e in filtered["device_traces"][0] if e["action"] == "alloc"]
    assert sorted(allocs) == [100, 3 * MiB, 6 * MiB, 30 * MiB]
    assert _folded_total(viz.segments(snap, format_flamegraph=_lines)) == reserved
    assert _folded_total(viz.memory(snap, format_flamegraph=_lines)) == reserved
    folded = viz.compare(before["segments"], snap["segments"], format_flamegraph=_lines)
    assert "only_before = []" in capsys.readouterr().out
    assert _folded_total(folded) == reserved
