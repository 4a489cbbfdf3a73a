"""The VPC's picture rules per product: formats, sizes, width/height strides and buffer sizes.

Sources (the pyACL chapter "VPC restrictions", whose tables the C chapter repeats):

* Ascend 310 / 910 table (CANN 6.0.1 aclpythondevg_01_0267, aclcppdevg_03_0168): input width
  stride = the width aligned to 16, times the bytes of a pixel for packed formats; height
  stride = the height aligned to 2; buffer = widthStride x heightStride x 3/2 for YUV400 and
  YUV420SP, x 2 for YUV422SP, x 3 for YUV444SP, x 1 for packed formats; output YUV420SP
  NV12/NV21 only, width and height even, strides aligned 16 and 2; width stride 32 to 16384,
  height stride 6 to 16384; output 10x6 to 4096x4096.
* Atlas A2 / A3 table (CANN 8.x aclpythondevg_01_0295, aclcppdevg_03_0337): strides need no
  alignment (width stride = width x bytes of a pixel, height stride = height, YUV420SP's
  height stride even); the same buffer formulas but YUV400 = widthStride x heightStride;
  width stride 10 to 16384, height stride 6 to 16384; output 10x6 to 4096x8192.
* Input 10x6 to 8192x8192 on every product.

DECISION: the 310P (Atlas inference products) follows the Ascend 310/910 table, the strictest
(a program written for it meets the others'); Ascend 950PR/950DT follow the A2 table, and
there DVPP memory is ordinary device memory (``profile.dvpp_type`` false). DECISION: the A2
outputs the formats of its input table that have a buffer formula (YUV400, YUV420SP,
YUV422SP, YUV444SP, packed YUV422/444, RGB888, BGR888, xRGB8888).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..memory.errors import InvalidArgument
from .constants import PixelFormat as F
from .descs import PicDesc

__all__ = ["Layout", "LAYOUTS", "VpcRules", "vpc_rules", "Picture", "check_picture",
           "picture_size", "strides_for", "INTERPOLATIONS"]


@dataclass(frozen=True, slots=True)
class Layout:
    """How a pixel format lies in memory."""

    #: "400", "420sp", "422sp", "444sp", "422packed", "444packed", "rgb", "xrgb"
    kind: str
    #: bytes of a pixel in the first plane (the width stride is width x this)
    bpp: int
    #: buffer = widthStride x heightStride x num / den
    num: int
    den: int
    even_width: bool
    even_height: bool


_L420 = Layout("420sp", 1, 3, 2, True, True)
_L422 = Layout("422sp", 1, 2, 1, True, False)
LAYOUTS: dict[int, Layout] = {
    F.PIXEL_FORMAT_YUV_400: Layout("400", 1, 1, 1, False, False),
    F.PIXEL_FORMAT_YUV_SEMIPLANAR_420: _L420, F.PIXEL_FORMAT_YVU_SEMIPLANAR_420: _L420,
    F.PIXEL_FORMAT_YUV_SEMIPLANAR_422: _L422, F.PIXEL_FORMAT_YVU_SEMIPLANAR_422: _L422,
    F.PIXEL_FORMAT_YUV_SEMIPLANAR_444: Layout("444sp", 1, 3, 1, False, False),
    F.PIXEL_FORMAT_YVU_SEMIPLANAR_444: Layout("444sp", 1, 3, 1, False, False),
    **{f: Layout("422packed", 2, 1, 1, True, False) for f in (
        F.PIXEL_FORMAT_YUYV_PACKED_422, F.PIXEL_FORMAT_UYVY_PACKED_422,
        F.PIXEL_FORMAT_YVYU_PACKED_422, F.PIXEL_FORMAT_VYUY_PACKED_422)},
    F.PIXEL_FORMAT_YUV_PACKED_444: Layout("444packed", 3, 1, 1, False, False),
    F.PIXEL_FORMAT_RGB_888: Layout("rgb", 3, 1, 1, False, False),
    F.PIXEL_FORMAT_BGR_888: Layout("rgb", 3, 1, 1, False, False),
    **{f: Layout("xrgb", 4, 1, 1, False, False) for f in (
        F.PIXEL_FORMAT_ARGB_8888, F.PIXEL_FORMAT_ABGR_8888, F.PIXEL_FORMAT_RGBA_8888,
        F.PIXEL_FORMAT_BGRA_8888)},
}

#: acldvppSetResizeConfigInterpolation: 0 the default (1 on the 310P and A2; the Ascend
#: 310/910's own high-order filter), 1 bilinear and 2 nearest neighbour (OpenCV 3.4.2's
#: results), 3 and 4 the same as 1 and 2 (not on the 310P), 5 the high-order filter (A2).
#: CANN 6.0.1 aclcppdevg_03_0820, CANN 6.2 aclcppdevg_03_1331.
INTERPOLATIONS = {"310": frozenset({0, 1, 2}), "A2": frozenset({0, 1, 2, 3, 4, 5})}


@dataclass(frozen=True, slots=True)
class VpcRules:
    """One product family's VPC rules (see the module's sources)."""

    family: str
    source: str
    #: the width (in pixels) is aligned to this before the bytes of a pixel multiply it
    width_align: int
    #: every height stride aligned to this (1: only YUV420SP's, to 2)
    height_align: int
    width_stride: tuple[int, int]
    height_stride: tuple[int, int]
    in_max: tuple[int, int]
    out_max: tuple[int, int]
    out_formats: frozenset[int]
    #: YUV400's buffer is ws x hs x 3/2 (the 310/910 table) rather than ws x hs
    yuv400_as_420: bool
    #: VPC buffers must be DVPP memory (acldvppMalloc)
    dvpp_memory: bool
    interpolations: frozenset[int]
    #: a paste area's left offset is a multiple of this (16 on the Ascend 310/910: CANN 8.0
    #: aclcppdevg_03_0344, acldvppVpcCropAndPasteAsync's pasteArea)
    paste_left_align: int = 2
    minimum: tuple[int, int] = (10, 6)


_SOURCE_310 = "pyACL VPC restrictions, Ascend 310/910 table (aclpythondevg_01_0267)"
_SOURCE_A2 = "pyACL VPC restrictions, Atlas A2/A3 table (aclpythondevg_01_0295)"


def vpc_rules(profile: Any) -> VpcRules:
    """The VPC rules of a product profile (:mod:`ascend_memsim.memory.profiles`)."""
    if profile.name == "310P":
        return VpcRules("Atlas inference (310P), as the Ascend 310/910 table", _SOURCE_310,
                        16, 2, (32, 16384), (6, 16384), (8192, 8192), (4096, 4096),
                        frozenset({F.PIXEL_FORMAT_YUV_SEMIPLANAR_420,
                                   F.PIXEL_FORMAT_YVU_SEMIPLANAR_420}),
                        True, profile.dvpp_type, INTERPOLATIONS["310"], 16)
    return VpcRules(f"{profile.name}, as the Atlas A2/A3 table", _SOURCE_A2, 1, 1,
                    (10, 16384), (6, 16384), (8192, 8192), (4096, 8192),
                    frozenset(LAYOUTS), False, profile.dvpp_type, INTERPOLATIONS["A2"])


def _align(value: int, to: int) -> int:
    return -(-value // to) * to


def picture_size(rules: VpcRules, fmt: int, width_stride: int, height_stride: int) -> int:
    """The buffer a picture of ``fmt`` with these strides needs, in bytes."""
    layout = LAYOUTS[fmt]
    if layout.kind == "400" and rules.yuv400_as_420:
        return width_stride * height_stride * 3 // 2
    return width_stride * height_stride * layout.num // layout.den


def strides_for(rules: VpcRules, fmt: int, width: int, height: int) -> tuple[int, int, int]:
    """The smallest (width stride, height stride, buffer size) the rules allow for a
    ``width`` x ``height`` picture of ``fmt`` (what a program should allocate)."""
    layout = LAYOUTS[fmt]
    ws = max(_align(width, rules.width_align) * layout.bpp, rules.width_stride[0])
    ws = _align(ws, rules.width_align)
    h_align = 2 if layout.kind == "420sp" else rules.height_align
    hs = max(_align(height, h_align), rules.height_stride[0])
    hs = _align(hs, h_align)
    return ws, hs, picture_size(rules, fmt, ws, hs)


@dataclass(frozen=True, slots=True)
class Picture:
    """A checked picture description, fixed when the work is submitted (later changes to
    the description do not reach queued work)."""

    what: str
    data: int
    size: int
    format: int
    width: int
    height: int
    width_stride: int
    height_stride: int
    #: the bytes the rules say the picture occupies (<= size)
    nbytes: int

    @property
    def layout(self) -> Layout:
        return LAYOUTS[self.format]


def check_picture(rules: VpcRules, pic: PicDesc, what: str, output: bool,
                  call: str) -> Picture:
    """The rules applied to one picture description.

    Raises:
        InvalidArgument: an unsupported format, a size outside the range, an odd width or
            height where it must be even, a stride that breaks the rules, a buffer size below
            the formula's, or no data address.
    """
    where = f"{call}: {what}"
    fmt = pic.format
    if fmt not in LAYOUTS or (output and fmt not in rules.out_formats):
        name = F(fmt).name if fmt in F._value2member_map_ else str(fmt)
        allowed = ", ".join(F(f).name for f in sorted(rules.out_formats if output else LAYOUTS))
        role = "output" if output else "input"
        raise InvalidArgument(f"{where}: format {name} is not a VPC {role} format on "
                              f"{rules.family} (one of: {allowed}; {rules.source})")
    layout = LAYOUTS[fmt]
    w, h, ws, hs = pic.width, pic.height, pic.width_stride, pic.height_stride
    lo_w, lo_h = rules.minimum
    hi_w, hi_h = rules.out_max if output else rules.in_max
    if not (lo_w <= w <= hi_w and lo_h <= h <= hi_h):
        raise InvalidArgument(f"{where}: {w}x{h} is outside {lo_w}x{lo_h} to {hi_w}x{hi_h} "
                              f"({rules.source})")
    # DECISION: an input picture's height may be odd (the tables ask YUV420SP for an even
    # one, but the vendor's vpc_jpeg_resnet50 sample resizes the JPEG decoder's 1024x1061
    # output at height 1061); its last chroma row then serves its last luma row alone
    if (layout.even_width and w % 2) or (layout.even_height and h % 2 and output):
        raise InvalidArgument(f"{where}: {F(fmt).name} needs an even "
                              f"{'width' if layout.even_width and w % 2 else 'height'}, got "
                              f"{w}x{h} ({rules.source})")
    need_ws = _align(w, rules.width_align) * layout.bpp
    if ws < need_ws or ws % rules.width_align or not (
            rules.width_stride[0] <= ws <= rules.width_stride[1]):
        aligned = f"aligned to {rules.width_align}" if rules.width_align > 1 else "no alignment"
        raise InvalidArgument(
            f"{where}: width stride {ws} breaks the rule: at least {need_ws} (width {w}"
            f"{f' aligned to {rules.width_align}' if rules.width_align > 1 else ''} x "
            f"{layout.bpp} byte(s) a pixel), {aligned}, in [{rules.width_stride[0]}, "
            f"{rules.width_stride[1]}] ({rules.source})")
    h_align = 2 if layout.kind == "420sp" else rules.height_align
    if hs < h or hs % h_align or not rules.height_stride[0] <= hs <= rules.height_stride[1]:
        raise InvalidArgument(
            f"{where}: height stride {hs} breaks the rule: at least the height {h}"
            f"{f', aligned to {h_align}' if h_align > 1 else ''}, in "
            f"[{rules.height_stride[0]}, {rules.height_stride[1]}] ({rules.source})")
    need = picture_size(rules, fmt, ws, hs)
    if pic.size < need:
        raise InvalidArgument(
            f"{where}: size {pic.size} is below the {need} bytes a {F(fmt).name} picture "
            f"with strides {ws}x{hs} occupies ({rules.source})")
    if not pic.data:
        raise InvalidArgument(f"{where}: the picture has no data address "
                              f"(acl.media.dvpp_set_pic_desc_data)")
    return Picture(what, pic.data, pic.size, fmt, w, h, ws, hs, need)
