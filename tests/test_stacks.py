"""Recorded stacks at work: replay's first failure, stats' sites at the peak, the map's hover."""

import io
import json
import xml.etree.ElementTree as ET

from ascend_memsim import MiB, Runtime
from ascend_memsim.cli import main
from ascend_memsim.observe.replay import replay
from ascend_memsim.observe.trace import Recorder, load
from ascend_memsim.observe.viz import MapSnapshot, map_svg

SVG = "{http://www.w3.org/2000/svg}"


def weights(rt, n):
    blocks = []
    for _ in range(n):
        blocks.append(rt.malloc(3 * MiB))
    return blocks


def activations(rt):
    return rt.malloc(100)


def _trace(tmp_path):
    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer="off") as rt, \
            Recorder(rt, stacks=True) as rec:
        rt.set_device(0)
        kept = weights(rt, 3)
        small = activations(rt)
        rt.free(small)
        for ptr in kept:
            rt.free(ptr)
    path = tmp_path / "t.jsonl"
    rec.trace.save(str(path))
    return str(path)


def run(*argv):
    out = io.StringIO()
    return main(list(argv), out=out), out.getvalue()


def test_replays_first_failure_shows_its_recorded_stack(tmp_path):
    path = _trace(tmp_path)
    code, text = run("replay", path, "--capacity", "10MiB", "--quiet")
    assert code == 1
    failure = text[text.index("first failure"):]
    assert "recorded at:" in failure
    assert "test_stacks.py:19 in weights" in failure.split("recorded at:")[1]


def test_stats_lists_the_top_allocation_sites_at_the_peak(tmp_path):
    path = _trace(tmp_path)
    code, text = run("stats", path, "--quiet")
    assert code == 0
    sites = text[text.index("top allocation sites at the peak"):].splitlines()
    assert "12 MiB + 192 B" in sites[0]
    assert sites[1].split() [:5] == ["12", "MiB", "in", "3", "blocks:"]
    assert sites[1].endswith("test_stacks.py:19 in weights")
    assert sites[2].endswith("test_stacks.py:24 in activations") and "192 B in 1 block" in sites[2]
    result = json.loads(run("stats", path, "--quiet", "--json")[1])
    assert result["replay"]["peak_sites"][0][1:] == [12 * MiB, 3]


def test_without_stacks_stats_lists_no_sites(tmp_path):
    with Runtime("A2", hbm_bytes=64 * MiB) as rt, Recorder(rt) as rec:
        rt.set_device(0)
        rt.free(rt.malloc(100))
    path = tmp_path / "plain.jsonl"
    rec.trace.save(str(path))
    assert "top allocation sites" not in run("stats", str(path), "--quiet")[1]
    assert replay(load(str(path)), "A2").peak_sites == []


def test_the_map_shows_the_allocation_site_on_hover_and_draws_block_boundaries(tmp_path):
    trace = load(_trace(tmp_path))
    result = replay(trace, "A2", stop_after=4, keep_runtime=True)   # 3 blocks + the small one
    try:
        svg = map_svg(MapSnapshot.of(result.runtime.device(0)))
    finally:
        result.runtime.close()
    root = ET.fromstring(svg)
    titles = [t.text for t in root.iter(f"{SVG}title")]
    assert any("allocated at:" in t and t.endswith("test_stacks.py:19 in weights")
               for t in titles)
    assert any(t.endswith("test_stacks.py:24 in activations") for t in titles)
    edges = [e for e in root.iter(f"{SVG}line") if e.get("class") == "edge"]
    # each of the 4 blocks has a start and an end line (an end at a row boundary included)
    assert len(edges) == 8


def test_a_live_runtimes_map_shows_recorded_sites():
    with Runtime("A2", hbm_bytes=16 * MiB) as rt:
        rt.set_device(0)
        rt.set_record_sites(True)
        ptr = activations(rt)
        svg = map_svg(MapSnapshot.of(rt.device(0)))
        rt.free(ptr)
    assert "test_stacks.py:24 in activations" in svg
