"""Physical memory handles in the statistics of a replayed trace and in the pictures."""

import io

import pytest

from ascend_memsim import MiB, Runtime, acl
from ascend_memsim.cli import main
from ascend_memsim.observe.regions import PHYSICAL_COLOR
from ascend_memsim.observe.replay import replay
from ascend_memsim.observe.stats import MemoryStats
from ascend_memsim.observe.trace import Recorder
from ascend_memsim.observe.viz import MapSnapshot, map_svg, text_map

PROP = {"memAttr": acl.ACL_HBM_MEM_HUGE, "location": {"id": 0, "type": 1}}


def run(*argv):
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


@pytest.fixture
def trace_file(tmp_path):
    """A trace: a 100-byte block, a 3 MiB handle (4 MiB of pages), the handle freed."""
    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer="off") as rt:
        rt.set_device(0)
        with Recorder(rt) as rec:
            ptr = rt.malloc(100)
            handle = rt.vmm.malloc_physical(3 * MiB, PROP)
            rt.vmm.free_physical(handle)
            rt.free(ptr)
    path = str(tmp_path / "t.jsonl")
    rec.trace.save(path)
    return path


def test_cli_stats_of_a_trace_counts_physical_memory(trace_file):
    code, text = run("stats", trace_file, "--quiet")
    assert code == 0
    line = next(x for x in text.splitlines() if x.split()[:2] == ["footprint_bytes", "physical"])
    assert "4 MiB" in line                                   # its peak
    all_line = next(x for x in text.splitlines() if x.split()[:2] == ["footprint_bytes", "all"])
    assert "4 MiB + 192 B" in all_line                       # the block and the handle


def test_replay_tells_its_observers_of_physical_memory_as_the_runtime_does(trace_file):
    stats = MemoryStats()
    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer="off") as rt:
        rt.set_device(0)
        live = MemoryStats.attach(rt)
        with Recorder(rt) as rec:
            h = rt.vmm.malloc_physical(3 * MiB, PROP)
            rt.vmm.free_physical(h)
            rt.vmm.malloc_physical(2 * MiB, PROP)     # left for the reset
            rt.reset_device(0)
        expected = live.snapshot(0)
    result = replay(rec.trace, observers=[stats])
    assert result.failures == 0
    got = stats.snapshot(0)
    for key in ("footprint_bytes.physical.current", "footprint_bytes.physical.peak",
                "requested_bytes.physical.peak", "allocation.physical.peak",
                "footprint_bytes.component.APP.peak"):
        assert got[key] == expected[key], key
    assert got["footprint_bytes.physical.peak"] == 4 * MiB
    assert got["footprint_bytes.physical.current"] == 0


def _device_with_a_handle(rt):
    rt.set_device(0)
    ptr = rt.malloc(100)
    handle = rt.vmm.malloc_physical(3 * MiB, PROP)
    return ptr, handle


def test_the_text_map_and_the_svg_show_a_physical_handle_with_its_pages():
    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer="off") as rt:
        ptr, handle = _device_with_a_handle(rt)
        snapshot = MapSnapshot.of(rt.device(0))
        text = text_map(snapshot, cell=2 * MiB)
        assert "1 block and 1 physical handle" in text
        assert "nPP." in text and "P physical handle (2 MiB pages)" in text
        svg = map_svg(snapshot)
        assert PHYSICAL_COLOR in svg and "physical handle, 2 MiB pages" in svg
        assert "physical handle of 3145728 bytes" in svg          # the hover text
        rt.vmm.free_physical(handle)
        text = text_map(MapSnapshot.of(rt.device(0)))
        assert "P" not in text.splitlines()[1] and "physical" not in text
        rt.free(ptr)


def test_the_cli_map_of_a_trace_shows_physical_memory_at_its_peak(trace_file):
    code, text = run("map", trace_file, "--cell", "2MiB", "--quiet")
    assert code == 0 and "1 block and 1 physical handle" in text and "nPP" in text


def test_the_png_shows_a_physical_handle():
    pytest.importorskip("matplotlib", reason="the PNG pictures need the optional matplotlib")
    from ascend_memsim.observe.png import draw_figure

    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer="off") as rt:
        _device_with_a_handle(rt)
        fig = draw_figure(snapshot=MapSnapshot.of(rt.device(0)))
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    legends = [t.get_text() for ax in fig.axes if ax.get_legend()
               for t in ax.get_legend().get_texts()]
    assert "physical handle, 2 MiB pages" in legends
    assert any(t.startswith("physical handle") for t in texts)
    import matplotlib.pyplot as plt
    plt.close(fig)


def _vmm_trace():
    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer="off") as rt:
        rt.set_device(0)
        with Recorder(rt) as rec:
            ptr = rt.malloc(100)
            first = rt.vmm.malloc_physical(3 * MiB, PROP)
            kept = rt.vmm.malloc_physical(2 * MiB, PROP)
            rt.vmm.free_physical(first)
            rt.free(ptr)
        rt.vmm.free_physical(kept)
    return rec.trace


def test_the_memory_viz_export_carries_physical_handles_as_segments():
    from ascend_memsim.observe.snapshot import to_memory_viz

    trace = _vmm_trace()
    snapshot = to_memory_viz(trace.events, trace.header)
    actions = [(e["action"], e["size"], e.get("api")) for e in snapshot["device_traces"][0]]
    assert actions == [
        ("segment_alloc", 192, "aclrtMalloc"), ("alloc", 192, "aclrtMalloc"),
        ("segment_alloc", 4 * MiB, "aclrtMallocPhysical"),
        ("segment_alloc", 2 * MiB, "aclrtMallocPhysical"),
        ("segment_free", 4 * MiB, "aclrtMallocPhysical"),
        ("free_requested", 192, None), ("free_completed", 192, None),
        ("segment_free", 192, None)]
    [segment] = snapshot["segments"]           # the handle still live at the end
    assert segment["api"] == "aclrtMallocPhysical" and segment["page"] == "huge"
    assert segment["total_size"] == 2 * MiB and segment["allocated_size"] == 0
    assert segment["blocks"][0]["state"] == "inactive"


@pytest.mark.parametrize("max_entries", [None, 2])
def test_a_snapshot_reads_back_with_its_physical_memory(max_entries):
    from ascend_memsim.observe.snapshot import to_memory_viz
    from ascend_memsim.observe.trace import from_snapshot

    trace = _vmm_trace()
    back = from_snapshot(to_memory_viz(trace.events, trace.header, max_entries=max_entries))
    assert back.problems == []
    kinds = [e["event"] for e in back.events]
    assert kinds.count("malloc_physical") == (2 if max_entries is None else 1)
    if max_entries is None:
        assert replay(back).peak_bytes == replay(trace).peak_bytes == 6 * MiB + 192
    else:   # the handle live at the end comes back from its segment, beside the block
        assert replay(back).peak_bytes == 2 * MiB + 128
