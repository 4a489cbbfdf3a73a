"""Stream memory operations (11-09): aclrtValueWrite and aclrtValueWait, a 64-bit word in
device memory written, or waited on, in a stream's order.

:class:`StreamValues` is a base class of :class:`~.streams.Streams`, whose ``_target``,
``enqueue``, ``device_streams`` and ``_run`` it queues and runs its work with. Sources:
hicann/runtime ``docs/zh/api_ref/11-09_stream_memory_operation.md``,
``src/acl/aclrt_impl/memory.cpp``, ``src/runtime/api/api_c_memory.cc`` and
``src/runtime/api/impl/api_error.cc`` (cited per rule below).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..memory.args import as_int
from ..memory.errors import (
    FeatureNotSupported,
    InternalError,
    InvalidArgument,
    InvalidRuntimeParam,
)
from .sharing import emit
from .work import Stream

if TYPE_CHECKING:
    from ..memory.device import Device
    from .work import Operation

__all__ = ["StreamValues"]

_UINT64_MAX = (1 << 64) - 1
_SIGN = 1 << 63

#: aclrtValueWait's flag: the condition on (the word at devAddr, value), 11-09's comments.
_WAIT_CONDITIONS: dict[int, Callable[[int, int], bool]] = {
    0: lambda word, value: ((word - value) & _UINT64_MAX) < _SIGN,  # (int64_t)(*a - v) >= 0
    1: lambda word, value: word == value,
    2: lambda word, value: word & value != 0,
    3: lambda word, value: ~(word | value) & _UINT64_MAX != 0,
}


class StreamValues:
    """aclrtValueWrite and aclrtValueWait of one runtime's streams."""

    # what Streams gives (module docstring); declared for the type checker only, so that
    # these never shadow Streams' own
    runtime: Any
    if TYPE_CHECKING:
        def _target(self, handle: object, call: str) -> Stream: ...

        def enqueue(self, handle: object, call: str, ranges: tuple[tuple[int, int], ...],
                    run: Callable[[Stream], None]) -> Operation: ...

        def device_streams(self, device_id: int) -> list[Stream]: ...

        def _run(self, streams: list[Stream], upto: int | None = None) -> None: ...

    def value_write(self, dev_addr: object, value: object, flag: object,
                    stream: object = 0) -> None:
        """aclrtValueWrite: queue a write of the 64-bit ``value`` at ``dev_addr``
        (hicann/runtime ``docs/zh/api_ref/11-09_stream_memory_operation.md``: device memory,
        8-byte aligned, ``flag`` reserved and 0). The 8 bytes are written little-endian when
        the stream runs.

        Codes, in the runtime's order: a NULL ``devAddr`` is ACL_ERROR_INVALID_PARAM
        (``src/acl/aclrt_impl/memory.cpp`` aclrtValueWriteImpl); a part without
        RT_FEATURE_TASK_VALUE_WAIT is 207000 (``src/runtime/api/api_c_memory.cc``
        rtsValueWrite); a flag other than 0 or an address that is not device memory is
        ACL_ERROR_RT_PARAM_INVALID (``src/runtime/api/impl/api_error.cc``
        ``ApiErrorDecorator::MemWriteValue``: RT_ERROR_INVALID_VALUE).

        Raises:
            InvalidArgument: a NULL address, a value not a uint64, an address not 8-byte
                aligned (DECISION: the document's rule; the runtime does not check it).
            FeatureNotSupported: the product has no value write (11-09: Atlas A2/A3, 950).
            InvalidRuntimeParam: flag not 0, host memory.
            InvalidPointer: no live block holds the 8 bytes.
            InvalidHandle, StreamContextMismatch: see :meth:`_target`.
        """
        call = "aclrtValueWrite"
        addr, value = self._check_value(call, dev_addr, value)
        reserved = as_int(flag, "flag", lo=None, hi=None)
        target = self._target(stream, call)
        if reserved != 0:
            raise InvalidRuntimeParam(f"{call}: flag must be 0 (reserved), got {reserved}")
        data = self.runtime.data
        payload = value.to_bytes(8, "little")

        def run(_stream: Stream) -> None:
            data.write_bytes(call, addr, payload)

        self._enqueue_value(call, addr, target, run, write=True)
        emit(self.runtime, "value_write", self._device(target),
             {"ptr": addr, "value": value, "stream": target.handle})

    def value_wait(self, dev_addr: object, value: object, flag: object,
                   stream: object = 0) -> None:
        """aclrtValueWait: queue a wait that blocks the stream's later work until the 64-bit
        word at ``dev_addr`` meets ``flag``'s condition against ``value`` (11-09:
        ACL_STREAM_WAIT_VALUE_GEQ 0, EQ 1, AND 2, NOR 3).

        When the wait runs and the condition does not hold, the pending work of the device's
        other streams runs first (it may hold the write the wait is for; streams run
        concurrently on hardware). DECISION: if the condition still does not hold, nothing
        queued can ever satisfy it (the host is blocked in the synchronising call): on
        hardware the stream hangs; here the wait fails with ACL_ERROR_RT_INTERNAL_ERROR
        (507000), which the synchronising call returns, and the stream's later work still
        runs (as after any failed queued operation).

        Codes as :meth:`value_write` (``api_error.cc`` ``ApiErrorDecorator::MemWaitValue``: a
        flag of MEM_WAIT_VALUE_TYPE_MAX (4) or more is ACL_ERROR_RT_PARAM_INVALID).

        Raises:
            InvalidArgument: a NULL address, a value not a uint64, an address not 8-byte
                aligned (DECISION, as for the write: the document gives the word 64 bits).
            FeatureNotSupported: the product has no value wait.
            InvalidRuntimeParam: flag not 0-3, host memory.
            InvalidPointer: no live block holds the 8 bytes.
            InvalidHandle, StreamContextMismatch: see :meth:`_target`.
        """
        call = "aclrtValueWait"
        addr, value = self._check_value(call, dev_addr, value)
        mode = as_int(flag, "flag", lo=None, hi=None)
        target = self._target(stream, call)
        if mode not in _WAIT_CONDITIONS:
            raise InvalidRuntimeParam(f"{call}: flag must be ACL_STREAM_WAIT_VALUE_GEQ (0), EQ "
                                      f"(1), AND (2) or NOR (3), got {mode}")
        condition = _WAIT_CONDITIONS[mode]
        data = self.runtime.data

        def word() -> int:
            with data.lock:
                region, offset = data.resolve(call, addr, 8, write=False)
                return int.from_bytes(region.read(offset, 8), "little")

        def run(waiting: Stream) -> None:
            if condition(word(), value):
                return
            others = [s for s in self.device_streams(waiting.device_id)
                      if s is not waiting and s.queue]
            if others:
                self._run(others)
            current = word()
            if not condition(current, value):
                raise InternalError(
                    f"{call}: the wait on stream {waiting.handle:#x} for the word at {addr:#x} "
                    f"(now {current:#x}, flag {mode}, value {value:#x}) can never be satisfied: "
                    f"no queued work writes it")

        self._enqueue_value(call, addr, target, run, write=False)
        emit(self.runtime, "value_wait", self._device(target),
             {"ptr": addr, "value": value, "flag": mode, "stream": target.handle})

    def _device(self, stream: Stream) -> Device:
        """The device a stream belongs to (for events)."""
        device: Device = self.runtime.device(stream.device_id)
        return device

    def _check_value(self, call: str, dev_addr: object, value: object) -> tuple[int, int]:
        """The address (not NULL, 8-byte aligned) and the uint64 value of a value write or
        wait, on a product that has them."""
        addr = as_int(dev_addr, "devAddr")
        number = as_int(value, "value", lo=0, hi=_UINT64_MAX)
        if addr == 0:
            raise InvalidArgument(f"{call}: devAddr is NULL")
        profile = self.runtime.profile
        if not profile.value_wait:
            raise FeatureNotSupported(f"{call} is not supported on {profile.description} "
                                      f"(11-09: Atlas A2/A3 and Ascend 950 only)")
        if addr % 8:
            raise InvalidArgument(f"{call}: devAddr {addr:#x} is not 8-byte aligned")
        return addr, number

    def _enqueue_value(self, call: str, addr: int, stream: Stream,
                       run: Callable[[Stream], None], write: bool) -> None:
        """Check that the 8 bytes at ``addr`` are live device memory, then queue ``run``; a
        failed check queues nothing."""
        data = self.runtime.data
        with data.lock:
            region, _ = data.resolve(call, addr, 8, write=write, deferred=True)
        if region.host:
            # api_error.cc: attributes.location.type != RT_MEMORY_LOC_DEVICE
            raise InvalidRuntimeParam(f"{call}: {addr:#x} is host memory; 11-09 needs a "
                                      f"device address")
        self.enqueue(stream, call, ((addr, addr + 8),), run)
