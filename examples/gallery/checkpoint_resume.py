"""Train, save a checkpoint, and resume from it, as a long job on an NPU does.

    ascend-memsim estimate --product A2 examples/gallery/checkpoint_resume.py -- ckpt.pt
"""

import os
import sys

import torch
import torch_npu  # noqa: F401


def make():
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(),
                                torch.nn.Linear(4096, 1024)).npu()
    return model, torch.optim.Adam(model.parameters(), lr=1e-3)


def train(model, optimizer, steps):
    for _ in range(steps):
        loss = model(torch.randn(32, 1024, device="npu")).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def main(path):
    model, optimizer = make()
    train(model, optimizer, 2)
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "step": 2}, path)
    del model, optimizer
    print(f"saved; allocated after freeing the model {torch.npu.memory_allocated()}")
    checkpoint = torch.load(path, map_location="npu")
    model, optimizer = make()
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    del checkpoint
    train(model, optimizer, 1)
    print(f"resumed at step 3; allocated {torch.npu.memory_allocated()}")
    os.remove(path)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "checkpoint.pt")
