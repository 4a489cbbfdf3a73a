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
    lines = text_map(MapSnapshot.of(a2.device(0))).splitlines()
    assert lines[1].split()[-1].startswith("HhHn.")
    assert "one character = 2 MiB" in lines[-1]


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
