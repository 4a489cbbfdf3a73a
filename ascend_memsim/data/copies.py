"""The rest of the copy chapter (11-03): 2D copies (:mod:`.copies2d`), batch copies, the 32-bit
memset, and the deprecated conditional async copy (copy descriptors and offset copies:
:mod:`.indirect`).

Every byte moves through the data plane's :meth:`DataPlane.resolve` (so the sanitizer's checks
apply unchanged) and every call checks all that it will touch before a byte moves: a failed
call changes nothing. Async calls check the addresses now (liveness and bounds, as
aclrtMemcpyAsync does) and queue the work on the stream, where it is checked again and run
(:meth:`Streams.enqueue`). Rules, each cited where it is applied: hicann/runtime
``src/acl/aclrt_impl/memory.cpp`` (the ACL layer: ACL_ERROR_INVALID_PARAM 100000),
``src/runtime/api/impl/api_error.cc`` and ``api_impl.cc`` (the runtime layer: its
RT_ERROR_INVALID_VALUE is ACL_ERROR_RT_PARAM_INVALID 107000, RT_ERROR_FEATURE_NOT_SUPPORT
207000), ``docs/zh/api_ref/11-03_memory_copy_and_set.md``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..memory.args import as_int
from ..memory.constants import MemcpyKind, RunMode
from ..memory.errors import (
    AclError,
    FeatureNotSupported,
    InvalidArgument,
    InvalidArgumentType,
    InvalidRuntimeParam,
)
from .contents import SLAB_BYTES, Region
from .copies2d import MEMCPY2D_MAX_HEIGHT, MEMCPY2D_MAX_WIDTH, Copies2D
from .host import HostBlock

__all__ = ["BATCH_MAX", "Copies", "MEMCPY2D_MAX_HEIGHT", "MEMCPY2D_MAX_WIDTH", "copies"]

K = MemcpyKind
#: DEVMM_MEMCPY_BATCH_MAX_COUNT (pkg_inc/driver/ascend_hal_define.h), aclrtMemcpyBatch's limit
BATCH_MAX = 4096
#: aclrtMemLocationType (acl_rt.h): HOST 0, DEVICE 1, UNREGISTERED 2, HOST_NUMA 4
_LOC_HOST, _LOC_DEVICE, _LOC_HOST_NUMA = 0, 1, 4
_INT32 = (-(1 << 31), (1 << 31) - 1)
#: a checked batch entry: (dst region, src region, dst, src, size)
_Entry = tuple[Region, Region, int, int, int]
#: an entry resolved for the move: (src region, offset, dst region, offset, size)
_Resolved = tuple[Region, int, Region, int, int]


def _with_index(error: AclError, index: int) -> AclError:
    """``error`` carrying the failing entry of a batch copy (read by the face)."""
    error.fail_index = index
    return error


class Copies(Copies2D):
    """The copy calls of one runtime (a plane made through ``Runtime.extension``); the 2D
    copies are its base class's (:mod:`.copies2d`)."""

    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime

    def close(self) -> list[object]:
        """aclFinalize: the plane holds nothing."""
        return []

    # -- helpers ---------------------------------------------------------------------------------

    def _move(self, src_region: Region, src_off: int, dst_region: Region, dst_off: int,
              count: int) -> None:
        """Move ``count`` resolved bytes (as :meth:`DataPlane.copy` does)."""
        out = dst_region.view(dst_off, count)
        if out is not None:
            src_region.read_into(src_off, out)
            return
        source = src_region.source(src_off, count)
        if source is not None:
            dst_region.write(dst_off, source)
        else:
            dst_region.copy_from(src_region, src_off, dst_off, count)

    # -- batch copies (aclrtMemcpyBatch / Async / V2) --------------------------------------------

    @staticmethod
    def _location(entry: object, name: str) -> tuple[int, int]:
        if not isinstance(entry, Mapping):
            raise InvalidArgumentType(f'{name} must be {{"id": ..., "type": ...}}')
        return (as_int(entry.get("type"), f"{name} type", *_INT32),
                as_int(entry.get("id"), f"{name} id", 0, (1 << 32) - 1))

    def _parse_attrs(self, attrs: object,
                     num_attrs: int) -> list[tuple[tuple[int, int], tuple[int, int]]]:
        """aclrtMemcpyBatchAttr as a dict: ``{"dstLoc": {"id", "type"}, "srcLoc": {...},
        "rsv": [16 bytes]}``; rsv must be all 0 (memory.cpp ValidateMemcpyBatchParams)."""
        if not isinstance(attrs, Sequence) or isinstance(attrs, (str, bytes)) \
                or len(attrs) != num_attrs:
            raise InvalidArgumentType(f"attrs must be a list of {num_attrs} attribute dicts")
        parsed = []
        for i, attr in enumerate(attrs):
            if not isinstance(attr, Mapping):
                raise InvalidArgumentType(f"attrs[{i}] must be a dict")
            rsv = attr.get("rsv", [])
            if not isinstance(rsv, Sequence) or len(rsv) > 16:
                raise InvalidArgumentType(f"attrs[{i}] rsv must be a list of at most 16 bytes")
            if any(as_int(b, f"attrs[{i}] rsv", 0, 255) for b in rsv):
                raise InvalidArgument(f"attrs[{i}] rsv must be 0")
            parsed.append((self._location(attr.get("dstLoc"), f"attrs[{i}] dstLoc"),
                           self._location(attr.get("srcLoc"), f"attrs[{i}] srcLoc")))
        return parsed

    @staticmethod
    def _ints(values: object, count: int, name: str, *, ptr: bool = False) -> list[int]:
        if not isinstance(values, Sequence) or isinstance(values, (str, bytes)) \
                or len(values) != count:
            raise InvalidArgumentType(f"{name} must be a list of {count} ints")
        return [as_int(v, f"{name}[{i}]") for i, v in enumerate(values)]

    def memcpy_batch(self, dsts: object, dest_maxs: object, srcs: object, sizes: object,
                     num_batches: object, attrs: object, attrs_indexes: object,
                     num_attrs: object, *, stream: object = None,
                     asynchronous: bool = False) -> None:
        """aclrtMemcpyBatch (and Async, V2): copy ``sizes[i]`` bytes from ``srcs[i]`` to
        ``dsts[i]``; all host to device or all device to host.

        Every entry is checked before any byte moves (the sync runtime checks them all first,
        ApiImpl::MemcpyBatch; DECISION: so does the async one, whose LoopMemcpyAsync queues
        entry by entry, so that a failed call changes nothing). An error about one entry
        carries its index (``fail_index``); others SIZE_MAX.

        Raises:
            InvalidArgument (memory.cpp): num_batches 0, a size past its dest_max, rsv not 0.
            InvalidRuntimeParam (api_error.cc, api_impl.cc): num_attrs 0 or above num_batches,
            more than 4096 entries (sync), attrs_indexes not 0, rising, below num_batches; an
            entry whose locations differ from its attribute's, or host to host / device to
            device; an async entry of size 0. InvalidPointer: an entry outside live memory.
        """
        runtime = self.runtime
        call = "aclrtMemcpyBatchAsync" if asynchronous else "aclrtMemcpyBatch"
        count = as_int(num_batches, "num_batches")
        num_attrs = as_int(num_attrs, "num_attrs")
        if count == 0:
            raise InvalidArgument("num_batches must be positive")
        sizes = self._ints(sizes, count, "sizes")
        if not any(sizes):
            return  # memory.cpp IsAllZeroSizeBatch: success, no other check
        dsts = self._ints(dsts, count, "dsts")
        srcs = self._ints(srcs, count, "srcs")
        dest_maxs = self._ints(dest_maxs, count, "dest_maxs")
        parsed = self._parse_attrs(attrs, num_attrs)
        indexes = self._ints(attrs_indexes, num_attrs, "attrs_indexes")
        for i in range(count):
            if dest_maxs[i] < sizes[i]:
                raise InvalidArgument(f"the copy size {sizes[i]} at index {i} exceeds the "
                                      f"size {dest_maxs[i]} of the destination buffer")
        # api_error.cc MemcpyBatch / MemcpyBatchAsync
        runtime.current_device()
        if num_attrs == 0 or num_attrs > count:
            raise InvalidRuntimeParam(f"num_attrs={num_attrs} must be in [1, num_batches="
                                      f"{count}]")
        if not asynchronous and count > BATCH_MAX:
            raise InvalidRuntimeParam(f"num_batches={count} is more than {BATCH_MAX}")
        if indexes[0] != 0:
            raise InvalidRuntimeParam(f"attrs_indexes[0]={indexes[0]} must be 0")
        for i in range(1, num_attrs):
            if indexes[i] <= indexes[i - 1] or indexes[i] >= count:
                raise InvalidRuntimeParam(f"attrs_indexes[{i}]={indexes[i]} must be above "
                                          f"attrs_indexes[{i - 1}] and below {count}")
        data = runtime.data
        with data.lock:
            plan: list[_Entry] = []
            attr = 0
            for i in range(count):
                if attr + 1 < num_attrs and i >= indexes[attr + 1]:
                    attr += 1
                try:
                    plan.append(self._batch_entry(call, i, dsts[i], dest_maxs[i], srcs[i],
                                                  sizes[i], parsed[attr], asynchronous))
                except AclError as error:
                    raise _with_index(error, i) from None
            if asynchronous:
                ranges = tuple(r for (_, _, dst, src, size) in plan
                               for r in ((src, src + size), (dst, dst + size)))
                runtime.streams.enqueue(stream, call, ranges,
                                        lambda s: self._run_batch(call, plan, s.handle))
                return
            for src_region, src_off, dst_region, dst_off, size in self._resolved(call, plan):
                self._move(src_region, src_off, dst_region, dst_off, size)
        self._emit_batch(call, plan, None)

    def _batch_entry(self, call: str, i: int, dst: int, dest_max: int, src: int,
                     size: int, attr: tuple[tuple[int, int], tuple[int, int]],
                     asynchronous: bool) -> _Entry:
        """Check entry ``i`` (api_impl.cc CheckMemCpyAttr, ValidateMemCpyParamsAndAttributes);
        (dst location, src location, dst, src, size)."""
        if asynchronous and size == 0:
            raise InvalidRuntimeParam(f"sizes[{i}] must be positive")
        if dst == 0 or src == 0:
            raise InvalidRuntimeParam(f"{'dsts' if dst == 0 else 'srcs'}[{i}] is NULL")
        data = self.runtime.data
        dst_region = data.resolve(call, dst, max(size, 1), write=True, deferred=True)[0]
        src_region = data.resolve(call, src, max(size, 1), write=False, deferred=True)[0]
        (dst_type, dst_id), (src_type, src_id) = attr
        for side, region, wanted, wanted_id in (("dst", dst_region, dst_type, dst_id),
                                                ("src", src_region, src_type, src_id)):
            actual = _LOC_HOST if region.host else _LOC_DEVICE
            wanted = _LOC_HOST if wanted == _LOC_HOST_NUMA else wanted
            if actual != wanted or (actual == _LOC_DEVICE
                                    and region.block.device_id != wanted_id):
                raise InvalidRuntimeParam(
                    f"entry {i}: the {side} location in its attribute (type {wanted}, id "
                    f"{wanted_id}) is not the memory's ({region.describe()})")
        if dst_region.host == src_region.host:
            raise InvalidRuntimeParam(f"entry {i}: only host to device and device to host "
                                      f"copies are supported")
        return (dst_region, src_region, dst, src, size)

    def _resolved(self, call: str, plan: list[_Entry]) -> list[_Resolved]:
        """Resolve every entry for the move (the sanitizer's checks), all before any moves."""
        data = self.runtime.data
        found: list[_Resolved] = []
        for i, (_, _, dst, src, size) in enumerate(plan):
            if not size:
                continue
            try:
                s = data.resolve(call, src, size, write=False)
                d = data.resolve(call, dst, size, write=True)
            except AclError as error:
                raise _with_index(error, i) from None
            found.append((*s, *d, size))
        return found

    def _run_batch(self, call: str, plan: list[_Entry], stream: object) -> None:
        data = self.runtime.data
        with data.lock:
            for src_region, src_off, dst_region, dst_off, size in self._resolved(call, plan):
                self._move(src_region, src_off, dst_region, dst_off, size)
        self._emit_batch(call, plan, stream)

    def _emit_batch(self, call: str, plan: list[_Entry], stream: object) -> None:
        first = plan[0]
        self.runtime.data._emit((first[0], first[1]), "memcpy_batch", call=call,
                                count=len(plan), bytes=sum(p[4] for p in plan), stream=stream)

    # -- aclrtMemsetD32 / aclrtMemsetD32Async ----------------------------------------------------

    def _check_d32(self, call: str, ptr: object, mem_size: object, value: object,
                   n: object) -> tuple[int, int, int] | None:
        """memory.cpp aclrtMemsetD32Impl: (ptr, value, N) or None when N is 0."""
        n = as_int(n, "N")
        if n == 0:
            return None
        ptr = as_int(ptr, "ptr")
        if ptr == 0:
            raise InvalidArgument("ptr is NULL")
        value = as_int(value, "value", 0, (1 << 32) - 1)
        mem_size = as_int(mem_size, "mem_size")
        if ptr % 4:
            raise InvalidArgument(f"ptr {ptr:#x} is not 4-byte aligned")
        if n * 4 > mem_size:
            raise InvalidArgument(f"N * 4 ({n * 4}) is greater than mem_size ({mem_size})")
        region = self.runtime.data.region_at(ptr)
        if region is None or (region.host and not isinstance(region, HostBlock)):
            # IsAclPinnedMemory: only aclrtMalloc and aclrtMallocHost memory
            raise InvalidArgument(f"{call}: only memory from aclrtMalloc or aclrtMallocHost "
                                  f"is supported ({ptr:#x} is neither)")
        return ptr, value, n

    def _fill_d32(self, call: str, ptr: int, value: int, n: int, stream: object = None) -> None:
        data = self.runtime.data
        count = n * 4
        pattern = value.to_bytes(4, "little")
        with data.lock:
            region, offset = data.resolve(call, ptr, count, write=True)
            if pattern == pattern[:1] * 4:
                region.fill(offset, count, pattern[0])
            else:
                slab = pattern * (SLAB_BYTES // 4)
                for at in range(0, count, len(slab)):
                    piece = slab[:min(len(slab), count - at)]
                    region.write(offset + at, memoryview(piece))
        data._emit((region,), "memset_d32", ptr=ptr, count=count, value=value, stream=stream)

    def memset_d32(self, ptr: object, mem_size: object, value: object, n: object) -> None:
        """aclrtMemsetD32: ``N`` 32-bit values ``value`` from ``ptr``.

        Raises:
            InvalidArgument: NULL, not 4-byte aligned, N * 4 over mem_size, memory that is
            not aclrtMalloc / aclrtMallocHost memory. InvalidPointer: past the block.
        """
        self.runtime.current_device()
        checked = self._check_d32("aclrtMemsetD32", ptr, mem_size, value, n)
        if checked is not None:
            self._fill_d32("aclrtMemsetD32", *checked)

    def memset_d32_async(self, ptr: object, mem_size: object, value: object, n: object,
                         stream: object) -> None:
        """aclrtMemsetD32Async: as :meth:`memset_d32`, queued (the documented behaviour;
        the public runtime's standard-SoC ``rtMemsetD32Async`` still returns
        FEATURE_NOT_SUPPORT, which aclrtMemsetD32AsyncImpl turns into success with nothing
        set: DECISION: the simulator follows the documentation).
        """
        runtime = self.runtime
        runtime.current_device()
        call = "aclrtMemsetD32Async"
        checked = self._check_d32(call, ptr, mem_size, value, n)
        if checked is None:
            return
        ptr, value, n = checked
        runtime.data.resolve(call, ptr, n * 4, write=True, deferred=True)
        runtime.streams.enqueue(stream, call, ((ptr, ptr + n * 4),),
                                lambda s: self._fill_d32(call, ptr, value, n, s.handle))

    # -- aclrtMemcpyAsyncWithCondition (deprecated) ----------------------------------------------

    def async_with_condition(self, dst: object, dest_max: object, src: object, count: object,
                             kind: object, stream: object) -> None:
        """aclrtMemcpyAsyncWithCondition: aclrtMemcpyAsync (11-03: deprecated, use it),
        except that HOST_TO_HOST is ACL_ERROR_RT_FEATURE_NOT_SUPPORT when the program runs on
        the host (11-03, 约束说明: Ascend EP形态).
        """
        runtime = self.runtime
        if as_int(count, "count") and as_int(kind, "kind", *_INT32) == K.HOST_TO_HOST \
                and runtime.get_run_mode() == RunMode.HOST:
            runtime.current_device()
            raise FeatureNotSupported("aclrtMemcpyAsyncWithCondition: HOST_TO_HOST is not "
                                      "supported when the program runs on the host")
        runtime.memcpy_async(dst, dest_max, src, count, kind, stream)


def copies(runtime: Any) -> Copies:
    """The runtime's :class:`Copies`, made on first use (``Runtime.extension``)."""
    found: Copies = runtime.extension("copies", Copies)
    return found
