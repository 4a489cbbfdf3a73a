"""torch_npu's fused operator families on the fake NPU (torchsim/ops/): each operator's
outputs and the device memory they take, what autograd keeps between forward and backward
and the gradients, and an LLM block and an MoE block with their peaks by hand.

Figures by hand: torch_npu's caching allocator makes each storage a block of its bytes + 32,
rounded up to 512 (:func:`block`); ``workspace=False`` unless the workspace is the point."""

import importlib
import math

import pytest

torch = pytest.importorskip("torch", reason="torchsim runs scripts on torch's fake tensors; "
                                            "install the torch extra")

from ascend_memsim.torchsim import estimate, ops  # noqa: E402
from ascend_memsim.torchsim.torch_npu import OPERATORS as STANDIN  # noqa: E402
from ascend_memsim.torchsim.torch_npu import npu as npu_module  # noqa: E402
from ascend_memsim.torchsim.workspace_table import WorkspaceTable  # noqa: E402

MiB = 1 << 20
BF, F32 = torch.bfloat16, torch.float32
I8, I32, I64, U8, BOOL = torch.int8, torch.int32, torch.int64, torch.uint8, torch.bool
E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
#: the shapes of the cases: batch, sequence, heads (kv heads), head size, hidden, FFN,
#: tokens, experts, top-k
B, S, N, NKV, D = 2, 128, 8, 2, 64
H, F = N * D, 1024
T, E, K = 256, 8, 2


def block(nbytes: int) -> int:
    """A storage's block on A2: the +32 pad, then 512-byte steps (round_size, AddPadSize);
    an empty storage takes none."""
    return -(-(nbytes + 32) // 512) * 512 if nbytes else 0


def blocks(*outs: tuple) -> int:
    """The blocks of tensors given as (shape, dtype)."""
    return sum(block(math.prod(shape) * dtype.itemsize) for shape, dtype in outs)


def allocated() -> int:
    return npu_module.memory_allocated()


def t(*shape: int, dtype: torch.dtype = BF, grad: bool = False) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device="npu", requires_grad=grad)


def flat(out) -> list:
    """An operator's outputs as [(shape, dtype)]."""
    return [(tuple(o.shape), o.dtype) for o in _leaves(out)]


class Case:
    """One call of torch_npu.<name>: on the inputs ``make`` gives, then ``extra``
    positional and ``kw`` keyword arguments (or ``call(torch_npu, *inputs)``); its outputs
    as (shape, dtype), the bytes they leave allocated, and ``peak``, the bytes while it
    runs (theirs unless said)."""

    def __init__(self, name, make, outs, *extra, call=None, peak=None, id=None, **kw):
        self.name, self.make, self.outs, self.id = name, make, outs, id or name
        self.call = call or (lambda n, *inputs: getattr(n, name)(*inputs, *extra, **kw))
        self.grown = blocks(*outs)
        self.peak = self.grown if peak is None else peak


def _cases() -> list:
    bsh, tn, th, bsnd = (B, S, H), (T, N, D), (T, H), (B, S, N, D)
    rope = (1, S, 1, D)
    mx = (T, H // 64, 2)
    i32 = lambda *shape: t(*shape, dtype=I32)  # noqa: E731
    q_decode = lambda: (t(B, 1, H), t(B, S, NKV * D), t(B, S, NKV * D))  # noqa: E731
    q_bnsd = lambda: (t(B, N, S, D), t(B, NKV, S, D), t(B, NKV, S, D))  # noqa: E731
    gqa = {"num_heads": N, "num_key_value_heads": NKV}
    return [
        # -- norm
        Case("npu_rms_norm", lambda: (t(*bsh), t(H)), [(bsh, BF), ((B, S, 1), F32)]),
        Case("npu_rms_norm_backward", lambda: (t(*bsh), t(*bsh), t(H), t(B, S, 1, dtype=F32)),
             [(bsh, BF), ((H,), F32)]),
        Case("npu_add_rms_norm", lambda: (t(*bsh), t(*bsh), t(H)),
             [(bsh, BF), ((B, S, 1), F32), (bsh, BF)]),
        # -- rotary
        Case("npu_rotary_mul", lambda: (t(*bsnd), t(*rope), t(*rope)), [(bsnd, BF)]),
        # float32 cos and sin: the kernel's bfloat16 copies live for the call
        Case("npu_rotary_mul", lambda: (t(*bsnd), t(*rope, dtype=F32), t(*rope, dtype=F32)),
             [(bsnd, BF)], peak=blocks((bsnd, BF), (rope, BF), (rope, BF)),
             id="rotary_mul_mixed"),
        Case("npu_rotary_mul_backward", lambda: (t(*bsnd), t(*bsnd), t(*rope), t(*rope)),
             [(bsnd, BF), (rope, BF), (rope, BF)]),
        # in place: query and key are rotated where they are
        Case("npu_apply_rotary_pos_emb",
             lambda: (t(*bsnd), t(B, S, NKV, D), t(*rope), t(*rope)), []),
        Case("npu_interleave_rope", lambda: (t(B, N, S, D), t(B, 1, S, D), t(B, 1, S, D)),
             [((B, N, S, D), BF)]),
        # -- activation
        Case("npu_swiglu", lambda: (t(B, S, 2 * F),), [((B, S, F), BF)]),
        Case("npu_swiglu_backward", lambda: (t(B, S, F), t(B, S, 2 * F)),
             [((B, S, 2 * F), BF)]),
        Case("npu_clipped_swiglu", lambda: (t(T, 2 * F),), [((T, F), BF)], dim=-1,
             alpha=1.702),
        Case("npu_fast_gelu", lambda: (t(*bsh),), [(bsh, BF)]),
        Case("fast_gelu", lambda: (t(*bsh),), [(bsh, BF)]),
        Case("npu_fast_gelu_backward", lambda: (t(*bsh), t(*bsh)), [(bsh, BF)]),
        Case("npu_gelu_mul", lambda: (t(T, 2 * F),), [((T, F), BF)]),
        # -- layout: a format cast costs the same shape in ND (ESTIMATE)
        Case("npu_format_cast", lambda: (t(H, H),), [((H, H), BF)], 29),
        Case("npu_format_cast", lambda: (t(H, H), t(16, 16)), [((H, H), BF)],
             id="format_cast_dst"),
        Case("npu_format_cast_", lambda: (t(H, H),), [], 29, peak=blocks(((H, H), BF))),
        Case("npu_confusion_transpose", lambda: (t(2, 3, 4, 6, dtype=F32),),
             [((2, 4, 18), F32)], (0, 2, 1, 3), (2, 4, 18), True),
        Case("npu_confusion_transpose", lambda: (t(2, 3, 4, 6, dtype=F32),),
             [((2, 6, 12), F32)], (0, 2, 1), (2, 12, 6), False,
             id="confusion_transpose_reshape_first"),
        Case("npu_confusion_transpose_backward", lambda: (t(2, 4, 18, dtype=F32),),
             [((2, 3, 4, 6), F32)], (0, 2, 1, 3), (2, 3, 4, 6), False),
        Case("npu_transpose", lambda: (t(2, 3, 4),), [((4, 2, 3), BF)], (2, 0, 1)),
        # MLA's batched projections: x (N, T, D) @ w (N, D, F) -> (T, N, F)
        Case("npu_transpose_batchmatmul", lambda: (t(N, T, D), t(N, D, F)), [((T, N, F), BF)],
             perm_y=[1, 0, 2]),
        Case("npu_transpose_batchmatmul", lambda: (t(N, T, D), t(N, D, F), t(N * F, dtype=I64)),
             [((T, 1, N * F), I8)], call=lambda n, x, w, s: n.npu_transpose_batchmatmul(
                 x, w, scale=s), id="transpose_batchmatmul_int8"),
        # -- moe
        Case("npu_moe_token_permute", lambda: (t(*th), i32(T, K)),
             [((T * K, H), BF), ((T * K,), I32)]),
        Case("npu_moe_token_permute", lambda: (t(*th), i32(T, K)),
             [((300, H), BF), ((T * K,), I32)], num_out_tokens=300,
             id="token_permute_num_out_tokens"),
        Case("npu_moe_token_permute_grad_v2", lambda: (t(T * K, H), i32(T * K)), [(th, BF)],
             T, BF, K),
        Case("npu_moe_token_unpermute", lambda: (t(T * K, H), i32(T * K), t(T, K)),
             [(th, BF)]),
        Case("npu_moe_token_unpermute_grad_v2", lambda: (t(*th), i32(T * K), t(T, K)),
             [((T * K, H), BF), ((T, K), BF)],
             call=lambda n, g, si, p: n.npu_moe_token_unpermute_grad_v2(g, si, T * K, BF, p)),
        # without probs: a 0-d grad_probs (the kernel's size {})
        Case("npu_moe_token_unpermute_grad_v2", lambda: (t(T * K, H), i32(T * K)),
             [((T * K, H), BF), ((), BF)], T * K, BF, id="token_unpermute_grad_v2_no_probs"),
        Case("npu_moe_init_routing", lambda: (t(*th), i32(T, K), i32(T, K)),
             [((T // 2 * K, H), BF), ((T * K,), I32), ((T * K,), I32)], T // 2),
        Case("npu_moe_init_routing_v2", lambda: (t(*th), i32(T, K)),
             [((T * K, H), BF), ((T * K,), I32), ((E,), I64), ((T * K,), F32)],
             active_num=T * K, expert_num=E, expert_tokens_num_type=1,
             expert_tokens_num_flag=True),
        # drop/pad with dynamic int8 quantisation: (E, capacity, H) int8
        Case("npu_moe_init_routing_v2", lambda: (t(*th), i32(T, K)),
             [((E, 64, H), I8), ((T * K,), I32), ((E,), I64), ((E * 64,), F32)],
             expert_capacity=64, expert_num=E, drop_pad_mode=1, quant_mode=1,
             id="init_routing_v2_drop_pad_int8"),
        Case("npu_moe_gating_top_k_softmax", lambda: (t(T, E),),
             [((T, K), BF), ((T, K), I32), ((T, K), I32)], None, K),
        Case("npu_moe_finalize_routing",
             lambda: (t(T * K, H), t(*th), t(T, K), i32(T * K), i32(T, K)), [(th, BF)],
             call=lambda n, rows, skip, scales, r, e: n.npu_moe_finalize_routing(
                 rows, skip, None, None, scales, r, e)),
        Case("npu_moe_compute_expert_tokens", lambda: (i32(T * K),), [((E,), I32)], E),
        Case("npu_grouped_matmul", lambda: (t(T * K, H), t(E, H, F), t(E, dtype=I64)),
             [((T * K, F), BF)], call=lambda n, x, w, g: n.npu_grouped_matmul(
                 [x], [w], group_list=g, split_item=3, group_type=0, group_list_type=1)),
        # -- quant
        Case("npu_dynamic_quant", lambda: (t(*th),), [(th, I8), ((T,), F32)]),
        Case("npu_dynamic_quant", lambda: (t(*th),), [((T, H // 8), I32), ((T,), F32)],
             dst_type=torch.quint4x2, id="dynamic_quant_int4"),
        Case("npu_quant_matmul", lambda: (t(T, H, dtype=I8), t(H, F, dtype=I8), t(F, dtype=F32)),
             [((T, F), BF)], output_dtype=torch.bfloat16),
        Case("npu_quant_matmul",
             lambda: (t(2, T, H, dtype=I8), t(H, F, dtype=I8), t(F, dtype=F32)),
             [((2, T, F), I8)], id="quant_matmul_batch_int8"),
        Case("npu_quantize", lambda: (t(*th, dtype=F32), t(H, dtype=F32)), [(th, I8)], None,
             torch.qint8, -1),
        Case("npu_quantize", lambda: (t(*th, dtype=F32), t(H, dtype=F32)), [(th, U8)], None,
             torch.quint8, -1, id="quantize_uint8"),
        Case("npu_dynamic_mx_quant", lambda: (t(*th),), [(th, E4M3), (mx, U8)],
             dst_type=torch.float8_e4m3fn),
        # the default dst_type, float4 e2m1: two values a byte
        Case("npu_dynamic_mx_quant", lambda: (t(*th),), [((T, H // 2), U8), (mx, U8)],
             id="dynamic_mx_quant_fp4"),
        Case("npu_dynamic_mx_quant_with_dual_axis", lambda: (t(*th),),
             [(th, E5M2), (mx, U8), (th, E5M2), ((T // 64, H, 2), U8)],
             dst_type=torch.float8_e5m2),
        Case("npu_dynamic_block_mx_quant", lambda: (t(*th),),
             [((T, H // 2), U8), (mx, U8), ((T // 64, H, 2), U8)]),
        Case("npu_dynamic_block_quant", lambda: (t(*th),), [(th, I8), ((T, H // 128), F32)]),
        Case("npu_grouped_dynamic_mx_quant", lambda: (t(*th), i32(E)),
             [(th, E5M2), ((T // 64 + E, H, 2), U8)]),
        Case("npu_kronecker_quant", lambda: (t(T, 16, 16), t(16, 16), t(16, 16)),
             [((T, 16, 2), I32), ((T,), F32)]),
        Case("npu_kronecker_quant", lambda: (t(T, 16, 16), t(16, 16), t(16, 16)),
             [((T, 128), U8), ((T, 4, 2), U8)], dst_dtype=296, id="kronecker_quant_mxfp4"),
        # -- inference attention: a decode step of B queries over S cached tokens
        Case("npu_fused_infer_attention_score", q_decode, [((B, 1, H), BF), ((B, N, 1, 1), F32)],
             input_layout="BSH", scale=D ** -0.5, softmax_lse_flag=True, **gqa),
        Case("npu_fused_infer_attention_score", q_bnsd, [(bsnd, BF), ((0,), F32)],
             input_layout="BNSD_BSND", id="fia_bnsd_bsnd", **gqa),
        Case("npu_fused_infer_attention_score", lambda: (t(*tn), t(T, NKV, D), t(T, NKV, D)),
             [(tn, BF), ((T, N, 1), F32)], input_layout="TND", actual_seq_lengths=[T],
             actual_seq_lengths_kv=[T], softmax_lse_flag=True, id="fia_tnd", **gqa),
        # a paged cache: (blocks, block size, kv heads * D) and a block table
        Case("npu_fused_infer_attention_score",
             lambda: (t(B, 1, H), t(16, 128, NKV * D), t(16, 128, NKV * D), i32(B, 8)),
             [((B, 1, H), BF), ((0,), F32)], call=lambda n, q, k, v, table: (
                 n.npu_fused_infer_attention_score(q, k, v, block_table=table, block_size=128,
                                                   actual_seq_lengths_kv=[S, S], **gqa)),
             id="fia_paged"),
        Case("npu_fused_infer_attention_score_v2", q_bnsd,
             [((B, N, S, D), BF), ((B, N, S, 1), F32)], num_query_heads=N,
             num_key_value_heads=NKV, input_layout="BNSD", return_softmax_lse=True),
        Case("npu_incre_flash_attention", q_decode, [((B, 1, H), BF)], **gqa),
        Case("npu_prompt_flash_attention", lambda: (t(B, N, S, D), t(B, N, S, D), t(B, N, S, D)),
             [(bsnd, BF)], num_heads=N, input_layout="BNSD_BSND"),
        Case("npu_scaled_masked_softmax", lambda: (t(B, N, S, S), t(B, 1, S, S, dtype=BOOL)),
             [((B, N, S, S), BF)], 0.125),
        Case("npu_scaled_masked_softmax_backward",
             lambda: (t(B, N, S, S), t(B, N, S, S), t(B, 1, S, S, dtype=BOOL)),
             [((B, N, S, S), BF)], 0.125, False),
        # the KV caches' writes and reads land in their Tensor(a!) arguments
        Case("npu_scatter_pa_kv_cache", lambda: (t(T, NKV, D), t(T, NKV, D),
                                                 t(16, 128, NKV, D), t(16, 128, NKV, D),
                                                 i32(T)), []),
        Case("npu_gather_pa_kv_cache", lambda: (t(16, 128, NKV, D), t(16, 128, NKV, D),
                                                i32(B, 8), i32(B), t(T, NKV, D),
                                                t(T, NKV, D)), []),
        Case("npu_scatter_nd_update_",
             lambda: (t(16, 128, NKV, D), i32(T, 1), t(T, 128, NKV, D)), []),
        Case("npu_attention_update",
             lambda: (t(N * T, dtype=F32), t(N * T, dtype=F32), t(N * T, D), t(N * T, D)),
             [((N * T, D), BF), ((N * T,), F32)],
             call=lambda n, l1, l2, o1, o2: n.npu_attention_update([l1, l2], [o1, o2], 1)),
        # update_type 0: no lse_out (an undefined tensor in the kernel, empty here)
        Case("npu_attention_update", lambda: (t(N * T, dtype=F32), t(N * T, D)),
             [((N * T, D), BF), ((0,), F32)],
             call=lambda n, lse, o: n.npu_attention_update([lse], [o], 0),
             id="attention_update_no_lse"),
    ]


CASES = _cases()


def test_every_operator_is_torch_npus_name_and_torch_ops_npus():
    """Each family's public name resolves in the stand-in torch_npu to its module's function,
    and torch.ops.npu has it (as torch_npu registers it there)."""
    seen = {}

    def run():
        import torch_npu
        for name, home in ops.OPERATORS.items():
            fn = getattr(torch_npu, name)
            seen[name] = (fn is getattr(importlib.import_module(home), name),
                          hasattr(torch.ops.npu, name))

    assert estimate(run).fits
    assert seen == {name: (True, True) for name in ops.OPERATORS}
    assert set(ops.OPERATORS) <= set(STANDIN)
    # the cases here, and those of tests/test_torchsim_ops_more.py for the rest
    assert {case.name for case in CASES} <= set(ops.OPERATORS)
    assert len(ops.OPERATORS) >= 30


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_each_operator_gives_torch_npus_outputs_and_their_bytes(case):
    seen = {}

    def run():
        import torch_npu
        inputs = case.make()
        before = allocated()
        torch_npu.npu.reset_peak_memory_stats()
        out = case.call(torch_npu, *inputs)
        seen["peak"] = npu_module.max_memory_allocated() - before
        seen["grown"] = allocated() - before
        # an in-place operator's results are its inputs: no new tensor
        seen["outs"] = [(tuple(o.shape), o.dtype) for o in _leaves(out)
                        if not any(o is i for i in inputs)]

    result = estimate(run, product="A2", workspace=False)
    assert result.fits and result.status == 0
    assert seen["outs"] == case.outs
    assert seen["grown"] == case.grown
    assert seen["peak"] == case.peak


def _leaves(out) -> list:
    if out is None:
        return []
    if isinstance(out, torch.Tensor):
        return [out]
    return [leaf for o in out for leaf in _leaves(o)]


def test_apply_rotary_pos_emb_rotates_query_and_key_in_place():
    """ApplyRotaryPosEmbNpuOpApi.cpp returns std::tie(query, key): the same tensors, no new
    memory (the meta registration's empty_like is not what the kernel does)."""
    seen = {}

    def run():
        import torch_npu
        q, k, c = t(B, S, N, D), t(B, S, NKV, D), t(1, S, 1, D)
        out = torch_npu.npu_apply_rotary_pos_emb(q, k, c, c, "BSND")
        seen["same"] = (out[0] is q, out[1] is k)

    assert estimate(run).fits
    assert seen["same"] == (True, True)


def run_training(forward, make_leaves):
    """Forward with autograd on leaves that need a gradient: the bytes the graph holds
    after the forward (beyond the leaves and what the script keeps: ``forward`` returns
    the loss), then backward; the leaves' gradients as (shape, dtype)."""
    seen = {}

    def run():
        import torch_npu
        leaves = make_leaves()
        before = allocated()
        loss = forward(torch_npu, *leaves)
        seen["held"] = allocated() - before
        loss.backward(torch.ones_like(loss))
        seen["grads"] = [None if x.grad is None else (tuple(x.grad.shape), x.grad.dtype)
                         for x in leaves]

    result = estimate(run, product="A2", workspace=False)
    assert result.fits and result.status == 0, result.stopped
    return seen


def _training() -> list:
    bsnd, rope = (B, S, N, D), (1, S, 1, D)
    return [
        # self, gamma: npu_rms_norm_backward(grad, self, gamma, result1): x and rstd (and the
        # y the script holds); dgamma comes float32 and autograd casts it to gamma's dtype
        ("rms_norm", lambda: (t(B, S, H, grad=True), t(H, grad=True)),
         lambda n, x, g: n.npu_rms_norm(x * 2, g)[0],
         [((B, S, H), BF), ((B, S, 1), F32), ((B, S, H), BF)], [((B, S, H), BF), ((H,), BF)]),
        # self, r1, r2: npu_rotary_mul_backward(grad, self, r1, r2, ...): x, cos, sin
        ("rotary_mul", lambda: (t(*bsnd, grad=True), t(*rope, grad=True), t(*rope, grad=True)),
         lambda n, x, c, s: n.npu_rotary_mul(x * 2, c * 1, s * 1),
         [(bsnd, BF), (rope, BF), (rope, BF), (bsnd, BF)], [(bsnd, BF), (rope, BF), (rope, BF)]),
        # self: npu_swiglu_backward(grad, self, dim): the twice as wide input
        ("swiglu", lambda: (t(T, 2 * F, grad=True),), lambda n, x: n.npu_swiglu(x * 2),
         [((T, 2 * F), BF), ((T, F), BF)], [((T, 2 * F), BF)]),
        # self: npu_fast_gelu_backward(grad, self), for both names
        ("npu_fast_gelu", lambda: (t(T, H, grad=True),), lambda n, x: n.npu_fast_gelu(x * 2),
         [((T, H), BF), ((T, H), BF)], [((T, H), BF)]),
        ("fast_gelu", lambda: (t(T, H, grad=True),), lambda n, x: n.fast_gelu(x * 2),
         [((T, H), BF), ((T, H), BF)], [((T, H), BF)]),
        # _npu_format_cast: self: grad: nothing kept
        ("format_cast", lambda: (t(H, H, grad=True),), lambda n, x: n.npu_format_cast(x * 2, 29),
         [((H, H), BF)], [((H, H), BF)]),
        # npu_confusion_transpose_backward(grad, perm, self.sym_sizes(), ...): sizes only
        ("confusion_transpose", lambda: (t(2, 3, 4, 6, dtype=F32, grad=True),),
         lambda n, x: n.npu_confusion_transpose(x * 2, (0, 2, 1, 3), (2, 4, 18), True),
         [((2, 4, 18), F32)], [((2, 3, 4, 6), F32)]),
        # tokens: npu_moe_token_permute_grad_v2(grad, result1, ...): sorted_indices, not the
        # tokens (the script drops sorted_indices)
        ("token_permute", lambda: (t(T, H, grad=True), t(T, K, dtype=I32)),
         lambda n, x, i: n.npu_moe_token_permute(x * 2, i)[0],
         [((T * K, H), BF), ((T * K,), I32)], [((T, H), BF), None]),
        # x: npu_scaled_masked_softmax_backward(grad, result, mask, ...): the output, though
        # the script keeps only its sum (whose gradient needs no values)
        ("scaled_masked_softmax", lambda: (t(B, N, S, S, grad=True),
                                           t(B, 1, S, S, dtype=BOOL)),
         lambda n, x, m: n.npu_scaled_masked_softmax(x * 2, m, 0.125).sum(),
         [((B, N, S, S), BF), ((), BF)], [((B, N, S, S), BF), None]),
    ]


TRAINING = _training()


@pytest.mark.parametrize("make, forward, held, grads", [c[1:] for c in TRAINING],
                         ids=[c[0] for c in TRAINING])
def test_autograd_keeps_what_torch_npus_derivatives_keep(make, forward, held, grads):
    """Between forward and backward the graph holds what op-plugin's derivatives.yaml
    saves (each forward's inputs are intermediates, freed unless kept), and the backward
    gives each leaf its gradient."""
    seen = run_training(forward, make)
    assert seen["held"] == blocks(*held)
    assert seen["grads"] == grads


@pytest.mark.parametrize("probs, cann, kept", [
    (False, None, False),      # CANN 9.1.0 (the default), no probs: nothing large kept
    (True, None, True),        # probs given: permuted_tokens kept
    (False, "8.5.0", True),    # a CANN older than 9.1.0 keeps it too
])
def test_token_unpermute_keeps_the_permuted_tokens_only_where_torch_npu_does(probs, cann,
                                                                             kept):
    """MoeTokenUnpermuteKernelNpuOpApi.cpp need_save_permuted_tokens: probs given, CANN
    before 9.1.0, or Ascend950."""
    seen = {}

    def run():
        import torch_npu
        leaf = t(T * K, H, grad=True)
        sorted_indices = t(T * K, dtype=I32)
        weights = t(T, K, grad=True) if probs else None
        before = allocated()
        out = torch_npu.npu_moe_token_unpermute(leaf * 2, sorted_indices, weights)
        seen["held"] = allocated() - before
        out.backward(torch.ones_like(out))
        seen["grads"] = [tuple(x.grad.shape) for x in (leaf, weights) if x is not None]

    assert estimate(run, product="A2", workspace=False, cann=cann).fits
    rows = T if probs else T * K
    permuted = blocks(((T * K, H), BF)) if kept else 0
    assert seen["held"] == blocks(((rows, H), BF)) + permuted
    assert seen["grads"] == ([(T * K, H), (T, K)] if probs else [(T * K, H)])


def test_grouped_matmul_split_items_group_types_and_packed_weights():
    """GroupedMatmulKernelNpuOpApi.cpp: one output per x (split_item 0) or per group
    (a List group_list is read), one concatenated (2/3), per weight with K split
    (group_type 2); int32 weights hold 8 int4 values."""
    seen = {}

    def run():
        import torch_npu
        gmm = torch_npu.npu_grouped_matmul
        xs = [t(64, H), t(32, H)]
        ws = [t(H, F), t(H, 2 * F)]
        seen["per_x"] = flat(gmm(xs, ws, split_item=0, group_type=-1))
        seen["concat"] = flat(gmm(xs, [ws[0], ws[0]], split_item=2, group_type=-1))
        seen["list"] = flat(gmm([t(96, H)], ws, group_list=[64, 96], split_item=1))
        seen["k_split"] = flat(gmm([t(96, H)], [t(E, H, F)], group_list=t(E, dtype=I64),
                                   split_item=0, group_type=2))
        seen["k_split_3"] = flat(gmm([t(96, H)], [t(H, F)], group_list=t(E, dtype=I64),
                                     split_item=3, group_type=2))
        seen["int4"] = flat(gmm([t(96, H, dtype=I8)], [t(E, H, F // 8, dtype=I32)],
                                group_list=t(E, dtype=I64), split_item=3, group_type=0,
                                output_dtype=torch.bfloat16))

    assert estimate(run, workspace=False).fits
    assert seen["per_x"] == [((64, F), BF), ((32, 2 * F), BF)]
    assert seen["concat"] == [((96, F), BF)]
    assert seen["list"] == [((64, F), BF), ((32, 2 * F), BF)]
    assert seen["k_split"] == [((96, F), BF)] * E
    assert seen["k_split_3"] == [((E, 96, F), BF)]
    assert seen["int4"] == [((96, F), BF)]


def test_grouped_matmul_refuses_what_torch_npu_refuses_and_stops_on_tensor_rows():
    def call(**kwargs):
        def run():
            import torch_npu
            torch_npu.npu_grouped_matmul([t(96, H)], [t(E, H, F)], group_list=t(E, dtype=I64),
                                         **kwargs)
        return run

    # the tensor overload's check: group_type must be given
    with pytest.raises(RuntimeError, match="Requires manual passing group_type"):
        estimate(call(split_item=3))
    # a group per output with a tensor group_list: the rows are its values
    result = estimate(call(split_item=0, group_type=0))
    assert result.status == 1 and "npu_grouped_matmul" in result.stopped


def test_init_routing_v2_refuses_the_quant_modes_it_does_not_model():
    def run():
        import torch_npu
        torch_npu.npu_moe_init_routing_v2(t(T, H), t(T, K, dtype=I32), expert_num=E,
                                          quant_mode=2)

    with pytest.raises(RuntimeError, match="quant_mode 2 is not modelled"):
        estimate(run)


def test_the_workspace_table_covers_the_operators_a_tiling_sizes():
    def run():
        import torch_npu
        x = t(T, 2 * F)
        torch_npu.npu_swiglu(x)
        torch_npu.npu_add_rms_norm(x, x, t(2 * F))
        torch_npu.npu_moe_compute_expert_tokens(t(T * K, dtype=I32), E)

    result = estimate(run, task_queue=2)
    table = WorkspaceTable()
    assert not {"npu_swiglu", "npu_add_rms_norm", "npu_moe_compute_expert_tokens"} & set(
        result.uncovered)
    assert table.size("npu_add_rms_norm", (), None) == 16 * MiB + 256
    assert table.size("npu_swiglu", (), None) == 16 * MiB
    assert table.size("npu_moe_gating_top_k_softmax", (), None) == 0
    # 16 MiB + experts * 48 cores * 4 bytes
    assert table.size("npu_moe_compute_expert_tokens", (None, E), None) == 16 * MiB + E * 192
    assert result.workspace_largest_request == 16 * MiB + E * 192
    assert table.size("npu_fused_infer_attention_score", (), None) is None


def test_an_llm_block_trains_with_the_peak_by_hand():
    """rms_norm -> q, k, v linear -> npu_rotary_mul -> npu_fusion_attention -> o-proj ->
    rms_norm -> SwiGLU MLP, in bfloat16; B=1, S=1024, N=8, D=128 (H=1024), F=2048.

    A (1, 1024, 1024) activation is 2 MiB: ``a`` = block(2 MiB). At the end of the forward
    the graph and the script hold (beyond the weights, x, cos and sin):
      10 a: h (kept by the q/k/v mm), q and k before the rotation (kept by npu_rotary_mul),
            v, q and k rotated, the attention output (kept by npu_fusion_attention and the
            o-proj), r = x + o (kept by the second rms_norm), its norm n2 (kept by the
            gate-up mm) and the output;
      the gate-up output (1024, 4096) 8 MiB (kept by npu_swiglu), the SwiGLU output 4 MiB
      (kept by the down mm); two rstd (1, 1024, 1) float32 4 KiB; softmax_max and
      softmax_sum (1, 8, 1024, 8) float32 256 KiB each.
    The forward's peak is that + the down projection (2 MiB), before ``out = r + down``
    frees it. The run's peak is in the backward, at the SwiGLU gradient: what the forward
    held, + dy (2 MiB), the down mm's two gradients (grad act 4 MiB, grad wd 4 MiB; the SwiGLU
    output it kept is freed) + npu_swiglu_backward's 8 MiB."""
    B_, S_, N_, D_, F_ = 1, 1024, 8, 128, 2048
    H_ = N_ * D_
    seen = {}

    def run():
        import torch_npu
        linear = torch.nn.functional.linear
        g1, g2 = t(H_, grad=True), t(H_, grad=True)
        wq, wk, wv, wo = (t(H_, H_, grad=True) for _ in range(4))
        wgu, wd = t(2 * F_, H_, grad=True), t(H_, F_, grad=True)
        cos, sin = t(1, S_, 1, D_), t(1, S_, 1, D_)
        x = t(B_, S_, H_)
        base = allocated()
        torch_npu.npu.reset_peak_memory_stats()
        h = torch_npu.npu_rms_norm(x, g1)[0]
        q = torch_npu.npu_rotary_mul(linear(h, wq).view(B_, S_, N_, D_), cos, sin)
        k = torch_npu.npu_rotary_mul(linear(h, wk).view(B_, S_, N_, D_), cos, sin)
        v = linear(h, wv).view(B_, S_, N_, D_)
        a = torch_npu.npu_fusion_attention(q, k, v, N_, "BSND", scale=D_ ** -0.5)[0]
        r = x + linear(a.view(B_, S_, H_), wo)
        n2 = torch_npu.npu_rms_norm(r, g2)[0]
        out = r + linear(torch_npu.npu_swiglu(linear(n2, wgu)), wd)
        seen["forward_peak"] = npu_module.max_memory_allocated() - base
        seen["held"] = allocated() - base
        out.backward(torch.ones_like(out))
        seen["grads"] = [tuple(p.grad.shape) for p in (g1, g2, wq, wk, wv, wo, wgu, wd)]

    result = estimate(run, product="A2", workspace=False)
    assert result.fits
    a = block(2 * MiB)
    stats = 2 * block(1024 * 4) + 2 * block(8 * 1024 * 8 * 4)
    held = 10 * a + block(8 * MiB) + block(4 * MiB) + stats
    assert seen["held"] == held
    assert seen["forward_peak"] == held + a
    weights = 2 * block(H_ * 2) + 4 * a + block(8 * MiB) + block(4 * MiB)
    inputs = 2 * block(S_ * D_ * 2) + a
    dy, grad_act, grad_wd, act, grad_gate_up = a, block(4 * MiB), block(4 * MiB), block(
        4 * MiB), block(8 * MiB)
    backward = held + dy + grad_act + grad_wd - act + grad_gate_up
    assert result.peak_allocated == weights + inputs + backward
    assert seen["grads"] == [(H_,), (H_,), *[(H_, H_)] * 4, (2 * F_, H_), (H_, F_)]


def test_an_moe_block_runs_with_the_peak_by_hand():
    """Gating top-k softmax -> init_routing -> compute_expert_tokens -> grouped_matmul ->
    finalize_routing, inference, in bfloat16: 1024 tokens, H=1024, 8 experts, top-2, each
    expert (H, H).

    Held from before the block: x (1024, 1024) 2 MiB, the router (8, 1024) 16 KiB and the
    experts' weights (8, 1024, 1024) 16 MiB. Made in order:
      logits (1024, 8) 16 KiB; y (1024, 2) 4 KiB, expert_idx and row_idx (1024, 2) int32
      8 KiB each; expanded_x (2048, 1024) 4 MiB, expanded_row_idx and expanded_expert_idx
      (2048,) int32 8 KiB each; the expert token counts (8,) int32 and as int64 (the group
      list); the experts' output (2048, 1024) 4 MiB; the finalised (1024, 1024) 2 MiB.
    Nothing is freed before the end (the script holds every result), so the peak is their
    sum: 4 MiB + 4 MiB + 2 MiB and the small ones."""
    T_, H_, E_, K_ = 1024, 1024, 8, 2
    seen = {}

    def run():
        import torch_npu
        x, router, experts = t(T_, H_), t(E_, H_), t(E_, H_, H_)
        with torch.no_grad():
            base = allocated()
            torch_npu.npu.reset_peak_memory_stats()
            logits = torch.nn.functional.linear(x, router)
            y, expert_idx, row_idx = torch_npu.npu_moe_gating_top_k_softmax(logits, None, K_)
            expanded_x, expanded_row_idx, expanded_expert_idx = (
                torch_npu.npu_moe_init_routing(x, row_idx, expert_idx, T_))
            counts = torch_npu.npu_moe_compute_expert_tokens(expanded_expert_idx, E_)
            group_list = counts.to(torch.int64)
            hidden = torch_npu.npu_grouped_matmul(
                [expanded_x], [experts], group_list=group_list, split_item=2, group_type=0,
                group_list_type=0)[0]
            out = torch_npu.npu_moe_finalize_routing(hidden, x, None, None, y,
                                                      expanded_row_idx, expanded_expert_idx)
            seen["peak"] = npu_module.max_memory_allocated() - base
            seen["shapes"] = [tuple(o.shape) for o in (hidden, out)]

    result = estimate(run, product="A2", workspace=False)
    assert result.fits
    small = (block(T_ * E_ * 2) + block(T_ * K_ * 2) + 2 * block(T_ * K_ * 4)
             + 2 * block(T_ * K_ * 4) + block(E_ * 4) + block(E_ * 8))
    assert seen["peak"] == 2 * block(4 * MiB) + block(2 * MiB) + small
    assert seen["shapes"] == [(T_ * K_, H_), (T_, H_)]
    before = block(2 * MiB) + block(E_ * H_ * 2) + block(16 * MiB)
    assert result.peak_allocated == before + seen["peak"]
