"""``estimate --world-size N`` with ``--sweep``, ``--bisect`` and ``--plot``: the settings a
distributed job fits with, each rank class's smallest card, and the picture; every figure
checked by hand or against a run of the script at that setting."""

import io
import json
import textwrap
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch", reason="torchsim runs scripts on torch's fake tensors; "
                                            "install the torch extra")

from ascend_memsim.cli import main  # noqa: E402
from ascend_memsim.torchsim import estimate_ranks  # noqa: E402
from ascend_memsim.torchsim.ranks.search import (  # noqa: E402
    TRACE_CAPACITY,
    bisect_ranks,
    outside_blocks,
    sweep_ranks,
)

MiB = 1 << 20

#: a 2-rank tensor-parallel toy whose blocks are whole MiB (a storage of n MiB - 32 bytes
#: takes a block of n MiB: + 32, then 512-byte steps; each above 10 MiB its own segment)
FRAG = """
    import os, torch, torch.distributed as dist
    import torch_npu
    rank = int(os.environ["RANK"])
    torch.npu.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("hccl")
    tp = dist.new_group([0, 1])
    MiB = 1 << 20

    def block(mib):
        return torch.empty(mib * MiB - 32, dtype=torch.uint8, device="npu")

    w = block(100)
    if rank == 0:
        emb = block(EMB)
    y = block(20)
    dist.all_reduce(y, group=tp)
    a = block(60)
    b = block(60)
    del a
    c = block(100)
"""


def script(tmp_path, emb=0, name="frag.py"):
    text = textwrap.dedent(FRAG).replace("EMB", str(emb))
    if not emb:
        text = text.replace("if rank == 0:\n    emb = block(0)\n", "")
    path = tmp_path / name
    path.write_text(text)
    return str(path)


@pytest.fixture(autouse=True)
def _no_hccl_environment(monkeypatch):
    monkeypatch.delenv("HCCL_BUFFSIZE", raising=False)
    monkeypatch.delenv("P2P_HCCL_BUFFSIZE", raising=False)


SETTINGS = dict(candidates=["", "expandable_segments:True"], hccl_buffsizes=[200, 100])


def test_sweep_names_a_setting_that_fits_where_the_defaults_fail(tmp_path):
    """By hand, on a 620 MiB card with a 100 MiB runtime share, each rank (alike): share
    [0,100), w [100,200), y [200,220), the communicator [220, 220 + 2 x HCCL_BUFFSIZE), a and
    b 60 MiB each above it; a freed; c asks 100 MiB.
    - defaults (200 MB): a needs [620, 680): out of memory for a's 60 MiB;
    - expandable segments, 200 MB: the same (nothing is freed yet);
    - 100 MB: b ends at 540, c needs 100 MiB in one piece: 80 free at the top, a's 60 below
      b (freed by the retry) are apart: out of memory for c's 100 MiB;
    - expandable segments, 100 MB: the retry unmaps a's pages and c maps 100 MiB of pages
      anywhere: fits, reserved 100 + 20 + 60 + 100 = 280 MiB, total 280 + 200 + 100 = 580.
    """
    path = script(tmp_path)
    found = sweep_ranks(path, world_size=2, capacity=620 * MiB, runtime_share=100 * MiB,
                        **SETTINGS)
    assert found.traced_runs == 2 and found.replays == 2 * 4     # 2 ranks x 4 settings
    best = found.best
    assert (best.alloc_conf, best.hccl_buffsize) == ("expandable_segments:True", 100)
    assert [(c.peak_reserved, c.hccl, c.total, c.margin) for c in best.classes] == [
        (280 * MiB, 200 * MiB, 580 * MiB, 40 * MiB)] * 2
    assert [r.fits for r in found.results] == [True, False, False, False]
    default = found.find(alloc_conf="", hccl_buffsize=200)
    assert "out of memory, 60.00 MiB" in default.worst.why()
    assert "frag.py:" in default.worst.why()
    assert "out of memory, 100.00 MiB" in found.find(alloc_conf="",
                                                     hccl_buffsize=100).worst.why()
    assert "60.00 MiB" in found.find(alloc_conf="expandable_segments:True",
                                     hccl_buffsize=200).worst.why()
    # the best setting was run again, and the run agrees
    assert found.check == {"setting": best.label(), "fits": True, "agrees": True,
                           "differs": ""}
    assert found.fits and found.checked.rank(1).total == 580 * MiB
    text = str(found)
    assert text.splitlines()[2].split()[:4] == ["A2", "2", "expandable_segments:True", "100"]
    assert "as the replay says" in text and "2 run(s) of the script, 8 replays" in text


def test_each_replay_is_the_run_at_that_setting(tmp_path):
    """Every setting of the sweep, replayed, gives each rank's verdict and device total of a
    run of the script at that setting on that card (the default fails there, the best fits:
    the same capacity)."""
    path = script(tmp_path)
    found = sweep_ranks(path, world_size=2, capacity=620 * MiB, runtime_share=100 * MiB,
                        check=False, **SETTINGS)
    assert found.check is None
    for outcome in found.results:
        run = estimate_ranks(path, world_size=2, capacity=620 * MiB,
                             runtime_share=100 * MiB, alloc_conf=outcome.alloc_conf,
                             hccl_buffsize=outcome.hccl_buffsize)
        for c in outcome.classes:
            f = run.rank(c.traced_rank)
            assert (f.fits, f.estimate.peak_reserved, f.hccl) == (
                c.fits, c.peak_reserved, c.hccl), outcome.label()
    assert not estimate_ranks(path, world_size=2, capacity=620 * MiB,
                              runtime_share=100 * MiB).fits


def test_bisect_gives_each_rank_class_its_smallest_card(tmp_path, monkeypatch):
    """Rank 0 holds a 50 MiB embedding more. By hand, nothing is freed before c but a, whose
    60 MiB cannot hold c, so each rank needs every block at once: rank 0 100 (share) + 100 +
    50 + 20 + 400 (HCCL) + 60 + 60 + 100 = 890 MiB, rank 1 840 MiB; with HCCL_BUFFSIZE=50,
    590 and 540."""
    path = script(tmp_path, emb=50)
    found = bisect_ranks(path, world_size=2, runtime_share=100 * MiB)
    assert [(c.ranks, c.needs, c.search.smallest, c.total, c.hccl) for c in found.classes] == [
        ((0,), 890 * MiB, 890 * MiB, 890 * MiB, 400 * MiB),
        ((1,), 840 * MiB, 840 * MiB, 840 * MiB, 400 * MiB)]
    assert found.needs == 890 * MiB and found.fits and found.top == TRACE_CAPACITY
    monkeypatch.setenv("HCCL_BUFFSIZE", "50")
    small = bisect_ranks(path, world_size=2, runtime_share=100 * MiB)
    assert [c.needs for c in small.classes] == [590 * MiB, 540 * MiB]
    # a card one step below fails for the run too, and the answer fits
    for capacity, fits in ((590 * MiB, True), (588 * MiB, False)):
        assert estimate_ranks(path, world_size=2, capacity=capacity,
                              runtime_share=100 * MiB).rank(0).fits is fits
    assert "DOES NOT FIT" not in str(small) and "890" not in str(small)


def test_bisect_takes_the_settings_the_run_took_from_its_environment(tmp_path, monkeypatch):
    # as the single-card --bisect: without --alloc-conf, the replays use what the traced
    # run read (PYTORCH_NPU_ALLOC_CONF here), not the defaults
    path = script(tmp_path, emb=50)
    monkeypatch.setenv("PYTORCH_NPU_ALLOC_CONF", "expandable_segments:True")
    from_env = bisect_ranks(path, world_size=2, runtime_share=100 * MiB)
    monkeypatch.delenv("PYTORCH_NPU_ALLOC_CONF")
    given = bisect_ranks(path, world_size=2, runtime_share=100 * MiB,
                         alloc_conf="expandable_segments:True")
    default = bisect_ranks(path, world_size=2, runtime_share=100 * MiB)
    assert from_env.alloc_conf == given.alloc_conf == "expandable_segments:True"
    assert [c.needs for c in from_env.classes] == [c.needs for c in given.classes]
    assert default.alloc_conf == "" and [c.needs for c in default.classes] == [
        890 * MiB, 840 * MiB]


def test_outside_blocks_resize_only_what_hccl_buffsize_sizes(tmp_path):
    """A group with its own hccl_buffer_size and a send/receive pair keep their sizes when
    the sweep changes HCCL_BUFFSIZE; the world group's follows it."""
    text = """
        import os, torch, torch.distributed as dist
        import torch_npu
        import torch_npu._C._distributed_c10d as c10d_npu
        rank = int(os.environ["RANK"])
        torch.npu.set_device(rank)
        dist.init_process_group("hccl")
        options = c10d_npu.ProcessGroupHCCL.Options()
        options.hccl_config = {"hccl_buffer_size": 30}
        tp = dist.new_group([0, 1], pg_options=options)
        y = torch.empty(1024, device="npu")
        dist.all_reduce(y, group=tp)
        dist.all_reduce(y)
        if rank == 0:
            dist.send(y, 1)
        else:
            dist.recv(y, 0)
    """
    path = tmp_path / "groups.py"
    path.write_text(textwrap.dedent(text))
    traced = estimate_ranks(str(path), world_size=2, runtime_share=10 * MiB, history=True)
    f = traced.rank(0)
    assert [c.sized_by for c in f.communicators] == [
        "hccl_buffer_size", "HCCL_BUFFSIZE", "P2P_HCCL_BUFFSIZE"]
    # each communicator's place: after the trace entries made before it, in order
    assert [c.entry for c in f.communicators] == sorted(c.entry for c in f.communicators)
    assert f.communicators[0].entry >= 1
    blocks = outside_blocks(f, 25)
    assert [(b.at, b.size) for b in blocks] == [(0, 10 * MiB)] + [
        (c.entry, size) for c, size in zip(f.communicators, (60 * MiB, 50 * MiB, 40 * MiB))]


def test_sweep_over_products_and_world_sizes_traces_each_once(tmp_path):
    """One run per rank class, product and world size; the rows are every combination; a
    runtime share the card cannot hold fails every rank before its first tensor."""
    path = script(tmp_path)
    text = open(path).read().replace("tp = dist.new_group([0, 1])", "tp = None")
    open(path, "w").write(text)
    found = sweep_ranks(path, world_size=1, world_sizes=[1, 2], products=["A2", "A3"],
                        candidates=[""], hccl_buffsizes=[200, 25], capacity=700 * MiB,
                        runtime_share=100 * MiB, check=False)
    assert found.traced_runs == 2 * (1 + 2)
    assert len(found.results) == 2 * 2 * 2
    # 100 + 100 + 20 + 2 x 25 + 60 + 60 + 100: 490 MiB on any product and card count
    for product in ("A2", "A3"):
        for n in (1, 2):
            one = found.find(product=product, world_size=n, hccl_buffsize=25)
            assert one.fits and one.worst.total == 490 * MiB
            assert not found.find(product=product, world_size=n, hccl_buffsize=200).fits
    tiny = sweep_ranks(path, world_size=1, candidates=[""], hccl_buffsizes=[200],
                       capacity=64 * MiB, runtime_share=100 * MiB, check=False)
    assert tiny.best is None and "the runtime's share" in tiny.results[0].worst.why()


def test_the_picture_has_a_row_per_class_for_8_and_1024_ranks(tmp_path):
    pytest.importorskip("matplotlib", reason="the picture is drawn with matplotlib (the "
                                             "plot extra)")
    from PIL import Image

    from ascend_memsim.torchsim.ranks.plot import picture_rows, plot_ranks

    path = script(tmp_path, emb=50)
    text = open(path).read().replace("tp = dist.new_group([0, 1])",
                                     "tp = dist.new_group([rank - rank % 2, rank - rank % 2 + 1])")
    open(path, "w").write(text)
    result = estimate_ranks(path, world_size=8, capacity=2 << 30, runtime_share=100 * MiB)
    assert result.traced == "every rank"
    rows = picture_rows(result)
    # rank 0 holds the embedding; ranks 1-7 are alike: two rows, not eight
    assert [r for r, _ in rows] == [(0,), (1, 2, 3, 4, 5, 6, 7)]
    heights = []
    for name, n in (("r8.png", 8), ("r1024.png", 1024)):
        if n == 1024:
            # the same two classes standing for 1,024 ranks
            classes = [replace(result.classes[0], ranks=(0,)),
                       replace(result.classes[1], ranks=tuple(range(1, 1024)))]
            result = replace(result, world_size=1024, classes=classes)
        out = tmp_path / name
        plot_ranks(str(out), result)
        with Image.open(out) as im:
            heights.append(im.size[1])
    assert heights[0] == heights[1] < 600
    plot_ranks(str(tmp_path / "r.svg"), result, needs=[890 * MiB, 840 * MiB])
    assert (tmp_path / "r.svg").read_text().startswith("<?xml")
    with pytest.raises(ValueError, match=r"\.png or \.svg"):
        plot_ranks(str(tmp_path / "r.html"), result)


def test_command_line_sweep_bisect_and_plot(tmp_path):
    path = script(tmp_path)
    out = io.StringIO()
    common = ["estimate", "--world-size", "2", "--runtime-share", "100MiB"]
    rc = main([*common, "--capacity", "620MiB", "--sweep-conf", ";expandable_segments:True",
               "--sweep-hccl", "200,100", "--json", path], out=out)
    assert rc == 0
    doc = json.loads(out.getvalue())
    assert (doc["best"]["alloc_conf"], doc["best"]["hccl_buffsize_mb"],
            doc["best"]["worst_total"]) == ("expandable_segments:True", 100, 580 * MiB)
    assert doc["check"]["agrees"] and len(doc["results"]) == 4
    out = io.StringIO()
    rc = main([*common, "--capacity", "620MiB", "--sweep-conf", "", "--sweep-hccl", "200",
               path], out=out)
    assert rc == 1 and "no setting fits" in out.getvalue()
    out = io.StringIO()
    picture = tmp_path / "b.png"
    if _has_matplotlib():
        rc = main([*common, "--bisect", "--plot", str(picture), path], out=out)
        assert picture.exists()
    else:
        rc = main([*common, "--bisect", path], out=out)
    assert rc == 0 and "840.00 MiB" in out.getvalue()
    for bad in (["--sweep-hccl", "2OO"], ["--sweep", "--alloc-conf", "expandable_segments:True"],
                ["--sweep", "--bisect"], ["--plot", str(tmp_path / "x.html")],
                ["--sweep-conf", "max_split_size_mb:1"]):
        assert main([*common, *bad, path], out=io.StringIO()) == 2, bad
    # the pictures and the lists swept per rank are for every rank's card
    for ranks_only in (["--plot", str(picture)], ["--sweep-hccl", "200,100"]):
        assert main(["estimate", *ranks_only, path], out=io.StringIO()) == 2, ranks_only


def _has_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def test_when_every_setting_fits_the_default_comes_first_then_least_memory(tmp_path):
    """Issue 36, item 17: on a roomy card the sweep named "best" the setting with the most
    margin. By hand (the docstring above), on 2 GiB: every setting fits; the default's worst
    rank needs 100 + 20 + 60 + 60 + 100 reserved (nothing freed before c, a's 60 MiB cannot
    hold it) + 400 HCCL + 100 share = 840 MiB; with HCCL_BUFFSIZE=100, 640 MiB."""
    path = script(tmp_path)
    found = sweep_ranks(path, world_size=2, capacity=2048 * MiB, runtime_share=100 * MiB,
                        check=False, **SETTINGS)
    assert all(r.fits for r in found.results)
    assert found.best.is_default and found.best.worst.total == 840 * MiB
    totals = [r.worst.total for r in found.results[1:]]
    assert totals == sorted(totals) and totals[0] == 640 * MiB
    assert "every setting fits; the default is enough: A2, 2 ranks" in str(found)


def test_a_sweep_reports_progress_on_a_terminal_only(tmp_path):
    """Issue 36, item 16: a 130 s sweep showed nothing. Each run of the script, each replay
    and the check are reported; the command shows them on a terminal, not when piped, with
    --quiet or --json."""
    import argparse

    from ascend_memsim.cli.estimate_ranks import sweep_progress

    seen = []
    path = script(tmp_path)
    sweep_ranks(path, world_size=2, capacity=620 * MiB, runtime_share=100 * MiB,
                progress=lambda *a: seen.append(a), **SETTINGS)
    assert seen[:2] == [("traced", 0, 1), ("traced", 1, 1)]
    # one estimate runs both ranks (two classes): 2 x 4 settings replays
    assert [s for s in seen if s[0] == "replays"] == [("replays", i, 8) for i in range(1, 9)]
    assert seen[-2:] == [("check", 0, 1), ("check", 1, 1)]

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    quiet = argparse.Namespace(quiet=False, json=False)
    assert sweep_progress(quiet, io.StringIO()) is None                   # piped
    assert sweep_progress(argparse.Namespace(quiet=True, json=False), Terminal()) is None
    assert sweep_progress(argparse.Namespace(quiet=False, json=True), Terminal()) is None
    terminal = Terminal()
    show = sweep_progress(quiet, terminal)
    show("replays", 3, 8)
    assert terminal.getvalue() == "\r\x1b[Ksweep: replays 3/8, 0:00"
