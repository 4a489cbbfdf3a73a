"""Pixels in device memory and back: every VPC format's layout, color conversion, resizing.

A picture is read into an ``(height, width, 3)`` uint8 array in its color space: ``"yuv"``
(Y, U, V at full resolution; the subsampled chroma repeated) or ``"rgb"`` (R, G, B). Writing
goes the other way, chroma averaged over each 2x2 (4:2:0) or 2x1 (4:2:2) block.

DECISION: color conversion is BT.601 full range (JFIF's, which Pillow's ``YCbCr`` mode
uses); YUV400 reads with neutral chroma (128); an alpha channel written is 255 and ignored
when read; packed YUV444 is Y, U, V in that order.

Resizing follows the vendor's description of acldvppSetResizeConfigInterpolation ("the same
results as OpenCV 3.4.2"): bilinear with half-pixel centres (INTER_LINEAR) and nearest
neighbour ``floor(x * scale)`` (INTER_NEAREST), computed here in floating point and rounded,
so a pixel may differ from OpenCV's fixed point by 1. The high-order filter (5) is Pillow's
LANCZOS.
"""

from __future__ import annotations

from typing import Any

from .constants import PixelFormat as F
from .rules import LAYOUTS, Picture

__all__ = ["decode", "encode_rows", "to_space", "resize", "space_of", "require_numpy"]

_PACKED_422: dict[int, tuple[int, int, int, int]]
_PACKED_422 = {  # byte order of one 2-pixel group: indices of Y0, U, Y1, V
    F.PIXEL_FORMAT_YUYV_PACKED_422: (0, 1, 2, 3), F.PIXEL_FORMAT_UYVY_PACKED_422: (1, 0, 3, 2),
    F.PIXEL_FORMAT_YVYU_PACKED_422: (0, 3, 2, 1), F.PIXEL_FORMAT_VYUY_PACKED_422: (1, 2, 3, 0),
}
_XRGB: dict[int, tuple[int, int, int]]
_XRGB = {  # byte index of R, G, B (the fourth byte is alpha)
    F.PIXEL_FORMAT_ARGB_8888: (1, 2, 3), F.PIXEL_FORMAT_ABGR_8888: (3, 2, 1),
    F.PIXEL_FORMAT_RGBA_8888: (0, 1, 2), F.PIXEL_FORMAT_BGRA_8888: (2, 1, 0),
}
_VU_FIRST = {F.PIXEL_FORMAT_YVU_SEMIPLANAR_420, F.PIXEL_FORMAT_YVU_SEMIPLANAR_422,
             F.PIXEL_FORMAT_YVU_SEMIPLANAR_444}


def require_numpy() -> Any:
    """numpy, or FeatureNotSupported saying how to get it."""
    from ..compute.tensors import require_numpy as need
    return need()


def space_of(fmt: int) -> str:
    """"rgb" for the RGB formats, else "yuv"."""
    return "rgb" if LAYOUTS[fmt].kind in ("rgb", "xrgb") else "yuv"


def decode(pic: Picture, raw: Any) -> Any:
    """The picture's ``(height, width, 3)`` array from its ``pic.nbytes`` bytes ``raw``
    (a 1-D uint8 array)."""
    np = require_numpy()
    fmt, w, h, ws, hs = pic.format, pic.width, pic.height, pic.width_stride, pic.height_stride
    kind = LAYOUTS[fmt].kind
    out = np.empty((h, w, 3), np.uint8)
    if kind in ("rgb", "xrgb"):
        bpp = LAYOUTS[fmt].bpp
        rows = raw[:ws * h].reshape(h, ws)[:, :w * bpp].reshape(h, w, bpp)
        order = _XRGB[fmt] if kind == "xrgb" else (
            (0, 1, 2) if fmt == F.PIXEL_FORMAT_RGB_888 else (2, 1, 0))
        for c, i in enumerate(order):
            out[:, :, c] = rows[:, :, i]
        return out
    if kind == "422packed":
        rows = raw[:ws * h].reshape(h, ws)[:, :w * 2].reshape(h, w // 2, 4)
        y0, u, y1, v = _PACKED_422[fmt]
        out[:, 0::2, 0], out[:, 1::2, 0] = rows[:, :, y0], rows[:, :, y1]
        out[:, :, 1] = np.repeat(rows[:, :, u], 2, axis=1)
        out[:, :, 2] = np.repeat(rows[:, :, v], 2, axis=1)
        return out
    if kind == "444packed":
        return raw[:ws * h].reshape(h, ws)[:, :w * 3].reshape(h, w, 3).copy()
    out[:, :, 0] = raw[:ws * hs].reshape(hs, ws)[:h, :w]
    chroma = raw[ws * hs:]
    if kind == "400":
        out[:, :, 1:] = 128
        return out
    if kind == "420sp":
        rows = (h + 1) // 2  # an odd height (an input's) shares the last chroma row
        uv = chroma[:ws * (hs // 2)].reshape(hs // 2, ws)[:rows, :w].reshape(rows, w // 2, 2)
        uv = np.repeat(np.repeat(uv, 2, axis=0), 2, axis=1)[:h]
    elif kind == "422sp":
        uv = chroma[:ws * hs].reshape(hs, ws)[:h, :w].reshape(h, w // 2, 2)
        uv = np.repeat(uv, 2, axis=1)
    else:  # 444sp
        uv = chroma[:2 * ws * hs].reshape(hs, 2 * ws)[:h, :2 * w].reshape(h, w, 2)
    first, second = (2, 1) if fmt in _VU_FIRST else (1, 2)
    out[:, :, first], out[:, :, second] = uv[:, :, 0], uv[:, :, 1]
    return out


def encode_rows(fmt: int, image: Any, width_stride: int, height_stride: int, x: int, y: int) -> Any:
    """The rows that store ``image`` (``(h, w, 3)`` in ``fmt``'s color space) at column
    ``x``, row ``y`` of a picture of ``fmt`` with these strides: ``[(offset, bytes), ...]``,
    one per row of each plane, offsets from the picture's start (the stride padding and the
    rest of each row are not written)."""
    np = require_numpy()
    kind = LAYOUTS[fmt].kind
    h, w = image.shape[:2]
    ws, hs = width_stride, height_stride
    if kind in ("rgb", "xrgb"):
        bpp = LAYOUTS[fmt].bpp
        px = np.full((h, w, bpp), 255, np.uint8)
        order = _XRGB[fmt] if kind == "xrgb" else (
            (0, 1, 2) if fmt == F.PIXEL_FORMAT_RGB_888 else (2, 1, 0))
        for c, i in enumerate(order):
            px[:, :, i] = image[:, :, c]
        return _rows(px.reshape(h, w * bpp), (y * ws) + x * bpp, ws)
    if kind == "422packed":
        px = np.empty((h, w // 2, 4), np.uint8)
        y0, u, y1, v = _PACKED_422[fmt]
        px[:, :, y0], px[:, :, y1] = image[:, 0::2, 0], image[:, 1::2, 0]
        px[:, :, u] = _mean(image[:, :, 1], 1, 2)
        px[:, :, v] = _mean(image[:, :, 2], 1, 2)
        return _rows(px.reshape(h, w * 2), y * ws + x * 2, ws)
    if kind == "444packed":
        return _rows(np.ascontiguousarray(image).reshape(h, w * 3), y * ws + x * 3, ws)
    rows = _rows(np.ascontiguousarray(image[:, :, 0]), y * ws + x, ws)
    if kind == "400":
        return rows
    first, second = (2, 1) if fmt in _VU_FIRST else (1, 2)
    if kind == "420sp":
        uv = np.stack([_mean(image[:, :, first], 2, 2), _mean(image[:, :, second], 2, 2)], -1)
        return rows + _rows(uv.reshape(h // 2, w), ws * hs + (y // 2) * ws + x, ws)
    if kind == "422sp":
        uv = np.stack([_mean(image[:, :, first], 1, 2), _mean(image[:, :, second], 1, 2)], -1)
        return rows + _rows(uv.reshape(h, w), ws * hs + y * ws + x, ws)
    uv = np.stack([image[:, :, first], image[:, :, second]], -1)  # 444sp
    return rows + _rows(uv.reshape(h, 2 * w), ws * hs + y * 2 * ws + 2 * x, 2 * ws)


def _rows(plane: Any, offset: int, stride: int) -> list[Any]:
    return [(offset + r * stride, plane[r].tobytes()) for r in range(plane.shape[0])]


def _mean(channel: Any, down_y: int, down_x: int) -> Any:
    """``channel`` averaged over ``down_y`` x ``down_x`` blocks, rounded half up."""
    np = require_numpy()
    h, w = channel.shape
    blocks = channel.reshape(h // down_y, down_y, w // down_x, down_x).astype(np.uint32)
    n = down_y * down_x
    return ((blocks.sum(axis=(1, 3)) + n // 2) // n).astype(np.uint8)


def to_space(image: Any, source: str, target: str) -> Any:
    """``image`` converted from color space ``source`` to ``target`` (BT.601 full range)."""
    if source == target:
        return image
    np = require_numpy()
    f = image.astype(np.float64)
    if target == "yuv":
        r, g, b = f[:, :, 0], f[:, :, 1], f[:, :, 2]
        y = 0.299 * r + 0.587 * g + 0.114 * b
        u = -0.168736 * r - 0.331264 * g + 0.5 * b + 128
        v = 0.5 * r - 0.418688 * g - 0.081312 * b + 128
        out = np.stack([y, u, v], -1)
    else:
        y, u, v = f[:, :, 0], f[:, :, 1] - 128, f[:, :, 2] - 128
        out = np.stack([y + 1.402 * v, y - 0.344136 * u - 0.714136 * v, y + 1.772 * u], -1)
    return np.clip(np.floor(out + 0.5), 0, 255).astype(np.uint8)


def resize(image: Any, width: int, height: int, interpolation: int) -> Any:
    """``image`` resized to ``width`` x ``height``: 2 and 4 nearest neighbour, 5 Pillow's
    LANCZOS, any other bilinear (0, 1, 3)."""
    np = require_numpy()
    h, w = image.shape[:2]
    if (w, h) == (width, height):
        return image
    if interpolation in (2, 4):
        ys = np.minimum((np.arange(height) * (h / height)).astype(np.int64), h - 1)
        xs = np.minimum((np.arange(width) * (w / width)).astype(np.int64), w - 1)
        return image[ys][:, xs]
    if interpolation == 5:
        from PIL import Image
        return np.stack([np.asarray(Image.fromarray(np.ascontiguousarray(image[:, :, c]))
                                    .resize((width, height), Image.Resampling.LANCZOS))
                         for c in range(image.shape[2])], -1)
    # separable, one channel at a time in float32: an 8192x8192 picture stays in memory
    # a few hundred MiB at most
    y0, y1, wy = _taps(h, height)
    x0, x1, wx = _taps(w, width)
    wy, wx = wy.astype(np.float32)[:, None], wx.astype(np.float32)[None, :]
    out = np.empty((height, width, image.shape[2]), np.uint8)
    for c in range(image.shape[2]):
        plane = image[:, :, c]
        rows = plane[y0].astype(np.float32)
        rows += (plane[y1].astype(np.float32) - rows) * wy
        cols = rows[:, x0]
        cols += (rows[:, x1] - cols) * wx
        np.floor(cols + 0.5, out=cols)
        out[:, :, c] = np.clip(cols, 0, 255)
    return out


def _taps(size: int, new: int) -> tuple[Any, Any, Any]:
    """Bilinear source indices and weights along one axis (half-pixel centres, edges
    clamped, as OpenCV's INTER_LINEAR)."""
    np = require_numpy()
    pos = (np.arange(new) + 0.5) * (size / new) - 0.5
    pos = np.clip(pos, 0, size - 1)
    lo = np.floor(pos).astype(np.int64)
    hi = np.minimum(lo + 1, size - 1)
    return lo, hi, pos - lo
