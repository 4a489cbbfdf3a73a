"""LLaMA-Factory's own entry point under ``estimate`` and ``estimate_ranks``: the script
``llamafactory-cli train`` runs on one card, and each rank runs under torchrun
(``llamafactory/launcher.py`` calling ``llamafactory.train.tuner.run_exp``), driven by
LLaMA-Factory's example configs for LoRA and full-parameter SFT, with a tiny model and a
synthetic dataset written to the test's folder (no hub, no network).

The configs are LLaMA-Factory's, copied to ``tests/data/llamafactory/`` as released
(hiyouga/LLaMA-Factory, tag v0.9.5, commit 7af909522a951e3ad9f022ea6f88b6755257eaa5, the
installed release; the package does not ship its examples):
``examples/train_lora/qwen3_lora_sft.yaml`` (the ``llama3_lora_sft.yaml`` of earlier
releases, renamed in commit 95ac3f2373b8), ``examples/train_full/qwen3_full_sft.yaml`` and
the DeepSpeed config it names, ``examples/deepspeed/ds_z3_config.json``. Only the model, the
dataset, the output folder and the step count are changed (:func:`config`); the full SFT
example runs with its ZeRO-3 config and, its ``deepspeed`` key left out, data-parallel.

The figures are the stacks' own arithmetic, by hand: each tensor is a block of torch_npu's
caching allocator (the request + 32 bytes, rounded up to 512: ``round_size``); the model is
the example's family (Qwen3, the weights tied as Qwen3-4B ties them) cut to one layer.
"""

import json
import os

import pytest

torch = pytest.importorskip("torch", reason="torchsim runs scripts on torch's fake tensors; "
                                           "install the torch extra: pip install -e '.[torch]'")
pytest.importorskip("llamafactory", reason="LLaMA-Factory is in the stacks extra: "
                                           "pip install -e '.[stacks]'")
yaml = pytest.importorskip("yaml", reason="LLaMA-Factory's configs are YAML")

from ascend_memsim.torchsim import estimate, estimate_ranks  # noqa: E402

#: LLaMA-Factory's examples at v0.9.5, as released: examples/train_lora/qwen3_lora_sft.yaml and
#: examples/train_full/qwen3_full_sft.yaml (benchmarks/bench_stacks.py runs the first too)
EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "llamafactory")
with open(os.path.join(EXAMPLES, "qwen3_lora_sft.yaml"), encoding="utf-8") as f:
    LORA_SFT = f.read()
with open(os.path.join(EXAMPLES, "qwen3_full_sft.yaml"), encoding="utf-8") as f:
    FULL_SFT = f.read()


# the tiny model: Qwen3's shapes, one layer
VOCAB, HIDDEN, FFN, HEADS, KV_HEADS, HEAD_DIM, LAYERS = 64, 64, 128, 4, 2, 16, 1
#: two steps: the second runs with every state of the first held (AdamW's states are made
#: at the first step, so the first step's peak has none); synthetic rows enough for 16 ranks
#: x 8 micro-batches x 2 steps
STEPS, ROWS = 2, 256


def block(nbytes):
    """A storage's block on A2: the request + 32 bytes, in 512-byte steps (``round_size``)."""
    return -(-(nbytes + 32) // 512) * 512


def blocks(shapes, itemsize):
    return sum(block(numel([shape]) * itemsize) for shape in shapes)


#: (out, in) of the linear layers of a Qwen3 layer: q, k, v, o, gate, up, down
LINEARS = [(HEADS * HEAD_DIM, HIDDEN), (KV_HEADS * HEAD_DIM, HIDDEN),
           (KV_HEADS * HEAD_DIM, HIDDEN), (HIDDEN, HEADS * HEAD_DIM),
           (FFN, HIDDEN), (FFN, HIDDEN), (HIDDEN, FFN)]
#: every weight, once: the embedding (the head is tied to it), per layer the linears, two
#: RMSNorms and q_norm, k_norm, then the final norm
WEIGHTS = [(VOCAB, HIDDEN)] + (LINEARS + [(HIDDEN,), (HIDDEN,), (HEAD_DIM,), (HEAD_DIM,)]) \
    * LAYERS + [(HIDDEN,)]
#: the rotary embedding's buffers (inv_freq and original_inv_freq, float32, HEAD_DIM / 2):
#: moved with the model, counted with the parameters
BUFFERS = 2 * block(HEAD_DIM // 2 * 4)
#: LoRA rank 8 on every linear layer (lora_target: all): A is (8, in), B is (out, 8)
RANK = 8
ADAPTERS = [(RANK, i) for _, i in LINEARS] * LAYERS + [(o, RANK) for o, _ in LINEARS] * LAYERS


def numel(shapes):
    total = 0
    for shape in shapes:
        n = 1
        for d in shape:
            n *= d
        total += n
    return total


def adamw_states(shapes):
    """torch's fused AdamW (transformers' default optim, adamw_torch_fused): exp_avg and
    exp_avg_sq in float32 per trained tensor, and its step, a float32 scalar on the
    parameter's device when fused (``torch/optim/adam.py``, ``Adam._init_group``)."""
    return 2 * blocks(shapes, 4) + len(shapes) * block(4)


def ddp_buckets(nbytes):
    """DDP's gradient buckets for ``nbytes`` of float32 gradients: one bucket while they fit
    in the first bucket's 1 MiB (``dist._DEFAULT_FIRST_BUCKET_BYTES``)."""
    assert nbytes <= 1 << 20
    return block(nbytes)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """The tiny model (random weights, bfloat16 as the example's checkpoint, with a word-level
    tokenizer holding Qwen's chat tokens) and a synthetic Alpaca-format dataset registered in
    a dataset_info.json."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

    root = tmp_path_factory.mktemp("llamafactory")
    words = ["alpha", "beta", "gamma", "delta", "say", "the", "word", "user", "assistant"]
    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "[UNK]"]
    word_level = Tokenizer(models.WordLevel({w: i for i, w in enumerate(special + words)},
                                            unk_token="[UNK]"))
    word_level.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=word_level, eos_token="<|endoftext|>",
                            unk_token="[UNK]",
                            additional_special_tokens=["<|im_start|>", "<|im_end|>"]
                            ).save_pretrained(root / "model")
    config = Qwen3Config(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FFN,
                         num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                         num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM,
                         max_position_embeddings=256, tie_word_embeddings=True)
    torch.manual_seed(0)
    Qwen3ForCausalLM(config).to(torch.bfloat16).save_pretrained(root / "model")
    data = root / "data"
    data.mkdir()
    rows = [{"instruction": f"say the word {words[i % 4]}", "input": "",
             "output": f"{words[i % 4]} {words[(i + 1) % 4]}"} for i in range(ROWS)]
    (data / "synthetic.json").write_text(json.dumps(rows))
    (data / "dataset_info.json").write_text(json.dumps({"synthetic": {
        "file_name": "synthetic.json"}}))
    return root


@pytest.fixture
def config(folder, tmp_path, monkeypatch):
    """Write ``example`` with the test's model, dataset, output folder and step count (and
    ``drop``'s keys left out); its path."""
    import datasets

    # the datasets' cache in the test's folder; no hub
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(folder / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    def config(example, drop=()):
        keys = yaml.safe_load(example)
        for key in drop:
            del keys[key]
        keys.update(model_name_or_path=str(folder / "model"), dataset="synthetic",
                    dataset_dir=str(folder / "data"), output_dir=str(tmp_path / "out"),
                    max_steps=STEPS)
        path = tmp_path / "config.yaml"
        path.write_text(yaml.safe_dump(keys))
        return str(path)

    return config


def launcher():
    """``llamafactory/launcher.py``: what ``llamafactory-cli train`` runs on one card and
    what torchrun runs on each rank (its ``__main__`` calls ``run_exp()``)."""
    import importlib.util

    spec = importlib.util.find_spec("llamafactory")
    return os.path.join(spec.submodule_search_locations[0], "launcher.py")


def test_lora_sft_trains_the_adapters_only(config):
    result = estimate(launcher(), [config(LORA_SFT)], product="A2")
    assert result.status == 0 and result.fits, result
    # PEFT's count (get_nb_trainable_parameters): rank x (in + out) of each linear layer
    trainable = RANK * sum(o + i for o, i in LINEARS) * LAYERS
    assert trainable == 8192
    assert result.stack_settings["PEFT"].endswith(
        f"{trainable:,} of {trainable + numel(WEIGHTS):,} parameters trained")
    assert result.stack_settings["LLaMA-Factory"] == "stage sft, finetuning lora"
    # the frozen weights stay bfloat16; the adapters are upcast to float32
    # (llamafactory/model/adapter.py, "Upcasting trainable params to float32")
    assert result.at_peak["parameters"] == blocks(WEIGHTS, 2) + blocks(ADAPTERS, 4) + BUFFERS
    # gradients and AdamW's states for the adapters only
    assert result.at_peak["gradients"] == blocks(ADAPTERS, 4)
    assert result.at_peak["optimizer state"] == adamw_states(ADAPTERS)
    assert "settings: micro-batch 1; gradient accumulation 8; precision bf16; " \
           "gradient checkpointing on; optimizer adamw_torch_fused" in str(result)


@pytest.mark.parametrize("world_size", [2, 16])
def test_lora_sft_data_parallel_holds_the_model_states_on_each_rank(config, world_size):
    result = estimate_ranks(launcher(), [config(LORA_SFT)], world_size=world_size,
                            product="A2")
    # 2 ranks are each traced; 16 ranks are alike (one group, the world), one traced
    assert len(result.classes) == (2 if world_size == 2 else 1)
    for c in result.classes:
        f = c.figures
        assert f.estimate.status == 0 and f.fits, result
        at_peak = f.estimate.at_peak
        # DDP: each rank the whole model states, and the adapters' gradients once more in
        # DDP's bucket (gradient_as_bucket_view False, the Trainer's default)
        assert at_peak["parameters"] == blocks(WEIGHTS, 2) + blocks(ADAPTERS, 4) + BUFFERS
        assert at_peak["gradients"] == blocks(ADAPTERS, 4) + ddp_buckets(numel(ADAPTERS) * 4)
        assert at_peak["optimizer state"] == adamw_states(ADAPTERS)
        assert f.estimate.stack_settings["data parallel"] == \
            f"{world_size} ranks, DDP buckets 25 MB"
        assert [c.kind for c in f.communicators] == ["group"]
    assert sorted(r for c in result.classes for r in c.ranks) == list(range(world_size))


@pytest.mark.parametrize("world_size", [1, 2, 16])
def test_full_sft_holds_weights_gradients_and_two_adam_states(config, tmp_path, world_size):
    path = config(FULL_SFT, drop=("deepspeed",))
    if world_size == 1:
        results = [estimate(launcher(), [path], product="A2")]
    else:
        ranks = estimate_ranks(launcher(), [path], world_size=world_size, product="A2")
        results = [c.figures.estimate for c in ranks.classes]
    for result in results:
        assert result.status == 0 and result.fits, result
        # every weight trained, upcast to float32 (not pure_bf16): parameters, gradients,
        # AdamW's two states, and DDP's bucket with more than one rank
        weights = blocks(WEIGHTS, 4)
        assert result.at_peak["parameters"] == weights + BUFFERS
        assert result.at_peak["gradients"] == weights + (
            0 if world_size == 1 else ddp_buckets(numel(WEIGHTS) * 4))
        assert result.at_peak["optimizer state"] == adamw_states(WEIGHTS)
        assert result.stack_settings["LLaMA-Factory"] == "stage sft, finetuning full"
    # the model saved at the end (save_pretrained, safetensors): the real file's header and
    # size, its data a hole of zeros (no disk), marked as no weights
    from safetensors import safe_open

    saved = tmp_path / "out" / "model.safetensors"
    with safe_open(str(saved), "pt") as f:
        assert f.metadata()["ascend_memsim"].startswith("written by an ascend-memsim estimate")
        assert sorted(tuple(f.get_slice(k).get_shape()) for k in f.keys()) == sorted(WEIGHTS)
    # float32 (the weights were upcast to train)
    assert saved.stat().st_size > numel(WEIGHTS) * 4 > saved.stat().st_blocks * 512


def zero3_partition(world_size):
    """The elements of every weight ZeRO-3 keeps on one rank: each padded to a multiple of
    the ranks and split (``deepspeed/runtime/zero/partition_parameters.py``,
    ``_padding_size``), flat in one group (``sub_group_size`` 1e9)."""
    return sum(-(-numel([shape]) // world_size) for shape in WEIGHTS)


def test_full_sft_with_its_zero3_config_partitions_the_model_states(config):
    # the example as released: its deepspeed key names examples/deepspeed/ds_z3_config.json
    # (v0.9.5), here beside it; LLaMA-Factory runs DeepSpeed under torchrun only
    # (hparams/parser.py: "Please use `FORCE_TORCHRUN=1` to launch DeepSpeed training"), so
    # one card is torchrun's one process too
    path = config(FULL_SFT)
    with open(path) as f:
        keys = yaml.safe_load(f)
    keys["deepspeed"] = os.path.join(EXAMPLES, "ds_z3_config.json")
    with open(path, "w") as f:
        yaml.safe_dump(keys, f)
    kinds = {}
    for n in (1, 2, 8):
        ranks = estimate_ranks(launcher(), [path], world_size=n, product="A2")
        assert sorted(r for c in ranks.classes for r in c.ranks) == list(range(n))
        for c in ranks.classes:
            assert c.figures.estimate.status == 0 and c.figures.fits, ranks
            assert c.figures.kinds() == ranks.classes[0].figures.kinds()
        settings = ranks.classes[0].figures.estimate.stack_settings
        kinds[n] = ranks.classes[0].figures.kinds()
        # the config's "auto" values, filled by transformers' integration from the model's
        # width (integrations/deepspeed.py, trainer_config_finalize): hidden^2,
        # 0.9 hidden^2, 10 hidden
        assert (settings["zero_optimization.stage"], settings["reduce_bucket_size"],
                settings["stage3_prefetch_bucket_size"],
                settings["stage3_param_persistence_threshold"]) == (
            "3", f"{HIDDEN * HIDDEN:,}", f"{int(0.9 * HIDDEN * HIDDEN):,}", f"{10 * HIDDEN:,}")
        s = zero3_partition(n)
        # the bf16 gradient partition, and the contiguous reduce bucket of reduce_bucket_size
        # bf16 elements (stage3.py, _setup_for_real_optimizer) with the step's gradient norm
        assert kinds[n]["gradients"] == block(2 * s) + block(2 * HIDDEN * HIDDEN) + block(4)
    # the weights: the bf16 partition falls with the ranks, what a layer gathers does not
    # (on one rank the partition is the whole weight and nothing is gathered apart)
    assert kinds[2]["parameters"] - kinds[8]["parameters"] == \
        block(2 * zero3_partition(2)) - block(2 * zero3_partition(8))
    # the optimizer: the fp32 weights and AdamW's two moments of the partition (12 bytes an
    # element), with the same few scalars on every world size
    rest = {n: kinds[n]["optimizer"] - 3 * block(4 * zero3_partition(n)) for n in kinds}
    assert rest[1] == rest[2] == rest[8] <= 5 * 512
    # 16 bytes an element of the partition in all: the model states fall as the ranks
    # grow (the partition is 41,184 / 20,592 / 5,148 elements), the activations do not
    assert [zero3_partition(n) for n in (1, 2, 8)] == [numel(WEIGHTS), 20592, 5148]
    states = {n: kinds[n]["optimizer"] + kinds[n]["gradients"] + kinds[n]["parameters"]
              for n in kinds}
    assert states[1] > states[2] > states[8]
    assert kinds[1]["activations"] == kinds[2]["activations"] == kinds[8]["activations"]
