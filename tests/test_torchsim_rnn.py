"""Recurrent layers on the fake NPU (torchsim/ops/rnn.py): RNN, GRU and LSTM run forward and
backward; by hand, what their backward leaves and what a GRU's forward keeps per step."""

import pytest

torch = pytest.importorskip("torch", reason="torchsim runs scripts on torch's fake tensors; "
                                           "install the torch extra: pip install -e '.[torch]'")

from ascend_memsim.torchsim import estimate  # noqa: E402

B, T, IN, H = 8, 50, 128, 256


def block(n):
    return (n + 32 + 511) // 512 * 512


@pytest.mark.parametrize("layer, gates", [("RNN", 1), ("GRU", 3), ("LSTM", 4)])
def test_a_recurrent_layer_runs_forward_and_backward(layer, gates):
    out = {}

    def tagger():
        import torch_npu  # noqa: F401
        m = getattr(torch.nn, layer)(IN, H, batch_first=True).npu()
        x = torch.randn(B, T, IN).npu()
        base = torch.npu.memory_allocated()
        y, _state = m(x)
        out["shape"] = tuple(y.shape)
        out["forward"] = torch.npu.memory_allocated() - base
        y.sum().backward()
        out["backward"] = torch.npu.memory_allocated() - base
        out["state"] = sum(block(4 * s.numel()) for s in (
            _state if isinstance(_state, tuple) else (_state,)))
        out["y"] = block(4 * y.numel())

    result = estimate(tagger, product="A2")
    assert result.status == 0 and result.fits
    assert out["shape"] == (B, T, H)
    # after the backward: the gradients of w_ih (gates*H x I), w_hh (gates*H x H) and the two
    # biases, float32, with the output and the final state the script still holds
    grads = (block(4 * gates * H * IN) + block(4 * gates * H * H) + 2 * block(4 * gates * H))
    assert out["backward"] == grads + out["y"] + out["state"]
    if layer == "GRU":
        # each step keeps hy (B x H) and the fused cell's workspace (B x 5H) for backward
        assert out["forward"] >= T * (block(4 * B * H) + block(4 * B * 5 * H))
