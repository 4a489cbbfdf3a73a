"""TRL's SFT script under ``estimate`` and ``estimate_ranks``: ``trl/scripts/sft.py`` as the
package ships it (TRL 0.24.0), run with the LoRA command of its own docstring, on a tiny model
and a synthetic dataset written to the test's folder (no hub, no network).

The command is the docstring's second one (``--use_peft --lora_r 32 --lora_alpha 16``,
packing, gradient checkpointing, evaluation every 100 steps) with the model, the dataset and
the output folder the test's, two steps (``--max_steps 2``) and no ``--push_to_hub``. The
model is the docstring's family (Qwen2, the embedding tied to the head as Qwen2-0.5B ties
them) cut to one layer; the figures are the stack's own arithmetic, by hand: each tensor is a
block of torch_npu's caching allocator (the request + 32 bytes, rounded up to 512).
"""

import importlib.util
import json
import os

import pytest

torch = pytest.importorskip("torch", reason="torchsim runs scripts on torch's fake tensors; "
                                           "install the torch extra: pip install -e '.[torch]'")
pytest.importorskip("trl", reason="TRL is in the stacks extra: pip install -e '.[stacks]'")
pytest.importorskip("peft", reason="PEFT is in the stacks extra: pip install -e '.[stacks]'")

from ascend_memsim.torchsim import estimate, estimate_ranks  # noqa: E402

# the tiny model: Qwen2's shapes (biases on q, k, v), one layer
VOCAB, HIDDEN, FFN, HEADS, KV_HEADS, LAYERS = 64, 64, 128, 4, 2, 1
HEAD_DIM = HIDDEN // HEADS
#: LoRA as the command asks (--lora_r 32) on PEFT's default targets for Qwen2: q_proj, v_proj
RANK = 32
#: packed sequences of max_length 1024 (SFTConfig's default): one row of 999 words and its
#: EOS each; 16 ranks x 2 per micro-batch x 8 micro-batches x 2 steps
ROWS, WORDS = 512, 999


def block(nbytes):
    """A storage's block on A2: the request + 32 bytes, in 512-byte steps (``round_size``)."""
    return -(-(nbytes + 32) // 512) * 512


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def blocks(shapes, itemsize):
    return sum(block(numel(shape) * itemsize) for shape in shapes)


Q, KV = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
#: every weight, once: the embedding (the head is tied to it), per layer q, k, v with their
#: biases, o, gate, up, down and two RMSNorms, then the final norm
WEIGHTS = [(VOCAB, HIDDEN)] + [(Q, HIDDEN), (Q,), (KV, HIDDEN), (KV,), (KV, HIDDEN), (KV,),
                               (HIDDEN, Q), (FFN, HIDDEN), (FFN, HIDDEN), (HIDDEN, FFN),
                               (HIDDEN,), (HIDDEN,)] * LAYERS + [(HIDDEN,)]
#: the rotary embedding's buffers (inv_freq and original_inv_freq, float32, HEAD_DIM / 2)
BUFFERS = 2 * block(HEAD_DIM // 2 * 4)
#: A is (r, in), B is (out, r), for q_proj and v_proj of each layer
ADAPTERS = [(RANK, HIDDEN), (Q, RANK), (RANK, HIDDEN), (KV, RANK)] * LAYERS


def adamw_states(shapes):
    """torch's fused AdamW (transformers' default optim, adamw_torch_fused): exp_avg and
    exp_avg_sq in float32 per trained tensor, and its step, a float32 scalar on the
    parameter's device when fused (``torch/optim/adam.py``, ``Adam._init_group``)."""
    return 2 * blocks(shapes, 4) + len(shapes) * block(4)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """The tiny model (random weights in bfloat16, with a word-level tokenizer holding the
    EOS the command names) and a dataset folder of train and test JSON lines of text."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    root = tmp_path_factory.mktemp("trl")
    words = ["alpha", "beta", "gamma", "delta", "say", "the", "word", "what", "is", "next"]
    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "[UNK]"]
    word_level = Tokenizer(models.WordLevel({w: i for i, w in enumerate(special + words)},
                                            unk_token="[UNK]"))
    word_level.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=word_level, eos_token="<|endoftext|>",
                            pad_token="<|endoftext|>", unk_token="[UNK]",
                            additional_special_tokens=["<|im_start|>", "<|im_end|>"]
                            ).save_pretrained(root / "model")
    config = Qwen2Config(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FFN,
                         num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                         num_key_value_heads=KV_HEADS, max_position_embeddings=2048,
                         tie_word_embeddings=True)
    torch.manual_seed(0)
    Qwen2ForCausalLM(config).to(torch.bfloat16).save_pretrained(root / "model")
    data = root / "data"
    data.mkdir()
    # (evaluation pads its batches to 8 rows on every rank, accelerate's even_batches: short
    # test rows keep it below the training step)
    for split, rows, length in (("train", ROWS, WORDS), ("test", 2, 12)):
        (data / f"{split}.jsonl").write_text("".join(
            json.dumps({"text": " ".join(words[(i + j) % len(words)] for j in range(length))})
            + "\n" for i in range(rows)))
    return root


@pytest.fixture
def command(folder, tmp_path, monkeypatch):
    """The script and the docstring's LoRA command, with the test's model, dataset and output
    folder, and two steps."""
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(folder / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    script = os.path.join(importlib.util.find_spec("trl").submodule_search_locations[0],
                          "scripts", "sft.py")
    return script, [
        "--model_name_or_path", str(folder / "model"), "--dataset_name", str(folder / "data"),
        "--learning_rate", "2.0e-4", "--num_train_epochs", "1", "--packing",
        "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "8",
        "--gradient_checkpointing", "--eos_token", "<|im_end|>", "--eval_strategy", "steps",
        "--eval_steps", "100", "--use_peft", "--lora_r", "32", "--lora_alpha", "16",
        "--output_dir", str(tmp_path / "out"), "--max_steps", "2"]


def test_sft_with_lora_trains_the_adapters_only(command, tmp_path, capfd):
    result = estimate(*command, product="A2")
    assert result.status == 0 and result.fits, result
    assert "Training completed." in capfd.readouterr().out
    # PEFT's count (get_nb_trainable_parameters): r x (in + out) of q_proj and v_proj; the
    # tied head counted once
    trainable = RANK * ((HIDDEN + Q) + (HIDDEN + KV)) * LAYERS
    assert trainable == 7168
    total = trainable + sum(numel(s) for s in WEIGHTS)
    assert result.stack_settings["PEFT"] == \
        f"LORA r=32 on q_proj,v_proj, {trainable:,} of {total:,} parameters trained"
    assert result.stack_settings["TRL SFT"] == "max_length 1024, packing bfd"
    # the frozen weights in the checkpoint's bfloat16 (the head tied: one tensor); the
    # adapters in float32 (PEFT's autocast_adapter_dtype); gradients and AdamW's states for
    # the adapters only
    assert result.at_peak["parameters"] == blocks(WEIGHTS, 2) + blocks(ADAPTERS, 4) + BUFFERS
    assert result.at_peak["gradients"] == blocks(ADAPTERS, 4)
    assert result.at_peak["optimizer state"] == adamw_states(ADAPTERS)
    # the adapter saved at the end: safetensors' header, its data a hole, marked
    from safetensors import safe_open

    with safe_open(str(tmp_path / "out" / "adapter_model.safetensors"), "pt") as f:
        assert "ascend_memsim" in f.metadata()
        assert len(list(f.keys())) == len(ADAPTERS)


@pytest.mark.parametrize("world_size", [2, 16])
def test_sft_with_lora_data_parallel_holds_the_model_states_on_each_rank(command, world_size):
    result = estimate_ranks(*command, world_size=world_size, product="A2")
    # 2 ranks are each traced; 16 ranks are alike (one group, the world), one traced
    assert len(result.classes) == (2 if world_size == 2 else 1)
    adapters = blocks(ADAPTERS, 4)
    for c in result.classes:
        f = c.figures
        assert f.estimate.status == 0 and f.fits, result
        at_peak = f.estimate.at_peak
        # DDP: each rank the whole model states, and the adapters' gradients once more in
        # one bucket of DDP (under its first bucket's 1 MiB)
        assert at_peak["parameters"] == blocks(WEIGHTS, 2) + adapters + BUFFERS
        assert at_peak["gradients"] == adapters + block(sum(numel(s) for s in ADAPTERS) * 4)
        assert at_peak["optimizer state"] == adamw_states(ADAPTERS)
        assert f.estimate.stack_settings["data parallel"] == \
            f"{world_size} ranks, DDP buckets 25 MB"


def test_a_tied_embedding_loaded_from_a_checkpoint_is_one_tensor_on_the_npu(folder):
    """from_pretrained reads the weights into real CPU tensors; the move to the NPU keeps
    the head tied to the embedding (one tensor), as torch's move does on the machine."""
    seen = {}

    def load():
        import torch_npu  # noqa: F401
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(str(folder / "model")).to("npu")
        seen["tied"] = model.lm_head.weight is model.model.embed_tokens.weight
        seen["allocated"] = torch.npu.memory_allocated()

    result = estimate(load, product="A2")
    assert result.status == 0, result
    assert seen == {"tied": True, "allocated": blocks(WEIGHTS, 2) + BUFFERS}
