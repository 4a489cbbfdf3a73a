"""``estimate_ranks`` and ``ascend-memsim estimate --world-size``: each rank of a distributed
job on its own simulated card, with its HCCL communicators and the runtime's share."""

import io
import json
import os
import textwrap
import warnings

import pytest

torch = pytest.importorskip("torch", reason="torchsim runs scripts on torch's fake tensors; "
                                            "install the torch extra")

from ascend_memsim.cli import main  # noqa: E402
from ascend_memsim.torchsim import estimate_ranks  # noqa: E402
from ascend_memsim.torchsim.ranks.hccl import HcclSettings, group_buffer_size  # noqa: E402
from ascend_memsim.torchsim.ranks.run import class_key  # noqa: E402

MiB = 1 << 20
#: the TP toy's reserved bytes by hand: its 2 MiB weight in a 20 MiB large segment
#: (kLargeBuffer, for blocks under 10 MiB), x and y (under 1 MiB) in one 2 MiB small segment
RESERVED_TP = 20 * MiB + 2 * MiB


def block(nbytes: int) -> int:
    """A storage's block on A2 (CANN 9.1.0): + 32, then 512-byte steps."""
    return -(-(nbytes + 32) // 512) * 512


def script(tmp_path, text, name="train.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def device_hccl():
    """The bytes the running rank's simulated card holds for HCCL (its usage by module)."""
    from ascend_memsim.torchsim.torch_npu import npu

    session = npu.active()
    device = session.runtime.device(session.device)
    held = {name: cur for name, cur, _ in device.usage()}
    return held.get("HCCL", 0)


TP = """
    import os, torch, torch.distributed as dist
    import torch_npu
    local = int(os.environ["LOCAL_RANK"])
    torch.npu.set_device(local)
    dist.init_process_group("hccl")
    tp = dist.new_group([0, 1])
    spare = dist.new_group([0, 1])                 # made, never used: no communicator
    w = torch.empty(512, 1024, device="npu")       # this rank's half of a row-parallel layer
    x = torch.empty(16, 1024, device="npu")
    y = torch.empty(16, 512, device="npu")
    dist.all_reduce(y, group=tp)
    dist.all_reduce(y, group=tp)                   # the same communicator again
    import ranks_probe
    ranks_probe.record()
"""


@pytest.fixture
def recorder(monkeypatch):
    """``import ranks_probe; ranks_probe.record()`` in a script notes what the rank's card
    holds for HCCL at that moment."""
    import sys
    import types

    seen = []
    module = types.ModuleType("ranks_probe")
    module.record = lambda: seen.append(device_hccl())
    monkeypatch.setitem(sys.modules, "ranks_probe", module)
    monkeypatch.delenv("HCCL_BUFFSIZE", raising=False)
    monkeypatch.delenv("P2P_HCCL_BUFFSIZE", raising=False)
    return seen


@pytest.fixture
def seen(monkeypatch):
    """``import ranks_probe; ranks_probe.allocated(WHEN)`` in a script notes the running
    rank's allocated bytes under ``WHEN``, one entry per rank."""
    import sys
    import types

    from ascend_memsim.torchsim.torch_npu import npu

    noted = {}
    probe = types.ModuleType("ranks_probe")
    probe.allocated = lambda when: noted.setdefault(when, []).append(npu.memory_allocated())
    monkeypatch.setitem(sys.modules, "ranks_probe", probe)
    return noted


def test_tp_each_rank_holds_one_400_mb_block_per_communicator_used(tmp_path, recorder):
    result = estimate_ranks(script(tmp_path, TP), world_size=2, runtime_share=100 * MiB)
    assert result.traced == "every rank" and [c.ranks for c in result.classes] == [(0,), (1,)]
    # on each card, while the script ran: the tp group's communicator, 2 x 200 MB, only
    assert recorder == [400 * MiB, 400 * MiB]
    for rank in (0, 1):
        f = result.rank(rank)
        assert [(c.kind, c.ranks, c.size) for c in f.communicators] == [
            ("group", (0, 1), 2 * 200 * MiB)]
        assert f.local_rank == rank and f.node == 0
        assert f.estimate.peak_allocated == (block(512 * 1024 * 4) + block(16 * 1024 * 4)
                                             + block(16 * 512 * 4))
        assert f.estimate.peak_reserved == RESERVED_TP
        assert f.total == RESERVED_TP + 400 * MiB + 100 * MiB
        assert f.margin == result.capacity - f.total and f.fits
    assert result.fits and result.first_failure() is None


MESH = """
    import os, torch, torch.distributed as dist
    import torch_npu
    from torch.distributed.device_mesh import init_device_mesh
    torch.npu.set_device(int(os.environ["LOCAL_RANK"]))
    mesh = init_device_mesh("npu", (2, 2), mesh_dim_names=("dp", "tp"))   # makes the world
    tp, dp = mesh["tp"], mesh["dp"]                  # slices: one dimension each
    assert (tp.size(), dp.size()) == (2, 2) and mesh.get_coordinate() is not None
    x = torch.empty(1 << 20, device="npu")           # 4 MiB
    dist.all_reduce(x, group=tp.get_group())
    dist.all_reduce(x, group=mesh.get_group("dp"))
    import ranks_probe
    ranks_probe.record()
"""


def test_a_device_mesh_makes_its_groups_and_each_used_one_takes_a_communicator(
        tmp_path, recorder):
    result = estimate_ranks(script(tmp_path, MESH), world_size=4, runtime_share=0)
    assert result.fits, result.first_failure()
    # on each card: the tp and the dp communicators, 2 x 200 MB each; the world's group,
    # made by the mesh and never used, none
    assert recorder == [800 * MiB] * 4
    for rank, (tp, dp) in enumerate([((0, 1), (0, 2)), ((0, 1), (1, 3)),
                                     ((2, 3), (0, 2)), ((2, 3), (1, 3))]):
        f = result.rank(rank)
        assert sorted(c.ranks for c in f.communicators) == sorted([tp, dp])
        assert all(c.size == 2 * 200 * MiB for c in f.communicators)
        assert f.estimate.peak_allocated == block(4 * MiB)
        assert f.total == f.estimate.peak_reserved + 800 * MiB


FSDP2 = """
    import os, torch, torch.distributed as dist
    import torch_npu
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    torch.npu.set_device(int(os.environ["LOCAL_RANK"]))
    mesh = init_device_mesh("npu", (2,))
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.Linear(256, 256)).npu()
    mp = MixedPrecisionPolicy(param_dtype=PARAM_DTYPE, reduce_dtype=torch.float32)
    for layer in model:
        fully_shard(layer, mesh=mesh, mp_policy=mp)   # each layer gives back what it gathers,
    fully_shard(model, mesh=mesh, mp_policy=mp)       # the root (no weights) is FSDP's too
    import ranks_probe
    ranks_probe.allocated("sharded")
    x = torch.empty(4, 256, device="npu")
    out = model(x)
    ranks_probe.allocated("forward")
    out.sum().backward()
    del out
    opt = torch.optim.Adam(model.parameters())
    opt.step()
    ranks_probe.allocated("step")
"""


@pytest.mark.parametrize("param_dtype", ["float32", "bfloat16"])
def test_fsdp2_frees_what_it_gathers_and_holds_a_shard_of_everything_else(tmp_path, seen,
                                                                           param_dtype):
    text = FSDP2.replace("PARAM_DTYPE", f"torch.{param_dtype}")
    result = estimate_ranks(script(tmp_path, text), world_size=2, runtime_share=0)
    assert result.fits, result.first_failure()
    # by hand, on each rank: half of each layer's weight (128 x 256 floats) and bias (128)
    params = 2 * (block(128 * 256 * 4) + block(128 * 4))
    x = block(4 * 256 * 4)
    assert seen["sharded"] == [params] * 2          # the unsharded originals are gone
    # after the forward each layer gave back the weights it gathered (resized to 0), not
    # 2 x 257 KiB: the shards, x, layer 0's output (saved for layer 1's backward) and out;
    # in bfloat16, x cast for layer 0 (which keeps it) and the two outputs at half the size
    low = block(4 * 256 * 2)
    held = 3 * x if param_dtype == "float32" else x + 3 * low
    assert seen["forward"] == [params + held] * 2
    # after the step: the shards, each layer's gradients as views of one reduce-scatter
    # output of the layer's weight and bias shards (float32, the reduce dtype), Adam's two
    # states of each shard, and x
    grads = 2 * block((128 * 256 + 128) * 4)
    assert seen["step"] == [params + grads + 2 * params + x] * 2
    for rank in (0, 1):
        f = result.rank(rank)
        assert [c.ranks for c in f.communicators] == [(0, 1)] and not f.estimate.notes


FSDP1 = """
    import os, torch, torch.distributed as dist
    import torch_npu
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    torch.npu.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("hccl")
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.Linear(256, 256)).npu()
    model = FSDP(model, device_id=torch.npu.current_device())
    x = torch.empty(4, 256, device="npu")
    model(x).sum().backward()
    import ranks_probe
    ranks_probe.allocated("backward")
    opt = torch.optim.Adam(model.parameters())
    opt.step()
    ranks_probe.allocated("step")
"""


def test_the_first_fsdp_frees_its_gathered_flat_parameter(tmp_path, seen):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = estimate_ranks(script(tmp_path, FSDP1), world_size=2, runtime_share=0)
    assert result.fits, result.first_failure()
    # torch's own read of a fake tensor's data pointer is not the user's to see
    assert not [w for w in caught if "data pointer of FakeTensor" in str(w.message)]
    # by hand: one flat parameter of both layers, 2 x (256 x 256 + 256) floats, half a rank;
    # after the backward its shard, the gradient's shard and x (the gathered whole freed by
    # FSDP's storage resize, 526,336 bytes, is not held); after the step Adam's two states
    shard = block((256 * 256 + 256) * 4)
    x = block(4 * 256 * 4)
    assert seen["backward"] == [2 * shard + x] * 2
    assert seen["step"] == [4 * shard + x] * 2


TENSOR_PARALLEL = """
    import os, torch
    import torch_npu
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (
        ColwiseParallel, RowwiseParallel, parallelize_module)
    torch.npu.set_device(int(os.environ["LOCAL_RANK"]))
    mesh = init_device_mesh("npu", (2,))
    mlp = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(),
                              torch.nn.Linear(4096, 1024)).npu()
    parallelize_module(mlp, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    import ranks_probe
    ranks_probe.allocated("parallel")
    x = torch.empty(8, 1024, device="npu")
    y = mlp(x)
    ranks_probe.allocated("forward")
    y.sum().backward()
    ranks_probe.allocated("backward")
"""


def test_dtensor_tensor_parallelism_holds_each_ranks_shards(tmp_path, seen):
    result = estimate_ranks(script(tmp_path, TENSOR_PARALLEL), world_size=2, runtime_share=0)
    assert result.fits, result.first_failure()
    # by hand: the column-parallel layer keeps 2048 of its 4096 rows and bias, the
    # row-parallel one 2048 of its 4096 columns and the whole (replicated) bias
    params = (block(2048 * 1024 * 4) + block(2048 * 4) + block(1024 * 2048 * 4)
              + block(1024 * 4))
    assert seen["parallel"] == [params] * 2
    # x, the ReLU's local output (8 x 2048, kept for both backwards) and y (all-reduced)
    x, hidden = block(8 * 1024 * 4), block(8 * 2048 * 4)
    assert seen["forward"] == [params + x + hidden + x] * 2
    # every shard's gradient, like it; x and y still held
    assert seen["backward"] == [2 * params + 2 * x] * 2
    for rank in (0, 1):
        assert [c.ranks for c in result.rank(rank).communicators] == [(0, 1)]


def test_hccl_buffsize_sets_each_communicator_to_twice_it(tmp_path, recorder, monkeypatch):
    monkeypatch.setenv("HCCL_BUFFSIZE", "64")
    result = estimate_ranks(script(tmp_path, TP), world_size=2, runtime_share=0)
    assert recorder == [128 * MiB, 128 * MiB]
    assert result.hccl_buffsize == 64 and result.rank(1).hccl == 128 * MiB
    assert result.rank(1).total == RESERVED_TP + 128 * MiB
    # the option wins over the environment, as an export before the run would
    recorder.clear()
    result = estimate_ranks(script(tmp_path, TP), world_size=2, hccl_buffsize=10,
                            runtime_share=0)
    assert recorder == [20 * MiB, 20 * MiB] and result.rank(0).hccl == 20 * MiB


def test_a_group_never_used_and_a_job_without_collectives_hold_no_hccl(tmp_path, recorder):
    text = TP.replace("dist.all_reduce(y, group=tp)", "pass")
    result = estimate_ranks(script(tmp_path, text), world_size=2, runtime_share=0)
    assert recorder == [0, 0]
    assert all(c.figures.hccl == 0 and not c.figures.communicators for c in result.classes)


def test_asking_an_hccl_group_its_comm_name_makes_its_communicator(tmp_path, capfd):
    # ProcessGroupHCCL::getHcclCommName: init_comm=False answers "" before the communicator
    # is made; the default makes it (2 x HCCL_BUFFSIZE of 200 MB), and its name is what the
    # MC2 operators take
    text = """
        import os, torch, torch.distributed as dist
        import torch_npu
        rank = int(os.environ["RANK"])
        torch.npu.set_device(rank)
        dist.init_process_group("hccl")
        backend = dist.new_group([0, 1])._get_backend(torch.device("npu"))
        print("before", repr(backend.get_hccl_comm_name(rank, init_comm=False)))
        name = backend.get_hccl_comm_name(rank)
        x = torch.empty(64, 128, dtype=torch.float16, device="npu")
        w = torch.empty(128, 256, dtype=torch.float16, device="npu")
        out, _ = torch_npu.npu_all_gather_base_mm(x, w, name, 2)
        print("gathered", tuple(out.shape))
    """
    result = estimate_ranks(script(tmp_path, text), world_size=2, runtime_share=0)
    printed = capfd.readouterr().out
    assert printed.count("before ''") == 2 and printed.count("gathered (128, 256)") == 2
    assert result.rank(0).hccl == result.rank(1).hccl == 400 * MiB
    # outside the run the backend class is as torch made it
    from torch._C._distributed_c10d import FakeProcessGroup
    assert not hasattr(FakeProcessGroup, "get_hccl_comm_name")


def test_hccl_buffer_size_in_pg_options_sets_that_group_only(tmp_path, recorder):
    text = TP.replace("tp = dist.new_group([0, 1])", """\
import torch_npu._C._distributed_c10d as c10d_npu
    options = c10d_npu.ProcessGroupHCCL.Options()
    options.hccl_config = {"hccl_buffer_size": 30}
    tp = dist.new_group([0, 1], pg_options=options)""")
    text += "    dist.barrier()\n"
    result = estimate_ranks(script(tmp_path, text), world_size=2, runtime_share=0)
    sizes = sorted((c.group, c.size) for c in result.rank(0).communicators)
    # tp: 2 x 30 MB; the world group (the barrier): 2 x HCCL_BUFFSIZE
    assert sizes == [("0", 400 * MiB), ("1", 60 * MiB)]
    assert recorder == [60 * MiB, 60 * MiB]     # before the barrier


def test_hccl_buffer_size_must_be_an_int():
    from ascend_memsim.torchsim.ranks.distributed import ProcessGroupHCCL

    options = ProcessGroupHCCL.Options()
    options.hccl_config = {"hccl_buffer_size": 1.5}
    with pytest.raises(TypeError, match="should be int"):
        group_buffer_size(options)
    assert group_buffer_size(None) is None


@pytest.mark.parametrize("environ, message", [
    ({"HCCL_BUFFSIZE": "0"}, "HCCL_BUFFSIZE=0: must be at least 1"),
    ({"HCCL_BUFFSIZE": "big"}, "not a whole number"),
    ({"P2P_HCCL_BUFFSIZE": "-1"}, "P2P_HCCL_BUFFSIZE=-1"),
])
def test_bad_buffer_sizes_are_refused(environ, message):
    with pytest.raises(ValueError, match=message):
        HcclSettings.from_environ(environ)
    assert HcclSettings.from_environ({}) == HcclSettings(200, 20)


SEND_RECV = """
    import os, torch, torch.distributed as dist
    import torch_npu
    rank = int(os.environ["RANK"])
    torch.npu.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("hccl")
    t = torch.empty(1024, device="npu")
    if rank == 0:
        dist.send(t, 1)
    else:
        dist.recv(t, 0)
"""


def test_send_recv_use_a_pair_communicator_of_twice_p2p_buffsize(tmp_path, monkeypatch):
    monkeypatch.delenv("P2P_HCCL_BUFFSIZE", raising=False)
    monkeypatch.delenv("HCCL_BUFFSIZE", raising=False)
    path = script(tmp_path, SEND_RECV)
    result = estimate_ranks(path, world_size=2, runtime_share=0)
    for rank in (0, 1):
        assert [(c.kind, c.ranks, c.size) for c in result.rank(rank).communicators] == [
            ("p2p", (0, 1), 2 * 20 * MiB)]
    # P2P_HCCL_BUFFSIZE=0: the group's communicator serves the pair
    result = estimate_ranks(path, world_size=2, runtime_share=0, p2p_buffsize=0)
    assert [(c.kind, c.size) for c in result.rank(1).communicators] == [("group", 400 * MiB)]


def test_a_communicator_the_card_cannot_hold_fails_at_the_scripts_line(tmp_path, recorder):
    path = script(tmp_path, TP)
    result = estimate_ranks(path, world_size=2, capacity=256 * MiB, runtime_share=0)
    assert not result.fits
    rank, why = result.first_failure()
    line = TP.splitlines().index("    dist.all_reduce(y, group=tp)") + 1
    assert rank == 0 and "Create ccl buffer size[419430400] fail" in why
    assert why.endswith(f"{path}:{line} in <module>")
    assert recorder == []                       # the script stopped there


PP = """
    import os, torch, torch.distributed as dist
    import torch_npu
    V, H, B, M, L = 1000, 512, 64, 4, 4
    rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    torch.npu.set_device(local)
    dist.init_process_group("hccl")
    dev = torch.device("npu", local)
    body = [m for _ in range(L) for m in (torch.nn.Linear(H, H, bias=False), torch.nn.ReLU())]
    if rank == 0:
        stage = torch.nn.Sequential(torch.nn.Embedding(V, H), *body).to(dev)
    else:
        stage = torch.nn.Sequential(*body, torch.nn.Linear(H, 1, bias=False)).to(dev)
    warmup = 2 - rank - 1                          # 1F1B: stage s runs p - s - 1 ahead
    inflight = []
    def forward():
        if rank == 0:
            out = stage(torch.zeros(B, dtype=torch.long, device=dev))
            dist.send(out, 1)
            inflight.append(out)
        else:
            x = torch.empty(B, H, device=dev)
            dist.recv(x, 0)
            x.requires_grad_()
            inflight.append((x, stage(x).sum()))
    def backward():
        if rank == 0:
            out = inflight.pop(0)
            g = torch.empty(B, H, device=dev)
            dist.recv(g, 1)
            out.backward(g)
        else:
            x, loss = inflight.pop(0)
            loss.backward()
            dist.send(x.grad, 0)
    for _ in range(warmup):
        forward()
    for _ in range(M - warmup):
        forward()
        backward()
    for _ in range(warmup):
        backward()
"""


def test_pipeline_1f1b_first_stage_holds_more_activations(tmp_path, monkeypatch):
    monkeypatch.delenv("P2P_HCCL_BUFFSIZE", raising=False)
    result = estimate_ranks(script(tmp_path, PP), world_size=2, runtime_share=0)
    first, last = result.rank(0).estimate, result.rank(1).estimate
    # parameters by hand: the embedding on the first stage, the head on the last
    layers = 4 * block(512 * 512 * 4)
    assert first.at_peak["parameters"] == block(1000 * 512 * 4) + layers
    assert last.at_peak["parameters"] == layers + block(512 * 4)
    # 1F1B: two microbatches in flight on the first stage, one on the last; the second
    # holds at least its four ReLU outputs (B x H floats each) more
    acts = "activations and temporaries"
    assert first.at_peak[acts] - last.at_peak[acts] >= 4 * block(64 * 512 * 4)
    # each stage's only communicator: the pair's, 2 x P2P_HCCL_BUFFSIZE
    assert result.rank(0).hccl == result.rank(1).hccl == 40 * MiB


DP = """
    import os, torch, torch.distributed as dist
    import torch_npu
    world = int(os.environ.get("WORLD_SIZE", "1"))
    torch.npu.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    if world > 1:
        dist.init_process_group("hccl")
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(),
                                torch.nn.Linear(1024, 256)).npu()
    opt = torch.optim.Adam(model.parameters())
    for _ in range(2):
        opt.zero_grad()
        model(torch.randn(32, 256).npu()).sum().backward()
        if world > 1:
            for p in model.parameters():
                dist.all_reduce(p.grad)
        opt.step()
"""


def test_data_parallel_at_1_2_8_ranks_adds_only_the_communicator(tmp_path, monkeypatch):
    from ascend_memsim.torchsim import estimate

    monkeypatch.delenv("HCCL_BUFFSIZE", raising=False)
    path = script(tmp_path, DP)
    alone = estimate(path)
    for world in (2, 8):
        result = estimate_ranks(path, world_size=world, runtime_share=0)
        assert len(result.classes) == world
        for c in result.classes:
            f = c.figures
            assert f.estimate.at_peak == alone.at_peak
            assert (f.estimate.peak_allocated, f.estimate.peak_reserved) == (
                alone.peak_allocated, alone.peak_reserved)
            assert f.hccl == 400 * MiB
            assert f.total == alone.peak_reserved + 400 * MiB


LAYOUT = """
    import os, torch, torch.distributed as dist
    import torch_npu
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.npu.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("hccl")
    tp, pp = 2, 2
    dp = world // (tp * pp)
    mine = {}
    for start in range(0, world, tp):                      # tensor-parallel groups
        ranks = list(range(start, start + tp))
        g = dist.new_group(ranks)
        if rank in ranks:
            mine["tp"] = g
    for start in range(world // pp):                        # pipeline groups
        ranks = list(range(start, world, world // pp))
        g = dist.new_group(ranks)
        if rank in ranks:
            mine["pp"] = g
    t = torch.empty(1024, device="npu")
    dist.all_reduce(t, group=mine["tp"])
    if dist.get_rank(mine["pp"]) == 0:                      # the first stage: more
        extra = torch.empty(4 << 20, device="npu")
"""


def test_above_8_ranks_alike_ranks_are_traced_once_as_a_class(tmp_path):
    result = estimate_ranks(script(tmp_path, LAYOUT), world_size=16, runtime_share=0)
    assert result.traced == "one rank per class"
    # tp 2 (first, last) x pp 2 (first, last): 4 classes of 4 ranks, the lowest traced
    assert sorted(c.ranks for c in result.classes) == [
        (0, 2, 4, 6), (1, 3, 5, 7), (8, 10, 12, 14), (9, 11, 13, 15)]
    first_stage = result.rank(2).estimate.peak_allocated
    assert result.rank(10).estimate.peak_allocated < first_stage
    assert {c.figures.rank for c in result.classes} == {0, 1, 8, 9}
    every = estimate_ranks(script(tmp_path, LAYOUT), world_size=16, runtime_share=0,
                           trace_all=True)
    for r in range(16):
        assert every.rank(r).total == result.rank(r).total


def test_class_key_by_group_size_and_place():
    layout = [tuple(range(4)), (0, 1), (2, 3), (0, 2), (1, 3)]
    assert class_key(0, layout, 4) == ((2, "first"), (2, "first"))
    assert class_key(3, layout, 4) == ((2, "last"), (2, "last"))


def test_the_runtime_share_is_on_the_card_before_the_script(tmp_path):
    text = """
        import torch, torch_npu
        free, total = torch_npu.npu.mem_get_info()
        assert total - free == 300 * 2**20, total - free
    """
    result = estimate_ranks(script(tmp_path, text), world_size=2, runtime_share=300 * MiB)
    assert result.fits and result.rank(1).runtime_share == 300 * MiB
    # the product's default is an estimate, and the report says so
    result = estimate_ranks(script(tmp_path, "pass"), world_size=1)
    assert result.runtime_share == 512 * MiB and "ESTIMATE" in result.runtime_share_source
    assert "estimated: the runtime's share" in str(result)


def test_cli_world_size_text_and_json(tmp_path, recorder):
    path = script(tmp_path, TP)
    out = io.StringIO()
    code = main(["estimate", "--world-size", "2", "--runtime-share", "0", "--json", path],
                out=out)
    data = json.loads(out.getvalue())
    assert code == 0 and data["fits"] and data["world_size"] == 2
    assert [c["hccl"] for c in data["classes"]] == [400 * MiB, 400 * MiB]
    assert data["classes"][1]["total"] == RESERVED_TP + 400 * MiB
    out = io.StringIO()
    code = main(["estimate", "--world-size", "2", "--capacity", "256MiB",
                 "--runtime-share", "0", path], out=out)
    text = out.getvalue()
    assert code == 1 and "DOES NOT FIT: rank 0 first: HCCL: Create ccl buffer" in text
    assert "runtime share: 0 bytes, set by the user" in text


def test_bad_world_size_is_refused(tmp_path):
    with pytest.raises(ValueError, match="world_size"):
        estimate_ranks(script(tmp_path, "pass"), world_size=0)
    assert main(["estimate", "--world-size", "0", script(tmp_path, "pass")],
                out=io.StringIO()) == 2
    assert os.environ.get("RANK") is None


def test_a_bare_npu_device_is_the_ranks_own_on_every_rank(tmp_path):
    # FakeTensorMode's dispatch cache is shared: rank 1 got rank 0's "npu:0" for "npu"
    text = """
        import os, torch, torch_npu
        torch.npu.set_device(int(os.environ["LOCAL_RANK"]))
        x = torch.empty(4, device="npu") + torch.ones(4).npu()
        assert x.device == torch.device("npu", int(os.environ["LOCAL_RANK"])), x.device
    """
    result = estimate_ranks(script(tmp_path, text), world_size=2, runtime_share=0)
    assert [c.figures.estimate.status for c in result.classes] == [0, 0]


def test_each_rank_takes_the_operators_workspace_as_one_card_does(tmp_path, monkeypatch):
    """The ranks run with estimate()'s workspace table and TASK_QUEUE_ENABLE: with 2 the
    workspace allocator's block is a line of each rank's total; switched off, none."""
    from ascend_memsim.torchsim import estimate

    monkeypatch.delenv("HCCL_BUFFSIZE", raising=False)
    path = script(tmp_path, DP)
    alone = estimate(path, task_queue=2)
    assert alone.workspace_peak > 0
    result = estimate_ranks(path, world_size=2, runtime_share=0, task_queue=2)
    for c in result.classes:
        assert c.figures.workspace == alone.workspace_peak
        assert c.figures.total == alone.peak_reserved + alone.workspace_peak + 400 * MiB
    off = estimate_ranks(path, world_size=2, runtime_share=0, workspace=False)
    assert all(c.figures.workspace == 0 for c in off.classes)
    assert off.rank(0).estimate.peak_reserved <= alone.peak_reserved


LOGS_ON_EACH_RANK = """
import torch, torch.distributed as dist
import torch_npu
dist.init_process_group("hccl")
loss = torch.nn.Linear(64, 1).npu()(torch.randn(8, 64).npu()).sum()
print("rank", dist.get_rank(), "loss", loss.item())
"""


def test_item_value_applies_to_every_rank(tmp_path):
    # one rank's options are every rank's: the default lets each rank's logging through,
    # "stop" (None) stops each rank at its read
    path = script(tmp_path, LOGS_ON_EACH_RANK)
    result = estimate_ranks(path, world_size=2, runtime_share=0)
    assert result.fits
    assert [result.rank(r).estimate.values_read for r in (0, 1)] == [1, 1]
    stopped = estimate_ranks(path, world_size=2, runtime_share=0, item_value=None)
    assert not stopped.fits
    assert all(".item() at" in stopped.rank(r).estimate.stopped for r in (0, 1))


def test_a_script_that_stops_on_every_rank_is_unknown_not_does_not_fit(tmp_path):
    path = script(tmp_path, """
        import torch, torch.distributed as dist
        import torch_npu
        dist.init_process_group("hccl")
        x = torch.randn(100).npu()
        y = torch.nonzero(x > 0)
    """)
    result = estimate_ranks(path, world_size=2, runtime_share=0)
    text = str(result)
    assert not result.fits and "DOES NOT FIT" not in text
    assert "verdict: unknown, rank 0 first: the script stopped: nonzero" in text
    assert all(result.rank(r).verdict() == "unknown" for r in (0, 1))


@pytest.mark.parametrize("size", [(1 << 20) + 1, 10 ** 8, 2 ** 63])
def test_a_world_size_past_any_cluster_is_refused_before_anything_runs(tmp_path, capsys, size):
    path = script(tmp_path, "print('the script ran')\n")
    with pytest.raises(ValueError, match="world_size must be at most 1,048,576"):
        estimate_ranks(path, world_size=size)
    out = io.StringIO()
    assert main(["estimate", "--world-size", str(size), path], out=out) == 2
    captured = capsys.readouterr()
    assert "at most 1,048,576" in captured.err and "the script ran" not in captured.out


def test_hccl_buffsize_in_digits_of_another_script_is_refused():
    with pytest.raises(ValueError, match="not a whole number of MB"):
        HcclSettings.from_environ({"HCCL_BUFFSIZE": "\uff11\uff12"})
