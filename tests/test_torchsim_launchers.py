"""The launchers training stacks are started with (torchsim/stacks/launchers.py): each read
with its own argument parser, the ranks taken from its arguments, and the command a user
types run by ``ascend-memsim estimate`` as the launcher would start it."""

import io
import textwrap

import pytest

torch = pytest.importorskip("torch", reason="the launchers run scripts under estimate, which "
                                            "needs torch: pip install -e '.[torch]'")

from ascend_memsim.cli import main  # noqa: E402
from ascend_memsim.torchsim.stacks.launchers import LaunchError, resolve  # noqa: E402

MiB = 1 << 20

#: a DDP step that prints what its process was given (rank 0 only)
DDP = """
    import os, sys, torch, torch.distributed as dist
    import torch_npu
    dist.init_process_group("hccl")
    torch.npu.set_device(int(os.environ["LOCAL_RANK"]))
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(1024, 1024).npu())
    model(torch.randn(8, 1024).npu()).sum().backward()
    print("rank", dist.get_rank(), "of", dist.get_world_size(), "argv", sys.argv[1:])
"""


def script(tmp_path, text, name="train.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def run(*argv):
    out = io.StringIO()
    return main(list(argv), out=out), out.getvalue()


def test_torchrun_is_read_with_torchs_own_parser(tmp_path):
    path = script(tmp_path, "print(1)\n")
    # torch.distributed.run's get_args_parser: both spellings, a MIN:MAX range of nodes
    for words, ranks, per_node in (
            (["torchrun", "--nproc-per-node", "8", path, "--lr", "1"], 8, 8),
            (["torchrun", "--nproc_per_node=4", "--nnodes", "2", path], 8, 4),
            (["torchrun", "--nnodes", "1:3", "--nproc-per-node", "2", path], 6, 2),
            (["python", "-m", "torch.distributed.run", "--nproc-per-node", "2", path], 2, 2)):
        program = resolve(words, cards_per_node=8)
        assert (program.world_size, program.cards_per_node) == (ranks, per_node)
        assert program.kind == "script" and program.target == path
    assert resolve(["torchrun", "--nproc-per-node", "2", path, "--lr", "1"]).argv == [
        path, "--lr", "1"]
    module = resolve(["torchrun", "--nproc-per-node", "2", "-m", "pkg.train", "--x"])
    assert (module.kind, module.target, module.argv) == ("module", "pkg.train",
                                                         ["pkg.train", "--x"])
    # "gpu"/"auto" count the node's cards: --cards-per-node, narrowed by the visible devices
    assert resolve(["torchrun", "--nproc-per-node", "auto", path], 16).world_size == 16
    with pytest.raises(LaunchError, match="--no-python"):
        resolve(["torchrun", "--no-python", "--nproc-per-node", "2", "train.sh"])
    with pytest.raises(LaunchError, match="expected a whole number"):
        resolve(["torchrun", "--nproc-per-node", "x", path])


def test_deepspeed_and_accelerate_are_read_with_their_own_parsers(tmp_path, monkeypatch):
    pytest.importorskip("deepspeed", reason="the stacks extra: pip install -e '.[stacks]'")
    pytest.importorskip("accelerate", reason="the stacks extra: pip install -e '.[stacks]'")
    path = script(tmp_path, "print(1)\n")
    # deepspeed/launcher/runner.py: --num_gpus (default every card of the node) x --num_nodes;
    # launch.py gives each rank's script --local_rank=N (not with --no_local_rank)
    ds = resolve(["deepspeed", "--num_gpus", "2", path, "--deepspeed", "ds.json"])
    assert (ds.world_size, ds.local_rank_arg) == (2, True)
    assert ds.rank_argv(1) == [path, "--deepspeed", "ds.json", "--local_rank=1"]
    assert resolve(["deepspeed", path]).world_size == 8
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "0,1,2,3")
    assert resolve(["deepspeed", path]).world_size == 4
    monkeypatch.delenv("ASCEND_RT_VISIBLE_DEVICES")
    assert not resolve(["deepspeed", "--no_local_rank", "--num_gpus", "2", path]).local_rank_arg
    with pytest.raises(LaunchError, match="deepspeed"):
        resolve(["deepspeed", "--num_gpus"])
    # accelerate launch: its parser and its own environment for the processes
    acc = resolve(["accelerate", "launch", "--num_processes", "4", "--mixed_precision", "bf16",
                   path, "--x"])
    assert (acc.world_size, acc.argv) == (4, [path, "--x"])
    assert acc.env["ACCELERATE_MIXED_PRECISION"] == "bf16"
    with pytest.raises(LaunchError, match="accelerate launch"):
        resolve(["accelerate", "config"])


def test_llamafactory_cli_follows_its_own_launch_rule(monkeypatch):
    pytest.importorskip("llamafactory", reason="the stacks extra: pip install -e '.[stacks]'")
    # llamafactory/launcher.py, launch(): `train` on a node of more than one card goes
    # through torchrun of launcher.py, NPROC_PER_NODE (default: the cards) x NNODES ranks
    for name in ("NPROC_PER_NODE", "NNODES", "FORCE_TORCHRUN", "ASCEND_RT_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    train = resolve(["llamafactory-cli", "train", "sft.yaml", "learning_rate=1e-4"])
    assert (train.world_size, train.kind) == (8, "script")
    assert train.target.endswith("llamafactory/launcher.py")
    assert train.argv[1:] == ["sft.yaml", "learning_rate=1e-4"]
    monkeypatch.setenv("NPROC_PER_NODE", "2")
    monkeypatch.setenv("NNODES", "2")
    assert resolve(["llamafactory-cli", "train", "sft.yaml"]).world_size == 4
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "0")
    monkeypatch.delenv("NPROC_PER_NODE")
    monkeypatch.delenv("NNODES")
    one = resolve(["llamafactory-cli", "train", "sft.yaml"])        # one card: in-process
    assert (one.kind, one.target, one.world_size) == ("entry", "llamafactory.cli:main", None)
    monkeypatch.setenv("FORCE_TORCHRUN", "1")
    assert resolve(["llamafactory-cli", "train", "sft.yaml"]).world_size == 1


def test_modules_console_scripts_and_unknown_launchers(tmp_path):
    assert resolve(["-m", "pkg.train", "--a", "1"]).argv == ["pkg.train", "--a", "1"]
    entry = resolve(["ascend-memsim", "profiles"])
    assert (entry.kind, entry.target) == ("entry", "ascend_memsim.cli:main")
    for words in (["mpirun", "-n", "2", "train.py"], ["srun", "python", "train.py"]):
        with pytest.raises(LaunchError, match=r"the forms that work: SCRIPT\.py"):
            resolve(words)
    with pytest.raises(LaunchError, match="no such script"):
        resolve([str(tmp_path / "missing.py")])


def test_a_launcher_command_runs_each_rank_as_the_launcher_starts_it(tmp_path, capfd):
    path = script(tmp_path, DDP)
    code, out = run("estimate", "--", "torchrun", "--nproc-per-node", "2", path, "--lr", "1")
    printed = capfd.readouterr().out
    assert code == 0, printed
    assert "rank 0 of 2 argv ['--lr', '1']" in printed
    assert "rank 1 of 2 argv ['--lr', '1']" in printed
    assert "2 ranks on A2, 2 cards a node" in out and "(torchrun: 1 node x 2)" in out
    # each rank: a 1024 x 1024 float32 Linear, its gradient and DDP's bucket (4 MiB + 512
    # each) in a 20 MiB segment, the 200 MB x 2 communicator and A2's 512 MiB share
    assert out.count("400.00 MiB  512.00 MiB") == 2
    code, _ = run("estimate", "--world-size", "4", "--", "torchrun", "--nproc-per-node", "2",
                  path)
    assert code == 2 and "starts 2 ranks" in capfd.readouterr().err


def test_deepspeeds_launcher_gives_each_rank_its_local_rank(tmp_path, capfd):
    pytest.importorskip("deepspeed", reason="the stacks extra: pip install -e '.[stacks]'")
    path = script(tmp_path, DDP)
    code, _ = run("estimate", "--", "deepspeed", "--num_gpus", "2", path)
    printed = capfd.readouterr().out
    assert code == 0, printed
    assert "rank 0 of 2 argv ['--local_rank=0']" in printed
    assert "rank 1 of 2 argv ['--local_rank=1']" in printed


def test_accelerate_launch_runs_its_processes_each_from_a_fresh_state(tmp_path, capfd):
    pytest.importorskip("accelerate", reason="the stacks extra: pip install -e '.[stacks]'")
    # accelerate's PartialState is a process-wide singleton: each rank is a process of its
    # own on the machine (stacks/process_state.py forgets it between the ranks)
    path = script(tmp_path, """
        import torch
        from accelerate import Accelerator
        acc = Accelerator()
        model, opt = acc.prepare(torch.nn.Linear(1024, 1024),
                                 torch.optim.SGD(torch.nn.Linear(1, 1).parameters(), lr=0.1))
        acc.backward(model(torch.randn(8, 1024, device=acc.device)).sum())
        print("process", acc.process_index, "of", acc.num_processes, acc.mixed_precision)
    """)
    code, out = run("estimate", "--", "accelerate", "launch", "--num_processes", "2",
                    "--mixed_precision", "bf16", path)
    printed = capfd.readouterr().out
    assert code == 0, printed
    assert "process 0 of 2 bf16" in printed and "process 1 of 2 bf16" in printed
    assert out.count("fits") >= 2 and "unknown" not in out


def test_a_module_takes_what_follows_it_as_python_m_does(tmp_path, capfd, monkeypatch):
    (tmp_path / "mytrain.py").write_text(
        "import sys, torch, torch_npu\nx = torch.empty(1 << 20, device='npu')\n"
        "print('argv', sys.argv[1:])\n")
    monkeypatch.chdir(tmp_path)
    code, out = run("estimate", "-m", "mytrain", "--capacity", "1")
    assert code == 0 and "argv ['--capacity', '1']" in capfd.readouterr().out
    assert out.startswith("mytrain: on A2") and "peak allocated     4.00 MiB" in out
