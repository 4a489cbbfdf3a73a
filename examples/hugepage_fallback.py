"""Huge-page fallback by fragmentation: HUGE_FIRST falls back, HUGE_ONLY runs out.

Fill a small A2 device with 1 MiB blocks on normal pages, free every other one: plenty of
memory is free, but no free 2 MiB-aligned run is left, so get_mem_info(ACL_HBM_MEM_HUGE)
reports 0. A HUGE_FIRST request above 1 MiB then falls back to normal pages; a HUGE_ONLY
request fails with ACL_ERROR_RT_MEMORY_ALLOCATION and a message that says why.
Run: python examples/hugepage_fallback.py
"""

from ascend_memsim import MallocPolicy, MemAttr, MiB, OutOfDeviceMemory, Runtime
from ascend_memsim.observe.viz import MapSnapshot, text_map

with Runtime("A2", hbm_bytes=32 * MiB) as rt:
    rt.set_device(0)
    blocks = []
    while True:
        try:
            blocks.append(rt.malloc(1 * MiB, MallocPolicy.NORMAL_ONLY))
        except OutOfDeviceMemory:
            break
    for ptr in blocks[::2]:
        rt.free(ptr)
    free, _ = rt.get_mem_info(MemAttr.HBM_MEM)
    huge_free, _ = rt.get_mem_info(MemAttr.HBM_MEM_HUGE)
    print(f"free: {free} bytes, of which in whole free 2 MiB pages: {huge_free}")

    ptr = rt.malloc(1 * MiB + 1, MallocPolicy.HUGE_FIRST)
    block = rt.block(ptr)
    print(f"HUGE_FIRST 1 MiB + 1 -> {block.page.value} pages, fallback={block.fallback}")
    assert block.fallback

    try:
        rt.malloc(1 * MiB + 1, MallocPolicy.HUGE_ONLY)
    except OutOfDeviceMemory as e:
        print(f"HUGE_ONLY 1 MiB + 1 -> {e}")
    print(text_map(MapSnapshot.of(rt.device(0))))
    for ptr in [*blocks[1::2], block.ptr]:
        rt.free(ptr)
