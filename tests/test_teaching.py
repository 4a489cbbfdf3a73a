"""What a teacher shows: a trace recorded on a small device replays with its failures, the
pictures mark huge-page fallbacks and make the +32 visible, the player compares products on
one capacity, and the HBM-to-DDR rule is named where a teacher looks for it."""

import io
import json
import re
import textwrap

import pytest

from ascend_memsim import MiB
from ascend_memsim.cli import main
from ascend_memsim.observe.player import player_data
from ascend_memsim.observe.stream import open_trace

#: fills a 32 MiB A2 with 1 MiB NORMAL_ONLY blocks until one fails (the first OOM), frees
#: every other one, so a HUGE_FIRST request over 1 MiB falls back to normal pages and a
#: HUGE_ONLY one fails (the second OOM); then a 2 MiB aclrtMalloc (the +32: two huge pages)
SCRIPT = """
    import acl
    acl.init()
    acl.rt.set_device(0)
    blocks = []
    while True:
        ptr, ret = acl.rt.malloc(1024 * 1024, acl.ACL_MEM_MALLOC_NORMAL_ONLY)
        if ret:
            break
        blocks.append(ptr)
    for ptr in blocks[::2]:
        acl.rt.free(ptr)
    fallback, ret = acl.rt.malloc(1024 * 1024 + 1, acl.ACL_MEM_MALLOC_HUGE_FIRST)
    assert ret == 0
    _, ret = acl.rt.malloc(1024 * 1024 + 1, acl.ACL_MEM_MALLOC_HUGE_ONLY)
    assert ret == 207001
    for ptr in blocks[1::2] + [fallback]:
        acl.rt.free(ptr)
    padded, ret = acl.rt.malloc(2 * 1024 * 1024, acl.ACL_MEM_MALLOC_HUGE_FIRST)
    acl.rt.free(padded)
    acl.rt.reset_device(0)
    acl.finalize()
"""


def run(*argv):
    out = io.StringIO()
    code = main([str(a) for a in argv], out=out)
    return code, out.getvalue()


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """The trace of SCRIPT run by ``ascend-memsim run --capacity 32MiB``: two OOMs."""
    tmp = tmp_path_factory.mktemp("teach")
    script = tmp / "prog.py"
    script.write_text(textwrap.dedent(SCRIPT))
    trace = tmp / "small.jsonl"
    code, _ = run("run", "--capacity", "32MiB", "--trace", trace, script)
    assert code == 0
    events = [json.loads(line) for line in trace.read_text().splitlines()[1:]]
    assert sum(e["event"] == "malloc_failed" for e in events) == 2
    assert sum(e.get("fallback") is True for e in events) == 1
    return trace


def test_replay_of_a_small_device_trace_shows_its_failures(small):
    code, text = run("replay", small)
    assert code == 1, text
    assert "capacity 32 MiB" in text and "2 failed" in text
    assert "first failure: event" in text and "it failed when recorded too" in text
    assert "the whole trace fits" not in text
    # an explicit capacity still overrides the recorded one
    code, text = run("replay", small, "--capacity", "64MiB")
    assert code == 0 and "the whole trace fits" in text
    assert "2 recorded malloc failures probed; 2 would succeed here" in text


def test_plot_of_a_small_device_trace_marks_its_failures(small, tmp_path):
    out = tmp_path / "t.svg"
    code, text = run("plot", small, "-o", out)
    assert code == 0 and "a malloc failed" in text
    svg = out.read_text()
    assert len(re.findall(r"malloc failed at event \d+", svg)) == 2


def test_the_player_shows_the_failures_and_compares_on_one_capacity(small):
    data = player_data(open_trace(str(small)), ["A2", "950PR"])
    a2, pr = data["products"]
    assert a2["capacity"] == pr["capacity"] == 32 * MiB
    assert a2["failed"] == 2 and a2["first_failure"] is not None
    assert len(a2["failures"]) == 2
    # an explicit capacity is every product's
    data = player_data(open_trace(str(small)), ["A2", "950PR"], capacity=64 * MiB)
    assert [p["capacity"] for p in data["products"]] == [64 * MiB, 64 * MiB]
    assert data["products"][0]["failed"] == 0


def _fallback_event(path):
    events = [json.loads(line) for line in path.read_text().splitlines()[1:]]
    return next(i for i, e in enumerate(events) if e.get("fallback") is True)


def test_fallback_blocks_are_marked_in_every_picture(small, tmp_path):
    pytest.importorskip("matplotlib", reason="PNG output needs the optional plot extra")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    from ascend_memsim.observe.png import draw_figure
    from ascend_memsim.observe.replay import replay
    from ascend_memsim.observe.viz import FALLBACK_LABEL, MapSnapshot, text_map

    at = _fallback_event(small)
    result = replay(open_trace(str(small)), stop_after=at, keep_runtime=True)
    try:
        snapshot = MapSnapshot.of(result.runtime.device(0))
    finally:
        result.runtime.close()
    fallen = [b for b in snapshot.blocks if b.fallback]
    assert len(fallen) == 1
    # the text map: its own character, in the legend
    text = text_map(snapshot)
    assert text.splitlines()[1].split()[-1].startswith("F")
    assert "F normal pages of a HUGE_FIRST fallback" in text
    # the PNG: a red outline on the block's requested bytes, a legend entry, a label
    fig = draw_figure(snapshot=snapshot)
    try:
        ax = fig.axes[0]
        outlined = [p for p in ax.patches if isinstance(p, Rectangle)
                    and p.get_edgecolor()[:3] == pytest.approx((0xC0 / 255, 0, 0))]
        assert len(outlined) == 1 and outlined[0].get_linewidth() >= 1.5
        assert FALLBACK_LABEL in [t.get_text() for t in ax.get_legend().get_texts()]
        assert any(t.get_text().endswith(", fallback") for t in ax.texts)
    finally:
        plt.close(fig)
    # the SVG, as plot writes it
    out = tmp_path / "at.svg"
    assert run("plot", small, "--at", at, "-o", out)[0] == 0
    svg = out.read_text()
    assert FALLBACK_LABEL in svg and 'stroke="#C00000" stroke-width="2"' in svg
    # the player: the flag per block and the legend's words
    data = player_data(open_trace(str(small)), ["A2"])
    assert data["fallback_label"] == FALLBACK_LABEL
    assert sum(b[9] for b in data["products"][0]["blocks"]) == 1


def test_png_of_a_19_gib_job_fits_a_screen_with_readable_labels():
    """Issue 25 item 16: the segment maps of a 19 GiB job were a 4,136-pixel-tall PNG."""
    pytest.importorskip("matplotlib", reason="PNG output needs the optional plot extra")
    import matplotlib.pyplot as plt

    from ascend_memsim import Runtime
    from ascend_memsim.observe.png import _DPI, MAX_HEIGHT, draw_figure
    from ascend_memsim.observe.replay import Timeline
    from ascend_memsim.observe.viz import MapSnapshot

    sizes = [1 * MiB, 3 * MiB, 20 * MiB, 96 * MiB, 300 * MiB, 7000]
    with Runtime("A2", sanitizer="off") as rt:
        rt.set_device(0)
        done = 0
        for i in range(400):
            size = sizes[i % len(sizes)]
            rt.malloc(size)
            done += size
            if done > 19 * 1024 * MiB:
                break
        snapshot = MapSnapshot.of(rt.device(0))
    timeline = Timeline(capacity=snapshot.capacity)
    timeline.points = [(-1, {}), (0, {"APP": snapshot.used_bytes})]
    timeline.events = 1
    for kwargs in ({"snapshot": snapshot}, {"snapshot": snapshot, "timeline": timeline},
                   {"snapshot": snapshot, "timeline": timeline, "maps": [snapshot]}):
        fig = draw_figure(**kwargs)
        try:
            height = fig.get_size_inches()[1] * _DPI
            assert height <= MAX_HEIGHT, kwargs.keys()
            fig.canvas.draw()
            for ax in fig.axes[1 if "timeline" in kwargs else 0:]:
                labels = ax.get_yticklabels()
                assert 8 <= len(labels) <= 40
                assert all(label.get_fontsize() >= 7 for label in labels)
                # rows are at least as tall as the labels: none overprints the next
                boxes = [label.get_window_extent() for label in labels]
                assert all(a.y0 >= b.y1 - 0.5 for a, b in zip(boxes, boxes[1:]))
        finally:
            plt.close(fig)


def _padded_event(path):
    events = [json.loads(line) for line in path.read_text().splitlines()[1:]]
    return next(i for i, e in enumerate(events) if e.get("size") == 2 * MiB)


def test_plot_zoom_draws_a_block_close_up_with_its_plus_32(small, tmp_path):
    from ascend_memsim.observe.closeup import closeup_of

    at = _padded_event(small)
    out = tmp_path / "zoom.svg"
    code, text = run("plot", small, "--zoom", at, "-o", out)
    assert code == 0, text
    svg = out.read_text()
    assert f"allocated by event {at}:" in svg and "footprint 4 MiB" in svg
    assert "+32 B padding" in svg
    assert "size rule: ALIGN_UP(2097152, 32) + 32 = 2097184" in svg
    assert "huge pages: footprint ALIGN_UP(2097184, 2 MiB) = 4194304" in svg
    # the magnified padding is tens of pixels wide (a map draws it 2 pixels wide)
    widths = [float(w) for w in re.findall(
        r'<rect x="[\d.]+" y="[\d.]+" width="([\d.]+)" height="26" fill="#D55E00"', svg)]
    assert widths and widths[0] > 60
    # on 950PR the same block has no padding
    closeup = closeup_of(open_trace(str(small)), at, "950PR")
    assert closeup.block.padding == 0 and closeup.block.footprint == 2 * MiB
    assert any("no +32" in line or "= 2097152" in line for line in closeup.why())
    # an event that allocated nothing is told, not drawn
    events = [json.loads(line) for line in small.read_text().splitlines()[1:]]
    free = next(i for i, e in enumerate(events) if e["event"] == "free")
    code, _ = run("plot", small, "--zoom", free, "-o", tmp_path / "no.svg")
    assert code == 2 and not (tmp_path / "no.svg").exists()
    assert run("plot", small, "--zoom", at, "--player", "-o", tmp_path / "p.html")[0] == 2


def test_png_close_up_magnifies_the_padding(small):
    pytest.importorskip("matplotlib", reason="PNG output needs the optional plot extra")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    from ascend_memsim.observe.closeup import closeup_of
    from ascend_memsim.observe.png import _DPI, MAX_HEIGHT, draw_figure

    closeup = closeup_of(open_trace(str(small)), _padded_event(small))
    fig = draw_figure(closeups=[closeup])
    try:
        assert fig.get_size_inches()[1] * _DPI <= MAX_HEIGHT
        ax = fig.axes[0]
        fig.canvas.draw()
        padding = [p for p in ax.patches if isinstance(p, Rectangle)
                   and p.get_facecolor()[:3] == pytest.approx((0xD5 / 255, 0x5E / 255, 0))]
        to_px = ax.transData.transform
        widths = sorted(to_px((p.get_x() + p.get_width(), 0))[0] - to_px((p.get_x(), 0))[0]
                        for p in padding)
        assert len(widths) == 2 and widths[0] >= 1.9 and widths[1] > 60
        texts = [t.get_text() for t in ax.texts]
        assert "+32 B padding" in texts
        assert any("ALIGN_UP(2097152, 32) + 32 = 2097184" in t for t in texts)
    finally:
        plt.close(fig)


def test_the_hbm_to_ddr_rule_is_named_in_explain_and_shown_in_the_demo():
    from ascend_memsim import explain

    steps = explain(100, product="310P").steps
    rule = [s for s in steps if "HBM-to-DDR" in s.text]
    assert len(rule) == 1 and "aclrtGetMemInfo" in rule[0].rule and "DDR" in rule[0].rule
    assert not any("HBM-to-DDR" in s.text for s in explain(100, product="A2").steps)
    code, text = run("explain", "100", "--product", "310P")
    assert code == 0 and "the HBM-to-DDR rule" in text

    code, text = run("demo")
    assert code == 0
    step = text[text.index("7. HBM answered from DDR"):text.index("Next:")]
    assert "310P has no HBM" in step and "in DDR" in step
    figures = dict(re.findall(r"get_mem_info\((ACL_\w+)\)\s+-> (free \d+, total \d+)", step))
    assert figures["ACL_HBM_MEM"] == figures["ACL_DDR_MEM"]
    assert figures["ACL_HBM_MEM_HUGE"] == figures["ACL_DDR_MEM_HUGE"]
    assert figures["ACL_DDR_MEM"] != "free 0, total 0"
