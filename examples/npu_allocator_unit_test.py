"""Unit-testing code that allocates through torch_npu's caching allocator: a pytest file.

``training_step`` below allocates as a model's step does through torch_npu: twelve 6 MiB
activations, one of each four kept for the backward pass, the rest freed, then three 16 MiB
gradients. The ``npu_allocator`` fixture runs it through the simulator's
``NpuCachingAllocator`` (torch_npu's allocator rule for rule) on a simulated Atlas A2 with
100 MiB, with budgets on the allocated and reserved peaks:

- with ``expandable_segments:True`` the step fits: 72 MiB allocated, 80 MiB reserved;
- with the default settings the freed activations stay cached in segments too small for a
  16 MiB tensor: the step runs out of memory with about 48 MiB reserved but unallocated,
  and the ``NpuOutOfMemoryError`` carries torch_npu's figures;
- on that error path every tensor must still be freed: the fixture fails a test that leaves
  one allocated (its site listed), so an error path that forgets one is caught.

A budget the step passes (``max_reserved="80MiB"``) fails the test when a change makes the
step reserve more, naming the ``malloc`` that reached the peak and its frames.

Run: python -m pytest examples/npu_allocator_unit_test.py
     (or: python examples/npu_allocator_unit_test.py)
"""

import sys

import pytest

from ascend_memsim import MiB
from ascend_memsim.allocators import NpuOutOfMemoryError


def training_step(alloc, layers=12):
    """Allocate as a step does; every tensor freed on every path, the error path too."""
    kept, temp, grads = [], [], []
    try:
        for i in range(layers):
            (kept if i % 4 == 0 else temp).append(alloc.malloc(6 * MiB))
        while temp:
            alloc.free(temp.pop())
        for _ in range(3):
            grads.append(alloc.malloc(16 * MiB))
    finally:
        for ptr in temp + grads + kept:
            alloc.free(ptr)


@pytest.mark.npu_allocator(product="A2", capacity="100MiB", conf="expandable_segments:True",
                           max_allocated="75MiB", max_reserved="80MiB")
def test_step_fits_with_expandable_segments(npu_allocator):
    training_step(npu_allocator)
    stats = npu_allocator.memory_stats()
    assert stats["num_ooms"] == 0
    assert stats["reserved_bytes.all.peak"] == 80 * MiB


@pytest.mark.npu_allocator(product="A2", capacity="100MiB")
def test_default_settings_run_out_with_memory_reserved_but_unallocated(npu_allocator):
    with pytest.raises(NpuOutOfMemoryError) as caught:
        training_step(npu_allocator)
    error = caught.value
    print(error)
    # the cached 6 MiB blocks cannot hold a 16 MiB tensor: reserved, yet no use
    assert error.reserved_unallocated > 40 * MiB
    assert npu_allocator.memory_stats()["num_alloc_retries"] == 1


@pytest.mark.npu_allocator(product="950PR", capacity="100MiB", conf="expandable_segments:True")
def test_same_step_on_950pr_has_no_pad(npu_allocator):
    # no +32 pad on Ascend 950 with CANN >= 9.1.0: each 6 MiB tensor is a 6 MiB block
    ptr = npu_allocator.malloc(6 * MiB)
    assert npu_allocator.block_size(ptr) == 6 * MiB
    npu_allocator.free(ptr)
    training_step(npu_allocator)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
