"""The caching allocator's segments and blocks in pictures: what is drawn, per block state,
against the snapshot it is drawn from (live allocator, torch snapshot file, tensor replay)."""

import pickle
import re

import pytest

from ascend_memsim import MiB, Runtime
from ascend_memsim.allocators import NpuCachingAllocator, NpuOutOfMemoryError
from ascend_memsim.cli import main
from ascend_memsim.observe.allocmap import (
    STATE_COLORS,
    STATES,
    AllocatorPictures,
    allocator_map,
    state_counts,
)
from ascend_memsim.observe.pictures import save_picture
from ascend_memsim.observe.tensor_replay import replay_tensors
from ascend_memsim.observe.viz import map_svg

_TIP = re.compile(r"<title>(allocated|pending free|inactive split|cached) block of [^<]*? at "
                  r"(0x[0-9a-f]+)")


def _fragmented(stream_use: bool = False) -> dict:
    """A 100 MiB A2 after a fragmenting step: every block state present."""
    with Runtime("A2", hbm_bytes=100 * MiB, sanitizer="off") as rt:
        alloc = NpuCachingAllocator(rt)
        alloc.record_history()
        kept, temp = [], []
        for i in range(12):
            (kept if i % 4 == 0 else temp).append(alloc.malloc(6 * MiB))
        for p in temp:
            alloc.free(p)
        with pytest.raises(NpuOutOfMemoryError):
            alloc.malloc(90 * MiB)
        small = [alloc.malloc(100_000) for _ in range(5)]
        alloc.free(small[1])
        cached = alloc.malloc(22 * MiB)     # a 24 MiB segment of its own
        alloc.free(cached)                      # a whole free segment: cached
        if stream_use:
            s = rt.streams.create_stream()
            alloc.record_stream(kept[1], s)
            alloc.free(kept[1])                 # waits for the stream: pending free
        return alloc.memory_snapshot()


def _expected(snap: dict) -> dict[str, set[int]]:
    out = {s: set() for s in STATES}
    word = {"active_allocated": "allocated", "active_pending_free": "pending free"}
    for seg in snap["segments"]:
        for b in seg["blocks"]:
            state = word.get(b["state"]) or ("cached" if len(seg["blocks"]) == 1
                                              else "inactive split")
            out[state].add(b["address"])
    return out


def _drawn(svg: str) -> dict[str, set[int]]:
    out = {s: set() for s in STATES}
    for state, ptr in _TIP.findall(svg):
        out[state].add(int(ptr, 16))
    return out


def test_svg_draws_each_block_of_each_segment_in_its_state():
    snap = _fragmented()
    expected = _expected(snap)
    assert all(expected[s] for s in ("allocated", "inactive split", "cached"))
    m = allocator_map(snap)
    svg = map_svg(m)
    assert _drawn(svg) == expected
    # each segment outlined at its start and its end
    assert svg.count('class="outline"') == 2 * len(snap["segments"])
    counts = state_counts(m.blocks)
    for state in STATES:
        assert counts[state][0] == len(expected[state])
        assert counts[state][1] == sum(b["size"] for seg in snap["segments"]
                                       for b in seg["blocks"] if b["address"] in expected[state])
    # the legend names every state; the heading says what is reserved but unallocated
    for state in STATES:
        assert STATE_COLORS[state] in svg
    reserved = sum(seg["total_size"] for seg in snap["segments"])
    allocated = sum(seg["allocated_size"] for seg in snap["segments"])
    assert m.summary.startswith(f"{len(snap['segments'])} segments reserve ")
    assert f"reserved but unallocated {_fmt(reserved - allocated)}" in m.summary
    assert "not reserved by the allocator" in svg


def _fmt(n: int) -> str:
    from ascend_memsim.memory.units import format_bytes
    return format_bytes(n)


def test_pending_free_blocks_are_drawn_as_such():
    snap = _fragmented(stream_use=True)
    expected = _expected(snap)
    assert expected["pending free"]
    assert _drawn(map_svg(allocator_map(snap)))["pending free"] == expected["pending free"]


def test_png_draws_each_states_bytes():
    pytest.importorskip("matplotlib")
    from matplotlib.colors import to_hex
    from matplotlib.patches import Rectangle

    from ascend_memsim.observe.png import draw_figure

    snap = _fragmented()
    m = allocator_map(snap)
    fig = draw_figure(maps=[m])
    try:
        drawn = dict.fromkeys(STATES, 0.0)
        by_color = {c.lower(): s for s, c in STATE_COLORS.items()}
        for patch in fig.axes[0].patches:
            if isinstance(patch, Rectangle):
                state = by_color.get(to_hex(patch.get_facecolor()))
                if state is not None:
                    drawn[state] += patch.get_width()
    finally:
        import matplotlib.pyplot as plt
        plt.close(fig)
    # the data part of each block: requested bytes when allocated, the whole block when free
    # (drawn at least 1.5 pixels wide: a tolerance of a few pixels' MiB)
    for state in STATES:
        want = sum(b.size for b in m.blocks if b.state == state) / MiB
        assert drawn[state] == pytest.approx(want, abs=0.05), state


def test_hostile_snapshot_fields_are_left_out_and_counted():
    snap = {"segments": [
        {"address": 4 * MiB, "total_size": 2 * MiB, "segment_type": "small", "blocks": [
            {"address": 4 * MiB, "size": MiB, "state": "active_allocated",
             "requested_size": 10 ** 30},
            {"address": 5 * MiB, "size": MiB, "state": "what"},
            {"address": 7 * MiB, "size": MiB, "state": "inactive"},    # outside
            "junk"]},
        {"address": "x", "total_size": 1},
        {"address": 4 * MiB, "total_size": 2 * MiB, "blocks": [      # overlaps the first
            {"address": 4 * MiB, "size": 2 * MiB, "state": "inactive"}]},
        7]}
    m = allocator_map(snap)
    assert [(b.ptr, b.state, b.size) for b in m.blocks] == [(4 * MiB, "allocated", MiB)]
    assert "4 problems" in m.summary
    assert _drawn(map_svg(m))["allocated"] == {4 * MiB}
    empty = allocator_map({"segments": []})
    assert empty.blocks == [] and "0 segments" in map_svg(empty)


def test_replay_pictures_the_peak_of_reserved_bytes_and_the_first_oom(tmp_path):
    snap = _fragmented()
    pictures = AllocatorPictures()
    result = replay_tensors(snap, "A2", capacity=100 * MiB, observer=pictures)
    pictures.finish(result.capacity)
    assert result.ooms == 1
    at_peak, at_oom = pictures.maps()
    reserved = sum(b.footprint for b in at_peak.blocks)
    assert reserved == result.peak_reserved
    assert "peak of reserved bytes" in at_peak.title and "out-of-memory" in at_oom.title
    assert pictures.failure_index == result.first_failure["index"]
    # the timeline's four quantities add up to reserved bytes; its peak is the replay's
    tl = pictures.timeline
    assert tl.components()[0] == "allocated"
    assert max(sum(by.values()) for _, by in tl.points) == result.peak_reserved
    assert max(by.get("allocated", 0) for _, by in tl.points) == result.peak_allocated
    assert tl.failures == [result.first_failure["index"]]
    out = tmp_path / "r.svg"
    save_picture(str(out), timeline=tl, maps=pictures.maps(), title="t")
    svg = out.read_text()
    assert svg.count("<svg") == 4               # one document, three panels
    assert _drawn(svg)["allocated"] == {b.ptr for m in pictures.maps() for b in m.blocks
                                        if b.state == "allocated"}


def test_cli_replay_plot_and_plot_of_a_snapshot(tmp_path, capsys):
    path = tmp_path / "frag.pickle"
    snap = _fragmented()
    path.write_bytes(pickle.dumps(snap))
    svg = tmp_path / "r.svg"
    code = main(["replay", str(path), "--allocator", "torch-npu", "--product", "A2",
                 "--capacity", "100MiB", "--plot", str(svg), "--json"])
    out, err = capsys.readouterr()
    assert code == 1 and out.lstrip().startswith("{") and f"{svg} written" in err
    assert "caching allocator at the first out-of-memory error" in svg.read_text()
    page = tmp_path / "r.html"
    assert main(["replay", str(path), "--allocator", "torch-npu", "--capacity", "100MiB",
                 "--plot", str(page)]) == 1
    html = page.read_text()
    assert "Reserved bytes of the caching allocator" in html and "<script" not in html
    assert _drawn(html)["inactive split"]
    # plot of a snapshot: the device's map and the snapshot's own segments
    drawn = tmp_path / "p.svg"
    assert main(["plot", str(path), "--capacity", "100MiB", "-o", str(drawn)]) == 0
    assert _drawn(drawn.read_text()) == _expected(snap)
    # the project's own memory_viz export holds device blocks, not an allocator's segments
    exported = tmp_path / "export.pickle"
    assert main(["export", str(path), "--format", "memory-viz", "-o", str(exported)]) == 0
    again = tmp_path / "e.svg"
    assert main(["plot", str(exported), "--capacity", "100MiB", "-o", str(again)]) == 0
    assert "caching allocator" not in again.read_text()
    # refused before reading: --plot of the device's calls, a bad extension
    assert main(["replay", str(path), "--allocator", "none", "--plot",
                 str(tmp_path / "x.svg")]) == 2
    assert main(["replay", str(path), "--allocator", "torch-npu",
                 "--plot", str(tmp_path / "x.gif")]) == 2
    assert not (tmp_path / "x.gif").exists()
