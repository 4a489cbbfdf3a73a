"""What one rank's estimate of a 7B model through LLaMA-Factory LoRA costs, at sequence 4096.

The job is LLaMA-Factory's own LoRA example (``examples/train_lora/qwen3_lora_sft.yaml`` at
v0.9.5, ``tests/data/llamafactory/``) run as its users run it, ``ascend-memsim estimate
--product A2 -- llamafactory-cli train config.yaml`` on one card
(``ASCEND_RT_VISIBLE_DEVICES=0``: LLaMA-Factory starts torchrun on every card it sees), a
fresh interpreter each time. Changed in the example: the model (Llama-2-7B's shapes: width
4,096, 32 layers, FFN 11,008, 32 heads, vocabulary 32,000, no tied weights: 6,738,415,616
parameters, as Meta's model card gives), ``cutoff_len`` 4096, a synthetic data set whose
every row is longer than that, the output folder, ``max_steps: 2`` (the second step runs
with AdamW's states of the first) and the gradient accumulation, at the example's 8 and at 2
(the fewest that show its peak: from the second micro-batch of a step on the adapters'
gradients are held while the next micro-batch runs). The peaks are checked by hand against
each other: reserved equal, allocated higher at 8 by the 6 more micro-batches the Trainer
holds on the device through a step (``transformers/trainer.py``, ``get_batch_samples`` takes
a step's batches before the first runs), 3 int64 tensors of 4,096 each (input_ids,
attention_mask, labels). The model is a safetensors file of the checkpoint's size whose data
is a hole (no disk; ``torchsim/stacks/hf.py``), with a word-level tokenizer holding Qwen's
chat tokens.

Per run: the wall seconds and the peak RSS of the whole command (its largest process), and
the estimate's figures. Its parameters are checked by hand: every weight in bfloat16 and
every LoRA matrix upcast to float32 (LLaMA-Factory's ``model/adapter.py``), each a block of
the request + 32 bytes rounded up to 512, and the two rotary ``inv_freq`` buffers.

Target (the training-stacks issue): under a minute, host memory under 4 GiB.

Run: ``python benchmarks/bench_stacks.py`` (needs the torch and stacks extras; about two
minutes on 2 cores).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Use the checkout this file lives in, not an installed copy.
sys.path.insert(0, ROOT)

from ascend_memsim.torchsim.stacks.hf import sparse_safetensors_header  # noqa: E402

EXAMPLE = os.path.join(ROOT, "tests", "data", "llamafactory", "qwen3_lora_sft.yaml")
WIDTH, LAYERS, FFN, HEADS, VOCAB = 4096, 32, 11008, 32, 32000
SEQ, RANK = 4096, 8
#: Llama-2-7B's parameter count (Meta's model card: "7B", 6,738,415,616 in its checkpoint)
PARAMETERS = 6_738_415_616
GiB = 1 << 30


def weights() -> dict[str, list[int]]:
    """Llama-2-7B's tensors by transformers' names (``LlamaForCausalLM``)."""
    shapes = {"model.embed_tokens.weight": [VOCAB, WIDTH], "model.norm.weight": [WIDTH],
              "lm_head.weight": [VOCAB, WIDTH]}
    for i in range(LAYERS):
        layer = f"model.layers.{i}."
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            shapes[f"{layer}self_attn.{name}.weight"] = [WIDTH, WIDTH]
        shapes[f"{layer}mlp.gate_proj.weight"] = [FFN, WIDTH]
        shapes[f"{layer}mlp.up_proj.weight"] = [FFN, WIDTH]
        shapes[f"{layer}mlp.down_proj.weight"] = [WIDTH, FFN]
        shapes[f"{layer}input_layernorm.weight"] = [WIDTH]
        shapes[f"{layer}post_attention_layernorm.weight"] = [WIDTH]
    return shapes


def numel(shape: list[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def block(nbytes: int) -> int:
    return (nbytes + 32 + 511) // 512 * 512


def parameters_by_hand() -> tuple[int, int]:
    """(trainable LoRA parameters, the parameters' bytes on the device): every linear layer
    of a block gets A (r x in) and B (out x r), float32."""
    shapes = weights()
    linears = [s for n, s in shapes.items() if n.startswith("model.layers.") and len(s) == 2]
    adapters = [[RANK, i] for o, i in linears] + [[o, RANK] for o, i in linears]
    device = (sum(block(2 * numel(s)) for s in shapes.values())
              + sum(block(4 * numel(s)) for s in adapters)
              + 2 * block(4 * WIDTH // HEADS // 2))          # inv_freq, original_inv_freq
    return sum(numel(s) for s in adapters), device


def prepare(folder: str) -> None:
    """The model (config, tokenizer, a sparse checkpoint) and the data set in ``folder``."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, PreTrainedTokenizerFast

    model = os.path.join(folder, "model")
    words = [f"w{i}" for i in range(200)]
    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "[UNK]"]
    word_level = Tokenizer(models.WordLevel({w: i for i, w in enumerate(special + words)},
                                            unk_token="[UNK]"))
    word_level.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=word_level, eos_token="<|endoftext|>",
                            unk_token="[UNK]",
                            additional_special_tokens=["<|im_start|>", "<|im_end|>"]
                            ).save_pretrained(model)
    LlamaConfig(vocab_size=VOCAB, hidden_size=WIDTH, intermediate_size=FFN,
                num_hidden_layers=LAYERS, num_attention_heads=HEADS, num_key_value_heads=HEADS,
                max_position_embeddings=SEQ, tie_word_embeddings=False,
                torch_dtype="bfloat16").save_pretrained(model)
    shapes = {n: ("BF16", s, 2 * numel(s)) for n, s in weights().items()}
    head, size = sparse_safetensors_header(shapes, {"format": "pt"})
    with open(os.path.join(model, "model.safetensors"), "wb") as f:
        f.write(head)
        f.truncate(len(head) + size)
    data = os.path.join(folder, "data")
    os.makedirs(data)
    # each row 2 x 2,100 words, one token each: longer than cutoff_len after the template
    rows = [{"instruction": " ".join(words[(i + j) % 200] for j in range(2100)), "input": "",
             "output": " ".join(words[(7 * i + j) % 200] for j in range(2100))}
            for i in range(64)]
    with open(os.path.join(data, "synthetic.json"), "w") as f:
        json.dump(rows, f)
    with open(os.path.join(data, "dataset_info.json"), "w") as f:
        json.dump({"synthetic": {"file_name": "synthetic.json"}}, f)


def config(folder: str, accumulation: int | None) -> str:
    """The example with the bench's model, data, sequence and steps; its path."""
    with open(EXAMPLE, encoding="utf-8") as f:
        keys = yaml.safe_load(f)
    keys.update(model_name_or_path=os.path.join(folder, "model"), dataset="synthetic",
                dataset_dir=os.path.join(folder, "data"), cutoff_len=SEQ, max_steps=2,
                output_dir=os.path.join(folder, "out"))
    if accumulation is not None:
        keys["gradient_accumulation_steps"] = accumulation
    path = os.path.join(folder, f"lora_{accumulation or 'example'}.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(keys, f)
    return path


def timed(folder: str, path: str) -> tuple[float, int, dict]:
    """Wall seconds, peak RSS (bytes) and the estimate's JSON of one run."""
    command = [sys.executable, "-m", "ascend_memsim", "estimate", "--product", "A2",
               "--json", "--", "llamafactory-cli", "train", path]
    env = {**os.environ, "ASCEND_RT_VISIBLE_DEVICES": "0", "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_CACHE": os.path.join(folder, "cache"),
           "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    start = time.perf_counter()
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.DEVNULL, cwd=folder,
                                env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - start
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"{' '.join(command)} exited with {status}")
        out.seek(0)
        result = json.loads(out.read())
    shutil.rmtree(os.path.join(folder, "cache"), ignore_errors=True)
    return seconds, usage.ru_maxrss * 1024, result


def main() -> None:
    trainable, device = parameters_by_hand()
    if sum(numel(s) for s in weights().values()) != PARAMETERS:
        raise SystemExit("the model's shapes are not Llama-2-7B's")
    folder = tempfile.mkdtemp(prefix="bench-stacks-")
    try:
        prepare(folder)
        rows = []
        figures = {}
        for accumulation in (2, None):
            seconds, rss, result = timed(folder, config(folder, accumulation))
            label = f"gradient accumulation {accumulation or '8 (the example)'}"
            peft = result["stack_settings"]["PEFT"]
            if f"{trainable:,} of {PARAMETERS + trainable:,} parameters" not in peft:
                raise SystemExit(f"{label}: PEFT says {peft}, by hand {trainable:,}")
            if result["at_peak"]["parameters"] != device:
                raise SystemExit(f"{label}: parameters {result['at_peak']['parameters']:,} "
                                 f"bytes, by hand {device:,}")
            figures[label] = (result["peak_allocated"], result["peak_reserved"])
            rows.append((label, f"{seconds:5.1f} s, peak RSS {rss / GiB:.2f} GiB; peak "
                                f"allocated {result['peak_allocated'] / GiB:.2f} GiB, reserved "
                                f"{result['peak_reserved'] / GiB:.2f} GiB"))
        (allocated2, reserved2), (allocated8, reserved8) = figures.values()
        held = (8 - 2) * 3 * block(8 * SEQ)
        if reserved2 != reserved8 or allocated8 - allocated2 != held:
            raise SystemExit(f"the peaks are {figures}: by hand, reserved equal and "
                             f"allocated {held:,} bytes apart")
    finally:
        shutil.rmtree(folder)
    rows.insert(0, ("job", f"LLaMA-Factory LoRA (its example), Llama-2-7B shapes, sequence "
                           f"{SEQ}, micro-batch 1, 2 steps, one card of A2"))
    rows.insert(1, ("by hand", f"{trainable:,} LoRA parameters, {device:,} bytes of "
                               f"parameters on the device: equal in every run"))
    rows.append(("the two peaks", f"reserved equal; allocated {held:,} bytes apart, the 6 "
                                  f"more batches a step holds (by hand)"))
    rows.append(("load average (1 min)", f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} "
                                         f"cores"))
    width = max(len(r[0]) for r in rows)
    for what, figure in rows:
        print(f"{what.ljust(width)}  {figure}", flush=True)


if __name__ == "__main__":
    main()
