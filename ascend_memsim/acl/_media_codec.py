"""acl.media's JPEG and PNG calls (JPEGD, JPEGE, PNGD), one delegation each.

Names, argument order and return shapes are pyacl's (hicann/runtime
python/pyACL/media/media_jpeg.cpp, media_common.cpp): the info calls return
``width, height, components, ret`` (``_v2`` adds the acldvppJpegFormat before ``ret``), the
predict calls ``size, ret``, the async calls ``ret``. ``dvpp_jpeg_encode_async``'s ``size`` is
the address of a uint32 in host memory, as pyacl passes it (``"k"``: a pointer).
"""

from __future__ import annotations

from ..media.codec import Codecs
from ..media.constants import JpegFormat
from ..media.plane import media_plane
from ..runtime.active import current_runtime
from ._face import face as _face

__all__ = [
    "dvpp_jpeg_get_image_info", "dvpp_jpeg_get_image_info_v2", "dvpp_jpeg_predict_dec_size",
    "dvpp_jpeg_decode_async", "dvpp_jpeg_predict_enc_size", "dvpp_jpeg_encode_async",
    "dvpp_png_get_image_info", "dvpp_png_predict_dec_size", "dvpp_png_decode_async",
]


def _codecs() -> Codecs:
    return Codecs(media_plane(current_runtime()))


@_face(0, 0, 0)
def dvpp_jpeg_get_image_info(data: int, size: int) -> tuple[int, int, int]:
    info = _codecs().jpeg_image_info(data, size)
    return info.width, info.height, info.components


@_face(0, 0, 0, int(JpegFormat.ACL_JPEG_CSS_UNKNOWN))
def dvpp_jpeg_get_image_info_v2(data: int, size: int) -> tuple[int, int, int, int]:
    info = _codecs().jpeg_image_info(data, size)
    return info.width, info.height, info.components, int(info.format)


@_face(0)
def dvpp_jpeg_predict_dec_size(data: int, size: int, output_pixel_format: int) -> int:
    return _codecs().jpeg_predict_dec_size(data, size, output_pixel_format)


@_face()
def dvpp_jpeg_decode_async(channel_desc: int, data: int, size: int, output_desc: int,
                           stream: int) -> None:
    _codecs().jpeg_decode(channel_desc, data, size, output_desc, stream)


@_face(0)
def dvpp_jpeg_predict_enc_size(input_desc: int, config: int) -> int:
    return _codecs().jpeg_predict_enc_size(input_desc, config)


@_face()
def dvpp_jpeg_encode_async(channel_desc: int, input_desc: int, data: int, size: int,
                           config: int, stream: int) -> None:
    _codecs().jpeg_encode(channel_desc, input_desc, data, size, config, stream)


@_face(0, 0, 0)
def dvpp_png_get_image_info(data: int, size: int) -> tuple[int, int, int]:
    info = _codecs().png_image_info(data, size)
    return info.width, info.height, info.components


@_face(0)
def dvpp_png_predict_dec_size(data: int, size: int, output_pixel_format: int) -> int:
    return _codecs().png_predict_dec_size(data, size, output_pixel_format)


@_face()
def dvpp_png_decode_async(channel_desc: int, data: int, size: int, output_desc: int,
                          stream: int) -> None:
    _codecs().png_decode(channel_desc, data, size, output_desc, stream)
