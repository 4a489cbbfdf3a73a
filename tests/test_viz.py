"""Pictures: SVG and HTML produced and parsed; the text map's characters."""

import xml.etree.ElementTree as ET
from html.parser import HTMLParser

import pytest

from ascend_memsim import MiB
from ascend_memsim.observe.pictures import save_picture
from ascend_memsim.observe.replay import replay
from ascend_memsim.observe.trace import Recorder
from ascend_memsim.observe.viz import (
    MapSnapshot,
    html_page,
    map_svg,
    text_map,
    timeline_steps,
    timeline_svg,
)

SVG = "{http://www.w3.org/2000/svg}"


def _scene(a2):
    a2.malloc(2 * MiB)                       # huge: 32 B padding, 2 MiB - 32 B page rounding
    a2.malloc_align32(2 * MiB)               # huge, exact
    a2.malloc_with_cfg(100, 2, {1: 3})       # normal, another component
    return MapSnapshot.of(a2.device(0))


def test_map_svg_parses_and_shows_every_part(a2):
    snapshot = _scene(a2)
    root = ET.fromstring(map_svg(snapshot))
    assert root.tag == f"{SVG}svg"
    tips = [r.find(f"{SVG}title").text for r in root.iter(f"{SVG}rect")
            if r.find(f"{SVG}title") is not None]
    # each block: requested part; the 2 MiB malloc: padding + rounding over two rows
    assert sum("aclrtMallocAlign32" in t for t in tips) == 1
    assert sum("2097152-byte block" in t and "aclrtMalloc," in t for t in tips) == 3
    fills = [r.get("fill") for r in root.iter(f"{SVG}rect")]
    assert "url(#rounding)" in fills and "#D55E00" in fills
    assert root.find(f"{SVG}defs/{SVG}pattern").get("id") == "rounding"
    text = " ".join(t.text or "" for t in root.iter(f"{SVG}text"))
    assert "+0 MiB" in text and "+2 MiB" in text and "page rounding" in text
    by_component = ET.fromstring(map_svg(snapshot, color_by="component"))
    labels = " ".join(t.text or "" for t in by_component.iter(f"{SVG}text"))
    assert "component APP" in labels and "component HCCL" in labels


def test_map_folds_long_free_stretches(a2):
    a2.malloc(100)
    root = ET.fromstring(map_svg(MapSnapshot.of(a2.device(0))))
    rows = [t.text for t in root.iter(f"{SVG}text") if (t.text or "").startswith("+")]
    assert rows == ["+0 MiB", "+2 MiB"]
    assert any("free to the end" in (t.text or "") for t in root.iter(f"{SVG}text"))


def test_text_map_characters(a2):
    _scene(a2)
    # at a huge page a character (the scale the characters are named for)
    lines = text_map(MapSnapshot.of(a2.device(0)), cell=2 * MiB).splitlines()
    assert lines[1].split()[-1].startswith("HhHn.")
    assert lines[-2].startswith("one character = 2 MiB: ")
    # the 100 B block (footprint 128 B, no +32 with aclrtMallocWithCfg) is the one smaller
    # than a character, at 6 MiB: after the 4 MiB of the first block and the 2 MiB of the
    # second
    assert lines[-1] == "smaller than a character (2 MiB), each drawn as one: 100 B at +6 MiB"


def test_timeline_svg_and_html_page_parse(a2):
    with Recorder(a2) as rec:
        ptrs = [a2.malloc(3 * MiB) for _ in range(5)]
        a2.free(ptrs[0])
    result = replay(rec.trace, capacity=16 * MiB, timeline=True)
    assert result.timeline.failures == [4]
    svg = timeline_svg(result.timeline)
    root = ET.fromstring(svg)
    assert len(list(root.iter(f"{SVG}polygon"))) == 1
    marks = [p for p in root.iter(f"{SVG}path") if p.get("class") == "fail"]
    assert len(marks) == 1
    assert any("capacity 16 MiB" in (t.text or "") for t in root.iter(f"{SVG}text"))
    page = html_page("report", ("Timeline", svg), ("Text", "a < b"))

    class Collect(HTMLParser):
        def __init__(self):
            super().__init__()
            self.tags = []

        def handle_starttag(self, tag, attrs):
            self.tags.append((tag, dict(attrs)))

    parser = Collect()
    parser.feed(page)
    tags = [t for t, _ in parser.tags]
    assert tags[:2] == ["html", "head"] and "svg" in tags and "pre" in tags
    assert "script" not in tags and "link" not in tags
    assert not any(v.startswith("http") for _, a in parser.tags for k, v in a.items()
                   if k in ("href", "src"))
    assert "a &lt; b" in page


def test_save_picture_by_extension(a2, tmp_path):
    snapshot = _scene(a2)
    save_picture(str(tmp_path / "m.svg"), snapshot=snapshot)
    ET.parse(tmp_path / "m.svg")
    save_picture(str(tmp_path / "m.html"), snapshot=snapshot, text="report")
    assert "<svg" in (tmp_path / "m.html").read_text()
    with pytest.raises(ValueError, match="extension"):
        save_picture(str(tmp_path / "m.gif"), snapshot=snapshot)


def test_png_through_matplotlib(a2, tmp_path):
    pytest.importorskip("matplotlib", reason="PNG output needs the optional plot extra")
    snapshot = _scene(a2)
    save_picture(str(tmp_path / "m.png"), snapshot=snapshot)
    assert (tmp_path / "m.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _trace_scene(a2):
    with Recorder(a2) as rec:
        first = a2.malloc(2 * MiB)
        a2.malloc_with_cfg(100, 2, {1: 3})
        a2.free(first)
        a2.malloc(3 * MiB)
    return replay(rec.trace, "A2", capacity=64 * MiB, timeline=True)


def test_svg_with_both_pictures_holds_both_panels(a2, tmp_path):
    """Issue 9: `plot T -o x.svg` (both, the default) silently dropped the timeline."""
    result = _trace_scene(a2)
    path = tmp_path / "both.svg"
    save_picture(str(path), snapshot=MapSnapshot.of(a2.device(0)), timeline=result.timeline)
    root = ET.parse(path).getroot()
    panels = root.findall(f"{SVG}svg")
    assert len(panels) == 2
    text = path.read_text()
    assert "event number" in text and "Memory map" in text
    heights = [float(p.get("height")) for p in panels]
    assert float(panels[1].get("y")) >= heights[0]
    assert float(root.get("height")) >= sum(heights)


def test_timeline_steps_give_the_last_step_its_width(a2):
    """Issue 9: the PNG timeline ended at the last change, so its last step had no width."""
    timeline = _trace_scene(a2).timeline
    xs, ys = timeline_steps(timeline)
    assert xs[0] == 0 and xs[-1] == timeline.events and xs == sorted(xs)
    last = timeline.points[-1][1]
    assert {name: values[-1] for name, values in ys.items()} == {
        name: last.get(name, 0) for name in ys}
    assert all(len(values) == len(xs) for values in ys.values())


def test_png_legends_overlap_no_axis_label(a2):
    pytest.importorskip("matplotlib", reason="PNG output needs the optional plot extra")
    import matplotlib.pyplot as plt

    from ascend_memsim.observe.png import draw_figure

    result = _trace_scene(a2)
    fig = draw_figure(snapshot=MapSnapshot.of(a2.device(0)), timeline=result.timeline)
    try:
        renderer = fig.canvas.get_renderer()
        for ax in fig.axes:
            legend = ax.get_legend().get_window_extent(renderer)
            for other in (ax.xaxis.label, ax.title):
                box = other.get_window_extent(renderer)
                assert not legend.overlaps(box), f"legend overlaps {other.get_text()!r}"
        line = fig.axes[0].collections[0]
        assert max(v[0] for path in line.get_paths() for v in path.vertices) == (
            result.timeline.events)
    finally:
        plt.close(fig)


def _peak_trace(a2):
    """Events 0..5 with the single highest point after event 3."""
    with Recorder(a2) as rec:
        p = [a2.malloc(2 * MiB) for _ in range(3)]     # events 0, 1, 2
        q = a2.malloc(4 * MiB)                          # event 3: the peak
        a2.free(q)                                      # event 4
        a2.free(p[0])                                   # event 5
    return replay(rec.trace, "A2", capacity=64 * MiB, timeline=True)


def test_timeline_draws_event_n_at_the_tick_labelled_n(a2):
    """Issue 16: the timeline drew each event one step later than its number ("peak (event
    3)" rose at the tick labelled 4)."""
    result = _peak_trace(a2)
    assert result.peak_index == 3
    root = ET.fromstring(timeline_svg(result.timeline))
    ticks = {t.text: float(t.get("x")) for t in root.iter(f"{SVG}text")
             if t.get("class") == "tick" and (t.text or "").isdigit()}
    points = [tuple(map(float, xy.split(",")))
              for xy in next(root.iter(f"{SVG}polygon")).get("points").split()]
    top = min(y for _, y in points)
    rise, fall = sorted({x for x, y in points if y == top})
    assert rise == pytest.approx(ticks["3"], abs=0.1)
    assert fall == pytest.approx(ticks["4"], abs=0.1)
    xs, _ = timeline_steps(result.timeline)
    assert [x for x, (index, _) in zip(xs, result.timeline.points)] == [
        max(index, 0) for index, _ in result.timeline.points]


def _text_width(text, size):
    """The width in pixels of ``text`` in DejaVu Sans (matplotlib ships the font)."""
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import TextPath

    return TextPath((0, 0), text, size=size, prop=FontProperties(family="DejaVu Sans",
                                                                   weight="normal"),
                    usetex=False).get_extents().width


def test_svg_headings_fit_the_width(a2):
    """Issue 16: the map's subtitle ran past the right edge and was clipped."""
    pytest.importorskip("matplotlib", reason="the text is measured with matplotlib's font")
    snapshot = _scene(a2)
    long_title = "a_very_long_trace_file_name_recorded_on_the_cluster_" * 3 + ".jsonl on A2"
    for draw in (lambda: map_svg(snapshot), lambda: map_svg(snapshot, title=long_title),
                 lambda: timeline_svg(_peak_trace(a2).timeline, title=long_title)):
        root = ET.fromstring(draw())
        width = float(root.get("width"))
        sizes = {"title": 15 * 1.08, "sub": 11.5, "legend": 11}
        for t in root.iter(f"{SVG}text"):
            if t.get("class") in sizes and t.get("text-anchor") is None:
                right = float(t.get("x")) + _text_width(t.text or "", sizes[t.get("class")])
                assert right <= width, f"{t.text!r} ends at {right:.0f} > {width:.0f}"


def test_save_picture_title_heads_a_map_alone(a2, tmp_path):
    """Issue 16: save_picture(title=...) was ignored for a map-only SVG and PNG."""
    snapshot = _scene(a2)
    save_picture(str(tmp_path / "m.svg"), snapshot=snapshot, title="train.jsonl on A2")
    root = ET.parse(tmp_path / "m.svg").getroot()
    titles = [t.text for t in root.iter(f"{SVG}text") if t.get("class") == "title"]
    assert titles == ["train.jsonl on A2"]
    assert "Memory map: A2 device 0" in (tmp_path / "m.svg").read_text()
    pytest.importorskip("matplotlib", reason="PNG output needs the optional plot extra")
    import matplotlib.pyplot as plt

    from ascend_memsim.observe.png import draw_figure

    fig = draw_figure(snapshot=snapshot, title="train.jsonl on A2")
    try:
        assert fig.axes[0].get_title(loc="left").startswith("train.jsonl on A2\nMemory map")
    finally:
        plt.close(fig)


def test_png_titles_are_never_math_text(a2, tmp_path):
    """Issue 16: a file name with `$` went through matplotlib's math parser and failed."""
    pytest.importorskip("matplotlib", reason="PNG output needs the optional plot extra")
    result = _peak_trace(a2)
    name = r"x$\sqrt{$.jsonl on A2"
    save_picture(str(tmp_path / "t.png"), snapshot=MapSnapshot.of(a2.device(0)),
                 timeline=result.timeline, title=name)
    save_picture(str(tmp_path / "m.png"), snapshot=MapSnapshot.of(a2.device(0)), title=name)
    assert (tmp_path / "m.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_png_map_draws_what_the_svg_draws(a2):
    """Issue 16: the PNG map had no labels, no block edges, invisible 32 B padding, and
    identical rows ran together."""
    pytest.importorskip("matplotlib", reason="PNG output needs the optional plot extra")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    from ascend_memsim.observe.png import draw_figure

    for _ in range(3):
        a2.malloc(2 * MiB)              # three identical 2 MiB blocks: 4 MiB footprints
    a2.malloc(100)
    snapshot = MapSnapshot.of(a2.device(0))
    fig = draw_figure(snapshot=snapshot)
    try:
        ax = fig.axes[0]
        fig.canvas.draw()
        texts = [t.get_text() for t in ax.texts]
        assert sum("2 MiB requested, aclrtMalloc" in t for t in texts) == 3
        assert sum(t.startswith("page rounding") for t in texts) == 3
        assert any("free to" in t or "free (" in t for t in texts)
        # a dark line at each footprint's start and end (ends on a row boundary included)
        assert len(ax.lines) == 2 * len(snapshot.blocks)
        # every 32 B padding at least 2 pixels wide, drawn above the page rounding
        padding = [p for p in ax.patches if isinstance(p, Rectangle)
                   and p.get_facecolor()[:3] == pytest.approx((0xD5 / 255, 0x5E / 255, 0))]
        assert len(padding) == 4
        to_px = ax.transData.transform
        for p in padding:
            left, right = to_px((p.get_x(), 0))[0], to_px((p.get_x() + p.get_width(), 0))[0]
            assert right - left >= 1.9
            assert p.get_zorder() > max(q.get_zorder() for q in ax.patches
                                        if q.get_hatch())
    finally:
        plt.close(fig)


def test_the_text_map_is_scaled_to_the_trace_marks_block_edges_and_lists_small_blocks():
    """Issue 36, item 9: the text map was fixed at 2 MiB a character, so three 1 GiB blocks
    were 32 lines of G with no edge between them and the 100 B block was not named."""
    from ascend_memsim import GiB, Runtime

    with Runtime("A2", hbm_bytes=8 * GiB, sanitizer="off") as rt:
        rt.set_device(0)
        for _ in range(3):
            rt.malloc(GiB, 6)                              # HUGE1G_ONLY
        rt.malloc(100)
        lines = text_map(MapSnapshot.of(rt.device(0))).splitlines()
    # the blocks span 3 GiB + 192 B (the 100 B block: ALIGN_UP(100, 32) + 32 = 160 B, 192 B
    # on the 64 B granule); in about 8 lines of 64 that is 3 GiB / 512 = 6 MiB a character,
    # up to a power of two: 8 MiB; a 1 GiB block is 128 characters, two lines
    g = "G" * 64
    assert lines[1:9] == [
        "+0 MiB      " + g,
        "            ... 1 more line the same (512 MiB) ...",
        "+1024 MiB   |" + g[1:],                 # the second block's edge
        "+1536 MiB   " + g,
        "+2048 MiB   |" + g[1:],                 # the third's
        "+2560 MiB   " + g,
        "+3072 MiB   n" + "." * 63,             # the 100 B block, one character
        # 8 GiB - (3 GiB + 512 MiB drawn)
        "            ... 4 GiB + 512 MiB free to the end ...",
    ]
    assert lines[9].startswith("one character = 8 MiB (scaled to the 3 GiB + 192 B the "
                               "blocks span): G 1 GiB pages, ")
    assert lines[9].endswith(", | a block starts after one drawn alike")
    assert lines[10] == ("smaller than a character (8 MiB), each drawn as one: "
                         "100 B at +3072 MiB")


def test_identical_full_lines_fold_as_free_lines_do():
    """Issue 36, item 9 (the first part): full lines the same as the one above fold."""
    from ascend_memsim import GiB, Runtime

    with Runtime("A2", hbm_bytes=8 * GiB, sanitizer="off") as rt:
        rt.set_device(0)
        rt.malloc(GiB, 6)
        lines = text_map(MapSnapshot.of(rt.device(0)), cell=2 * MiB).splitlines()
    # 1 GiB at 2 MiB a character, 64 to a line: 8 lines of G, one shown
    assert lines[1] == "+0 MiB      " + "G" * 64
    assert lines[2].strip() == "... 7 more lines the same (896 MiB) ..."
    assert lines[3].strip() == "... 7 GiB free to the end ..."


def test_a_block_smaller_than_a_character_shows_beside_a_larger_one():
    """Its own character, not its neighbour's, where both share one; listed by size, or
    counted by size when there are many."""
    from types import SimpleNamespace

    from ascend_memsim.memory.rules import Page

    def block(ptr, size, footprint, fallback=False):
        return SimpleNamespace(ptr=ptr, size=size, rule_size=size, footprint=footprint,
                               page=Page.NORMAL, fallback=fallback)

    # a 3 MiB HUGE_FIRST fallback (normal pages) and a 100 B block right after it: the
    # second character holds 1 MiB of the fallback and the 192 B block; the fallback's F
    # would win it
    big = block(0, 3 * MiB, 3 * MiB, fallback=True)
    snap = MapSnapshot("t", 0, 16 * MiB, [big, block(3 * MiB, 100, 192)])
    lines = text_map(snap, cell=2 * MiB).splitlines()
    assert lines[1] == "+0 MiB      Fn......"
    assert lines[-1] == "smaller than a character (2 MiB), each drawn as one: 100 B at +3 MiB"
    # nine of them (i = 0..6 of 100 B, i = 7, 8 of 200 B): their sizes counted, the most
    # frequent first
    many = [block(4 * MiB + 256 * i, 100 if i < 7 else 200, 256) for i in range(9)]
    snap = MapSnapshot("t", 0, 16 * MiB, [big, *many])
    assert text_map(snap, cell=2 * MiB).splitlines()[-1] == (
        "smaller than a character (2 MiB), each drawn as one: 9 blocks: 7 x 100 B, 2 x 200 B")


def test_the_scale_of_the_text_map_is_a_power_of_two_of_64_bytes_or_more(a2):
    from ascend_memsim.memory.errors import InvalidArgument
    from ascend_memsim.observe.viz import text_scale

    a2.malloc(100)
    snap = MapSnapshot.of(a2.device(0))
    # 192 B used: the finest scale, 64 B a character, three characters of the block
    assert text_scale(snap) == 64
    assert text_map(snap).splitlines()[1] == "+0 MiB      NNN" + "." * 61
    for cell in (0, 32, 96, 3 * MiB, 2.0 * MiB, True):
        with pytest.raises(InvalidArgument, match="power of two"):
            text_map(snap, cell=cell)
    with pytest.raises(InvalidArgument, match="more than 4096 lines"):
        # a 1 GiB block at 64 B a character is 262,144 lines of 64
        with __import__("ascend_memsim").Runtime("A2", hbm_bytes=2 << 30,
                                                  sanitizer="off") as rt:
            rt.set_device(0)
            rt.malloc(1 << 30, 6)
            text_map(MapSnapshot.of(rt.device(0)), cell=64)
    for bad in (0, -1, 1.5):
        with pytest.raises(InvalidArgument, match="positive int"):
            text_map(snap, columns=bad)
        with pytest.raises(InvalidArgument, match="positive int"):
            text_scale(snap, lines=bad)


def _callouts(fig):
    from matplotlib.text import Annotation

    return [t for t in fig.axes[0].texts if isinstance(t, Annotation)]


def test_png_labels_a_block_too_small_to_see_beside_it():
    """Issue 36, item 9: beside three 1 GiB blocks the 100 B request is a sliver of its row
    (64 MiB), and had no label: it gets one beside it, in its row, with a line to it."""
    pytest.importorskip("matplotlib", reason="PNG output needs the optional plot extra")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    from ascend_memsim import GiB, Runtime
    from ascend_memsim.observe.png import draw_figure
    from ascend_memsim.observe.viz import PAGE_COLORS

    with Runtime("A2", hbm_bytes=8 * GiB, sanitizer="off") as rt:
        rt.set_device(0)
        for _ in range(3):
            rt.malloc(GiB, 6)
        rt.malloc(100)
        snapshot = MapSnapshot.of(rt.device(0))
    fig = draw_figure(snapshot=snapshot)
    try:
        ax = fig.axes[0]
        fig.canvas.draw()
        callouts = _callouts(fig)
        assert [c.get_text() for c in callouts] == ["100 B requested, aclrtMalloc"]
        # the line ends on the block's requested bytes (the blue rectangle), the box stands
        # to its right in the same row, clear of it
        blue = [p for p in ax.patches if isinstance(p, Rectangle)
                and p.get_facecolor()[:3] == pytest.approx(
                    tuple(int(PAGE_COLORS["normal"][i:i + 2], 16) / 255 for i in (1, 3, 5)))]
        assert len(blue) == 1
        x, y = callouts[0].xy
        assert x == pytest.approx(blue[0].get_x() + blue[0].get_width() / 2)
        assert y == pytest.approx(blue[0].get_y() + blue[0].get_height() / 2)
        assert callouts[0].xyann[1] == y
        box = callouts[0].get_bbox_patch().get_window_extent()
        block_right = ax.transData.transform((blue[0].get_x() + blue[0].get_width(), y))[0]
        assert box.x0 > block_right
        assert "too small" not in ax.get_title(loc="left")
    finally:
        plt.close(fig)


def test_png_callouts_share_a_box_where_they_would_cross_and_say_what_is_left():
    pytest.importorskip("matplotlib", reason="PNG output needs the optional plot extra")
    from types import SimpleNamespace

    import matplotlib.pyplot as plt

    from ascend_memsim.memory.rules import Page
    from ascend_memsim.observe.png import draw_figure

    def block(ptr, size):
        return SimpleNamespace(ptr=ptr, size=size, rule_size=size, footprint=256,
                               page=Page.NORMAL, fallback=False, extra=None,
                               module_name="APP", api=SimpleNamespace(value="aclrtMalloc"))

    # three 100 B blocks side by side at the start of the first 2 MiB row: one box
    fig = draw_figure(snapshot=MapSnapshot("t", 0, 64 * MiB, [block(256 * i, 100 + i)
                                                              for i in range(3)]))
    try:
        assert [c.get_text() for c in _callouts(fig)] == [
            "3 blocks: 100 B, 101 B, 102 B requested"]
    finally:
        plt.close(fig)
    # twelve, each at the start of its own row (rows of 2 MiB): eight boxes (the most
    # drawn), four named in the heading as left unlabelled
    fig = draw_figure(snapshot=MapSnapshot("t", 0, 64 * MiB, [block(2 * MiB * i, 100)
                                                              for i in range(12)]))
    try:
        assert len(_callouts(fig)) == 8
        assert "4 more blocks too small to see at this scale, not labelled" in " ".join(
            fig.axes[0].get_title(loc="left").split())
    finally:
        plt.close(fig)
