"""Activation offload to the host: each block's input is kept on the CPU between the forward
and the backward (``torch.autograd.graph.save_on_cpu``), the way large-model trainers trade
host memory for device memory.

    ascend-memsim estimate --product A2 examples/gallery/cpu_offload.py -- --offload
"""

import sys

import torch
import torch_npu  # noqa: F401


def main(offload):
    layers = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(4096, 4096),
                                                       torch.nn.GELU())
                                   for _ in range(8)]).npu()
    x = torch.randn(64, 4096, device="npu", requires_grad=True)
    if offload:
        with torch.autograd.graph.save_on_cpu(pin_memory=True):
            loss = layers(x).sum()
    else:
        loss = layers(x).sum()
    print(f"held before backward {torch.npu.memory_allocated() >> 20} MiB")
    loss.backward()


if __name__ == "__main__":
    main("--offload" in sys.argv)
