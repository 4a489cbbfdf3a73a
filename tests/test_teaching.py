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
