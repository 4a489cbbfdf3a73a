"""memcpy speed: 256 MiB host -> device -> host, against copying between bytearrays.

Run: python benchmarks/bench_memcpy.py [MiB]. Prints a table; the ratio is simulator time
over the bytearray time of the same copies in the same run (target: at most 2). The host
side is a numpy array when numpy is installed (else a bytearray); each figure is the best of
5, except the first round trip into a freshly allocated block, which also pays the page
faults of first touch (timed once).
"""

from __future__ import annotations

import os
import sys
import time

# Use the checkout this file lives in, not an installed copy.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from ascend_memsim import GiB, MemcpyKind, MiB, Runtime


def best(fn, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def host_buffers(n: int) -> tuple[object, object, str]:
    """(source filled with 7, zeroed destination, their kind): numpy arrays if numpy is here."""
    try:
        import numpy
    except ImportError:
        return bytearray(b"\x07" * n), bytearray(n), "bytearray"
    return numpy.full(n, 7, numpy.uint8), numpy.zeros(n, numpy.uint8), "numpy array"


def main(mib: int = 256) -> None:
    n = mib * MiB
    base = bytearray(b"\x07" * n)
    mid = bytearray(n)
    back_base = bytearray(n)
    src, back, host_kind = host_buffers(n)

    def bytearray_round_trip() -> None:
        memoryview(mid)[:] = base
        memoryview(back_base)[:] = mid

    def bytearray_one_way() -> None:
        memoryview(mid)[:] = base

    with Runtime("A2", hbm_bytes=4 * GiB, sanitizer="off") as rt:
        rt.set_device(0)
        dev = rt.malloc(n)
        host_in = rt.host.register(src).ptr
        host_out = rt.host.register(back).ptr
        # First, while the process maps least (page faults get dearer as it maps more), and
        # with the host buffers touched already: only the device block is fresh.
        memoryview(back).cast("B")[:] = memoryview(mid)
        start = time.perf_counter()
        rt.memcpy(dev, n, host_in, n, MemcpyKind.HOST_TO_DEVICE)
        rt.memcpy(host_out, n, dev, n, MemcpyKind.DEVICE_TO_HOST)
        first_touch = time.perf_counter() - start

        def sim_h2d() -> None:
            rt.memcpy(dev, n, host_in, n, MemcpyKind.HOST_TO_DEVICE)

        def sim_d2h() -> None:
            rt.memcpy(host_out, n, dev, n, MemcpyKind.DEVICE_TO_HOST)

        def sim_round_trip() -> None:
            sim_h2d()
            sim_d2h()

        rows = [("bytearray -> bytearray (one copy)", 1, best(bytearray_one_way)),
                ("bytearray round trip (two copies)", 2, best(bytearray_round_trip)),
                ("simulator host -> device", 1, best(sim_h2d)),
                ("simulator device -> host", 1, best(sim_d2h)),
                ("simulator host -> device -> host", 2, best(sim_round_trip))]
        rows.append(("first round trip into a fresh block (once)", 2, first_touch))
        assert memoryview(back).cast("B") == memoryview(src).cast("B")
        with Runtime("A2", hbm_bytes=4 * GiB, sanitizer="report") as rt2:
            rt2.set_device(0)
            dev2 = rt2.malloc(n)
            h_in = rt2.host.register(src).ptr
            h_out = rt2.host.register(back).ptr

            def san_round_trip() -> None:
                rt2.memcpy(dev2, n, h_in, n, MemcpyKind.HOST_TO_DEVICE)
                rt2.memcpy(h_out, n, dev2, n, MemcpyKind.DEVICE_TO_HOST)

            rows.append(("simulator round trip, sanitizer report", 2, best(san_round_trip)))
            rt2.free(dev2)
        rt.free(dev)

    one = rows[0][2]
    print(f"memcpy of {mib} MiB, host side a {host_kind} (best of 5 unless marked once)")
    print(f"{'operation':42} {'seconds':>8} {'GB/s':>7} {'/ one bytearray copy':>21}")
    for name, copies, seconds in rows:
        print(f"{name:42} {seconds:8.4f} {copies * n / seconds / 1e9:7.2f} {seconds / one:21.2f}")
    print(f"\nsimulator round trip / one bytearray copy = {rows[4][2] / one:.2f} "
          f"(target <= 2.00: at least half as fast)")
    print(f"simulator round trip / bytearray round trip = {rows[4][2] / rows[1][2]:.2f}")
    print(f"first round trip into a fresh block / one bytearray copy = {first_touch / one:.2f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 256)
