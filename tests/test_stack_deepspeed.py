"""DeepSpeed's own training loop (``deepspeed.initialize``, the engine's forward, backward
and step, its ZeRO optimizers) under ``estimate_ranks``, with DeepSpeed's own published ZeRO
configurations, on 1, 2 and 8 ranks; each rank's model states checked by hand against
ZeRO's arithmetic and DeepSpeed's own estimators.

The configurations' ``zero_optimization`` blocks are DeepSpeed's, as its ZeRO tutorial
publishes them (deepspeedai/DeepSpeed, ``docs/_tutorials/zero.md``, commit
0101896ac3683a474a1d8085ae1a37c920f642bf: "Training a 1.5B Parameter GPT-2 model" for ZeRO-1,
"Training a 10B Parameter GPT-2 model" for ZeRO-2, "Offloading to CPU and NVMe with
ZeRO-Infinity" for ZeRO-3 with offload); the keys around
them (micro-batch, AdamW, bf16; for ZeRO-1 the getting-started guide's Adam and fp16) are
DeepSpeed's configuration names
(``docs/_pages/config-json.md``, commit da9b77384aaccfd261c89558b65310d29eb8438b), set for a
tiny run. The training script is written the way DeepSpeed's getting-started guide writes one
(``docs/_tutorials/getting-started.md``, commit a0186adf5de980486759a4aa429e10f28b6f79aa:
``deepspeed.initialize(args=...)``, the engine's forward, ``backward`` and ``step``, started
with ``--deepspeed --deepspeed_config ds_config.json``, arguments DeepSpeed's
``add_config_arguments`` adds).

The model: an embedding (4096 x 1024), a 1024 x 1024 linear and a 1024 x 4096 head, no
biases: P = 2 x 4096 x 1024 + 1024 x 1024 = 9,437,184 parameters (9 Mi), which every world
size here divides without DeepSpeed's alignment padding. Each device block of the caching
allocator is the request + 32 bytes rounded up to 512 (``block``); every model-state tensor
here is a multiple of 512 bytes and large enough that its segment's rest is split off, so
its block is its bytes + 512.
"""

import json
import os
import sys
import weakref

import pytest

torch = pytest.importorskip("torch", reason="torchsim runs scripts on torch's fake tensors; "
                                           "install the torch extra: pip install -e '.[torch]'")
deepspeed = pytest.importorskip("deepspeed", reason="DeepSpeed comes with the stacks extra: "
                                                   "pip install -e '.[stacks]'")

from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs  # noqa: E402
from deepspeed.runtime.zero.stage_1_and_2 import (  # noqa: E402
    estimate_zero2_model_states_mem_needs,
)

from ascend_memsim.torchsim import estimate  # noqa: E402
from ascend_memsim.torchsim.ranks import estimate_ranks  # noqa: E402
from ascend_memsim.torchsim.stacks.deepspeed import (  # noqa: E402
    CANN_ENVIRONMENT,
    HOST_SETTING,
)

VOCAB, HIDDEN = 4096, 1024
P = 2 * VOCAB * HIDDEN + HIDDEN * HIDDEN
LARGEST_LAYER = VOCAB * HIDDEN
WORLD_SIZES = (1, 2, 8)

SCRIPT = '''\
import argparse
import json
import os

import deepspeed
import torch
import torch_npu  # noqa: F401

VOCAB, HIDDEN, SEQ = 4096, 1024, 64


class TinyLM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, HIDDEN)
        self.mlp = torch.nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.head = torch.nn.Linear(HIDDEN, VOCAB, bias=False)

    def forward(self, ids):
        logits = self.head(torch.relu(self.mlp(self.embed(ids))))
        return torch.nn.functional.cross_entropy(logits.view(-1, VOCAB).float(), ids.view(-1))


parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", type=int, default=-1)
parser.add_argument("--out", default=None)
parser = deepspeed.add_config_arguments(parser)
args = parser.parse_args()
with open(args.deepspeed_config) as f:
    stage = json.load(f)["zero_optimization"]["stage"]
with deepspeed.zero.Init(config_dict_or_path=args.deepspeed_config, enabled=stage == 3):
    model = TinyLM()
engine, _, _, _ = deepspeed.initialize(args=args, model=model,
                                       model_parameters=model.parameters())
after = []
for _ in range(2):
    ids = torch.randint(0, VOCAB, (engine.train_micro_batch_size_per_gpu(), SEQ),
                        device=engine.device)
    engine.backward(engine(ids))
    engine.step()
    after.append(torch.npu.memory_allocated())
with open(os.path.join(args.out, "rank" + os.environ["RANK"] + ".json"), "w") as f:
    json.dump(after, f)
'''

#: around DeepSpeed's zero_optimization blocks: a micro-batch of 2, AdamW, bf16
TRAINING = {"train_micro_batch_size_per_gpu": 2,
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
            "bf16": {"enabled": True}}
#: docs/_tutorials/zero.md, "Training a 1.5B Parameter GPT-2 model"
ZERO1 = {"stage": 1, "reduce_bucket_size": 5e8}
#: docs/_tutorials/zero.md, "Training a 10B Parameter GPT-2 model"
ZERO2 = {"stage": 2, "contiguous_gradients": True, "overlap_comm": True,
         "reduce_scatter": True, "reduce_bucket_size": 5e8, "allgather_bucket_size": 5e8}
#: docs/_tutorials/zero.md, "Offloading to CPU and NVMe with ZeRO-Infinity"
ZERO3_OFFLOAD = {"stage": 3, "contiguous_gradients": True,
                 "stage3_max_live_parameters": 1e9, "stage3_max_reuse_distance": 1e9,
                 "stage3_prefetch_bucket_size": 1e7, "stage3_param_persistence_threshold": 1e5,
                 "reduce_bucket_size": 1e7, "sub_group_size": 1e9,
                 "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}}
#: the same block without its two offload keys: ZeRO-3 on the device alone
ZERO3 = {k: v for k, v in ZERO3_OFFLOAD.items() if not k.startswith("offload")}
CONFIGS = {"zero1": ZERO1, "zero2": ZERO2, "zero3": ZERO3, "zero3_offload": ZERO3_OFFLOAD}
#: the getting-started guide's fp16 with Adam, for ZeRO-1
FP16 = {"train_micro_batch_size_per_gpu": 2,
        "optimizer": {"type": "Adam", "params": {"lr": 0.00015}}, "fp16": {"enabled": True}}


def block(n):
    """The caching allocator's block of an n-byte request (n + 32, in 512-byte steps)."""
    return (n + 32 + 511) // 512 * 512


#: a reduce bucket: reduce_bucket_size bf16 elements. 5e8 x 2 = 1e9 bytes: its segment is
#: rounded up to 2 MiB (477 x 2 MiB = 1,000,341,504) and the 340,992 bytes left, under 1 MiB,
#: are not split off, so the block is the segment
BUCKET2 = 477 * 2 * 1024 * 1024
#: 1e7 x 2 = 2e7 bytes: 10 x 2 MiB = 20,971,520, the 971,264 left not split off
BUCKET3 = 10 * 2 * 1024 * 1024
#: DeepSpeed's bookkeeping alive after a step (the script's batch of 2 x 64 int64, FusedAdam's
#: overflow flag, the step's global gradient norm, ...): a few small blocks
BOOKKEEPING = 4096

_RUNS = {}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """(config name, world size) -> (the RanksResult, each rank's allocated bytes after each
    step); each run once for the module."""
    def get(name, world_size):
        key = (name, world_size)
        if key not in _RUNS:
            folder = tmp_path_factory.mktemp(f"{name}_{world_size}")
            script = folder / "train.py"
            script.write_text(SCRIPT)
            config = folder / "ds_config.json"
            around = FP16 if name == "zero1" else TRAINING
            config.write_text(json.dumps({**around, "zero_optimization": CONFIGS[name]}))
            result = estimate_ranks(str(script), ["--deepspeed", "--deepspeed_config",
                                                  str(config), "--out", str(folder)],
                                    world_size=world_size, product="A2")
            assert result.fits, result
            after = {r: json.loads((folder / f"rank{r}.json").read_text())
                     for r in range(world_size)}
            _RUNS[key] = result, after
        return _RUNS[key]
    return get


def test_deepspeed_chooses_its_npu_accelerator_with_cann_set_for_the_run(tmp_path, capfd):
    # deepspeed is imported here already, with its CPU accelerator: the run gets its own
    script = tmp_path / "probe.py"
    script.write_text(
        "import os\n"
        "import deepspeed\n"
        "from deepspeed.accelerator import get_accelerator\n"
        "accelerator = get_accelerator()\n"
        "builder = accelerator.create_op_builder('CPUAdamBuilder')\n"
        "print('probe', type(accelerator).__name__, accelerator.device_name(0),\n"
        "      accelerator.communication_backend_name(), os.environ['ASCEND_HOME_PATH'],\n"
        "      type(builder).__module__)\n")
    ours = sys.modules["deepspeed"]
    before = {name: os.environ.get(name) for name in CANN_ENVIRONMENT}
    result = estimate(str(script), product="A2")
    assert result.status == 0, result
    printed = [line for line in capfd.readouterr().out.splitlines() if line.startswith("probe")]
    assert printed == ["probe NPU_Accelerator npu:0 hccl /usr/local/Ascend/ascend-toolkit/latest "
                       "deepspeed.ops.op_builder.npu.cpu_adam"]
    # after the run: this process's deepspeed and environment as they were
    assert sys.modules["deepspeed"] is ours
    assert {name: os.environ.get(name) for name in CANN_ENVIRONMENT} == before
    assert type(ours.accelerator.get_accelerator()).__name__ != "NPU_Accelerator"


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_zero2_published_config_each_rank(run, world_size):
    result, after = run("zero2", world_size)
    n = world_size
    for r in range(n):
        figures = result.rank(r)
        kinds = figures.kinds()
        # ZeRO-2 keeps the bf16 weights whole on every rank (one flat buffer, 2 bytes a
        # parameter) and partitions the fp32 weights and Adam's two moments (3 x 4 bytes a
        # parameter over N)
        assert kinds["parameters"] == block(2 * P)
        assert kinds["optimizer"] == 3 * block(4 * P // n)
        # at the peak (the second step's backward): both reduce buckets (overlap_comm) and
        # the first step's global gradient norm (an fp32 scalar)
        assert kinds["gradients"] == 2 * BUCKET2 + block(4)
        # after each step: the weights, the optimizer states and the bookkeeping
        for allocated in after[r]:
            assert 0 < allocated - block(2 * P) - 3 * block(4 * P // n) <= BOOKKEEPING
        settings = figures.estimate.stack_settings
        assert settings["zero_optimization.stage"] == "2"
        assert settings["reduce_bucket_size"] == settings["allgather_bucket_size"] \
            == "500,000,000"
        assert settings["overlap_comm"] == "true"
    # DeepSpeed's estimator (runtime/zero/stage_1_and_2.py,
    # estimate_zero2_model_states_mem_needs): 2P + 18P/N on the device, "2 = params_16bit,
    # 18 = 2_grads_16bit + 4_grads_32bit + 4_params_32bit + 8_optimizer_states_32bit"
    _, gpu = estimate_zero2_model_states_mem_needs(P, num_gpus_per_node=n, cpu_offload=False)
    assert gpu == 2 * P + 18 * P // n
    # what stays between steps is 2P + 12P/N: the 16- and 32-bit gradient partitions (6
    # bytes a parameter over N) live from the backward to the step only
    states = block(2 * P) + 3 * block(4 * P // n) - 4 * 512      # 512 a block
    assert states == gpu - 6 * P // n


def test_zero1_published_config_with_fp16(run):
    result, after = run("zero1", 2)
    for r in range(2):
        kinds = result.rank(r).kinds()
        # ZeRO-1 partitions the optimizer states alone: fp16 weights whole, fp32 weights and
        # Adam's moments over N
        assert kinds["parameters"] == block(2 * P)
        assert kinds["optimizer"] == 3 * block(4 * P // 2)
        # at the peak: the one reduce bucket (no overlap_comm: ZeRO-1's default), 5e8 fp16
        # elements, a 4096 x 1024 layer's fp16 gradient not yet reduced into it, and the
        # first step's global gradient norm (an fp32 scalar)
        assert kinds["gradients"] == BUCKET2 + block(2 * LARGEST_LAYER) + block(4)
        for allocated in after[r]:
            assert 0 < allocated - block(2 * P) - 3 * block(4 * P // 2) <= BOOKKEEPING
        settings = result.rank(r).estimate.stack_settings
        assert (settings["zero_optimization.stage"], settings["precision"],
                settings["overlap_comm"]) == ("1", "fp16", "false")


def test_zero2_model_states_fall_with_ranks_and_activations_do_not(run):
    kinds = {n: run("zero2", n)[0].rank(0).kinds() for n in WORLD_SIZES}
    for n in WORLD_SIZES:
        # 12 bytes a parameter over N, + 512 a block for each of the three
        assert kinds[n]["optimizer"] - 3 * 512 == 12 * P // n
        assert kinds[n]["parameters"] == kinds[1]["parameters"]
        assert kinds[n]["activations"] >= kinds[1]["activations"] > 0


@pytest.mark.parametrize("world_size", (2, 8))
def test_zero3_keeps_16_bytes_a_parameter_over_n(run, world_size):
    # (on one rank ZeRO-3 partitions nothing: the published configurations run there)
    result, after = run("zero3", world_size)
    n = world_size
    # ZeRO's mixed-precision Adam: bf16 weights (2) and gradients (2; DeepSpeed keeps the
    # gradient partition in the training dtype), fp32 weights (4) and Adam's two moments
    # (8): 16 bytes a parameter, each over N, in five flat partitions
    states = 2 * block(2 * P // n) + 3 * block(4 * P // n)
    for r in range(n):
        assert result.rank(r).estimate.stack_settings["zero_optimization.stage"] == "3"
        assert result.rank(r).kinds()["optimizer"] == 3 * block(4 * P // n)
        # after a step: the model states, the reduce bucket (reduce_bucket_size 1e7 bf16
        # elements) and the bookkeeping
        for allocated in after[r]:
            assert 0 < allocated - states - BUCKET3 <= BOOKKEEPING
    assert states - 5 * 512 == 16 * P // n
    # DeepSpeed's estimator (runtime/zero/stage3.py, estimate_zero3_model_states_mem_needs,
    # no offload): the largest layer's 16-bit weights and gradients (4 bytes a parameter)
    # and 18 bytes a parameter over N, counting 4-byte gradients where bf16 training keeps
    # a 2-byte partition
    _, gpu, largest = estimate_zero3_model_states_mem_needs(
        P, LARGEST_LAYER, num_gpus_per_node=n, cpu_offload=False, cpu_offload_params=False)
    assert largest == 4 * LARGEST_LAYER
    assert gpu == largest + 18 * P // n
    assert states - 5 * 512 == gpu - largest - 2 * P // n


def test_zero3_model_states_fall_as_16_bytes_a_parameter(run):
    after = {n: run("zero3", n)[1][0][-1] for n in (2, 8)}
    # from 2 to 8 ranks each rank gives up 16P(1/2 - 1/8) bytes, to the byte
    assert after[2] - after[8] == 16 * P // 2 - 16 * P // 8


def test_zero3_leaves_torchs_classes_as_they_were(run):
    # zero.Init's exit leaves Module.__init_subclass__ set to a bound method (DeepSpeed's
    # partition_parameters.py, unpatch_init_and_builtins); the run puts torch's classes back
    run("zero3", 2)
    assert "__init_subclass__" not in vars(torch.nn.Module)
    assert "__new__" not in vars(torch.Tensor)

    class Named:
        def __init_subclass__(cls):
            cls.named = cls.__name__

    class Layer(torch.nn.Module, Named):
        pass

    # a class made after the run chains __init_subclass__ past Module, as in a new process
    assert Layer.named == "Layer"


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_zero3_published_offload_config_holds_model_states_on_the_host(run, world_size):
    result, after = run("zero3_offload", world_size)
    n = world_size
    for r in range(n):
        figures = result.rank(r)
        settings = figures.estimate.stack_settings
        assert settings["offload_optimizer"] == settings["offload_param"] == "cpu (pin_memory)"
        # the host holds the 16 bytes a parameter over N: bf16 weights and gradients, fp32
        # weights, Adam's two moments
        assert settings[HOST_SETTING].startswith(f"{16 * P // n:,} bytes ")
        # pinned (offload's pin_memory is on by default), in the host caching allocator's
        # power-of-two blocks
        assert figures.estimate.host_pinned_peak >= 16 * P // n
        # and none of it on the device: no optimizer state, the same bytes after each step
        # whatever N (the reduce bucket and the bookkeeping)
        assert figures.kinds()["optimizer"] == 0
        for allocated in after[r]:
            assert 0 < allocated - BUCKET3 <= BOOKKEEPING
        # DeepSpeed's CPU Adam (a C++ op it builds at first use) is answered, and says so
        assert any("cpu_adam op" in note for note in figures.estimate.notes)
    # DeepSpeed's estimator, offload of both and zero.Init (the script's): the largest
    # layer's 16-bit weights and gradients on the device; on the node's host 18 bytes a
    # parameter (its gradients at 4 bytes) with a buffer factor of 1.5
    cpu, gpu, largest = estimate_zero3_model_states_mem_needs(
        P, LARGEST_LAYER, num_gpus_per_node=n, cpu_offload=True, cpu_offload_params=True,
        zero_init=True)
    assert gpu == largest == 4 * LARGEST_LAYER
    assert cpu == int(P * 18 * 1.5)
    # the node's ranks hold 16P together; with 4-byte gradients, 18P
    assert n * (16 * P // n) + 2 * P == cpu / 1.5


def test_an_op_deepspeed_would_build_stops_the_run_at_its_line(tmp_path):
    # NVMe offload needs DeepSpeed's C++ ops (its pinned buffers, async I/O), built at first
    # use with CANN's toolkit on the machine
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    nvme = {**ZERO3_OFFLOAD, "offload_optimizer": {"device": "nvme",
                                                   "nvme_path": str(tmp_path / "nvme")}}
    config = tmp_path / "ds_config.json"
    config.write_text(json.dumps({**TRAINING, "zero_optimization": nvme}))
    result = estimate_ranks(str(script), ["--deepspeed", "--deepspeed_config", str(config),
                                          "--out", str(tmp_path)], world_size=1, product="A2")
    stopped = result.rank(0).estimate.stopped
    assert not result.fits and result.rank(0).verdict() == "unknown"
    assert stopped.startswith("DeepSpeed builds its C++ op ")
    assert f"called from {script}:" in stopped


def test_a_fake_parameter_held_by_a_weak_reference_moves_to_the_device():
    # DeepSpeed's engine names each parameter in a map that holds a weakref.finalize on it
    # (deepspeed/utils/debug.py, WeakIdNameMap), then moves the module; a parameter over
    # 1 MiB is fake on the host, which torch moves by swap_tensors
    def main():
        model = torch.nn.Embedding(32768, 256)
        weight = model.weight
        weakref.finalize(weight, lambda: None)
        model.to("npu")
        assert model.weight is weight and weight.device.type == "npu"
        return 0

    result = estimate(main, product="A2")
    assert result.status == 0
    # the weight, 32768 x 256 fp32 (32 MiB), on the device
    assert result.peak_allocated == block(32768 * 256 * 4)


@pytest.mark.parametrize("adamw", [True, False])
def test_the_answered_cpu_adam_op_steps_as_adam_does(adamw):
    # DeepSpeed's cpu_adam op (csrc/adam/cpu_adam_impl.cpp) on real host tensors: the same
    # update as torch's Adam / AdamW, in place
    from ascend_memsim.torchsim.stacks.deepspeed import _CpuAdam

    torch.manual_seed(0)
    ours = torch.randn(64)
    reference = torch.nn.Parameter(ours.clone())
    m, v = torch.zeros(64), torch.zeros(64)
    kind = torch.optim.AdamW if adamw else torch.optim.Adam
    optimizer = kind([reference], lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1)
    op = _CpuAdam()
    op.create_adam(0, 1e-2, 0.9, 0.999, 1e-8, 0.1, adamw, False)
    for step in (1, 2, 3):
        grad = torch.randn(64)
        reference.grad = grad.clone()
        optimizer.step()
        assert op.adam_update(0, step, 1e-2, 0.9, 0.999, 1e-8, 0.1, True, ours, grad, m, v) == 0
    torch.testing.assert_close(ours, reference.detach())
