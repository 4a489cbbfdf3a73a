"""JPEGD and JPEGE: the JPEG header, the decoder's and encoder's memory rules, and the pixels.

Everything here is pure (bytes in, bytes out); :mod:`.codec` runs it on streams against
device memory. Sources, cited at each rule:

* the vendor's acl library, ``ImageProcessor::acldvppJpegGetImageInfo``,
  ``acldvppJpegPredictDecSize`` and ``acldvppJpegPredictEncSize`` (image_processor.cpp),
  ``ImageProcessorV200::ValidateJpegOutputFormat`` (image_processor_v200.cpp);
* the pyACL DVPP chapters "JPEGD 功能及约束说明" (aclpythondevg_01_0321) and "JPEGE 功能及约束
  说明" (aclpythondevg_01_0328): input limits, output formats, strides, buffer sizes.

The header is read by :func:`read_header`, a bounded walk over the markers (never more than
the bytes given, no allocation beyond them), so hostile bytes cost time and memory in
proportion to their size. Pillow decodes and encodes the pixels, and only after the header
said the image is one JPEGD takes, of at most 8192 x 8192, and the file holds at least the
scan data such an image needs (:func:`decode`): at most 256 pixels per byte of the file.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any, cast

from ..memory.errors import (
    FormatNotMatch,
    InvalidArgument,
    UnreadableImage,
    UnsupportedJpeg,
)
from .constants import JpegFormat, PixelFormat

__all__ = [
    "JpegHeader", "read_header", "Layout", "jpegd_layout", "predict_dec_size", "decode",
    "check_encode_input", "predict_enc_size", "encode_input_size", "encode", "JPEGD_MIN",
    "JPEGD_MAX", "require_pillow", "check_format", "check_level", "JPEGD_FORMATS",
    "JPEGE_FORMATS", "JPEGD_OUTPUTS", "check_scan_size",
]

P = PixelFormat
#: image_processor.cpp acldvppJpegPredictDecSize / PredictEncSize: "param according dvpp
#: capability", 32 to 8192 on every product simulated here (the 16384 of the Atlas 200I/500
#: A2 is not one of them).
JPEGD_MIN, JPEGD_MAX = 32, 8192
#: libjpeg's JPEG_MAX_DIMENSION: a header beyond it is an error in jpeg_read_header
_LIBJPEG_MAX = 65500

#: the acldvppJpegFormat of a 3-component image, by (Y h, Y v) over (Cb h, Cb v) sampling
#: (image_processor.cpp GetImageFormat)
_CSS = {(2, 2): JpegFormat.ACL_JPEG_CSS_420, (2, 1): JpegFormat.ACL_JPEG_CSS_422,
        (1, 1): JpegFormat.ACL_JPEG_CSS_444, (1, 2): JpegFormat.ACL_JPEG_CSS_440,
        (4, 1): JpegFormat.ACL_JPEG_CSS_411}

#: JPEGD's output formats per source sampling (aclpythondevg_01_0321 table 2; gray: YUV400,
#: which ValidateJpegOutputFormat of the V200 library accepts, or YUV420SP with neutral chroma)
_NV = (P.PIXEL_FORMAT_YUV_SEMIPLANAR_420, P.PIXEL_FORMAT_YVU_SEMIPLANAR_420)
JPEGD_OUTPUTS: dict[JpegFormat, tuple[PixelFormat, ...]] = {
    JpegFormat.ACL_JPEG_CSS_444: (P.PIXEL_FORMAT_YUV_SEMIPLANAR_444,
                                  P.PIXEL_FORMAT_YVU_SEMIPLANAR_444, *_NV),
    JpegFormat.ACL_JPEG_CSS_422: (P.PIXEL_FORMAT_YUV_SEMIPLANAR_422,
                                  P.PIXEL_FORMAT_YVU_SEMIPLANAR_422, *_NV),
    JpegFormat.ACL_JPEG_CSS_420: _NV,
    JpegFormat.ACL_JPEG_CSS_440: (P.PIXEL_FORMAT_YUV_SEMIPLANAR_440,
                                  P.PIXEL_FORMAT_YVU_SEMIPLANAR_440, *_NV),
    JpegFormat.ACL_JPEG_CSS_GRAY: (P.PIXEL_FORMAT_YUV_400, *_NV),
}
#: PIXEL_FORMAT_UNKNOWN decodes to the source's own sampling, V before U (JPEGD chapter:
#: "输出格式默认按源图片格式输出、且是V在前U在后的Semi-Planar格式")
_SOURCE_FORMAT = {
    JpegFormat.ACL_JPEG_CSS_444: P.PIXEL_FORMAT_YVU_SEMIPLANAR_444,
    JpegFormat.ACL_JPEG_CSS_422: P.PIXEL_FORMAT_YVU_SEMIPLANAR_422,
    JpegFormat.ACL_JPEG_CSS_420: P.PIXEL_FORMAT_YVU_SEMIPLANAR_420,
    JpegFormat.ACL_JPEG_CSS_440: P.PIXEL_FORMAT_YVU_SEMIPLANAR_440,
    JpegFormat.ACL_JPEG_CSS_GRAY: P.PIXEL_FORMAT_YUV_400,
}
#: every format acldvppJpegDecodeAsync / PredictDecSize take at all (ValidateJpegOutputFormat,
#: image_processor_v200.cpp); another is ACL_ERROR_FORMAT_NOT_MATCH
JPEGD_FORMATS = frozenset({*(f for fs in JPEGD_OUTPUTS.values() for f in fs),
                           P.PIXEL_FORMAT_UNKNOWN})

#: (chroma width divisor, chroma height divisor) of each semi-planar layout; None: no chroma.
#: Bytes = wstride * hstride * (1 + 2 / (dw * dh)): 3/2, 2, 3, 2, 1 (the chapter's formulas)
_SUBSAMPLING: dict[PixelFormat, tuple[int, int] | None] = {
    P.PIXEL_FORMAT_YUV_SEMIPLANAR_420: (2, 2), P.PIXEL_FORMAT_YVU_SEMIPLANAR_420: (2, 2),
    P.PIXEL_FORMAT_YUV_SEMIPLANAR_422: (2, 1), P.PIXEL_FORMAT_YVU_SEMIPLANAR_422: (2, 1),
    P.PIXEL_FORMAT_YUV_SEMIPLANAR_444: (1, 1), P.PIXEL_FORMAT_YVU_SEMIPLANAR_444: (1, 1),
    P.PIXEL_FORMAT_YUV_SEMIPLANAR_440: (1, 2), P.PIXEL_FORMAT_YVU_SEMIPLANAR_440: (1, 2),
    P.PIXEL_FORMAT_YUV_400: None,
}
_VU_FIRST = {P.PIXEL_FORMAT_YVU_SEMIPLANAR_420, P.PIXEL_FORMAT_YVU_SEMIPLANAR_422,
             P.PIXEL_FORMAT_YVU_SEMIPLANAR_444, P.PIXEL_FORMAT_YVU_SEMIPLANAR_440}

#: JPEGE's inputs (JPEGE chapter table 1): YUV420SP and the four YUV422 packed orders
_PACKED = {P.PIXEL_FORMAT_YUYV_PACKED_422: "YUYV", P.PIXEL_FORMAT_UYVY_PACKED_422: "UYVY",
           P.PIXEL_FORMAT_YVYU_PACKED_422: "YVYU", P.PIXEL_FORMAT_VYUY_PACKED_422: "VYUY"}
JPEGE_FORMATS = frozenset({*_NV, *_PACKED})


def require_pillow() -> Any:
    """The PIL.Image module, or FeatureNotSupported saying how to get it."""
    try:
        from PIL import Image
    except ImportError:  # pragma: no cover - Pillow is in the test extra
        from ..memory.errors import FeatureNotSupported
        raise FeatureNotSupported("image decoding and encoding use Pillow, which is not "
                                  "installed: pip install 'ascend-memsim[media]'") from None
    return Image


def _align(value: int, to: int) -> int:
    return -(-value // to) * to


def check_format(value: int, allowed: frozenset[Any], call: str) -> PixelFormat:
    if value not in allowed:
        known = PixelFormat._value2member_map_.get(value)
        name = known.name if known is not None else "not an acldvppPixelFormat"
        raise FormatNotMatch(f"{call}: format {value} ({name}) is not one it takes")
    return PixelFormat(value)


# -- the header ------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class JpegHeader:
    """What acldvppJpegGetImageInfo(V2) reads from a JPEG's header."""

    #: as displayed: swapped when the EXIF orientation turns the picture (5 to 8)
    width: int
    height: int
    components: int
    format: JpegFormat
    #: the SOF marker's low nibble (0 baseline, 1 extended, 2 progressive, 9+ arithmetic...)
    sof: int
    precision: int
    orientation: int
    #: bytes from the first scan's entropy-coded data to the end of the file (0: not read)
    scan_bytes: int = 0
    #: the 8 x 8 blocks of the frame's components (libjpeg's width_in_blocks x
    #: height_in_blocks, summed; 0: not read)
    blocks: int = 0

    def unsupported(self) -> str | None:
        """Why JPEGD cannot decode this image (None: it can). JPEGD chapter: Huffman coding
        only, sequential DCT, 8-bit samples, YUV 4:4:4/4:2:2/4:2:0/4:0:0/4:4:0; no
        arithmetic coding, no progressive JPEG."""
        if self.sof == 2:
            return "progressive JPEG"
        if self.sof >= 8:
            return "arithmetic coding"
        if self.sof not in (0, 1):
            return f"SOF{self.sof} (lossless or hierarchical) coding"
        if self.precision != 8:
            return f"{self.precision}-bit samples"
        if self.components not in (1, 3):
            return f"{self.components} components (CMYK or other non-YUV colour)"
        if self.format not in JPEGD_OUTPUTS:
            return f"sampling {self.format.name}"
        return None


def _u16(data: bytes, i: int) -> int:
    return (data[i] << 8) | data[i + 1]


def read_header(data: bytes) -> JpegHeader:
    """Read a JPEG's header as libjpeg's jpeg_read_header does (up to the first scan).

    O(len(data)) time, no allocation beyond slices of ``data``.

    Raises:
        UnreadableImage: not a JPEG, truncated before its first scan, a bad segment length,
            no frame header, a zero or over-large dimension.
    """
    n = len(data)
    if n < 4 or data[0] != 0xFF or data[1] != 0xD8:
        raise UnreadableImage("the data does not start with a JPEG SOI marker (FF D8)")
    i, frame, orientation = 2, None, 1
    while True:
        # markers may be preceded by any number of fill bytes (FF)
        while i < n and data[i] != 0xFF:
            i += 1
        while i < n and data[i] == 0xFF:
            i += 1
        if i >= n:
            raise UnreadableImage("the JPEG ends before its first scan (truncated)")
        marker = data[i]
        i += 1
        if marker == 0xD9:
            raise UnreadableImage("the JPEG ends (EOI) before any scan: no image")
        if marker == 0x01 or 0xD0 <= marker <= 0xD8:
            continue
        if i + 2 > n:
            raise UnreadableImage("the JPEG ends inside a segment length (truncated)")
        length = _u16(data, i)
        if length < 2 or i + length > n:
            raise UnreadableImage(f"segment FF{marker:02X} at byte {i - 2} has length {length}, "
                                  f"past the end of the {n} bytes (truncated or corrupt)")
        body = data[i + 2:i + length]
        if marker == 0xE1 and body[:6] == b"Exif\x00\x00":
            orientation = _exif_orientation(body[6:])
        elif 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            if frame is not None:
                raise UnreadableImage("the JPEG has two frame (SOF) headers")
            frame = _frame(marker & 0x0F, body)
        elif marker == 0xDA:
            if frame is None:
                raise UnreadableImage("the JPEG's first scan comes before any frame (SOF) "
                                      "header")
            break
        i += length
    sof, precision, width, height, comps = frame
    swap = orientation in (5, 6, 7, 8)
    return JpegHeader(height if swap else width, width if swap else height, len(comps),
                      _sampling(comps), sof, precision, orientation, n - (i + length),
                      _blocks(width, height, comps))


def _frame(sof: int, body: bytes) -> tuple[Any, ...]:
    if len(body) < 6:
        raise UnreadableImage("the frame (SOF) header is truncated")
    precision, height, width, count = body[0], _u16(body, 1), _u16(body, 3), body[5]
    if len(body) < 6 + 3 * count or count == 0:
        raise UnreadableImage(f"the frame header names {count} components but holds "
                              f"{max(0, (len(body) - 6) // 3)}")
    if width == 0 or height == 0:
        raise UnreadableImage(f"the frame is {width} x {height}: an empty image (libjpeg "
                              f"does not support DNL)")
    if max(width, height) > _LIBJPEG_MAX:
        raise UnreadableImage(f"{width} x {height} is beyond libjpeg's {_LIBJPEG_MAX}")
    comps = [(body[6 + 3 * k + 1] >> 4, body[6 + 3 * k + 1] & 0x0F) for k in range(count)]
    if any(not (1 <= h <= 4 and 1 <= v <= 4) for h, v in comps):
        # libjpeg jdinput.c initial_setup: JERR_BAD_SAMPLING, in jpeg_read_header
        raise UnreadableImage(f"the frame's sampling factors {comps} are outside 1..4")
    return sof, precision, width, height, comps


def _blocks(width: int, height: int, comps: list[tuple[int, int]]) -> int:
    """The 8 x 8 blocks a sequential scan codes for the frame: per component, its width and
    height in blocks (libjpeg jdinput.c initial_setup: ceil(width x h / (h_max x 8)), the
    same for heights), summed. Interleaved scans code whole MCUs: more, never fewer."""
    hmax = max(h for h, _ in comps)
    vmax = max(v for _, v in comps)
    return sum(-(-width * h // (hmax * 8)) * -(-height * v // (vmax * 8)) for h, v in comps)


def _sampling(comps: list[tuple[int, int]]) -> JpegFormat:
    if len(comps) == 1:
        return JpegFormat.ACL_JPEG_CSS_GRAY
    if len(comps) == 3 and comps[1] == comps[2] and comps[1] == (1, 1):
        return _CSS.get(comps[0], JpegFormat.ACL_JPEG_CSS_UNKNOWN)
    return JpegFormat.ACL_JPEG_CSS_UNKNOWN


def _exif_orientation(tiff: bytes) -> int:
    """The EXIF Orientation tag (0x0112) of IFD0, 1 when absent or unreadable (bounded:
    one IFD, at most its entries)."""
    if len(tiff) < 8 or tiff[:2] not in (b"II", b"MM"):
        return 1
    big = tiff[:2] == b"MM"

    def num(at: int, size: int) -> int:
        return int.from_bytes(tiff[at:at + size], "big" if big else "little")

    ifd = num(4, 4)
    if ifd + 2 > len(tiff):
        return 1
    for k in range(min(num(ifd, 2), (len(tiff) - ifd - 2) // 12)):
        entry = ifd + 2 + 12 * k
        if num(entry, 2) == 0x0112:
            value = num(entry + 8, 2)
            return value if 1 <= value <= 8 else 1
    return 1


# -- JPEGD: the output layout and its size ---------------------------------------------------

@dataclass(frozen=True, slots=True)
class Layout:
    """A decoded picture in memory: format, visible size, strides, bytes."""

    format: PixelFormat
    width: int
    height: int
    width_stride: int
    height_stride: int
    size: int


def _check_dims(width: int, height: int, call: str, lo: int = JPEGD_MIN,
                hi: int = JPEGD_MAX) -> None:
    if not (lo <= width <= hi and lo <= height <= hi):
        raise InvalidArgument(f"{call}: the image is {width} x {height}; it takes {lo} x {lo} "
                              f"to {hi} x {hi}")


def jpegd_layout(header: JpegHeader, out_format: int, width_align: int,
                 call: str = "acldvppJpegDecodeAsync", width_stride: int = 0,
                 height_stride: int = 0) -> Layout:
    """Where JPEGD puts the decoded picture: width stride = width aligned to ``width_align``
    (64 on Atlas A2/A3 and 310P, 128 on the older parts), height stride = height aligned to
    16, bytes = wstride x hstride x (3/2 for YUV420SP, 2 for 422/440, 3 for 444, 1 for
    YUV400) (JPEGD chapter table 2). YUV420SP output rounds an odd width or height down to
    even (the chapter's note on odd 4:4:4 sources).

    ``width_stride`` / ``height_stride``: the strides set on the output description, 0 for
    none. DECISION: strides that are set are used when they keep the chapter's alignment (a
    multiple of ``width_align``, of 16) and hold the picture (the vendor's samples set
    128 x 16 on every product; the hi_mpi JPEGD the library drives takes the program's
    strides); set strides that do not are refused.

    Raises:
        FormatNotMatch: a format JPEGD does not output, or not from this source sampling.
        InvalidArgument: the image is outside 32 x 32 .. 8192 x 8192; a bad stride.
        UnsupportedJpeg: see :meth:`JpegHeader.unsupported`.
    """
    fmt = check_format(out_format, JPEGD_FORMATS, call)
    why = header.unsupported()
    if why is not None:
        raise UnsupportedJpeg(f"{call}: JPEGD does not decode {why}")
    _check_dims(header.width, header.height, call)
    if fmt is P.PIXEL_FORMAT_UNKNOWN:
        fmt = _SOURCE_FORMAT[header.format]
    if fmt not in JPEGD_OUTPUTS[header.format]:
        raise FormatNotMatch(f"{call}: a {header.format.name} JPEG decodes to "
                             f"{', '.join(f.name for f in JPEGD_OUTPUTS[header.format])}, "
                             f"not {fmt.name}")
    width, height = header.width, header.height
    sub = _SUBSAMPLING[fmt]
    if sub is not None:
        width -= width % sub[0]
        height -= height % sub[1]
    wstride, hstride = _align(width, width_align), _align(height, 16)
    if width_stride and (width_stride < wstride or width_stride % width_align):
        raise InvalidArgument(f"{call}: the output width stride {width_stride} must be a "
                              f"multiple of {width_align} and at least {wstride} (the width "
                              f"{width} aligned to {width_align}; JPEGD chapter)")
    if height_stride and (height_stride < hstride or height_stride % 16):
        raise InvalidArgument(f"{call}: the output height stride {height_stride} must be a "
                              f"multiple of 16 and at least {hstride} (the height {height} "
                              f"aligned to 16; JPEGD chapter)")
    wstride, hstride = width_stride or wstride, height_stride or hstride
    chroma = 0 if sub is None else 2 * wstride * hstride // (sub[0] * sub[1])
    return Layout(fmt, width, height, wstride, hstride, wstride * hstride + chroma)


def predict_dec_size(data: bytes, out_format: int, width_align: int) -> int:
    """acldvppJpegPredictDecSize: the bytes to allocate for ``data`` decoded to ``out_format``.

    The format is checked before the header (image_processor.cpp: FORMAT_NOT_MATCH first);
    the header must be readable (ACL_ERROR_FAILURE otherwise) and its size inside 32..8192.
    YUV420SP NV12/NV21: the width aligned to 128 x the height aligned to 16 x 3/2 on every
    product (image_processor.cpp, which the V200 library does not override), so it holds
    JPEGD's 64-aligned layout and the 128 x 16 strides the samples set; other formats: the
    layout of :func:`jpegd_layout` (the library's CalcImageSize, DECISION).
    DECISION: a JPEG JPEGD cannot decode (progressive, CMYK...) is predicted as its sampling
    would be, as the vendor's function reads only the header; the decode refuses it.
    """
    call = "acldvppJpegPredictDecSize"
    fmt = check_format(out_format, JPEGD_FORMATS, call)
    header = read_header(data)
    _check_dims(header.width, header.height, call)
    if header.format not in JPEGD_OUTPUTS:
        raise FormatNotMatch(f"{call}: the JPEG's sampling {header.format.name} has no "
                             f"JPEGD output format")
    if fmt is not P.PIXEL_FORMAT_UNKNOWN and fmt not in JPEGD_OUTPUTS[header.format]:
        raise FormatNotMatch(f"{call}: a {header.format.name} JPEG does not decode to "
                             f"{fmt.name}")
    if fmt in _NV:
        return _align(header.width, 128) * _align(header.height, 16) * 3 // 2
    # predicting reads the layout of a decodable image of the same header
    fake = JpegHeader(header.width, header.height, header.components, header.format, 0, 8,
                      header.orientation)
    return jpegd_layout(fake, fmt, width_align, call).size


#: the fewest bits a Huffman-coded sequential scan spends on one 8 x 8 block: a DC code and
#: an AC code (the end-of-block, or a coefficient), each at least 1 bit long (ITU T.81
#: Annex C: code lengths 1 to 16)
_MIN_BITS_PER_BLOCK = 2


def check_scan_size(header: JpegHeader, call: str = "acldvppJpegDecodeAsync") -> None:
    """Refuse a JPEG whose scan data cannot hold its frame: fewer bytes after the first scan
    header than 2 bits per 8 x 8 block (a blank image of that size needs them). DECISION:
    the DVPP's software path decodes images whose MCU data runs short ("支持mcu数据不足的异常
    图片解码", JPEGD constraints), as libjpeg pads them; the simulator does too, down to this
    bound, below which the picture would be almost all padding that the file never paid
    for (a 1.5 KB file claiming 8192 x 8192). So decoding costs at most 256 pixels per
    byte of the file: 64 pixels per block, 4 blocks per byte.

    Raises:
        UnreadableImage: the scan data is too short (ACL_ERROR_FAILURE).
    """
    need = -(-header.blocks * _MIN_BITS_PER_BLOCK // 8)
    if header.scan_bytes < need:
        raise UnreadableImage(
            f"{call}: the JPEG's scan data ({header.scan_bytes} bytes) cannot hold its "
            f"{header.width} x {header.height} frame: a Huffman-coded scan spends at least "
            f"{_MIN_BITS_PER_BLOCK} bits on each of its {header.blocks} 8 x 8 blocks "
            f"({need} bytes); the image is truncated")


def decode(data: bytes, layout: Layout, header: JpegHeader) -> bytes:
    """The picture in ``layout``, padding rows and columns 0 (chroma padding 128), as bytes.

    Raises:
        UnreadableImage: the scan data cannot hold the frame (:func:`check_scan_size`), or
            Pillow cannot decode it (corrupt, truncated).
    """
    check_scan_size(header)
    Image = require_pillow()
    np = _numpy()
    try:
        with Image.open(io.BytesIO(data), formats=("JPEG",)) as img:
            img.draft("L" if header.components == 1 else "YCbCr", img.size)
            img.load()
            if header.orientation != 1:
                from PIL import ImageOps
                img = ImageOps.exif_transpose(img)
            # Pillow's JPEG decoder is third-party code reading hostile bytes: what it raises
            # is the image's fault, not the simulator's
            planes = np.asarray(img.convert("YCbCr" if header.components == 3 else "L"))
    except Exception as error:
        raise UnreadableImage(f"acldvppJpegDecodeAsync: the JPEG's data cannot be decoded: "
                              f"{type(error).__name__}: {error}") from None
    return _lay_out(np, planes, layout)


def _lay_out(np: Any, planes: Any, layout: Layout) -> bytes:
    w, h, ws, hs = layout.width, layout.height, layout.width_stride, layout.height_stride
    out = np.zeros(layout.size, np.uint8)
    y = out[:ws * hs].reshape(hs, ws)
    luma = planes if planes.ndim == 2 else planes[:, :, 0]
    y[:h, :w] = luma[:h, :w]
    sub = _SUBSAMPLING[layout.format]
    if sub is None:
        return cast("bytes", out.tobytes())
    dw, dh = sub
    cw, ch = w // dw, h // dh
    uv = out[ws * hs:].reshape(hs // dh, ws * 2 // dw)
    uv[:] = 128
    if planes.ndim == 2:
        return cast("bytes", out.tobytes())
    chroma = planes[:ch * dh, :cw * dw, 1:].astype(np.uint16)
    chroma = chroma.reshape(ch, dh, cw, dw, 2).sum(axis=(1, 3))
    chroma = ((chroma + (dw * dh) // 2) // (dw * dh)).astype(np.uint8)
    if layout.format in _VU_FIRST:
        chroma = chroma[:, :, ::-1]
    uv[:ch, :2 * cw] = chroma.reshape(ch, 2 * cw)
    return cast("bytes", out.tobytes())


def _numpy() -> Any:
    from ..compute.tensors import require_numpy
    return require_numpy()


# -- JPEGE -------------------------------------------------------------------------------------

def check_encode_input(fmt: int, width: int, height: int, wstride: int, hstride: int,
                       call: str) -> PixelFormat:
    """JPEGE's input rules (image_processor.cpp acldvppJpegPredictEncSize; JPEGE chapter):
    32..8192 each side; YUV420SP or YUV422 packed; width (and height for 420SP) even;
    width stride 16-aligned and >= width (packed: exactly width x 2 aligned to 16); height
    stride equal to the height, or above it and 16-aligned.

    Raises:
        InvalidArgument, FormatNotMatch.
    """
    _check_dims(width, height, call)
    fmt = check_format(fmt, JPEGE_FORMATS, call)
    packed = fmt in _PACKED
    if width % 2 or (not packed and height % 2):
        raise InvalidArgument(f"{call}: {fmt.name} needs an even width"
                              f"{'' if packed else ' and height'}, got {width} x {height}")
    if packed:
        if wstride != _align(2 * width, 16):
            raise InvalidArgument(f"{call}: width stride {wstride} must be width {width} x 2 "
                                  f"aligned to 16 = {_align(2 * width, 16)} for {fmt.name}")
    elif wstride < width or wstride % 16:
        raise InvalidArgument(f"{call}: width stride {wstride} must be >= width {width} and a "
                              f"multiple of 16")
    if hstride != height and (hstride < height or hstride % 16):
        raise InvalidArgument(f"{call}: height stride {hstride} must equal the height "
                              f"{height}, or exceed it and be a multiple of 16")
    return fmt


def encode_input_size(fmt: PixelFormat, wstride: int, hstride: int) -> int:
    """Bytes of a JPEGE input picture: wstride x hstride x 3/2 (YUV420SP) or wstride x hstride
    (packed 422, whose stride counts bytes) (JPEGE chapter table 1)."""
    return wstride * hstride if fmt in _PACKED else wstride * hstride * 3 // 2


def predict_enc_size(fmt: int, width: int, height: int, wstride: int, hstride: int,
                     level: int) -> int:
    """acldvppJpegPredictEncSize: the input's bytes + a 640-byte header + 128 bytes of start
    alignment, rounded up to 2 MiB (image_processor.cpp: "align to 2M bytes").

    Raises:
        InvalidArgument, FormatNotMatch: see :func:`check_encode_input`; a level over 100.
    """
    call = "acldvppJpegPredictEncSize"
    checked = check_encode_input(fmt, width, height, wstride, hstride, call)
    check_level(level, call)
    size = encode_input_size(checked, wstride, hstride) + 640 + 128
    return _align(size, 2 << 20)


def check_level(level: int, call: str) -> None:
    """acl_dvpp.h: "Encoding quality range [0, 100]". DECISION: the setter stores any uint32
    (as the library's does); the encoder and its prediction refuse a level above 100."""
    if level > 100:
        raise InvalidArgument(f"{call}: the jpege config's level {level} is outside [0, 100]")


def encode(raw: bytes, fmt: PixelFormat, width: int, height: int, wstride: int, hstride: int,
           level: int) -> bytes:
    """A baseline Huffman JPEG of the picture (Pillow, quality ``level``; level 0 encodes as
    100: acl_dvpp.h acldvppSetJpegeConfigLevel, "level 0 encoding quality is similar to
    level 100"), 4:2:0 from YUV420SP and 4:2:2 from packed input."""
    check_level(level, "acldvppJpegEncodeAsync")
    Image = require_pillow()
    np = _numpy()
    buf = np.frombuffer(raw, np.uint8)
    if fmt in _PACKED:
        rows = buf[:wstride * hstride].reshape(hstride, wstride)[:height, :2 * width]
        order = _PACKED[fmt]
        quads = rows.reshape(height, width // 2, 4)
        at = {c: [k for k, x in enumerate(order) if x == c] for c in "YUV"}
        y = quads[:, :, at["Y"]].reshape(height, width)
        u = np.repeat(quads[:, :, at["U"][0]], 2, axis=1)
        v = np.repeat(quads[:, :, at["V"][0]], 2, axis=1)
        subsampling = 1
    else:
        y = buf[:wstride * hstride].reshape(hstride, wstride)[:height, :width]
        uv = buf[wstride * hstride:wstride * hstride * 3 // 2].reshape(hstride // 2, wstride)
        uv = uv[:height // 2, :width].reshape(height // 2, width // 2, 2)
        first, second = uv[:, :, 0], uv[:, :, 1]
        u, v = (second, first) if fmt is P.PIXEL_FORMAT_YVU_SEMIPLANAR_420 else (first, second)
        u = u.repeat(2, axis=0).repeat(2, axis=1)
        v = v.repeat(2, axis=0).repeat(2, axis=1)
        subsampling = 2
    img = Image.fromarray(np.dstack([y, u, v]).astype(np.uint8), "YCbCr")
    out = io.BytesIO()
    img.save(out, "JPEG", quality=level or 100, subsampling=subsampling)
    return out.getvalue()
