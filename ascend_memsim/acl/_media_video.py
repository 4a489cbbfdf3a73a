"""acl.media's VDEC and VENC calls, one delegation each (see :mod:`ascend_memsim.media.video`).

Names, argument order and return shapes are pyacl's (hicann/runtime
python/pyACL/media/media_vdec.cpp, media_venc.cpp): create calls return the handle (0 on an
error), setters and the channel/frame calls the code, getters the value. DECISION: where
pyacl raises RuntimeError (a send or a callback getter on a channel whose callback was never
set), the face returns ACL_ERROR_INVALID_PARAM (a send) or None (the getter), with the
message kept for ``acl.get_recent_err_msg``, as every other acl.media call does.
"""

from __future__ import annotations

from typing import Any

from ..media.plane import media_plane
from ..media.video import (
    VdecChannelDesc,
    VdecFrameConfig,
    VencChannelDesc,
    VencFrameConfig,
    Video,
)
from ..memory.args import UINT32_MAX, as_int
from ..memory.errors import InvalidArgument
from ..runtime.active import current_runtime
from ._face import face as _face

#: aclvdecChannelDescParamType: the one type pyacl sizes (media_vdec.cpp)
ACL_VDEC_CSC_MATRIX_UINT32 = 0
#: aclvencChannelDescParamType -> the channel description's field (acl_dvpp.h order; 9 to 12
#: as the runtime's enum compatibility test has them); 12 is kept as a param
VENC_PARAMS = {0: "thread_id", 1: "callback", 2: "pic_format", 3: "en_type",
               4: "pic_width", 5: "pic_height", 6: "key_frame_interval", 7: "buf_addr",
               8: "buf_size", 9: "rc_mode", 10: "src_rate", 11: "max_bit_rate"}
ACL_VENC_MAX_IP_PROP_UINT32 = 12


def _video() -> Video:
    return Video(media_plane(current_runtime()))


def _plane():
    return media_plane(current_runtime())


def _setter(cls: type, name: str, field: str):
    @_face()
    def setter(desc: int, value: Any) -> None:
        _plane().set(desc, cls, field, value)
    setter.__name__ = setter.__qualname__ = name
    return setter


def _getter(cls: type, name: str, field: str):
    @_face(0, bare=True)
    def getter(desc: int) -> int:
        return getattr(_plane().get(desc, cls), field)
    getter.__name__ = getter.__qualname__ = name
    return getter


def _made(cls: type, name: str):
    @_face(0, bare=True)
    def create() -> int:
        return _plane().create(cls)
    create.__name__ = create.__qualname__ = name
    return create


def _destroyed(cls: type, name: str):
    @_face()
    def destroy(desc: int) -> None:
        _plane().destroy(desc, cls)
    destroy.__name__ = destroy.__qualname__ = name
    return destroy


_VDEC_FIELDS = {"channel_id": "channel_id", "thread_id": "thread_id", "entype": "en_type",
                "out_pic_format": "out_pic_format", "out_pic_width": "out_pic_width",
                "out_pic_height": "out_pic_height", "ref_frame_num": "ref_frame_num",
                "out_mode": "out_mode", "bit_depth": "bit_depth"}
_VENC_FIELDS = {"thread_id": "thread_id", "entype": "en_type", "pic_format": "pic_format",
                "pic_width": "pic_width", "pic_height": "pic_height",
                "key_frame_interval": "key_frame_interval", "buf_addr": "buf_addr",
                "buf_size": "buf_size", "max_bit_rate": "max_bit_rate", "rc_mode": "rc_mode",
                "src_rate": "src_rate"}

_MADE = [
    _made(VdecChannelDesc, "vdec_create_channel_desc"),
    _destroyed(VdecChannelDesc, "vdec_destroy_channel_desc"),
    _made(VdecFrameConfig, "vdec_create_frame_config"),
    _destroyed(VdecFrameConfig, "vdec_destroy_frame_config"),
    _made(VencChannelDesc, "venc_create_channel_desc"),
    _destroyed(VencChannelDesc, "venc_destroy_channel_desc"),
    _made(VencFrameConfig, "venc_create_frame_config"),
    _destroyed(VencFrameConfig, "venc_destroy_frame_config"),
    *[_setter(VdecChannelDesc, f"vdec_set_channel_desc_{n}", f) for n, f in _VDEC_FIELDS.items()],
    *[_getter(VdecChannelDesc, f"vdec_get_channel_desc_{n}", f) for n, f in _VDEC_FIELDS.items()],
    *[_setter(VencChannelDesc, f"venc_set_channel_desc_{n}", f) for n, f in _VENC_FIELDS.items()],
    *[_getter(VencChannelDesc, f"venc_get_channel_desc_{n}", f)
      for n, f in {**_VENC_FIELDS, "channel_id": "channel_id"}.items()],
    *[_setter(VencFrameConfig, f"venc_set_frame_config_{n}", n) for n in ("force_i_frame", "eos")],
    *[_getter(VencFrameConfig, f"venc_get_frame_config_{n}", n)
      for n in ("force_i_frame", "eos")],
]
globals().update({fn.__name__: fn for fn in _MADE})


@_face()
def vdec_set_channel_desc_callback(channel_desc: int, callback: Any) -> None:
    _video().set_callback(channel_desc, VdecChannelDesc, callback)


@_face(None, bare=True)
def vdec_get_channel_desc_callback(channel_desc: int) -> Any:
    return _video().callback(channel_desc, VdecChannelDesc)


@_face()
def venc_set_channel_desc_callback(channel_desc: int, callback: Any) -> None:
    _video().set_callback(channel_desc, VencChannelDesc, callback)


@_face(None, bare=True)
def venc_get_channel_desc_callback(channel_desc: int) -> Any:
    return _video().callback(channel_desc, VencChannelDesc)


def _vdec_param_type(param_type: object) -> None:
    if as_int(param_type, "param_type", -(1 << 31), (1 << 31) - 1) != ACL_VDEC_CSC_MATRIX_UINT32:
        raise InvalidArgument(f"param type {param_type!r} is not one pyacl sizes "
                              f"(ACL_VDEC_CSC_MATRIX_UINT32 = 0)")


@_face(0)
def vdec_set_channel_desc_param(channel_desc: int, param_type: int, param: int) -> int:
    """pyacl returns ``(channel_desc, ret)``."""
    plane = _plane()
    desc = plane.get(channel_desc, VdecChannelDesc, "channel_desc")
    _vdec_param_type(param_type)
    value = as_int(param, "param", 0, UINT32_MAX)
    with plane.handles.lock:
        desc.params[0] = value
    return desc.handle


@_face(0, 0)
def vdec_get_channel_desc_param(channel_desc: int, param_type: int) -> tuple[int, int]:
    """pyacl returns ``(bytes, value, ret)``: 0 bytes for a value never set."""
    desc = _plane().get(channel_desc, VdecChannelDesc, "channel_desc")
    _vdec_param_type(param_type)
    return (4, desc.params[0]) if 0 in desc.params else (0, 0)


@_face()
def venc_set_channel_desc_param(channel_desc: int, param_type: int, param: Any) -> None:
    plane = _plane()
    plane.get(channel_desc, VencChannelDesc, "channel_desc")
    param_type = as_int(param_type, "param_type", -(1 << 31), (1 << 31) - 1)
    field = VENC_PARAMS.get(param_type)
    if field == "callback":
        _video().set_callback(channel_desc, VencChannelDesc, param)
    elif field is not None:
        plane.set(channel_desc, VencChannelDesc, field, param)
    elif param_type == ACL_VENC_MAX_IP_PROP_UINT32:
        value = as_int(param, "param", 0, UINT32_MAX)
        with plane.handles.lock:
            plane.get(channel_desc, VencChannelDesc).params[param_type] = value
    else:
        raise InvalidArgument(f"param type {param_type!r} is not an aclvencChannelDescParamType")


@_face(0)
def venc_get_channel_desc_param(channel_desc: int, param_type: int) -> Any:
    desc = _plane().get(channel_desc, VencChannelDesc, "channel_desc")
    param_type = as_int(param_type, "param_type", -(1 << 31), (1 << 31) - 1)
    field = VENC_PARAMS.get(param_type)
    if field == "callback":
        return _video().callback(channel_desc, VencChannelDesc)
    if field is not None:
        return getattr(desc, field)
    if param_type == ACL_VENC_MAX_IP_PROP_UINT32:
        return desc.params.get(param_type, 0)
    raise InvalidArgument(f"param type {param_type!r} is not an aclvencChannelDescParamType")


@_face()
def vdec_create_channel(channel_desc: int) -> None:
    _video().vdec_create(channel_desc)


@_face()
def vdec_destroy_channel(channel_desc: int) -> None:
    _video().vdec_destroy(channel_desc)


@_face()
def vdec_send_frame(channel_desc: int, input: int, output: int, config: int,
                    user_data: Any) -> None:
    _video().vdec_send(channel_desc, input, output, config, user_data)


@_face()
def vdec_send_skipped_frame(channel_desc: int, input: int, config: int,
                            user_data: Any) -> None:
    """aclvdecSendSkippedFrame: decoded for reference; the callback gets output 0."""
    _video().vdec_send_skipped(channel_desc, input, config, user_data)


@_face()
def venc_create_channel(channel_desc: int) -> None:
    _video().venc_create(channel_desc)


@_face()
def venc_destroy_channel(channel_desc: int) -> None:
    _video().venc_destroy(channel_desc)


@_face()
def venc_send_frame(channel_desc: int, input: int, reserve: int, config: int,
                    user_data: Any) -> None:
    _video().venc_send(channel_desc, input, reserve, config, user_data)


__all__ = sorted([fn.__name__ for fn in _MADE] + [
    "vdec_set_channel_desc_callback", "vdec_get_channel_desc_callback",
    "venc_set_channel_desc_callback", "venc_get_channel_desc_callback",
    "vdec_set_channel_desc_param", "vdec_get_channel_desc_param",
    "venc_set_channel_desc_param", "venc_get_channel_desc_param",
    "vdec_create_channel", "vdec_destroy_channel", "vdec_send_frame",
    "vdec_send_skipped_frame", "venc_create_channel", "venc_destroy_channel",
    "venc_send_frame"])
