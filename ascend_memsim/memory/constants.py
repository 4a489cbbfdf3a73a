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
    "ErrorCode", "RunMode", "DataType", "Format", "EventFlag", "EventRecordedStatus",
    "EventStatus", "StreamFlag", "CallbackBlock", "DATA_TYPE_BITS", "UNKNOWN_RANK",
    "MODULE_NAMES", "MODULE_APP", "MODULE_ID_MAX", "FLAT_NAMES",
    "HostRegisterType", "HostRegFlag", "HacType",
    "LocationType", "AllocationType", "HandleType", "GranularityOption", "AccessFlags",
    "SharedHandleType", "IpcMemAttrType", "SHARING_FLAGS", "IPC_KEY_LEN", "PoolAttr",
    "ManagedAdvise", "ManagedLocationType", "ManagedRangeAttr", "MEM_ATTACH_GLOBAL",
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


class HostRegisterType(IntEnum):
    """aclrtHostRegisterType of aclrtHostRegister (acl_rt.h)."""

    MAPPED = 0
    IOMEMORY = 0x04
    READONLY = 0x08


class HostRegFlag(IntFlag):
    """The ACL_HOST_REG_* flags of aclrtHostRegisterV2 (acl_rt.h)."""

    MAPPED = 0x2
    IOMEMORY = 0x4
    READONLY = 0x8
    PINNED = 0x10000000


class HacType(IntEnum):
    """aclrtHacType of aclrtHostMemMapCapabilities (acl_rt.h)."""

    STARS = 0
    AICPU = 1
    AIC = 2
    AIV = 3
    PCIEDMA = 4
    RDMA = 5
    SDMA = 6
    DVPP = 7
    UDMA = 8
    CCU = 9


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


class DataType(IntEnum):
    """aclDataType (hicann/runtime include/external/acl/acl_base_rt.h)."""

    DT_UNDEFINED = -1
    FLOAT = 0
    FLOAT16 = 1
    INT8 = 2
    INT32 = 3
    UINT8 = 4
    INT16 = 6
    UINT16 = 7
    UINT32 = 8
    INT64 = 9
    UINT64 = 10
    DOUBLE = 11
    BOOL = 12
    STRING = 13
    COMPLEX64 = 16
    COMPLEX128 = 17
    BF16 = 27
    INT4 = 29
    UINT1 = 30
    COMPLEX32 = 33
    HIFLOAT8 = 34
    FLOAT8_E5M2 = 35
    FLOAT8_E4M3FN = 36
    FLOAT8_E8M0 = 37
    FLOAT6_E3M2 = 38
    FLOAT6_E2M3 = 39
    FLOAT4_E2M1 = 40
    FLOAT4_E1M2 = 41


#: Bits per element of each aclDataType (aclDataTypeSize gives bytes; sub-byte types pack).
#: DECISION: ACL_STRING has no fixed size (0): a string tensor's size is not computed.
DATA_TYPE_BITS: dict[DataType, int] = {
    DataType.FLOAT: 32, DataType.FLOAT16: 16, DataType.INT8: 8, DataType.INT32: 32,
    DataType.UINT8: 8, DataType.INT16: 16, DataType.UINT16: 16, DataType.UINT32: 32,
    DataType.INT64: 64, DataType.UINT64: 64, DataType.DOUBLE: 64, DataType.BOOL: 8,
    DataType.STRING: 0, DataType.COMPLEX64: 64, DataType.COMPLEX128: 128, DataType.BF16: 16,
    DataType.INT4: 4, DataType.UINT1: 1, DataType.COMPLEX32: 32, DataType.HIFLOAT8: 8,
    DataType.FLOAT8_E5M2: 8, DataType.FLOAT8_E4M3FN: 8, DataType.FLOAT8_E8M0: 8,
    DataType.FLOAT6_E3M2: 6, DataType.FLOAT6_E2M3: 6, DataType.FLOAT4_E2M1: 4,
    DataType.FLOAT4_E1M2: 4,
}


class Format(IntEnum):
    """aclFormat (hicann/runtime include/external/acl/acl_base_rt.h)."""

    UNDEFINED = -1
    NCHW = 0
    NHWC = 1
    ND = 2
    NC1HWC0 = 3
    FRACTAL_Z = 4
    NC1HWC0_C04 = 12
    HWCN = 16
    NDHWC = 27
    FRACTAL_NZ = 29
    NCDHW = 30
    NDC1HWC0 = 32
    FRACTAL_Z_3D = 33  # the header spells it ACL_FRACTAL_Z_3D
    NC = 35
    NCL = 47
    FRACTAL_NZ_C0_16 = 50
    FRACTAL_NZ_C0_32 = 51
    FRACTAL_NZ_C0_2 = 52
    FRACTAL_NZ_C0_4 = 53
    FRACTAL_NZ_C0_8 = 54


class EventFlag(IntFlag):
    """aclrtCreateEventWithFlag flags (acl_rt.h)."""

    SYNC = 0x1
    CAPTURE_STREAM_PROGRESS = 0x2
    TIME_LINE = 0x8
    DEVICE_USE_ONLY = 0x10
    EXTERNAL = 0x20
    IPC = 0x40


class EventRecordedStatus(IntEnum):
    """aclrtEventRecordedStatus: what aclrtQueryEventStatus answers (acl_rt.h)."""

    NOT_READY = 0
    COMPLETE = 1


class EventStatus(IntEnum):
    """aclrtEventStatus: what the deprecated aclrtQueryEvent answers (acl_rt.h); note the
    opposite polarity to :class:`EventRecordedStatus`."""

    COMPLETE = 0
    NOT_READY = 1
    RESERVED = 2


class StreamFlag(IntFlag):
    """aclrtCreateStreamWithConfig flags (acl_rt.h)."""

    FAST_LAUNCH = 0x1
    FAST_SYNC = 0x2
    PERSISTENT = 0x4
    HUGE = 0x8
    CPU_SCHEDULE = 0x10
    DEVICE_USE_ONLY = 0x20


class CallbackBlock(IntEnum):
    """aclrtCallbackBlockType (acl_rt.h)."""

    NO_BLOCK = 0
    BLOCK = 1


class ErrorCode(IntEnum):
    """aclError values (acl_base_rt.h, rt_error_codes.h). Every code the simulator returns."""

    SUCCESS = 0
    INVALID_PARAM = 100000
    UNINITIALIZE = 100001
    REPEAT_INITIALIZE = 100002
    REPEAT_FINALIZE = 100037
    BAD_ALLOC = 200000
    FEATURE_UNSUPPORTED = 200006
    RT_PARAM_INVALID = 107000
    RT_INVALID_DEVICEID = 107001
    RT_CONTEXT_NULL = 107002
    RT_STREAM_CONTEXT = 107003
    RT_ADDR_UNALIGNED = 107008
    RT_INVALID_MEMORY_TYPE = 107016
    RT_INVALID_HANDLE = 107017
    RT_EVENT_TIMESTAMP_INVALID = 107006
    RT_STREAM_NO_CB_REG = 107015
    # acl_base_rt.h: operator, model and callback errors
    INVALID_FILE = 100003
    INVALID_MODEL_ID = 100011
    PARSE_MODEL = 100013
    MODEL_INPUT_NOT_MATCH = 100017
    MODEL_OUTPUT_NOT_MATCH = 100018
    MODEL_NOT_DYNAMIC = 100019
    OP_INPUT_NOT_MATCH = 100021
    OP_OUTPUT_NOT_MATCH = 100022
    OP_ATTR_NOT_MATCH = 100023
    OP_NOT_FOUND = 100024
    UNSUPPORTED_DATA_TYPE = 100026
    REPEAT_SUBSCRIBE = 100033
    STREAM_NOT_SUBSCRIBE = 100034
    THREAD_NOT_SUBSCRIBE = 100035
    WAIT_CALLBACK_TIMEOUT = 100036
    # hicann/ge inc/external/ge/ge_error_codes.h: the dynamic gear calls
    GE_DYNAMIC_INPUT_LENGTH_INVALID = 145012
    GE_DYNAMIC_BATCH_SIZE_INVALID = 145013
    RT_EVENT_NOT_COMPLETE = 507006
    RT_AICORE_EXCEPTION = 507015
    RT_FEATURE_NOT_SUPPORT = 207000
    RT_MEMORY_ALLOCATION = 207001
    RT_MEMORY_FREE = 207002
    RT_INTERNAL_ERROR = 507000
    # rt_error_codes.h: aclrtHostRegisterV2 / aclrtHostUnregister
    HOST_MEMORY_ALREADY_REGISTERED = 507910
    HOST_MEMORY_NOT_REGISTERED = 507911
    # acl_base_rt.h: what the DVPP image codecs return (acldvppJpeg*, acldvppPng*)
    FORMAT_NOT_MATCH = 100027
    UNSUPPORTED_JPEG = 148052
    FAILURE = 500001
    # rt_error_codes.h: a process not on a shared memory's whitelist (IPC, shareable handles)
    RT_NO_PERMISSION = 207006
    # rt_error_codes.h: a CMO barrier id never given (aclrtCmoWaitBarrier), a device symbol
    # never registered (aclrtGetSymbolAddress, 11-11)
    RT_STREAM_MODEL = 107005
    RT_INVALID_SYMBOL = 107043

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
#: ACL_UNKNOWN_RANK (acl_base_rt.h): aclGetTensorDescNumDims of a tensor of unknown rank.
UNKNOWN_RANK = 0xFFFFFFFFFFFFFFFE
#: The runtime turns a module id above this into APP (api_error.cc, DEFAULT_MODULEID).
MODULE_ID_MAX = 255
assert MODULE_NAMES[MODULE_APP] == "APP"


class LocationType(IntEnum):
    """aclrtMemLocationType (acl_rt.h)."""

    HOST = 0
    DEVICE = 1
    UNREGISTERED = 2
    MANAGED = 3
    HOST_NUMA = 4


class AllocationType(IntEnum):
    """aclrtMemAllocationType (acl_rt.h)."""

    PINNED = 0


class HandleType(IntEnum):
    """aclrtMemHandleType (acl_rt.h)."""

    NONE = 0
    POSIX = 2


class GranularityOption(IntEnum):
    """aclrtMemGranularityOptions (acl_rt.h)."""

    MINIMUM = 0
    RECOMMENDED = 1
    UNDEF = 0xFFFF


class AccessFlags(IntEnum):
    """aclrtMemAccessFlags (acl_rt.h)."""

    NONE = 0x0
    READ = 0x1
    READWRITE = 0x3


class SharedHandleType(IntEnum):
    """aclrtMemSharedHandleType (acl_rt.h): what aclrtMemExportToShareableHandleV2 exports."""

    DEFAULT = 0x1
    FABRIC = 0x2


class IpcMemAttrType(IntEnum):
    """aclrtIpcMemAttrType (acl_rt.h)."""

    ACCESS_LINK = 0


#: Sharing memory between processes (acl_rt.h macros, 11-04 and 11-07): the export flags (pid
#: whitelist checked or not), the IPC import flag (peer access enabled by the import) and the
#: values of ACL_RT_IPC_MEM_ATTR_ACCESS_LINK.
SHARING_FLAGS = {
    "ACL_RT_IPC_MEM_EXPORT_FLAG_DEFAULT": 0x0,
    "ACL_RT_IPC_MEM_EXPORT_FLAG_DISABLE_PID_VALIDATION": 0x1,
    "ACL_RT_IPC_MEM_IMPORT_FLAG_DEFAULT": 0x0,
    "ACL_RT_IPC_MEM_IMPORT_FLAG_ENABLE_PEER_ACCESS": 0x1,
    "ACL_RT_VMM_EXPORT_FLAG_DEFAULT": 0x0,
    "ACL_RT_VMM_EXPORT_FLAG_DISABLE_PID_VALIDATION": 0x1,
    "ACL_RT_IPC_MEM_ATTR_ACCESS_LINK_SIO": 0,
    "ACL_RT_IPC_MEM_ATTR_ACCESS_LINK_HCCS": 1,
    "ACL_RT_IPC_MEM_ATTR_ACCESS_LINK_UB_ONE_PORT_PATH": 2,
    "ACL_RT_IPC_MEM_ATTR_ACCESS_LINK_UB_MULTI_PORT_PATH": 3,
}
#: aclrtIpcMemGetExportKey's key length: "len ... 固定配置为65" (11-07).
IPC_KEY_LEN = 65


class PoolAttr(IntEnum):
    """aclrtMemPoolAttr (``include/external/acl/acl_rt_memory_soma.h``, 11-10)."""

    REUSE_FOLLOW_EVENT_DEPENDENCIES = 0x1
    REUSE_ALLOW_OPPORTUNISTIC = 0x2
    REUSE_ALLOW_INTERNAL_DEPENDENCIES = 0x3
    ATTR_RELEASE_THRESHOLD = 0x4
    ATTR_RESERVED_MEM_CURRENT = 0x5
    ATTR_RESERVED_MEM_HIGH = 0x6
    ATTR_USED_MEM_CURRENT = 0x7
    ATTR_USED_MEM_HIGH = 0x8


class ManagedAdvise(IntEnum):
    """aclrtMemManagedAdviseType (acl_rt.h, 11-05 aclrtMemManagedAdvise)."""

    SET_READ_MOSTLY = 0
    UNSET_READ_MOSTLY = 1
    SET_PREFERRED_LOCATION = 2
    UNSET_PREFERRED_LOCATION = 3
    SET_ACCESSED_BY = 4
    UNSET_ACCESSED_BY = 5


class ManagedLocationType(IntEnum):
    """aclrtMemManagedLocationType (acl_rt.h): where managed memory lives or is sent."""

    INVALID = 0
    DEVICE = 1
    HOST = 2
    HOST_NUMA = 3
    HOST_NUMA_CURRENT = 4


class ManagedRangeAttr(IntEnum):
    """aclrtMemManagedRangeAttribute (acl_rt.h, 11-05 aclrtMemManagedGetAttr)."""

    READ_MOSTLY = 1
    PREFERRED_LOCATION = 2
    ACCESSED_BY = 3
    PREFERRED_LOCATION_TYPE = 4
    PREFERRED_LOCATION_ID = 5
    LAST_PREFETCH_LOCATION = 6
    LAST_PREFETCH_LOCATION_TYPE = 7
    LAST_PREFETCH_LOCATION_ID = 8


#: aclrtMemAllocManaged's only flag: "#define ACL_RT_MEM_ATTACH_GLOBAL (0x01U)" (acl_rt.h, 11-05).
MEM_ATTACH_GLOBAL = 0x1


#: The virtual-memory enums (11-04) and their vendor prefixes.
_VMM_ENUMS = ((LocationType, "ACL_MEM_LOCATION_TYPE_"),
              (AllocationType, "ACL_MEM_ALLOCATION_TYPE_"), (HandleType, "ACL_MEM_HANDLE_TYPE_"),
              (GranularityOption, "ACL_RT_MEM_ALLOC_GRANULARITY_"),
              (AccessFlags, "ACL_RT_MEM_ACCESS_FLAGS_"), (PoolAttr, "ACL_RT_MEM_POOL_"),
              (ManagedAdvise, "ACL_MEM_ADVISE_"), (ManagedLocationType, "ACL_MEM_LOCATIONTYPE_"),
              (ManagedRangeAttr, "ACL_MEM_RANGE_ATTRIBUTE_"))


def _flat_names() -> dict[str, int]:
    """The ``ACL_*`` spellings that pyacl samples define, mapped to their values."""
    names: dict[str, int] = {}
    # one loop variable for every enum below
    member: IntEnum | IntFlag
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
    for member in HostRegisterType:
        names[f"ACL_HOST_REGISTER_{member.name}"] = int(member)
    for member in HostRegFlag:
        names[f"ACL_HOST_REG_{member.name}"] = int(member)
    for member in HacType:
        names[f"ACL_RT_HAC_TYPE_{member.name}"] = int(member)
    names["ACL_RT_HOST_MEM_MAP_NOT_SUPPORTED"] = 0  # aclrtHostMemMapCapability (acl_rt.h)
    names["ACL_RT_HOST_MEM_MAP_SUPPORTED"] = 1
    for member in MallocAttrType:
        names[f"ACL_RT_MEM_ATTR_{member.name}"] = int(member)
    for enum, prefix in _VMM_ENUMS:
        names.update({f"{prefix}{member.name}": int(member) for member in enum})
    names.update({f"ACL_MEM_SHARE_HANDLE_TYPE_{m.name}": int(m) for m in SharedHandleType})
    names["ACL_RT_IPC_MEM_ATTR_ACCESS_LINK"] = int(IpcMemAttrType.ACCESS_LINK)
    names.update(SHARING_FLAGS)
    names["ACL_RT_MEM_ATTACH_GLOBAL"] = MEM_ATTACH_GLOBAL
    names["ACL_DEVICE"] = int(RunMode.DEVICE)
    names["ACL_HOST"] = int(RunMode.HOST)
    for code in ErrorCode:
        names[code.vendor_name] = int(code)
    for member in DataType:
        names[f"ACL_{member.name}"] = int(member)
    for member in Format:
        names[f"ACL_FORMAT_{member.name}"] = int(member)
    names["ACL_FRACTAL_Z_3D"] = int(Format.FRACTAL_Z_3D)
    for member in EventFlag:
        names[f"ACL_EVENT_{member.name}"] = int(member)
    for member in EventRecordedStatus:
        names[f"ACL_EVENT_RECORDED_STATUS_{member.name}"] = int(member)
    for member in EventStatus:
        names[f"ACL_EVENT_STATUS_{member.name}"] = int(member)
    for member in StreamFlag:
        names[f"ACL_STREAM_{member.name}"] = int(member)
    for member in CallbackBlock:
        names[f"ACL_CALLBACK_{member.name}"] = int(member)
    names["ACL_MEMTYPE_DEVICE"] = 0  # aclMemType (acl_base_rt.h)
    names["ACL_MEMTYPE_HOST"] = 1
    names["ACL_UNKNOWN_RANK"] = UNKNOWN_RANK
    return names


#: Every flat vendor name (``ACL_MEM_MALLOC_HUGE_FIRST``, ``ACL_ERROR_RT_MEMORY_ALLOCATION``, ...).
FLAT_NAMES: dict[str, int] = _flat_names()
