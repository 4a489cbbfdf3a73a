"""The cost of one acl.op.execute_v2 beyond its kernel, against a bare numpy add.

For a small Add (int32 [8, 16], as the vendor's sample), times: a bare ``numpy.add`` of the
two arrays; one ``execute_v2`` + ``synchronize_stream`` through the pyacl face (checks,
queuing, reading the inputs from device memory, the kernel, checking and writing the output);
the overhead is the difference. Sanitizer off (the bare cost) and in its default report mode.

Run: python benchmarks/bench_ops.py [iterations]. Target: overhead at most 50 us.
"""

from __future__ import annotations

import os
import sys
import time

# Use the checkout this file lives in, not an installed copy.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np

from ascend_memsim import MiB, Runtime, Sanitizer, acl


def best_of(fn, iterations: int, rounds: int = 5) -> float:
    """CPU seconds per call, the best of ``rounds`` runs of ``iterations`` calls (process CPU
    time, so other processes on a shared machine do not count)."""
    best = float("inf")
    for _ in range(rounds):
        start = time.process_time()
        for _ in range(iterations):
            fn()
        best = min(best, (time.process_time() - start) / iterations)
    return best


def bench(sanitizer, iterations: int) -> tuple[float, float]:
    """(seconds per execute_v2 + synchronize_stream, seconds per bare numpy add)."""
    a = np.arange(128, dtype=np.int32).reshape(8, 16)
    b = np.ones((8, 16), np.int32)
    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer=sanitizer):
        acl.rt.set_device(0)
        stream, _ = acl.rt.create_stream()
        descs, bufs, devs = [], [], []
        for x in (a, b, None):
            desc = acl.create_tensor_desc(acl.ACL_INT32, [8, 16], acl.ACL_FORMAT_ND)
            size = acl.get_tensor_desc_size(desc)
            dev, _ = acl.rt.malloc(size, acl.ACL_MEM_MALLOC_NORMAL_ONLY)
            if x is not None:
                acl.rt.memcpy(dev, size, acl.util.numpy_to_ptr(x), size, 1)
            descs.append(desc)
            bufs.append(acl.create_data_buffer(dev, size))
            devs.append(dev)
        attr = acl.op.create_attr()
        ins_d, ins_b, out_d, out_b = descs[:2], bufs[:2], descs[2:], bufs[2:]

        def one_op() -> None:
            acl.op.execute_v2("Add", ins_d, ins_b, out_d, out_b, attr, stream)
            acl.rt.synchronize_stream(stream)

        one_op()
        out = np.zeros((8, 16), np.int32)
        acl.rt.memcpy(acl.util.numpy_to_ptr(out), 512, devs[2], 512, 2)
        assert (out == a + b).all()
        op = best_of(one_op, iterations)
        bare = best_of(lambda: np.add(a, b), iterations * 10)
        acl.op.destroy_attr(attr)
        for buf, dev, desc in zip(bufs, devs, descs):
            acl.destroy_data_buffer(buf)
            acl.rt.free(dev)
            acl.destroy_tensor_desc(desc)
        acl.rt.destroy_stream(stream)
    return op, bare


def main(iterations: int = 2000) -> None:
    print(f"one execute_v2('Add', int32[8,16]) + synchronize_stream, best of 5 x {iterations} "
          f"(CPU time)")
    print(f"{'sanitizer':<18} {'execute_v2':>12} {'numpy add':>11} {'overhead':>10} "
          f"{'ratio':>8}")
    for name, spec in (("off", "off"), ("report (default)", Sanitizer(output=None))):
        op, bare = bench(spec, iterations)
        print(f"{name:<18} {op * 1e6:>9.1f} us {bare * 1e6:>8.2f} us "
              f"{(op - bare) * 1e6:>7.1f} us {op / bare:>7.0f}x")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000)
