"""The +32 gotcha: on Atlas A2/A3 a 2 MiB aclrtMalloc costs 4 MiB of huge pages.

aclrtMalloc rounds the size up to 32 bytes and then adds 32 (the vendor's aclrtMalloc
documentation, hicann/runtime docs/zh/api_ref/11-01, for Atlas A2/A3). 2 MiB + 32 B no
longer fits one 2 MiB huge page, so the block takes two.
aclrtMallocAlign32 skips the extra 32 bytes; Ascend 950PR/950DT never add them.
Run: python examples/plus32_gotcha.py
"""

from ascend_memsim import MallocPolicy, MemAttr, MiB, Runtime, explain

with Runtime("A2", hbm_bytes=64 * MiB) as rt:
    rt.set_device(0)
    free_before, total = rt.get_mem_info(MemAttr.HBM_MEM)
    for name, malloc in (("aclrtMalloc", rt.malloc), ("aclrtMallocAlign32", rt.malloc_align32)):
        ptr = malloc(2 * MiB, MallocPolicy.HUGE_FIRST)
        free_after, _ = rt.get_mem_info(MemAttr.HBM_MEM)
        block = rt.block(ptr)
        print(f"{name:20} 2 MiB -> footprint {block.footprint // MiB} MiB on {block.page.value} "
              f"pages; get_mem_info free fell by {(free_before - free_after) // MiB} MiB")
        assert free_before - free_after == block.footprint
        rt.free(ptr)

print()
print(explain(2 * MiB, MallocPolicy.HUGE_FIRST, product="A2"))
print()
print(explain(2 * MiB, MallocPolicy.HUGE_FIRST, product="950PR"))
