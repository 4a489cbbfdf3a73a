"""Helpers of the media tests: pictures in DVPP memory, made and read back through acl."""

import numpy as np

import ascend_memsim.acl as acl
from ascend_memsim.media.rules import picture_size, strides_for, vpc_rules

m = acl.media


def put(rt, data: bytes, dvpp: bool = True, extra: int = 0) -> int:
    """Device memory holding ``data`` (then ``extra`` more bytes, unwritten)."""
    size = len(data) + extra
    ptr, ret = m.dvpp_malloc(size) if dvpp else acl.rt.malloc(size, 0)
    assert ret == 0, acl.get_recent_err_msg()
    if data:
        assert acl.rt.memcpy(ptr, size, acl.util.bytes_to_ptr(data), len(data), 1) == 0
    return ptr


def read(rt, ptr: int, count: int) -> np.ndarray:
    """``count`` bytes at ``ptr`` (no sanitizer check: a test's look, not the program's)."""
    region = rt.data.region_at(ptr, count)
    return np.frombuffer(bytes(region.read(ptr - region.base, count)), np.uint8)


def pic_desc(data: int, size: int, fmt: int, width: int, height: int, width_stride: int,
             height_stride: int, desc: int | None = None) -> int:
    desc = m.dvpp_create_pic_desc() if desc is None else desc
    for setter, value in ((m.dvpp_set_pic_desc_data, data), (m.dvpp_set_pic_desc_size, size),
                          (m.dvpp_set_pic_desc_format, fmt), (m.dvpp_set_pic_desc_width, width),
                          (m.dvpp_set_pic_desc_height, height),
                          (m.dvpp_set_pic_desc_width_stride, width_stride),
                          (m.dvpp_set_pic_desc_height_stride, height_stride)):
        assert setter(desc, value) == 0
    return desc


def alloc_pic(rt, fmt: int, width: int, height: int, fill: int | None = None,
              extra: int = 0, desc: int | None = None):
    """A picture description over DVPP memory of the size the rules say: (desc, ptr, size,
    width stride, height stride)."""
    ws, hs, size = strides_for(vpc_rules(rt.profile), fmt, width, height)
    data = b"" if fill is None else bytes([fill]) * size
    ptr = put(rt, data, extra=size + extra if fill is None else extra)
    return pic_desc(ptr, size, fmt, width, height, ws, hs, desc), ptr, size, ws, hs


def nv12(rgb: np.ndarray, ws: int, hs: int) -> bytes:
    """RGB -> NV12 bytes with strides, by Pillow's YCbCr (JFIF) conversion, chroma averaged
    over 2x2 blocks (the reference)."""
    from PIL import Image
    h, w = rgb.shape[:2]
    ycc = np.asarray(Image.fromarray(rgb).convert("YCbCr")).astype(np.int64)
    out = np.zeros(picture_size_any(ws, hs, 1.5), np.uint8)
    out[:ws * hs].reshape(hs, ws)[:h, :w] = ycc[:, :, 0]
    chroma = ycc[:, :, 1:].reshape(h // 2, 2, w // 2, 2, 2).sum(axis=(1, 3))
    uv = ((chroma + 2) // 4).astype(np.uint8).reshape(h // 2, w)
    out[ws * hs:].reshape(hs // 2, ws)[:h // 2, :w] = uv
    return out.tobytes()


def picture_size_any(ws: int, hs: int, factor: float) -> int:
    return int(ws * hs * factor)


__all__ = ["put", "read", "pic_desc", "alloc_pic", "nv12", "picture_size", "m"]
