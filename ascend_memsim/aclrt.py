"""The C names of the vendor's device-memory chapter, as aliases of the pyacl face.

Same arguments and the same return shapes as :mod:`ascend_memsim.acl` (out-values first, the
aclError code last), so a lesson can follow the C documentation name for name::

    from ascend_memsim.aclrt import aclInit, aclrtSetDevice, aclrtMalloc, aclrtFree
    ptr, ret = aclrtMalloc(100, ACL_MEM_MALLOC_HUGE_FIRST)
"""

from __future__ import annotations

from . import acl
from .memory.constants import FLAT_NAMES

#: C name -> pyacl function.
C_NAMES = {
    "aclInit": acl.init,
    "aclFinalize": acl.finalize,
    "aclrtSetDevice": acl.rt.set_device,
    "aclrtResetDevice": acl.rt.reset_device,
    "aclrtGetDevice": acl.rt.get_device,
    "aclrtGetDeviceCount": acl.rt.get_device_count,
    "aclrtMalloc": acl.rt.malloc,
    "aclrtMallocAlign32": acl.rt.malloc_align32,
    "aclrtMallocCached": acl.rt.malloc_cached,
    "aclrtMallocWithCfg": acl.rt.malloc_with_cfg,
    "aclrtMallocForTaskScheduler": acl.rt.malloc_for_task_scheduler,
    "aclrtFree": acl.rt.free,
    "aclrtFreeWithDevSync": acl.rt.free_with_dev_sync,
    "aclrtGetMemInfo": acl.rt.get_mem_info,
    "aclrtGetMemUsageInfo": acl.rt.get_mem_usage_info,
    "aclrtCheckMemType": acl.rt.check_mem_type,
    "aclrtMemcpy": acl.rt.memcpy,
    "aclrtMemset": acl.rt.memset,
    "aclrtMemcpyAsync": acl.rt.memcpy_async,
    "aclrtMemsetAsync": acl.rt.memset_async,
    "aclrtMallocHost": acl.rt.malloc_host,
    "aclrtFreeHost": acl.rt.free_host,
    "aclrtCreateStream": acl.rt.create_stream,
    "aclrtDestroyStream": acl.rt.destroy_stream,
    "aclrtSynchronizeStream": acl.rt.synchronize_stream,
    "aclrtSynchronizeDevice": acl.rt.synchronize_device,
    "aclrtCreateContext": acl.rt.create_context,
    "aclrtDestroyContext": acl.rt.destroy_context,
    "aclrtSetCurrentContext": acl.rt.set_context,
    "aclrtGetCurrentContext": acl.rt.get_context,
    "aclrtGetRunMode": acl.rt.get_run_mode,
    "acldvppMalloc": acl.media.dvpp_malloc,
    "acldvppFree": acl.media.dvpp_free,
}

globals().update(C_NAMES)
globals().update(FLAT_NAMES)

__all__ = ["C_NAMES", *C_NAMES, *FLAT_NAMES]
