"""VPC image processing: crop, resize, paste, borders, color conversion, on a stream.

Every VPC call is one or more :class:`Item`: take ``crop`` (left, top, width, height) of a
source picture, resize it to the paste area (less its borders), add the borders, convert to
the destination's color space and write it at the paste area of the destination picture.
acldvppVpcCropAsync scales the crop to the whole output (acl_dvpp.h: "crop the input picture
according to the specified area, and then store the picture in the output memory as the
output picture"), CropAndPaste to the paste area; the Resize variants add a resize config.

Everything is checked when the call is made (a failed call queues nothing and changes
nothing): the channel, the pictures' formats, sizes, strides and buffer sizes
(:mod:`.rules`), the areas, the scaling range and the memory, which must be live memory of
the current device holding the picture's bytes, and DVPP memory (acl.media.dvpp_malloc) on
the products that have it. A buffer that the declared size would run past is
ACL_ERROR_INVALID_PARAM 100000 and a ``media-overflow`` sanitizer report naming the block and
the bytes past its end. The pixels are computed when the stream runs the work (at
synchronize), reading the sources through the data plane (initcheck applies) and writing
only the destination's picture rows (stride padding is left as it was).

Rules of the areas (acl_dvpp.h acldvppCreateRoiConfig): left and top even, right and bottom
odd, inclusive edges; inside the picture; at least 10x6. DECISION: a paste area follows the
same rules. Scaling: each side by 1/32 to 16 (CANN 6.2 aclcppdevg_03_1331).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from ..memory.args import UINT32_MAX, as_int
from ..memory.constants import MemType
from ..memory.errors import InvalidArgument, InvalidArgumentType
from .constants import BorderType, ChannelMode
from .descs import BatchPicDesc, BorderConfig, PicDesc, ResizeConfig, RoiConfig
from .pixels import decode, encode_rows, require_numpy, resize, space_of, to_space
from .rules import Picture, VpcRules, check_picture, strides_for, vpc_rules

if TYPE_CHECKING:
    from ..compute.tensors import HandleTable
    from .descs import ChannelDesc, Desc

    D = TypeVar("D", bound=Desc)

__all__ = ["Item", "VpcCalls", "MAX_ROIS"]

#: pyacl's batch wrappers take 1 to 256 areas (MAX_CROP_SIZE, media_vpc.cpp)
MAX_ROIS = 256
_SCALE = (1 / 32, 16)


@dataclass(frozen=True, slots=True)
class Item:
    """One picture's work: crop of ``src`` -> paste area of ``dst``."""

    src: Picture
    crop: tuple[int, int, int, int]
    dst: Picture
    paste: tuple[int, int, int, int]
    interpolation: int
    #: (type, top, bottom, left, right, values) or None
    border: tuple[Any, ...] | None = None


def _area(roi: RoiConfig, pic: Picture, what: str, call: str) -> tuple[int, int, int, int]:
    """(left, top, width, height) of a checked area of ``pic``."""
    left, right, top, bottom = roi.left, roi.right, roi.top, roi.bottom
    where = f"{call}: {what} {roi.describe_area()}"
    if left % 2 or top % 2 or right % 2 == 0 or bottom % 2 == 0:
        raise InvalidArgument(f"{where}: left and top must be even, right and bottom odd "
                              f"(acl_dvpp.h acldvppCreateRoiConfig)")
    if right < left or bottom < top or right >= pic.width or bottom >= pic.height:
        raise InvalidArgument(f"{where} is not inside the {pic.width}x{pic.height} "
                              f"{pic.what}")
    w, h = right - left + 1, bottom - top + 1
    if w < 10 or h < 6:
        raise InvalidArgument(f"{where} is {w}x{h}, below the VPC's 10x6")
    return left, top, w, h


def _scaled(call: str, crop: tuple[Any, ...], width: int, height: int) -> None:
    lo, hi = _SCALE
    for old, new, side in ((crop[2], width, "width"), (crop[3], height, "height")):
        if not lo <= new / old <= hi:
            raise InvalidArgument(f"{call}: scaling the {side} from {old} to {new} is outside "
                                  f"the VPC's 1/32 to 16")


def _as_list(value: object, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise InvalidArgumentType(f"{what} must be a list, got {type(value).__name__}")
    if not 1 <= len(value) <= MAX_ROIS:
        raise InvalidArgument(f"{what} holds {len(value)} items; 1 to {MAX_ROIS} are taken "
                              f"(python/pyACL/media/media_vpc.cpp)")
    return value


class VpcCalls:
    """The VPC calls of the media plane (mixed into :class:`~.plane.MediaPlane`)."""

    # what MediaPlane gives; declared for the type checker only, so that these never shadow
    # its own
    runtime: Any
    if TYPE_CHECKING:
        handles: HandleTable

        def get(self, handle: object, cls: type[D], what: str | None = None) -> D: ...

        def channel(self, desc: object, mode: ChannelMode, call: str) -> ChannelDesc: ...

    # -- the pieces every call checks ------------------------------------------------------------

    def _rules(self) -> VpcRules:
        return vpc_rules(self.runtime.profile)

    def _pic(self, handle: object, what: str, output: bool, call: str,
             rules: VpcRules) -> Picture:
        desc = self.get(handle, PicDesc, what)
        with self.handles.lock:
            return check_picture(rules, desc, what, output, call)

    def _interpolation(self, handle: object, rules: VpcRules, call: str) -> int:
        config = self.get(handle, ResizeConfig, "resize_config")
        value = config.interpolation
        if value not in rules.interpolations:
            raise InvalidArgument(f"{call}: interpolation {value} is not one of "
                                  f"{sorted(rules.interpolations)} on {rules.family} "
                                  f"(acldvppSetResizeConfigInterpolation)")
        return value

    def _border(self, handle: object, call: str) -> tuple[Any, ...]:
        config = self.get(handle, BorderConfig, "border_config")
        if config.border_type not in BorderType._value2member_map_:
            raise InvalidArgument(f"{call}: border type {config.border_type} is not an "
                                  f"acldvppBorderType")
        return (config.border_type, config.top, config.bottom, config.left, config.right,
                tuple(config.value))

    def _item(self, call: str, src: Picture, crop_roi: object, dst: Picture,
              paste_roi: object, interpolation: int, border: tuple[Any, ...] | None = None) -> Item:
        if crop_roi is None:
            crop = (0, 0, src.width, src.height)
        else:
            crop = _area(self.get(crop_roi, RoiConfig, "crop_area"), src, "crop area", call)
        if paste_roi is None:
            paste = (0, 0, dst.width, dst.height)
        else:
            paste = _area(self.get(paste_roi, RoiConfig, "paste_area"), dst, "paste area",
                          call)
            align = self._rules().paste_left_align
            if paste[0] % align:
                raise InvalidArgument(f"{call}: the paste area's left offset {paste[0]} is "
                                      f"not a multiple of {align} on this product "
                                      f"(acldvppVpcCropAndPasteAsync, pasteArea)")
        width, height = paste[2], paste[3]
        if border is not None:
            width -= border[3] + border[4]
            height -= border[1] + border[2]
            if width < 1 or height < 1:
                raise InvalidArgument(f"{call}: the borders leave no room in the "
                                      f"{paste[2]}x{paste[3]} output")
        _scaled(call, crop, width, height)
        return Item(src, crop, dst, paste, interpolation, border)

    # -- memory -----------------------------------------------------------------------------

    def _check_memory(self, call: str, pic: Picture, write: bool, rules: VpcRules,
                      device: Any) -> None:
        """The picture's buffer: live memory of the current device holding ``pic.size``
        bytes, DVPP memory where the product has it.

        Raises:
            InvalidArgument: it is not (the sanitizer reports ``wrong-memory``, or
                ``media-overflow`` for a buffer too small).
        """
        runtime = self.runtime
        data, sanitizer = runtime.data, runtime.sanitizer
        with data.lock:
            region = data.region_at(pic.data, 1)
            if region is None:
                sanitizer.bad_address(call, pic.data, pic.size, write)
                raise InvalidArgument(f"{call}: {pic.what}'s data {pic.data:#x} is not live "
                                      f"device memory")
            # a device region's block (a host region has none): read past the host test only
            block: Any = region.block if not region.host else None
            if region.host:
                why = "host memory; the VPC takes device memory"
            elif block.device_id != device.device_id:
                why = (f"memory of device {block.device_id}, but the current device is "
                       f"{device.device_id}")
            elif rules.dvpp_memory and getattr(block, "mem_type", None) != MemType.DVPP:
                why = ("not DVPP memory: the VPC's buffers come from acl.media.dvpp_malloc "
                       "on this product (pyACL VPC restrictions)")
            else:
                why = None
            if why is not None:
                sanitizer.wrong_memory(call, pic.data, pic.size, write, region, why)
                raise InvalidArgument(f"{call}: {pic.what}'s data {pic.data:#x} is {why}")
            available = region.size - (pic.data - region.base)
            if pic.size > available:
                sanitizer.media_overflow(call, pic.data, pic.size, write, region,
                                         f"{pic.what} declares {pic.size} bytes, but the "
                                         f"{region.describe()} holds {available} from "
                                         f"{pic.data:#x}: the VPC would "
                                         f"{'write' if write else 'read'} "
                                         f"{pic.size - available} bytes past its end")
                raise InvalidArgument(
                    f"{call}: {pic.what} declares {pic.size} bytes at {pic.data:#x}, but its "
                    f"buffer holds {available} there ({pic.size - available} bytes short)")

    def _submit(self, call: str, channel: object, items: list[Item], stream: object) -> None:
        """Check the channel, stream and memory, then queue the items on the stream."""
        self.channel(channel, ChannelMode.DVPP_CHNMODE_VPC, call)
        runtime = self.runtime
        streams = runtime.streams
        target = streams.stream(stream)
        device = runtime.current_device()
        rules = self._rules()
        for item in items:
            self._check_memory(call, item.src, False, rules, device)
            self._check_memory(call, item.dst, True, rules, device)
        ranges = tuple(sorted({(p.data, p.data + p.size) for item in items
                               for p in (item.src, item.dst)}))

        def run(_stream: Any) -> None:
            for item in items:
                _run_item(runtime, call, item)

        streams.enqueue(target.handle, call, ranges, run)

    # -- the calls --------------------------------------------------------------------------

    def vpc(self, call: str, channel: object, src: object, dst: object, crop: object = None,
            paste: object = None, resize_config: object = None, stream: object = 0) -> None:
        """acldvppVpcResizeAsync / CropAsync / CropResizeAsync / CropAndPasteAsync /
        CropResizePasteAsync: ``crop``, ``paste`` and ``resize_config`` are handles, or None
        for the calls that take none (pyacl passes every one as ``k``: 0 is NULL, refused)."""
        rules = self._rules()
        interpolation = (1 if resize_config is None
                         else self._interpolation(resize_config, rules, call))
        source = self._pic(src, "input_desc", False, call, rules)
        target = self._pic(dst, "output_desc", True, call, rules)
        item = self._item(call, source, crop, target, paste, interpolation)
        self._submit(call, channel, [item], stream)

    def make_border(self, channel: object, src: object, dst: object, border: object,
                    stream: object) -> None:
        """acldvppVpcMakeBorderAsync: the output is the input with the borders around it."""
        call = "acldvppVpcMakeBorderAsync"
        rules = self._rules()
        source = self._pic(src, "input_desc", False, call, rules)
        target = self._pic(dst, "output_desc", True, call, rules)
        edges = self._border(border, call)
        want = (source.width + edges[3] + edges[4], source.height + edges[1] + edges[2])
        if (target.width, target.height) != want:
            raise InvalidArgument(f"{call}: the output is {target.width}x{target.height}; the "
                                  f"input with its borders is {want[0]}x{want[1]}")
        item = self._item(call, source, None, target, None, 1, edges)
        self._submit(call, channel, [item], stream)

    def convert_color(self, channel: object, src: object, dst: object, stream: object) -> None:
        """acldvppVpcConvertColorAsync: same size, another format (acl_dvpp.h: the output's
        width, height and strides may be left 0; they are then the input's size and the
        smallest strides the rules allow)."""
        call = "acldvppVpcConvertColorAsync"
        rules = self._rules()
        source = self._pic(src, "input_desc", False, call, rules)
        desc = self.get(dst, PicDesc, "output_desc")
        with self.handles.lock:
            fields = dict(data=desc.data, size=desc.size, format=desc.format,
                          width=desc.width or source.width, height=desc.height or source.height,
                          width_stride=desc.width_stride, height_stride=desc.height_stride)
        if fields["format"] in rules.out_formats and not (
                fields["width_stride"] and fields["height_stride"]):
            ws, hs, _ = strides_for(rules, fields["format"], fields["width"], fields["height"])
            fields["width_stride"] = fields["width_stride"] or ws
            fields["height_stride"] = fields["height_stride"] or hs
        target = check_picture(rules, PicDesc(**fields), "output_desc", True, call)
        if (target.width, target.height) != (source.width, source.height):
            raise InvalidArgument(f"{call}: the output is {target.width}x{target.height}, "
                                  f"the input {source.width}x{source.height}; color "
                                  f"conversion keeps the size")
        self._submit(call, channel, [Item(source, (0, 0, source.width, source.height), target,
                                          (0, 0, target.width, target.height), 1)], stream)

    def batch(self, call: str, channel: object, src_batch: object, roi_nums: object,
              dst_batch: object, crops: object, pastes: object = None,
              borders: object = None, resize_config: object = None,
              stream: object = 0) -> None:
        """The batch calls: picture i of the source batch gives ``roi_nums[i]`` crops, in
        order, each to the next picture of the destination batch."""
        rules = self._rules()
        nums = [as_int(n, f"roi_nums[{i}]", 1, MAX_ROIS)
                for i, n in enumerate(_as_list(roi_nums, "roi_nums"))]
        crops = _as_list(crops, "crop_areas")
        pastes = None if pastes is None else _as_list(pastes, "paste_areas")
        borders = None if borders is None else _as_list(borders, "border_configs")
        src_pics = self.get(src_batch, BatchPicDesc, "src_batch_pic_descs").pics
        dst_pics = self.get(dst_batch, BatchPicDesc, "dst_batch_pic_descs").pics
        total = sum(nums)
        if len(nums) > len(src_pics):
            raise InvalidArgument(f"{call}: roi_nums names {len(nums)} source pictures, the "
                                  f"source batch holds {len(src_pics)}")
        for name, areas in (("crop_areas", crops), ("paste_areas", pastes),
                            ("border_configs", borders)):
            if areas is not None and len(areas) != total:
                raise InvalidArgument(f"{call}: {name} holds {len(areas)}, roi_nums adds up "
                                      f"to {total}")
        if total > len(dst_pics):
            raise InvalidArgument(f"{call}: {total} crops for a destination batch of "
                                  f"{len(dst_pics)}")
        interpolation = (1 if resize_config is None
                         else self._interpolation(resize_config, rules, call))
        items, k = [], 0
        for i, count in enumerate(nums):
            source = self._pic(src_pics[i].handle, f"source picture {i}", False, call, rules)
            for _ in range(count):
                target = self._pic(dst_pics[k].handle, f"destination picture {k}", True,
                                   call, rules)
                border = None if borders is None else self._border(borders[k], call)
                paste = None if pastes is None else pastes[k]
                items.append(self._item(call, source, crops[k], target, paste,
                                        interpolation, border))
                k += 1
        self._submit(call, channel, items, stream)

    def pyr_down(self, channel: object, src: object, dst: object, reserve: object,
                 stream: object) -> None:
        """acldvppVpcPyrDownAsync: a YUV400 output half the input's size (rounded up),
        Gaussian 5x5 as OpenCV's pyrDown (DECISION); ``reserve`` must be 0 (acl_dvpp.h)."""
        call = "acldvppVpcPyrDownAsync"
        if as_int(reserve, "reserve", 0, UINT32_MAX << 32 | UINT32_MAX) != 0:
            raise InvalidArgument(f"{call}: reserve must be 0 (NULL)")
        rules = self._rules()
        source = self._pic(src, "input_desc", False, call, rules)
        target = self._pic(dst, "output_desc", True, call, rules)
        want = ((source.width + 1) // 2, (source.height + 1) // 2)
        if target.format != 0 or (target.width, target.height) != want:
            raise InvalidArgument(f"{call}: the output must be YUV400 {want[0]}x{want[1]} "
                                  f"(half the input), got format {target.format} "
                                  f"{target.width}x{target.height}")
        self._submit(call, channel, [Item(source, (0, 0, source.width, source.height), target,
                                          (0, 0, target.width, target.height), -1)], stream)


def _run_item(runtime: Any, call: str, item: Item) -> None:
    """Read, compute and write one item (on the stream, at synchronize)."""
    np = require_numpy()
    data = runtime.data
    src, dst = item.src, item.dst
    raw = np.empty(src.nbytes, np.uint8)
    with data.lock:
        region, offset = data.resolve(call, src.data, src.nbytes, write=False)
        region.read_into(offset, memoryview(raw))
    image = decode(src, raw)
    left, top, w, h = item.crop
    image = image[top:top + h, left:left + w]
    x, y, pw, ph = item.paste
    if item.interpolation == -1:
        image = _pyr_down(to_space(image, space_of(src.format), "yuv"))
    else:
        border = item.border
        inner_w = pw - (border[3] + border[4] if border else 0)
        inner_h = ph - (border[1] + border[2] if border else 0)
        image = resize(image, inner_w, inner_h, item.interpolation)
        image = to_space(image, space_of(src.format), space_of(dst.format))
        if border is not None:
            image = _with_border(image, border)
    rows = encode_rows(dst.format, image, dst.width_stride, dst.height_stride, x, y)
    with data.lock:
        region, offset = data.resolve(call, dst.data, dst.nbytes, write=True)
        for start, chunk in rows:
            region.write(offset + start, memoryview(chunk))


def _with_border(image: Any, border: tuple[Any, ...]) -> Any:
    np = require_numpy()
    kind, top, bottom, left, right, values = border
    pad = ((top, bottom), (left, right), (0, 0))
    if kind == BorderType.BORDER_CONSTANT:
        out = np.empty((image.shape[0] + top + bottom, image.shape[1] + left + right, 3),
                       np.uint8)
        for c in range(3):
            out[:, :, c] = int(min(max(round(values[c]), 0), 255))
        out[top:top + image.shape[0], left:left + image.shape[1]] = image
        return out
    mode = {BorderType.BORDER_REPLICATE: "edge", BorderType.BORDER_REFLECT: "symmetric",
            BorderType.BORDER_REFLECT_101: "reflect"}[BorderType(kind)]
    if mode == "reflect" and min(image.shape[:2]) < 2:
        mode = "edge"
    return np.pad(image, pad, mode=mode)


def _pyr_down(image: Any) -> Any:
    """The Y channel blurred with [1 4 6 4 1]/16 both ways (border reflect-101) and every
    second pixel kept; chroma neutral."""
    np = require_numpy()
    y = image[:, :, 0].astype(np.float64)
    kernel = np.array([1, 4, 6, 4, 1]) / 16
    for axis in (0, 1):
        mode = "reflect" if y.shape[axis] > 2 else "edge"
        padded = np.pad(y, [(2, 2) if a == axis else (0, 0) for a in (0, 1)], mode=mode)
        n = y.shape[axis]
        y = sum(kernel[k] * np.take(padded, range(k, k + n), axis=axis) for k in range(5))
    small = np.clip(np.floor(y[::2, ::2] + 0.5), 0, 255).astype(np.uint8)
    out = np.full(small.shape + (3,), 128, np.uint8)
    out[:, :, 0] = small
    return out
