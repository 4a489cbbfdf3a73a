"""PNGD: the PNG header, the decoder's memory rules, and the pixels.

Sources: the vendor's acl library, ``ImageProcessorV100::GetPngImgInfo``,
``acldvppPngPredictDecSize`` and ``acldvppPngDecodeAsync`` (image_processor_v100.cpp); the
pyACL DVPP chapter "PNGD 功能及约束说明" (aclpythondevg_01_0405): 32 x 32 to 4096 x 4096,
RGB888 from any source, RGBA8888 from sources with alpha, width stride = width aligned to
128 times 3 (RGB888) or 4 (RGBA8888), height stride = height aligned to 16.

The header is the fixed 33 bytes after the signature, read as the vendor's GetPngImgInfo
reads them; Pillow decodes the pixels only after the header said the image is at most 4096 x
4096, so a hostile file costs at most that picture's memory.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import cast

from ..memory.errors import FormatNotMatch, InvalidArgument, UnreadableImage
from .constants import PixelFormat
from .jpeg import Layout, require_pillow

__all__ = ["PngHeader", "read_header", "pngd_layout", "predict_dec_size", "decode",
           "PNGD_MIN", "PNGD_MAX", "PNGD_FORMATS", "check_format"]

P = PixelFormat
#: image_processor_v100.cpp acldvppPngPredictDecSize: "param according dvpp capability"
PNGD_MIN, PNGD_MAX = 32, 4096
#: the same function: a prediction above 4096 x 4096 x 4 x 2 bytes is refused
_MAX_OUTPUT = 4096 * 4096 * 4 * 2
_SIGNATURE = b"\x89PNG\r\n\x1a\n"
#: GetPngImgInfo: colour type -> components (0 gray, 4 gray + alpha, 2 RGB, 6 RGBA); the
#: others (3, palette) are ACL_ERROR_FORMAT_NOT_MATCH
_COMPONENTS = {0: 1, 4: 2, 2: 3, 6: 4}
PNGD_FORMATS = frozenset({P.PIXEL_FORMAT_RGB_888, P.PIXEL_FORMAT_RGBA_8888,
                          P.PIXEL_FORMAT_UNKNOWN})


@dataclass(frozen=True, slots=True)
class PngHeader:
    """What acldvppPngGetImageInfo reads: size, components, bit depth."""

    width: int
    height: int
    components: int
    bit_depth: int

    @property
    def alpha(self) -> bool:
        return self.components in (2, 4)


def read_header(data: bytes, call: str = "acldvppPngGetImageInfo") -> PngHeader:
    """The PNG header, as the vendor's GetPngImgInfo reads it (bytes 16-25 of the file).

    Raises:
        InvalidArgument: 29 bytes or fewer, or no PNG signature.
        FormatNotMatch: a colour type other than gray, gray + alpha, RGB, RGBA (palette).
    """
    if len(data) <= 29:
        raise InvalidArgument(f"{call}: {len(data)} bytes is too small for a PNG (it must be "
                              f"larger than 29)")
    if data[:8] != _SIGNATURE:
        raise InvalidArgument(f"{call}: the data does not start with the PNG signature")
    width = int.from_bytes(data[16:20], "big")
    height = int.from_bytes(data[20:24], "big")
    components = _COMPONENTS.get(data[25])
    if components is None:
        raise FormatNotMatch(f"{call}: PNG colour type {data[25]} is not one PNGD takes "
                             f"(0 gray, 2 RGB, 4 gray + alpha, 6 RGBA; 3, palette, is not)")
    return PngHeader(width, height, components, data[24])


def _check(header: PngHeader, call: str) -> None:
    if not (PNGD_MIN <= header.width <= PNGD_MAX and PNGD_MIN <= header.height <= PNGD_MAX):
        raise InvalidArgument(f"{call}: the PNG is {header.width} x {header.height}; PNGD "
                              f"takes {PNGD_MIN} x {PNGD_MIN} to {PNGD_MAX} x {PNGD_MAX}")


def check_format(value: int, call: str) -> PixelFormat:
    if value not in PNGD_FORMATS:
        raise FormatNotMatch(f"{call}: output format {value} is not one PNGD takes "
                             f"(PIXEL_FORMAT_RGB_888 12, PIXEL_FORMAT_RGBA_8888 16, "
                             f"PIXEL_FORMAT_UNKNOWN 10000)")
    return PixelFormat(value)


def predict_dec_size(data: bytes, out_format: int) -> int:
    """acldvppPngPredictDecSize: align(width, 128) x bit depth x 3 (RGB888) or x 4 (RGBA8888
    and UNKNOWN) / 8, times the height aligned to 16 (image_processor_v100.cpp).

    Raises:
        FormatNotMatch, InvalidArgument: see :func:`read_header`; outside 32..4096.
    """
    call = "acldvppPngPredictDecSize"
    fmt = check_format(out_format, call)
    header = read_header(data, call)
    _check(header, call)
    width = -(-header.width // 128) * 128
    height = -(-header.height // 16) * 16
    channels = 3 if fmt is P.PIXEL_FORMAT_RGB_888 else 4
    size = (width * header.bit_depth * channels + 7) // 8 * height
    if not 0 < size <= _MAX_OUTPUT:
        raise InvalidArgument(f"{call}: the predicted {size} bytes are outside (0, "
                              f"{_MAX_OUTPUT}] (bit depth {header.bit_depth})")
    return size


def pngd_layout(header: PngHeader, out_format: int, call: str = "acldvppPngDecodeAsync",
                width_stride: int = 0, height_stride: int = 0) -> Layout:
    """Where PNGD puts the picture (PNGD chapter table 1). DECISION: 8 bits per channel
    whatever the source depth (RGB888 / RGBA8888 are 8-bit formats); the prediction still
    doubles for 16-bit sources, as the vendor's does. Strides set on the output description
    are used when they hold the chapter's (whole pixels, height a multiple of 16: DECISION,
    as for JPEGD), refused when they do not; 0 means PNGD's own.

    Raises:
        FormatNotMatch: not RGB888/RGBA8888/UNKNOWN, or RGBA8888 from a source without alpha.
        InvalidArgument: outside 32..4096.
    """
    fmt = check_format(out_format, call)
    _check(header, call)
    if fmt is P.PIXEL_FORMAT_UNKNOWN:
        fmt = P.PIXEL_FORMAT_RGBA_8888 if header.alpha else P.PIXEL_FORMAT_RGB_888
    if fmt is P.PIXEL_FORMAT_RGBA_8888 and not header.alpha:
        raise FormatNotMatch(f"{call}: RGBA8888 output needs a source with alpha (RGBA or "
                             f"gray + alpha); this PNG has {header.components} components")
    channels = 4 if fmt is P.PIXEL_FORMAT_RGBA_8888 else 3
    wstride = -(-header.width // 128) * 128 * channels
    hstride = -(-header.height // 16) * 16
    if width_stride and (width_stride < wstride or width_stride % channels):
        raise InvalidArgument(f"{call}: the output width stride {width_stride} must be whole "
                              f"{channels}-byte pixels and at least {wstride} (the width "
                              f"aligned to 128, x {channels}; PNGD chapter)")
    if height_stride and (height_stride < hstride or height_stride % 16):
        raise InvalidArgument(f"{call}: the output height stride {height_stride} must be a "
                              f"multiple of 16 and at least {hstride} (PNGD chapter)")
    wstride, hstride = width_stride or wstride, height_stride or hstride
    return Layout(fmt, header.width, header.height, wstride, hstride, wstride * hstride)


def decode(data: bytes, layout: Layout) -> bytes:
    """The picture in ``layout`` (padding 0) as bytes.

    Raises:
        UnreadableImage: Pillow cannot decode the data (corrupt, truncated), or it is not
            the size its header said.
    """
    Image = require_pillow()
    from ..compute.tensors import require_numpy
    np = require_numpy()
    mode = "RGBA" if layout.format is P.PIXEL_FORMAT_RGBA_8888 else "RGB"
    try:
        with Image.open(io.BytesIO(data), formats=("PNG",)) as img:
            if img.size != (layout.width, layout.height):
                raise ValueError(f"the image is {img.size}, its header said "
                                 f"{(layout.width, layout.height)}")
            # Pillow's PNG decoder is third-party code reading hostile bytes: what it raises
            # is the image's fault, not the simulator's
            pixels = np.asarray(img.convert(mode))
    except Exception as error:
        raise UnreadableImage(f"acldvppPngDecodeAsync: the PNG cannot be decoded: "
                              f"{type(error).__name__}: {error}") from None
    out = np.zeros(layout.size, np.uint8)
    rows = out.reshape(layout.height_stride, layout.width_stride)
    channels = pixels.shape[2]
    rows[:layout.height, :layout.width * channels] = pixels.reshape(layout.height, -1)
    return cast("bytes", out.tobytes())
