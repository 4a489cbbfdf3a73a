"""Host memory of a simulated 64 GB device with 60 GB allocated and 16 MiB written.

Run: python benchmarks/bench_sparse_rss.py. Prints peak RSS before and after (target: under
100 MiB in total), for written data in one place and scattered over all blocks, and for a
one-byte write into a 1 GiB block that a memset filled with a non-zero byte.
"""

from __future__ import annotations

import os
import resource
import sys

# Use the checkout this file lives in, not an installed copy.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from ascend_memsim import GiB, MallocPolicy, MiB, Runtime


def peak_mib() -> float:
    scale = 1 if sys.platform == "darwin" else 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale / MiB


def main() -> None:
    rows = [("after import", peak_mib())]
    with Runtime("A2", hbm_bytes=64 * GiB) as rt:
        rt.set_device(0)
        ptrs = [rt.malloc(4 * GiB) for _ in range(15)]
        rows.append(("60 GB allocated (15 x 4 GiB)", peak_mib()))
        chunk = bytearray(b"\x5a" * MiB)
        src = rt.host.register(chunk).ptr
        for i in range(8):
            rt.memcpy(ptrs[0] + i * MiB, MiB, src, MiB, 1)
        rows.append(("+ 8 MiB written in one place", peak_mib()))
        small = bytearray(b"\x33" * 2048)
        small_src = rt.host.register(small).ptr
        for i in range(4096):
            block = ptrs[i % 15]
            rt.memcpy(block + (i * 7919 % 1900) * 2 * MiB, 2048, small_src, 2048, 1)
        rows.append(("+ 8 MiB more, 2 KiB pieces over all blocks", peak_mib()))
        rt.memset(ptrs[1], 4 * GiB, 0, 4 * GiB)
        rows.append(("+ memset of a whole 4 GiB block", peak_mib()))
        # A block just under 1 GiB is one chunk; a non-zero whole-block memset, then one byte.
        dense = rt.malloc(GiB - 4096, MallocPolicy.NORMAL_ONLY)
        rt.memset(dense, GiB - 4096, 7, GiB - 4096)
        rows.append(("+ memset(7) of a whole 1 GiB block", peak_mib()))
        rt.memset(dense, 1, 1, 1)
        rows.append(("+ a 1-byte memset into that block", peak_mib()))
        for ptr in (*ptrs, dense):
            rt.free(ptr)
    print(f"{'state':46} {'peak RSS MiB':>12}")
    for name, mib in rows:
        print(f"{name:46} {mib:12.1f}")
    print("\ntarget: under 100 MiB with 60 GB allocated and 16 MiB written")


if __name__ == "__main__":
    main()
