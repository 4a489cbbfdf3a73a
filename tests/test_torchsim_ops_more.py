"""The nine of the 40 most-called torch_npu fused operators modelled last (torchsim/ops/):
the MC2 communication + matmul operators (``comm_matmul``), DeepSeek's sparse attention
and vllm-ascend's sparse attention score (``sparse_attention``), the int4 weight packing
(``quant``) and MLA's KV cache write (``infer_attention``): their outputs and the device
memory they take, what autograd keeps and the gradients, the shapes each rank gets under a
distributed estimate, and the inputs their kernels refuse.

Figures by hand: torch_npu's caching allocator makes each storage a block of its bytes + 32,
rounded up to 512 (:func:`block`); ``workspace=False`` throughout."""

import importlib
import sys
import textwrap
import types

import pytest

torch = pytest.importorskip("torch", reason="torchsim runs scripts on torch's fake tensors; "
                                            "install the torch extra")

from test_torchsim_ops import allocated, block, blocks, t  # noqa: E402  (the same rules)

from ascend_memsim.torchsim import estimate, estimate_ranks, ops  # noqa: E402
from ascend_memsim.torchsim.torch_npu import OPERATORS as STANDIN  # noqa: E402
from ascend_memsim.torchsim.torch_npu import npu as npu_module  # noqa: E402

BF, F16, F32 = torch.bfloat16, torch.float16, torch.float32
I32, I64 = torch.int32, torch.int64
E4M3 = torch.float8_e4m3fn
#: batch, sequence, query heads, head size, sparse count (the indexer's top-k)
B, S, N, D, TOPK = 2, 64, 8, 128, 16
#: the tensor-parallel matmul: rows per rank, K, N, and the world size passed
M, KD, ND, WS = 64, 256, 128, 4
#: the expert-parallel group: 8 ranks, 2 experts per rank, so 16 counts
EP, E = 8, 2

#: the operators this file covers (the other families: tests/test_torchsim_ops.py)
NEW = {"npu_all_gather_base_mm", "npu_mm_reduce_scatter_base", "npu_alltoallv_gmm",
       "npu_gmm_alltoallv", "npu_convert_weight_to_int4pack", "npu_kv_rmsnorm_rope_cache",
       "npu_lightning_indexer", "npu_lightning_indexer_grad", "npu_sparse_flash_attention",
       "npu_sparse_flash_attention_grad", "npu_sparse_attention_score"}


def i32(*shape: int) -> torch.Tensor:
    return t(*shape, dtype=I32)


def _leaves(out) -> list:
    if out is None:
        return []
    if isinstance(out, torch.Tensor):
        return [out]
    return [leaf for o in out for leaf in _leaves(o)]


class Case:
    """One call of torch_npu.<name> on the inputs ``make`` gives, then ``extra``
    positional and ``kw`` keyword arguments (or ``call(torch_npu, *inputs)``); its outputs
    as (shape, dtype) (None where torch_npu gives None), and the bytes they leave
    allocated, which are also the call's peak."""

    def __init__(self, name, make, outs, *extra, call=None, id=None, **kw):
        self.name, self.make, self.outs, self.id = name, make, outs, id or name
        self.call = call or (lambda n, *inputs: getattr(n, name)(*inputs, *extra, **kw))
        self.grown = blocks(*[o for o in outs if o is not None])


def _cases() -> list:
    bsnd, bs1d = (B, S, N, D), (B, S, 1, D)
    indexer = lambda: (t(*bsnd), t(*bs1d), t(B, S, N))  # noqa: E731
    sfa = lambda: (t(*bsnd), t(*bs1d), t(*bs1d), i32(B, S, 1, TOPK))  # noqa: E731
    tp = lambda: (t(M, KD), t(KD, ND))  # noqa: E731
    counts = [32] * (E * EP)
    return [
        # -- communication + matmul: the world size is the argument's
        Case("npu_all_gather_base_mm", tp, [((M * WS, ND), BF), ((M * WS, KD), BF)], "g", WS),
        # no gathered x1 kept: an empty tensor (the kernel's at::empty({0}))
        Case("npu_all_gather_base_mm", tp, [((M * WS, ND), BF), ((0,), BF)], "g", WS,
             gather_output=False, id="all_gather_base_mm_no_gather_out"),
        # gather_index 1: x2 is gathered, x1's rows stay
        Case("npu_all_gather_base_mm", lambda: (t(M, KD), t(KD, ND)),
             [((M, ND), BF), ((KD * WS, ND), BF)], "g", WS, gather_index=1,
             id="all_gather_base_mm_gather_x2"),
        Case("npu_mm_reduce_scatter_base", tp, [((M // WS, ND), BF)], "g", WS),
        # 16 counts of 32 sent (512 rows of gmm_x), 16 of 16 received: 256 rows
        Case("npu_alltoallv_gmm", lambda: (t(512, D), t(E, D, 256)),
             [((256, 256), BF), None, ((256, D), BF)], "g", EP, counts, [16] * 16,
             permute_out_flag=True),
        # the shared expert: mm_x (10, 64) @ mm_weight (32, 64)^T
        Case("npu_alltoallv_gmm", lambda: (t(512, D), t(E, 256, D), t(10, 64), t(32, 64)),
             [((256, 256), BF), ((10, 32), BF), None],
             call=lambda n, x, w, mx, mw: n.npu_alltoallv_gmm(
                 x, w, "g", EP, counts, [16] * 16, mm_x=mx, mm_weight=mw,
                 trans_gmm_weight=True, trans_mm_weight=True),
             id="alltoallv_gmm_shared_expert_transposed"),
        Case("npu_gmm_alltoallv", lambda: (t(512, 256), t(E, 256, D)),
             [((128, D), BF), None], "g", EP, counts, [8] * 16),
        # -- quant: 8 int4 values an int32; a 3-D weight gives (k, n / 8), as the kernel
        Case("npu_convert_weight_to_int4pack", lambda: (i32(KD, ND),), [((KD, ND // 8), I32)]),
        Case("npu_convert_weight_to_int4pack", lambda: (i32(E, KD, ND),),
             [((KD, ND // 8), I32)], id="int4pack_3d"),
        # -- MLA's cache write: the caches are written in place, k_rope and c_kv are new
        Case("npu_kv_rmsnorm_rope_cache",
             lambda: (t(B, 1, 1, 576), t(512), t(B, 1, 1, 64), t(B, 1, 1, 64),
                      t(B, dtype=I64), t(4, 128, 1, 64), t(4, 128, 1, 512)),
             [((B, 1, 1, 64), BF), ((B, 1, 1, 512), BF)], cache_mode="PA"),
        # a v of head size 128: the V2 kernel's Dk 192 and Dv 128
        Case("npu_kv_rmsnorm_rope_cache",
             lambda: (t(B, 1, 1, 192), t(192), t(B, 1, 1, 64), t(B, 1, 1, 64),
                      t(B, dtype=I64), t(4, 128, 1, 192), t(4, 128, 1, 128),
                      t(B, 1, 1, 128)),
             [((B, 1, 1, 192), BF), ((B, 1, 1, 128), BF)],
             call=lambda n, kv, g, c, s, i, kc, cc, v: n.npu_kv_rmsnorm_rope_cache(
                 kv, g, c, s, i, kc, cc, v=v, cache_mode="PA"), id="kv_rmsnorm_rope_cache_v2"),
        # -- sparse attention
        Case("npu_lightning_indexer", indexer, [((B, S, 1, TOPK), I32), ((0,), BF)],
             sparse_count=TOPK),
        Case("npu_lightning_indexer", indexer, [((B, S, 1, TOPK), I32), ((B, S, 1, TOPK), BF)],
             sparse_count=TOPK, return_value=True, id="lightning_indexer_values"),
        Case("npu_lightning_indexer", lambda: (t(256, N, D), t(256, 1, D), t(256, N)),
             [((256, 1, TOPK), I32), ((0,), BF)], sparse_count=TOPK, layout_query="TND",
             layout_key="TND", id="lightning_indexer_tnd"),
        Case("npu_lightning_indexer_grad",
             lambda: (t(*bsnd), t(*bs1d), t(B, S, 1, TOPK), i32(B, S, 1, TOPK), t(B, S, N)),
             [(bsnd, BF), (bs1d, BF), ((B, S, N), BF)]),
        Case("npu_sparse_flash_attention", sfa, [(bsnd, BF), ((0,), F32), ((0,), F32)], 0.1),
        # the statistics (B, N2, S, N1 / N2) float32
        Case("npu_sparse_flash_attention", sfa,
             [(bsnd, BF), ((B, 1, S, N), F32), ((B, 1, S, N), F32)], 0.1,
             return_softmax_lse=True, id="sparse_flash_attention_lse"),
        # TND: (N2, T, N1 / N2)
        Case("npu_sparse_flash_attention",
             lambda: (t(256, N, D), t(256, 1, D), t(256, 1, D), i32(256, 1, TOPK)),
             [((256, N, D), BF), ((1, 256, N), F32), ((1, 256, N), F32)], 0.1,
             layout_query="TND", layout_kv="TND", return_softmax_lse=True,
             id="sparse_flash_attention_tnd"),
        Case("npu_sparse_flash_attention_grad",
             lambda: (t(*bsnd), t(*bs1d), t(*bs1d), i32(B, S, 1, TOPK), t(*bsnd), t(*bsnd),
                      t(B, 1, S, N, dtype=F32), t(B, 1, S, N, dtype=F32)),
             [(bsnd, BF), (bs1d, BF), (bs1d, BF), ((0,), BF), ((0,), BF)], 0.1, 1),
        Case("npu_sparse_attention_score",
             lambda: (t(32, N, D), t(4, 128, 2, D), t(4, 128, 2, D), i32(2, 32, 16),
                      i32(2, 2), i32(2), i32(2)),
             [((32, N, D), BF)], call=lambda n, q, k, v, sel, table, lq, lk: (
                 n.npu_sparse_attention_score(q, k, v, sel, table, actual_seq_lengths=lq,
                                              actual_seq_lengths_kv=lk,
                                              num_key_value_heads=2))),
        # a float8 query (with its dequant scales and inner_precise 4) gives float16
        Case("npu_sparse_attention_score",
             lambda: (t(32, N, D, dtype=E4M3), t(4, 128, 2, D, dtype=E4M3),
                      t(4, 128, 2, D, dtype=E4M3), i32(2, 32, 16), i32(2, 2), i32(2), i32(2),
                      t(1, 1, 1, 1, dtype=F32)),
             [((32, N, D), F16)], call=lambda n, q, k, v, sel, table, lq, lk, scale: (
                 n.npu_sparse_attention_score(q, k, v, sel, table, actual_seq_lengths=lq,
                                              actual_seq_lengths_kv=lk, q_dequant_scale=scale,
                                              k_dequant_scale=scale, v_dequant_scale=scale,
                                              num_key_value_heads=2, inner_precise=4)),
             id="sparse_attention_score_fp8"),
    ]


CASES = _cases()


def test_every_new_operator_is_torch_npus_name_and_torch_ops_npus():
    """Each new public name resolves in the stand-in torch_npu to its family's function,
    and torch.ops.npu has it; each has a case below."""
    seen = {}

    def run():
        import torch_npu
        for name in NEW:
            home = ops.OPERATORS[name]
            seen[name] = (getattr(torch_npu, name) is getattr(importlib.import_module(home),
                                                              name),
                          hasattr(torch.ops.npu, name))

    assert estimate(run).fits
    assert seen == {name: (True, True) for name in NEW}
    assert NEW <= set(ops.OPERATORS) <= set(STANDIN)
    assert {case.name for case in CASES} == NEW


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
        seen["outs"] = [None if o is None else (tuple(o.shape), o.dtype)
                        for o in (out if isinstance(out, tuple) else (out,))
                        if not any(o is i for i in inputs)]

    result = estimate(run, product="A2", workspace=False)
    assert result.fits and result.status == 0
    assert seen["outs"] == case.outs
    assert seen["grown"] == seen["peak"] == case.grown


def test_kv_rmsnorm_rope_cache_returns_the_caches_themselves():
    """KvRmsNormRopeCacheNpuOpApi.cpp returns std::tie(k_cache, ckv_cache, k_rope, c_kv):
    the caches it wrote, not copies (the meta registration's empty_like is not what the
    kernel does)."""
    seen = {}

    def run():
        import torch_npu
        k_cache, ckv_cache = t(4, 128, 1, 64), t(4, 128, 1, 512)
        out = torch_npu.npu_kv_rmsnorm_rope_cache(
            t(B, 1, 1, 576), t(512), t(B, 1, 1, 64), t(B, 1, 1, 64), t(B, dtype=I64),
            k_cache, ckv_cache, cache_mode="PA")
        seen["same"] = (out[0] is k_cache, out[1] is ckv_cache)

    assert estimate(run).fits
    assert seen["same"] == (True, True)


def run_training(forward, make_leaves):
    """Forward with autograd on the leaves; the bytes the graph and the script hold after
    it (beyond the leaves: ``forward`` returns what the script keeps), then backward of
    ones; the leaves' gradients as (shape, dtype)."""
    seen = {}

    def run():
        import torch_npu
        leaves = make_leaves()
        before = allocated()
        out = forward(torch_npu, *leaves)
        seen["held"] = allocated() - before
        out.backward(torch.ones_like(out))
        seen["grads"] = [None if x.grad is None else (tuple(x.grad.shape), x.grad.dtype)
                         for x in leaves]

    result = estimate(run, product="A2", workspace=False)
    assert result.fits and result.status == 0, result.stopped
    return seen


def test_lightning_indexer_keeps_query_key_weights_and_the_indices():
    """derivatives.yaml: query, key, weights: npu_lightning_indexer_grad(query, key, grad,
    result0, weights, ...). After the forward on q*2, k*2, w*2 the graph holds the three
    doubled inputs and sparse_indices, and the script the values:
      q (2, 64, 8, 128) bf16 = 262,144 B; k (2, 64, 1, 128) = 32,768 B;
      w (2, 64, 8) = 2,048 B; indices (2, 64, 1, 16) int32 = 8,192 B;
      values (2, 64, 1, 16) bf16 = 4,096 B; each a block of its bytes + 32 up to 512."""
    seen = run_training(
        lambda n, q, k, w: n.npu_lightning_indexer(q * 2, k * 2, w * 2, sparse_count=TOPK,
                                                   return_value=True)[1],
        lambda: (t(B, S, N, D, grad=True), t(B, S, 1, D, grad=True), t(B, S, N, grad=True)))
    held = (block(262_144) + block(32_768) + block(2_048) + block(8_192) + block(4_096))
    assert seen["held"] == held
    assert seen["grads"] == [((B, S, N, D), BF), ((B, S, 1, D), BF), ((B, S, N), BF)]


def test_sparse_flash_attention_keeps_qkv_the_output_and_the_statistics():
    """derivatives.yaml: query, key, value, query_rope, key_rope:
    npu_sparse_flash_attention_grad(query, key, value, sparse_indices, grad, result0,
    result1, result2, ...). After the forward on q*2, k*2, v*2 (the indices are the
    script's) the graph holds:
      q and the output (2, 64, 8, 128) bf16, 262,144 B each; k and v (2, 64, 1, 128),
      32,768 B each; softmax_max and softmax_sum (2, 1, 64, 8) float32, 4,096 B each;
    the ropes, given, get their gradients too."""
    seen = run_training(
        lambda n, q, k, v, qr, kr, idx: n.npu_sparse_flash_attention(
            q * 2, k * 2, v * 2, idx, 0.1, query_rope=qr, key_rope=kr,
            return_softmax_lse=True)[0],
        lambda: (t(B, S, N, D, grad=True), t(B, S, 1, D, grad=True), t(B, S, 1, D, grad=True),
                 t(B, S, N, 64, grad=True), t(B, S, 1, 64, grad=True), i32(B, S, 1, TOPK)))
    assert seen["held"] == 2 * block(262_144) + 2 * block(32_768) + 2 * block(4_096)
    assert seen["grads"] == [((B, S, N, D), BF), ((B, S, 1, D), BF), ((B, S, 1, D), BF),
                             ((B, S, N, 64), BF), ((B, S, 1, 64), BF), None]


def test_only_the_outputs_derivatives_yaml_differentiates_need_a_gradient():
    """The indexer's sparse_indices (output_differentiability false) and the sparse
    attention's statistics (the formula names grad: one differentiable output) are not
    differentiable; sparse_values and attention_out are."""
    seen = {}

    def run():
        import torch_npu
        q, k = t(B, S, N, D, grad=True), t(B, S, 1, D, grad=True)
        idx, values = torch_npu.npu_lightning_indexer(q, k, t(B, S, N, grad=True),
                                                      sparse_count=TOPK, return_value=True)
        out, smax, ssum = torch_npu.npu_sparse_flash_attention(
            q, k, k, i32(B, S, 1, TOPK), 0.1, return_softmax_lse=True)
        seen["grad"] = [x.requires_grad for x in (idx, values, out, smax, ssum)]

    assert estimate(run).fits
    assert seen["grad"] == [False, True, True, False, False]


# -- under a distributed estimate ------------------------------------------------------------

@pytest.fixture
def shapes(monkeypatch):
    """``import ranks_probe; ranks_probe.shapes(*tensors)`` in a script notes the running
    rank's output shapes (None for None), one entry per rank."""
    noted = []
    probe = types.ModuleType("ranks_probe")
    probe.shapes = lambda *outs: noted.append([None if o is None else tuple(o.shape)
                                               for o in outs])
    monkeypatch.setitem(sys.modules, "ranks_probe", probe)
    return noted


def _script(tmp_path, text):
    path = tmp_path / "train.py"
    path.write_text(textwrap.dedent(text))
    return str(path)


TP = """
    import torch, torch.distributed as dist
    import torch_npu, ranks_probe
    dist.init_process_group("hccl")
    ws = dist.get_world_size()
    # the stand-in's process group has no get_hccl_comm_name: the group's name stands in
    hcom = dist.group.WORLD.group_name
    x = torch.empty(64, 256, dtype=torch.bfloat16, device="npu")
    w = torch.empty(256, 128, dtype=torch.bfloat16, device="npu")
    out, gathered = torch_npu.npu_all_gather_base_mm(x, w, hcom, ws)
    part = torch_npu.npu_mm_reduce_scatter_base(out, w.t().contiguous(), hcom, ws)
    ranks_probe.shapes(out, gathered, part)
"""


def test_tensor_parallel_matmuls_take_the_world_size_each_rank_gets(tmp_path, shapes):
    """Two ranks: all-gather gives each (64 * 2, 128) and the gathered (128, 256); the
    reduce-scatter of that (128, 128) @ (128, 256) gives each rank (128 / 2, 256)."""
    result = estimate_ranks(_script(tmp_path, TP), world_size=2, runtime_share=0,
                            workspace=False)
    assert [c.figures.estimate.status for c in result.classes] == [0] * len(result.classes)
    assert shapes == [[(128, 128), (128, 256), (64, 256)]] * 2


EP_SCRIPT = """
    import torch, torch.distributed as dist
    import torch_npu, ranks_probe
    dist.init_process_group("hccl")
    rank, ws = dist.get_rank(), dist.get_world_size()
    hcom = dist.group.WORLD.group_name
    experts = 2
    # each rank sends 8 tokens per (rank, expert) and receives rank + 1 from each
    send, recv = [8] * (experts * ws), [rank + 1] * (experts * ws)
    x = torch.empty(sum(send), 128, dtype=torch.bfloat16, device="npu")
    w_up = torch.empty(experts, 128, 256, dtype=torch.bfloat16, device="npu")
    w_down = torch.empty(experts, 256, 128, dtype=torch.bfloat16, device="npu")
    up, _, permuted = torch_npu.npu_alltoallv_gmm(x, w_up, hcom, ws, send, recv,
                                                  permute_out_flag=True)
    down, _ = torch_npu.npu_gmm_alltoallv(up, w_down, hcom, ws, recv, send)
    ranks_probe.shapes(up, permuted, down)
"""


def test_expert_parallel_gmms_give_each_rank_the_rows_its_counts_say(tmp_path, shapes):
    """Eight ranks, two experts each: rank r receives 16 * (r + 1) rows (its
    recv_counts), computes them, and gets back its 8 * 16 = 128 sent rows."""
    result = estimate_ranks(_script(tmp_path, EP_SCRIPT), world_size=EP, runtime_share=0,
                            workspace=False)
    assert [c.figures.estimate.status for c in result.classes] == [0] * len(result.classes)
    assert shapes == [[(16 * (r + 1), 256), (16 * (r + 1), 128), (128, 128)]
                      for r in range(EP)]


# -- what the kernels refuse ----------------------------------------------------------------

def _refused(call):
    def run():
        import torch_npu
        call(torch_npu)
    return run


@pytest.mark.parametrize("call, message", [
    (lambda n: n.npu_all_gather_base_mm(t(M, KD), t(KD, ND), "g", 3),
     r"world_size should be in \[2, 4, 8, 16, 32\]"),
    (lambda n: n.npu_mm_reduce_scatter_base(t(M, KD), t(ND, ND), "g", 2),
     "The K-axis in the two inputs of Matmul must be equal"),
    (lambda n: n.npu_mm_reduce_scatter_base(t(66, KD), t(KD, ND), "g", 4),
     "should be be divisible by world_size"),
    # quantisation needs a comm_mode other than ai_cpu below the 950
    (lambda n: n.npu_all_gather_base_mm(t(M, KD, dtype=torch.int8),
                                        t(KD, ND, dtype=torch.int8), "g", 2,
                                        x2_scale=t(ND, dtype=F32)),
     "When comm_mode is ai_cpu, quantization not supported"),
    (lambda n: n.npu_alltoallv_gmm(t(512, D), t(E, D, 256), "g", 2, [128] * 4, [64] * 4),
     "ep_world_size should be 8, 16, 32, 64 or 128"),
    (lambda n: n.npu_alltoallv_gmm(t(512, D), t(E, D, 256), "g", EP, [32] * 15, [16] * 16),
     "send_counts must hold e \\* ep_world_size = 16 entries"),
    (lambda n: n.npu_gmm_alltoallv(t(500, 256), t(E, 256, D), "g", EP, [32] * 16, [8] * 16),
     "gmm_x has 500 rows but the counts it sends sum to 512"),
    (lambda n: n.npu_convert_weight_to_int4pack(i32(KD, 12)),
     "weight last dim should be the multiple of 8, but it is 12"),
    (lambda n: n.npu_convert_weight_to_int4pack(t(KD, ND, dtype=F32)),
     "below Ascend 950 the weight must be int32"),
    (lambda n: n.npu_convert_weight_to_int4pack(t(KD, ND, dtype=torch.int8)),
     "weight dtype only support int32 and float32"),
    (lambda n: n.npu_kv_rmsnorm_rope_cache(t(B, 1, 576), t(512), t(B, 1, 1, 64),
                                           t(B, 1, 1, 64), t(B, dtype=I64),
                                           t(4, 128, 1, 64), t(4, 128, 1, 512)),
     "4D tensor expected for input kv"),
    (lambda n: n.npu_lightning_indexer(t(B, S, N, D), t(B, S, 1, D), t(B, S, N),
                                       sparse_count=0), "sparse count should be greater than 0"),
    (lambda n: n.npu_lightning_indexer(t(256, N, D), t(B, S, 1, D), t(256, N),
                                       layout_query="TND"),
     "layout_query and layout_key must be same"),
    (lambda n: n.npu_sparse_flash_attention(t(B, N, S, D), t(B, S, 1, D), t(B, S, 1, D),
                                            i32(B, S, 1, TOPK), 0.1, layout_query="BNSD"),
     "The layout of query only support BSND and TND, but got BNSD"),
    (lambda n: n.npu_sparse_attention_score(t(32, N, D), t(4, 128, 2, D), t(4, 128, 2, D),
                                            i32(2, 32, 16), i32(2, 2),
                                            actual_seq_lengths=i32(2),
                                            num_key_value_heads=2),
     "actual_seq_lengths_kv must be provided"),
    (lambda n: n.npu_sparse_attention_score(t(32, N, D, dtype=E4M3), t(4, 128, 2, D, dtype=E4M3),
                                            t(4, 128, 2, D, dtype=E4M3), i32(2, 32, 16),
                                            i32(2, 2), actual_seq_lengths=i32(2),
                                            actual_seq_lengths_kv=i32(2),
                                            num_key_value_heads=2, inner_precise=4),
     "q_dequant_scale must be provided for float8_e4m3fn input"),
], ids=["tp_world_size", "tp_k_axes", "tp_rows_not_divisible", "tp_quant_ai_cpu",
        "ep_world_size", "ep_counts", "ep_rows", "int4pack_last_axis", "int4pack_float_a2",
        "int4pack_dtype", "kv_dims", "indexer_sparse_count", "indexer_layouts", "sfa_layout",
        "sparse_score_lengths", "sparse_score_fp8_scales"])
def test_each_refuses_what_its_kernel_refuses(call, message):
    with pytest.raises(RuntimeError, match=message):
        estimate(_refused(call), workspace=False)


def test_on_the_950_int4pack_keeps_the_shape_and_quantised_mc2_takes_its_dtype():
    """Ascend 950: npu_convert_weight_to_b4pack keeps a 3-D float32 (float4) weight's shape,
    last axis / 8, in its dtype; a quantised all-gather matmul runs on the default
    comm_mode, bfloat16 out (float16 with an int64 x2_scale)."""
    seen = {}

    def run():
        import torch_npu
        packed = torch_npu.npu_convert_weight_to_int4pack(t(E, KD, ND, dtype=F32))
        int8 = dict(dtype=torch.int8)
        bf, _ = torch_npu.npu_all_gather_base_mm(t(M, KD, **int8), t(KD, ND, **int8), "g", 2,
                                                 x2_scale=t(ND, dtype=F32))
        half, _ = torch_npu.npu_all_gather_base_mm(t(M, KD, **int8), t(KD, ND, **int8), "g",
                                                   2, x2_scale=t(ND, dtype=I64))
        seen["outs"] = [(tuple(o.shape), o.dtype) for o in (packed, bf, half)]

    assert estimate(run, product="950PR", workspace=False).fits
    assert seen["outs"] == [((E, KD, ND // 8), F32), ((2 * M, ND), BF), ((2 * M, ND), F16)]


def test_the_workspace_table_sizes_the_new_operators_by_their_tilings():
    """16 MiB + the tilings' buffers (workspace_table.py), by hand:
      npu_lightning_indexer (A2): + 24 cube cores * 2,361,344 = 56,672,256;
      npu_sparse_flash_attention (D 128): per core 2 * (512*128*4 + 512*128*2 + 128*128*4
        + 512 + 512) + 4*512*576*2 + 4*128*4*2 = 919,552 + 2,359,296 + 4,096 = 3,282,944,
        * 24 = 78,790,656;
      npu_all_gather_base_mm (64, 256) @ (256, 128) bf16, 4 ranks, no gather_out: x2 in NZ
        256 * 128 * 2 = 65,536, + the gathered x1 64 * 256 * 2 * 4 = 131,072;
      npu_mm_reduce_scatter_base: 65,536 + the (64, 128) product 16,384;
      npu_alltoallv_gmm: 256 received rows * 128 * 2 = 65,536, twice without permute_out;
      npu_gmm_alltoallv: 512 rows * 128 * 2 = 131,072; the int4 packing: 0."""
    from ascend_memsim.torchsim.workspace_table import WorkspaceTable

    sizes = {}

    def run():
        import torch_npu as n
        table = WorkspaceTable()

        def note(name, args, out):
            sizes[name] = table.size(name, args, out)

        args = (t(M, KD), t(KD, ND), "g", WS)
        note("npu_all_gather_base_mm", args,
             n.npu_all_gather_base_mm(*args, gather_output=False))
        note("npu_mm_reduce_scatter_base", args, n.npu_mm_reduce_scatter_base(*args))
        args = (t(B, S, N, D), t(B, S, 1, D), t(B, S, N))
        note("npu_lightning_indexer", args, n.npu_lightning_indexer(*args, sparse_count=TOPK))
        args = (t(B, S, N, D), t(B, S, 1, D), t(B, S, 1, D), i32(B, S, 1, TOPK), 0.1)
        note("npu_sparse_flash_attention", args, n.npu_sparse_flash_attention(*args))
        args = (t(512, D), t(E, D, 256), "g", EP, [32] * 16, [16] * 16)
        note("npu_alltoallv_gmm", args, n.npu_alltoallv_gmm(*args))
        args = (t(512, 256), t(E, 256, D), "g", EP, [32] * 16, [8] * 16)
        note("npu_gmm_alltoallv", args, n.npu_gmm_alltoallv(*args))
        args = (i32(KD, ND),)
        note("npu_convert_weight_to_int4pack", args, n.npu_convert_weight_to_int4pack(*args))

    assert estimate(run, workspace=False).fits
    system = 16 * 1024 * 1024
    assert sizes == {
        "npu_all_gather_base_mm": system + 65_536 + 131_072,
        "npu_mm_reduce_scatter_base": system + 65_536 + 16_384,
        "npu_lightning_indexer": system + 56_672_256,
        "npu_sparse_flash_attention": system + 78_790_656,
        "npu_alltoallv_gmm": system + 2 * 65_536,
        "npu_gmm_alltoallv": system + 131_072,
        "npu_convert_weight_to_int4pack": 0,
    }
