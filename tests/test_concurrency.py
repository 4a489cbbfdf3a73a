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


def run_threads(worker, count: int = THREADS, timeout: float = 60.0) -> None:
    """Run ``worker(index, start)`` in ``count`` threads released together by ``start``."""
    start = threading.Barrier(count)
    threads = [threading.Thread(target=worker, args=(i, start)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=timeout)
    assert not any(t.is_alive() for t in threads), "a thread did not finish"


def test_concurrent_malloc_and_free_lose_nothing():
    with Runtime("A2", hbm_bytes=8 * GiB) as rt:
        kept: list[list[int]] = [[] for _ in range(THREADS)]
        errors: list[str] = []

        def worker(index: int, start: threading.Barrier) -> None:
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

        run_threads(worker)
        assert errors == []
        everything = [p for mine in kept for p in mine]
        assert len(everything) == len(set(everything)), "a pointer was handed out twice"
        device = rt.device(0)
        assert sorted(everything) == [b.ptr for b in device.blocks()]
        device.check_invariants()
        used = sum(b.footprint for b in device.blocks())
        assert rt.device(0).mem_info(1) == (8 * GiB - used, 8 * GiB)


def test_malloc_and_free_with_the_quarantine_do_not_deadlock():
    """A malloc holds the device lock while the quarantine's interceptor flushes; a free holds
    the sanitizer's lock while the quarantine releases: they must not wait on each other.

    Not a ``with Runtime``: closing a deadlocked runtime would hang the suite.
    """
    import time

    sanitizer = {"mode": "report", "output": None, "quarantine_bytes": 1 * MiB}
    rt = Runtime("A2", hbm_bytes=64 * MiB, sanitizer=sanitizer)
    rt.set_device(0)
    small, big = rt.malloc(512 * 1024, 2), rt.malloc(1 * MiB, 2)
    rt.free(small)  # quarantined: under the budget
    in_malloc = threading.Event()

    def slow(request):  # under the device lock, before the quarantine's interceptor
        in_malloc.set()
        time.sleep(0.2)

    rt.device(0).interceptors.insert(0, slow)
    results = {}

    def allocate():
        rt.set_device(0)
        results["malloc"] = rt.malloc(59 * MiB, 2)

    def release():
        rt.set_device(0)
        in_malloc.wait(5)
        results["free"] = rt.free(big)  # over budget: releases the quarantine

    threads = [threading.Thread(target=f, daemon=True) for f in (allocate, release)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 10
    for t in threads:
        t.join(timeout=max(0.0, deadline - time.monotonic()))
    assert not any(t.is_alive() for t in threads), "malloc and free deadlocked"
    assert set(results) == {"malloc", "free"} and results["free"] is None
    rt.device(0).interceptors.remove(slow)
    rt.device(0).check_invariants()
    assert rt.get_mem_info(1)[0] == 64 * MiB - rt.block(results["malloc"]).footprint
    rt.close()


def test_concurrent_copies_keep_each_threads_bytes():
    with Runtime("A2", hbm_bytes=256 * MiB) as rt:
        errors: list[str] = []

        def worker(index: int, start: threading.Barrier) -> None:
            rng = random.Random(index)
            assert acl.rt.set_device(0) == 0
            start.wait()
            for _ in range(50):
                size = rng.choice([64, 1000, 70_000])
                data = bytes([index]) * size
                dev, ret = acl.rt.malloc(size, 0)
                host = acl.util.bytes_to_ptr(data)
                back = bytes(size)  # a fresh bytes object: pyacl takes bytes only
                back_ptr = acl.util.bytes_to_ptr(back)
                if ret or acl.rt.memcpy(dev, size, host, size, 1):
                    errors.append("copy in failed")
                elif acl.rt.memcpy(back_ptr, size, dev, size, 2):
                    errors.append("copy out failed")
                elif bytes(back) != data:
                    errors.append(f"thread {index} read another thread's bytes")
                acl.rt.free(dev)

        run_threads(worker)
        assert errors == []
        assert len(rt.device(0)) == 0
        rt.device(0).check_invariants()
