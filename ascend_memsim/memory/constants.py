"""Vendor enums and error codes, with the names and values of the CANN headers.

Values are copied from ``include/external/acl/acl_rt.h``, ``acl_base_rt.h`` and
``error_codes/rt_error_codes.h`` of the runtime (repository ``hicann/runtime``).
pyacl does not export them; its samples define them by hand. We export them once,
here, and :mod:`ascend_memsim.acl` re-exports the flat ``ACL_*`` names.
"""

from __future__ import annotations

from enum import IntEnum, IntFlag

__all__ = [
    "KiB", "MiB", "GiB",
    "MallocPolicy", "MallocFlag", "MemAttr", "MemcpyKind", "MemType", "MallocAttrType",
    "ErrorCode", "RunMode", "MODULE_NAMES", "MODULE_APP", "MODULE_ID_MAX", "FLAT_NAMES",
]

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30


class MallocPolicy(IntEnum):
    """aclrtMemMallocPolicy: which pages back a block (acl_rt.h)."""

    HUGE_FIRST = 0
    HUGE_ONLY = 1
    NORMAL_ONLY = 2
    HUGE_FIRST_P2P = 3
    HUGE_ONLY_P2P = 4
    NORMAL_ONLY_P2P = 5
    HUGE1G_ONLY = 6
    HUGE1G_ONLY_P2P = 7


class MallocFlag(IntFlag):
    """Bits that aclrtMallocWithCfg lets a caller OR into the policy (acl_rt.h)."""

    LOW_BAND_WIDTH = 0x100
    HIGH_BAND_WIDTH = 0x1000
    USER_SPACE_READONLY = 0x100000


class MemAttr(IntEnum):
    """aclrtMemAttr: which figure aclrtGetMemInfo reports (acl_rt.h)."""

    DDR_MEM = 0
    HBM_MEM = 1
    DDR_MEM_HUGE = 2
    DDR_MEM_NORMAL = 3
    HBM_MEM_HUGE = 4
    HBM_MEM_NORMAL = 5
    DDR_MEM_P2P_HUGE = 6
    DDR_MEM_P2P_NORMAL = 7
    HBM_MEM_P2P_HUGE = 8
    HBM_MEM_P2P_NORMAL = 9
    HBM_MEM_HUGE1G = 10
    HBM_MEM_P2P_HUGE1G = 11
    MEM_NORMAL = 12
    MEM_HUGE = 13
    MEM_HUGE1G = 14
    MEM_P2P_NORMAL = 15
    MEM_P2P_HUGE = 16
    MEM_P2P_HUGE1G = 17


class MemcpyKind(IntEnum):
    """aclrtMemcpyKind (acl_rt.h)."""

    HOST_TO_HOST = 0
    HOST_TO_DEVICE = 1
    DEVICE_TO_HOST = 2
    DEVICE_TO_DEVICE = 3
    DEFAULT = 4
    HOST_TO_BUF_TO_DEVICE = 5
    INNER_DEVICE_TO_DEVICE = 6
    INTER_DEVICE_TO_DEVICE = 7


class MemType(IntFlag):
    """memType bits of aclrtCheckMemType (acl_rt.h)."""

    DEV = 0x2
    DVPP = 0x8
    RSVD = 0x10


class MallocAttrType(IntEnum):
    """aclrtMallocAttrType: the keys of an aclrtMallocConfig (acl_rt.h)."""

    RSV = 0
    MODULE_ID = 1
    DEVICE_ID = 2
    VA_FLAG = 3


class RunMode(IntEnum):
    """aclrtRunMode: where the host program runs (acl_rt.h)."""

    DEVICE = 0
    HOST = 1


class ErrorCode(IntEnum):
    """aclError values (acl_base_rt.h, rt_error_codes.h). Every code the simulator returns."""

    SUCCESS = 0
    INVALID_PARAM = 100000
    UNINITIALIZE = 100001
    REPEAT_INITIALIZE = 100002
    REPEAT_FINALIZE = 100037
    BAD_ALLOC = 200000
    RT_PARAM_INVALID = 107000
    RT_INVALID_DEVICEID = 107001
    RT_CONTEXT_NULL = 107002
    RT_STREAM_CONTEXT = 107003
    RT_ADDR_UNALIGNED = 107008
    RT_INVALID_MEMORY_TYPE = 107016
    RT_INVALID_HANDLE = 107017
    RT_FEATURE_NOT_SUPPORT = 207000
    RT_MEMORY_ALLOCATION = 207001
    RT_MEMORY_FREE = 207002
    RT_INTERNAL_ERROR = 507000

    @property
    def vendor_name(self) -> str:
        """The C macro name, e.g. ``ACL_ERROR_RT_MEMORY_ALLOCATION``."""
        return "ACL_SUCCESS" if self is ErrorCode.SUCCESS else f"ACL_ERROR_{self.name}"


# The runtime's log-module table, the anonymous enum under "// module id" in
# hicann/runtime include/dfx/base/log_types.h (values 16-21, 26 and 46 have no entry).
# aclrtMallocConfig's MODULE_ID attribute takes one of these; aclrtGetMemUsageInfo reports by it.
MODULE_NAMES: dict[int, str] = {
    value: name for value, name in enumerate((
        "SLOG", "IDEDD", "SCC", "HCCL", "FMK", "CCU", "DVPP", "RUNTIME", "CCE", "HDC", "DRV",
        "NET", "HIXL", "DQS", "ASCTOOL", "UNIFIEDBUS", "", "", "", "", "", "", "DEVMM", "KERNEL",
        "LIBMEDIA", "CCECPU", "", "ROS", "HCCP", "ROCE", "TEFUSION", "PROFILING", "DP", "APP",
        "TS", "TSDUMP", "AICPU", "LP", "TDT", "FE", "MD", "MB", "ME", "IMU", "IMP", "GE", "",
        "CAMERA", "ASCENDCL", "TEEOS", "ISP", "SIS", "HSM", "DSS", "PROCMGR", "BBOX",
        "AIVECTOR", "TBE", "FV", "PYPTO", "TUNE", "HSS", "FFTS", "OP", "UDF", "HICAID", "TSYNC",
        "AUDIO", "TPRT", "ASCENDCKERNEL", "ASYS", "ATRACE", "RTC", "SYSMONITOR", "AML",
        "ADETECT", "ACLRTC",
    )) if name
}
MODULE_APP = 33
#: The runtime turns a module id above this into APP (api_error.cc, DEFAULT_MODULEID).
MODULE_ID_MAX = 255
assert MODULE_NAMES[MODULE_APP] == "APP"


def _flat_names() -> dict[str, int]:
    """The ``ACL_*`` spellings that pyacl samples define, mapped to their values."""
    names: dict[str, int] = {}
    for member in MallocPolicy:
        names[f"ACL_MEM_MALLOC_{member.name}"] = int(member)
    names["ACL_MEM_TYPE_LOW_BAND_WIDTH"] = int(MallocFlag.LOW_BAND_WIDTH)
    names["ACL_MEM_TYPE_HIGH_BAND_WIDTH"] = int(MallocFlag.HIGH_BAND_WIDTH)
    names["ACL_MEM_ACCESS_USER_SPACE_READONLY"] = int(MallocFlag.USER_SPACE_READONLY)
    for member in MemAttr:
        names[f"ACL_{member.name}"] = int(member)
    for member in MemcpyKind:
        names[f"ACL_MEMCPY_{member.name}"] = int(member)
    for member in MemType:
        names[f"ACL_RT_MEM_TYPE_{member.name}"] = int(member)
    for member in MallocAttrType:
        names[f"ACL_RT_MEM_ATTR_{member.name}"] = int(member)
    names["ACL_DEVICE"] = int(RunMode.DEVICE)
    names["ACL_HOST"] = int(RunMode.HOST)
    for member in ErrorCode:
        names[member.vendor_name] = int(member)
    return names


#: Every flat vendor name (``ACL_MEM_MALLOC_HUGE_FIRST``, ``ACL_ERROR_RT_MEMORY_ALLOCATION``, ...).
FLAT_NAMES: dict[str, int] = _flat_names()
