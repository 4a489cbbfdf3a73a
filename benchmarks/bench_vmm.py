"""Virtual memory cost: map/unmap pairs and a memcpy into mapped memory, through ``acl.rt``.

Run: ``python benchmarks/bench_vmm.py`` (a few seconds). Prints microseconds per call for:

1. ``map_mem`` + ``unmap_mem`` of a 20 MiB handle in a reservation holding 0 and 1,000 other
   mappings (torch_npu's expandable segment maps one handle per 20 MiB segment);
2. ``malloc_physical`` + ``free_physical`` of 20 MiB;
3. a 4 KiB ``memcpy`` host -> mapped memory, and the same into an ``aclrtMalloc`` block.

Figures come from one run on one machine; compare them with each other, not across machines.
"""

from __future__ import annotations

import time

from ascend_memsim import GiB, MiB, Runtime, acl

SEG = 20 * MiB
PROP = {"handleType": 0, "allocationType": 0, "memAttr": acl.ACL_HBM_MEM_HUGE,
        "location": {"id": 0, "type": acl.ACL_MEM_LOCATION_TYPE_DEVICE}, "reserve": 0}


def per_call(fn, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n * 1e6


def main() -> None:
    with Runtime("A2", hbm_bytes=64 * GiB, sanitizer="off") as rt:
        rt.set_device(0)
        va, ret = acl.rt.reserve_mem_address(1100 * SEG, 0, 0, 1)
        assert ret == 0
        handle, _ = acl.rt.malloc_physical(SEG, PROP, 0)
        for others in (0, 1000):
            for i in range(others):
                h, _ = acl.rt.malloc_physical(SEG, PROP, 0)
                assert acl.rt.map_mem(va + (i + 1) * SEG, SEG, 0, h, 0) == 0

            def pair():
                acl.rt.map_mem(va, SEG, 0, handle, 0)
                acl.rt.unmap_mem(va)

            print(f"map_mem + unmap_mem, {others:5} other mappings: {per_call(pair, 2000):7.1f} us")

        def physical():
            h, _ = acl.rt.malloc_physical(SEG, PROP, 0)
            acl.rt.free_physical(h)

        print(f"malloc_physical + free_physical:          {per_call(physical, 2000):7.1f} us")
        acl.rt.map_mem(va, SEG, 0, handle, 0)
        data = bytes(4096)
        src = acl.util.bytes_to_ptr(data)
        block, _ = acl.rt.malloc(SEG, 0)
        for name, dst in (("mapped memory", va + 4096), ("an aclrtMalloc block", block)):
            us = per_call(lambda dst=dst: acl.rt.memcpy(dst, 4096, src, 4096, 1), 5000)
            print(f"memcpy 4 KiB host -> {name:21}: {us:7.1f} us")


if __name__ == "__main__":
    main()
