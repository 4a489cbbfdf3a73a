"""A script that sets torch_npu's allocator settings itself, before its first NPU tensor, as
many training scripts do at their top.

    ascend-memsim estimate --product A2 examples/gallery/alloc_conf_in_script.py
"""

import os

os.environ["PYTORCH_NPU_ALLOC_CONF"] = "expandable_segments:True"

import torch
import torch_npu  # noqa: F401


def main():
    # blocks of many sizes: with expandable segments they share one growing segment
    blocks = [torch.empty(size << 20, dtype=torch.uint8, device="npu") for size in (3, 7, 11)]
    print(f"reserved {torch.npu.memory_reserved() >> 20} MiB for "
          f"{sum(b.numel() for b in blocks) >> 20} MiB")


if __name__ == "__main__":
    main()
