"""torchtitan's own training entry point (``python -m torchtitan.train``, its ``Trainer``) run
by the estimate as torchtitan-npu runs it (torchsim/stacks/torchtitan.py), each rank on the
simulated NPU with FSDP2, tensor parallelism and activation checkpointing applied by
torchtitan from its own settings; each rank's model states checked by hand against FSDP2's
and torchtitan's arithmetic.

The config is torchtitan's own: ``--module llama3 --config llama3_debugmodel`` (torchtitan
0.3.0, ``torchtitan/models/llama3/config_registry.py``), its settings changed only through
its command line (steps, sequence, batch, parallel degrees, activation checkpointing). Its
tokenizer and data set (``./tests/assets`` of torchtitan's repository, not in its wheel) are
made here: a word-level tokenizer and a few lines of text in ``tmp_path``
(``--hf_assets_path``, ``--dataloader.dataset_path``). Where a run needs to be short, the same
config with 2 of its 6 layers (``llama3_debugmodel_2layers``, a ``config_registry`` function
written to ``tmp_path``, as torchtitan's ``--module`` takes any module's).

The debug model (``torchtitan/models/llama3/__init__.py``, ``_debugmodel``): dim 256, 16
heads, vocab 2048, FFN hidden ``compute_ffn_hidden_dim(256, multiple_of=256)`` = 256 x
ceil(int(8 x 256 / 3) / 256) = 256 x ceil(682 / 256) = 768, fused QKV, no biases, no weight
tying. A layer: wqkv 768 x 256 + wo 256 x 256 + w1, w3 768 x 256 + w2 256 x 768 + two norms
of 256 = 196,608 + 65,536 + 3 x 196,608 + 512 = 852,480 parameters. The model: embedding
2048 x 256 (524,288) + layers + norm 256 + head 256 x 2048 (524,288): 6 layers 6,163,712,
2 layers 2,753,792.

Each device block of the caching allocator is the request + 32 bytes rounded up to 512
(``block``).
"""

import importlib.util
import json
import os
import re
import sys

import pytest

torch = pytest.importorskip("torch", reason="torchsim runs scripts on torch's fake tensors; "
                                           "install the torch extra: pip install -e '.[torch]'")
if importlib.util.find_spec("torchtitan") is None:
    pytest.skip("torchtitan is not installed (pip install torchtitan)", allow_module_level=True)

from ascend_memsim.torchsim.ranks import estimate_ranks  # noqa: E402
from ascend_memsim.torchsim.torch_npu.npu._state import active  # noqa: E402

MiB = 1 << 20
DIM, HIDDEN, VOCAB = 256, 768, 2048
#: torchtitan's device choice, made as it was imported (outside any estimate)
CHOSEN_BEFORE: list = []
#: torchtitan's "debug model" with 2 of its 6 layers: its own config function, cut
TWO_LAYERS = """
from torchtitan.models.llama3.config_registry import llama3_debugmodel


def llama3_debugmodel_2layers():
    config = llama3_debugmodel()
    del config.model_spec.model.layers[2:]
    return config
"""


#: a folder holding tyro >= 0.9 and typeguard (.ci/run fills it), put before the environment's
#: tyro for torchtitan: LLaMA-Factory 0.9.5 pins tyro < 0.9 in its metadata but never imports
#: it, torchtitan 0.3.0 needs tyro.constructors (tyro 0.9) and its metadata asks for any tyro
TYRO_ENV = "ASCEND_MEMSIM_TEST_TYRO"


def _newer_tyro():
    """Make ``import tyro`` find the folder named by TYRO_ENV, when the environment's tyro is
    older than torchtitan needs (nothing here has imported tyro yet: only torchtitan uses it)."""
    folder = os.environ.get(TYRO_ENV)
    if not folder:
        return
    try:
        import tyro
    except ImportError:
        tyro = None
    if hasattr(tyro, "constructors"):
        return
    sys.path.insert(0, os.path.abspath(folder))
    for name in [m for m in sys.modules if m.split(".")[0] in ("tyro", "typeguard")]:
        del sys.modules[name]


def block(n):
    return (n + 32 + 511) // 512 * 512


def tensors(layers):
    """The model's weights: (name, shape, the dimension tensor parallelism splits, None for
    a norm, which it keeps whole). torchtitan's plan (models/common/decoder_sharding.py):
    the embedding row-wise on the vocabulary, wqkv, w1, w3 and the head column-wise (their
    dim 0), wo and w2 row-wise (dim 1), the norms replicated (sequence parallel)."""
    layer = [("wqkv", (3 * DIM, DIM), 0), ("wo", (DIM, DIM), 1), ("w1", (HIDDEN, DIM), 0),
             ("w2", (DIM, HIDDEN), 1), ("w3", (HIDDEN, DIM), 0),
             ("attention_norm", (DIM,), None), ("ffn_norm", (DIM,), None)]
    return ([("tok_embeddings", (VOCAB, DIM), 0)]
            + [(f"layers.{i}.{name}", shape, split) for i in range(layers)
               for name, shape, split in layer]
            + [("norm", (DIM,), None), ("lm_head", (VOCAB, DIM), 0)])


def local(shape, split, dp, tp):
    """A weight's elements on one rank: TP's part, then FSDP2's dim-0 shard of it (every dim
    0 here divides by the dp degree, so FSDP2 pads nothing)."""
    n = 1
    for d in shape:
        n *= d
    return n // dp // (tp if split is not None else 1)


def model_states(layers, dp, tp, seq):
    """Each rank's parameters, gradients and AdamW states after a step, in bytes, as the
    caching allocator holds them:

    - parameters: each weight's fp32 shard, a storage of its own (FSDP2's
      ``_sharded_param_data``), and each layer's RoPE table (``freqs_cis``, complex64,
      seq x head_dim / 2 = seq x 8, sized to the sequence by ``update_from_config``);
    - gradients: fp32 (``mixed_precision_reduce``), one reduce-scatter output per FSDP unit
      (torchtitan's ``apply_fsdp_to_decoder``: the embedding, each layer, and [norm, head],
      whose head the chunked loss runs apart from the model's forward, so FSDP2 reduces the
      norm's and the head's gradients apart);
    - optimizer: AdamW (fused) exp_avg and exp_avg_sq of each shard, fp32, and its step, a
      0-d fp32 tensor on the device (``torch/optim/adam.py``, ``_init_group``)."""
    ws = tensors(layers)
    shards = [4 * local(shape, split, dp, tp) for _, shape, split in ws]
    params = sum(block(b) for b in shards) + layers * block(seq * 8 * 8)
    per_layer = len(ws[1:-2]) // layers
    units = [shards[0], *[sum(shards[1 + i * per_layer:1 + (i + 1) * per_layer])
                          for i in range(layers)], shards[-2], shards[-1]]
    grads = sum(block(b) for b in units)
    optim = 2 * sum(block(b) for b in shards) + len(ws) * block(4)
    return {"parameters": params, "gradients": grads, "optimizer state": optim}


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    """torchtitan (imported outside any estimate: its device choice is then "cuda", which
    the run makes again), a tokenizer and a data set, and the 2-layer config module."""
    _newer_tyro()
    try:
        import torchtitan.trainer  # noqa: F401
        from torchtitan.tools import utils
    except AttributeError as e:                 # pragma: no cover - depends on the install
        pytest.skip(f"torchtitan does not import with the installed tyro ({e}): torchtitan "
                    f"0.3.0 needs tyro >= 0.9 (tyro.constructors), LLaMA-Factory pins < 0.9; "
                    f"set {TYRO_ENV} to a folder holding tyro >= 0.9 (pip install --no-deps "
                    f"--target DIR 'tyro>=0.9' 'typeguard>=4'), as .ci/run does")
    from tokenizers import Tokenizer, models, pre_tokenizers

    CHOSEN_BEFORE[:] = [utils.device_type]
    root = tmp_path_factory.mktemp("torchtitan")
    words = [f"w{i}" for i in range(500)]
    vocab = {"[UNK]": 0, "<s>": 1, "</s>": 2, **{w: i + 3 for i, w in enumerate(words)}}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    (root / "tokenizer").mkdir()
    tokenizer.save(str(root / "tokenizer" / "tokenizer.json"))
    (root / "tokenizer" / "tokenizer_config.json").write_text(
        json.dumps({"bos_token": "<s>", "eos_token": "</s>"}))
    (root / "data").mkdir()
    with open(root / "data" / "train.jsonl", "w") as f:
        for j in range(64):
            f.write(json.dumps({"text": " ".join(words[(j + k) % 500] for k in range(400))})
                    + "\n")
    (root / "tiny_titan.py").write_text(TWO_LAYERS)
    return root


@pytest.fixture
def titan(assets, tmp_path, monkeypatch):
    """The command line of a torchtitan run (``argv(config, *extra)``), and each rank's
    category figures after each training step (``seen``, rank -> list of dicts)."""
    import datasets
    from torchtitan import trainer

    monkeypatch.syspath_prepend(str(assets))
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    seen = {}
    step = trainer.Trainer.train_step

    def noted_step(self, *args, **kwargs):
        done = step(self, *args, **kwargs)
        seen.setdefault(int(os.environ["RANK"]), []).append(dict(active().totals))
        return done

    monkeypatch.setattr(trainer.Trainer, "train_step", noted_step)

    def argv(config, *extra, seq=16):
        module = "llama3" if config == "llama3_debugmodel" else "tiny_titan"
        return ["--module", module, "--config", config,
                "--hf_assets_path", str(assets / "tokenizer"),
                "--dataloader.dataset_path", str(assets / "data"),
                "--dump_folder", str(tmp_path / "out"), "--training.steps", "1",
                "--training.seq_len", str(seq), "--training.local_batch_size", "1", *extra]

    return argv, seen


def run_train(argv):
    """``python -m torchtitan.train ARGV`` in the running rank, as torchrun starts it."""
    import runpy

    def main():
        saved = sys.argv
        sys.argv = ["torchtitan.train", *argv]
        try:
            runpy.run_module("torchtitan.train", run_name="__main__", alter_sys=True)
        finally:
            sys.argv = saved

    return main


def categories(figures):
    return {k: figures[k] for k in ("parameters", "gradients", "optimizer state")}


def test_the_debug_model_on_one_npu_holds_its_whole_model_state(titan, capfd):
    argv, seen = titan
    result = estimate_ranks(run_train(argv("llama3_debugmodel")), world_size=1)
    assert result.fits, result.first_failure()
    rank = result.rank(0).estimate
    assert rank.status == 0 and rank.stopped is None, rank
    printed = capfd.readouterr()
    # torchtitan's own count (Trainer: model_config.get_nparams_and_flops) is the one above
    assert re.search(r"size: 6,163,712 total parameters", printed.out + printed.err)
    assert 524_288 + 6 * 852_480 + 256 + 524_288 == 6_163_712
    # FSDP2 is applied at dp_shard 1 too (torchtitan installs its mixed precision): each
    # weight is a shard of itself; AdamW's states are 2 x the weights' blocks (not the 6
    # RoPE tables, buffers) + the 45 weights' steps, 512 B each
    expected = model_states(6, dp=1, tp=1, seq=16)
    assert categories(seen[0][-1]) == expected
    assert expected["optimizer state"] == 2 * (expected["parameters"] - 6 * block(16 * 64)) \
        + 45 * 512
    # the settings line: what torchtitan ran with, torchtitan-npu's attention
    assert rank.stack_settings["parallelism"] == "none"
    assert rank.stack_settings["activation checkpointing"] == "SelectiveAC"
    assert rank.stack_settings["optimizer"] == "AdamW (fused)"
    assert rank.stack_settings["attention"].startswith("SDPA (npu_fusion_attention)")
    assert "settings: attention SDPA" in str(result)
    # torchtitan was imported before the run (no NPU then: its device choice "cuda" on a
    # machine without accelerators); the run chose again ("npu": every tensor above is on
    # the NPU) and put the choice back after it
    from torchtitan.distributed import parallel_dims
    from torchtitan.tools import utils

    assert utils.device_type == parallel_dims.device_type == CHOSEN_BEFORE[0] != "npu"


def test_fsdp2_on_2_ranks_through_torchrun_shards_every_model_state(titan, capfd):
    from ascend_memsim.cli import main

    argv, seen = titan
    # the command a user types, torchrun's own arguments giving the ranks (2 here, 8 in
    # the guide)
    words = ["estimate", "--", "torchrun", "--nproc-per-node", "2", "-m", "torchtitan.train",
             *argv("llama3_debugmodel_2layers", "--parallelism.data_parallel_shard_degree",
                   "2")]
    import io

    out = io.StringIO()
    assert main(words, out=out) == 0, capfd.readouterr()
    text = out.getvalue()
    assert "2 ranks on A2" in text and "(torchrun: 1 node x 2)" in text
    assert "parallelism dp_shard 2 (FSDP2)" in text and "fits on every rank" in text
    # each rank: half of every weight, gradient and AdamW state; the parameters' blocks sum
    # to 2,753,792 / 2 x 4 bytes (the 17 shards, each a multiple of 512 bytes, so each block
    # is its bytes + 512) + 2 RoPE tables
    expected = model_states(2, dp=2, tp=1, seq=16)
    assert sorted(seen) == [0, 1]
    assert [categories(seen[r][-1]) for r in (0, 1)] == [expected] * 2
    shards = sum(local(s, t, 2, 1) for _, s, t in tensors(2))
    assert shards == 2_753_792 // 2
    assert expected["parameters"] == 4 * shards + 17 * 512 + 2 * block(16 * 64)


def test_fsdp2_by_tensor_parallelism_on_8_ranks(titan):
    argv, seen = titan
    result = estimate_ranks(run_train(argv(
        "llama3_debugmodel_2layers", "--parallelism.data_parallel_shard_degree", "4",
        "--parallelism.tensor_parallel_degree", "2")), world_size=8)
    assert result.fits, result.first_failure()
    # every rank alike: a quarter (FSDP2) of a half (TP) of each weight, a quarter of each
    # norm (TP keeps the norms whole)
    expected = model_states(2, dp=4, tp=2, seq=16)
    assert sorted(seen) == list(range(8))
    assert all(categories(seen[r][-1]) == expected for r in range(8))
    # at the run's peak (in the backward, before the optimizer's states exist) every shard
    # is counted as a parameter already, with the layer FSDP2 has gathered; and the peak
    # is the run's, though torchtitan resets the peak statistics at every logged step
    # (MetricsProcessor: device_memory_monitor.reset_peak_stats())
    for r in range(8):
        rank = result.rank(r).estimate
        assert rank.at_peak["parameters"] >= expected["parameters"]
        assert rank.peak_allocated == sum(rank.at_peak.values())
    norms = 5 * DIM
    shards = sum(local(s, t, 4, 2) for _, s, t in tensors(2))
    assert shards == (2_753_792 - norms) // 8 + norms // 4
    # the parameters: 2 x 65,536 (embedding, head) + 8 x 24,576 (wqkv, w1, w2, w3) + 2 x
    # 8,192 (wo) fp32 + 5 x 64 (norms), each a block; + 2 RoPE tables
    assert expected["parameters"] == (2 * block(65_536 * 4) + 8 * block(24_576 * 4)
                                      + 2 * block(8_192 * 4) + 5 * block(64 * 4)
                                      + 2 * block(16 * 64))
    settings = result.rank(0).estimate.stack_settings
    assert settings["parallelism"] == "dp_shard 4 (FSDP2), tp 2 (sequence parallel)"
    # the communicators on each card: the world's, the rank's FSDP2 group (dp_shard: the
    # ranks of its TP position, 4 apart by 2) and its TP pair, each 2 x HCCL_BUFFSIZE 200 MB
    for r in range(8):
        held = sorted((c.ranks, c.size) for c in result.rank(r).communicators)
        assert held == sorted([(tuple(range(8)), 400 * MiB),
                               (tuple(range(r % 2, 8, 2)), 400 * MiB),
                               ((r - r % 2, r - r % 2 + 1), 400 * MiB)])


def test_activation_checkpointing_lowers_the_activations_held(titan):
    argv, _ = titan
    held = {}
    for mode in ("none", "selective"):
        extra = [] if mode == "selective" else [f"activation_checkpoint:{mode}"]
        result = estimate_ranks(run_train(argv("llama3_debugmodel_2layers", *extra,
                                               seq=512)), world_size=1)
        assert result.fits, result.first_failure()
        rank = result.rank(0).estimate
        assert rank.stack_settings["activation checkpointing"] == {
            "none": "none", "selective": "SelectiveAC"}[mode]
        held[mode] = rank.at_peak["activations and temporaries"]
    # without checkpointing each layer keeps, among the rest, its FFN's four bf16 tensors
    # of 512 x 768 (w1's and w3's outputs, silu(w1), their product) for the backward:
    # 4 x 512 x 768 x 2 = 3 MiB a layer, 6 MiB for the 2; checkpointing recomputes them
    ffn = 2 * 4 * 512 * HIDDEN * 2
    assert ffn == 6 * MiB
    assert held["none"] - held["selective"] >= ffn


def test_torchtitan_npus_attention_and_nothing_left_patched_after_a_run(titan):
    import time

    from torchtitan import trainer
    from torchtitan.config import manager
    from torchtitan.trainer import Trainer

    from ascend_memsim.torchsim.stacks.torchtitan import npu_attention

    # the run's patches are undone: torchtitan's own methods again
    assert manager.ConfigManager.parse_args.__module__ == "torchtitan.config.manager"
    assert Trainer.init_distributed.__module__ == "torchtitan.trainer"
    assert trainer.time is time
    # torchtitan-npu's rewrite, by itself: every layer's FlexAttention becomes SDPA
    config = manager.ConfigManager().parse_args(titan[0]("llama3_debugmodel"))
    assert npu_attention(config) == 6
    assert npu_attention(config) == 0
    # spmd_types' names of the mesh axes the runs made: forgotten before each rank (its own
    # _reset), as a new process starts with none
    import spmd_types._mesh_axis as axes

    from ascend_memsim.torchsim.stacks.process_state import forget

    assert axes._mesh_axis_names
    forget()
    assert not axes._mesh_axis_names
    inner = {type(layer.attention.inner_attention).__qualname__
             for layer in config.model_spec.model.layers}
    assert inner == {"ScaledDotProductAttention.Config"}
