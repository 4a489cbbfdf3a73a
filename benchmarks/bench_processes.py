"""Several processes on one machine: what sharing a device and crossing a real process cost.

Run: ``python benchmarks/bench_processes.py`` (about 20 s). Prints, each as a ratio measured
in this one run (best of 3 alternating rounds):

1. an ``acl.rt.malloc`` + ``free`` pair (sanitizer off) on a device only this process uses,
   against the same pair once a second simulated process holds blocks on that device (each
   malloc then checks the device's budget across processes: ``memory/budget.py``);
2. the same pair in a worker started with ``multiprocessing`` (spawn) and connected to the
   owner (``ascend_memsim.remote``: every call crosses a local socket), against the pair in
   the owner's own process;
3. a 1 MiB host -> device ``memcpy`` from a registered numpy array, in the worker and in the
   owner (the worker's array is sent to the owner at each call that reads it).

Figures come from one run on one machine; compare them with each other, not across machines.
"""

from __future__ import annotations

import multiprocessing as mp
import time

import numpy as np

from ascend_memsim import GiB, MiB, Runtime, acl, connect, serve

PAIRS = 5000
REMOTE_PAIRS = 1000
COPIES = 200


def pairs_us(n: int) -> float:
    """Microseconds per malloc + free pair of 4 KiB on the current device."""
    start = time.perf_counter()
    for _ in range(n):
        ptr, _ = acl.rt.malloc(4096, 0)
        acl.rt.free(ptr)
    return (time.perf_counter() - start) / n * 1e6


def copy_us(n: int) -> float:
    """Microseconds per 1 MiB host -> device memcpy from a registered numpy array."""
    host = np.ones(MiB, np.uint8)
    src = acl.util.numpy_to_ptr(host)
    dst, _ = acl.rt.malloc(MiB, 0)
    start = time.perf_counter()
    for _ in range(n):
        acl.rt.memcpy(dst, MiB, src, MiB, acl.ACL_MEMCPY_HOST_TO_DEVICE)
    took = (time.perf_counter() - start) / n * 1e6
    acl.rt.free(dst)
    return took


def worker(out) -> None:
    connect()
    acl.rt.set_device(0)
    out.send((min(pairs_us(REMOTE_PAIRS) for _ in range(3)),
              min(copy_us(COPIES // 4) for _ in range(3))))


def shared_device() -> tuple[float, float]:
    alone, shared = [], []
    with Runtime("A2", hbm_bytes=64 * GiB, sanitizer="off") as rt:
        rt.set_device(0)
        other = rt.spawn_process(sanitizer="off")
        for _ in range(3):
            alone.append(pairs_us(PAIRS))
        with other.as_current():
            acl.rt.set_device(0)
            held = [acl.rt.malloc(MiB, 0)[0] for _ in range(64)]
        for _ in range(3):
            shared.append(pairs_us(PAIRS))
        with other.as_current():
            for ptr in held:
                acl.rt.free(ptr)
        other.close()
    return min(alone), min(shared)


def remote() -> tuple[float, float, float, float]:
    with Runtime("A2", hbm_bytes=64 * GiB, sanitizer="off") as rt, serve(rt, sanitizer="off"):
        acl.rt.set_device(0)
        local_pairs = min(pairs_us(PAIRS) for _ in range(3))
        local_copy = min(copy_us(COPIES) for _ in range(3))
        ours, theirs = mp.get_context("spawn").Pipe()
        proc = mp.get_context("spawn").Process(target=worker, args=(theirs,))
        proc.start()
        remote_pairs, remote_copy = ours.recv()
        proc.join()
    return local_pairs, remote_pairs, local_copy, remote_copy


def main() -> None:
    alone, shared = shared_device()
    local_pairs, remote_pairs, local_copy, remote_copy = remote()
    rows = [
        ("malloc+free, device used by this process only", alone, None),
        ("malloc+free, a second process holds blocks on the device", shared, alone),
        ("malloc+free in the owner's process", local_pairs, None),
        ("malloc+free in a connected worker process", remote_pairs, local_pairs),
        ("1 MiB memcpy host -> device, in the owner", local_copy, None),
        ("1 MiB memcpy host -> device, in a worker", remote_copy, local_copy),
    ]
    print(f"{'measure':60} {'us':>9} {'ratio':>7}")
    for name, us, base in rows:
        ratio = f"{us / base:6.2f}x" if base else ""
        print(f"{name:60} {us:9.1f} {ratio:>7}")


if __name__ == "__main__":
    main()
