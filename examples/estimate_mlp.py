"""A torch_npu training script, written as for the NPU, that ``ascend-memsim estimate`` runs
unchanged on the CPU with fake tensors (no torch_npu, no CANN, no device memory):

    ascend-memsim estimate --product A2 examples/estimate_mlp.py
    ascend-memsim estimate --product A2 --capacity 2GiB examples/estimate_mlp.py
    ascend-memsim estimate --product A2 --bisect examples/estimate_mlp.py
    ascend-memsim estimate --product A2 --sweep examples/estimate_mlp.py -- --hidden 4096

A multi-layer perceptron with AdamW and mixed precision (``torch_npu.npu.amp``), two steps.
The statistics it prints (``max_memory_allocated`` and ``max_memory_reserved``) are the
simulated device's; on an NPU the same script prints the real ones.
"""

import argparse

import torch
import torch_npu

parser = argparse.ArgumentParser()
parser.add_argument("--hidden", type=int, default=8192)
parser.add_argument("--layers", type=int, default=4)
parser.add_argument("--batch", type=int, default=64)
parser.add_argument("--steps", type=int, default=2)
args = parser.parse_args()

device = torch.device("npu:0")
torch_npu.npu.set_device(device)
layers = []
for _ in range(args.layers):
    layers += [torch.nn.Linear(args.hidden, args.hidden), torch.nn.GELU()]
model = torch.nn.Sequential(*layers).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
scaler = torch_npu.npu.amp.GradScaler()
print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters")

for step in range(args.steps):
    x = torch.randn(args.batch, args.hidden, device=device)
    with torch_npu.npu.amp.autocast(dtype=torch.float16):
        loss = model(x).float().pow(2).mean()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    torch_npu.npu.synchronize()
    print(f"step {step}: max allocated {torch_npu.npu.max_memory_allocated() / 2**20:.0f} MiB, "
          f"max reserved {torch_npu.npu.max_memory_reserved() / 2**20:.0f} MiB")
