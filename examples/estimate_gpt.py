"""A GPT-style decoder built from a config (no weights downloaded), trained for a few steps
as a torch_npu script: ``ascend-memsim estimate`` runs it unchanged on fake tensors.

    ascend-memsim estimate --product A2 examples/estimate_gpt.py --size 125M
    ascend-memsim estimate --product A2 examples/estimate_gpt.py --size 1B --checkpointing
    ascend-memsim estimate --product A2 --bisect examples/estimate_gpt.py --size 1B

``--size`` picks a config (125M: GPT-2 small; 1B; 7B: 32 layers of width 4096),
``--layers`` overrides its depth (the benchmark traces a 7B model's width with a few layers),
``--checkpointing`` recomputes each block's activations in the backward pass. bf16 autocast,
AdamW. Attention is ``F.scaled_dot_product_attention``, which torch_npu (and the estimate,
on A2, A3 and the 950) runs as its fused ``npu_fusion_attention``: no (batch, heads, context,
context) scores are kept for the backward pass, only the output and two float32 statistics
per query row.
"""

import argparse
import math

import torch
import torch.nn.functional as F
import torch_npu
from torch import nn
from torch.utils.checkpoint import checkpoint

CONFIGS = {  # width, heads, layers, vocabulary, context
    "125M": (768, 12, 12, 50257, 1024),
    "1B": (2048, 16, 18, 50257, 2048),
    "7B": (4096, 32, 32, 32000, 2048),
}


class Block(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.fc, self.out = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = (y.view(b, t, self.heads, c // self.heads).transpose(1, 2)
                   for y in self.qkv(self.ln1(x)).split(c, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, width: int, heads: int, layers: int, vocab: int, context: int,
                 checkpointing: bool = False) -> None:
        super().__init__()
        self.checkpointing = checkpointing
        self.tok, self.pos = nn.Embedding(vocab, width), nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.tok.weight      # tied, as GPT-2's

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.checkpointing else block(x)
        return self.head(self.ln(x))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", choices=sorted(CONFIGS), default="125M")
    parser.add_argument("--layers", type=int, help="override the config's depth")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--context", type=int, help="override the config's context")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--checkpointing", action="store_true")
    args = parser.parse_args()

    width, heads, layers, vocab, context = CONFIGS[args.size]
    layers = args.layers or layers
    context = args.context or context
    device = torch.device("npu:0")
    torch_npu.npu.set_device(device)
    model = GPT(width, heads, layers, vocab, context, args.checkpointing).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    params = sum(p.numel() for p in model.parameters())
    print(f"GPT {args.size}: {layers} layers, {params / 1e9:.2f}B parameters, "
          f"batch {args.batch} x {context} tokens")
    for step in range(args.steps):
        idx = torch.randint(0, vocab, (args.batch, context), device=device)
        with torch.autocast("npu", dtype=torch.bfloat16):
            logits = model(idx)
        loss = F.cross_entropy(logits.float().view(-1, vocab), idx.view(-1))
        del logits
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        print(f"step {step}: max allocated "
              f"{torch_npu.npu.max_memory_allocated() / 2**30:.2f} GiB, max reserved "
              f"{torch_npu.npu.max_memory_reserved() / 2**30:.2f} GiB")
    assert math.isfinite(params)


if __name__ == "__main__":
    main()
