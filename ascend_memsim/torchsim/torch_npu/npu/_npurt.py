"""What ``torch_npu.npu.npurt()`` returns: torch_npu's raw runtime calls
(``torch_npu._C._npurt``, ``torch_npu/csrc/npu/npurt.cpp``), answered by the estimate's
simulated runtime.

Each returns the aclError code as an int (0: success), never raises for a bad value, as the
binding does: ``npuHostRegister(ptr, size, flags)`` (aclrtHostRegisterV2, ``flags`` the
``ACL_HOST_REG_*`` bits), ``npuHostUnregister(ptr)`` (aclrtHostUnregister),
``npuStreamCreate(ptr)`` (aclrtCreateStream, the new stream's handle written to the 8 bytes
at ``ptr``) and ``npuStreamDestroy(stream)`` (aclrtDestroyStream). A NULL ``ptr`` is
ACL_ERROR_INVALID_PARAM before the runtime is called (the binding's own check); a ``ptr``
that is not writable host memory of this process, where the machine would crash, is the
code of :class:`~ascend_memsim.memory.errors.InvalidPointer` here and creates no stream.
An argument of another type is a TypeError (the binding's conversion refuses it).
"""

from __future__ import annotations

import struct
from typing import Any

from ....data import raw
from ....data.pinned import pinned_host
from ....memory.constants import ErrorCode
from ....memory.errors import AclError, InvalidPointer
from ._state import _session

__all__ = ["npuHostRegister", "npuHostUnregister", "npuStreamCreate", "npuStreamDestroy"]

_U64 = (1 << 64) - 1
_U32 = (1 << 32) - 1


def _unsigned(value: Any, name: str, top: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= top:
        raise TypeError(f"{name} must be an unsigned int of at most {top.bit_length()} bits, "
                        f"not {value!r}")
    return value


def _runtime() -> Any:
    """The estimate's runtime, with its device current on this thread (torch_npu's calls
    run on the device the process set)."""
    session = _session()
    runtime = session.runtime
    current = runtime.current_device_or_none()
    if current is None or current.device_id != session.device:
        runtime.set_device(session.device)
    return runtime


def _code(call: Any, *args: Any) -> int:
    try:
        call(*args)
    except AclError as e:
        return int(e.code)
    return int(ErrorCode.SUCCESS)


def npuHostRegister(ptr: int, size: int, flags: int) -> int:
    """Register ``size`` bytes of host memory at ``ptr`` for the device: the aclError."""
    _unsigned(ptr, "ptr", _U64)
    _unsigned(size, "size", _U64)
    _unsigned(flags, "flags", _U32)
    if ptr == 0:
        return int(ErrorCode.INVALID_PARAM)
    return _code(pinned_host(_runtime()).register_v2, ptr, size, flags)


def npuHostUnregister(ptr: int) -> int:
    """Drop the registration that starts at ``ptr``: the aclError."""
    _unsigned(ptr, "ptr", _U64)
    if ptr == 0:
        return int(ErrorCode.INVALID_PARAM)
    return _code(pinned_host(_runtime()).unregister, ptr)


def npuStreamCreate(ptr: int) -> int:
    """Create a stream and write its handle (8 bytes, the host's order) at ``ptr``: the
    aclError."""
    _unsigned(ptr, "ptr", _U64)
    if ptr == 0:
        return int(ErrorCode.INVALID_PARAM)
    runtime = _runtime()
    if raw.mapping(ptr, 8, True) is None:
        return int(InvalidPointer.code)
    try:
        handle = runtime.streams.create_stream()
    except AclError as e:
        return int(e.code)
    try:
        raw.write(ptr, memoryview(struct.pack("=Q", handle)))
    except AclError as e:
        runtime.streams.destroy_stream(handle)
        return int(e.code)
    return int(ErrorCode.SUCCESS)


def npuStreamDestroy(stream: int) -> int:
    """Destroy the stream ``stream`` (a handle npuStreamCreate wrote): the aclError."""
    _unsigned(stream, "stream", _U64)
    if stream == 0:
        return int(ErrorCode.INVALID_PARAM)
    return _code(_runtime().streams.destroy_stream, stream)
