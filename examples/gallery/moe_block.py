"""A mixture-of-experts layer routed with torch_npu's MoE operators, as Ascend's MoE stacks
route tokens at inference: gating with ``npu_moe_gating_top_k_softmax``, dispatch with
``npu_moe_init_routing``, the experts as one ``npu_grouped_matmul``, and
``npu_moe_finalize_routing`` to combine.

    ascend-memsim estimate --product A2 examples/gallery/moe_block.py
"""

import torch
import torch_npu


def main():
    tokens, hidden, ffn, experts, top_k = 4096, 2048, 1408, 16, 2
    dtype = torch.bfloat16
    router = torch.randn(hidden, experts, dtype=dtype, device="npu")
    w_up = torch.randn(experts, hidden, ffn, dtype=dtype, device="npu")
    w_down = torch.randn(experts, ffn, hidden, dtype=dtype, device="npu")
    with torch.inference_mode():
        x = torch.randn(tokens, hidden, dtype=dtype, device="npu")
        logits = x @ router
        weights, expert_ids, row_ids = torch_npu.npu_moe_gating_top_k_softmax(logits, k=top_k)
        routed, routed_rows, routed_experts = torch_npu.npu_moe_init_routing(
            x, row_ids, expert_ids, active_num=tokens)
        per_expert = torch_npu.npu_moe_compute_expert_tokens(routed_experts, experts)
        up = torch_npu.npu_grouped_matmul([routed], [w_up], group_list=per_expert,
                                          split_item=2, group_type=0, group_list_type=0)[0]
        down = torch_npu.npu_grouped_matmul([torch.nn.functional.silu(up)], [w_down],
                                            group_list=per_expert, split_item=2,
                                            group_type=0, group_list_type=0)[0]
        out = torch_npu.npu_moe_finalize_routing(down, None, None, None, weights,
                                                 routed_rows, expert_ids)
    print(f"{tuple(out.shape)}; max allocated {torch.npu.max_memory_allocated() >> 20} MiB")


if __name__ == "__main__":
    main()
