"""Cache maintenance operations (hicann/runtime ``docs/zh/api_ref/11-06_CMO_memory_operation.md``):
aclrtCmoAsync, aclrtCmoAsyncWithBarrier / aclrtCmoWaitBarrier, and the descriptor calls
aclrtCmoGetDescSize / aclrtCmoSetDesc / aclrtCmoAsyncWithDesc.

The simulator models no cache: a cache operation has no effect on the data. It is still an
access: its range is checked as any access when the call is made and again when the stream
runs it (a block freed meanwhile fails the synchronising call with 107000 and a sanitizer
finding), and it is queued on its stream in order with the rest of the stream's work.

Codes follow the ACL layer (``src/acl/aclrt_impl/memory.cpp``, ``kernel.cpp``) and the
runtime (``src/runtime/api/api_c_standard_soc.cc``, ``api_c_memory.cc``,
``src/runtime/api/impl/api_error.cc``; RT_ERROR_INVALID_VALUE is ACL_ERROR_RT_PARAM_INVALID
107000 through ``errcode_manage.cc``), cited where applied. The product tables of 11-06 and
the runtime's feature lists (``src/runtime/config/*/dev_info_reg.cc``) agree: aclrtCmoAsync
and the descriptor calls on Atlas A2/A3 and Ascend 950 (RT_FEATURE_TASK_CMO), the barrier
calls only on Atlas 200I/500 A2 (RT_FEATURE_TASK_ASYNC_CMO), which no built-in profile is:
a profile with ``cmo_barrier=True`` has them.

DECISIONs:

* an address that is not memory of the stream's device (host memory, another device's
  block) is ACL_ERROR_INVALID_PARAM (11-06: "只支持本Device上的Cache内存操作"; the runtime
  does not check the address);
* the barrier calls take "only a stream bound to a model" (11-06, aclmdlRIBindStream). The
  simulator has no model running instances: any stream of the device is taken, and the
  barrier ids a model would keep (``Model::CmoIdAlloc``) are kept per device, until the
  device is reset;
* aclrtCmoAsyncWithDesc on Atlas A2/A3 goes through ``Context::CmoAddrTaskLaunch``, which
  refuses a stream not bound to a model with RT_ERROR_MODEL_NULL (507000); on Ascend 950
  (``ApiImplDavid::CmoAddrTaskLaunch``) any stream is taken. The simulator takes any stream
  on every product that has the call, as the document (which names no model) reads.
"""

from __future__ import annotations

import struct
import threading
from dataclasses import dataclass, field
from typing import Any

from ..memory.args import as_int
from ..memory.errors import (
    FeatureNotSupported,
    InvalidArgument,
    InvalidArgumentType,
    InvalidPointer,
    InvalidRuntimeParam,
    UnknownBarrier,
)
from .sharing import emit
from .work import Operation, Stream

__all__ = ["CacheOps", "cache_ops", "CMO_TYPES", "MAX_BARRIERS"]

#: aclrtCmoType (acl_rt.h): PREFETCH 0, WRITEBACK 1, INVALID 2, FLUSH 3; the runtime's
#: rtCmoOpCode is the same plus 6 (RT_CMO_PREFETCH = 6 ... RT_CMO_FLUSH = 9).
CMO_TYPES = {0: "PREFETCH", 1: "WRITEBACK", 2: "INVALID", 3: "FLUSH"}
#: how a message names the enum: "(PREFETCH 0, WRITEBACK 1, INVALID 2, FLUSH 3)"
_TYPE_NAMES = "(" + ", ".join(f"{name} {kind}" for kind, name in CMO_TYPES.items()) + ")"
_INVALID = 2
#: ACL_RT_CMO_MAX_BARRIER_NUM (acl_rt.h): the entries of an aclrtBarrierTaskInfo
MAX_BARRIERS = 6
_UINT32 = (0, (1 << 32) - 1)
_INT32 = (-(1 << 31), (1 << 31) - 1)
#: rtCmoAddrInfo (pkg_inc/runtime/rt_external_stars_define.h, packed): resv0, resv1 (u32),
#: num_outer, num_inner (u16), len_inner (u32), src (u64), stride_outer, stride_inner (u32)
_DESC = struct.Struct("<IIHHIQII")
#: rtDavidCmoAddrInfo (src/runtime/core/inc/sqe/v200_base/starsv2_base.hpp, pack(1)):
#: resv0[7] (u32), num_outer, num_inner (u16), src (u64), stride_outer, stride_inner,
#: len_inner (u32), resv1[3] (u32)
_DESC_950 = struct.Struct("<28xHHQIII12x")


@dataclass
class _Barriers:
    """The barrier ids of one device: the queue position (``Operation.seq``) of the last CMO
    operation queued with each, all a wait needs (one entry per id, however many operations
    carried it)."""

    last: dict[int, int] = field(default_factory=dict)


class CacheOps:
    """The 11-06 calls of one runtime (``Runtime.extension("cache_ops")``). Thread-safe."""

    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime
        self.lock = threading.Lock()
        self._barriers: dict[int, _Barriers] = {}

    def close(self) -> list[object]:
        """aclFinalize: barrier ids hold no memory."""
        with self.lock:
            self._barriers.clear()
        return []

    def forget_device(self, device_id: int) -> None:
        """aclrtResetDevice: the device's barrier ids go with its streams."""
        with self.lock:
            self._barriers.pop(device_id, None)

    # -- aclrtCmoAsync ------------------------------------------------------------------------

    def cmo_async(self, src: object, size: object, cmo_type: object, stream: object) -> None:
        """aclrtCmoAsync: a cache operation on ``size`` bytes at ``src``.

        11-06 says only ACL_RT_CMO_TYPE_PREFETCH (0) is supported today; the runtime
        (``api_c_standard_soc.cc`` rtCmoAsync) takes PREFETCH, WRITEBACK, INVALID and FLUSH,
        so the simulator takes the four (none has a data effect here).

        Raises:
            InvalidArgument: NULL ``src`` or a size of 0 (memory.cpp aclrtCmoAsyncImpl:
                ACL_REQUIRES_NOT_NULL, ACL_REQUIRES_POSITIVE); memory not of the stream's
                device (DECISION).
            FeatureNotSupported: a product without it (rtCmoAsync: RT_FEATURE_TASK_CMO), or a
                cmoType outside the enum (rtCmoAsync: ``!isSupport`` is 207000).
            InvalidPointer: the range is not inside one live block.
            InvalidHandle, StreamContextMismatch: the stream.
        """
        call = "aclrtCmoAsync"
        addr, count = self._range(call, src, size, zero=InvalidArgument)
        self._check_feature(call, self.runtime.profile.cmo, "Atlas A2/A3 and Ascend 950")
        kind = self._type(call, cmo_type)
        if kind not in CMO_TYPES:
            raise FeatureNotSupported(f"{call}: cmoType {kind} is not an aclrtCmoType "
                                      f"{_TYPE_NAMES}")
        target = self._queue(call, addr, count, stream)[0]
        emit(self.runtime, "cmo", self.runtime.device(target.device_id),
             {"call": call, "ptr": addr, "size": count, "cmo_type": kind,
              "stream": target.handle})

    # -- barriers -----------------------------------------------------------------------------

    def cmo_async_with_barrier(self, src: object, size: object, cmo_type: object,
                               barrier_id: object, stream: object) -> None:
        """aclrtCmoAsyncWithBarrier: a cache operation carrying ``barrier_id``. An INVALID
        operation needs a barrier id above 0, which aclrtCmoWaitBarrier can then wait for;
        every other type needs 0 (11-06; ``api_c_memory.cc`` rtsCmoAsyncWithBarrier).

        Raises:
            InvalidArgument: a NULL ``src`` (memory.cpp); memory not of the stream's device
                (DECISION, as aclrtCmoAsync).
            FeatureNotSupported: a product without it (RT_FEATURE_TASK_ASYNC_CMO: Atlas
                200I/500 A2 only), or a cmoType outside the enum.
            InvalidRuntimeParam: a size of 0, an INVALID operation with barrier id 0, another
                type with a barrier id other than 0.
            InvalidPointer, InvalidHandle, StreamContextMismatch: as aclrtCmoAsync.
        """
        call = "aclrtCmoAsyncWithBarrier"
        addr, count = self._range(call, src, size, zero=None)
        barrier = as_int(barrier_id, "barrierId", *_UINT32)
        self._check_feature(call, self.runtime.profile.cmo_barrier, "Atlas 200I/500 A2")
        if count == 0:
            raise InvalidRuntimeParam(f"{call}: size must be greater than 0")
        kind = self._type(call, cmo_type)
        if kind not in CMO_TYPES:
            raise FeatureNotSupported(f"{call}: cmoType {kind} is not an aclrtCmoType "
                                      f"{_TYPE_NAMES}")
        if kind == _INVALID and barrier == 0:
            raise InvalidRuntimeParam(f"{call}: an INVALID operation needs a barrierId above 0")
        if kind != _INVALID and barrier != 0:
            raise InvalidRuntimeParam(f"{call}: barrierId must be 0 for a "
                                      f"{CMO_TYPES[kind]} operation, got {barrier}")
        with self.lock:
            target, op = self._queue(call, addr, count, stream)
            # Model::CmoIdAlloc: the id is known from the call on, the wait may name it
            table = self._barriers.setdefault(target.device_id, _Barriers())
            table.last[barrier] = op.seq
        emit(self.runtime, "cmo", self.runtime.device(target.device_id),
             {"call": call, "ptr": addr, "size": count, "cmo_type": kind,
              "barrier_id": barrier, "stream": target.handle})

    def cmo_wait_barrier(self, task_info: object, stream: object, flag: object) -> None:
        """aclrtCmoWaitBarrier: queue a wait for the INVALID operations carrying the barrier
        ids of ``task_info`` (a dict ``{"barrierNum": n, "cmoInfo": [{"cmoType": 2,
        "barrierId": id}, ...]}``, the C struct aclrtBarrierTaskInfo's fields).

        When the wait runs, the device's other streams run up to the last queued operation
        with one of those ids (streams run concurrently on hardware): the wait never hangs,
        and work queued after it starts once they have run. ``flag`` is reserved (11-06: 0);
        the runtime passes it on unchecked (``BarrierTaskInit`` ignores it), and so does the
        simulator.

        Raises:
            InvalidArgument: not a dict, barrierNum outside [1, 6] or more than cmoInfo holds
                (kernel.cpp aclrtCmoWaitBarrierImpl).
            InvalidRuntimeParam: an entry whose cmoType is not INVALID or whose barrierId is 0
                (``api_c_memory.cc`` rtsLaunchBarrierTask).
            FeatureNotSupported: a product without it.
            UnknownBarrier: a barrier id no aclrtCmoAsyncWithBarrier of this device gave
                (``Model::GetCmoId``: ACL_ERROR_RT_STREAM_MODEL 107005).
            InvalidHandle, StreamContextMismatch: the stream.
        """
        call = "aclrtCmoWaitBarrier"
        entries = _barrier_entries(call, task_info)
        as_int(flag, "flag", *_UINT32)
        for kind, barrier in entries:
            if kind != _INVALID:
                raise InvalidRuntimeParam(f"{call}: cmoType must be ACL_RT_CMO_TYPE_INVALID "
                                          f"(2), got {kind}")
            if barrier == 0:
                raise InvalidRuntimeParam(f"{call}: barrierId must not be 0")
        self._check_feature(call, self.runtime.profile.cmo_barrier, "Atlas 200I/500 A2")
        streams = self.runtime.streams
        target = streams.target(stream, call)
        ids = tuple(barrier for _, barrier in entries)
        with self.lock:
            table = self._barriers.get(target.device_id)
            unknown = [b for b in ids if table is None or b not in table.last]
            if unknown:
                raise UnknownBarrier(f"{call}: barrier id {unknown[0]} was given by no "
                                     f"aclrtCmoAsyncWithBarrier on device "
                                     f"{target.device_id}")

        def run(waiting: Stream) -> None:
            with self.lock:
                table = self._barriers.get(waiting.device_id)
                last = max((table.last.get(b, 0) for b in ids), default=0) if table else 0
            others = [s for s in streams.device_streams(waiting.device_id)
                      if s is not waiting and any(op.seq <= last for op in s.queue)]
            if others:
                streams.run(others, upto=last)

        streams.enqueue(target, call, (), run)
        emit(self.runtime, "cmo_wait_barrier", self.runtime.device(target.device_id),
             {"barrier_ids": list(ids), "stream": target.handle})

    # -- descriptors --------------------------------------------------------------------------

    def desc_size(self) -> int:
        """aclrtCmoGetDescSize: the bytes of a CMO descriptor on this product, the runtime's
        ``cmoDDRStructInfoSize`` (``src/runtime/config/*/dev_info_reg.cc``): 32
        (rtCmoAddrInfo, Atlas A2/A3), 64 (rtDavidCmoAddrInfo, Ascend 950).

        Raises:
            FeatureNotSupported: a product without it (``api_c_standard_soc.cc``
                rtsGetCmoDescSize: RT_FEATURE_TASK_CMO).
        """
        self._check_feature("aclrtCmoGetDescSize", self.runtime.profile.cmo,
                            "Atlas A2/A3 and Ascend 950")
        return self._desc().size

    def _desc(self) -> struct.Struct:
        return _DESC_950 if self.runtime.profile.name.startswith("950") else _DESC

    def set_desc(self, cmo_desc: object, src: object, size: object) -> None:
        """aclrtCmoSetDesc: record ``src`` and ``size`` in the descriptor at ``cmo_desc``, in
        device memory (``ApiImpl::SetCmoDesc`` copies the record there, host to device).
        Nothing is checked about ``src`` here (the runtime does not); the operation that
        reads the descriptor checks its range when it runs.

        Raises:
            FeatureNotSupported: a product without it (rtsSetCmoDesc).
            InvalidRuntimeParam: NULL ``cmo_desc`` or ``src``, a size of 0 (api_error.cc
                ``ApiErrorDecorator::SetCmoDesc``; the ACL layer checks nothing), a size
                past the descriptor's 32-bit length field (DECISION: the runtime would cut
                it to 32 bits).
            InvalidPointer: the descriptor is not live device memory of descriptor size.
        """
        call = "aclrtCmoSetDesc"
        desc = as_int(cmo_desc, "cmoDesc")
        addr = as_int(src, "src")
        count = as_int(size, "size")
        self._check_feature(call, self.runtime.profile.cmo, "Atlas A2/A3 and Ascend 950")
        if desc == 0 or addr == 0:
            raise InvalidRuntimeParam(f"{call}: {'cmoDesc' if desc == 0 else 'src'} is NULL")
        if count == 0:
            raise InvalidRuntimeParam(f"{call}: size must be greater than 0")
        if count > _UINT32[1]:
            raise InvalidRuntimeParam(f"{call}: size {count} does not fit the descriptor's "
                                      f"32-bit length")
        runtime = self.runtime
        device = runtime.current_device()
        layout = self._desc()
        if layout is _DESC:
            record = layout.pack(0, 0, 0, 0, count, addr, 0, 0)
        else:
            record = layout.pack(0, 0, addr, 0, 0, count)
        data = runtime.data
        with data.lock:
            region, offset = data.resolve(call, desc, layout.size, write=True)
            if region.host:
                raise InvalidPointer(f"{call}: cmoDesc {desc:#x} is not device memory")
            region.write(offset, memoryview(record))
        data._emit((region,), "memcpy", dst=desc, src=0, count=layout.size, kind=1,
                   stream=None)
        emit(runtime, "cmo_set_desc", device,
             {"desc": desc, "ptr": addr, "size": count})

    def async_with_desc(self, cmo_desc: object, cmo_type: object, stream: object,
                        reserve: object) -> None:
        """aclrtCmoAsyncWithDesc: queue the cache operation a descriptor describes; the
        descriptor is read from device memory when the operation runs (as the device reads
        it), and the range it names is checked then.

        Raises:
            InvalidRuntimeParam: ``reserve`` not NULL (``api_c_standard_soc.cc``
                rtsLaunchCmoAddrTask), a NULL descriptor or a cmoType outside the enum
                (api_error.cc ``ApiErrorDecorator::CmoAddrTaskLaunch``: opcode outside
                [RT_CMO_PREFETCH, RT_CMO_RESERVED)).
            FeatureNotSupported: a product without it (rtCmoAddrTaskLaunch:
                cmoDDRStructInfoSize 0).
            InvalidPointer: the descriptor is not live device memory.
            InvalidHandle, StreamContextMismatch: the stream (0: the default stream, as
                ``ApiImpl::CmoAddrTaskLaunch`` takes it).
        """
        call = "aclrtCmoAsyncWithDesc"
        if reserve is not None and as_int(reserve, "reserve") != 0:
            raise InvalidRuntimeParam(f"{call}: reserve must be NULL")
        self._check_feature(call, self.runtime.profile.cmo, "Atlas A2/A3 and Ascend 950")
        desc = as_int(cmo_desc, "cmoDesc")
        kind = self._type(call, cmo_type)
        if desc == 0:
            raise InvalidRuntimeParam(f"{call}: cmoDesc is NULL")
        if kind not in CMO_TYPES:
            raise InvalidRuntimeParam(f"{call}: cmoType {kind} is not an aclrtCmoType "
                                      f"{_TYPE_NAMES}")
        runtime = self.runtime
        target = runtime.streams.target(stream, call)
        layout = self._desc()
        data = runtime.data
        with data.lock:
            region = data.resolve(call, desc, layout.size, write=False, deferred=True)[0]
        if region.host:
            raise InvalidPointer(f"{call}: cmoDesc {desc:#x} is not device memory")

        def run(running: Stream) -> None:
            with data.lock:
                region, offset = data.resolve(call, desc, layout.size, write=False)
                record = layout.unpack(bytes(region.read(offset, layout.size)))
            addr, count = ((record[5], record[4]) if layout is _DESC
                           else (record[2], record[5]))
            self._check_access(call, addr, count, running.device_id)

        runtime.streams.enqueue(target, call, ((desc, desc + layout.size),), run)
        emit(runtime, "cmo", runtime.device(target.device_id),
             {"call": call, "desc": desc, "cmo_type": kind, "stream": target.handle})

    # -- shared checks ------------------------------------------------------------------------

    @staticmethod
    def _range(call: str, src: object, size: object,
               zero: type[Exception] | None) -> tuple[int, int]:
        """``src`` (not NULL: memory.cpp) and ``size`` (not 0 when ``zero`` names the error)."""
        addr = as_int(src, "src")
        count = as_int(size, "size")
        if addr == 0:
            raise InvalidArgument(f"{call}: src is NULL")
        if zero is not None and count == 0:
            raise zero(f"{call}: size must be greater than 0")
        return addr, count

    @staticmethod
    def _type(call: str, cmo_type: object) -> int:
        """An aclrtCmoType as the C enum holds it (an int32; pyacl's parse refuses others)."""
        return as_int(cmo_type, "cmoType", *_INT32)

    def _check_feature(self, call: str, supported: bool, parts: str) -> None:
        if not supported:
            profile = self.runtime.profile
            raise FeatureNotSupported(f"{call} is not supported on {profile.description} "
                                      f"(11-06: {parts} only)")

    def _check_access(self, call: str, addr: int, count: int, device_id: int) -> None:
        """The range is live memory of the device (InvalidPointer: not live or past the
        block; InvalidArgument: host memory or another device's, DECISION)."""
        data = self.runtime.data
        with data.lock:
            region, _ = data.resolve(call, addr, max(count, 1), write=False, deferred=True)
        block = getattr(region, "block", None)
        if region.host or (block is not None and block.device_id != device_id):
            raise InvalidArgument(f"{call}: {addr:#x} is not memory of device {device_id} "
                                  f"(11-06: only this device's memory)")

    def _queue(self, call: str, addr: int, count: int,
               stream: object) -> tuple[Stream, Operation]:
        """Check the stream and the range, queue a check of the range again when the stream
        runs; the stream and the queued operation."""
        streams = self.runtime.streams
        target = streams.target(stream, call)
        self._check_access(call, addr, count, target.device_id)

        def run(running: Stream) -> None:
            self._check_access(call, addr, count, running.device_id)

        return target, streams.enqueue(target, call, ((addr, addr + count),), run)


def _barrier_entries(call: str, task_info: object) -> list[tuple[int, int]]:
    """(cmoType, barrierId) of each of the ``barrierNum`` first entries of an
    aclrtBarrierTaskInfo given as a dict.

    Raises:
        InvalidArgumentType: not a dict, or an entry that is not one.
        InvalidArgument: barrierNum outside [1, ACL_RT_CMO_MAX_BARRIER_NUM], more entries
            wanted than cmoInfo holds, a field missing or out of range.
    """
    if not isinstance(task_info, dict):
        raise InvalidArgumentType(f"{call}: taskInfo must be a dict with barrierNum and "
                                  f"cmoInfo, got {type(task_info).__name__}")
    number = as_int(task_info.get("barrierNum"), "barrierNum", 0, None)
    if not 1 <= number <= MAX_BARRIERS:
        raise InvalidArgument(f"{call}: taskInfo barrierNum {number} is outside (0, "
                              f"{MAX_BARRIERS}]")
    infos = task_info.get("cmoInfo")
    if not isinstance(infos, (list, tuple)) or len(infos) < number:
        raise InvalidArgument(f"{call}: taskInfo cmoInfo must be a list of at least "
                              f"barrierNum ({number}) entries")
    entries = []
    for info in infos[:number]:
        if not isinstance(info, dict):
            raise InvalidArgumentType(f"{call}: each cmoInfo entry must be a dict with cmoType "
                                      f"and barrierId")
        entries.append((as_int(info.get("cmoType"), "cmoType", *_INT32),
                        as_int(info.get("barrierId"), "barrierId", *_UINT32)))
    return entries


def cache_ops(runtime: Any) -> CacheOps:
    """The runtime's :class:`CacheOps`, made on first use (``Runtime.extension``)."""
    found: CacheOps = runtime.extension("cache_ops", CacheOps)
    return found
