"""The vendor's physical-memory sample, in Python against ``acl.rt``, on the simulator.

``hicann/runtime`` ``example/1_basic_features/memory/8_physical_memory_sharing_withoutpid``
runs two processes: A allocates physical memory, maps it, writes 123 and exports a shareable
handle (pid validation off); B imports it, maps it at an address of its own and reads 123
back. Here B is a second simulated process on the same simulated machine
(``spawn_process``; the sample forks an operating-system process), which the pyacl face
talks to inside ``with process_b.as_current()``. The log lines are the sample's.

The sample's process B copies a whole granule (2 MiB) to the host although only one int was
written: under the simulator's sanitizer (report mode, the default) that read is reported as
``uninitialized-read``, a true finding about the sample.

``acl.rt.mem_set_access`` is not in pyacl (its method table has no entry for
aclrtMemSetAccess): on hardware this step needs the C API.
"""

from __future__ import annotations

import ctypes
import sys

try:
    import acl
except ModuleNotFoundError:  # no Ascend toolkit on this machine: run on the simulator
    from ascend_memsim import install_acl

    install_acl()
    import acl

ACL_MEM_HANDLE_TYPE_NONE = 0
ACL_MEM_ALLOCATION_TYPE_PINNED = 0
ACL_MEM_LOCATION_TYPE_DEVICE = 1
ACL_HBM_MEM_NORMAL = 5
ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM = 0
ACL_RT_MEM_ACCESS_FLAGS_READWRITE = 3
ACL_MEMCPY_HOST_TO_DEVICE = 1
ACL_MEMCPY_DEVICE_TO_HOST = 2
ACL_RT_VMM_EXPORT_FLAG_DISABLE_PID_VALIDATION = 1


def info(text: str) -> None:
    print(f"[INFO]  {text}")


def check(ret: int, call: str) -> None:
    if ret != 0:
        sys.exit(f"{call} failed: {ret}")


def map_with_access(handle: int, granularity: int, device_id: int) -> int:
    """Reserve one granule of addresses, map the handle there, give the device access."""
    vir_ptr, ret = acl.rt.reserve_mem_address(granularity, 0, 0, 0)
    check(ret, "aclrtReserveMemAddress")
    check(acl.rt.map_mem(vir_ptr, granularity, 0, handle, 0), "aclrtMapMem")
    desc = [{"flags": ACL_RT_MEM_ACCESS_FLAGS_READWRITE,
             "location": {"type": ACL_MEM_LOCATION_TYPE_DEVICE, "id": device_id}}]
    check(acl.rt.mem_set_access(vir_ptr, granularity, desc, 1), "aclrtMemSetAccess")
    return vir_ptr


def main() -> None:
    check(acl.init(), "aclInit")
    device_id = 0
    check(acl.rt.set_device(device_id), "aclrtSetDevice")

    # Process A: granularity, physical memory, a mapping, the value 123.
    data_size = 1024 * 4
    prop = {"handleType": ACL_MEM_HANDLE_TYPE_NONE,
            "allocationType": ACL_MEM_ALLOCATION_TYPE_PINNED,
            "location": {"type": ACL_MEM_LOCATION_TYPE_DEVICE, "id": 0},
            "memAttr": ACL_HBM_MEM_NORMAL}
    granularity, ret = acl.rt.mem_get_allocation_granularity(
        prop, ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM)
    check(ret, "aclrtMemGetAllocationGranularity")
    info(f"Process A: get memory allocation granularity successfully, granularity = "
         f"{granularity}")
    aligned_size = (data_size + granularity - 1) // granularity * granularity
    info(f"Process A: aligned size = {aligned_size}")
    handle, ret = acl.rt.malloc_physical(aligned_size, prop, 0)
    check(ret, "aclrtMallocPhysical")
    info("Process A: allocate physical memory successfully")
    ptr_a = map_with_access(handle, granularity, device_id)
    info("Process A: reserve virtual memory successfully")
    value = ctypes.c_int(123)
    check(acl.rt.memcpy(ptr_a, 4, ctypes.addressof(value), 4, ACL_MEMCPY_HOST_TO_DEVICE),
          "aclrtMemcpy")
    info(f"Write the data {value.value} to the virtual address {ptr_a:#x}")
    print(f"Source data: {value.value}")

    shareable, ret = acl.rt.mem_export_to_shareable_handle(
        handle, ACL_MEM_HANDLE_TYPE_NONE, ACL_RT_VMM_EXPORT_FLAG_DISABLE_PID_VALIDATION)
    check(ret, "aclrtMemExportToShareableHandle")
    info("Process A: export the physical memory handle successfully")

    # Process B: another process of the machine imports it and maps it at its own address.
    from ascend_memsim import current_runtime

    process_b = current_runtime().spawn_process()
    with process_b.as_current():
        check(acl.rt.set_device(device_id), "aclrtSetDevice")
        imported, ret = acl.rt.mem_import_from_shareable_handle(shareable, device_id)
        check(ret, "aclrtMemImportFromShareableHandle")
        ptr_b = map_with_access(imported, granularity, device_id)
        info("Process B: map virtual memory address to physical memory handle")
        host, ret = acl.rt.malloc_host(granularity)
        check(ret, "aclrtMallocHost")
        check(acl.rt.memcpy(host, granularity, ptr_b, granularity, ACL_MEMCPY_DEVICE_TO_HOST),
              "aclrtMemcpy")
        info(f"Process B: copy memory from device address {ptr_b:#x} to host address "
             f"{host:#x}")
        info(f"Destination data: {ctypes.c_int.from_address(host).value}")
        info("Process B: complete the physical memory sharing")
        check(acl.rt.unmap_mem(ptr_b), "aclrtUnmapMem")
        check(acl.rt.release_mem_address(ptr_b), "aclrtReleaseMemAddress")
        check(acl.rt.free_physical(imported), "aclrtFreePhysical")
        check(acl.rt.free_host(host), "aclrtFreeHost")
        info("Process B: release the virtual and physical memory successfully")
        check(acl.rt.reset_device(device_id), "aclrtResetDevice")
    process_b.close()

    check(acl.rt.unmap_mem(ptr_a), "aclrtUnmapMem")
    check(acl.rt.release_mem_address(ptr_a), "aclrtReleaseMemAddress")
    check(acl.rt.free_physical(handle), "aclrtFreePhysical")
    info("Process A: release the virtual and physical memory successfully")
    check(acl.rt.reset_device(device_id), "aclrtResetDevice")
    check(acl.finalize(), "aclFinalize")


if __name__ == "__main__":
    main()
