"""acl.media: DVPP memory, descriptions, channels and VPC image processing.

One short delegation per function to the media plane (:mod:`ascend_memsim.media.plane`), with
pyacl's names, argument order and return shapes (hicann/runtime
python/pyACL/media/pymedia_methods.cpp, media_common.cpp, media_vpc.cpp): the calls that make a
description return its handle (0 on an error), destroy and set calls return the code, the
getters return the value (the getter's default on an error, with the message kept for
``acl.get_recent_err_msg``). The acl_dvpp.h enums are exported flat (``PIXEL_FORMAT_*``,
``DVPP_CHNMODE_*``, ``BORDER_*``), which the real module does not do.
"""

from __future__ import annotations

from ..media.constants import MEDIA_FLAT_NAMES
from ..media.descs import (
    BorderConfig,
    ChannelDesc,
    JpegeConfig,
    PicDesc,
    ResizeConfig,
    RoiConfig,
    StreamDesc,
)
from ..media.plane import MediaPlane, media_plane
from ..memory.args import SIZE_MAX
from ..memory.errors import AclError
from ..runtime.active import current_runtime
from ._face import face as _face
from ._face import face_dir as _face_dir
from ._face import remember_error
from ._media_codec import *  # noqa: F403 - the JPEG/PNG calls, listed in _EXPORTS
from ._media_codec import __all__ as _CODEC_NAMES
from ._media_video import *  # noqa: F403 - VDEC/VENC, listed in _VIDEO_NAMES
from ._media_video import __all__ as _VIDEO_NAMES

globals().update(MEDIA_FLAT_NAMES)


def _media() -> MediaPlane:
    """The media plane of the active runtime."""
    return media_plane(current_runtime())


# -- memory (acldvppMalloc / acldvppFree) -------------------------------------------------------

@_face(0)
def dvpp_malloc(size: int) -> int:
    return current_runtime().dvpp_malloc(size)


@_face()
def dvpp_free(dev_ptr: int) -> None:
    current_runtime().dvpp_free(dev_ptr)


# -- channels -------------------------------------------------------------------------------

@_face(0, bare=True)
def dvpp_create_channel_desc() -> int:
    return _media().create(ChannelDesc)


@_face()
def dvpp_destroy_channel_desc(channel_desc: int) -> None:
    _media().destroy(channel_desc, ChannelDesc)


@_face()
def dvpp_create_channel(channel_desc: int) -> None:
    _media().create_channel(channel_desc)


@_face()
def dvpp_destroy_channel(channel_desc: int) -> None:
    _media().destroy_channel(channel_desc)


@_face(0, bare=True)
def dvpp_get_channel_desc_channel_id(channel_desc: int) -> int:
    return _media().get(channel_desc, ChannelDesc).channel_id


@_face()
def dvpp_set_channel_desc_mode(channel_desc: int, mode: int) -> None:
    _media().set_channel_mode(channel_desc, mode)


def dvpp_set_channel_desc_param(channel_desc: int, param_type: int, param: int,
                                /) -> tuple[int, int]:
    """acldvppSetChannelDescParam: ``channel_desc, ret``. pyacl's wrapper
    (media_common.cpp) returns the description it was given whatever the code, so a failed
    call gives it back too (0 for an argument that is no C pointer)."""
    try:
        _media().set_channel_param(channel_desc, param_type, param)
    except AclError as error:
        remember_error(error)
        is_pointer = channel_desc.__class__ is int and 0 <= channel_desc <= SIZE_MAX
        return (channel_desc if is_pointer else 0), int(error.code)
    return channel_desc, 0


@_face(0, 0)
def dvpp_get_channel_desc_param(channel_desc: int, param_type: int) -> tuple[int, int]:
    """acldvppGetChannelDescParam: ``param_ret_size, param, ret``."""
    return _media().channel_param(channel_desc, param_type)


# -- picture descriptions -----------------------------------------------------------------------

@_face(0, bare=True)
def dvpp_create_pic_desc() -> int:
    return _media().create(PicDesc)


@_face()
def dvpp_destroy_pic_desc(pic_desc: int) -> None:
    _media().destroy(pic_desc, PicDesc)


@_face()
def dvpp_set_pic_desc_data(pic_desc: int, data_dev: int) -> None:
    _media().set(pic_desc, PicDesc, "data", data_dev)


@_face()
def dvpp_set_pic_desc_size(pic_desc: int, size: int) -> None:
    _media().set(pic_desc, PicDesc, "size", size)


@_face()
def dvpp_set_pic_desc_format(pic_desc: int, format: int) -> None:
    _media().set(pic_desc, PicDesc, "format", format)


@_face()
def dvpp_set_pic_desc_width(pic_desc: int, width: int) -> None:
    _media().set(pic_desc, PicDesc, "width", width)


@_face()
def dvpp_set_pic_desc_height(pic_desc: int, height: int) -> None:
    _media().set(pic_desc, PicDesc, "height", height)


@_face()
def dvpp_set_pic_desc_width_stride(pic_desc: int, width_stride: int) -> None:
    _media().set(pic_desc, PicDesc, "width_stride", width_stride)


@_face()
def dvpp_set_pic_desc_height_stride(pic_desc: int, height_stride: int) -> None:
    _media().set(pic_desc, PicDesc, "height_stride", height_stride)


@_face()
def dvpp_set_pic_desc_ret_code(pic_desc: int, ret_code: int) -> None:
    _media().set(pic_desc, PicDesc, "ret_code", ret_code)


@_face(0, bare=True)
def dvpp_get_pic_desc_data(pic_desc: int) -> int:
    return _media().get(pic_desc, PicDesc).data


@_face(0, bare=True)
def dvpp_get_pic_desc_size(pic_desc: int) -> int:
    return _media().get(pic_desc, PicDesc).size


@_face(0, bare=True)
def dvpp_get_pic_desc_format(pic_desc: int) -> int:
    return _media().get(pic_desc, PicDesc).format


@_face(0, bare=True)
def dvpp_get_pic_desc_width(pic_desc: int) -> int:
    return _media().get(pic_desc, PicDesc).width


@_face(0, bare=True)
def dvpp_get_pic_desc_height(pic_desc: int) -> int:
    return _media().get(pic_desc, PicDesc).height


@_face(0, bare=True)
def dvpp_get_pic_desc_width_stride(pic_desc: int) -> int:
    return _media().get(pic_desc, PicDesc).width_stride


@_face(0, bare=True)
def dvpp_get_pic_desc_height_stride(pic_desc: int) -> int:
    return _media().get(pic_desc, PicDesc).height_stride


@_face(0, bare=True)
def dvpp_get_pic_desc_ret_code(pic_desc: int) -> int:
    return _media().get(pic_desc, PicDesc).ret_code


# -- batch picture descriptions -----------------------------------------------------------------

@_face(0, bare=True)
def dvpp_create_batch_pic_desc(batch_size: int) -> int:
    return _media().create_batch(batch_size)


@_face()
def dvpp_destroy_batch_pic_desc(batch_pic_desc: int) -> None:
    _media().destroy_batch(batch_pic_desc)


@_face(0, bare=True)
def dvpp_get_pic_desc(batch_pic_desc: int, index: int) -> int:
    return _media().batch_pic(batch_pic_desc, index)


# -- stream descriptions ------------------------------------------------------------------------

@_face(0, bare=True)
def dvpp_create_stream_desc() -> int:
    return _media().create(StreamDesc)


@_face()
def dvpp_destroy_stream_desc(stream_desc: int) -> None:
    _media().destroy(stream_desc, StreamDesc)


@_face()
def dvpp_set_stream_desc_data(stream_desc: int, data_dev: int) -> None:
    _media().set(stream_desc, StreamDesc, "data", data_dev)


@_face()
def dvpp_set_stream_desc_size(stream_desc: int, size: int) -> None:
    _media().set(stream_desc, StreamDesc, "size", size)


@_face()
def dvpp_set_stream_desc_format(stream_desc: int, format: int) -> None:
    _media().set(stream_desc, StreamDesc, "format", format)


@_face()
def dvpp_set_stream_desc_timestamp(stream_desc: int, timestamp: int) -> None:
    _media().set(stream_desc, StreamDesc, "timestamp", timestamp)


@_face()
def dvpp_set_stream_desc_ret_code(stream_desc: int, ret_code: int) -> None:
    _media().set(stream_desc, StreamDesc, "ret_code", ret_code)


@_face()
def dvpp_set_stream_desc_eos(stream_desc: int, eos: int) -> None:
    _media().set(stream_desc, StreamDesc, "eos", eos)


@_face(0, bare=True)
def dvpp_get_stream_desc_data(stream_desc: int) -> int:
    return _media().get(stream_desc, StreamDesc).data


@_face(0, bare=True)
def dvpp_get_stream_desc_size(stream_desc: int) -> int:
    return _media().get(stream_desc, StreamDesc).size


@_face(0, bare=True)
def dvpp_get_stream_desc_format(stream_desc: int) -> int:
    return _media().get(stream_desc, StreamDesc).format


@_face(0, bare=True)
def dvpp_get_stream_desc_timestamp(stream_desc: int) -> int:
    return _media().get(stream_desc, StreamDesc).timestamp


@_face(0, bare=True)
def dvpp_get_stream_desc_ret_code(stream_desc: int) -> int:
    return _media().get(stream_desc, StreamDesc).ret_code


@_face(0, bare=True)
def dvpp_get_stream_desc_eos(stream_desc: int) -> int:
    return _media().get(stream_desc, StreamDesc).eos


# -- ROI, resize, JPEG encoder and border configs -------------------------------------------

@_face(0, bare=True)
def dvpp_create_roi_config(left: int, right: int, top: int, bottom: int) -> int:
    return _media().create(RoiConfig, left=left, right=right, top=top, bottom=bottom)


@_face()
def dvpp_destroy_roi_config(roi_config: int) -> None:
    _media().destroy(roi_config, RoiConfig)


@_face()
def dvpp_set_roi_config(config: int, left: int, right: int, top: int, bottom: int) -> None:
    _media().set_roi(config, left, right, top, bottom)


@_face()
def dvpp_set_roi_config_left(config: int, left: int) -> None:
    _media().set(config, RoiConfig, "left", left)


@_face()
def dvpp_set_roi_config_right(config: int, right: int) -> None:
    _media().set(config, RoiConfig, "right", right)


@_face()
def dvpp_set_roi_config_top(config: int, top: int) -> None:
    _media().set(config, RoiConfig, "top", top)


@_face()
def dvpp_set_roi_config_bottom(config: int, bottom: int) -> None:
    _media().set(config, RoiConfig, "bottom", bottom)


@_face(0, bare=True)
def dvpp_create_resize_config() -> int:
    return _media().create(ResizeConfig)


@_face()
def dvpp_destroy_resize_config(resize_config: int) -> None:
    _media().destroy(resize_config, ResizeConfig)


@_face()
def dvpp_set_resize_config_interpolation(resize_config: int, interpolation: int) -> None:
    _media().set(resize_config, ResizeConfig, "interpolation", interpolation)


@_face(0, bare=True)
def dvpp_get_resize_config_interpolation(resize_config: int) -> int:
    return _media().get(resize_config, ResizeConfig).interpolation


@_face(0, bare=True)
def dvpp_create_jpege_config() -> int:
    return _media().create(JpegeConfig)


@_face()
def dvpp_destroy_jpege_config(jpege_config: int) -> None:
    _media().destroy(jpege_config, JpegeConfig)


@_face()
def dvpp_set_jpege_config_level(jpege_config: int, level: int) -> None:
    _media().set(jpege_config, JpegeConfig, "level", level)


@_face(0, bare=True)
def dvpp_get_jpege_config_level(jpege_config: int) -> int:
    return _media().get(jpege_config, JpegeConfig).level


@_face(0, bare=True)
def dvpp_create_border_config() -> int:
    return _media().create(BorderConfig)


@_face()
def dvpp_destroy_border_config(border_config: int) -> None:
    _media().destroy(border_config, BorderConfig)


@_face()
def dvpp_set_border_config_value(border_config: int, index: int, value: float) -> None:
    _media().set_border_value(border_config, index, value)


@_face()
def dvpp_set_border_config_border_type(border_config: int, border_type: int) -> None:
    _media().set(border_config, BorderConfig, "border_type", border_type)


@_face()
def dvpp_set_border_config_top(border_config: int, top: int) -> None:
    _media().set(border_config, BorderConfig, "top", top)


@_face()
def dvpp_set_border_config_bottom(border_config: int, bottom: int) -> None:
    _media().set(border_config, BorderConfig, "bottom", bottom)


@_face()
def dvpp_set_border_config_left(border_config: int, left: int) -> None:
    _media().set(border_config, BorderConfig, "left", left)


@_face()
def dvpp_set_border_config_right(border_config: int, right: int) -> None:
    _media().set(border_config, BorderConfig, "right", right)


@_face(-1.0, bare=True)
def dvpp_get_border_config_value(border_config: int, index: int) -> float:
    """acldvppGetBorderConfigValue: -1.0 on an error (acl_dvpp.h: < 0 is invalid)."""
    return _media().border_value(border_config, index)


@_face(0, bare=True)
def dvpp_get_border_config_border_type(border_config: int) -> int:
    return _media().get(border_config, BorderConfig).border_type


@_face(0, bare=True)
def dvpp_get_border_config_top(border_config: int) -> int:
    return _media().get(border_config, BorderConfig).top


@_face(0, bare=True)
def dvpp_get_border_config_bottom(border_config: int) -> int:
    return _media().get(border_config, BorderConfig).bottom


@_face(0, bare=True)
def dvpp_get_border_config_left(border_config: int) -> int:
    return _media().get(border_config, BorderConfig).left


@_face(0, bare=True)
def dvpp_get_border_config_right(border_config: int) -> int:
    return _media().get(border_config, BorderConfig).right


# -- VPC (python/pyACL/media/media_vpc.cpp; every description and stream a "k" int, the
# lists Python lists; 0 is NULL, which a call that needs the object refuses) --------------------

@_face()
def dvpp_vpc_resize_async(channel_desc: int, input_desc: int, output_desc: int,
                          resize_config: int, stream: int) -> None:
    _media().vpc("acldvppVpcResizeAsync", channel_desc, input_desc, output_desc,
                 resize_config=resize_config, stream=stream)


@_face()
def dvpp_vpc_crop_async(channel_desc: int, input_desc: int, output_desc: int, crop_area: int,
                        stream: int) -> None:
    _media().vpc("acldvppVpcCropAsync", channel_desc, input_desc, output_desc, crop_area,
                 stream=stream)


@_face()
def dvpp_vpc_crop_resize_async(channel_desc: int, input_desc: int, output_desc: int,
                               crop_area: int, resize_config: int, stream: int) -> None:
    _media().vpc("acldvppVpcCropResizeAsync", channel_desc, input_desc, output_desc,
                 crop_area, resize_config=resize_config, stream=stream)


@_face()
def dvpp_vpc_crop_and_paste_async(channel_desc: int, input_desc: int, output_desc: int,
                                  crop_area: int, paste_area: int, stream: int) -> None:
    _media().vpc("acldvppVpcCropAndPasteAsync", channel_desc, input_desc, output_desc,
                 crop_area, paste_area, stream=stream)


@_face()
def dvpp_vpc_crop_resize_paste_async(channel_desc: int, input_desc: int, output_desc: int,
                                     crop_area: int, paste_area: int, resize_config: int,
                                     stream: int) -> None:
    _media().vpc("acldvppVpcCropResizePasteAsync", channel_desc, input_desc, output_desc,
                 crop_area, paste_area, resize_config, stream)


@_face(0)
def dvpp_vpc_batch_crop_async(channel_desc: int, src_batch_pic_descs: int, roi_nums: list,
                              dst_batch_pic_descs: int, crop_areas: list, stream: int) -> int:
    """acldvppVpcBatchCropAsync: ``dst_batch_pic_descs, ret``."""
    _media().batch("acldvppVpcBatchCropAsync", channel_desc, src_batch_pic_descs, roi_nums,
                   dst_batch_pic_descs, crop_areas, stream=stream)
    return dst_batch_pic_descs


@_face(0)
def dvpp_vpc_batch_crop_and_paste_async(channel_desc: int, src_batch_pic_descs: int,
                                        roi_nums: list, dst_batch_pic_descs: int,
                                        crop_areas: list, paste_areas: list,
                                        stream: int) -> int:
    """acldvppVpcBatchCropAndPasteAsync: ``dst_batch_pic_descs, ret``."""
    _media().batch("acldvppVpcBatchCropAndPasteAsync", channel_desc, src_batch_pic_descs,
                   roi_nums, dst_batch_pic_descs, crop_areas, paste_areas, stream=stream)
    return dst_batch_pic_descs


@_face()
def dvpp_vpc_batch_crop_resize_async(channel_desc: int, src_batch_pic_descs: int,
                                     roi_nums: list, dst_batch_pic_descs: int,
                                     crop_areas: list, resize_config: int,
                                     stream: int) -> None:
    _media().batch("acldvppVpcBatchCropResizeAsync", channel_desc, src_batch_pic_descs,
                   roi_nums, dst_batch_pic_descs, crop_areas, resize_config=resize_config,
                   stream=stream)


@_face()
def dvpp_vpc_batch_crop_resize_paste_async(channel_desc: int, src_batch_pic_descs: int,
                                           roi_nums: list, dst_batch_pic_descs: int,
                                           crop_areas: list, paste_areas: list,
                                           resize_config: int, stream: int) -> None:
    _media().batch("acldvppVpcBatchCropResizePasteAsync", channel_desc, src_batch_pic_descs,
                   roi_nums, dst_batch_pic_descs, crop_areas, paste_areas,
                   resize_config=resize_config, stream=stream)


@_face()
def dvpp_vpc_batch_crop_resize_make_border_async(channel_desc: int, src_batch_pic_descs: int,
                                                 roi_nums: list, dst_batch_pic_descs: int,
                                                 crop_areas: list, border_cfgs: list,
                                                 resize_config: int, stream: int) -> None:
    _media().batch("acldvppVpcBatchCropResizeMakeBorderAsync", channel_desc,
                   src_batch_pic_descs, roi_nums, dst_batch_pic_descs, crop_areas,
                   borders=border_cfgs, resize_config=resize_config, stream=stream)


@_face()
def dvpp_vpc_make_border_async(channel_desc: int, input_desc: int, output_desc: int,
                               border_config: int, stream: int) -> None:
    _media().make_border(channel_desc, input_desc, output_desc, border_config, stream)


@_face()
def dvpp_vpc_convert_color_async(channel_desc: int, input_desc: int, output_desc: int,
                                 stream: int) -> None:
    _media().convert_color(channel_desc, input_desc, output_desc, stream)


@_face()
def dvpp_vpc_pyr_down_async(channel_desc: int, input_desc: int, output_desc: int,
                            reserve: int, stream: int) -> None:
    _media().pyr_down(channel_desc, input_desc, output_desc, reserve, stream)


_EXPORTS = (
    dvpp_malloc, dvpp_free,
    dvpp_create_channel_desc, dvpp_destroy_channel_desc, dvpp_create_channel,
    dvpp_destroy_channel, dvpp_get_channel_desc_channel_id, dvpp_set_channel_desc_mode,
    dvpp_set_channel_desc_param, dvpp_get_channel_desc_param,
    dvpp_create_pic_desc, dvpp_destroy_pic_desc, dvpp_set_pic_desc_data,
    dvpp_set_pic_desc_size, dvpp_set_pic_desc_format, dvpp_set_pic_desc_width,
    dvpp_set_pic_desc_height, dvpp_set_pic_desc_width_stride, dvpp_set_pic_desc_height_stride,
    dvpp_set_pic_desc_ret_code, dvpp_get_pic_desc_data, dvpp_get_pic_desc_size,
    dvpp_get_pic_desc_format, dvpp_get_pic_desc_width, dvpp_get_pic_desc_height,
    dvpp_get_pic_desc_width_stride, dvpp_get_pic_desc_height_stride,
    dvpp_get_pic_desc_ret_code,
    dvpp_create_batch_pic_desc, dvpp_destroy_batch_pic_desc, dvpp_get_pic_desc,
    dvpp_create_stream_desc, dvpp_destroy_stream_desc, dvpp_set_stream_desc_data,
    dvpp_set_stream_desc_size, dvpp_set_stream_desc_format, dvpp_set_stream_desc_timestamp,
    dvpp_set_stream_desc_ret_code, dvpp_set_stream_desc_eos, dvpp_get_stream_desc_data,
    dvpp_get_stream_desc_size, dvpp_get_stream_desc_format, dvpp_get_stream_desc_timestamp,
    dvpp_get_stream_desc_ret_code, dvpp_get_stream_desc_eos,
    dvpp_create_roi_config, dvpp_destroy_roi_config, dvpp_set_roi_config,
    dvpp_set_roi_config_left, dvpp_set_roi_config_right, dvpp_set_roi_config_top,
    dvpp_set_roi_config_bottom,
    dvpp_create_resize_config, dvpp_destroy_resize_config,
    dvpp_set_resize_config_interpolation, dvpp_get_resize_config_interpolation,
    dvpp_create_jpege_config, dvpp_destroy_jpege_config, dvpp_set_jpege_config_level,
    dvpp_get_jpege_config_level,
    dvpp_create_border_config, dvpp_destroy_border_config, dvpp_set_border_config_value,
    dvpp_set_border_config_border_type, dvpp_set_border_config_top,
    dvpp_set_border_config_bottom, dvpp_set_border_config_left, dvpp_set_border_config_right,
    dvpp_get_border_config_value, dvpp_get_border_config_border_type,
    dvpp_get_border_config_top, dvpp_get_border_config_bottom, dvpp_get_border_config_left,
    dvpp_get_border_config_right,
    dvpp_vpc_resize_async, dvpp_vpc_crop_async, dvpp_vpc_crop_resize_async,
    dvpp_vpc_crop_and_paste_async, dvpp_vpc_crop_resize_paste_async,
    dvpp_vpc_batch_crop_async, dvpp_vpc_batch_crop_and_paste_async,
    dvpp_vpc_batch_crop_resize_async, dvpp_vpc_batch_crop_resize_paste_async,
    dvpp_vpc_batch_crop_resize_make_border_async, dvpp_vpc_make_border_async,
    dvpp_vpc_convert_color_async, dvpp_vpc_pyr_down_async,
)
__all__ = ([fn.__name__ for fn in _EXPORTS] + list(_CODEC_NAMES) + list(_VIDEO_NAMES)
           + list(MEDIA_FLAT_NAMES))

__dir__ = _face_dir(globals())
