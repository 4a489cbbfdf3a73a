"""2D copies (aclrtMemcpy2d, aclrtMemcpy2dAsync): ``height`` rows of ``width`` bytes, each side
a buffer with its own pitch.

:class:`Copies2D` is the base class of :class:`~.copies.Copies`, the copy plane of a runtime
(the rest of chapter 11-03 is there); every byte moves through the data plane's
:meth:`DataPlane.resolve`, and a failed call changes nothing, as the module docstring of
:mod:`.copies` says. Rules: hicann/runtime ``src/acl/aclrt_impl/memory.cpp``
(CheckMemcpy2dParam: ACL_ERROR_INVALID_PARAM 100000), ``src/runtime/api/impl/api_error.cc``
(MemCopy2DCheckParam, MemCopy2DSync, MemCopy2DAsync: ACL_ERROR_RT_PARAM_INVALID 107000,
ACL_ERROR_RT_FEATURE_NOT_SUPPORT 207000), ``docs/zh/api_ref/11-03_memory_copy_and_set.md``.
"""

from __future__ import annotations

from typing import Any

from ..memory.args import as_int
from ..memory.constants import MemcpyKind
from ..memory.errors import FeatureNotSupported, InvalidArgument, InvalidRuntimeParam
from .contents import Region, contents_of

__all__ = ["Copies2D", "MEMCPY2D_MAX_HEIGHT", "MEMCPY2D_MAX_WIDTH"]

K = MemcpyKind
#: RT_MAX_MEMCPY2D_HEIGHT / WIDTH (src/runtime/core/inc/common/internal_error_define.hpp)
MEMCPY2D_MAX_HEIGHT = 5 * 1024 * 1024
MEMCPY2D_MAX_WIDTH = 5_000_000


def _kind(value: object) -> int:
    return as_int(value, "kind", -(1 << 31), (1 << 31) - 1)


class Copies2D:
    """aclrtMemcpy2d and aclrtMemcpy2dAsync of one runtime (``self.runtime``)."""

    #: the runtime whose memory is copied (:class:`~.copies.Copies` sets it)
    runtime: Any

    def _check_2d(self, dst: object, dpitch: object, src: object, spitch: object, width: object,
                  height: object, kind: object) -> tuple[int, int, int, int, int, int, int] | None:
        """memory.cpp CheckMemcpy2dParam, then api_error.cc MemCopy2DCheckParam. None: nothing
        to do (width or height 0)."""
        width, height = as_int(width, "width"), as_int(height, "height")
        dst, src = as_int(dst, "dst"), as_int(src, "src")
        dpitch, spitch = as_int(dpitch, "dpitch"), as_int(spitch, "spitch")
        kind = _kind(kind)
        if width == 0 or height == 0:
            return None  # IsZeroSizeMemcpy2d: success before any other check
        if dst == 0 or src == 0:
            raise InvalidArgument(f"{'dst' if dst == 0 else 'src'} is NULL")
        if width > spitch or width > dpitch:
            raise InvalidArgument(f"width={width} must not exceed spitch={spitch} and "
                                  f"dpitch={dpitch}")
        if kind not in (K.HOST_TO_DEVICE, K.DEVICE_TO_HOST, K.DEVICE_TO_DEVICE, K.DEFAULT):
            raise InvalidArgument(f"kind={kind}: aclrtMemcpy2d takes HOST_TO_DEVICE, "
                                  f"DEVICE_TO_HOST, DEVICE_TO_DEVICE or DEFAULT")
        if height > MEMCPY2D_MAX_HEIGHT or width > MEMCPY2D_MAX_WIDTH:
            raise InvalidRuntimeParam(f"height={height} (at most {MEMCPY2D_MAX_HEIGHT}) or "
                                      f"width={width} (at most {MEMCPY2D_MAX_WIDTH}) too big")
        return dst, dpitch, src, spitch, width, height, kind

    def _spans(self, call: str, dst: int, dpitch: int, src: int, spitch: int,
               width: int, height: int, *,
               deferred: bool = False) -> tuple[Region, int, Region, int]:
        """Resolve both sides of a 2D copy: (src region, offset, dst region, offset) of the
        first rows.

        DECISION: each side is one buffer with a pitch, so its whole span (from the first
        row's start to the last row's end) must lie in one live region (or, for raw host
        memory, in memory the process has mapped): a pitch that carries a row out of the
        buffer is refused, never taken as other memory. Two resolves, plus a few rows'
        (see below) when the sanitizer is on and the copy runs now.
        """
        data = self.runtime.data
        s_region, s_off = data.resolve(call, src, (height - 1) * spitch + width, write=False,
                                       deferred=True)
        d_region, d_off = data.resolve(call, dst, (height - 1) * dpitch + width, write=True,
                                       deferred=True)
        sanitizer = self.runtime.sanitizer
        if not deferred and sanitizer.on:
            # The rows the sanitizer's per-access findings can concern, each looked at as an
            # access of its own: the first (read-only memory), the first to reach into a
            # block's padding on either side, and the first source row with a byte never
            # written (as for memcpy, at most one report of each kind per call).
            rows = {0, self._first_past(s_region.size, s_off, spitch, width, height),
                    self._first_past(d_region.size, d_off, dpitch, width, height)}
            if sanitizer.initcheck:
                rows.add(self._first_unwritten(s_region, s_off, spitch, width, height))
            for row in sorted(r for r in rows if r is not None):
                data.resolve(call, src + row * spitch, width, write=False)
                data.resolve(call, dst + row * dpitch, width, write=True)
        return s_region, s_off, d_region, d_off

    @staticmethod
    def _first_past(size: int, offset: int, pitch: int, width: int, height: int) -> int | None:
        """The first row that ends past ``size`` bytes of its region, or None. O(1)."""
        if offset + (height - 1) * pitch + width <= size:
            return None
        room = size - width - offset
        return 0 if room < 0 else min(height - 1, room // pitch + 1)

    @staticmethod
    def _first_unwritten(region: Region, offset: int, pitch: int, width: int,
                         height: int) -> int | None:
        """The first row holding a byte never written, or None. O(gaps met) lookups."""
        end = offset + (height - 1) * pitch + width
        at = offset
        while at < end:
            gap: tuple[int, int] | None = region.first_gap(at, end - at)
            if gap is None:
                return None
            row, into = divmod(gap[0] - offset, pitch)
            if into < width:
                return row
            at = offset + (row + 1) * pitch
        return None

    @staticmethod
    def _move_rows(s_region: Region, s_off: int, spitch: int, d_region: Region, d_off: int,
                   dpitch: int, width: int, height: int) -> None:
        """Move the rows: the source span is read once (so overlapping spans copy as
        memmove), then each row is one slice assignment. O(span + height)."""
        if spitch == width == dpitch:
            height, width = 1, width * height      # contiguous rows: one move
        span_s = (height - 1) * spitch + width
        source = bytearray(span_s)
        s_region.read_into(s_off, memoryview(source))
        rows = memoryview(source)
        out = d_region.view(d_off, (height - 1) * dpitch + width)
        if out is not None:
            for row in range(height):
                at = row * dpitch
                out[at:at + width] = rows[row * spitch:row * spitch + width]
            return
        contents = contents_of(d_region.block)
        if (1 << contents.shift) < contents.limit:
            # stored in chunks (over DENSE_LIMIT, or split by a big fill): row by row
            for row in range(height):
                d_region.write(d_off + row * dpitch, rows[row * spitch:row * spitch + width])
            return
        # A block stored as one chunk (contents.py): assign into the chunk itself and mark
        # each row written, so the gaps between rows stay unwritten for initcheck.
        chunk = contents._materialise(0)
        add = contents.written.add
        for row in range(height):
            at = d_off + row * dpitch
            chunk[at:at + width] = rows[row * spitch:row * spitch + width]
            add(at, at + width)

    def _check_direction(self, call: str, s_region: Region, d_region: Region,
                         directions: tuple[str, ...]) -> None:
        """Refuse a copy whose addresses make a direction outside ``directions`` (api_error.cc:
        MemcpyKindAutoCorrect from the addresses' locations); a D2D copy needs peer access."""
        direction = ("H" if s_region.host else "D") + "2" + ("H" if d_region.host else "D")
        if direction not in directions:
            supported = f"{', '.join(directions[:-1])} and {directions[-1]}"
            raise InvalidRuntimeParam(f"{call}: the addresses make a {direction} copy; "
                                      f"it supports {supported}")
        if direction == "D2D":
            self.runtime.data.check_p2p(call, s_region, d_region)

    def memcpy2d(self, dst: object, dpitch: object, src: object, spitch: object, width: object,
                 height: object, kind: object) -> None:
        """aclrtMemcpy2d: ``height`` rows of ``width`` bytes, ``spitch`` / ``dpitch`` apart.

        Raises:
            InvalidArgument: NULL, width past a pitch, a kind outside H2D/D2H/D2D/DEFAULT.
            FeatureNotSupported: DEVICE_TO_DEVICE (api_error.cc MemCopy2DSync: H2D, D2H only).
            InvalidRuntimeParam, InvalidPointer: too big; the addresses are not host to
            device or device to host; a row outside live memory.
        """
        runtime = self.runtime
        runtime.current_device()
        checked = self._check_2d(dst, dpitch, src, spitch, width, height, kind)
        if checked is None:
            return
        dst, dpitch, src, spitch, width, height, kind = checked
        call = "aclrtMemcpy2d"
        if kind == K.DEVICE_TO_DEVICE:
            raise FeatureNotSupported("aclrtMemcpy2d supports only host to device and device "
                                      "to host (api_error.cc MemCopy2DSync)")
        self._run_2d(call, dst, dpitch, src, spitch, width, height, ("H2D", "D2H"))

    def _run_2d(self, call: str, dst: int, dpitch: int, src: int, spitch: int,
                width: int, height: int, directions: tuple[str, ...],
                stream: object = None) -> None:
        data = self.runtime.data
        with data.lock:
            s_region, s_off, d_region, d_off = self._spans(call, dst, dpitch, src, spitch,
                                                           width, height)
            self._check_direction(call, s_region, d_region, directions)
            self._move_rows(s_region, s_off, spitch, d_region, d_off, dpitch, width, height)
        data._emit((d_region, s_region), "memcpy2d", dst=dst, dpitch=dpitch, src=src,
                   spitch=spitch, width=width, height=height, stream=stream)

    def memcpy2d_async(self, dst: object, dpitch: object, src: object, spitch: object,
                       width: object, height: object, kind: object, stream: object) -> None:
        """aclrtMemcpy2dAsync: as :meth:`memcpy2d`, queued; DEVICE_TO_DEVICE allowed
        (api_error.cc MemCopy2DAsync: H2D, D2H or D2D).

        Raises:
            as :meth:`memcpy2d`; InvalidHandle, StreamContextMismatch: the stream.
        """
        runtime = self.runtime
        runtime.current_device()
        checked = self._check_2d(dst, dpitch, src, spitch, width, height, kind)
        if checked is None:
            return
        dst, dpitch, src, spitch, width, height, kind = checked
        call = "aclrtMemcpy2dAsync"
        directions = ("H2D", "D2H", "D2D")
        data = runtime.data
        with data.lock:
            s_region, _, d_region, _ = self._spans(call, dst, dpitch, src, spitch, width,
                                                   height, deferred=True)
            self._check_direction(call, s_region, d_region, directions)
        span_s = (height - 1) * spitch + width
        span_d = (height - 1) * dpitch + width
        runtime.streams.enqueue(
            stream, call, ((src, src + span_s), (dst, dst + span_d)),
            lambda s: self._run_2d(call, dst, dpitch, src, spitch, width, height, directions,
                                   s.handle))
