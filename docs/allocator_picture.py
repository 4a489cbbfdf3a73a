"""Make docs/allocator.png, the README's picture of the caching allocator's segments.

A step keeps one 6 MiB activation of each four, frees the rest, then asks three 16 MiB
gradients through torch_npu's caching allocator on a 100 MiB A2; its snapshot is replayed
through the allocator (``replay_tensors`` with ``AllocatorPictures``, as ``ascend-memsim
replay SNAPSHOT --allocator torch-npu --plot OUT.png`` does) and drawn: the timeline of
allocated, inactive split and cached bytes, and the segments at the first out-of-memory error.

    python docs/allocator_picture.py            # writes docs/allocator.png
"""

import os

from ascend_memsim import MiB, Runtime
from ascend_memsim.allocators import NpuCachingAllocator, NpuOutOfMemoryError
from ascend_memsim.observe.allocmap import AllocatorPictures
from ascend_memsim.observe.pictures import save_picture
from ascend_memsim.observe.tensor_replay import replay_tensors


def recorded_step() -> dict:
    with Runtime("A2", hbm_bytes=100 * MiB, sanitizer="off") as rt:
        alloc = NpuCachingAllocator(rt)
        alloc.record_history()
        kept, temp, grads = [], [], []
        for i in range(12):
            (kept if i % 4 == 0 else temp).append(alloc.malloc(6 * MiB))
        for ptr in temp:
            alloc.free(ptr)
        try:
            for _ in range(3):
                grads.append(alloc.malloc(16 * MiB))
        except NpuOutOfMemoryError:
            pass
        snapshot = alloc.memory_snapshot()
        for ptr in kept + grads:
            alloc.free(ptr)
        alloc.empty_cache()
        return snapshot


def main() -> None:
    pictures = AllocatorPictures()
    result = replay_tensors(recorded_step(), "A2", capacity=100 * MiB, observer=pictures)
    pictures.finish(result.capacity)
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "allocator.png")
    save_picture(out, timeline=pictures.timeline, maps=pictures.maps()[-1:],
                 title="A fragmenting step through torch_npu's caching allocator "
                       "(default conf) on a 100 MiB A2")
    print(out, "written")


if __name__ == "__main__":
    main()
