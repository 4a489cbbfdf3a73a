"""torch_npu's fused attention on the fake NPU: ``torch_npu.npu_fusion_attention`` and its
gradient (outputs, what autograd keeps between forward and backward, the dropout mask, the
workspace), and ``F.scaled_dot_product_attention`` routed to it as torch_npu routes it."""

import pytest

torch = pytest.importorskip("torch", reason="torchsim runs scripts on torch's fake tensors; "
                                            "install the torch extra")

from ascend_memsim.torchsim import estimate  # noqa: E402
from ascend_memsim.torchsim.torch_npu import npu as npu_module  # noqa: E402
from ascend_memsim.torchsim.workspace_table import WorkspaceTable  # noqa: E402

MiB = 1 << 20


def block(nbytes: int) -> int:
    """A storage's block on A2: the +32 pad, then 512-byte steps (round_size, AddPadSize)."""
    return -(-(nbytes + 32) // 512) * 512


def allocated() -> int:
    return npu_module.memory_allocated()


@pytest.mark.parametrize("layout, shape, out_shape, stat_shape", [
    ("BSH", (2, 256, 4 * 64), (2, 256, 256), (2, 4, 256, 8)),
    ("SBH", (256, 2, 4 * 64), (256, 2, 256), (2, 4, 256, 8)),
    ("BNSD", (2, 4, 256, 64), (2, 4, 256, 64), (2, 4, 256, 8)),
    ("BSND", (2, 256, 4, 64), (2, 256, 4, 64), (2, 4, 256, 8)),
])
def test_the_outputs_have_torch_npus_shapes_and_dtypes(layout, shape, out_shape, stat_shape):
    seen = {}

    def run():
        import torch_npu
        q = torch.empty(shape, dtype=torch.bfloat16, device="npu")
        seen["out"] = torch_npu.npu_fusion_attention(q, q, q, 4, layout, scale=0.125)

    assert estimate(run).fits
    out, smax, ssum, sout, seed, offset, numels = seen["out"]
    assert (tuple(out.shape), out.dtype) == (out_shape, torch.bfloat16)
    # FlashAttentionKernelNpuOpApi.cpp: {B, head_num, S0, 8} in float32, softmax_out empty
    assert (tuple(smax.shape), smax.dtype) == (stat_shape, torch.float32)
    assert (tuple(ssum.shape), ssum.dtype) == (stat_shape, torch.float32)
    assert (tuple(sout.shape), sout.dtype) == ((0,), torch.bfloat16)
    assert (seed, offset, numels) == (0, 0, 2 * 4 * 256 * 256)
    assert out.device.type == "npu"


def test_tnd_takes_the_cumulative_lengths_and_gqa_a_value_head_size_of_its_own():
    seen = {}

    def run():
        import torch_npu
        q = torch.empty(10, 8, 64, dtype=torch.float16, device="npu")
        kv = torch.empty(10, 2, 64, dtype=torch.float16, device="npu")
        seen["tnd"] = torch_npu.npu_fusion_attention(
            q, kv, kv, 8, "TND", actual_seq_qlen=[4, 10], actual_seq_kvlen=[4, 10])
        q = torch.empty(1, 8, 16, 128, dtype=torch.float16, device="npu")
        k = torch.empty(1, 2, 16, 128, dtype=torch.float16, device="npu")
        v = torch.empty(1, 2, 16, 64, dtype=torch.float16, device="npu")
        seen["gqa"] = torch_npu.npu_fusion_attention(q, k, v, 8, "BNSD")

    assert estimate(run).fits
    out, smax, _ssum, _sout, _seed, _offset, numels = seen["tnd"]
    assert tuple(out.shape) == (10, 8, 64) and tuple(smax.shape) == (10, 8, 8)
    assert numels == 8 * (4 * 4 + 6 * 6)
    assert tuple(seen["gqa"][0].shape) == (1, 8, 16, 64)


def test_bad_arguments_raise_torch_npus_messages():
    def run(**kwargs):
        def body():
            import torch_npu
            q = torch.empty(1, 2, 16, 8, dtype=torch.float16, device="npu")
            torch_npu.npu_fusion_attention(q, q, q, 2, **kwargs)
        return body

    with pytest.raises(RuntimeError, match="input_layout should be BSH/SBH/BNSD/BSND/TND"):
        estimate(run(input_layout="NSD"))
    with pytest.raises(RuntimeError, match=r"keep_prob value must be in range of \(0, 1\]"):
        estimate(run(input_layout="BNSD", keep_prob=0.0))
    with pytest.raises(RuntimeError, match=r"sparse_mode value must be in range of \[0,6\]"):
        estimate(run(input_layout="BNSD", sparse_mode=7))
    # the newest torch_npu's softmax_layout: "" or TND, and TND for a TND input only
    with pytest.raises(RuntimeError, match="only supported softmax_layout=TND"):
        estimate(run(input_layout="BNSD", softmax_layout="BNSD"))
    with pytest.raises(RuntimeError, match="softmax_layout=TND only supported when input_"):
        estimate(run(input_layout="BNSD", softmax_layout="TND"))


def test_forward_and_backward_run_and_autograd_keeps_what_torch_npu_keeps():
    """B=1, N=8, S=4096, D=128 in float16: q, k, v and the output are 8 MiB each,
    softmax_max and softmax_sum (1, 8, 4096, 8) float32 are 1 MiB each. Between forward and
    backward the graph holds the output and the two statistics (q, k, v are the script's);
    a 4096 x 4096 score matrix per head (256 MiB in float16) is never made."""
    seen = {}
    qkv = 8 * MiB

    def run():
        import torch_npu
        q, k, v = (torch.empty(1, 8, 4096, 128, dtype=torch.float16, device="npu",
                               requires_grad=True) for _ in range(3))
        before = allocated()
        out = torch_npu.npu_fusion_attention(q, k, v, 8, "BNSD", scale=0.088)[0]
        seen["held"] = allocated() - before
        torch_npu.npu.reset_peak_memory_stats()
        out.backward(torch.ones_like(out))
        seen["backward_peak"] = npu_module.max_memory_allocated() - before
        seen["after"] = allocated() - before
        seen["grads"] = [tuple(t.grad.shape) for t in (q, k, v)]
        with torch.no_grad():
            res = torch_npu.npu_fusion_attention(q, k, v, 8, "BNSD")
            del res
        seen["no_grad"] = allocated() - before - seen["after"]

    result = estimate(run, workspace=False)
    assert result.fits
    assert seen["held"] == block(qkv) + 2 * block(1 * MiB)
    # the gradient runs with out, the statistics and dy (ones_like) and makes dq, dk, dv;
    # dpse is an empty tensor (no pse): 0 bytes; no zeros for the statistics' gradients
    assert seen["backward_peak"] == 2 * block(qkv) + 2 * block(1 * MiB) + 3 * block(qkv)
    # after backward: the graph and dy are freed; the script's out and the gradients stay
    assert seen["after"] == 4 * block(qkv)
    assert seen["grads"] == [(1, 8, 4096, 128)] * 3
    assert seen["no_grad"] == 0


def test_the_dropout_mask_is_held_for_the_call_and_made_again_for_the_gradient():
    """keep_prob 0.9: a uint8 mask of ceil(numels/128)*128/8 bytes = 1*2*2048*2048/8 = 1 MiB
    for the forward call and again for the gradient's; it is not kept. keep_prob 1 makes
    none."""
    def run_with(keep_prob):
        seen = {}

        def run():
            import torch_npu
            q, k, v = (torch.empty(1, 2, 2048, 64, dtype=torch.float16, device="npu",
                                   requires_grad=True) for _ in range(3))
            before = allocated()
            torch_npu.npu.reset_peak_memory_stats()
            out, smax, ssum, _, _, _, numels = torch_npu.npu_fusion_attention(
                q, k, v, 2, "BNSD", keep_prob=keep_prob)
            seen["numels"] = numels
            seen["forward_peak"] = npu_module.max_memory_allocated() - before
            seen["held"] = allocated() - before
            del smax, ssum
            torch_npu.npu.reset_peak_memory_stats()
            out.backward(torch.ones_like(out))
            seen["backward_peak"] = npu_module.max_memory_allocated() - before

        assert estimate(run, workspace=False).fits
        return seen

    dropout, none = run_with(0.9), run_with(1.0)
    mask = block(2 * 2048 * 2048 // 8)
    stats = 2 * block(2 * 2048 * 8 * 4)
    assert dropout["numels"] == none["numels"] == 2 * 2048 * 2048
    assert dropout["held"] == none["held"] == block(512 * 1024) + stats
    assert none["forward_peak"] == none["held"]
    assert dropout["forward_peak"] == dropout["held"] + mask
    # the gradient runs with out, dy, the statistics and the mask, and makes dq, dk, dv
    assert none["backward_peak"] == 2 * block(512 * 1024) + stats + 3 * block(512 * 1024)
    assert dropout["backward_peak"] == none["backward_peak"] + mask


def test_a_given_dropout_mask_is_used_and_a_sink_gets_its_gradient():
    """The newest torch_npu's arguments: a caller's dropout_mask is used as it is (the call
    makes none; the gradient still makes its own from seed and offset), and a sink, kept
    for the backward, gets a gradient like it (npu_fusion_attention_grad's fifth
    result)."""
    seen = {}

    def run():
        import torch_npu
        q, k, v = (torch.empty(1, 2, 2048, 64, dtype=torch.float16, device="npu",
                               requires_grad=True) for _ in range(3))
        sink = torch.empty(2, dtype=torch.float32, device="npu", requires_grad=True)
        given = torch.empty(2 * 2048 * 2048 // 8, dtype=torch.uint8, device="npu")
        before = allocated()
        torch_npu.npu.reset_peak_memory_stats()
        out = torch_npu.npu_fusion_attention(q, k, v, 2, "BNSD", keep_prob=0.9, sink=sink,
                                             dropout_mask=given)[0]
        seen["forward_peak"] = npu_module.max_memory_allocated() - before
        out.backward(torch.ones_like(out))
        seen["sink_grad"] = (tuple(sink.grad.shape), sink.grad.dtype)
        seen["q_grad"] = tuple(q.grad.shape)

    assert estimate(run, workspace=False).fits
    stats = 2 * block(2 * 2048 * 8 * 4)
    # the output and the statistics; no mask of the call's own (1 MiB)
    assert seen["forward_peak"] == block(512 * 1024) + stats
    assert seen["sink_grad"] == ((2,), torch.float32)
    assert seen["q_grad"] == (1, 2, 2048, 64)


def test_the_workspace_table_applies_to_the_forward_and_the_gradient():
    seen = {}

    def run():
        import torch_npu
        q = torch.empty(1, 8, 1024, 128, dtype=torch.float16, device="npu",
                        requires_grad=True)
        seen["q"] = q
        out = torch_npu.npu_fusion_attention(q, q, q, 8, "BNSD")[0]
        out.sum().backward()

    result = estimate(run, task_queue=2)
    assert "npu_fusion_attention" not in result.uncovered
    assert "npu_fusion_attention_grad" not in result.uncovered
    table = WorkspaceTable()
    q = torch.empty(1, 8, 1024, 128, dtype=torch.float16, device="meta")
    forward = table.size("npu_fusion_attention", (q, q, q, 8, "BNSD"), None)
    grad = table.size("npu_fusion_attention_grad", (q, q, q, q, 8, "BNSD"), None)
    # 16 MiB + 48 cores * (2 * 8*128*128*4 + 4*128*128*4) = 76 MiB; the gradient: 20 MiB +
    # 16 KiB + q, k, v in float32 (3 * 1*8*1024*128*4 = 12 MiB) + 48 * 128*128*16
    assert forward == 16 * MiB + 48 * (2 * 8 * 128 * 128 * 4 + 4 * 128 * 128 * 4) == 76 * MiB
    assert grad == 20 * MiB + 16 * 1024 + 12 * MiB + 48 * 128 * 128 * (8 + 4 * 2)
    assert result.workspace_largest_request == forward
    # the forward and the gradient: the only calls of the table's operators
    assert result.workspace_calls == 2


def sdpa_model(seq=8192, causal=True):
    """One long-sequence attention: B=1, N=8, S=seq, D=128 in bfloat16, forward and
    backward through F.scaled_dot_product_attention."""
    def run():
        q, k, v = (torch.empty(1, 8, seq, 128, dtype=torch.bfloat16, device="npu",
                               requires_grad=True) for _ in range(3))
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        out.backward(torch.ones_like(out))
    return run


def test_sdpa_on_a2_runs_the_fused_kernel_and_its_peak_is_the_hand_figure():
    """On A2 torch_npu's SDPA calls npu_fusion_attention (bfloat16, 4-D, no mask,
    is_causal): q, k, v, out, dy, dq, dk, dv are 16 MiB each (1*8*8192*128*2), softmax_max
    and softmax_sum 2 MiB each (1*8*8192*8*4), the causal mask a 2048 x 2048 bool triu
    (4 MiB, saved for backward). Peak: during the gradient, 8 * 16 MiB + 2 * 2 MiB + 4 MiB."""
    result = estimate(sdpa_model(), product="A2", workspace=False)
    assert result.fits
    t, stat, mask = block(16 * MiB), block(2 * MiB), block(4 * MiB)
    assert result.peak_allocated == 8 * t + 2 * stat + mask


def test_sdpa_on_310p_takes_torchs_math_path_with_the_score_matrices():
    """310P is below Ascend910B1: torch_npu's SDPA takes the math path, whose score and
    softmax matrices are 1*8*8192*8192 in bfloat16 = 1 GiB each; the fused peak is far
    below one of them."""
    fused = estimate(sdpa_model(), product="A2", workspace=False, capacity=64 << 30)
    math = estimate(sdpa_model(), product="310P", workspace=False, capacity=64 << 30)
    assert math.fits and fused.fits
    scores = 8 * 8192 * 8192 * 2
    assert math.peak_allocated >= 2 * scores
    assert fused.peak_allocated < scores // 4
    assert math.peak_allocated - fused.peak_allocated >= 2 * scores - scores // 4


def test_sdpa_falls_back_to_math_where_torch_npu_does():
    """A float mask, 3-D inputs or a float32 head size not a multiple of 4 take the math path
    (the S x S scores appear); a bool mask is inverted and passed to the fused kernel."""
    seen = {}

    def peak(fn):
        npu_module.reset_peak_memory_stats()
        base = allocated()
        fn()
        return npu_module.max_memory_allocated() - base

    def run():
        sdpa = torch.nn.functional.scaled_dot_product_attention
        q = torch.empty(1, 2, 1024, 64, dtype=torch.float16, device="npu")
        bool_mask = torch.empty(1024, 1024, dtype=torch.bool, device="npu")
        float_mask = torch.empty(1024, 1024, dtype=torch.float16, device="npu")
        scores = 2 * 1024 * 1024 * 2
        seen["bool"] = peak(lambda: sdpa(q, q, q, attn_mask=bool_mask)) < scores
        seen["float"] = peak(lambda: sdpa(q, q, q, attn_mask=float_mask)) >= scores
        q3 = torch.empty(2, 1024, 64, dtype=torch.float16, device="npu")
        seen["3d"] = peak(lambda: sdpa(q3, q3, q3)) >= scores
        q32 = torch.empty(1, 2, 1024, 62, dtype=torch.float32, device="npu")
        seen["fp32"] = peak(lambda: sdpa(q32, q32, q32)) >= 2 * scores

    assert estimate(run, workspace=False).fits
    assert seen == {"bool": True, "float": True, "3d": True, "fp32": True}


def test_sdpa_under_inference_mode_runs_the_fused_kernel_too():
    """torch_npu overrides SDPA for the device's own key, so inference mode (which skips
    autograd) takes the fused kernel as training does: q, k, v and out 16 MiB each, the
    causal mask 4 MiB, softmax_max and softmax_sum 2 MiB each while the kernel runs; no
    1 GiB score matrix."""
    def infer():
        with torch.inference_mode():
            q, k, v = (torch.empty(1, 8, 8192, 128, dtype=torch.bfloat16, device="npu")
                       for _ in range(3))
            out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            assert out.shape == (1, 8, 8192, 128)

    for product in ("A2", "310P"):
        result = estimate(infer, product=product, workspace=False, capacity=64 << 30)
        assert result.fits, product
        if product == "A2":
            t, stat, mask = block(16 * MiB), block(2 * MiB), block(4 * MiB)
            assert result.peak_allocated == 4 * t + 2 * stat + mask
        else:   # below Ascend910B1: the math path, with its scores
            assert result.peak_allocated >= 8 * 8192 * 8192 * 2
