"""Megatron-core's own GPT training example under ``estimate_ranks``, each rank on its card,
with its local (non-Transformer-Engine) layers: tensor parallel, pipeline parallel, data
parallel and the distributed optimizer, and each rank's model states checked against
Megatron's own arithmetic.

The example is ``examples/run_simple_mcore_train_loop.py`` of NVIDIA/Megatron-LM at tag
``core_v0.16.1`` (commit 55ac7082517c3878ae653c07c09c534b8aed49f6), which the megatron-core
wheel does not ship: :data:`EXAMPLE` is its minimum, written to the test's tmp dir at run
time, changed only where a ``# CHANGED`` comment says why (the NPU; a tiny model; the
parallel sizes, which the example hard-codes to TP 2, PP 1; Megatron's own mock data with
the wheel's tokenizer; 2 steps; its distributed checkpoint save and load left out, see
docs/guide/stack-megatron.md). The distributed optimizer's variant builds its model and
optimizer as Megatron's own trainer does (``megatron/training/training.py``: ``get_model``
wraps a 16-bit model in ``Float16Module``; ``setup_model_and_optimizer`` calls
``get_megatron_optimizer``).

A storage's block on the A2 card is its bytes + 32 rounded up to 512 (:func:`block`); each
figure below is a sum of such blocks, the tensors' sizes from the model's own layer shapes.
"""

import importlib.metadata
import importlib.util
import math
import textwrap

import pytest

torch = pytest.importorskip("torch", reason="torchsim runs scripts on torch's fake tensors; "
                                            "install the torch extra: pip install -e '.[torch]'")


def _megatron_core() -> str | None:
    """Why Megatron-core cannot be tested here, or None. Found without importing it: the run
    imports it, as the example's own process would, after ``transfer_to_npu``."""
    if importlib.util.find_spec("megatron") is None or \
            importlib.util.find_spec("megatron.core") is None:
        return "Megatron-core is not installed: the stacks extra, pip install -e '.[stacks]'"
    version = importlib.metadata.version("megatron-core")
    if tuple(int(x) for x in version.split(".")[:2]) < (0, 16):
        return f"the example's minimum needs Megatron-core >= 0.16, found {version}"
    return None


if _megatron_core() is not None:
    pytest.skip(_megatron_core(), allow_module_level=True)

from ascend_memsim.torchsim import estimate_ranks  # noqa: E402
from ascend_memsim.torchsim.stacks.megatron import JIT_NOTE, TYPE_NOTE  # noqa: E402

#: examples/run_simple_mcore_train_loop.py (NVIDIA/Megatron-LM, core_v0.16.1, 55ac708), its
#: minimum; its checkpoint save and load are left out (docs/guide/stack-megatron.md)
EXAMPLE = '''
import os
import sys
from functools import partial

import torch
import torch_npu  # noqa: F401  # CHANGED: the NPU (Ascend's migration guide, one line)
from torch_npu.contrib import transfer_to_npu  # noqa: F401
from torch.utils.data import DataLoader

from megatron.core import parallel_state
from megatron.core.pipeline_parallel.schedules import get_forward_backward_func
from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
from megatron.core.transformer.transformer_config import TransformerConfig
from megatron.core.models.gpt.gpt_model import GPTModel
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
from megatron.core.datasets.blended_megatron_dataset_builder import (
    BlendedMegatronDatasetBuilder,
)
from megatron.core.datasets.gpt_dataset import GPTDatasetConfig, MockGPTDataset
# CHANGED: megatron.training is not in the megatron-core wheel; its null tokenizer is
from megatron.core.tokenizers.text.libraries.null_tokenizer import NullTokenizer
from megatron.core.distributed import DistributedDataParallel
from megatron.core.distributed import DistributedDataParallelConfig
from megatron.core.distributed.finalize_model_grads import finalize_model_grads

# CHANGED: the parallel sizes from the command line (the example hard-codes TP 2, PP 1)
TP, PP = int(sys.argv[1]), int(sys.argv[2])
CP = 2 if "--context-parallel" in sys.argv else 1
SEQUENCE_PARALLEL = "--sequence-parallel" in sys.argv
# CHANGED: bf16 and the distributed optimizer, as Megatron's own trainer sets them up
DISTRIBUTED_OPTIMIZER = "--distributed-optimizer" in sys.argv
DTYPE = torch.bfloat16 if DISTRIBUTED_OPTIMIZER else torch.float32

_SEQUENCE_LENGTH = 64


def initialize_distributed(tensor_model_parallel_size=1, pipeline_model_parallel_size=1):
    parallel_state.destroy_model_parallel()
    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    torch.distributed.init_process_group(backend="nccl", rank=rank, world_size=world_size)
    parallel_state.initialize_model_parallel(
        tensor_model_parallel_size, pipeline_model_parallel_size,
        context_parallel_size=CP)


def model_provider():
    # CHANGED: a tiny model of 64 hidden (the example's has 12), its parallel settings, and
    # each pipeline stage's own part (pre_process / post_process, as Megatron's trainer)
    transformer_config = TransformerConfig(
        num_layers=2, hidden_size=64, num_attention_heads=4, use_cpu_initialization=True,
        pipeline_dtype=DTYPE, params_dtype=DTYPE, bf16=DISTRIBUTED_OPTIMIZER,
        tensor_model_parallel_size=TP, pipeline_model_parallel_size=PP,
        context_parallel_size=CP, sequence_parallel=SEQUENCE_PARALLEL)
    return GPTModel(config=transformer_config,
                    transformer_layer_spec=get_gpt_layer_local_spec(), vocab_size=128,
                    max_sequence_length=_SEQUENCE_LENGTH,
                    pre_process=parallel_state.is_pipeline_first_stage(),
                    post_process=parallel_state.is_pipeline_last_stage())


def get_train_data_iterator():
    # CHANGED: no compile_helpers() (the wheel ships the helpers compiled, not their
    # Makefile)
    config = GPTDatasetConfig(
        random_seed=0, sequence_length=_SEQUENCE_LENGTH, reset_position_ids=False,
        reset_attention_mask=False, eod_mask_loss=False,
        tokenizer=NullTokenizer(vocab_size=_SEQUENCE_LENGTH),
        mid_level_dataset_surplus=0.005)
    datasets = BlendedMegatronDatasetBuilder(
        MockGPTDataset, [1000, None, None], lambda: True, config).build()
    return iter(DataLoader(datasets[0], batch_size=8, shuffle=True))


def forward_step_func(data_iterator, model):
    def loss_func(loss_mask, output_tensor):
        losses = output_tensor.float()
        loss_mask = loss_mask.view(-1).float()
        loss = torch.sum(losses.view(-1) * loss_mask) / loss_mask.sum()
        return loss, {"lm loss": loss}

    data = next(data_iterator)
    tokens = data["tokens"].to(device)
    attention_mask = data["attention_mask"].to(device)
    position_ids = data["position_ids"].to(device)
    labels = data["labels"].to(device)
    loss_mask = data["loss_mask"].to(device)
    output_tensor = model(tokens, position_ids, attention_mask, labels=labels)
    return output_tensor, partial(loss_func, loss_mask)


if __name__ == "__main__":
    initialize_distributed(tensor_model_parallel_size=TP, pipeline_model_parallel_size=PP)
    model_parallel_cuda_manual_seed(123)

    gpt_model = model_provider()
    device = torch.device("cuda")
    gpt_model.to(device)

    config = gpt_model.config
    if DISTRIBUTED_OPTIMIZER:
        # CHANGED: megatron/training/training.py, get_model: a 16-bit model in Float16Module
        from megatron.core.transformer.module import Float16Module
        gpt_model = Float16Module(config, gpt_model)
    ddp_config = DistributedDataParallelConfig(
        grad_reduce_in_fp32=DISTRIBUTED_OPTIMIZER,
        overlap_grad_reduce=False,
        use_distributed_optimizer=DISTRIBUTED_OPTIMIZER,
    )
    gpt_model = DistributedDataParallel(config=config, ddp_config=ddp_config, module=gpt_model)

    if DISTRIBUTED_OPTIMIZER:
        # CHANGED: megatron/training/training.py, setup_model_and_optimizer
        from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
        optim = get_megatron_optimizer(
            OptimizerConfig(optimizer="adam", lr=1e-4, bf16=True,
                            use_distributed_optimizer=True), [gpt_model])
    else:
        optim = torch.optim.Adam(gpt_model.parameters())

    train_iterator = get_train_data_iterator()
    forward_backward_func = get_forward_backward_func()

    for iteration in range(2):  # CHANGED: 2 steps (the example runs 5)
        optim.zero_grad()
        losses_reduced = forward_backward_func(
            forward_step_func=forward_step_func,
            data_iterator=train_iterator,
            model=gpt_model,
            num_microbatches=1,
            seq_length=_SEQUENCE_LENGTH,
            micro_batch_size=8,
            decoder_seq_length=_SEQUENCE_LENGTH,
            forward_only=False,
        )
        finalize_model_grads([gpt_model])
        optim.step()
        print(f"Iteration {iteration}: Losses reduced: {losses_reduced}")
'''

HIDDEN, FFN, VOCAB, SEQUENCE, LAYERS = 64, 4 * 64, 128, 64, 2


def block(nbytes: int) -> int:
    """A storage's block on A2: + 32, then 512-byte steps."""
    return -(-(nbytes + 32) // 512) * 512


def stage_shapes(tp: int, pp: int, stage: int) -> list[tuple[int, ...]]:
    """The shapes of the parameters a rank of tensor-parallel size ``tp`` builds for pipeline
    ``stage`` of ``pp``, in ``named_parameters()`` order: Megatron's GPT with the local spec
    (``get_gpt_layer_local_spec``: LayerNorm with bias, linear layers with bias,
    ``add_bias_linear`` True), ffn 4 x hidden. Column-parallel layers (``linear_qkv``,
    ``linear_fc1``, the vocabulary-parallel embedding and ``output_layer``) split their
    outputs over TP, row-parallel ones (``linear_proj``, ``linear_fc2``) their inputs, with
    their bias whole (``megatron/core/tensor_parallel/layers.py``); norms and the position
    embeddings are whole on every rank. The embeddings are the first stage's, the final norm
    and the output layer the last stage's (``pre_process`` / ``post_process``); each stage
    builds LAYERS / PP layers (``get_num_layers_to_build``)."""
    h, f, v = HIDDEN, FFN, VOCAB
    layer = [(h,), (h,),                          # input_layernorm weight, bias
             (h, h // tp), (h,),                  # linear_proj (row-parallel)
             (3 * h // tp, h), (3 * h // tp,),    # linear_qkv (column-parallel)
             (h,), (h,),                          # pre_mlp_layernorm
             (f // tp, h), (f // tp,),            # linear_fc1 (column-parallel)
             (h, f // tp), (h,)]                  # linear_fc2 (row-parallel)
    shapes = [(v // tp, h), (SEQUENCE, h)] if stage == 0 else []
    shapes += layer * (LAYERS // pp)
    if stage == pp - 1:
        shapes += [(h,), (h,), (v // tp, h)]     # final_layernorm, output_layer (no bias)
    return shapes


def buffer_layout(shapes: list[tuple[int, ...]], dp: int,
                  distributed_optimizer: bool) -> tuple[list[tuple[int, int]], int]:
    """Each parameter's [start, end) in Megatron's parameter-and-gradient buffer, and the
    buffer's elements: parameters are laid out in reverse order, each starting at a multiple
    of 64 elements under the distributed optimizer, and the bucket (one, as
    ``overlap_grad_reduce`` is off) ends at a multiple of lcm(DP, 128); no padding without it
    (``megatron/core/distributed/param_and_grad_buffer.py``, ``_ParamAndGradBuffer.__init__``:
    ``_pad_start_of_param_if_needed``, ``_pad_end_of_bucket_if_needed``)."""
    at, spans = 0, []
    for shape in reversed(shapes):
        if distributed_optimizer:
            at = -(-at // 64) * 64
        spans.append((at, at + math.prod(shape)))
        at += math.prod(shape)
    if distributed_optimizer:
        unit = math.lcm(dp, 128)
        at = -(-at // unit) * unit
    return spans, at


def optimizer_shard(spans: list[tuple[int, int]], total: int, dp: int,
                    dp_rank: int) -> list[int]:
    """The elements of each parameter in this data-parallel rank's shard of the buffer, the
    DP ranks each owning 1/DP of it (``DistributedOptimizer._build_model_gbuf_range``); a
    parameter outside the shard has no main parameter on this rank."""
    size = total // dp
    low, high = dp_rank * size, (dp_rank + 1) * size
    return [min(end, high) - max(start, low) for start, end in spans
            if min(end, high) > max(start, low)]


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    path = tmp_path_factory.mktemp("megatron") / "run_simple_mcore_train_loop.py"
    path.write_text(textwrap.dedent(EXAMPLE))
    return str(path)


def run(example, world_size, *argv):
    result = estimate_ranks(example, list(argv), world_size=world_size, product="A2",
                            runtime_share=0)
    for c in result.classes:
        assert c.figures.estimate.status == 0, c.figures.failure()
    assert result.fits
    return result


def test_world_size_1_the_example_as_published(example, capfd):
    result = run(example, 1, "1", "1")
    assert capfd.readouterr().out.count("Losses reduced") == 2
    rank = result.rank(0).estimate
    shapes = stage_shapes(1, 1, 0)
    n = sum(math.prod(s) for s in shapes)
    # 2 layers of 12 * 64^2 + 13 * 64 (weights, biases and norms), the embeddings of
    # 128 + 64 positions x 64, the final norm and the 128 x 64 output layer
    assert n == 2 * (12 * 64 * 64 + 13 * 64) + (128 + 64) * 64 + 2 * 64 + 128 * 64 == 120576
    at_peak = rank.at_peak
    # fp32 parameters, each its own storage (built on the CPU, moved by .to(device))
    assert at_peak["parameters"] == sum(block(4 * math.prod(s)) for s in shapes)
    # the main gradients: DistributedDataParallel's one fp32 buffer of every parameter's
    # elements, unpadded without the distributed optimizer (param.main_grad views into it)
    assert at_peak["gradients"] == block(4 * n)
    # torch's Adam, as the example makes it, over the DDP-wrapped parameters: Megatron's DDP
    # adds each gradient into main_grad and sets param.grad to None
    # (distributed_data_parallel.py, _make_backward_post_hook), so Adam finds no gradient
    # and makes no state, here as on the machine
    assert at_peak["optimizer state"] == 0
    settings = rank.stack_settings
    assert (settings["TP"], settings["PP"], settings["DP"]) == ("1", "1 (stage 0)", "1")
    assert settings["distributed optimizer"] == "off"
    assert settings["main gradients"] == "float32"
    assert settings["micro-batches"] == "1 x 8 x 64 tokens (no pipelining)"


def test_world_size_2_tensor_parallel_as_the_example_sets_it(example):
    result = run(example, 2, "2", "1")
    shapes = stage_shapes(2, 1, 0)
    n = sum(math.prod(s) for s in shapes)
    # the whole model is 120576: each rank holds half of every TP-split matrix and vector
    # and a whole copy of the norms, the row-parallel biases and the position embeddings
    whole = 2 * 64 * 4 + 2 * 64 * 2 + 64 * 64 + 2 * 64          # norms, biases, positions
    assert n == (120576 - whole) // 2 + whole == 62784
    for r in (0, 1):
        at_peak = result.rank(r).estimate.at_peak
        assert at_peak["parameters"] == sum(block(4 * math.prod(s)) for s in shapes)
        assert at_peak["gradients"] == block(4 * n)
        assert at_peak["optimizer state"] == 0
        assert result.rank(r).estimate.stack_settings["TP"] == "2"


def distributed_optimizer_states(tp, pp, dp, stage, dp_rank):
    """Megatron's model states of one rank with bf16 parameters, fp32 main gradients and the
    distributed optimizer: the bf16 parameter buffer and the fp32 gradient buffer (each one
    storage of the padded buffer's elements), and, for each parameter's elements in this
    DP rank's shard, three fp32 tensors of their own: the main parameter
    (``shard_model_param.clone().float()``) and Adam's two states."""
    spans, total = buffer_layout(stage_shapes(tp, pp, stage), dp, True)
    shard = optimizer_shard(spans, total, dp, dp_rank)
    return block(2 * total), block(4 * total), sum(3 * block(4 * k) for k in shard), total


def check_against_megatrons_docs(at_peak, n, total, dp, tensors):
    """Megatron's own figure (docs/user-guide/features/dist_optimizer.md, core_v0.16.1: "bf16
    parameters, fp32 gradients: 6 + 12/d" bytes a parameter, d the data-parallel size) holds
    for the unpadded parameters from below, and for the padded buffer, with a block's 512
    bytes more for each of the ``tensors`` storages, from above."""
    held = at_peak["parameters"] + at_peak["gradients"] + at_peak["optimizer state"]
    assert 6 * n + 12 * n // dp <= held <= 6 * total + 12 * total // dp + 512 * tensors


def test_world_size_4_tensor_and_pipeline_parallel_with_the_distributed_optimizer(example):
    result = run(example, 4, "2", "2", "--distributed-optimizer")
    # Megatron's order of ranks (tp fastest, then dp, then pp): ranks 0, 1 are stage 0,
    # ranks 2, 3 stage 1; DP 1, so each rank's optimizer holds its whole stage
    for r, stage in ((0, 0), (1, 0), (2, 1), (3, 1)):
        params, grads, optimizer, total = distributed_optimizer_states(2, 2, 1, stage, 0)
        at_peak = result.rank(r).estimate.at_peak
        assert (at_peak["parameters"], at_peak["gradients"], at_peak["optimizer state"]) == \
            (params, grads, optimizer), r
        shapes = stage_shapes(2, 2, stage)
        check_against_megatrons_docs(at_peak, sum(math.prod(s) for s in shapes), total, 1,
                                     2 + 3 * len(shapes))
        settings = result.rank(r).estimate.stack_settings
        assert settings["PP"] == f"2 (stage {stage})"
        assert settings["distributed optimizer"] == "on"
        assert settings["micro-batches"] == "1 x 8 x 64 tokens (1F1B)"
    # the four ranks hold the model of 120576 parameters once, about 1/(TP x PP) each: the
    # TP-split tensors once between them, the tensors whole on every TP rank (norms,
    # row-parallel biases, positions: 4992) once per TP rank. Stage 0 holds the embeddings
    # (128/2 x 64 + 64 x 64), stage 1 the final norm and the output layer (128/2 x 64 +
    # 2 x 64): the first stage's buffer is the larger
    n0, n1 = (sum(math.prod(s) for s in stage_shapes(2, 2, stage)) for stage in (0, 1))
    assert (n0, n1) == (33376, 29408)
    assert 2 * (n0 + n1) == 120576 + 4992
    assert distributed_optimizer_states(2, 2, 1, 0, 0)[3] == 33408    # 33376 padded
    assert distributed_optimizer_states(2, 2, 1, 1, 0)[3] == 29440    # 29408 padded
    # what ran otherwise than in Megatron-core alone, said in the result (MindSpeed's two
    # changes: the CUDA type names its optimizer checks, the JIT fuser off)
    assert TYPE_NOTE in result.rank(0).estimate.notes
    assert JIT_NOTE in result.rank(0).estimate.notes
    # the pipeline's activations go to the next stage through the pipeline group (ranks 0
    # and 2), its sends and receives batched (batch_p2p_comm): the group's communicator
    assert any(c.ranks == (0, 2) for c in result.rank(0).communicators)


def test_world_size_8_data_tensor_and_pipeline_parallel(example):
    result = run(example, 8, "2", "2", "--distributed-optimizer")
    # rank = tp + 2 * (dp + 2 * pp): the optimizer's states are sharded over the two DP ranks
    for r in range(8):
        stage, dp_rank = r // 4, (r // 2) % 2
        params, grads, optimizer, total = distributed_optimizer_states(2, 2, 2, stage, dp_rank)
        at_peak = result.rank(r).estimate.at_peak
        assert (at_peak["parameters"], at_peak["gradients"], at_peak["optimizer state"]) == \
            (params, grads, optimizer), r
        shapes = stage_shapes(2, 2, stage)
        check_against_megatrons_docs(at_peak, sum(math.prod(s) for s in shapes), total, 2,
                                     2 + 3 * len(shapes))
        assert result.rank(r).estimate.stack_settings["DP"] == "2"
    # the two DP ranks of a stage hold its optimizer states once between them (a parameter
    # the shard boundary cuts in two takes up to a block more for each of its 3 tensors)
    whole = distributed_optimizer_states(2, 2, 1, 0, 0)[2]
    halves = [result.rank(r).estimate.at_peak["optimizer state"] for r in (0, 2)]
    assert halves[0] < whole and halves[1] < whole
    assert whole <= sum(halves) <= whole + 3 * 512


@pytest.mark.parametrize("argv, refusal", [
    (("2", "1", "--sequence-parallel"), "sequence parallel not supported by torch LayerNorm"),
    (("1", "1", "--context-parallel"),
     "Context parallelism is only supported by TEDotProductAttention!"),
])
def test_megatron_itself_refuses_sequence_and_context_parallel_on_its_local_layers(
        example, argv, refusal):
    # without Apex and Transformer Engine, Megatron-core's local spec refuses both when it
    # builds the model (WrappedTorchNorm, DotProductAttention): its own error, as the
    # machine would give it
    with pytest.raises(AssertionError, match=refusal):
        estimate_ranks(example, list(argv), world_size=2, product="A2", runtime_share=0)


# -- what Megatron-core relies on in the stand-in and the ranks, each on its own ------------

def test_the_cards_default_generators_take_a_state_back_after_transfer_to_npu():
    def train():
        import torch_npu  # noqa: F401
        from torch_npu.contrib import transfer_to_npu  # noqa: F401

        # megatron/core/tensor_parallel/random.py, CudaRNGStatesTracker.add then fork
        before = torch.cuda.random.get_rng_state(device="cuda")
        torch.cuda.manual_seed(2718)
        seeded = torch.cuda.get_rng_state()
        torch.cuda.default_generators[torch.cuda.current_device()].set_state(before)
        assert torch.cuda.initial_seed() == int.from_bytes(bytes(before[:8].tolist()), "little")
        torch.cuda.default_generators[torch.cuda.current_device()].set_state(seeded)
        assert torch.cuda.initial_seed() == 2718
        assert len(torch.cuda.default_generators) == torch.cuda.device_count() == 2
        assert seeded.dtype == torch.uint8 and seeded.numel() == 16

    result = estimate_ranks(train, world_size=2, product="A2", runtime_share=0)
    assert [c.figures.estimate.status for c in result.classes] == [0, 0]


def test_a_rank_moves_to_its_own_card_and_gathers_objects_and_scalars():
    def train():
        import os

        import torch.distributed as dist
        import torch_npu  # noqa: F401

        local = int(os.environ["LOCAL_RANK"])
        torch.npu.set_device(local)
        dist.init_process_group("hccl")
        # torch fills a missing index from the device guard, which a Python backend's
        # answers 0: rank 1's model must still land on its own card
        layer = torch.nn.Linear(512, 512).to(torch.device("npu"))
        assert layer.weight.device == torch.device("npu", local)
        assert torch.zeros(4).to("npu").device.index == local
        keys = [None, None]
        dist.all_gather_object(keys, {"group": local})
        assert keys == [{"group": local}, {"group": local}]
        # a list of device scalars made a tensor (Megatron's local multi_tensor_l2norm)
        norms = torch.tensor([torch.ones((), device="npu"), torch.ones((), device="npu") * 2])
        assert norms.tolist() == [1.0, 2.0]
        # the coalesced all-reduce of Megatron's gradient buckets (no Meta kernel in torch)
        grads = [torch.zeros(1024, device="npu"), torch.zeros(256, device="npu")]
        with dist._coalescing_manager(async_ops=False):
            for g in grads:
                dist.all_reduce(g)

    result = estimate_ranks(train, world_size=2, product="A2", runtime_share=0)
    assert [c.figures.estimate.status for c in result.classes] == [0, 0]
    # the weight (1 MiB), on each rank's own card
    for r in (0, 1):
        assert result.rank(r).estimate.peak_allocated >= block(512 * 512 * 4)
    # and torch's own Tensor.to is back after the run
    assert torch.Tensor.to is torch._C.TensorBase.to
