"""A decoder block written with torch_npu's fused operators, as Ascend's LLM stacks write
it (MindSpeed, transformers' NPU paths): ``npu_rms_norm``, ``npu_rotary_mul``,
``npu_fusion_attention`` and ``npu_swiglu``, trained in bfloat16.

    ascend-memsim estimate --product A2 examples/gallery/llm_block.py
"""

import torch
import torch.nn as nn
import torch_npu


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return torch_npu.npu_rms_norm(x, self.weight, epsilon=self.eps)[0]


class Block(nn.Module):
    def __init__(self, hidden=2048, heads=16, ffn=5632):
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.attn_norm, self.mlp_norm = RMSNorm(hidden), RMSNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden, bias=False)
        self.o = nn.Linear(hidden, hidden, bias=False)
        self.gate_up = nn.Linear(hidden, 2 * ffn, bias=False)
        self.down = nn.Linear(ffn, hidden, bias=False)

    def forward(self, x, cos, sin):
        b, s, h = x.shape
        q, k, v = self.qkv(self.attn_norm(x)).view(b, s, 3, self.heads, self.head_dim).unbind(2)
        q, k = torch_npu.npu_rotary_mul(q, cos, sin), torch_npu.npu_rotary_mul(k, cos, sin)
        attn = torch_npu.npu_fusion_attention(
            q, k, v, self.heads, "BSND", scale=self.head_dim ** -0.5, sparse_mode=2,
            atten_mask=torch.ones(2048, 2048, dtype=torch.bool, device=x.device).triu(1))[0]
        x = x + self.o(attn.reshape(b, s, h))
        return x + self.down(torch_npu.npu_swiglu(self.gate_up(self.mlp_norm(x))))


def main():
    torch.npu.set_device(0)
    block = Block().npu().to(torch.bfloat16)
    optimizer = torch.optim.AdamW(block.parameters(), lr=1e-4)
    b, s = 2, 2048
    cos = torch.randn(1, s, 1, block.head_dim, dtype=torch.bfloat16, device="npu")
    sin = torch.randn(1, s, 1, block.head_dim, dtype=torch.bfloat16, device="npu")
    for step in range(2):
        x = torch.randn(b, s, 2048, dtype=torch.bfloat16, device="npu", requires_grad=True)
        loss = block(x, cos, sin).float().pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        print(f"step {step}: loss {loss.item():.3f}, max allocated "
              f"{torch.npu.max_memory_allocated() >> 20} MiB")


if __name__ == "__main__":
    main()
