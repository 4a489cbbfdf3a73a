"""torch_npu's most-called fused operators on the fake NPU, one family per module.

Each family defines its operators in torch's ``npu`` namespace (``torch.ops.npu.<name>``, as
torch_npu does) with op-plugin's schemas, a fake kernel giving the outputs' shapes and
dtypes, and, where op-plugin's ``derivatives.yaml`` has an entry, autograd that keeps what
torch_npu's generated node keeps and a backward operator; each module cites its sources
(Ascend/op-plugin at 517f2e7d0f202f38b76310706cb977ca2388ad21, the torch_npu 2.14.0 wheel's
``_meta_registrations.py``). The stand-in ``torch_npu`` resolves ``torch_npu.<name>`` from
:data:`OPERATORS` (the module's function of the same name). Which operators are modelled
and why: ``docs/reference/npu-operators.md``.

========================  ===============================================================
family                    operators
========================  ===============================================================
:mod:`.norm`              npu_rms_norm (+ _backward), npu_add_rms_norm
:mod:`.rotary`            npu_rotary_mul (+ _backward), npu_apply_rotary_pos_emb,
                          npu_interleave_rope
:mod:`.activation`        npu_swiglu (+ _backward), npu_clipped_swiglu, npu_fast_gelu
                          (+ _backward), fast_gelu, npu_gelu_mul
:mod:`.layout`            npu_format_cast, npu_format_cast\\_, npu_confusion_transpose
                          (+ _backward), npu_transpose, npu_transpose_batchmatmul
:mod:`.moe`               npu_moe_token_permute / _unpermute (+ their grads),
                          npu_moe_init_routing, _v2, npu_moe_gating_top_k_softmax,
                          npu_moe_finalize_routing, npu_moe_compute_expert_tokens,
                          npu_grouped_matmul
:mod:`.quant`             npu_dynamic_quant, npu_quant_matmul, npu_quantize, the MX and
                          block quantisations, npu_kronecker_quant,
                          npu_convert_weight_to_int4pack
:mod:`.rnn`               torch's fused GRU cell (meta kernels; nn.RNN, GRU, LSTM run)
:mod:`.infer_attention`   npu_fused_infer_attention_score (+ _v2),
                          npu_incre_flash_attention, npu_prompt_flash_attention,
                          npu_scaled_masked_softmax (+ _backward), the paged KV cache's
                          scatter and gather, npu_scatter_nd_update\\_,
                          npu_kv_rmsnorm_rope_cache, npu_attention_update
:mod:`.sparse_attention`  npu_lightning_indexer (+ _grad), npu_sparse_flash_attention
                          (+ _grad), vllm-ascend's npu_sparse_attention_score
:mod:`.comm_matmul`       npu_all_gather_base_mm, npu_mm_reduce_scatter_base,
                          npu_alltoallv_gmm, npu_gmm_alltoallv
========================  ===============================================================
"""

from __future__ import annotations

import importlib

import torch

__all__ = ["register_ops", "OPERATORS", "FAMILIES"]

#: the family modules, in the order they are registered
FAMILIES = ("norm", "rotary", "activation", "layout", "moe", "quant", "infer_attention",
            "sparse_attention", "comm_matmul")

_HOME = "ascend_memsim.torchsim.ops."

#: public ``torch_npu.<name>`` -> the module holding its function
OPERATORS: dict[str, str] = {
    name: _HOME + family
    for family, names in (
        ("norm", "npu_rms_norm npu_rms_norm_backward npu_add_rms_norm"),
        ("rotary", "npu_rotary_mul npu_rotary_mul_backward npu_apply_rotary_pos_emb "
                   "npu_interleave_rope"),
        ("activation", "npu_swiglu npu_swiglu_backward npu_clipped_swiglu npu_fast_gelu "
                       "npu_fast_gelu_backward fast_gelu npu_gelu_mul"),
        ("layout", "npu_format_cast npu_format_cast_ npu_confusion_transpose "
                   "npu_confusion_transpose_backward npu_transpose npu_transpose_batchmatmul"),
        ("moe", "npu_moe_token_permute npu_moe_token_permute_grad_v2 npu_moe_token_unpermute "
                "npu_moe_token_unpermute_grad_v2 npu_moe_init_routing npu_moe_init_routing_v2 "
                "npu_moe_gating_top_k_softmax npu_moe_finalize_routing "
                "npu_moe_compute_expert_tokens npu_grouped_matmul"),
        ("quant", "npu_dynamic_quant npu_quant_matmul npu_quantize npu_dynamic_mx_quant "
                  "npu_dynamic_mx_quant_with_dual_axis npu_dynamic_block_mx_quant "
                  "npu_dynamic_block_quant npu_grouped_dynamic_mx_quant npu_kronecker_quant "
                  "npu_convert_weight_to_int4pack"),
        ("infer_attention", "npu_fused_infer_attention_score "
                            "npu_fused_infer_attention_score_v2 npu_incre_flash_attention "
                            "npu_prompt_flash_attention npu_scaled_masked_softmax "
                            "npu_scaled_masked_softmax_backward npu_scatter_pa_kv_cache "
                            "npu_gather_pa_kv_cache npu_scatter_nd_update_ "
                            "npu_kv_rmsnorm_rope_cache npu_attention_update"),
        ("sparse_attention", "npu_lightning_indexer npu_lightning_indexer_grad "
                             "npu_sparse_flash_attention npu_sparse_flash_attention_grad "
                             "npu_sparse_attention_score"),
        ("comm_matmul", "npu_all_gather_base_mm npu_mm_reduce_scatter_base npu_alltoallv_gmm "
                        "npu_gmm_alltoallv"),
    )
    for name in names.split()
}

_libs: list = []


def register_ops() -> None:
    """Define every family's operators in torch's ``npu`` namespace (once per process: a
    torch library cannot define an operator twice)."""
    if _libs:
        return
    lib = torch.library.Library("npu", "FRAGMENT")
    for family in FAMILIES:
        importlib.import_module(f".{family}", __name__).register(lib)
    _libs.append(lib)
    # torch's own recurrent cells (the aten namespace): meta kernels they lack
    from .rnn import register_rnn

    register_rnn()
