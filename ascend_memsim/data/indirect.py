"""Indirect copies (11-03): copy descriptors (aclrtGetMemcpyDescSize, aclrtSetMemcpyDesc,
aclrtMemcpyAsyncWithDesc) and copies through base-address cells (aclrtMemcpyAsyncWithOffset).

Both read the addresses of their copy from device memory when the copy runs, as the device
does: a descriptor is the runtime's ``rtMemcpyAddrInfo`` record (pkg_inc/runtime/runtime/mem.h)
that aclrtSetMemcpyDesc writes into device memory (``Context::SetMemcpyDesc``), so rewriting it
before the stream runs changes the copy. Both copy only inside one device's memory
(INNER_DEVICE_TO_DEVICE): addresses read at run time that name anything else fail the work,
never reach raw host memory. Rules from hicann/runtime ``src/acl/aclrt_impl/memory.cpp``,
``src/runtime/api/impl/api_error.cc``, ``src/runtime/api/api_c_memory.cc`` and
``api_c_standard_soc.cc``, cited where applied.
"""

from __future__ import annotations

import struct
from typing import Any

from ..memory.args import SIZE_MAX, as_int
from ..memory.constants import MemcpyKind
from ..memory.errors import (
    FeatureNotSupported,
    InvalidArgument,
    InvalidPointer,
    InvalidRuntimeParam,
)

__all__ = ["IndirectCopies", "indirect_copies"]

K = MemcpyKind
#: MAX_MEMCPY_SIZE_OF_D2D (src/runtime/core/inc/spec/base_info.hpp): a descriptor's count
_DESC_MAX_COUNT = 4 << 30
#: rtMemcpyAddrInfo (pkg_inc/runtime/runtime/mem.h): resv0, resv1, resv2, len (u32), src, dst (u64)
_DESC = struct.Struct("<IIIIQQ")
_INT32 = (-(1 << 31), (1 << 31) - 1)


def _kind(value: object) -> int:
    return as_int(value, "kind", *_INT32)


class IndirectCopies:
    """The descriptor and offset copies of one runtime (a plane made through
    ``Runtime.extension``)."""

    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime

    def close(self) -> list[object]:
        """aclFinalize: the plane holds nothing."""
        return []

    def _check_stars(self, call: str) -> None:
        profile = self.runtime.profile
        if not profile.stars:
            raise FeatureNotSupported(f"{call} is not supported on {profile.description}")

    # -- copy descriptors ------------------------------------------------------------------------

    def _check_desc_kind(self, kind: object) -> int:
        """memory.cpp: kind below RT_MEMCPY_KIND_MAX (8), else 100000."""
        kind = _kind(kind)
        if not 0 <= kind < 8:
            raise InvalidArgument(f"kind={kind} is outside [0, 8)")
        return kind

    def desc_size(self, kind: object) -> int:
        """aclrtGetMemcpyDescSize: 32 bytes (A2/A3), 64 (950): ``memcpyDescriptorSize`` in
        src/runtime/config/*/dev_info_reg.cc.

        Raises:
            InvalidArgument: kind outside [0, 8). FeatureNotSupported: a kind other than
            INNER_DEVICE_TO_DEVICE, or a chip without STARS (api_c_memory.cc).
        """
        kind = self._check_desc_kind(kind)
        self._check_stars("aclrtGetMemcpyDescSize")
        if kind != K.INNER_DEVICE_TO_DEVICE:
            raise FeatureNotSupported(f"kind={kind}: only ACL_MEMCPY_INNER_DEVICE_TO_DEVICE (6)")
        return 64 if self.runtime.profile.name.startswith("950") else 32

    def set_desc(self, desc: object, kind: object, src: object, dst: object, count: object,
                 config: object) -> int:
        """aclrtSetMemcpyDesc: write (count, src, dst) into the descriptor's device memory
        (Context::SetMemcpyDesc copies an rtMemcpyAddrInfo there). Returns ``desc``.

        Raises:
            InvalidArgument (memory.cpp): NULL desc, src or dst, kind outside [0, 8), count 0,
            config not NULL. FeatureNotSupported: a kind other than 6. InvalidRuntimeParam,
            InvalidPointer (api_error.cc SetMemcpyDesc): count over 4 GiB, desc not 64-byte
            aligned or not device memory, src and dst not device memory of one device.
        """
        desc = as_int(desc, "desc")
        if desc == 0:
            raise InvalidArgument("desc is NULL")
        kind = self._check_desc_kind(kind)
        src, dst = as_int(src, "src"), as_int(dst, "dst")
        if src == 0 or dst == 0:
            raise InvalidArgument(f"{'src' if src == 0 else 'dst'} is NULL")
        count = as_int(count, "count")
        if count == 0:
            raise InvalidArgument("count must be positive")
        if as_int(config, "config") != 0:
            raise InvalidArgument("config is reserved and must be NULL (0)")
        self._check_stars("aclrtSetMemcpyDesc")
        if kind != K.INNER_DEVICE_TO_DEVICE:
            raise FeatureNotSupported(f"kind={kind}: only ACL_MEMCPY_INNER_DEVICE_TO_DEVICE (6)")
        if count > _DESC_MAX_COUNT:
            raise InvalidRuntimeParam(f"count={count} is outside (0, 4 GiB]")
        if desc % 64:
            raise InvalidRuntimeParam(f"desc {desc:#x} is not 64-byte aligned")
        call = "aclrtSetMemcpyDesc"
        size = self.desc_size(K.INNER_DEVICE_TO_DEVICE)
        runtime = self.runtime
        runtime.current_device()
        data = runtime.data
        with data.lock:
            region, offset = data.resolve(call, desc, size, write=True)
            if region.host:
                raise InvalidPointer(f"{call}: desc {desc:#x} is not device memory")
            ends = [data.resolve(call, p, 1, write=False, deferred=True)[0] for p in (dst, src)]
            if any(r.host for r in ends) or ends[0].block.device_id != ends[1].block.device_id:
                # DECISION: count is not checked against the blocks here (the runtime only
                # asks their location); the copy checks it when it runs.
                raise InvalidRuntimeParam(f"{call}: src and dst must be device memory of one "
                                          f"device for INNER_DEVICE_TO_DEVICE")
            record = _DESC.pack(0, 0, 0, count & 0xFFFFFFFF, src, dst).ljust(size, b"\0")
            region.write(offset, memoryview(record))
        data._emit((region,), "memcpy", dst=desc, src=0, count=size, kind=int(K.HOST_TO_DEVICE),
                   stream=None)
        return desc

    def async_with_desc(self, desc: object, kind: object, stream: object) -> None:
        """aclrtMemcpyAsyncWithDesc: queue the copy the descriptor describes; the descriptor
        is read from device memory when the copy runs (as the device reads it).

        Raises:
            InvalidArgument (memory.cpp): NULL desc, kind outside [0, 8), stream NULL (0:
            ``ACL_REQUIRES_NOT_NULL(stream)``). FeatureNotSupported: kind other than 6.
            InvalidPointer: desc not live device memory. InvalidHandle: the stream.
        """
        desc = as_int(desc, "desc")
        if desc == 0:
            raise InvalidArgument("desc is NULL")
        self._check_desc_kind(kind)
        kind = _kind(kind)
        if stream is None or as_int(stream, "stream") == 0:
            raise InvalidArgument("stream is NULL: aclrtMemcpyAsyncWithDesc needs a stream")
        self._check_stars("aclrtMemcpyAsyncWithDesc")
        if kind != K.INNER_DEVICE_TO_DEVICE:
            raise FeatureNotSupported(f"kind={kind}: only ACL_MEMCPY_INNER_DEVICE_TO_DEVICE (6)")
        call = "aclrtMemcpyAsyncWithDesc"
        runtime = self.runtime
        runtime.current_device()
        size = self.desc_size(K.INNER_DEVICE_TO_DEVICE)
        region = runtime.data.resolve(call, desc, size, write=False, deferred=True)[0]
        if region.host:
            raise InvalidPointer(f"{call}: desc {desc:#x} is not device memory")
        runtime.streams.enqueue(stream, call, ((desc, desc + size),),
                                lambda s: self._run_desc(call, desc, size, s.handle))

    def _run_desc(self, call: str, desc: int, size: int, stream: object) -> None:
        data = self.runtime.data
        with data.lock:
            region, offset = data.resolve(call, desc, _DESC.size, write=False)
            _, _, _, count, src, dst = _DESC.unpack(bytes(region.read(offset, _DESC.size)))
        if count:
            self._device_copy(call, dst, src, count, stream)

    def _device_copy(self, call: str, dst: int, src: int, count: int, stream: object) -> None:
        """An INNER_DEVICE_TO_DEVICE copy whose addresses were read from device memory when it
        ran: both ends must be device memory of one device, else the work fails (the
        addresses are never taken as raw host memory)."""
        data = self.runtime.data
        with data.lock:
            ends = [data.resolve(call, p, count, write=w, deferred=True)[0]
                    for p, w in ((src, False), (dst, True))]
            if any(r.host for r in ends) or ends[0].block.device_id != ends[1].block.device_id:
                raise InvalidPointer(f"{call}: {src:#x} -> {dst:#x} is not a copy inside one "
                                     f"device's memory")
            data.copy(dst, src, count, int(K.DEVICE_TO_DEVICE), call=call, stream=stream)

    # -- copies through base-address cells (aclrtMemcpyAsyncWithOffset) ---------------------------

    def async_with_offset(self, dst: object, dest_max: object, dst_offset: object, src: object,
                          count: object, src_offset: object, kind: object,
                          stream: object) -> None:
        """aclrtMemcpyAsyncWithOffset: ``dst`` and ``src`` hold base addresses (8 bytes each,
        in device memory); when the copy runs it copies ``count`` bytes from
        ``*src + src_offset`` to ``*dst + dst_offset``.

        Raises:
            InvalidRuntimeParam (api_c_standard_soc.cc): kind other than
            INNER_DEVICE_TO_DEVICE; count past dest_max (DECISION, as aclrtMemcpy).
            FeatureNotSupported: a chip without RT_FEATURE_TASK_MEMCPY_D2D_BY_OFFSET.
            InvalidPointer: a cell outside live device memory. InvalidHandle: the stream.
        """
        count = as_int(count, "count")
        if count == 0:
            return  # memory.cpp and rtMemcpyAsyncWithOffset: count 0 succeeds
        kind = _kind(kind)
        if kind != K.INNER_DEVICE_TO_DEVICE:
            raise InvalidRuntimeParam(f"kind={kind}: only ACL_MEMCPY_INNER_DEVICE_TO_DEVICE (6)")
        self._check_stars("aclrtMemcpyAsyncWithOffset")
        dst, src = as_int(dst, "dst"), as_int(src, "src")
        dest_max = as_int(dest_max, "dest_max")
        dst_offset, src_offset = as_int(dst_offset, "dst_offset"), as_int(src_offset, "src_offset")
        if count > dest_max:
            raise InvalidRuntimeParam(f"count={count} is more than dest_max={dest_max}")
        call = "aclrtMemcpyAsyncWithOffset"
        runtime = self.runtime
        runtime.current_device()
        data = runtime.data
        with data.lock:
            for cell in (dst, src):
                if cell == 0:
                    raise InvalidPointer(f"{call}: NULL base-address cell")
                if data.resolve(call, cell, 8, write=False, deferred=True)[0].host:
                    raise InvalidPointer(f"{call}: {cell:#x} is not device memory")
        runtime.streams.enqueue(
            stream, call, ((dst, dst + 8), (src, src + 8)),
            lambda s: self._run_offset(call, dst, dst_offset, src, src_offset, count, s.handle))

    def _run_offset(self, call: str, dst: int, dst_offset: int, src: int,
                    src_offset: int, count: int, stream: object) -> None:
        data = self.runtime.data
        with data.lock:
            bases = []
            for cell in (dst, src):
                region, offset = data.resolve(call, cell, 8, write=False)
                bases.append(int.from_bytes(region.read(offset, 8), "little"))
        target, source = bases[0] + dst_offset, bases[1] + src_offset
        if target > SIZE_MAX or source > SIZE_MAX or not target or not source:
            raise InvalidPointer(f"{call}: base plus offset is NULL or overflows a pointer")
        self._device_copy(call, target, source, count, stream)


def indirect_copies(runtime: Any) -> IndirectCopies:
    """The runtime's :class:`IndirectCopies`, made on first use (``Runtime.extension``)."""
    found: IndirectCopies = runtime.extension("indirect_copies", IndirectCopies)
    return found
