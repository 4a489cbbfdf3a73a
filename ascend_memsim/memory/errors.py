"""Exceptions of the Pythonic core, each carrying the aclError code the pyacl face returns.

Each class is named for a condition and has exactly one ``code``. Classes inherit the
built-in exception whose meaning matches (a wrong argument type is a ``TypeError``), so
``except ValueError`` works as a Python user expects. Running out of *device* memory is not
``MemoryError``: that means the host ran out.
"""

from __future__ import annotations

from .constants import ErrorCode

__all__ = [
    "AclError", "InvalidArgument", "TraceFormatError", "InvalidArgumentType", "NotInitialized",
    "AlreadyInitialized", "AlreadyFinalized", "InvalidRuntimeParam", "InvalidPointer",
    "InvalidDevice", "DeviceNotSet", "InvalidMemoryType", "FeatureNotSupported",
    "OutOfDeviceMemory", "OutOfHostMemory", "InvalidHandle", "StreamContextMismatch",
    "InternalError", "SanitizerError", "InvalidFile", "InvalidModelId", "ModelParseError",
    "ModelInputMismatch", "ModelOutputMismatch", "DynamicInputLengthInvalid",
    "DynamicGearInvalid", "OpInputMismatch", "OpOutputMismatch",
    "OpNotFound", "UnsupportedDataType", "KernelError", "EventNotComplete",
    "RepeatSubscribe", "StreamNotSubscribed", "NoCallbackStream", "ThreadNotSubscribed",
    "CallbackTimeout", "ReservedFlagSet", "HostMemoryAlreadyRegistered",
    "HostMemoryNotRegistered", "AllocatorConfigError", "NpuOutOfMemoryError", "NoPermission",
    "FormatNotMatch", "UnsupportedJpeg", "UnreadableImage", "NotOnThisProduct",
    "UnknownBarrier", "UnknownSymbol",
    "error_classes",
]


class AclError(Exception):
    """Base of every simulator error; ``code`` is the vendor aclError value."""

    code: ErrorCode = ErrorCode.RT_INTERNAL_ERROR
    #: a batch copy's failing entry, set on the errors it raises (no value otherwise)
    fail_index: int

    def __init__(self, message: str = "") -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return f"{self.message} [{self.code.vendor_name} {int(self.code)}]"


class InvalidArgument(AclError, ValueError):
    """An argument has the right type but a value the API rejects (size 0, NULL, bad policy)."""

    code = ErrorCode.INVALID_PARAM


class TraceFormatError(InvalidArgument):
    """A trace line that cannot be read; the message starts with ``file:line:``."""


class InvalidArgumentType(AclError, TypeError):
    """An argument has a type the API cannot take (a float size, a str pointer, None)."""

    code = ErrorCode.INVALID_PARAM


class NotInitialized(AclError, RuntimeError):
    """A call needs ``acl.init`` (or an active :class:`~ascend_memsim.Runtime`) first."""

    code = ErrorCode.UNINITIALIZE


class AlreadyInitialized(AclError, RuntimeError):
    """``acl.init`` was called twice without ``acl.finalize`` in between."""

    code = ErrorCode.REPEAT_INITIALIZE


class AlreadyFinalized(AclError, RuntimeError):
    """``acl.finalize`` was called with no runtime initialised."""

    code = ErrorCode.REPEAT_FINALIZE


class InvalidRuntimeParam(AclError, ValueError):
    """An argument the runtime layer rejects (ACL_ERROR_RT_PARAM_INVALID): a count past
    dest_max, an unknown malloc-config attribute, a config device other than the current."""

    code = ErrorCode.RT_PARAM_INVALID


class InvalidPointer(InvalidRuntimeParam):
    """A pointer that is not what the call needs: not the start of a live block, freed, unknown,
    or an access that leaves its block."""


class InvalidDevice(AclError, ValueError):
    """A device id outside ``[0, device_count)``."""

    code = ErrorCode.RT_INVALID_DEVICEID


class DeviceNotSet(AclError, RuntimeError):
    """The calling thread has no current device (``acl.rt.set_device`` was not called)."""

    code = ErrorCode.RT_CONTEXT_NULL


class InvalidMemoryType(AclError, ValueError):
    """An ``aclrtMemAttr`` value outside the enum."""

    code = ErrorCode.RT_INVALID_MEMORY_TYPE


class FeatureNotSupported(AclError, RuntimeError):
    """The product does not have the feature (1 GB pages on 950, usage info on 950)."""

    code = ErrorCode.RT_FEATURE_NOT_SUPPORT


class OutOfDeviceMemory(AclError):
    """No free run of device memory can host the block (ACL_ERROR_RT_MEMORY_ALLOCATION)."""

    code = ErrorCode.RT_MEMORY_ALLOCATION


class OutOfHostMemory(AclError, MemoryError):
    """A simulated host allocation failed (ACL_ERROR_BAD_ALLOC)."""

    code = ErrorCode.BAD_ALLOC


class InvalidHandle(AclError, ValueError):
    """A stream, context or other handle that does not exist or was destroyed."""

    code = ErrorCode.RT_INVALID_HANDLE


class NoPermission(AclError, PermissionError):
    """The calling process is not on a shared memory's pid whitelist (11-04, 11-07)."""

    code = ErrorCode.RT_NO_PERMISSION


class StreamContextMismatch(AclError, ValueError):
    """Work queued on a stream of another device than the calling thread's current one."""

    code = ErrorCode.RT_STREAM_CONTEXT


class InternalError(AclError, RuntimeError):
    """A condition the simulated runtime itself reports as internal."""

    code = ErrorCode.RT_INTERNAL_ERROR


class SanitizerError(InvalidRuntimeParam):
    """A call the strict sanitizer refused; ``report`` is the finding (see sanitizer.py).

    DECISION: ACL_ERROR_RT_PARAM_INVALID, the code of the runtime's own pointer checks; the
    vendor has no code for "the sanitizer refused".
    """

    def __init__(self, message: str = "", report: object = None) -> None:
        super().__init__(message)
        self.report = report


class InvalidFile(AclError, ValueError):
    """A file (a model, its stand-in) that does not exist or cannot be read."""

    code = ErrorCode.INVALID_FILE


class InvalidModelId(AclError, ValueError):
    """A model id that was never loaded or was unloaded."""

    code = ErrorCode.INVALID_MODEL_ID


class ModelParseError(AclError, ValueError):
    """A model stand-in (``<model>.memsim.json``) missing or malformed."""

    code = ErrorCode.PARSE_MODEL


class ModelInputMismatch(AclError, ValueError):
    """A model's input dataset does not match its description (count, sizes)."""

    code = ErrorCode.MODEL_INPUT_NOT_MATCH


class ModelOutputMismatch(AclError, ValueError):
    """A model's output dataset (or what its function returned) does not match."""

    code = ErrorCode.MODEL_OUTPUT_NOT_MATCH


class DynamicInputLengthInvalid(AclError, ValueError):
    """The dynamic input's buffer is too small for the gear's values, or the dims given to
    aclmdlSetInputDynamicDims do not match the model's inputs (GE
    ACL_ERROR_GE_DYNAMIC_INPUT_LENGTH_INVALID)."""

    code = ErrorCode.GE_DYNAMIC_INPUT_LENGTH_INVALID


class DynamicGearInvalid(AclError, ValueError):
    """A batch size, image size or dims that is no gear of the model (GE
    ACL_ERROR_GE_DYNAMIC_BATCH_SIZE_INVALID)."""

    code = ErrorCode.GE_DYNAMIC_BATCH_SIZE_INVALID


class OpInputMismatch(AclError, ValueError):
    """An operator's inputs do not match their descriptors (count, buffer too small)."""

    code = ErrorCode.OP_INPUT_NOT_MATCH


class OpOutputMismatch(AclError, ValueError):
    """An operator's outputs do not match their descriptors (count, size, shape, dtype)."""

    code = ErrorCode.OP_OUTPUT_NOT_MATCH


class OpNotFound(AclError, LookupError):
    """An operator type with no kernel (ACL_ERROR_OP_NOT_FOUND)."""

    code = ErrorCode.OP_NOT_FOUND


class UnsupportedDataType(AclError, ValueError):
    """A data type the kernels cannot compute in (no numpy dtype)."""

    code = ErrorCode.UNSUPPORTED_DATA_TYPE


class KernelError(AclError, RuntimeError):
    """An operator kernel or model function raised when its queued work ran.

    DECISION: ACL_ERROR_RT_AICORE_EXCEPTION, the code the runtime gives a kernel that faults.
    """

    code = ErrorCode.RT_AICORE_EXCEPTION


class EventNotComplete(AclError, RuntimeError):
    """An event asked for a time before the work it records has run."""

    code = ErrorCode.RT_EVENT_NOT_COMPLETE


class RepeatSubscribe(AclError, ValueError):
    """aclrtSubscribeReport of a stream already subscribed."""

    code = ErrorCode.REPEAT_SUBSCRIBE


class StreamNotSubscribed(AclError, ValueError):
    """A callback launched on (or an unsubscribe of) a stream no thread subscribed."""

    code = ErrorCode.STREAM_NOT_SUBSCRIBE


class NoCallbackStream(AclError, ValueError):
    """A callback launched on a stream that no thread subscribed."""

    code = ErrorCode.RT_STREAM_NO_CB_REG


class ThreadNotSubscribed(AclError, ValueError):
    """aclrtProcessReport on a thread that subscribed no stream."""

    code = ErrorCode.THREAD_NOT_SUBSCRIBE


class CallbackTimeout(AclError, TimeoutError):
    """aclrtProcessReport: no callback arrived within the timeout."""

    code = ErrorCode.WAIT_CALLBACK_TIMEOUT


class ReservedFlagSet(AclError, ValueError):
    """A reserved flags argument that must be 0 is not (aclrtDeviceEnablePeerAccess:
    ACL_ERROR_FEATURE_UNSUPPORTED, memory.cpp)."""

    code = ErrorCode.FEATURE_UNSUPPORTED


class HostMemoryAlreadyRegistered(AclError, ValueError):
    """aclrtHostRegisterV2 of a range that overlaps one already registered."""

    code = ErrorCode.HOST_MEMORY_ALREADY_REGISTERED


class HostMemoryNotRegistered(AclError, ValueError):
    """aclrtHostUnregister of an address that starts no registered range."""

    code = ErrorCode.HOST_MEMORY_NOT_REGISTERED


class AllocatorConfigError(InvalidArgument):
    """A ``PYTORCH_NPU_ALLOC_CONF`` string torch_npu refuses. ``str()`` is torch_npu's own
    message (``Ascend/pytorch`` ``NPUAllocatorConfig.cpp``), so users recognise it; the code
    stays in ``code``."""

    def __str__(self) -> str:
        return self.message


class NpuOutOfMemoryError(OutOfDeviceMemory):
    """torch_npu's OutOfMemoryError: its caching allocator could find or make no block.

    ``str()`` is torch_npu's message (``NPUCachingAllocator.cpp`` ``malloc``); the figures, in
    bytes, are attributes (None when not given): ``tried`` (the segment size it tried),
    ``device``, ``total_capacity``, ``allocated``, ``active``, ``free``, ``allowed`` (None
    without a memory fraction), ``reserved``, ``reserved_unallocated`` (reserved minus
    allocated) and ``rejected`` (throw_on_npumalloc_oom refused it before any device call).
    """

    tried: int | None
    device: int | None
    total_capacity: int | None
    allocated: int | None
    active: int | None
    free: int | None
    allowed: int | None
    reserved: int | None

    def __init__(self, message: str = "", **figures: object) -> None:
        super().__init__(message)
        for name in ("tried", "device", "total_capacity", "allocated", "active", "free",
                     "allowed", "reserved"):
            setattr(self, name, figures.get(name))
        self.rejected = bool(figures.get("rejected", False))
        self.reserved_unallocated = (self.reserved - self.allocated
                                     if self.reserved is not None and self.allocated is not None
                                     else None)

    def __str__(self) -> str:
        return self.message


class FormatNotMatch(AclError, ValueError):
    """A picture format the DVPP call does not take, or that does not match the image
    (ACL_ERROR_FORMAT_NOT_MATCH: acldvppJpegPredictDecSize, acldvppPngGetImageInfo)."""

    code = ErrorCode.FORMAT_NOT_MATCH


class UnsupportedJpeg(AclError, ValueError):
    """A JPEG the decoder cannot take: progressive, arithmetic-coded, 12-bit, CMYK, 4:1:1
    (ACL_ERROR_UNSUPPORTED_JPEG)."""

    code = ErrorCode.UNSUPPORTED_JPEG


class UnreadableImage(AclError, ValueError):
    """Image bytes whose header cannot be read: not a JPEG, truncated, corrupt (the vendor's
    acldvppJpegGetImageInfo returns ACL_ERROR_FAILURE when libjpeg cannot read the header)."""

    code = ErrorCode.FAILURE


class NotOnThisProduct(AclError, RuntimeError):
    """The vendor's library has the call but not for this product (the DVPP codecs on Ascend
    950: ACL_ERROR_FEATURE_UNSUPPORTED, as its image processors answer a call their
    version lacks)."""

    code = ErrorCode.FEATURE_UNSUPPORTED


class UnknownBarrier(AclError, LookupError):
    """aclrtCmoWaitBarrier names a barrier id no aclrtCmoAsyncWithBarrier gave
    (``Model::GetCmoId``: RT_ERROR_MODEL_EXIT_ID, which ``errcode_manage.cc`` makes
    ACL_ERROR_RT_STREAM_MODEL)."""

    code = ErrorCode.RT_STREAM_MODEL


class UnknownSymbol(AclError, LookupError):
    """A device symbol (11-11) no kernel registered (``SymbolTable::Lookup``:
    RT_ERROR_INVALID_SYMBOL, ACL_ERROR_RT_INVALID_SYMBOL)."""

    code = ErrorCode.RT_INVALID_SYMBOL


def error_classes() -> list[type[AclError]]:
    """Every concrete exception class, found by walking the subclasses of :class:`AclError`."""
    found: list[type[AclError]] = []
    pending = list(AclError.__subclasses__())
    while pending:
        cls = pending.pop()
        found.append(cls)
        pending.extend(cls.__subclasses__())
    return found
