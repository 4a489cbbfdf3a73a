"""``DistributedDataParallel`` in ``estimate_ranks``: torch's DDP and its Reducer run on the
fake tensors; its gradient buckets, the group's communicator, ``gradient_as_bucket_view``,
``bucket_cap_mb``, ``no_sync`` and ``broadcast_buffers`` cost what torch makes them cost."""

import sys
import textwrap
import types

import pytest

torch = pytest.importorskip("torch", reason="torchsim runs scripts on torch's fake tensors; "
                                            "install the torch extra")

from ascend_memsim.torchsim import estimate_ranks  # noqa: E402

MiB = 1 << 20
#: one Linear(512, 512, bias=False) weight: 1 MiB of float32
W = 512 * 512 * 4


def block(nbytes: int) -> int:
    """A storage's block on A2 (CANN 9.1.0): + 32, then 512-byte steps."""
    return -(-(nbytes + 32) // 512) * 512


DDP_TRAIN = """
    import os, torch, torch.distributed as dist
    import torch_npu, ddp_probe
    from torch.nn.parallel import DistributedDataParallel as DDP
    local = int(os.environ["LOCAL_RANK"])
    torch.npu.set_device(local)
    dist.init_process_group("hccl")
    model = torch.nn.Sequential(*[torch.nn.Linear(512, 512, bias=False)
                                  for _ in range(4)]).npu()
    ddp = DDP(model, device_ids=[local], **ddp_probe.options)
    opt = torch.optim.Adam(ddp.parameters())
    for _ in range(3):
        opt.zero_grad()
        ddp(torch.randn(32, 512).npu()).sum().backward()
        opt.step()
    # the bytes the live tensors asked for (blocks round them up), and DDP's own account
    # of its buckets
    ddp_probe.seen.append((torch.npu.memory_stats()["requested_bytes.all.current"],
                           ddp._get_ddp_logging_data().get("bucket_sizes")))
"""


@pytest.fixture
def run(tmp_path, monkeypatch):
    """Run DDP_TRAIN (or ``text``) with DDP's ``options``; the result and, for each rank,
    the requested bytes after the last step and DDP's bucket sizes."""
    monkeypatch.delenv("HCCL_BUFFSIZE", raising=False)
    monkeypatch.delenv("P2P_HCCL_BUFFSIZE", raising=False)
    path = tmp_path / "train.py"

    def run(world_size=2, text=DDP_TRAIN, **options):
        probe = types.ModuleType("ddp_probe")
        probe.options, probe.seen = options, []
        monkeypatch.setitem(sys.modules, "ddp_probe", probe)
        path.write_text(textwrap.dedent(text))
        result = estimate_ranks(str(path), world_size=world_size, runtime_share=0)
        assert [c.figures.estimate.status for c in result.classes] == [0] * world_size
        return result, probe.seen

    return run


#: after a step: the weights, Adam's exp_avg and exp_avg_sq (its step counts are on the CPU)
WEIGHTS_AND_ADAM = 3 * 4 * W
#: the buckets by default: the last weight alone (the first bucket, 1 MiB cap), then the
#: other three (25 MiB cap)
BUCKETS = "1048576, 3145728"


def test_ddp_trains_with_gradients_and_buckets_on_each_rank(run):
    result, seen = run()
    # each gradient its own tensor, and its copy in a bucket
    assert seen == [(WEIGHTS_AND_ADAM + 4 * W + 4 * W, BUCKETS)] * 2
    for rank in (0, 1):
        f = result.rank(rank)
        # the world group's communicator, made at DDP's first broadcast
        assert [(c.group, c.size) for c in f.communicators] == [("0", 400 * MiB)]
        assert f.hccl == 400 * MiB
        # at the peak of allocated, the last backward's last matmul (the first layer's weight
        # gradient) holds its workspace before its gradient exists: three of the four
        # gradients, beside the buckets, which count as gradients
        at_peak = f.estimate.at_peak
        assert at_peak["parameters"] == 4 * block(W)
        assert at_peak["gradients"] == 3 * block(W) + block(W) + block(3 * W)
        assert at_peak["workspace"] > 0
        assert sum(at_peak.values()) == f.estimate.peak_allocated


def test_gradient_as_bucket_view_the_buckets_are_the_gradients(run):
    result, seen = run(gradient_as_bucket_view=True)
    assert seen == [(WEIGHTS_AND_ADAM + 4 * W, BUCKETS)] * 2
    assert result.rank(0).estimate.at_peak["gradients"] == block(W) + block(3 * W)


def test_bucket_cap_mb_changes_the_number_of_buckets_not_their_bytes(run):
    # 1 MB cap (the first bucket as large): one weight per bucket
    _, seen = run(bucket_cap_mb=1)
    assert seen == [(WEIGHTS_AND_ADAM + 8 * W, ", ".join([str(W)] * 4))] * 2
    # a cap given: the first bucket takes it too (_BucketCapacityConfig.create)
    _, seen = run(bucket_cap_mb=100)
    assert seen == [(WEIGHTS_AND_ADAM + 8 * W, str(4 * W))] * 2


def test_world_sizes_2_and_8_give_the_same_rank(run):
    two, _ = run(2)
    eight, _ = run(8)
    figures = {(f.estimate.peak_allocated, f.estimate.peak_reserved, f.hccl, f.total,
                tuple(sorted(f.estimate.at_peak.items())))
               for f in [c.figures for c in two.classes + eight.classes]}
    assert len(figures) == 1


def test_no_sync_and_broadcast_buffers(run):
    text = DDP_TRAIN.replace("for _ in range(4)]", "for _ in range(4)], torch.nn.BatchNorm1d(512)")
    text = text.replace("        ddp(torch.randn(32, 512).npu()).sum().backward()\n", """\
        with ddp.no_sync():
            ddp(torch.randn(32, 512).npu()).sum().backward()
        ddp(torch.randn(32, 512).npu()).sum().backward()
""")
    _, seen = run(text=text, gradient_as_bucket_view=True)
    # BatchNorm: weight and bias with their Adam states, running mean and var, the count
    bn = 3 * 2 * 512 * 4 + 2 * 512 * 4 + 8
    # its two parameters join the first bucket (1 MiB cap) with the last weight
    assert seen == [(WEIGHTS_AND_ADAM + bn + 4 * W + 2 * 512 * 4,
                     f"{W + 2 * 512 * 4}, {3 * W}")] * 2


def test_find_unused_parameters_runs_as_every_parameter_used_and_says_so(run):
    result, seen = run(find_unused_parameters=True)
    assert seen == [(WEIGHTS_AND_ADAM + 8 * W, BUCKETS)] * 2
    note = ("note: DistributedDataParallel's find_unused_parameters=True ran as False (the "
            "same device memory)")
    assert str(result).count(note) == 2


def test_a_communication_hook_gets_the_all_reduced_bucket(run):
    # default_hooks reads the future's tensors (fut.value()[0]): the fake group's is None
    text = DDP_TRAIN.replace("    opt = torch.optim", """\
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    opt = torch.optim""")
    _, seen = run(text=text)
    assert seen == [(WEIGHTS_AND_ADAM + 8 * W, BUCKETS)] * 2


def test_a_parameter_left_unused_runs_with_find_unused_parameters(run):
    # the forward skips the last layer: its bucket (the first, 1 MiB) is made all the same
    text = DDP_TRAIN.replace("model = torch.nn.Sequential(", """\
class FirstThree(torch.nn.Sequential):
        def forward(self, x):
            for layer in list(self)[:3]:
                x = layer(x)
            return x
    model = FirstThree(""")
    _, seen = run(text=text, find_unused_parameters=True)
    # no gradient, no Adam state for the last weight; its bucket is there
    assert seen == [(4 * W + 3 * 2 * W + 3 * W + 4 * W, BUCKETS)] * 2
