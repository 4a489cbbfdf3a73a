"""``ascend_memsim.torchsim`` and ``ascend-memsim estimate``: an unchanged torch_npu script on
fake tensors, every NPU storage through the simulated caching allocator."""

import io
import json
import os
import pickle
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch", reason="torchsim runs scripts on torch's fake tensors; "
                                            "install the torch extra")

from ascend_memsim.cli import main  # noqa: E402
from ascend_memsim.observe.tensor_replay import replay_tensors  # noqa: E402
from ascend_memsim.torchsim import estimate  # noqa: E402

MiB = 1 << 20
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def block(nbytes: int) -> int:
    """A storage's block on A2 (CANN 9.1.0): the +32 pad, then 512-byte steps
    (NPUCachingAllocator.cpp round_size with AddPadSize)."""
    return -(-(nbytes + 32) // 512) * 512


def run(*argv):
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


def script(tmp_path, text, name="train.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_mlp_with_adam_after_two_steps_holds_params_grads_and_both_adam_states():
    seen = {}

    def train():
        import torch_npu

        model = torch.nn.Sequential(torch.nn.Linear(2048, 2048), torch.nn.ReLU(),
                                    torch.nn.Linear(2048, 2048)).npu()
        opt = torch.optim.Adam(model.parameters())
        for _ in range(2):
            opt.zero_grad()
            loss = model(torch.randn(4, 2048).npu()).sum()
            loss.backward()
            opt.step()
        del loss
        seen["allocated"] = torch_npu.npu.memory_allocated()
        seen["reserved"] = torch_npu.npu.memory_reserved()
        seen["stats"] = torch_npu.npu.memory_stats()
        seen["params"] = [p.numel() * p.element_size() for p in model.parameters()]
        torch_npu.npu.empty_cache()
        seen["reserved_after_empty_cache"] = torch.npu.memory_reserved()

    # the tensors' blocks by hand: no operator workspace (tests/test_torchsim_workspace.py)
    result = estimate(train, product="A2", workspace=False)
    assert result.fits and result.status == 0
    params = sum(block(n) for n in seen["params"])
    # parameters + gradients + exp_avg + exp_avg_sq, each block rounded; Adam's step
    # counters are CPU tensors (not capturable), so nothing else is on the device
    assert seen["allocated"] == 4 * params
    # By hand: each weight is 16 MiB, a block of 16 MiB + 512 (> 10 MiB: its own segment,
    # rounded up to 2 MiB, 18 MiB; the 2 MiB - 512 left cannot hold another); the biases
    # and the 4 x 2048 activations fit one 2 MiB small segment. Segments are kept, so there
    # are as many 18 MiB segments as weight-sized blocks were ever live at once.
    weight = block(2048 * 2048 * 4)
    large_peak = seen["stats"]["allocated_bytes.large_pool.peak"]
    assert large_peak % weight == 0
    assert seen["reserved"] == large_peak // weight * 18 * MiB + 2 * MiB
    # empty_cache gives back every wholly free segment: the 8 live weight-sized blocks
    # (2 weights x 4) keep theirs, the biases the small one
    assert seen["reserved_after_empty_cache"] == 8 * 18 * MiB + 2 * MiB
    assert result.peak_reserved == seen["reserved"]
    assert result.at_peak["parameters"] == params


TRAIN = """
    import sys
    import torch
    import torch_npu

    torch_npu.npu.set_device(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(4096, 4096) for _ in range(4)])
    model = model.to(torch.device("npu"))
    opt = torch.optim.AdamW(model.parameters())
    scaler = torch_npu.npu.amp.GradScaler()
    for step in range(2):
        x = torch.randn(64, 4096).npu()
        with torch_npu.npu.amp.autocast():
            loss = model(x).float().pow(2).mean()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
    torch.npu.synchronize()
    print("peaks", torch_npu.npu.max_memory_allocated(), torch_npu.npu.max_memory_reserved())
"""


def test_the_scripts_own_statistics_are_the_simulated_ones(tmp_path, capsys):
    code, out = run("estimate", "--json", script(tmp_path, TRAIN))
    # with --json, what the script prints goes to stderr: stdout is the JSON alone
    printed = capsys.readouterr().err
    assert code == 0, printed
    result = json.loads(out)
    assert f"peaks {result['peak_allocated']} {result['peak_reserved']}" in printed
    # four 4096 x 4096 float32 weights: 256 MiB of parameters, as many of gradients, twice
    # that of AdamW state
    weights = 4 * block(4096 * 4096 * 4) + 4 * block(4096 * 4)
    assert result["at_peak"]["parameters"] == weights
    # the margin leaves out the runtime's share, taken before the script (A2's ESTIMATE)
    assert result["runtime_share"] == 512 << 20
    assert result["fits"] and result["margin"] == (result["capacity"] - result["peak_reserved"]
                                                   - result["runtime_share"])
    assert "HCCL" in " ".join(result["not_counted"])


def test_out_of_memory_is_torchs_error_with_torch_npus_message_at_the_line(tmp_path, capsys):
    path = script(tmp_path, TRAIN)
    code, out = run("estimate", "--capacity", "1GiB", path)
    err = capsys.readouterr().err
    assert code == 1
    assert "torch.OutOfMemoryError: NPU out of memory. Tried to allocate" in err
    assert "If reserved memory is >> allocated memory try setting max_split_size_mb" in err
    assert "DOES NOT FIT" in out and "1024.00 MiB" in out
    # the traceback and the summary name the script's line that asked
    assert f"{path}:" in out and f'File "{path}", line' in err


def test_the_out_of_memory_error_can_be_caught_by_the_script():
    caught = []

    def train():
        try:
            torch.empty(2 << 30, dtype=torch.uint8, device="npu")
        except torch.OutOfMemoryError as e:
            caught.append(str(e))

    result = estimate(train, capacity=1 << 30)
    assert caught and caught[0].startswith("NPU out of memory. Tried to allocate 2.00 GiB")
    assert not result.fits and result.out_of_memory["message"] == caught[0]
    assert result.out_of_memory["frames"][0]["name"] == "train"


def test_out_of_memory_in_backward_is_raised_at_the_backward_call(tmp_path):
    # the backward of an NPU tensor runs on autograd's device thread, where an error
    # leaving an operator aborted the process; in a process of its own for that reason
    path = script(tmp_path, """
        import torch
        model = torch.nn.Sequential(torch.nn.Linear(2048, 2048), torch.nn.ReLU(),
                                    torch.nn.Linear(2048, 2048)).npu()
        loss = model(torch.randn(4, 2048).npu()).sum()
        try:
            loss.backward()
        except torch.OutOfMemoryError as e:
            print("caught:", str(e).split(" (")[0])
        raise SystemExit(3)
    """)
    code = ("import sys\nfrom ascend_memsim.torchsim import estimate\n"
            f"r = estimate({path!r}, capacity=40 << 20, workspace=False, runtime_share=0)\n"
            "print(r.status, r.out_of_memory['frames'][0]['line'])\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=ROOT), timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["caught: NPU out of memory. Tried to allocate 18.00 MiB",
                                        "3 7"]


def test_views_and_in_place_results_share_one_block():
    def train():
        import torch_npu

        x = torch.empty(1024, 1024, device="npu")
        before = torch_npu.npu.memory_allocated()
        y = x.view(-1)[10:].add_(1)
        x.t().mul_(2)
        assert torch_npu.npu.memory_allocated() == before == block(4 * MiB)
        del x
        assert torch_npu.npu.memory_allocated() == before  # y still holds the storage
        del y
        assert torch_npu.npu.memory_allocated() == 0

    assert estimate(train).status == 0


def test_tensors_dropped_in_reference_cycles_are_freed_when_the_script_ends(tmp_path):
    # the collection at the end walks only what the run made (gc.freeze of the older heap):
    # a cycle the script made and dropped is still found, its tensor's block freed
    path = script(tmp_path, """
        import torch, torch_npu

        class Node:
            pass

        a, b = Node(), Node()
        a.other, b.other = b, a
        a.tensor = torch.empty(1024, 1024, device="npu")
        del a, b
    """)
    for target in (path, lambda: exec(open(path).read(), {})):
        result = estimate(target)
        assert result.status == 0 and result.peak_allocated == block(4 * MiB)
        assert result.allocated_at_end == 0


def test_a_callers_own_gc_freeze_is_kept():
    import gc

    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        assert estimate(lambda: torch.empty(8, device="npu")).status == 0
        # still frozen (an unfreeze would leave none): fewer only by the frozen objects
        # that died meanwhile, none added by the estimate
        assert 0.9 * frozen < gc.get_freeze_count() <= frozen
    finally:
        gc.unfreeze()


def test_allocations_go_to_the_current_stream_and_record_stream_is_told():
    def train():
        import torch_npu

        side = torch_npu.npu.Stream()
        with torch_npu.npu.stream(side):
            a = torch.empty(1000, device="npu")
        assert torch_npu.npu.current_stream() == torch_npu.npu.default_stream()
        b = torch.empty(1000, device="npu")
        a.record_stream(torch_npu.npu.current_stream())
        snap = torch_npu.npu.memory._snapshot()
        streams = {seg["stream"] for seg in snap["segments"]}
        assert streams == {0, side.npu_stream}
        del a, b

    assert estimate(train).status == 0


def test_the_snapshot_replays_with_the_same_peaks_and_memory_viz_reads_it(tmp_path):
    from torch.cuda import _memory_viz

    path = script(tmp_path, TRAIN)
    result = estimate(path, product="A2", snapshot=True)
    snap = result.snapshot
    actions = {e["action"] for e in snap["device_traces"][0]}
    assert {"alloc", "free_requested", "free_completed", "segment_alloc"} <= actions
    allocs = [e for e in snap["device_traces"][0] if e["action"] == "alloc"]
    # the script's frames, innermost first (an operator's workspace names it first)
    assert all(e["frames"] and e["frames"][0]["filename"] in (path, "<workspace>")
               for e in allocs[:20])
    assert any(e["frames"][0]["filename"] == path for e in allocs[:20])
    replayed = replay_tensors(snap, "A2")
    assert (replayed.peak_allocated, replayed.peak_reserved) == (
        result.peak_allocated, result.peak_reserved)
    # torch's own memory_viz reads it (the text views; the trace view's page is built)
    assert "segment" in _memory_viz.segsum(snap).lower()
    assert _memory_viz.trace(snap)
    # the flame graph's lines (its page would fetch a script): a live block's stack
    taken = []

    def keep():
        import torch_npu

        torch_npu.npu.memory._record_memory_history()   # frames from here on, as in torch
        x = torch.empty(1000, device="npu")
        taken.append(torch_npu.npu.memory._snapshot())
        del x

    estimate(keep)
    lines = _memory_viz.memory(taken[0], format_flamegraph=lambda lines: lines)
    assert "stream_0;active_allocated;" in lines and "test_torchsim.py:" in lines
    # the same script traced again gives the same snapshot
    again = estimate(path, product="A2", snapshot=True)
    assert again.snapshot == snap


def test_the_snapshot_option_writes_a_pickle_replay_reads(tmp_path):
    out = str(tmp_path / "snap.pickle")
    code, text = run("estimate", "--json", "--snapshot", out, script(tmp_path, TRAIN))
    assert code == 0
    with open(out, "rb") as f:
        snap = pickle.load(f)
    assert snap["device_traces"][0]
    code, replayed = run("replay", "--allocator", "torch-npu", "--json", out)
    assert code == 0
    estimated, replayed = json.loads(text), json.loads(replayed)
    assert (replayed["peak_allocated"], replayed["peak_reserved"]) == (
        estimated["peak_allocated"], estimated["peak_reserved"])


def test_out_of_memory_shows_in_the_snapshot(tmp_path):
    def train():
        torch.empty(2 << 30, dtype=torch.uint8, device="npu")

    result = estimate(train, capacity=1 << 30, snapshot=True)
    assert result.status == 1
    assert snap_actions(result.snapshot)[-1] == "oom"


def snap_actions(snap):
    return [e["action"] for e in snap["device_traces"][0]]


@pytest.mark.parametrize("line, op, options", [
    ("x[x > 0]", "index.Tensor", ()),
    ("torch.nonzero(x)", "nonzero", ()),
    ("float(x.sum())", ".item()", ("--item-value", "stop")),
])
def test_data_dependent_operators_stop_with_the_operator_and_the_line(tmp_path, capsys,
                                                                      line, op, options):
    path = script(tmp_path, f"""
        import torch
        x = torch.randn(100).npu()
        y = {line}
    """)
    code, out = run("estimate", *options, path)
    err = capsys.readouterr().err
    assert code == 1
    assert f"{path}:4 in <module>" in out and op in out
    assert "ASCEND_MEMSIM_ESTIMATE=1" in out
    assert "DataDependentOperation" in err


def test_memory_fraction_and_peak_reset():
    def train():
        import torch_npu

        t = torch.empty(100 * MiB, dtype=torch.uint8, device="npu")
        del t
        torch_npu.npu.reset_peak_memory_stats()
        assert torch_npu.npu.max_memory_allocated() == 0
        torch_npu.npu.empty_cache()
        torch_npu.npu.set_per_process_memory_fraction(0.25)
        _free, total = torch_npu.npu.mem_get_info()
        assert total == 1 << 30
        with pytest.raises(torch.OutOfMemoryError, match="allowed"):
            torch.empty(300 * MiB, dtype=torch.uint8, device="npu")

    estimate(train, capacity=1 << 30)


def test_no_device_outside_an_estimate():
    estimate(lambda: None)
    assert torch.npu.is_available() is False and torch.npu.device_count() == 0
    with pytest.raises(RuntimeError, match="no NPU"):
        torch.npu.memory_allocated()
    assert "torch_npu" not in sys.modules


def test_estimate_options_after_the_script_are_refused(tmp_path, capsys):
    path = script(tmp_path, "pass\n")
    assert run("estimate", path, "--capacity", "1GiB")[0] == 2
    assert "estimate's own options go before it" in capsys.readouterr().err


def test_the_package_and_the_cli_work_without_torch(tmp_path):
    # torch made unimportable: the package imports, estimate says what it needs
    code = ("import sys; sys.modules['torch'] = None\n"
            "import ascend_memsim\n"
            "from ascend_memsim.cli import main\n"
            f"sys.exit(main(['estimate', {script(tmp_path, 'pass')!r}]))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=ROOT))
    assert done.returncode == 2
    assert "estimate needs torch" in done.stderr


def test_one_card_takes_the_runtimes_share_as_each_rank_does(tmp_path):
    # runtime_share.py: A2's ESTIMATE, 512 MiB, taken from the device before the script.
    # By hand: 30 MiB + 32 bytes rounds to 30 MiB + 512, in a segment rounded up to 2 MiB
    # steps (above 10 MiB): 32 MiB. So 544 MiB fits with nothing to spare, 542 MiB does not
    path = script(tmp_path, "import torch, torch_npu\n"
                            "x = torch.empty(30 << 20, dtype=torch.uint8, device='npu')\n")
    from ascend_memsim.torchsim import estimate_ranks

    exact = estimate(path, product="A2", capacity=544 << 20)
    assert exact.fits and exact.runtime_share == 512 << 20 and exact.margin == 0
    assert "runtime share    512.00 MiB" in str(exact)
    short = estimate(path, product="A2", capacity=542 << 20)
    assert not short.fits and short.out_of_memory["frames"][0]["line"] == 2
    # the same total as one rank of --world-size 1
    rank = estimate_ranks(path, world_size=1, product="A2", capacity=544 << 20).rank(0)
    assert rank.total == exact.device_peak + exact.runtime_share == 544 << 20
    # left out with 0, from Python and the command line
    assert estimate(path, product="A2", capacity=32 << 20, runtime_share=0).fits
    code, out = run("estimate", "--capacity", "32MiB", "--runtime-share", "0", path)
    assert code == 0 and "runtime share" not in out
    code, out = run("estimate", "--capacity", "544MiB", "--runtime-share", "1GiB", path)
    assert code == 1 and "the runtime's share of 1073741824 bytes does not fit" in out
