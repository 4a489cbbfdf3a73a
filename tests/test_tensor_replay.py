"""Tensor-level replay of snapshots and traces through the caching allocator."""

import json
import pickle

import pytest

from ascend_memsim import MiB, Runtime
from ascend_memsim.allocators import NpuCachingAllocator, NpuOutOfMemoryError
from ascend_memsim.cli import main
from ascend_memsim.observe.tensor_replay import replay_tensors


def _workload(alloc):
    """A mixed workload on two streams that runs out of memory on a 128 MiB A2."""
    held = []
    for i in range(30):
        try:
            held.append(alloc.malloc((i % 7 + 1) * 3 * MiB + i * 1000, stream=i % 2))
        except NpuOutOfMemoryError:
            pass
        if i % 3 == 2:
            alloc.free(held.pop(0))


def _recorded(capacity, conf="", workload=_workload):
    with Runtime("A2", hbm_bytes=capacity, sanitizer="off") as rt:
        alloc = NpuCachingAllocator(rt, conf=conf)
        alloc.record_history()
        workload(alloc)
        return alloc.memory_snapshot(), alloc.memory_stats()


def test_self_consistency_pickle(tmp_path):
    snap, stats = _recorded(128 * MiB)
    assert stats["num_ooms"] > 0      # the workload does reach the OOM path
    path = tmp_path / "snap.pickle"
    path.write_bytes(pickle.dumps(snap))
    r = replay_tensors(str(path), "A2", capacity=128 * MiB)
    assert r.peak_allocated == stats["allocated_bytes.all.peak"]
    assert r.peak_reserved == stats["reserved_bytes.all.peak"]
    assert r.ooms == stats["num_ooms"]
    assert r.retries == stats["num_alloc_retries"]
    first_oom = next(i for i, e in enumerate(snap["device_traces"][0]) if e["action"] == "oom")
    assert r.first_failure["index"] == first_oom
    assert r.actions["rederived"]["segment_alloc"] > 0
