"""JPEGD, JPEGE and PNGD on a runtime: the acldvppJpeg* / acldvppPng* calls.

The pure rules and pixels are in :mod:`.jpeg` and :mod:`.png`; this module reads and writes the
memory the program gave, through the data plane (so every sanitizer check applies), and runs
the decoders and the encoder on streams.

* The info and predict calls read host memory at once (acl_dvpp.h: "origin image data in host
  memory"; in the ACL_DEVICE run mode device memory is the process's too). DECISION: device
  memory given to them in the host run mode is ACL_ERROR_INVALID_PARAM with a message, where
  the vendor's library would read a device address on the host.
* The async calls check their handles, formats and memory at the call (a failed call queues
  nothing and changes nothing), and snapshot the descriptions (DECISION: a description changed
  after the call does not change the queued work). The image is read, checked and decoded
  when the stream runs the work, in stream order (so a memcpy_async queued before it has
  landed): an image the decoder refuses, or an output buffer smaller than the picture needs,
  fails the synchronising call with its code; the output description's ret code is set to
  it, and nothing is written. A buffer too small is a ``media-overflow`` sanitizer report
  naming the bytes the hardware would have written past it.
* JPEGD and PNGD write the picture's width, height, strides and format into the output
  description (JPEGD chapter: "调用acldvppGetPicDesc系列接口获取输出图片的宽/高"). Strides set
  on it beforehand are used when they keep the chapter's alignment and hold the picture, and
  refused otherwise (DECISION, :func:`.jpeg.jpegd_layout`); 0 means the decoder's own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from ..memory.args import UINT32_MAX, as_int
from ..memory.constants import MemType, RunMode
from ..memory.errors import AclError, InvalidArgument, NotOnThisProduct
from . import jpeg as _jpeg
from . import png as _png
from .constants import ChannelMode
from .descs import JpegeConfig, PicDesc
from .plane import MediaPlane

__all__ = ["Codecs", "jpegd_width_align", "require_codecs"]


def require_codecs(runtime: Any, call: str) -> None:
    """Refuse the DVPP codecs on a product that has none.

    Raises:
        NotOnThisProduct: Ascend 950PR/950DT (the JPEGD/JPEGE/PNGD chapters' product tables
            mark the "Atlas 350 加速卡" and Ascend 950 unsupported).
    """
    soc = runtime.profile.soc_name
    if soc.startswith("Ascend950"):
        raise NotOnThisProduct(f"{call}: {runtime.profile.description} has no JPEG/PNG "
                               f"codec (DVPP chapters, product support tables)")


def jpegd_width_align(runtime: Any) -> int:
    """JPEGD's output width stride alignment: 64 on Atlas A2/A3, 310P and 200I/500 A2; 128 on
    the Atlas 200/300/500 (Ascend 310) and Atlas training (Ascend 910) parts (pyACL JPEGD
    chapter, aclpythondevg_01_0321 table 2). Told by the SoC name; DECISION: a profile that
    names no SoC gets 64, the current parts' rule."""
    soc = runtime.profile.soc_name
    old = soc == "Ascend310" or (soc.startswith("Ascend910")
                                 and not soc.startswith(("Ascend910B", "Ascend910_93")))
    return 128 if old else 64


@dataclass(slots=True)
class _Out:
    """A snapshot of an output picture description, taken at the call."""

    desc: PicDesc
    data: int
    size: int
    format: int
    width_stride: int = 0
    height_stride: int = 0


class Codecs:
    """The JPEG and PNG calls of one media plane."""

    def __init__(self, plane: MediaPlane) -> None:
        self.plane = plane
        self.runtime = plane.runtime

    # -- memory ------------------------------------------------------------------------------------

    def _read_host(self, call: str, addr: object, size: object) -> bytes:
        """``size`` bytes of the image at ``addr`` in host memory (see the module's doc)."""
        addr = as_int(addr, "data", 0, (1 << 64) - 1)
        size = as_int(size, "size", 0, UINT32_MAX)
        if addr == 0:
            raise InvalidArgument(f"{call}: data is NULL")
        if size == 0:
            raise InvalidArgument(f"{call}: size is 0")
        data = self.runtime.data
        with data.lock:
            region, offset = data.resolve(call, addr, size, write=False)
            if not region.host and self.runtime.run_mode is not RunMode.DEVICE:
                raise InvalidArgument(
                    f"{call}: {addr:#x} is device memory (the {region.describe()}); it reads "
                    f"the image from host memory (acl_dvpp.h), so copy it to the host first")
            out = bytearray(size)
            region.read_into(offset, memoryview(out))
        return bytes(out)

    def check_device(self, call: str, what: str, addr: int, size: int, write: bool) -> None:
        """``size`` bytes at ``addr`` must be live device memory of the current device, DVPP
        memory (acl.media.dvpp_malloc) on a product that has it, as the VPC's buffers
        (:mod:`.vpc`; JPEGD/JPEGE/PNGD chapters: "需调用acldvppMalloc接口申请Device上的输入、
        输出内存").

        Raises:
            InvalidArgument: NULL, size 0, not such memory (a ``wrong-memory`` report), or
                ``size`` runs past the buffer (a ``media-overflow`` report).
        """
        if addr == 0:
            raise InvalidArgument(f"{call}: {what} is NULL")
        if size == 0:
            raise InvalidArgument(f"{call}: {what}'s size is 0")
        runtime = self.runtime
        data, sanitizer = runtime.data, runtime.sanitizer
        device = runtime.current_device()
        with data.lock:
            region = data.region_at(addr, 1)
            if region is None:
                sanitizer.bad_address(call, addr, size, write)
                raise InvalidArgument(f"{call}: {what} {addr:#x} is not live device memory")
            if region.host:
                if runtime.run_mode is RunMode.DEVICE:
                    return
                why = "host memory; DVPP reads and writes device memory"
            elif region.block.device_id != device.device_id:
                why = (f"memory of device {region.block.device_id}, but the current device "
                       f"is {device.device_id}")
            elif (runtime.profile.dvpp_type
                  and getattr(region.block, "mem_type", None) != MemType.DVPP):
                why = ("not DVPP memory: the codecs' buffers come from acl.media.dvpp_malloc "
                       "on this product")
            else:
                why = None
            if why is not None:
                sanitizer.wrong_memory(call, addr, size, write, region, why)
                raise InvalidArgument(f"{call}: {what} {addr:#x} is {why}")
            available = region.size - (addr - region.base)
            if size > available:
                sanitizer.media_overflow(
                    call, addr, size, write, region,
                    f"{what} declares {size} bytes, but the {region.describe()} holds "
                    f"{available} from {addr:#x}: the codec would "
                    f"{'write' if write else 'read'} {_bytes(size - available)} past its end")
                raise InvalidArgument(f"{call}: {what} declares {size} bytes at {addr:#x}, "
                                      f"but its buffer holds {available} there "
                                      f"({size - available} bytes short)")

    def _read(self, call: str, addr: int, size: int) -> bytes:
        return cast("bytes", self.runtime.data.read_bytes(call, addr, size))

    def _write(self, call: str, addr: int, payload: bytes) -> None:
        self.runtime.data.write_bytes(call, addr, payload)

    def _output(self, call: str, out_desc: object) -> _Out:
        desc = self.plane.get(out_desc, PicDesc, "output_desc")
        with self.plane.handles.lock:
            snap = _Out(desc, desc.data, desc.size, desc.format, desc.width_stride,
                        desc.height_stride)
        self.check_device(call, "the output picture's data", snap.data, snap.size, True)
        return snap

    def _overflow(self, call: str, out: _Out, need: int, what: str) -> None:
        """The output buffer is smaller than the picture: report and refuse."""
        data = self.runtime.data
        with data.lock:
            region = data.region_at(out.data, 1)
        self.runtime.sanitizer.media_overflow(
            call, out.data + out.size, need - out.size, True, region,
            f"{what} is {need} bytes at {out.data:#x}, but the picture description gives "
            f"{out.size}: the hardware would have written {_bytes(need - out.size)} past its end")
        raise InvalidArgument(f"{call}: {what} needs {need} bytes, but the output picture "
                              f"description's size is {out.size} (short by "
                              f"{need - out.size}); allocate what the predict call returns")

    def _enqueue(self, call: str, stream: object, ranges: tuple[Any, ...], run: Any,
                 out_desc: Any) -> None:
        """Queue ``run`` on the stream; a failure sets the description's ret code."""
        plane = self.plane

        def work(_stream: Any) -> None:
            try:
                run()
            except AclError as error:
                with plane.handles.lock:
                    out_desc.ret_code = int(error.code)
                raise
            with plane.handles.lock:
                out_desc.ret_code = 0

        self.runtime.streams.enqueue(stream, call, ranges, work)

    def _store(self, out: _Out, layout: _jpeg.Layout) -> None:
        with self.plane.handles.lock:
            d = out.desc
            d.width, d.height = layout.width, layout.height
            d.width_stride, d.height_stride = layout.width_stride, layout.height_stride
            d.format = int(layout.format)

    # -- JPEG info and prediction ------------------------------------------------------------------

    def jpeg_image_info(self, data: object, size: object) -> _jpeg.JpegHeader:
        """acldvppJpegGetImageInfo(V2): the header (libjpeg's failure: ACL_ERROR_FAILURE)."""
        call = "acldvppJpegGetImageInfo"
        require_codecs(self.runtime, call)
        return _jpeg.read_header(self._read_host(call, data, size))

    def jpeg_predict_dec_size(self, data: object, size: object, out_format: object) -> int:
        call = "acldvppJpegPredictDecSize"
        require_codecs(self.runtime, call)
        fmt = as_int(out_format, "output_pixel_format", -(1 << 31), (1 << 31) - 1)
        raw = self._read_host(call, data, size)
        return _jpeg.predict_dec_size(raw, fmt, jpegd_width_align(self.runtime))

    # -- JPEGD -------------------------------------------------------------------------------------

    def jpeg_decode(self, channel: object, data: object, size: object, out_desc: object,
                    stream: object) -> None:
        """acldvppJpegDecodeAsync."""
        call = "acldvppJpegDecodeAsync"
        require_codecs(self.runtime, call)
        self.plane.channel(channel, ChannelMode.DVPP_CHNMODE_JPEGD, call)
        addr = as_int(data, "data", 0, (1 << 64) - 1)
        nbytes = as_int(size, "size", 0, UINT32_MAX)
        out = self._output(call, out_desc)
        # image_processor.cpp ValidateJpegOutputFormat: checked at the call
        _jpeg.check_format(out.format, _jpeg.JPEGD_FORMATS, call)
        self.check_device(call, "data", addr, nbytes, False)
        align = jpegd_width_align(self.runtime)

        def run() -> None:
            raw = self._read(call, addr, nbytes)
            header = _jpeg.read_header(raw)
            layout = _jpeg.jpegd_layout(header, out.format, align, call, out.width_stride,
                                        out.height_stride)
            if layout.size > out.size:
                self._overflow(call, out, layout.size, f"the {header.width} x "
                               f"{header.height} picture as {layout.format.name} "
                               f"({layout.width_stride} x {layout.height_stride} strides)")
            self._write(call, out.data, _jpeg.decode(raw, layout, header))
            self._store(out, layout)

        self._enqueue(call, stream, ((addr, addr + nbytes), (out.data, out.data + out.size)),
                      run, out.desc)

    # -- JPEGE -------------------------------------------------------------------------------------

    def _encode_input(self, call: str, in_desc: object) -> tuple[Any, ...]:
        desc = self.plane.get(in_desc, PicDesc, "input_desc")
        with self.plane.handles.lock:
            fields = (desc.data, desc.size, desc.format, desc.width, desc.height,
                      desc.width_stride, desc.height_stride)
        _, _, fmt, width, height, wstride, hstride = fields
        checked = _jpeg.check_encode_input(fmt, width, height, wstride, hstride, call)
        return (*fields, checked)

    def jpeg_predict_enc_size(self, in_desc: object, config: object) -> int:
        call = "acldvppJpegPredictEncSize"
        require_codecs(self.runtime, call)
        _, _, fmt, width, height, wstride, hstride, _ = self._encode_input(call, in_desc)
        level = self.plane.get(config, JpegeConfig, "config").level
        return _jpeg.predict_enc_size(fmt, width, height, wstride, hstride, level)

    def jpeg_encode(self, channel: object, in_desc: object, data: object, size_ptr: object,
                    config: object, stream: object) -> None:
        """acldvppJpegEncodeAsync: ``size_ptr`` points at a uint32 in host memory holding the
        output buffer's size; the encoded size is written there when the work runs
        (image_processor.cpp: copied back to the host by an async copy on the stream)."""
        call = "acldvppJpegEncodeAsync"
        require_codecs(self.runtime, call)
        self.plane.channel(channel, ChannelMode.DVPP_CHNMODE_JPEGE, call)
        src, src_size, _, width, height, wstride, hstride, fmt = self._encode_input(call,
                                                                                    in_desc)
        level = self.plane.get(config, JpegeConfig, "config").level
        _jpeg.check_level(level, call)
        need = _jpeg.encode_input_size(fmt, wstride, hstride)
        if src_size < need:
            raise InvalidArgument(f"{call}: the input picture's size {src_size} is below the "
                                  f"{need} bytes a {wstride} x {hstride} {fmt.name} picture "
                                  f"takes")
        self.check_device(call, "the input picture's data", src, need, False)
        dst = as_int(data, "data", 0, (1 << 64) - 1)
        size_at = as_int(size_ptr, "size", 0, (1 << 64) - 1)
        if size_at == 0:
            raise InvalidArgument(f"{call}: size is NULL")
        capacity = int.from_bytes(self._read_host(call, size_at, 4), "little")
        if capacity == 0:
            raise InvalidArgument(f"{call}: *size is 0 (it must hold the output buffer's "
                                  f"size, e.g. acl.media.dvpp_jpeg_predict_enc_size's)")
        self.check_device(call, "data", dst, capacity, True)
        out = _Out(self.plane.get(in_desc, PicDesc), dst, capacity, int(fmt))

        def run() -> None:
            raw = self._read(call, src, need)
            encoded = _jpeg.encode(raw, fmt, width, height, wstride, hstride, level)
            if len(encoded) > capacity:
                self._overflow(call, out, len(encoded), "the encoded JPEG")
            self._write(call, dst, encoded)
            self._write(call, size_at, len(encoded).to_bytes(4, "little"))

        self._enqueue(call, stream, ((src, src + need), (dst, dst + capacity)), run, out.desc)

    # -- PNGD --------------------------------------------------------------------------------------

    def png_image_info(self, data: object, size: object) -> _png.PngHeader:
        call = "acldvppPngGetImageInfo"
        require_codecs(self.runtime, call)
        return _png.read_header(self._read_host(call, data, size), call)

    def png_predict_dec_size(self, data: object, size: object, out_format: object) -> int:
        call = "acldvppPngPredictDecSize"
        require_codecs(self.runtime, call)
        fmt = as_int(out_format, "output_pixel_format", -(1 << 31), (1 << 31) - 1)
        return _png.predict_dec_size(self._read_host(call, data, size), fmt)

    def png_decode(self, channel: object, data: object, size: object, out_desc: object,
                   stream: object) -> None:
        """acldvppPngDecodeAsync."""
        call = "acldvppPngDecodeAsync"
        require_codecs(self.runtime, call)
        self.plane.channel(channel, ChannelMode.DVPP_CHNMODE_PNGD, call)
        addr = as_int(data, "data", 0, (1 << 64) - 1)
        nbytes = as_int(size, "size", 0, UINT32_MAX)
        out = self._output(call, out_desc)
        _png.check_format(out.format, call)
        self.check_device(call, "data", addr, nbytes, False)

        def run() -> None:
            raw = self._read(call, addr, nbytes)
            layout = _png.pngd_layout(_png.read_header(raw, call), out.format, call,
                                      out.width_stride, out.height_stride)
            if layout.size > out.size:
                self._overflow(call, out, layout.size, f"the {layout.width} x "
                               f"{layout.height} picture as {layout.format.name}")
            self._write(call, out.data, _png.decode(raw, layout))
            self._store(out, layout)

        self._enqueue(call, stream, ((addr, addr + nbytes), (out.data, out.data + out.size)),
                      run, out.desc)


def _bytes(n: int) -> str:
    return f"{n} byte" if n == 1 else f"{n} bytes"
