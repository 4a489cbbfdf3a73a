"""A training loop with Hugging Face Accelerate, which picks the NPU when torch_npu is
installed (``Accelerator().device`` is ``npu``), as accelerate's examples write it.

    ascend-memsim estimate --product A2 examples/gallery/accelerate_loop.py
"""

import torch
import torch_npu  # noqa: F401
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset


def main():
    accelerator = Accelerator(mixed_precision="bf16")
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(),
                                torch.nn.Linear(4096, 10))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = TensorDataset(torch.randn(256, 1024), torch.randint(0, 10, (256,)))
    loader = DataLoader(data, batch_size=32, shuffle=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
    print(f"device {accelerator.device}; max allocated "
          f"{torch.npu.max_memory_allocated() >> 20} MiB")


if __name__ == "__main__":
    main()
