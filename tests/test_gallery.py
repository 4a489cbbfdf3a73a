"""The gallery (examples/gallery/): scripts written the way torch_npu users write them, each
run by ``estimate`` with no option beyond the product, and its figures checked by hand from
the model's shapes: a block of the caching allocator is the request + 32 bytes rounded up to
512, so parameters, gradients and optimizer states are sums of such blocks."""

import os

import pytest

torch = pytest.importorskip("torch", reason="torchsim runs scripts on torch's fake tensors; "
                                           "install the torch extra: pip install -e '.[torch]'")

from ascend_memsim.torchsim import estimate  # noqa: E402

GALLERY = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                       "examples", "gallery")
MiB = 1 << 20


def block(n):
    return (n + 32 + 511) // 512 * 512


def blocks(shapes, size=4):
    """The blocks of float32 tensors of these shapes."""
    total = 0
    for shape in shapes:
        n = 1
        for d in shape:
            n *= d
        total += block(n * size)
    return total


def run(name, *argv):
    result = estimate(os.path.join(GALLERY, name), list(argv), product="A2")
    assert result.status == 0 and result.fits, result
    return result


def test_cnn_with_a_dataloader_of_4_workers_and_pinned_memory(capfd):
    result = run("cnn_dataloader.py")
    printed = capfd.readouterr().out
    assert printed.count("epoch") == 2
    weights = [(32, 3, 3, 3), (32,), (32,), (32,), (64, 32, 3, 3), (64,), (64,), (64,),
               (10, 64 * 8 * 8), (10,)]
    # BatchNorm's running mean and variance (float32) and its batch counter (int64)
    buffers = blocks([(32,), (32,), (64,), (64,)]) + 2 * block(8)
    assert result.at_peak["parameters"] == blocks(weights) + buffers
    # SGD with momentum: one buffer per parameter
    assert result.at_peak["optimizer state"] in (0, blocks(weights))
    # each pinned batch: 64 x 3 x 32 x 32 float32 (786,432 B: a 1 MiB block of the host
    # allocator, a power of two) and 64 int64 labels (512 B); 4 workers prefetch 2
    batch = (1 << 20) + 512
    assert batch <= result.host_pinned_peak <= 9 * batch
    # the labels are real (a DataLoader's data is), the loss is a value read: 0
    assert result.values_read > 0


def test_a_cuda_script_with_transfer_to_npu(capfd):
    result = run("transfer_to_npu_cuda.py")
    weights = [(8192, 2048), (8192,), (2048, 8192), (2048,)]
    assert result.at_peak["parameters"] == blocks(weights)
    assert result.at_peak["optimizer state"] >= 2 * blocks(weights)     # AdamW's two states
    assert "cuda max allocated" in capfd.readouterr().out


def test_a_checkpoint_saved_and_resumed(tmp_path, capfd):
    run("checkpoint_resume.py", str(tmp_path / "ck.pt"))
    printed = capfd.readouterr().out
    weights = [(4096, 1024), (4096,), (1024, 4096), (1024,)]
    # freed before the load; after the resumed step: parameters, gradients, Adam's two
    # states, and Adam's step counters, which the load put on the NPU (map_location)
    assert "allocated after freeing the model 0" in printed
    resumed = 4 * blocks(weights) + 4 * block(4)
    assert f"resumed at step 3; allocated {resumed}" in printed


def test_a_unittest_suite_passes_and_its_failure_would_be_the_status(capfd):
    run("unittest_style.py")
    assert "OK" in capfd.readouterr().err


def test_settings_the_script_puts_in_its_environment(capfd):
    result = run("alloc_conf_in_script.py")
    assert result.alloc_conf == "expandable_segments:True"
    assert result.sources["alloc_conf"] == "PYTORCH_NPU_ALLOC_CONF, set by the script"
    # 3 + 7 + 11 MiB in one expandable segment of 20 MiB granules: 40 MiB
    assert "reserved 40 MiB for 21 MiB" in capfd.readouterr().out


@pytest.mark.parametrize("offload", [False, True])
def test_activation_offload_to_the_host(capfd, offload):
    result = run("cpu_offload.py", *(["--offload"] if offload else []))
    held = int(capfd.readouterr().out.split("held before backward ")[1].split()[0])
    weights = blocks([(4096, 4096), (4096,)] * 8)
    # without offload each layer keeps its input and its GELU input (64 x 4096 float32,
    # 1 MiB each) on the device; with it they wait on the host (unpinned: torch's
    # save_on_cpu pins only when torch.cuda.is_available(), as on an Ascend machine)
    activations = 16 * block(64 * 4096 * 4)
    x = block(64 * 4096 * 4)
    if offload:
        assert held * MiB <= weights + x + 2 * MiB
        assert result.host_pinned_peak == 0
    else:
        assert held * MiB >= weights + activations - MiB


def test_a_gru_and_lstm_tagger():
    result = run("gru_tagger.py")
    weights = [(5000, 128),                                   # embedding
               (768, 128), (768, 256), (768,), (768,),        # GRU forward direction
               (768, 128), (768, 256), (768,), (768,),        # GRU backward direction
               (1024, 512), (1024, 256), (1024,), (1024,),    # LSTM
               (17, 256), (17,)]
    assert result.at_peak["parameters"] == blocks(weights)


# -- the training stacks' own loops (the stacks extra: transformers, peft, accelerate) ------

def _llama_weights(vocab=2000, hidden=512, inter=1376, layers=4):
    per_layer = [(hidden, hidden)] * 4 + [(inter, hidden)] * 2 + [(hidden, inter)] + \
        [(hidden,)] * 2
    return [(vocab, hidden)] + per_layer * layers + [(hidden,), (vocab, hidden)]


def test_hf_trainer_fine_tuning_from_a_config(tmp_path, capfd):
    pytest.importorskip("transformers", reason="the stacks extra: pip install -e '.[stacks]'")
    result = run("hf_trainer.py", str(tmp_path / "out"))
    assert "trained on npu:0" in capfd.readouterr().out
    weights = blocks(_llama_weights())
    # float32 weights (bf16=True is autocast), their gradients and AdamW's two states of
    # each are all held at the optimizer's step
    assert result.at_peak["parameters"] >= weights
    assert result.peak_allocated >= 4 * weights
    # the Trainer logs its loss and gradient norm: values read, 0 by default
    assert result.values_read > 0


def test_peft_lora_trains_only_the_adapters(capfd):
    pytest.importorskip("peft", reason="the stacks extra: pip install -e '.[stacks]'")
    result = run("peft_lora.py")
    printed = capfd.readouterr().out
    # PEFT's own count: r=8 on q_proj and v_proj of 4 layers, A (8 x 512) and B (512 x 8)
    assert "trainable params: 65,536" in printed
    adapters = blocks([(8, 512), (512, 8)] * 2 * 4)
    # AdamW's two states, for the adapters only
    assert result.at_peak["optimizer state"] == 2 * adapters


def test_an_accelerate_loop_takes_the_npu(capfd):
    pytest.importorskip("accelerate", reason="the stacks extra: pip install -e '.[stacks]'")
    result = run("accelerate_loop.py")
    assert "device npu" in capfd.readouterr().out
    weights = blocks([(4096, 1024), (4096,), (10, 4096), (10,)])
    assert result.at_peak["parameters"] == weights
    # AdamW's two states of each parameter, and its step's temporaries
    assert result.at_peak["optimizer state"] in (0,) or \
        result.at_peak["optimizer state"] >= 2 * weights


def test_a_decoder_block_on_torch_npus_fused_operators(capfd):
    result = run("llm_block.py")
    assert capfd.readouterr().out.count("step") == 2
    hidden, ffn = 2048, 5632
    weights = blocks([(3 * hidden, hidden), (hidden, hidden), (2 * ffn, hidden),
                      (hidden, ffn), (hidden,), (hidden,)], size=2)         # bfloat16
    assert result.at_peak["parameters"] == weights
    # AdamW's two states, bfloat16 as the parameters, held from the first step on
    assert result.at_peak["optimizer state"] >= 2 * weights
    assert result.peak_allocated >= 3 * weights


def test_an_moe_layer_routed_with_torch_npus_moe_operators(capfd):
    result = run("moe_block.py")
    assert "(4096, 2048); max allocated" in capfd.readouterr().out
    tokens, hidden, ffn, experts, top_k = 4096, 2048, 1408, 16, 2
    weights = blocks([(hidden, experts), (experts, hidden, ffn), (experts, ffn, hidden)],
                     size=2)
    # the experts' weights, the tokens, and their top_k copies routed to the experts
    routed = blocks([(tokens, hidden), (tokens * top_k, hidden)], size=2)
    assert result.peak_allocated >= weights + routed
