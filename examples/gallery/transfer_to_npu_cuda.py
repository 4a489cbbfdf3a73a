"""A CUDA training script moved to Ascend with the one line Ascend's migration guide gives:
``import torch_npu.contrib.transfer_to_npu``. Every ``cuda`` below runs on the NPU.

    ascend-memsim estimate --product A2 examples/gallery/transfer_to_npu_cuda.py
"""

import torch
import torch_npu  # noqa: F401
from torch_npu.contrib import transfer_to_npu  # noqa: F401


def main():
    assert torch.cuda.is_available()
    model = torch.nn.Sequential(torch.nn.Linear(2048, 8192), torch.nn.GELU(),
                                torch.nn.Linear(8192, 2048)).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    scaler = torch.cuda.amp.GradScaler()
    for _ in range(2):
        x = torch.randn(16, 2048, device="cuda")
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x).pow(2).mean()
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    print(f"cuda max allocated {torch.cuda.max_memory_allocated() >> 20} MiB")


if __name__ == "__main__":
    main()
