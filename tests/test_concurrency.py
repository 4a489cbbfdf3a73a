"""Threads malloc and free at once: nothing lost, no pointer handed out twice."""

import random
import sys
import threading

import pytest

from ascend_memsim import GiB, MiB, Runtime, acl

THREADS = 8
ROUNDS = 400


@pytest.fixture(autouse=True)
def frequent_thread_switches():
    """Switch threads every microsecond so that a missing lock shows up as a race."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(old)


def test_concurrent_malloc_and_free_lose_nothing():
    with Runtime("A2", hbm_bytes=8 * GiB) as rt:
        kept: list[list[int]] = [[] for _ in range(THREADS)]
        errors: list[str] = []
        start = threading.Barrier(THREADS)

        def worker(index: int) -> None:
            rng = random.Random(index)
            assert acl.rt.set_device(0) == 0
            start.wait()
            mine: list[int] = []
            for _ in range(ROUNDS):
                if mine and rng.random() < 0.4:
                    ptr = mine.pop(rng.randrange(len(mine)))
                    if acl.rt.free(ptr) != 0:
                        errors.append(f"free {ptr:#x} failed")
                else:
                    ptr, ret = acl.rt.malloc(rng.choice([100, 4096, 3 * MiB // 2, 3 * MiB]),
                                             rng.choice([0, 2]))
                    if ret:
                        errors.append(f"malloc failed with {ret}")
                    else:
                        mine.append(ptr)
            kept[index] = mine

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        everything = [p for mine in kept for p in mine]
        assert len(everything) == len(set(everything)), "a pointer was handed out twice"
        device = rt.device(0)
        assert sorted(everything) == [b.ptr for b in device.blocks()]
        device.check_invariants()
        used = sum(b.footprint for b in device.blocks())
        assert rt.device(0).mem_info(1) == (8 * GiB - used, 8 * GiB)
