"""The DVPP descriptions and configs of acl.media, as handles of the media plane.

pyacl hands each out as an int (``acl.media.dvpp_create_pic_desc()`` returns the
acldvppPicDesc pointer: ``Py_BuildValue("k", ...)`` in hicann/runtime
python/pyACL/media/media_common.cpp). Here each is an object in the media plane's
:class:`~ascend_memsim.compute.tensors.HandleTable` (numbered from :data:`MEDIA_HANDLE_BASE`,
so a compute handle given to a media call is unknown, as a media handle given to a compute
call is). DECISION: a destroyed, unknown or other-kind handle is ACL_ERROR_RT_INVALID_HANDLE
(107017), as for the compute plane's handles; the C library would read freed memory.

Every field a setter writes has the C parameter's range (:attr:`Desc.FIELDS`): the setters
check the handle and the range only; what the values must be (formats, strides, sizes,
areas) is checked by the call that uses the description (:mod:`.rules`), as the vendor's
library does when the task is submitted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from ..compute.tensors import Handle
from ..memory.args import SIZE_MAX, UINT32_MAX

__all__ = [
    "MEDIA_HANDLE_BASE", "Desc", "PicDesc", "BatchPicDesc", "ChannelDesc", "StreamDesc",
    "RoiConfig", "ResizeConfig", "JpegeConfig", "BorderConfig", "INT32", "UINT8", "UINT64",
    "U32", "BATCH_MAX",
]

#: Media handles are ints from here, 64 apart (compute handles: 0x3_0000_0000).
MEDIA_HANDLE_BASE = 0x4_0000_0000

INT32 = (-(1 << 31), (1 << 31) - 1)
U32 = (0, UINT32_MAX)
UINT8 = (0, 0xFF)
UINT64 = (0, SIZE_MAX)

#: DECISION: acldvppCreateBatchPicDesc takes 1 to 256 pictures (pyacl's batch VPC wrappers
#: take at most 256 crop areas: ``MAX_CROP_SIZE`` in python/pyACL/media/media_vpc.cpp);
#: another size makes no description (NULL, 0 in Python).
BATCH_MAX = 256


@dataclass(eq=False)
class Desc(Handle):
    """What every media handle has: the C range of each field its setters write."""

    #: field name -> (lo, hi) of the setter's C parameter
    FIELDS: ClassVar[dict[str, tuple[int, int]]] = {}


@dataclass(eq=False)
class PicDesc(Desc):
    """acldvppPicDesc: a picture in device memory (address, bytes, format, size, strides).

    Defaults are the getters' documented defaults (acl_dvpp.h: data NULL, size 0, format
    PIXEL_FORMAT_YUV_400, width/height/strides 0, ret code 0).
    """

    data: int = 0
    size: int = 0
    format: int = 0
    width: int = 0
    height: int = 0
    width_stride: int = 0
    height_stride: int = 0
    ret_code: int = 0
    #: the batch description this one belongs to (0: made by acldvppCreatePicDesc)
    batch: int = 0
    FIELDS: ClassVar[dict[str, tuple[int, int]]] = {
        "data": UINT64, "size": U32, "format": INT32, "width": U32, "height": U32,
        "width_stride": U32, "height_stride": U32, "ret_code": U32,
    }
    made_by = "acldvppCreatePicDesc"
    destroyed_by = "acldvppDestroyPicDesc"
    kind = "picture description"


@dataclass(eq=False)
class BatchPicDesc(Desc):
    """acldvppBatchPicDesc: ``batch_size`` picture descriptions, each a handle of its own
    (``acl.media.dvpp_get_pic_desc(batch, i)``), destroyed with the batch."""

    pics: tuple[PicDesc, ...] = ()
    made_by = "acldvppCreateBatchPicDesc"
    destroyed_by = "acldvppDestroyBatchPicDesc"
    kind = "batch picture description"


@dataclass(eq=False)
class ChannelDesc(Desc):
    """acldvppChannelDesc: the mode bits, and the channel acldvppCreateChannel opened."""

    mode: int = 0
    channel_id: int = 0
    #: True between acldvppCreateChannel and acldvppDestroyChannel
    open: bool = False
    #: acldvppSetChannelDescParam's values, by acldvppChannelDescParamType
    params: dict[int, int] = field(default_factory=dict)
    FIELDS: ClassVar[dict[str, tuple[int, int]]] = {"mode": U32}
    made_by = "acldvppCreateChannelDesc"
    destroyed_by = "acldvppDestroyChannelDesc"
    kind = "channel description"


@dataclass(eq=False)
class StreamDesc(Desc):
    """acldvppStreamDesc: a coded stream (JPEG/PNG/H.26x bytes) in device memory."""

    data: int = 0
    size: int = 0
    format: int = 0
    timestamp: int = 0
    ret_code: int = 0
    eos: int = 0
    FIELDS: ClassVar[dict[str, tuple[int, int]]] = {
        "data": UINT64, "size": U32, "format": INT32, "timestamp": UINT64,
        "ret_code": U32, "eos": UINT8,
    }
    made_by = "acldvppCreateStreamDesc"
    destroyed_by = "acldvppDestroyStreamDesc"
    kind = "stream description"


@dataclass(eq=False)
class RoiConfig(Desc):
    """acldvppRoiConfig: a region by its inclusive edges (acl_dvpp.h: left and top even,
    right and bottom odd; checked where the region is used)."""

    left: int = 0
    right: int = 0
    top: int = 0
    bottom: int = 0
    FIELDS: ClassVar[dict[str, tuple[int, int]]] = {
        "left": U32, "right": U32, "top": U32, "bottom": U32}
    made_by = "acldvppCreateRoiConfig"
    destroyed_by = "acldvppDestroyRoiConfig"
    kind = "roi config"

    @property
    def width(self) -> int:
        return self.right - self.left + 1

    @property
    def height(self) -> int:
        return self.bottom - self.top + 1

    def describe_area(self) -> str:
        return (f"(left {self.left}, right {self.right}, top {self.top}, "
                f"bottom {self.bottom})")


@dataclass(eq=False)
class ResizeConfig(Desc):
    """acldvppResizeConfig: the interpolation (0, the default, is the product's default)."""

    interpolation: int = 0
    FIELDS: ClassVar[dict[str, tuple[int, int]]] = {"interpolation": U32}
    made_by = "acldvppCreateResizeConfig"
    destroyed_by = "acldvppDestroyResizeConfig"
    kind = "resize config"


@dataclass(eq=False)
class JpegeConfig(Desc):
    """acldvppJpegeConfig: the JPEG encoder's level (acl_dvpp.h: [0, 100])."""

    level: int = 0
    FIELDS: ClassVar[dict[str, tuple[int, int]]] = {"level": U32}
    made_by = "acldvppCreateJpegeConfig"
    destroyed_by = "acldvppDestroyJpegeConfig"
    kind = "jpege config"


@dataclass(eq=False)
class BorderConfig(Desc):
    """acldvppBorderConfig: border type, widths and the constant border's values."""

    border_type: int = 0
    top: int = 0
    bottom: int = 0
    left: int = 0
    right: int = 0
    #: the constant border's value per channel (acldvppSetBorderConfigValue index 0..3)
    value: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0, 0.0])
    FIELDS: ClassVar[dict[str, tuple[int, int]]] = {
        "border_type": INT32, "top": U32, "bottom": U32, "left": U32, "right": U32}
    made_by = "acldvppCreateBorderConfig"
    destroyed_by = "acldvppDestroyBorderConfig"
    kind = "border config"
