"""The trace player's page without a browser: what it holds, its bounds, its escaping, the CLI.

tests/test_player_browser.py drives the page in Chromium.
"""

import json
import re

import pytest

from ascend_memsim import MiB
from ascend_memsim.cli import main
from ascend_memsim.memory.errors import InvalidArgument
from ascend_memsim.observe import player
from ascend_memsim.observe.player import player_data, player_html, products_for, save_player
from ascend_memsim.observe.replay import replay
from ascend_memsim.observe.trace import Recorder


def _trace(a2, n=6):
    with Recorder(a2, stacks=True) as rec:
        ptrs = [a2.malloc((k + 1) * MiB) for k in range(n)]
        for ptr in ptrs[::2]:
            a2.free(ptr)
    return rec.trace


def _embedded(page):
    found = re.search(r'<script type="application/json" id="memsim-data">(.*?)</script>', page,
                      re.S)
    return json.loads(found.group(1))


def _state_at(panel, index):
    """Footprint bytes and blocks after event ``index``, from the page's changes (what the
    page's script computes)."""
    live = set()
    ops = panel["ops"]
    for k in range(0, len(ops), 2):
        if ops[k] > index:
            break
        signed = ops[k + 1]
        (live.add if signed > 0 else live.discard)(abs(signed) - 1)
    return sum(panel["blocks"][b][4] for b in live), len(live)


def test_the_page_holds_each_products_replay(a2):
    trace = _trace(a2)
    data = player_data(trace, ["A2", "950PR"], capacity=24 * MiB)
    assert [p["product"] for p in data["products"]] == ["A2", "950PR"]
    assert data["events"] == data["shown"] == len(trace.events)
    assert data["kinds"] == "m" * 6 + "f" * 3
    for panel in data["products"]:
        result = replay(trace, panel["product"], capacity=24 * MiB)
        assert panel["peak"] == [result.peak_index, result.peak_bytes]
        assert panel["failed"] == result.failures
        assert (panel["first_failure"] or {}).get("index") == (
            result.first_failure.index if result.first_failure else None)
        for index in range(len(trace.events)):
            upto = replay(trace, panel["product"], capacity=24 * MiB, stop_after=index,
                          keep_runtime=True)
            blocks = list(upto.runtime.device(0).blocks())
            upto.runtime.close()
            assert _state_at(panel, index) == (sum(b.footprint for b in blocks), len(blocks))
    # on 24 MiB, A2 (its +32 rule costs a huge page more) fails; 950PR does not
    assert data["products"][0]["failed"] and not data["products"][1]["failed"]


def test_the_page_is_self_contained_and_escapes_trace_text(a2):
    trace = _trace(a2, 2)
    hostile = '</script><script>alert(1)</script><!-- & \u2028'
    trace.name = hostile
    trace.events[0]["stack"] = [hostile]
    page = player_html(trace, ["A2"])
    # the two scripts of the page, no other; nothing fetched from anywhere
    assert page.count("<script") == 2 and page.count("</script>") == 2
    assert not re.search(r'\b(src|href)\s*=', page)
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
    data = _embedded(page)
    assert "\u2028" not in page[page.index('id="memsim-data"'):]
    assert data["name"] == hostile and [hostile] in data["stacks"]
    assert "<title>&lt;/script&gt;" in page


def test_long_traces_are_capped_and_say_so(a2):
    with Recorder(a2) as rec:
        for _ in range(30):
            a2.free(a2.malloc(4096))
    page = player_html(rec.trace, ["A2"], max_events=10)
    data = _embedded(page)
    assert (data["events"], data["shown"], len(data["kinds"])) == (60, 10, 10)
    panel = data["products"][0]
    assert max(panel["ops"][::2]) <= 9 and len(panel["blocks"]) == 5
    assert panel["timeline"][-1][0] == 59          # the timeline covers the whole trace
    assert "The slider covers the first 10 of 60 events" in page


def test_stacks_are_cut_to_size_and_to_a_budget(a2, monkeypatch):
    with Recorder(a2) as rec:
        a2.malloc(100)
        a2.malloc(200)
    rec.trace.events[0]["stack"] = [f"frame {k}" for k in range(100)] + ["x" * 10_000]
    rec.trace.events[1]["stack"] = ["another"]
    data = player_data(rec.trace, ["A2"])
    frames = data["stacks"][0]
    assert len(frames) == player.FRAMES + 1 and frames[0].startswith("… 77 outer frames")
    assert frames[-1] == "x" * player.FRAME_CHARS + " …"
    monkeypatch.setattr(player, "STACK_CHARS", 300)
    data = player_data(rec.trace, ["A2"])
    assert data["stacks"] == [["another"]] and data["stacks_left_out"] == 1
    assert [b[8] for b in data["products"][0]["blocks"]] == [-2, 0]


def test_the_map_folds_free_stretches(a2):
    with Recorder(a2) as rec:
        a2.malloc(100)
        big = a2.malloc(40 * MiB)
        a2.free(big)
        a2.malloc(4 * MiB)
    panel = player_data(rec.trace, ["A2"], capacity=64 * MiB)["products"][0]
    assert panel["row_bytes"] == 2 * MiB
    # every row a block ever touched is drawn (the map does not jump while sliding)
    rows = [line[1] for line in panel["lines"] if line[0] == 0]
    assert rows[0] == 0 and len(rows) >= 22
    assert panel["lines"][-1][0] == 1 and panel["lines"][-1][2] == 32


def test_bad_options_are_refused():
    from ascend_memsim.observe.trace import Trace

    with pytest.raises(InvalidArgument, match="max_events"):
        player_data(Trace(), ["A2"], max_events=0)
    with pytest.raises(InvalidArgument):
        player_data(Trace(), ["no-such-product"])
    assert products_for(None) == ["A2", "950PR"] and products_for("950pr") == ["950PR", "A2"]


def test_plot_player_from_the_command_line(a2, tmp_path, capsys):
    path = tmp_path / "t.jsonl"
    _trace(a2).save(str(path))
    out = tmp_path / "t.html"
    assert main(["plot", str(path), "--player", "-o", str(out), "--quiet"]) == 0
    assert "the trace player" in capsys.readouterr().out
    data = _embedded(out.read_text(encoding="utf-8"))
    assert [p["product"] for p in data["products"]] == ["A2", "950PR"]
    assert main(["plot", str(path), "--player", "-o", str(tmp_path / "t.svg")]) == 2
    assert "give -o NAME.html" in capsys.readouterr().err


def test_save_player_reports_what_it_wrote(a2, tmp_path):
    written = save_player(str(tmp_path / "p.html"), _trace(a2), ["A2"])
    assert written["bytes"] == (tmp_path / "p.html").stat().st_size
    assert written["products"] == ["A2"] and written["events"] == written["shown"] == 9
