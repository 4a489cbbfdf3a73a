"""VPC with real pixels: golden results against Pillow, layouts, the rules, the sanitizer.

Tolerances (stated in docs/guide/media.md): a color conversion is within 2 of
Pillow's YCbCr <-> RGB (BT.601 full range, rounding and 4:2:0 chroma averaging); bilinear
upscaling is within 1 of Pillow's BILINEAR (both half-pixel centred); a 2x bilinear
downscale equals Pillow's ``reduce(2)`` within 1; nearest neighbour, crop and paste are exact.
"""

import numpy as np
import pytest
from media_helpers import alloc_pic, m, nv12, pic_desc, put, read
from memory_sizes import capacity
from PIL import Image

import ascend_memsim.acl as acl
from ascend_memsim import MiB, Runtime, Sanitizer
from ascend_memsim.media.pixels import decode, encode_rows
from ascend_memsim.media.rules import LAYOUTS, Picture, strides_for, vpc_rules

INVALID_PARAM = 100000
INVALID_HANDLE = 107017
NV12, NV21, YUV400, RGB, BGR = 1, 2, 0, 12, 13


def runtime(product="A2"):
    rt = Runtime(product, **capacity(product, 256 * MiB), sanitizer=Sanitizer(output=None))
    rt.__enter__()
    rt.set_device(0)
    return rt


@pytest.fixture
def rt():
    runtime_ = runtime()
    yield runtime_
    runtime_.__exit__(None, None, None)


@pytest.fixture
def chan(rt):
    desc = m.dvpp_create_channel_desc()
    assert m.dvpp_create_channel(desc) == 0
    stream, ret = acl.rt.create_stream()
    assert ret == 0
    yield desc, stream
    acl.rt.destroy_stream(stream)


def rgb_image(w, h, seed=0):
    # a smooth image with some texture (noise alone makes resampling comparisons meaningless)
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.stack([xx * 255 / w, yy * 255 / h, (xx + yy) * 127 / (w + h)], -1)
    return np.clip(base + rng.normal(0, 8, base.shape), 0, 255).astype(np.uint8)


def rgb_pic(rt, rgb, fmt=RGB):
    h, w = rgb.shape[:2]
    data = (rgb if fmt == RGB else rgb[:, :, ::-1]).tobytes()
    ptr = put(rt, data)
    return pic_desc(ptr, len(data), fmt, w, h, w * 3, h), ptr


def planes_nv12(raw, w, h, ws, hs, vu=False):
    y = raw[:ws * hs].reshape(hs, ws)[:h, :w].astype(int)
    uv = raw[ws * hs:ws * hs * 3 // 2].reshape(hs // 2, ws)[:h // 2, :w]
    u, v = uv[:, 0::2].astype(int), uv[:, 1::2].astype(int)
    return (y, v, u) if vu else (y, u, v)


def reference_nv12(rgb):
    ycc = np.asarray(Image.fromarray(rgb).convert("YCbCr")).astype(int)
    h, w = rgb.shape[:2]
    sub = ycc[:, :, 1:].reshape(h // 2, 2, w // 2, 2, 2).sum(axis=(1, 3))
    sub = (sub + 2) // 4
    return ycc[:, :, 0], sub[:, :, 0], sub[:, :, 1]


@pytest.mark.parametrize("fmt", [NV12, NV21])
def test_resize_rgb_to_yuv420sp_matches_pillow(rt, chan, fmt):
    channel, stream = chan
    rgb = rgb_image(64, 48)
    src, _ = rgb_pic(rt, rgb)
    dst, ptr, size, ws, hs = alloc_pic(rt, fmt, 96, 72)
    config = m.dvpp_create_resize_config()
    assert m.dvpp_set_resize_config_interpolation(config, 1) == 0
    assert m.dvpp_vpc_resize_async(channel, src, dst, config, stream) == 0
    assert acl.rt.synchronize_stream(stream) == 0
    got = planes_nv12(read(rt, ptr, size), 96, 72, ws, hs, vu=fmt == NV21)
    want = reference_nv12(np.asarray(Image.fromarray(rgb).resize((96, 72), Image.BILINEAR)))
    for g, w in zip(got, want):
        assert np.abs(g - w).max() <= 2


def test_convert_nv12_to_rgb_and_bgr_matches_pillow(rt, chan):
    channel, stream = chan
    rgb = rgb_image(32, 16, seed=3)
    src, _, _, ws, hs = alloc_pic(rt, NV12, 32, 16)
    data = nv12(rgb, ws, hs)
    src = pic_desc(put(rt, data), len(data), NV12, 32, 16, ws, hs)
    y, u, v = reference_nv12(rgb)
    ycc = np.stack([y, np.repeat(np.repeat(u, 2, 0), 2, 1), np.repeat(np.repeat(v, 2, 0), 2, 1)],
                   -1).astype(np.uint8)
    want = np.asarray(Image.fromarray(ycc, "YCbCr").convert("RGB")).astype(int)
    for fmt, order in ((RGB, slice(None)), (BGR, slice(None, None, -1))):
        out = put(rt, b"", extra=32 * 16 * 3)
        # acl_dvpp.h: the output's width, height and strides may be left 0
        dst = pic_desc(out, 32 * 16 * 3, fmt, 0, 0, 0, 0)
        assert m.dvpp_vpc_convert_color_async(channel, src, dst, stream) == 0
        assert acl.rt.synchronize_stream(stream) == 0
        got = read(rt, out, 32 * 16 * 3).reshape(16, 32, 3)[:, :, order].astype(int)
        assert np.abs(got - want).max() <= 2


def test_crop_is_exact_and_results_appear_at_synchronize(rt, chan):
    channel, stream = chan
    rng = np.random.default_rng(5)
    w, h = 48, 32
    ws, hs, size = strides_for(vpc_rules(rt.profile), NV12, w, h)
    raw = rng.integers(0, 256, size, dtype=np.uint8)
    src = pic_desc(put(rt, raw.tobytes()), size, NV12, w, h, ws, hs)
    dst, out, osize, ows, ohs = alloc_pic(rt, NV12, 20, 10, fill=0xAB)
    roi = m.dvpp_create_roi_config(8, 27, 6, 15)  # 20x10 at (8, 6)
    assert m.dvpp_vpc_crop_async(channel, src, dst, roi, stream) == 0
    assert (read(rt, out, osize) == 0xAB).all()  # queued, not yet run
    assert acl.rt.synchronize_stream(stream) == 0
    got = read(rt, out, osize)
    y = raw[:ws * hs].reshape(hs, ws)[6:16, 8:28]
    uv = raw[ws * hs:].reshape(hs // 2, ws)[3:8, 8:28]
    assert (got[:ows * ohs].reshape(ohs, ows)[:10, :20] == y).all()
    assert (got[ows * ohs:].reshape(ohs // 2, ows)[:5, :20] == uv).all()


def test_crop_and_paste_writes_only_the_paste_area(rt, chan):
    channel, stream = chan
    rgb = rgb_image(40, 40, seed=7)
    src, _ = rgb_pic(rt, rgb)
    dst, out, size, ws, hs = alloc_pic(rt, RGB, 64, 48, fill=0x11)
    crop = m.dvpp_create_roi_config(0, 19, 0, 19)
    paste = m.dvpp_create_roi_config(10, 49, 4, 43)  # 40x40: a 2x nearest upscale
    config = m.dvpp_create_resize_config()
    assert m.dvpp_set_resize_config_interpolation(config, 2) == 0
    assert m.dvpp_vpc_crop_resize_paste_async(channel, src, dst, crop, paste, config,
                                              stream) == 0
    assert acl.rt.synchronize_stream(stream) == 0
    got = read(rt, out, size).reshape(hs, ws)[:48, :64 * 3].reshape(48, 64, 3)
    want = np.repeat(np.repeat(rgb[:20, :20], 2, 0), 2, 1)
    assert (got[4:44, 10:50] == want).all()
    outside = np.ones((48, 64), bool)
    outside[4:44, 10:50] = False
    assert (got[outside] == 0x11).all()


def test_downscale_by_two_is_pillows_reduce(rt, chan):
    channel, stream = chan
    rgb = rgb_image(64, 32, seed=2)
    src, _ = rgb_pic(rt, rgb)
    dst, out, size, _ws, _hs = alloc_pic(rt, RGB, 32, 16)
    config = m.dvpp_create_resize_config()
    assert m.dvpp_vpc_resize_async(channel, src, dst, config, stream) == 0  # 0: bilinear
    assert acl.rt.synchronize_stream(stream) == 0
    got = read(rt, out, size).reshape(16, 32, 3).astype(int)
    assert np.abs(got - np.asarray(Image.fromarray(rgb).reduce(2)).astype(int)).max() <= 1


def test_make_border(rt, chan):
    channel, stream = chan
    rgb = rgb_image(20, 10, seed=4)
    src, _ = rgb_pic(rt, rgb)
    for kind, mode in ((0, None), (1, "edge"), (2, "symmetric"), (3, "reflect")):
        dst, out, size, _ws, _hs = alloc_pic(rt, RGB, 26, 14)
        border = m.dvpp_create_border_config()
        for setter, value in ((m.dvpp_set_border_config_border_type, kind),
                              (m.dvpp_set_border_config_top, 1),
                              (m.dvpp_set_border_config_bottom, 3),
                              (m.dvpp_set_border_config_left, 2),
                              (m.dvpp_set_border_config_right, 4)):
            assert setter(border, value) == 0
        for i, value in enumerate((10.0, 20.0, 30.0)):
            assert m.dvpp_set_border_config_value(border, i, value) == 0
        assert m.dvpp_vpc_make_border_async(channel, src, dst, border, stream) == 0
        assert acl.rt.synchronize_stream(stream) == 0
        got = read(rt, out, size).reshape(14, 26, 3)
        pad = ((1, 3), (2, 4), (0, 0))
        want = (np.pad(rgb, pad, constant_values=0) if mode is None else
                np.pad(rgb, pad, mode=mode))
        if mode is None:
            want[:1], want[-3:], want[:, :2], want[:, -4:] = ([10, 20, 30],) * 4
        assert (got == want).all(), kind
        # the output must be the input plus its borders
        wrong, *_ = alloc_pic(rt, RGB, 24, 14)
        assert m.dvpp_vpc_make_border_async(channel, src, wrong, border, stream) == INVALID_PARAM


def test_batch_crop_resize(rt, chan):
    channel, stream = chan
    images = [rgb_image(32, 32, seed=s) for s in (1, 2)]
    src_batch = m.dvpp_create_batch_pic_desc(2)
    for i, image in enumerate(images):
        _, ptr = rgb_pic(rt, image)
        pic_desc(ptr, 32 * 32 * 3, RGB, 32, 32, 96, 32, m.dvpp_get_pic_desc(src_batch, i))
    dst_batch = m.dvpp_create_batch_pic_desc(3)
    outs = [alloc_pic(rt, RGB, 16, 16, desc=m.dvpp_get_pic_desc(dst_batch, i)) for i in range(3)]
    crops = [m.dvpp_create_roi_config(0, 31, 0, 31), m.dvpp_create_roi_config(0, 15, 0, 15),
             m.dvpp_create_roi_config(16, 31, 16, 31)]
    config = m.dvpp_create_resize_config()
    assert m.dvpp_set_resize_config_interpolation(config, 2) == 0
    assert m.dvpp_vpc_batch_crop_resize_async(channel, src_batch, [1, 2], dst_batch, crops,
                                              config, stream) == 0
    assert acl.rt.synchronize_stream(stream) == 0
    wants = [images[0][::2, ::2], images[1][:16, :16], images[1][16:, 16:]]
    for (_, ptr, size, _, _), want in zip(outs, wants):
        assert (read(rt, ptr, size).reshape(16, 16, 3) == want).all()
    # pyacl's shape: the destination batch and the code
    assert m.dvpp_vpc_batch_crop_async(channel, src_batch, [1, 2], dst_batch, crops,
                                       stream) == (dst_batch, 0)
    assert acl.rt.synchronize_stream(stream) == 0
    # counts that do not add up, a tuple for a list, too many areas
    assert m.dvpp_vpc_batch_crop_async(channel, src_batch, [1, 1], dst_batch, crops,
                                       stream) == (0, INVALID_PARAM)
    assert m.dvpp_vpc_batch_crop_async(channel, src_batch, (1, 2), dst_batch, crops,
                                       stream) == (0, INVALID_PARAM)
    assert m.dvpp_vpc_batch_crop_async(channel, src_batch, [1, 1, 1], dst_batch, crops,
                                       stream) == (0, INVALID_PARAM)


@pytest.mark.parametrize("fmt", sorted(LAYOUTS))
def test_every_layout_round_trips(fmt):
    # what encode_rows writes, decode reads back (chroma subsampled: blocks of one color)
    layout = LAYOUTS[fmt]
    w, h = 20, 12
    rng = np.random.default_rng(fmt)
    block = rng.integers(0, 256, (h // 2, w // 2, 3), dtype=np.uint8)
    image = np.repeat(np.repeat(block, 2, 0), 2, 1)
    if layout.kind == "400":
        image[:, :, 1:] = 128
    ws, hs, size = strides_for(vpc_rules(type("P", (), {"name": "310P", "dvpp_type": True})),
                               fmt, w, h)
    raw = np.full(size, 0xEE, np.uint8)
    for offset, chunk in encode_rows(fmt, image, ws, hs, 0, 0):
        assert offset + len(chunk) <= size
        raw[offset:offset + len(chunk)] = np.frombuffer(chunk, np.uint8)
    pic = Picture("p", 1, size, fmt, w, h, ws, hs, size)
    assert (decode(pic, raw) == image).all()


# -- the rules --------------------------------------------------------------------------------

def test_310p_needs_16_aligned_width_strides_and_yuv420sp_output():
    rt = runtime("310P")
    try:
        channel = m.dvpp_create_channel_desc()
        assert m.dvpp_create_channel(channel) == 0
        w, h = 40, 20
        data = bytes(40 * 20 * 3 // 2)
        src = pic_desc(put(rt, data), len(data), NV12, w, h, 40, 20)  # stride 40: not 16-aligned
        dst, *_ = alloc_pic(rt, NV12, 32, 16)
        config = m.dvpp_create_resize_config()
        assert m.dvpp_vpc_resize_async(channel, src, dst, config, 0) == INVALID_PARAM
        assert "aligned to 16" in acl.get_recent_err_msg()
        ws, hs, size = strides_for(vpc_rules(rt.profile), NV12, w, h)
        assert (ws, hs, size) == (48, 20, 48 * 20 * 3 // 2)
        src = pic_desc(put(rt, bytes(size)), size, NV12, w, h, ws, hs)
        assert m.dvpp_vpc_resize_async(channel, src, dst, config, 0) == 0
        out = put(rt, b"", extra=48 * 16 * 3)
        rgb_dst = pic_desc(out, 48 * 16 * 3, RGB, 32, 16, 96, 16)
        assert m.dvpp_vpc_resize_async(channel, src, rgb_dst, config, 0) == INVALID_PARAM
        assert "not a VPC output format" in acl.get_recent_err_msg()
        # interpolation 3 and 4 are not the 310P's
        assert m.dvpp_set_resize_config_interpolation(config, 3) == 0
        assert m.dvpp_vpc_resize_async(channel, src, dst, config, 0) == INVALID_PARAM
        # a paste area's left offset: a multiple of 16 here, of 2 on the A2
        crop = m.dvpp_create_roi_config(0, 31, 0, 15)
        for left, want in ((8, INVALID_PARAM), (16, 0)):
            paste = m.dvpp_create_roi_config(left, left + 11, 0, 9)
            assert m.dvpp_vpc_crop_and_paste_async(channel, src, dst, crop, paste, 0) == want
            if want:
                assert "multiple of 16" in acl.get_recent_err_msg()
        assert acl.rt.synchronize_device() == 0
    finally:
        rt.__exit__(None, None, None)


@pytest.mark.parametrize("product, accepted", [("A2", False), ("310P", False), ("950PR", True)])
def test_dvpp_memory_is_required_where_the_product_has_it(product, accepted):
    rt = runtime(product)
    try:
        channel = m.dvpp_create_channel_desc()
        assert m.dvpp_create_channel(channel) == 0
        rules = vpc_rules(rt.profile)
        ws, hs, size = strides_for(rules, NV12, 32, 16)
        plain = put(rt, bytes(size), dvpp=False)
        src = pic_desc(plain, size, NV12, 32, 16, ws, hs)
        dst, *_ = alloc_pic(rt, NV12, 32, 16)
        ret = m.dvpp_vpc_resize_async(channel, src, dst, m.dvpp_create_resize_config(), 0)
        assert ret == (0 if accepted else INVALID_PARAM)
        kinds = [r.kind for r in rt.sanitizer.reports]
        assert kinds == ([] if accepted else ["wrong-memory"])
        if not accepted:
            assert "dvpp_malloc" in acl.get_recent_err_msg()
    finally:
        rt.__exit__(None, None, None)


def test_a_buffer_too_small_is_refused_and_named(rt, chan):
    channel, stream = chan
    rgb = rgb_image(32, 16)
    src, _ = rgb_pic(rt, rgb)
    ws, hs, size = strides_for(vpc_rules(rt.profile), NV12, 32, 16)
    short = put(rt, bytes([7]) * (size - 1))
    dst = pic_desc(short, size, NV12, 32, 16, ws, hs)
    config = m.dvpp_create_resize_config()
    assert m.dvpp_vpc_resize_async(channel, src, dst, config, stream) == INVALID_PARAM
    (report,) = rt.sanitizer.reports
    assert report.kind == "media-overflow" and "1 bytes past its end" in report.where
    assert acl.rt.synchronize_stream(stream) == 0
    assert (read(rt, short, size - 1) == 7).all()  # nothing queued, nothing written
    # a declared size below the formula's is refused too (and reported as nothing)
    assert m.dvpp_set_pic_desc_size(dst, size - 1) == 0
    assert m.dvpp_vpc_resize_async(channel, src, dst, config, stream) == INVALID_PARAM
    assert "below the" in acl.get_recent_err_msg() and len(rt.sanitizer.reports) == 1


@pytest.mark.parametrize("field, value, words", [
    ("width", 31, "even width"), ("height", 15, "even height"),
    ("width_stride", 30, "width stride"),
    ("height_stride", 15, "height stride"), ("format", 99, "not a VPC"), ("width", 8, "outside"),
    ("data", 0, "no data"), ("size", 10, "below")])
def test_each_rule_is_refused_with_its_reason(rt, chan, field, value, words):
    channel, stream = chan
    src, *_ = alloc_pic(rt, NV12, 32, 16, fill=0)
    dst, *_ = alloc_pic(rt, NV12, 32, 16)
    setter = getattr(m, f"dvpp_set_pic_desc_{field}")
    assert setter(dst, value) == 0
    assert m.dvpp_vpc_resize_async(channel, src, dst, m.dvpp_create_resize_config(),
                                   stream) == INVALID_PARAM
    assert words in acl.get_recent_err_msg()


def test_areas_scales_and_channels(rt, chan):
    channel, stream = chan
    src, *_ = alloc_pic(rt, NV12, 64, 64, fill=0)
    dst, *_ = alloc_pic(rt, NV12, 32, 32)
    for area, words in (((1, 20, 0, 19), "even"), ((0, 63, 0, 65), "not inside"),
                        ((0, 5, 0, 5), "below the VPC's 10x6")):
        roi = m.dvpp_create_roi_config(*area)
        assert m.dvpp_vpc_crop_async(channel, src, dst, roi, stream) == INVALID_PARAM
        assert words in acl.get_recent_err_msg()
    # a crop of 10x6 scaled to 4096x... : beyond 16x
    big, *_ = alloc_pic(rt, NV12, 320, 32)
    roi = m.dvpp_create_roi_config(0, 9, 0, 5)
    assert m.dvpp_vpc_crop_async(channel, src, big, roi, stream) == INVALID_PARAM
    assert "1/32 to 16" in acl.get_recent_err_msg()
    # NULL crop area, destroyed and JPEGD-only channels
    assert m.dvpp_vpc_crop_async(channel, src, dst, 0, stream) == INVALID_PARAM
    jpegd = m.dvpp_create_channel_desc()
    assert m.dvpp_set_channel_desc_mode(jpegd, m.DVPP_CHNMODE_JPEGD) == 0
    assert m.dvpp_create_channel(jpegd) == 0
    config = m.dvpp_create_resize_config()
    assert m.dvpp_vpc_resize_async(jpegd, src, dst, config, stream) == INVALID_PARAM
    assert "DVPP_CHNMODE_VPC" in acl.get_recent_err_msg()
    closed = m.dvpp_create_channel_desc()
    assert m.dvpp_vpc_resize_async(closed, src, dst, config, stream) == INVALID_PARAM
    assert m.dvpp_destroy_channel_desc(closed) == 0
    assert m.dvpp_vpc_resize_async(closed, src, dst, config, stream) == INVALID_HANDLE
    assert m.dvpp_vpc_resize_async(channel, src, dst, config, 0x1234) == INVALID_HANDLE
    assert acl.rt.synchronize_stream(stream) == 0


def test_pyr_down(rt, chan):
    channel, stream = chan
    rgb = rgb_image(40, 20)
    src, _ = rgb_pic(rt, rgb)
    dst, out, size, ws, hs = alloc_pic(rt, YUV400, 20, 10)
    assert m.dvpp_vpc_pyr_down_async(channel, src, dst, 0, stream) == 0
    assert acl.rt.synchronize_stream(stream) == 0
    y = np.asarray(Image.fromarray(rgb).convert("L")).astype(float)
    k = np.array([1, 4, 6, 4, 1]) / 16
    for axis in (0, 1):
        p = np.pad(y, [(2, 2) if a == axis else (0, 0) for a in (0, 1)], mode="reflect")
        y = sum(k[i] * np.take(p, range(i, i + y.shape[axis]), axis=axis) for i in range(5))
    want = np.floor(y[::2, ::2] + 0.5)
    got = read(rt, out, size).reshape(hs, ws)[:10, :20]
    assert np.abs(got - want).max() <= 2
    assert m.dvpp_vpc_pyr_down_async(channel, src, dst, 1, stream) == INVALID_PARAM


def test_an_odd_input_height_is_read_an_odd_output_height_refused(rt, chan):
    channel, stream = chan
    # NV12 32x15 (strides 32x16): its last luma row takes the last chroma row
    ws, hs, size = strides_for(vpc_rules(rt.profile), NV12, 32, 15)
    assert (ws, hs, size) == (32, 16, 768)
    raw = np.zeros(size, np.uint8)
    raw[:ws * hs] = 200
    raw[ws * hs:] = np.tile([90, 160], size // 2 - ws * hs // 2)[:size - ws * hs]
    src = pic_desc(put(rt, raw.tobytes()), size, NV12, 32, 15, ws, hs)
    out = put(rt, b"", extra=32 * 15 * 3)
    dst = pic_desc(out, 32 * 15 * 3, RGB, 32, 15, 96, 15)
    assert m.dvpp_vpc_convert_color_async(channel, src, dst, stream) == 0
    assert acl.rt.synchronize_stream(stream) == 0
    got = read(rt, out, 32 * 15 * 3).reshape(15, 32, 3)
    ycc = np.zeros((15, 32, 3), np.uint8)
    ycc[:, :, 0], ycc[:, :, 1], ycc[:, :, 2] = 200, 90, 160
    want = np.asarray(Image.fromarray(ycc, "YCbCr").convert("RGB")).astype(int)
    assert np.abs(got.astype(int) - want).max() <= 2
    odd = pic_desc(put(rt, b"", extra=size), size, NV12, 32, 15, ws, hs)
    assert m.dvpp_vpc_resize_async(channel, src, odd, m.dvpp_create_resize_config(),
                                   stream) == INVALID_PARAM
    assert "even height" in acl.get_recent_err_msg()


def test_threads_resize_on_their_own_streams(rt):
    import threading
    results, errors = {}, []
    rgb = rgb_image(64, 32, seed=9)

    def work(i):
        try:
            with rt:
                rt.set_device(0)
                stream, ret = acl.rt.create_stream()
                assert ret == 0
                channel = m.dvpp_create_channel_desc()
                assert m.dvpp_create_channel(channel) == 0
                src, _ = rgb_pic(rt, rgb)
                dst, out, size, _ws, _hs = alloc_pic(rt, RGB, 32, 16)
                config = m.dvpp_create_resize_config()
                for _ in range(5):
                    assert m.dvpp_vpc_resize_async(channel, src, dst, config, stream) == 0
                assert acl.rt.synchronize_stream(stream) == 0
                results[i] = read(rt, out, size).copy()
        except Exception as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    want = np.asarray(Image.fromarray(rgb).reduce(2)).reshape(-1)
    for got in results.values():
        assert np.abs(got.astype(int) - want).max() <= 1
