"""The DVPP enums of ``acl/ops/acl_dvpp.h`` (``acldvppPixelFormat``, ``acldvppChannelMode``,
``acldvppBorderType``, ``acldvppStreamFormat``, ``acldvppJpegFormat``).

pyacl exposes none of them (the vendor's Python samples write the ints, e.g.
``PIXEL_FORMAT_YUV_SEMIPLANAR_420 = 1``); ``acl.media`` here exports them flat, as ``acl``
exports the runtime's constants.
"""

from __future__ import annotations

from enum import IntEnum

__all__ = ["PixelFormat", "ChannelMode", "BorderType", "StreamFormat", "JpegFormat",
           "ChannelDescParam", "MEDIA_FLAT_NAMES", "CHANNEL_MODE_ALL"]


class PixelFormat(IntEnum):
    """acldvppPixelFormat (acl_dvpp.h): every value the header names."""

    PIXEL_FORMAT_YUV_400 = 0
    PIXEL_FORMAT_YUV_SEMIPLANAR_420 = 1
    PIXEL_FORMAT_YVU_SEMIPLANAR_420 = 2
    PIXEL_FORMAT_YUV_SEMIPLANAR_422 = 3
    PIXEL_FORMAT_YVU_SEMIPLANAR_422 = 4
    PIXEL_FORMAT_YUV_SEMIPLANAR_444 = 5
    PIXEL_FORMAT_YVU_SEMIPLANAR_444 = 6
    PIXEL_FORMAT_YUYV_PACKED_422 = 7
    PIXEL_FORMAT_UYVY_PACKED_422 = 8
    PIXEL_FORMAT_YVYU_PACKED_422 = 9
    PIXEL_FORMAT_VYUY_PACKED_422 = 10
    PIXEL_FORMAT_YUV_PACKED_444 = 11
    PIXEL_FORMAT_RGB_888 = 12
    PIXEL_FORMAT_BGR_888 = 13
    PIXEL_FORMAT_ARGB_8888 = 14
    PIXEL_FORMAT_ABGR_8888 = 15
    PIXEL_FORMAT_RGBA_8888 = 16
    PIXEL_FORMAT_BGRA_8888 = 17
    PIXEL_FORMAT_YUV_SEMI_PLANNER_420_10BIT = 18
    PIXEL_FORMAT_YVU_SEMI_PLANNER_420_10BIT = 19
    PIXEL_FORMAT_YVU_PLANAR_420 = 20
    PIXEL_FORMAT_YVU_PLANAR_422 = 21
    PIXEL_FORMAT_YVU_PLANAR_444 = 22
    PIXEL_FORMAT_RGB_444 = 23
    PIXEL_FORMAT_BGR_444 = 24
    PIXEL_FORMAT_ARGB_4444 = 25
    PIXEL_FORMAT_ABGR_4444 = 26
    PIXEL_FORMAT_RGBA_4444 = 27
    PIXEL_FORMAT_BGRA_4444 = 28
    PIXEL_FORMAT_RGB_555 = 29
    PIXEL_FORMAT_BGR_555 = 30
    PIXEL_FORMAT_RGB_565 = 31
    PIXEL_FORMAT_BGR_565 = 32
    PIXEL_FORMAT_ARGB_1555 = 33
    PIXEL_FORMAT_ABGR_1555 = 34
    PIXEL_FORMAT_RGBA_1555 = 35
    PIXEL_FORMAT_BGRA_1555 = 36
    PIXEL_FORMAT_ARGB_8565 = 37
    PIXEL_FORMAT_ABGR_8565 = 38
    PIXEL_FORMAT_RGBA_8565 = 39
    PIXEL_FORMAT_BGRA_8565 = 40
    PIXEL_FORMAT_RGB_BAYER_8BPP = 50
    PIXEL_FORMAT_RGB_BAYER_10BPP = 51
    PIXEL_FORMAT_RGB_BAYER_12BPP = 52
    PIXEL_FORMAT_RGB_BAYER_14BPP = 53
    PIXEL_FORMAT_RGB_BAYER_16BPP = 54
    PIXEL_FORMAT_BGR_888_PLANAR = 70
    PIXEL_FORMAT_HSV_888_PACKAGE = 71
    PIXEL_FORMAT_HSV_888_PLANAR = 72
    PIXEL_FORMAT_LAB_888_PACKAGE = 73
    PIXEL_FORMAT_LAB_888_PLANAR = 74
    PIXEL_FORMAT_S8C1 = 75
    PIXEL_FORMAT_S8C2_PACKAGE = 76
    PIXEL_FORMAT_S8C2_PLANAR = 77
    PIXEL_FORMAT_S16C1 = 78
    PIXEL_FORMAT_U8C1 = 79
    PIXEL_FORMAT_U16C1 = 80
    PIXEL_FORMAT_S32C1 = 81
    PIXEL_FORMAT_U32C1 = 82
    PIXEL_FORMAT_U64C1 = 83
    PIXEL_FORMAT_S64C1 = 84
    PIXEL_FORMAT_YUV_SEMIPLANAR_440 = 1000
    PIXEL_FORMAT_YVU_SEMIPLANAR_440 = 1001
    PIXEL_FORMAT_FLOAT32 = 1002
    PIXEL_FORMAT_BUTT = 1003
    PIXEL_FORMAT_UNKNOWN = 10000


class ChannelMode(IntEnum):
    """acldvppChannelMode: the bits of ``acldvppSetChannelDescMode`` (PNGD: the pyACL
    docs' ``DVPP_CHNMODE_PNGD``)."""

    DVPP_CHNMODE_VPC = 1
    DVPP_CHNMODE_JPEGD = 2
    DVPP_CHNMODE_JPEGE = 4
    DVPP_CHNMODE_PNGD = 8


#: A channel description whose mode was never set serves every mode (DECISION: the vendor's
#: samples that never call acldvppSetChannelDescMode use one channel for VPC and JPEGD).
CHANNEL_MODE_ALL = 0


class BorderType(IntEnum):
    """acldvppBorderType."""

    BORDER_CONSTANT = 0
    BORDER_REPLICATE = 1
    BORDER_REFLECT = 2
    BORDER_REFLECT_101 = 3


class StreamFormat(IntEnum):
    """acldvppStreamFormat (the video stream's coding)."""

    H265_MAIN_LEVEL = 0
    H264_BASELINE_LEVEL = 1
    H264_MAIN_LEVEL = 2
    H264_HIGH_LEVEL = 3


class JpegFormat(IntEnum):
    """acldvppJpegFormat (acldvppJpegGetImageInfoV2's format)."""

    ACL_JPEG_CSS_444 = 0
    ACL_JPEG_CSS_422 = 1
    ACL_JPEG_CSS_420 = 2
    ACL_JPEG_CSS_GRAY = 3
    ACL_JPEG_CSS_440 = 4
    ACL_JPEG_CSS_411 = 5
    ACL_JPEG_CSS_UNKNOWN = 1000


class ChannelDescParam(IntEnum):
    """acldvppChannelDescParamType: the one type pyacl's
    ``WrapAclDvppSetChannelDescParam`` (python/pyACL/media/media_common.cpp) gives a length
    (``sizeof(uint32_t)``). DECISION: its value is 0, the enum's first."""

    ACL_DVPP_CSC_MATRIX_UINT32 = 0


def _flat() -> dict[str, int]:
    names: dict[str, int] = {}
    for enum in (PixelFormat, ChannelMode, BorderType, StreamFormat, JpegFormat,
                 ChannelDescParam):
        names.update({m.name: int(m) for m in enum})
    return names


#: Every name above as a plain int, exported flat by ``acl.media``.
MEDIA_FLAT_NAMES: dict[str, int] = _flat()
