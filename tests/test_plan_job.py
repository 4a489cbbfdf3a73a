"""Plan a job (``ascend-memsim plan``): the largest micro-batch that fits by bisection over
estimates of the script, on every point of a grid of its knobs, each cell an estimate in a
process of its own, cached by content so that an interrupted plan resumes, alike on every
executor.

The scripts are tiny, their memory a known function of the knob, so every answer is worked
out by hand. ``alloc.py`` allocates ``batch * seq * 8 MiB`` on the NPU in one tensor. Through
torch_npu's caching allocator a request of ``n`` bytes takes ``n + 512`` (a 512-byte block
rounding of ``n`` + 32: ``x = torch.empty(...)``'s block) and, from 10 MiB up, a segment
rounded up to 2 MiB: ``8k MiB`` reserves ``8k + 2`` MiB for k >= 2 (below 10 MiB the segment
is the 20 MiB large buffer). On a 128 MiB card with no runtime share (``--runtime-share 0``)
and 5% of the card to keep free, ``ceil(0.05 * 128 MiB)`` = 6,710,887 bytes (6.4 MiB): k = 14
leaves 128 - 114 = 14 MiB (fits), k = 15 leaves 6 MiB (short of the margin), k = 16 asks for
130 MiB (out of memory).
"""

import io
import json
import math
import os
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("torch", reason="each cell is an estimate, which runs the script on "
                                    "torch's fake tensors; install the torch extra")

from ascend_memsim.cli import main
from ascend_memsim.cli.plan import plan_progress
from ascend_memsim.memory.errors import InvalidArgument
from ascend_memsim.plan import job as job_module
from ascend_memsim.plan import job_spec
from ascend_memsim.plan.cache import CacheWarning
from ascend_memsim.plan.job import most_runs, plan_job
from ascend_memsim.plan.job_cells import Runner, _warm_safe
from ascend_memsim.plan.job_executors import make_cell_executor
from ascend_memsim.plan.job_spec import JobSpec

MiB = 1 << 20
CARD = "128MiB"
QUIET = "--runtime-share 0"

ALLOC = """\
import argparse, os, torch, torch_npu
p = argparse.ArgumentParser()
p.add_argument("--batch", type=int, default=1)
p.add_argument("--seq", type=int, default=1)
p.add_argument("--rank-grows", action="store_true")
p.add_argument("--log")
a = p.parse_args()
grow = int(os.environ.get("RANK", "0")) + 1 if a.rank_grows else 1
try:
    x = torch.empty(a.batch * a.seq * grow * 8 * 1024 * 1024, dtype=torch.uint8,
                    device="npu")
finally:
    if a.log:   # one line per run that ended (out of memory or not), none for a killed one
        with open(a.log, "a") as f:
            f.write(f"{a.batch}\\n")
"""

CONFIGURED = """\
import argparse, json, torch, torch_npu
p = argparse.ArgumentParser()
p.add_argument("--deepspeed")
a = p.parse_args()
with open(a.deepspeed) as f:
    cfg = json.load(f)
assert type(cfg["train_micro_batch_size_per_gpu"]) is int
x = torch.empty(cfg["train_micro_batch_size_per_gpu"] * 8 * 1024 * 1024, dtype=torch.uint8,
                device="npu")
"""


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    where = tmp_path_factory.mktemp("job")
    (where / "alloc.py").write_text(ALLOC)
    (where / "configured.py").write_text(CONFIGURED)
    (where / "ds.json").write_text(json.dumps(
        {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2}}))
    return where


def _plan(folder, command, **kw):
    kw.setdefault("capacity", CARD)
    kw.setdefault("estimate_args", QUIET)
    return plan_job(command, cwd=str(folder), **kw)


def _table(plan):
    """What a plan answers, without how long it took or where it ran."""
    return [(p.values, p.largest, p.fits, p.peak_reserved, p.total, p.margin, p.first_over,
             p.first_rank, p.why, p.tokens, p.error,
             [(t.value, t.fits, {k: v for k, v in t.answer.items() if k != "seconds"})
              for t in p.tried]) for p in plan.points]


# -- the bisection ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def bisected(folder, tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    plan = _plan(folder, ["alloc.py", "--batch", "{batch}"], vary="batch=1..16", jobs=2,
                 cache=str(cache))
    return plan, cache


def test_the_bisection_finds_the_largest_batch_that_fits(bisected):
    plan, _ = bisected
    (p,) = plan.points
    # by hand (see the module): batch 14 reserves 8 * 14 + 2 = 114 MiB and leaves 14 MiB;
    # 15 leaves 6 MiB, short of 6.4 MiB
    assert (p.largest, p.fits, p.first_over) == (14, True, 15)
    assert (p.peak_reserved, p.total, p.margin) == (114 * MiB, 114 * MiB, 14 * MiB)
    assert p.why.startswith("6 MiB of the card left, under the 5% asked")
    # 1 and 16 first, then 8, 12, 14, 15: 2 + ceil(log2(16 - 1)) = 6 runs, within
    # ceil(log2(16)) + 2 = 6
    assert [t.value for t in p.tried] == [1, 8, 12, 14, 15, 16]
    assert plan.runs == p.runs == 6 <= most_runs(1, 16) == math.ceil(math.log2(16)) + 2
    assert plan.recommended == 0 and plan.why.startswith("batch=14: the largest batch")


def test_the_bisection_agrees_with_every_batch_run(bisected, folder):
    plan, cache = bisected
    values = ",".join(str(b) for b in range(1, 17))
    scan = _plan(folder, ["alloc.py", "--batch", "{batch}"], grid=[f"batch={values}"],
                 jobs=2, cache=str(cache))
    # the 6 cells of the bisection are the scan's too: 10 more runs
    assert (scan.runs, scan.cached) == (10, 6)
    fits = {int(p.values["batch"]): p.fits for p in scan.points}
    assert fits == {b: b <= 14 for b in range(1, 17)}
    assert max(b for b, ok in fits.items() if ok) == plan.points[0].largest
    run = {int(p.values["batch"]): p.tried[0].answer for p in scan.points}
    # 8 MiB + 512 B is under 10 MiB: torch_npu's 20 MiB large buffer; 2 MiB rounding above
    assert run[1]["peak_reserved"] == 20 * MiB
    assert all(run[b]["peak_reserved"] == (8 * b + 2) * MiB for b in range(2, 16))
    # 15 fits on the card, short of the margin; 16 runs out of memory
    assert (run[15]["verdict"], run[15]["oom"], run[16]["verdict"], run[16]["oom"]) == (
        "fits", False, "over", True)
    assert run[16]["why"].startswith("NPU out of memory. Tried to allocate 130.00 MiB")
    by_batch = {int(p.values["batch"]): p for p in scan.points}
    assert by_batch[15].peak_reserved == 0 and by_batch[15].capacity == 128 * MiB


def test_no_margin_takes_the_batch_that_leaves_6_mib(bisected, folder):
    _, cache = bisected
    plan = _plan(folder, ["alloc.py", "--batch", "{batch}"], vary="batch=1..16", margin=0,
                 cache=str(cache))
    # 15 reserves 122 MiB of 128; the margin is not in the key: every cell from the cache
    assert (plan.points[0].largest, plan.points[0].first_over) == (15, 16)
    assert (plan.runs, plan.cached) == (0, 6)


def test_nothing_fits_and_everything_fits(bisected, folder):
    _, cache = bisected
    none = _plan(folder, ["alloc.py", "--batch", "{batch}"], vary="batch=15..16",
                 cache=str(cache))
    every = _plan(folder, ["alloc.py", "--batch", "{batch}"], vary="batch=1..14",
                  cache=str(cache))
    assert (none.points[0].largest, none.fits, none.recommended) == (None, False, None)
    assert none.why.startswith("nothing fits with 5% of the card free")
    assert (every.points[0].largest, every.fits) == (14, True)
    # only the two ends were needed
    assert [t.value for t in every.points[0].tried] == [1, 14]


# -- the cache -------------------------------------------------------------------------------

def test_the_cache_key_follows_the_script_inputs_and_environment(tmp_path):
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "train.py").write_text("print('v1')\n")
        (tmp_path / name / "data.txt").write_text("rows\n")
        (tmp_path / name / "ds.json").write_text('{"train_micro_batch_size_per_gpu": 1}')

    def key(where="a", environ=None, value=4, **kw):
        spec = JobSpec.make(["train.py", "--deepspeed", "ds.json", "--b", "{b}"],
                            vary="b=1..8", cwd=str(tmp_path / where),
                            keys=[("ds.json", "train_micro_batch_size_per_gpu={b}")],
                            inputs=["data.txt"], environ=environ or {}, **kw)
        return spec.cell(spec.points()[0], value).key

    base = key()
    assert key() == base
    # the same files in another folder: the same answers
    assert key("b") == base
    # an unrelated variable, or one the estimate does not read, changes nothing
    assert key(environ={"HOME": "/elsewhere", "SOME_VAR": "1"}) == base
    # a variable the estimate reads does
    assert key(environ={"PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True"}) != base
    assert key(environ={"HCCL_BUFFSIZE": "100"}) != base
    # one the plan sets, and another value of the axis
    assert key(env=["MY_KNOB=1"]) != key(env=["MY_KNOB=2"])
    assert key(value=5) != base
    # the script, a named input and the config file
    (tmp_path / "a" / "train.py").write_text("print('v2')\n")
    second = key()
    assert second != base
    (tmp_path / "a" / "data.txt").write_text("other rows\n")
    third = key()
    assert third not in (base, second)
    (tmp_path / "a" / "ds.json").write_text('{"train_micro_batch_size_per_gpu": 1, "x": 1}')
    assert key() not in (base, second, third)


def test_the_package_version_is_in_the_key(tmp_path, monkeypatch):
    (tmp_path / "train.py").write_text("")
    spec = JobSpec.make(["train.py"], cwd=str(tmp_path), environ={})
    before = spec.cell(spec.points()[0], None).key
    monkeypatch.setattr(job_spec, "__version__", "0.0.0-other")
    assert spec.cell(spec.points()[0], None).key != before


class _StopAfter:
    """An executor that stops the plan (as Ctrl-C does) once it has given ``k`` answers."""

    def __init__(self, inner, k):
        self.inner, self.k, self.given = inner, k, 0

    def submit(self, cell):
        self.inner.submit(cell)

    def finished(self):
        if self.given >= self.k:
            raise KeyboardInterrupt
        out = self.inner.finished()
        self.given += len(out)
        return out

    running = property(lambda self: self.inner.running)

    def describe(self):
        return self.inner.describe()

    def close(self):
        self.inner.close()


def test_an_interrupted_plan_resumes_with_no_cell_run_twice(folder, tmp_path, monkeypatch):
    log, cache = tmp_path / "runs.log", tmp_path / "cache"
    command = ["alloc.py", "--batch", "{batch}", "--log", str(log)]
    monkeypatch.setattr(job_module, "make_cell_executor",
                        lambda *a: _StopAfter(make_cell_executor(*a), 3))
    with pytest.raises(KeyboardInterrupt):
        _plan(folder, command, vary="batch=1..16", cache=str(cache))
    first = log.read_text().split()
    assert first == ["1", "16", "8"]
    monkeypatch.undo()
    plan = _plan(folder, command, vary="batch=1..16", cache=str(cache))
    runs = log.read_text().split()
    assert (plan.runs, plan.cached) == (3, 3)
    # every value once: 1, 16, 8 before the stop, 12, 14, 15 after
    assert sorted(runs, key=int) == ["1", "8", "12", "14", "15", "16"]
    assert plan.points[0].largest == 14


def test_a_damaged_entry_is_run_again(bisected, folder, tmp_path):
    _, cache = bisected
    spec = JobSpec.make(["alloc.py", "--batch", "{batch}"], vary="batch=1..16",
                        capacity=CARD, estimate_args=QUIET, cwd=str(folder))
    cell = spec.cell(spec.points()[0], 16)
    path = os.path.join(str(cache), cell.key[:2], cell.key + ".json")
    entry = json.loads(open(path).read())
    entry["answer"]["verdict"] = "fits"      # a tampered answer: the checksum fails
    with open(path, "w") as f:
        json.dump(entry, f)
    with pytest.warns(CacheWarning, match="checksum"):
        plan = _plan(folder, ["alloc.py", "--batch", "{batch}"], vary="batch=1..16",
                     cache=str(cache))
    assert (plan.runs, plan.cached, plan.ignored) == (1, 5, 1)
    assert plan.points[0].largest == 14


# -- the knobs -------------------------------------------------------------------------------

def test_a_json_config_key_is_set_in_a_copy(folder):
    plan = _plan(folder, ["configured.py", "--deepspeed", "ds.json"],
                 keys=[("ds.json", "train_micro_batch_size_per_gpu=2,14,15")], jobs=2)
    # the copy's value (as an int, as the file has it) decides the memory: 2 and 14 fit,
    # 15 is short of the margin; the file itself still says 1
    assert [(p.values["train_micro_batch_size_per_gpu"], p.fits) for p in plan.points] == [
        ("2", True), ("14", True), ("15", False)]
    assert plan.points[1].peak_reserved == 114 * MiB
    assert json.loads((folder / "ds.json").read_text())["train_micro_batch_size_per_gpu"] == 1


def test_the_copy_keeps_the_files_format_and_types(tmp_path):
    (tmp_path / "train.py").write_text("")
    (tmp_path / "c.json").write_text('{"a": {"b": 1, "c": "auto"}, "d": [1, 2]}')
    spec = JobSpec.make(["train.py", "--config=c.json"], cwd=str(tmp_path), environ={},
                        keys=[("c.json", "a.b=7"), ("c.json", "a.c=8"), ("c.json", "d.1=9"),
                              ("c.json", "new.key=bf16")])
    cell = spec.cell(spec.points()[0], None)
    (copy,) = cell.copies
    assert json.loads(copy.data) == {"a": {"b": 7, "c": 8}, "d": [1, 9],
                                     "new": {"key": "bf16"}}
    # the option's value is pointed at the copy
    assert copy.uses == ((1, "--config="),)
    with pytest.raises(InvalidArgument, match="not a whole number"):
        spec = JobSpec.make(["train.py", "--config=c.json"], cwd=str(tmp_path), environ={},
                            keys=[("c.json", "a.b=x")])
        spec.cell(spec.points()[0], None)


def test_a_yaml_config_key(tmp_path):
    yaml = pytest.importorskip("yaml", reason="a YAML config file needs PyYAML")
    (tmp_path / "cli.py").write_text("")
    (tmp_path / "train.yaml").write_text("per_device_train_batch_size: 1\nbf16: true\n")
    spec = JobSpec.make(["cli.py", "train", "train.yaml"], vary="mb=1..8", cwd=str(tmp_path),
                        environ={}, keys=[("train.yaml", "per_device_train_batch_size={mb}")])
    (copy,) = spec.cell(spec.points()[0], 6).copies
    assert yaml.safe_load(copy.data) == {"per_device_train_batch_size": 6, "bf16": True}
    assert copy.uses == ((2, ""),)


def test_a_toml_config_key(tmp_path):
    tomllib = pytest.importorskip("tomllib", reason="TOML needs Python 3.11's tomllib")
    (tmp_path / "t.py").write_text("")
    (tmp_path / "c.toml").write_text('[train]\nbatch = 1\nname = "x\\u007f"\n')
    spec = JobSpec.make(["t.py", "c.toml"], grid=["b=3,4"], cwd=str(tmp_path), environ={},
                        keys=[("c.toml", "train.batch={b}")])
    (copy,) = spec.cell(spec.points()[1], None).copies
    assert tomllib.loads(copy.data.decode()) == {"train": {"batch": 4, "name": "x\x7f"}}


@pytest.mark.parametrize("kw, message", [
    ({"vary": "b=1..8"}, "the axis b is used nowhere"),
    ({"grid": ["x=1,2"], "command": ["t.py", "{y}"]}, r"\{y\} names no axis"),
    ({"vary": "b=8..1", "command": ["t.py", "{b}"]}, "LO <= HI"),
    ({"vary": "b=1-8"}, "expected NAME=LO..HI"),
    ({"keys": [("c.json", "a=1")]}, "names the file nowhere"),
    ({"grid": ["x=1,1"], "command": ["t.py", "{x}"]}, "given twice"),
    ({"product": "A9"}, "--product 'A9'"),
    ({"alloc_conf": "nonsense:1"}, "PYTORCH_NPU_ALLOC_CONF"),
    ({"estimate_args": "--bisect"}, "a plan's cell is one run"),
    ({"world_size": "0"}, "positive whole number"),
])
def test_bad_knobs_are_refused_before_any_run(tmp_path, kw, message):
    (tmp_path / "t.py").write_text("")
    (tmp_path / "c.json").write_text("{}")
    command = kw.pop("command", ["t.py"])
    with pytest.raises(InvalidArgument, match=message):
        JobSpec.make(command, cwd=str(tmp_path), environ={}, **kw)


def test_warm_cells_start_cold_when_an_import_time_variable_differs():
    base = {"PATH": "/bin"}
    assert _warm_safe({**base, "PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True",
                       "HCCL_BUFFSIZE": "100", "MICRO_BATCH": "4"}, base)
    assert not _warm_safe({**base, "TORCH_LOGS": "dynamo"}, base)
    assert not _warm_safe({**base, "OMP_NUM_THREADS": "1"}, base)


def test_a_warm_cell_answers_as_a_cold_one(folder):
    spec = JobSpec.make(["alloc.py", "--batch", "{batch}"], vary="batch=1..16",
                        capacity=CARD, estimate_args=QUIET, cwd=str(folder))
    warm = spec.cell(spec.points()[0], 15)
    spec.warm = False
    cold = spec.cell(spec.points()[0], 15)
    assert warm.key == cold.key and (warm.warm, cold.warm) == (True, False)
    runner = Runner()
    a, b = runner.run(warm), runner.run(cold)
    a.pop("seconds"), b.pop("seconds")
    # 15 * 8 + 2 = 122 MiB reserved, 6 MiB left
    assert a == b == {"verdict": "fits", "capacity": 128 * MiB, "peak_reserved": 122 * MiB,
                      "total": 122 * MiB, "margin": 6 * MiB, "first_rank": None,
                      "tightest_rank": None, "oom": False, "why": ""}


def test_a_script_that_fails_ends_its_search_with_the_reason(folder, tmp_path):
    (folder / "broken.py").write_text("import sys\nraise SystemExit(int(sys.argv[2]) > 3)\n")
    plan = _plan(folder, ["broken.py", "--batch", "{batch}"], vary="batch=1..8",
                 cache=str(tmp_path))
    (p,) = plan.points
    assert p.error.startswith("at batch=8: the script failed (exit status 1)")
    assert not plan.fits and "could not be searched" in plan.why
    # a failed run is not kept, an answer is: batch 1's alone is in the cache
    kept = [f for _, _, files in os.walk(tmp_path) for f in files if f.endswith(".json")]
    spec = JobSpec.make(["broken.py", "--batch", "{batch}"], vary="batch=1..8", capacity=CARD,
                        estimate_args=QUIET, cwd=str(folder))
    assert kept == [spec.cell(spec.points()[0], 1).key + ".json"]


# -- the grid, ranks, executors --------------------------------------------------------------

GRID = dict(vary="batch=1..16", grid=["seq=1,3"], batch="batch", seq="seq*1024")


@pytest.fixture(scope="module")
def gridded(folder):
    return _plan(folder, ["alloc.py", "--batch", "{batch}", "--seq", "{seq}"], jobs=2, **GRID)


def test_a_grid_of_two_points_each_bisected(gridded):
    one, three = gridded.points
    # seq 1: 14 (as above); seq 3: 24 * 4 + 2 = 98 MiB leaves 30, 24 * 5 + 2 = 122 leaves 6
    assert (one.largest, one.first_over, three.largest, three.first_over) == (14, 15, 4, 5)
    assert (three.peak_reserved, three.margin) == (98 * MiB, 30 * MiB)
    # tokens per step per card: 14 x 1 x 1024 = 14,336 against 4 x 3 x 1024 = 12,288
    assert (one.tokens, three.tokens) == (14336.0, 12288.0)
    assert gridded.recommended == 0
    assert gridded.why.startswith("seq=1, batch=14: 14,336 tokens per step per card, the most "
                                  "of the 2 configurations")
    # seq 3: 1 and 16 (over), 8 (over), 4, 6 (over), 5 (short): 6 runs each
    assert [t.value for t in three.tried] == [1, 4, 5, 6, 8, 16]
    assert gridded.runs == 12
    text = str(gridded).splitlines()
    assert text[2].split() == ["seq", "largest", "batch", "peak", "reserved", "device", "total",
                               "margin", "first", "over", "tokens/card", "runs"]
    assert text[3].split() == ["1", "14", "114", "MiB", "114", "MiB", "14", "MiB", "(10.9%)",
                               "15", "14,336", "6"]
    assert text[4].split() == ["3", "4", "98", "MiB", "98", "MiB", "30", "MiB", "(23.4%)", "5",
                               "12,288", "6"]


def test_the_first_rank_that_fails(folder):
    plan = _plan(folder, ["alloc.py", "--batch", "{batch}", "--rank-grows"],
                 vary="batch=1..8", world_size="2", jobs=2)
    (p,) = plan.points
    # rank r allocates batch x (r + 1) x 8 MiB: rank 1 holds 16 x 7 + 2 = 114 MiB at 7, and
    # asks for 128 MiB + 512 B (130 MiB with its rounding) at 8, where rank 0 fits
    assert (p.largest, p.first_over, p.first_rank) == (7, 8, 1)
    assert (p.peak_reserved, p.margin) == (114 * MiB, 14 * MiB)
    assert "failing rank" in str(plan)


def test_a_dask_cluster_gives_the_same_table(gridded, folder):
    distributed = pytest.importorskip("distributed", reason="the dask executor needs Dask "
                                      "distributed: pip install 'ascend-memsim[study]'")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  host="127.0.0.1", dashboard_address=":0") as cluster:
        there = _plan(folder, ["alloc.py", "--batch", "{batch}", "--seq", "{seq}"],
                      scheduler=cluster.scheduler_address, **GRID)
    assert there.executor.startswith("Dask (tcp://127.0.0.1")
    assert _table(there) == _table(gridded)
    assert (there.recommended, there.why) == (gridded.recommended, gridded.why)


def test_the_picture(gridded, tmp_path):
    pytest.importorskip("matplotlib", reason="the picture needs the plot extra")
    from ascend_memsim.plan.job_plot import plot_plan

    path = tmp_path / "plan.png"
    plot_plan(str(path), gridded)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# -- the command line ------------------------------------------------------------------------

def test_the_command(folder, bisected, capsys, monkeypatch):
    _, cache = bisected
    monkeypatch.chdir(folder)
    code = main(["plan", "--vary", "batch=1..16", "--capacity", CARD, "--estimate-args",
                 QUIET, "--cache", str(cache), "--json", "--", "alloc.py", "--batch",
                 "{batch}"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["points"][0]["largest"] == 14 and out["cached"] == 6
    assert out["recommended"]["values"] == {"capacity": CARD}
    code = main(["plan", "--vary", "batch=15..16", "--capacity", CARD, "--estimate-args",
                 QUIET, "--cache", str(cache), "--quiet", "--", "alloc.py", "--batch",
                 "{batch}"])
    assert code == 1 and "nothing fits" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["--vary", "b=1..2", "--", "t.py"], "the axis b is used nowhere"),
    (["--margin", "80", "--", "t.py"], "from 0 to 50"),
    (["--plot", "x.gif", "--vary", "b=1..2", "--", "t.py", "{b}"], "is .png or .svg"),
    (["--plot", "x.png", "--", "t.py"], "give --vary"),
    ([], "nothing to run"),
])
def test_the_command_refuses_bad_usage(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.py").write_text("")
    assert main(["plan", "--no-cache", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ascend-memsim plan: error: ") and message in err


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_on_a_terminal_only():
    import argparse

    args = argparse.Namespace(quiet=False, json=False)
    assert plan_progress(args, io.StringIO()) is None
    assert plan_progress(argparse.Namespace(quiet=False, json=True), _Terminal()) is None
    stream = _Terminal()
    show = plan_progress(args, stream)
    show(4, 2, 1, "batch=14")
    assert stream.getvalue().startswith("\r\x1b[Kplan: 4 run, 2 cached, 1 running; best so "
                                        "far batch=14, 0:0")


def test_ctrl_c_on_the_command_keeps_what_was_answered(folder, tmp_path):
    (folder / "slow.py").write_text(ALLOC.replace("a = p.parse_args()\n",
                                                  "a = p.parse_args()\nimport time\n"
                                                  "time.sleep(0.4)\n"))
    log, cache = tmp_path / "runs.log", tmp_path / "cache"
    argv = [sys.executable, "-m", "ascend_memsim", "plan", "--vary", "batch=13..16",
            "--capacity", CARD, "--estimate-args", QUIET, "--cache", str(cache), "--jobs",
            "1", "--", "slow.py", "--batch", "{batch}", "--log", str(log)]
    proc = subprocess.Popen(argv, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + 120

    def kept():
        return sum(f.endswith(".json") for _, _, files in os.walk(cache) for f in files)

    # two answers kept: the third cell is in its sleep
    while time.monotonic() < deadline and kept() < 2:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "interrupted; the answers so far are kept" in err
    before = log.read_text().split()
    again = subprocess.run(argv, cwd=folder, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and "largest batch" in again.stdout
    runs = log.read_text().split()
    # 13 and 16, then 14 and 15: no value's run ended twice (the one killed by the Ctrl-C
    # ended never)
    assert len(set(runs)) == len(runs) == 4 and runs[:len(before)] == before
    assert "14" in again.stdout.splitlines()[3].split()
