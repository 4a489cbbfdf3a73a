"""The coverage table of the memory chapter (docs/reference/coverage.md) stays in step with
the vendor's chapter, pyacl's method table, the face (acl.rt) and the C names (aclrt)."""

import os
import re

import pytest

from ascend_memsim import acl, aclrt

PAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs",
                    "reference", "coverage.md")

#: Every C API of the chapter, per section, in the order of each section's list
#: (hicann/runtime docs/zh/api_ref/11-01_device_memory_malloc_and_free.md ... 11-11_...md).
CHAPTER = {
    "11-01": "aclrtMalloc aclrtMallocAlign32 aclrtMallocCached aclrtMemFlush aclrtMemInvalidate "
             "aclrtMallocWithCfg aclrtMallocForTaskScheduler aclrtFree aclrtFreeWithDevSync "
             "aclrtGetMemInfo aclrtGetMemUsageInfo aclrtCheckMemType",
    "11-02": "aclrtMallocHost aclrtMallocHostWithCfg aclrtFreeHost aclrtFreeHostWithDevSync "
             "aclrtHostRegister aclrtHostRegisterV2 aclrtHostGetDevicePointer "
             "aclrtHostMemMapCapabilities aclrtHostUnregister",
    "11-03": "aclrtMemcpy aclrtMemcpyAsync aclrtMemcpyAsyncWithCondition aclrtMemcpyBatch "
             "aclrtMemcpyBatchAsync aclrtMemcpyBatchV2 aclrtMemcpyBatchAsyncV2 aclrtMemcpy2d "
             "aclrtMemcpy2dAsync aclrtGetMemcpyDescSize aclrtSetMemcpyDesc "
             "aclrtMemcpyAsyncWithDesc aclrtMemcpyAsyncWithOffset aclrtMemset aclrtMemsetAsync "
             "aclrtMemsetD32 aclrtMemsetD32Async",
    "11-04": "aclrtMallocPhysical aclrtFreePhysical aclrtReserveMemAddress "
             "aclrtReserveMemAddressNoUCMemory aclrtReleaseMemAddress aclrtMapMem "
             "aclrtMemMapNoAccess aclrtUnmapMem aclrtMemExportToShareableHandle "
             "aclrtMemSetPidToShareableHandle aclrtMemImportFromShareableHandle "
             "aclrtMemExportToShareableHandleV2 aclrtMemSetPidToShareableHandleV2 "
             "aclrtMemImportFromShareableHandleV2 aclrtMemGetAllocationGranularity "
             "aclrtMemSetAccess aclrtMemGetAccess aclrtMemRetainAllocationHandle "
             "aclrtMemGetAllocationPropertiesFromHandle aclrtMemGetAddressRange "
             "aclrtMemMapSelectedLink",
    "11-05": "aclrtMemAllocManaged aclrtMemManagedAdvise aclrtMemManagedGetAttr "
             "aclrtMemManagedGetAttrs aclrtMemManagedPrefetchAsync "
             "aclrtMemManagedPrefetchBatchAsync aclrtMemP2PMap aclrtPointerGetAttributes",
    "11-06": "aclrtCmoAsync aclrtCmoAsyncWithBarrier aclrtCmoWaitBarrier aclrtCmoGetDescSize "
             "aclrtCmoSetDesc aclrtCmoAsyncWithDesc",
    "11-07": "aclrtIpcMemGetExportKey aclrtIpcMemSetImportPid aclrtIpcMemImportPidInterServer "
             "aclrtIpcMemImportByKey aclrtIpcMemSetAttr aclrtIpcMemClose",
    "11-08": "aclrtAllocatorRegister aclrtAllocatorGetByStream aclrtAllocatorUnregister",
    "11-09": "aclrtValueWrite aclrtValueWait",
    "11-10": "aclrtMemPoolCreate aclrtMemPoolDestroy aclrtMemPoolSetAttr aclrtMemPoolGetAttr "
             "aclrtMemPoolMallocAsync aclrtMemPoolFreeAsync aclrtMemPoolTrimTo",
    "11-11": "aclrtGetSymbolAddress aclrtGetSymbolSize aclrtMemcpyFromSymbol "
             "aclrtMemcpyFromSymbolAsync aclrtMemcpyToSymbol aclrtMemcpyToSymbolAsync",
}

#: The chapter's functions pyacl binds (hicann/runtime python/pyACL/rt/pyrt_methods.cpp).
PYACL_BOUND = set("""
malloc malloc_align32 malloc_cached mem_flush mem_invalidate malloc_with_cfg
malloc_for_task_scheduler free get_mem_info malloc_host malloc_host_with_cfg free_host
host_register host_register_v2 host_get_device_pointer host_unregister memcpy memcpy_async
memcpy_async_with_condition memcpy2d memcpy2d_async get_memcpy_desc_size set_memcpy_desc
memcpy_async_with_desc memset memset_async malloc_physical free_physical reserve_mem_address
release_mem_address map_mem unmap_mem mem_export_to_shareable_handle
mem_set_pid_to_shareable_handle mem_import_from_shareable_handle
mem_get_allocation_granularity pointer_get_attributes cmo_async ipc_mem_get_export_key
ipc_mem_set_import_pid ipc_mem_import_by_key ipc_mem_close allocator_register
allocator_unregister value_write value_wait
""".split())

#: The allocator descriptor calls 11-08 relies on: documented among the operation APIs
#: (docs/zh/api_ref/25-03_Operation_APIs.md), not in the memory chapter, so not in the table;
#: pyacl binds them all (pyrt_methods.cpp), and the face and the C names have them.
ALLOCATOR_DESC = {
    "aclrtAllocatorCreateDesc": "allocator_create_desc",
    "aclrtAllocatorDestroyDesc": "allocator_destroy_desc",
    "aclrtAllocatorSetObjToDesc": "allocator_set_obj_to_desc",
    "aclrtAllocatorSetAllocFuncToDesc": "allocator_set_alloc_func_to_desc",
    "aclrtAllocatorSetFreeFuncToDesc": "allocator_set_free_func_to_desc",
    "aclrtAllocatorSetAllocAdviseFuncToDesc": "allocator_set_alloc_advise_func_to_desc",
    "aclrtAllocatorSetGetAddrFromBlockFuncToDesc":
        "allocator_set_get_addr_from_block_func_to_desc",
}

#: Words that make an acl.rt function a memory function the table must list.
MEMORY_WORDS = ("malloc", "free", "mem", "host", "physical", "pointer", "reserve", "release",
                "map", "granularity", "allocation", "address")

_ROW = re.compile(r"^\| (11-\d\d) \| `(aclrt\w+)` \| (.+?) \| (.+?) \|$")


def _table() -> list[tuple[str, str, str | None, bool, str]]:
    """(section, C name, pyacl-style name or None, bound by pyacl, status) per table row."""
    with open(PAGE, encoding="utf-8") as f:
        text = f.read()
    rows = []
    for line in text.splitlines():
        match = _ROW.match(line)
        if match:
            section, c_name, py, status = match.groups()
            name = re.match(r"`(\w+)`", py)
            rows.append((section, c_name, name and name.group(1),
                         "(not in pyacl)" not in py, status))
    return rows


def test_the_table_lists_the_whole_chapter_in_order():
    rows = _table()
    assert len(rows) == 97
    for section, names in CHAPTER.items():
        assert [c for s, c, *_ in rows if s == section] == names.split(), section


def test_the_pyacl_column_agrees_with_pyacls_method_table():
    for _, c_name, name, bound, _ in _table():
        if bound:
            assert name in PYACL_BOUND, f"{c_name}: pyacl binds no {name}"
        else:
            assert name not in PYACL_BOUND, f"{c_name}: pyacl binds {name}"


@pytest.mark.parametrize("row", _table(), ids=lambda row: row[1])
def test_each_row_agrees_with_the_code(row):
    _, c_name, name, bound, status = row
    in_code = c_name in aclrt.C_NAMES
    if status.startswith("not simulated: "):
        assert len(status) > len("not simulated: ") + 10, f"{c_name}: say why not"
        assert not in_code, f"{c_name} is simulated now: update the coverage table"
        assert name is None or name not in acl.rt.__all__
        return
    assert status in ("simulated",
                      "simulated (see [Virtual memory](../guide/c-api/virtual-memory.md))",
                      "simulated (see [Several processes](../guide/processes.md))",
                      "simulated (see [Stream-ordered pools](../guide/c-api/pools.md))",
                      "simulated (see [Managed memory](../guide/c-api/managed.md))"), status
    assert in_code, f"{c_name} is marked simulated but aclrt has no such name"
    fn = getattr(acl.rt, name)
    assert name in acl.rt.__all__ and aclrt.C_NAMES[c_name] is fn
    doc = (fn.__doc__ or "").lower()
    if bound:
        assert "not in pyacl" not in doc, f"acl.rt.{name} is in pyacl"
    else:
        assert name in acl.rt.NOT_IN_PYACL, f"acl.rt.{name} must be in NOT_IN_PYACL"
        assert "not in pyacl" in doc, f"acl.rt.{name}'s docstring must say 'not in pyacl'"


def test_every_memory_function_of_the_face_is_in_the_table():
    listed = {r[2] for r in _table()}
    memory = {name for name in acl.rt.__all__ if any(w in name for w in MEMORY_WORDS)}
    assert memory - listed - set(ALLOCATOR_DESC.values()) == set()


def test_the_allocator_descriptor_calls_are_in_the_face_and_the_c_names():
    for c_name, name in ALLOCATOR_DESC.items():
        assert name in acl.rt.__all__ and name not in acl.rt.NOT_IN_PYACL
        assert aclrt.C_NAMES[c_name] is getattr(acl.rt, name)
