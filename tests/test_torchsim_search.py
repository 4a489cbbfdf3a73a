"""``estimate --bisect`` / ``--sweep`` on a script (trace once, replay many), checked by
running the script at the answers; and the estimate's honest limits: ``torch.compile``, ACL
graphs, ``--item-value``."""

import io
import json
import textwrap

import pytest

torch = pytest.importorskip("torch", reason="torchsim runs scripts on torch's fake tensors; "
                                            "install the torch extra")

from ascend_memsim.cli import main  # noqa: E402
from ascend_memsim.torchsim import estimate  # noqa: E402
from ascend_memsim.torchsim.search import fit_script, sweep_script  # noqa: E402

MiB = 1 << 20

# twelve 6 MiB tensors, three of each four dropped, then three of 16 MiB: the holes left are
# too small for them under the default settings; expandable segments map them contiguously
FRAG = """\
import torch
import torch_npu

MiB = 1 << 20
held = [torch.empty(6 * MiB, dtype=torch.uint8, device="npu") for _ in range(12)]
for i in range(12):
    if i % 4:
        held[i] = None
big = [torch.empty(16 * MiB, dtype=torch.uint8, device="npu") for _ in range(3)]
"""
FRAG_BIG_LINE = 9

# a script that sizes its work by the device's memory
REACTS = """\
import torch
import torch_npu

MiB = 1 << 20
free, total = torch_npu.npu.mem_get_info()
chunks = min(8, free // (64 * MiB))   # free: the runtime took its share first
held = [torch.empty(32 * MiB, dtype=torch.uint8, device="npu") for _ in range(chunks)]
"""


def run(*argv):
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


def script(tmp_path, text, name="job.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_bisect_answers_a_capacity_the_script_fits_and_fails_one_step_below(tmp_path):
    path = script(tmp_path, FRAG)
    code, out = run("estimate", "--bisect", "--json", path)
    assert code == 0
    found = json.loads(out)
    search, step = found["search"], found["search"]["step"]
    assert found["fits"] and found["checks"] == []     # the script never looks: no re-run
    plan = search["all_fit_from"]
    assert search["smallest"] <= plan and search["smallest_exact"]
    # the script itself, run at the answer, fits; one step below it runs out of memory with
    # torch's error and torch_npu's message, at the line of the 16 MiB tensors
    assert estimate(path, capacity=plan).fits
    below = estimate(path, capacity=plan - step)
    assert below.status == 1 and below.out_of_memory is not None
    assert below.out_of_memory["message"].startswith("NPU out of memory. Tried to allocate")
    assert below.out_of_memory["frames"][0]["line"] == FRAG_BIG_LINE
    # and the search says so, naming the line
    code, text = run("estimate", "--bisect", path)
    assert f"the script runs out of memory at {path}:{FRAG_BIG_LINE}" in text
    assert "traced once at" in text


def test_sweep_names_a_setting_that_fits_where_the_default_fails(tmp_path):
    path = script(tmp_path, FRAG)
    found = sweep_script(path, product="A2")
    best = found.plan
    assert best is not None and best.alloc_conf == "expandable_segments:True"
    default = next(r for r in found.search.results if r.alloc_conf == "")
    assert best.all_fit_from < default.all_fit_from
    # at the best setting's capacity the script fits with it and fails without it
    at = best.all_fit_from
    assert estimate(path, capacity=at, alloc_conf=best.alloc_conf).fits
    failed = estimate(path, capacity=at)
    assert not failed.fits and failed.out_of_memory["frames"][0]["line"] == FRAG_BIG_LINE
    code, text = run("estimate", "--sweep-conf", ";expandable_segments:True", path)
    assert code == 0 and text.index("expandable_segments:True") < text.index("(default)")


def test_a_script_that_looks_at_the_device_memory_is_checked_by_running_it(tmp_path):
    path = script(tmp_path, REACTS)
    found = fit_script(path, product="A2")
    assert [q["call"] for q in found.traced.device_queries] == ["mem_get_info"]
    # traced on the whole device it takes 8 chunks; at the answer's capacity it takes
    # fewer, so one step below the answer fits too: the runs say the search is not the
    # script's
    assert [(c["expected"], c["fits"]) for c in found.checks] == [(True, True), (False, True)]
    assert found.fits and not found.confirmed
    assert "NOT as the search says" in str(found) and "mem_get_info at " in str(found)


def test_a_script_that_does_not_fit_at_the_top_is_not_searched(tmp_path):
    path = script(tmp_path, FRAG)
    code, out = run("estimate", "--bisect", "--capacity", "64MiB", path)
    assert code == 1
    assert "not searched: the run at the top of the search (64 MiB) did not fit" in out
    assert "DOES NOT FIT" in out
    stops = script(tmp_path, "import torch\ntorch.nonzero(torch.ones(3).npu())\n", "stops.py")
    found = fit_script(stops)
    assert found.search is None and not found.fits
    assert "not searched: the run at the top of the search (60.96 GiB) stopped" in str(found)


def test_a_bad_setting_is_refused_before_the_script_runs(tmp_path, capsys):
    marker = tmp_path / "ran"
    path = script(tmp_path, f"open({str(marker)!r}, 'w').close()\n")
    code, _ = run("estimate", "--sweep-conf", "max_split_size_mb:1", path)
    assert code == 2 and not marker.exists()
    assert "max_split_size_mb:1" in capsys.readouterr().err
    code, _ = run("estimate", "--bisect", "--alloc-conf", "expandable_segments:True",
                  "--step", "100", path)
    assert code == 2 and not marker.exists()


def test_the_traced_snapshot_is_written_with_bisect(tmp_path):
    out = str(tmp_path / "snap.pickle")
    code, _ = run("estimate", "--bisect", "--snapshot", out, script(tmp_path, FRAG))
    assert code == 0
    code, text = run("replay", "--allocator", "torch-npu", "--bisect", out)
    assert code == 0 and "every capacity from 116 MiB up fits" in text


COMPILED = """\
import sys
import torch
import torch_npu

model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(),
                            torch.nn.Linear(2048, 512)).npu()
opt = torch.optim.Adam(model.parameters())
if sys.argv[1:] == ["compile"]:
    model = torch.compile(model, fullgraph=True, mode="max-autotune")
for _ in range(2):
    model(torch.randn(64, 512).npu()).sum().backward()
    opt.step()
    opt.zero_grad()
"""


def test_torch_compile_runs_eagerly_and_the_summary_says_so(tmp_path, capsys):
    path = script(tmp_path, COMPILED)
    eager = estimate(path)
    compiled = estimate(path, ["compile"])
    # fullgraph=True would fail (TorchDynamo compiles no frame under fake tensors)
    assert compiled.fits and compiled.status == 0
    assert (compiled.peak_allocated, compiled.peak_reserved) == (
        eager.peak_allocated, eager.peak_reserved)
    assert eager.notes == []
    assert compiled.notes == [f"torch.compile at {path}:9 in <module> ran eagerly "
                              f"(TorchDynamo compiles nothing under fake tensors): the "
                              f"figures are eager mode's; a compiled graph may hold fewer "
                              f"activations"]
    code, out = run("estimate", path, "compile")
    assert code == 0 and "  note: torch.compile at" in out
    # torch's warning about the estimate's own module hook is not the user's business
    assert "global hooks" not in capsys.readouterr().err
    assert torch.compile.__module__.startswith("torch")   # given back


@pytest.mark.parametrize("line", ["torch_npu.npu.NPUGraph()", "torch.npu.graph(None)",
                                  "torch_npu.npu.make_graphed_callables(None, ())"])
def test_acl_graph_capture_is_refused_with_the_line_and_the_way_out(tmp_path, line):
    path = script(tmp_path, f"""
        import torch
        import torch_npu
        assert not torch_npu.npu.is_current_stream_capturing()
        g = {line}
    """)
    result = estimate(path)
    assert result.status == 1 and not result.fits
    name = line.split("(")[0].replace("torch.npu.", "torch_npu.npu.")
    assert result.stopped.startswith(f"{name} at {path}:5 in <module>: ACL graph capture "
                                     f"is not simulated")
    assert "ASCEND_MEMSIM_ESTIMATE" in result.stopped


LOGS_LOSS = """\
import torch
import torch_npu

model = torch.nn.Linear(64, 1).npu()
loss = model(torch.randn(8, 64).npu()).sum()
print("loss", loss.item(), float(loss.detach()))
if torch.isfinite(loss).all():
    print("finite")
print("kept", torch.tensor(3).item())
"""


def test_item_value_lets_a_script_that_reads_values_run_on(tmp_path, capsys):
    path = script(tmp_path, LOGS_LOSS)
    assert estimate(path, item_value=None).stopped is not None     # "stop": it stops there
    code, out = run("estimate", "--item-value", "0.25", path)
    printed = capsys.readouterr().out
    assert code == 0
    # the value in the tensor's kind; a value torch knows is still the true one
    assert "loss 0.25 0.25\nfinite\nkept 3\n" in printed
    assert "verdict: fits" in out


def test_by_default_values_read_are_0_finite_and_counted_with_their_lines(tmp_path, capsys):
    path = script(tmp_path, LOGS_LOSS)
    code, out = run("estimate", path)
    printed = capsys.readouterr().out
    assert code == 0 and "verdict: fits" in out
    # 0 in the tensor's kind; a finite value is finite; torch's own value is the true one
    assert "loss 0.0 0.0\nfinite\nkept 3\n" in printed
    # three reads of values the fake tensors do not have (.item(), float(), bool of
    # isfinite(...).all()), listed with their lines; tensor(3).item() is known, not counted
    assert (f"values read: 3 reads of tensors without values gave 0 (--item-value): "
            f"{path}:6 in <module> (.item()), {path}:7 in <module> (.item())") in out
    result = estimate(path)
    assert result.values_read == 3 and result.item_value == 0
    assert result.value_sites == [f"{path}:6 in <module> (.item())",
                                  f"{path}:7 in <module> (.item())"]


@pytest.mark.parametrize("value", ["stop", "0.5", "-3"])
def test_item_value_takes_a_number_or_stop_on_the_command_line(tmp_path, capsys, value):
    path = script(tmp_path, LOGS_LOSS)
    code, out = run("estimate", "--item-value", value, path)
    assert code == (1 if value == "stop" else 0)
    assert ("verdict: unknown, the script stopped: .item() at" in out) == (value == "stop")


@pytest.mark.parametrize("value", ["nan", "inf", "\uff15", "x"])
def test_item_value_refuses_what_is_not_a_finite_ascii_number(tmp_path, capsys, value):
    path = script(tmp_path, LOGS_LOSS)
    code, _ = run("estimate", f"--item-value={value}", path)
    assert code == 2
    assert "--item-value" in capsys.readouterr().err


@pytest.mark.parametrize("value", [float("nan"), "1", True])
def test_item_value_must_be_a_finite_number(value):
    with pytest.raises((TypeError, ValueError), match="item_value must be"):
        estimate(lambda: None, item_value=value)


DEEP_LOOP = """\
import torch
import torch_npu

def deep(n):
    if n:
        return deep(n - 1)
    return torch.empty(1000, device="npu")

for _ in range(500):
    x = deep(20)
del x
"""


def test_the_history_costs_an_entry_not_a_stack_per_entry(tmp_path):
    import pickle

    path = script(tmp_path, DEEP_LOOP)
    trace = estimate(path, snapshot=True).snapshot["device_traces"][0]
    allocs = [e for e in trace if e["action"] == "alloc"]
    assert len(allocs) == 500 and len(allocs[0]["frames"]) == 22
    assert allocs[0]["frames"][0] == {"filename": path, "line": 7, "name": "deep"}
    # one frame list per distinct stack, shared by the entries made there: a snapshot
    # pickles it once
    assert allocs[0]["frames"] is allocs[-1]["frames"]
    assert len(pickle.dumps(trace)) / len(trace) < 100


def test_max_entries_keeps_the_last_entries_as_torch_does(tmp_path):
    import pickle

    out = str(tmp_path / "snap.pickle")
    code, _ = run("estimate", "--snapshot", out, "--max-entries", "10",
                  script(tmp_path, DEEP_LOOP))
    assert code == 0
    with open(out, "rb") as f:
        trace = pickle.load(f)["device_traces"][0]
    assert len(trace) == 10 and trace[-1]["action"] == "free_completed"
    code, _ = run("estimate", "--bisect", "--max-entries", "10", script(tmp_path, DEEP_LOOP))
    assert code == 2
    with pytest.raises(ValueError, match="max_entries"):
        estimate(lambda: None, snapshot=True, max_entries=0)


def test_a_value_read_is_the_value_the_tensors_dtype_holds():
    # float32 cannot hold 1e308: a read gives inf, as the tensor would on the machine
    seen = {}

    def script():
        import torch_npu  # noqa: F401
        seen["float32"] = torch.randn(4, device="npu").sum().item()
        seen["float64"] = torch.randn(4, dtype=torch.float64, device="npu").sum().item()

    estimate(script, item_value=1e308)
    assert seen == {"float32": float("inf"), "float64": 1e308}


class Terminal(io.StringIO):
    """stderr as a terminal: the search draws its progress line on it."""

    def isatty(self):
        return True


def test_bisect_reports_its_phases_and_replays_as_it_goes(tmp_path, monkeypatch):
    """A --bisect over a script of a million small tensors ran 3.5 minutes showing nothing:
    the run of the script (with its trace entries so far), the reading of the trace, each
    replay of about as many as a bisection of the range takes, are reported."""
    import ascend_memsim.torchsim.search as search

    monkeypatch.setattr(search, "TICK", 0.02)
    # FRAG holds its twelve 6 MiB tensors at once, each a block of 6 MiB + 512 (torch_npu's
    # 32 bytes of padding, rounded up to 512): peak allocated 12 x (6 MiB + 512), so the
    # lowest capacity searched is 74 MiB (37 steps of 2 MiB); up to 1 GiB (512 steps):
    # 512 - 37 = 475 steps, 9 halvings (2**9 = 512 >= 475 > 256): about 2 + 9 = 11 replays
    seen = []
    path = script(tmp_path, FRAG + "import time\ntime.sleep(0.5)\n")
    found = fit_script(path, top=1 << 30, progress=lambda *a: seen.append(a))
    assert found.fits and found.traced.peak_allocated == 12 * (6 * MiB + 512)
    assert search.about_replays(74 * MiB, 1 << 30, 2 * MiB) == 11
    assert seen[0] == ("traced", 0, 1)
    ran = seen.index(("traced", 1, 1))
    # while the script ran (half a second asleep at its end): its entries so far, the last
    # told during the sleep: every entry up to the last allocation (the frees of the
    # script's teardown come after it)
    entries = [done for phase, done, _ in seen[1:ran]]
    assert entries and all(phase == "entries" for phase, _, _ in seen[1:ran])
    assert entries == sorted(entries)
    trace = found.traced.snapshot["device_traces"][0]
    assert entries[-1] == 1 + max(i for i, e in enumerate(trace) if e["action"] == "alloc")
    replays = found.search.replays
    assert seen[ran + 1:] == [("replays", i, 11) for i in range(replays + 1)]


def test_bisect_draws_its_progress_on_a_terminal_only(tmp_path, monkeypatch):
    path = script(tmp_path, FRAG)
    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    code, out = run("estimate", "--bisect", "--capacity", "1GiB", path)
    assert code == 0 and "every capacity from" in out
    drawn = terminal.getvalue()
    lines = [line for line in drawn.split("\r\x1b[K") if line]
    # each phase on one line redrawn in place, the time spent after it; cleared at the end
    said = [line.rsplit(", ", 1)[0] for line in lines]
    assert said[0] == "bisect: running the script once"
    assert said[said.index("bisect: the script ran") + 1] == \
        "bisect: reading the trace for about 11 replays"
    assert "bisect: replay 1 of about 11" in said
    assert all(line.rsplit(", ", 1)[1][:2] in ("0:", "1:") for line in lines)
    assert drawn.endswith("\r\x1b[K")
    # a sweep of two settings: about 11 replays each
    terminal.seek(0)
    terminal.truncate()
    code, _ = run("estimate", "--sweep-conf", ";expandable_segments:True", "--capacity",
                  "1GiB", path)
    assert code == 0 and "sweep: replay 1 of about 22, " in terminal.getvalue()
    # piped, with --quiet or --json: nothing drawn
    for argv, stream in ((["--bisect"], io.StringIO()), (["--bisect", "--quiet"], Terminal()),
                         (["--bisect", "--json"], Terminal())):
        monkeypatch.setattr("sys.stderr", stream)
        code, _ = run("estimate", *argv, "--capacity", "1GiB", path)
        assert code == 0 and stream.getvalue() == ""
