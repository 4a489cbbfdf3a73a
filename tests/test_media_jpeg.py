"""acl.media's JPEG and PNG codecs: pixels against Pillow, the memory rules, hostile images."""

import io
import struct
import tracemalloc
import zlib

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from PIL import Image

import ascend_memsim.acl as acl
from ascend_memsim import MiB, Runtime, Sanitizer
from ascend_memsim.media import jpeg as J
from ascend_memsim.media import png as Pn
from ascend_memsim.media.codec import jpegd_width_align
from ascend_memsim.media.constants import JpegFormat, PixelFormat

m = acl.media
NV12 = PixelFormat.PIXEL_FORMAT_YUV_SEMIPLANAR_420
NV21 = PixelFormat.PIXEL_FORMAT_YVU_SEMIPLANAR_420
RGB888, RGBA8888 = PixelFormat.PIXEL_FORMAT_RGB_888, PixelFormat.PIXEL_FORMAT_RGBA_8888
UNKNOWN = PixelFormat.PIXEL_FORMAT_UNKNOWN
INVALID_PARAM, FORMAT_NOT_MATCH, UNSUPPORTED_JPEG = 100000, 100027, 148052
FAILURE, FEATURE_UNSUPPORTED = 500001, 200006
#: tolerances against the Pillow reference (its 8-bit RGB decode turned back into BT.601
#: YCbCr): luma +-3 (the reference's three rounded RGB channels), chroma +-3 (averaged over
#: 2 x 2 after libjpeg's upsampling, against the reference's own 2 x 2 average)
LUMA_TOL, CHROMA_TOL = 3, 3


def jpeg_bytes(w, h, *, seed=0, quality=90, subsampling=2, **kw):
    rng = np.random.default_rng(seed)
    # smooth content, as photographs are (noise would test the codec, not the layout)
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.stack([(xx * 255 // max(w - 1, 1)), (yy * 255 // max(h - 1, 1)),
                     ((xx + yy) * 127 // max(w + h, 1))], axis=2)
    arr = np.clip(base + rng.integers(-8, 8, base.shape), 0, 255).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(arr).save(out, "JPEG", quality=quality, subsampling=subsampling, **kw)
    return out.getvalue()


def ycbcr_reference(data):
    """Pillow's RGB decode, turned into full-range BT.601 YCbCr (JFIF) in float."""
    rgb = np.asarray(Image.open(io.BytesIO(data)).convert("RGB")).astype(np.float64)
    r, g, b = rgb[..., 0], rgb[..., 1], rgb[..., 2]
    y = 0.299 * r + 0.587 * g + 0.114 * b
    cb = 128 - 0.168736 * r - 0.331264 * g + 0.5 * b
    cr = 128 + 0.5 * r - 0.418688 * g - 0.081312 * b
    return y, cb, cr


class Dvpp:
    """A runtime, a stream, a channel and helpers, as the vendor's samples set them up."""

    def __init__(self, product="A2"):
        self.rt = Runtime(product, hbm_bytes=256 * MiB, ddr_bytes=256 * MiB,
                          sanitizer=Sanitizer(output=None))
        self.rt.__enter__()
        acl.rt.set_device(0)
        self.stream, _ = acl.rt.create_stream()
        self.channel = m.dvpp_create_channel_desc()
        assert m.dvpp_create_channel(self.channel) == 0
        self.host = []

    def close(self):
        self.rt.__exit__(None, None, None)

    def host_ptr(self, data):
        array = np.frombuffer(bytes(data), np.uint8).copy()
        self.host.append(array)
        return acl.util.numpy_to_ptr(array), array.size

    def device(self, data):
        ptr, size = self.host_ptr(data)
        dev, ret = m.dvpp_malloc(size)
        assert ret == 0
        assert acl.rt.memcpy(dev, size, ptr, size, 1) == 0
        return dev, size

    def read(self, dev, size):
        out = np.zeros(size, np.uint8)
        assert acl.rt.memcpy(acl.util.numpy_to_ptr(out), size, dev, size, 2) == 0
        return out

    def pic(self, data, size, fmt, **fields):
        desc = m.dvpp_create_pic_desc()
        m.dvpp_set_pic_desc_data(desc, data)
        m.dvpp_set_pic_desc_size(desc, size)
        m.dvpp_set_pic_desc_format(desc, int(fmt))
        for name, value in fields.items():
            getattr(m, f"dvpp_set_pic_desc_{name}")(desc, value)
        return desc

    def decode(self, image, fmt, size=None, png=False):
        """(ret of the call, ret of the sync, output desc, output buffer, its size)."""
        dev, n = self.device(image)
        ptr, _ = self.host_ptr(image)
        predict = m.dvpp_png_predict_dec_size if png else m.dvpp_jpeg_predict_dec_size
        if size is None:
            size, ret = predict(ptr, n, int(fmt))
            assert ret == 0
        out, ret = m.dvpp_malloc(max(size, 1))
        assert ret == 0
        desc = self.pic(out, size, fmt)
        call = m.dvpp_png_decode_async if png else m.dvpp_jpeg_decode_async
        ret = call(self.channel, dev, n, desc, self.stream)
        return ret, acl.rt.synchronize_stream(self.stream), desc, out, size


@pytest.fixture
def dvpp():
    d = Dvpp()
    yield d
    d.close()


def desc_fields(desc):
    return tuple(getattr(m, f"dvpp_get_pic_desc_{f}")(desc)
                 for f in ("width", "height", "width_stride", "height_stride", "format"))


# -- JPEGD -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", [NV12, NV21])
@pytest.mark.parametrize("subsampling", [0, 1, 2])
def test_jpeg_decode_matches_pillow_in_the_documented_layout(dvpp, fmt, subsampling):
    data = jpeg_bytes(151, 101, subsampling=subsampling)
    ret, sync, desc, out, size = dvpp.decode(data, fmt)
    assert (ret, sync) == (0, 0)
    # odd sizes round down to even for YUV420SP; strides: width to 64 (A2), height to 16
    assert desc_fields(desc) == (150, 100, 192, 112, int(fmt))
    # acldvppJpegPredictDecSize: NV12/NV21 from the width aligned to 128 (image_processor.cpp)
    assert size == 256 * 112 * 3 // 2
    raw = dvpp.read(out, 192 * 112 * 3 // 2)
    y_plane = raw[:192 * 112].reshape(112, 192)
    uv = raw[192 * 112:].reshape(56, 192)
    ref_y, ref_cb, ref_cr = ycbcr_reference(data)
    assert np.abs(y_plane[:100, :150] - ref_y[:100, :150]).max() <= LUMA_TOL
    assert not y_plane[100:].any() and not y_plane[:, 150:].any()   # padding rows/cols 0
    pairs = uv[:50, :150].reshape(50, 75, 2).astype(float)
    u, v = (pairs[..., 0], pairs[..., 1]) if fmt is NV12 else (pairs[..., 1], pairs[..., 0])
    avg = lambda p: p[:100, :150].reshape(50, 2, 75, 2).mean(axis=(1, 3))  # noqa: E731
    assert np.abs(u - avg(ref_cb)).max() <= CHROMA_TOL
    assert np.abs(v - avg(ref_cr)).max() <= CHROMA_TOL
    assert m.dvpp_get_pic_desc_ret_code(desc) == 0


@pytest.mark.parametrize("subsampling, fmt, factor", [
    (0, PixelFormat.PIXEL_FORMAT_YUV_SEMIPLANAR_444, 3),
    (0, PixelFormat.PIXEL_FORMAT_YVU_SEMIPLANAR_444, 3),
    (1, PixelFormat.PIXEL_FORMAT_YUV_SEMIPLANAR_422, 2),
    (1, PixelFormat.PIXEL_FORMAT_YVU_SEMIPLANAR_422, 2),
    (0, UNKNOWN, 3), (1, UNKNOWN, 2), (2, UNKNOWN, 1.5)])
def test_jpeg_decode_other_formats_and_the_source_format(dvpp, subsampling, fmt, factor):
    data = jpeg_bytes(64, 48, subsampling=subsampling)
    ret, sync, desc, out, size = dvpp.decode(data, fmt)
    assert (ret, sync) == (0, 0) and size == int(64 * 48 * factor)
    got = m.dvpp_get_pic_desc_format(desc)
    if fmt is UNKNOWN:
        # the source's own sampling, V before U (JPEGD chapter)
        assert got == {0: 6, 1: 4, 2: 2}[subsampling]
    else:
        assert got == int(fmt)
    raw = dvpp.read(out, size)
    ref_y = ycbcr_reference(data)[0]
    assert np.abs(raw[:64 * 48].reshape(48, 64) - ref_y).max() <= LUMA_TOL


def test_gray_jpeg_decodes_to_yuv400_or_neutral_chroma(dvpp):
    out = io.BytesIO()
    Image.fromarray((np.arange(64 * 40) % 251).astype(np.uint8).reshape(40, 64)).save(out, "JPEG")
    data = out.getvalue()
    ptr, n = dvpp.host_ptr(data)
    gray = int(JpegFormat.ACL_JPEG_CSS_GRAY)
    assert m.dvpp_jpeg_get_image_info_v2(ptr, n) == (64, 40, 1, gray, 0)
    ret, sync, _, buf, size = dvpp.decode(data, PixelFormat.PIXEL_FORMAT_YUV_400)
    assert (ret, sync, size) == (0, 0, 64 * 48)
    ret, sync, _desc, buf, size = dvpp.decode(data, NV12)
    raw = dvpp.read(buf, 64 * 48 * 3 // 2)
    assert (raw[64 * 48:] == 128).all()


def test_a_source_sampling_the_format_cannot_come_from_is_format_not_match(dvpp):
    data = jpeg_bytes(64, 48, subsampling=2)
    ptr, n = dvpp.host_ptr(data)
    assert m.dvpp_jpeg_predict_dec_size(ptr, n, 5) == (0, FORMAT_NOT_MATCH)   # 420 -> 444SP
    assert m.dvpp_jpeg_predict_dec_size(ptr, n, 12) == (0, FORMAT_NOT_MATCH)  # RGB: never
    ret, sync, desc, _, _ = dvpp.decode(data, PixelFormat.PIXEL_FORMAT_YUV_SEMIPLANAR_444,
                                        size=64 * 48 * 3)
    assert (ret, sync) == (0, FORMAT_NOT_MATCH)
    assert m.dvpp_get_pic_desc_ret_code(desc) == FORMAT_NOT_MATCH
    # a format JPEGD never outputs is refused at the call, nothing queued
    out, _ = m.dvpp_malloc(4096)
    bad = dvpp.pic(out, 4096, RGB888)
    dev, n = dvpp.device(data)
    assert m.dvpp_jpeg_decode_async(dvpp.channel, dev, n, bad, dvpp.stream) == FORMAT_NOT_MATCH


def test_one_byte_short_is_refused_named_and_nothing_is_written(dvpp):
    data = jpeg_bytes(100, 60)
    size = 128 * 64 * 3 // 2           # JPEGD's layout: 100 -> 128, 60 -> 64
    ret, sync, desc, out, _ = dvpp.decode(data, NV12, size=size - 1)
    assert (ret, sync) == (0, INVALID_PARAM)
    assert m.dvpp_get_pic_desc_ret_code(desc) == INVALID_PARAM
    report = next(r for r in dvpp.rt.sanitizer.reports if r.kind == "media-overflow")
    assert report.size == 1 and "1 byte past its end" in report.where
    assert report.address == out + size - 1
    # nothing written: the sanitizer still sees the buffer as never written
    assert m.dvpp_get_pic_desc_width(desc) == 0


def test_declared_sizes_past_the_buffer_and_ordinary_memory_are_refused_at_the_call(dvpp):
    data = jpeg_bytes(64, 48)
    dev, n = dvpp.device(data)
    out, _ = m.dvpp_malloc(4096)
    desc = dvpp.pic(out, 8192, NV12)      # declares more than the block holds
    assert m.dvpp_jpeg_decode_async(dvpp.channel, dev, n, desc, dvpp.stream) == INVALID_PARAM
    report = dvpp.rt.sanitizer.reports[-1]
    assert report.kind == "media-overflow" and "4096 bytes past its end" in report.where
    # the A2 has DVPP memory: acl.rt.malloc memory is refused (wrong-memory)
    plain, _ = acl.rt.malloc(8192, 0)
    desc = dvpp.pic(plain, 8192, NV12)
    assert m.dvpp_jpeg_decode_async(dvpp.channel, dev, n, desc, dvpp.stream) == INVALID_PARAM
    assert "not DVPP memory" in dvpp.rt.sanitizer.reports[-1].where
    assert acl.rt.synchronize_stream(dvpp.stream) == 0    # nothing was queued


def test_strides_set_on_the_output_are_used_or_refused(dvpp):
    data = jpeg_bytes(100, 60)
    size = 256 * 80 * 3 // 2
    dev, n = dvpp.device(data)
    out, _ = m.dvpp_malloc(size)
    desc = dvpp.pic(out, size, NV12, width_stride=256, height_stride=80)
    assert m.dvpp_jpeg_decode_async(dvpp.channel, dev, n, desc, dvpp.stream) == 0
    assert acl.rt.synchronize_stream(dvpp.stream) == 0
    assert desc_fields(desc) == (100, 60, 256, 80, int(NV12))
    raw = dvpp.read(out, size)
    ref_y = ycbcr_reference(data)[0]
    assert np.abs(raw[:256 * 80].reshape(80, 256)[:60, :100] - ref_y).max() <= LUMA_TOL
    for ws, hs in ((96, 64), (160, 64), (128, 70), (128, 48)):
        bad = dvpp.pic(out, size, NV12, width_stride=ws, height_stride=hs)
        assert m.dvpp_jpeg_decode_async(dvpp.channel, dev, n, bad, dvpp.stream) == 0
        assert acl.rt.synchronize_stream(dvpp.stream) == INVALID_PARAM, (ws, hs)
        assert "stride" in acl.get_recent_err_msg()


def test_jpegd_stride_alignment_per_product():
    class Fake:
        def __init__(self, soc):
            self.profile = type("P", (), {"soc_name": soc})()
    assert [jpegd_width_align(Fake(s)) for s in (
        "Ascend910B2", "Ascend910_9392", "Ascend310P3", "Ascend310B1", "Ascend310",
        "Ascend910A", "Ascend910ProB", "")] == [64, 64, 64, 64, 128, 128, 128, 64]
    with Runtime("310P", ddr_bytes=64 * MiB):
        acl.rt.set_device(0)
        data = jpeg_bytes(65, 33)
        arr = np.frombuffer(data, np.uint8).copy()
        size, ret = m.dvpp_jpeg_predict_dec_size(acl.util.numpy_to_ptr(arr), arr.size, 1)
        # predicted from the width aligned to 128, the height to 16
        assert (size, ret) == (128 * 48 * 3 // 2, 0)
        header = J.read_header(data)
        # 65 x 33 rounds down to 64 x 32 for YUV420SP: strides 64 and 32 on 310P
        assert J.jpegd_layout(header, NV12, 64).size == 64 * 32 * 3 // 2


def test_950_has_no_jpeg_codec():
    with Runtime("950PR", hbm_bytes=64 * MiB):
        acl.rt.set_device(0)
        arr = np.frombuffer(jpeg_bytes(64, 48), np.uint8).copy()
        assert m.dvpp_jpeg_get_image_info(acl.util.numpy_to_ptr(arr), arr.size) == (
            0, 0, 0, FEATURE_UNSUPPORTED)
        assert "950" in acl.get_recent_err_msg()


def test_exif_orientation_swaps_width_and_height(dvpp):
    exif = Image.Exif()
    exif[0x0112] = 6
    data = jpeg_bytes(96, 64, exif=exif.tobytes())
    ptr, n = dvpp.host_ptr(data)
    assert m.dvpp_jpeg_get_image_info(ptr, n) == (64, 96, 3, 0)
    ret, sync, desc, _out, _size = dvpp.decode(data, NV12)
    assert (ret, sync) == (0, 0) and desc_fields(desc)[:2] == (64, 96)


# -- unsupported and hostile JPEGs -----------------------------------------------------------------

@pytest.mark.parametrize("kind", ["progressive", "cmyk"])
def test_jpegs_jpegd_does_not_take_are_unsupported_jpeg(dvpp, kind):
    if kind == "progressive":
        data = jpeg_bytes(64, 48, progressive=True)
    else:
        out = io.BytesIO()
        Image.new("CMYK", (64, 48), (1, 2, 3, 4)).save(out, "JPEG")
        data = out.getvalue()
    ptr, n = dvpp.host_ptr(data)
    # the header is readable, as libjpeg reads it
    assert m.dvpp_jpeg_get_image_info(ptr, n)[3] == 0
    ret, sync, desc, _, _ = dvpp.decode(data, NV12, size=64 * 48 * 3)
    assert (ret, sync) == (0, UNSUPPORTED_JPEG)
    assert m.dvpp_get_pic_desc_ret_code(desc) == UNSUPPORTED_JPEG


def test_arithmetic_coded_frame_is_unsupported():
    data = bytearray(jpeg_bytes(64, 48))
    sof = data.index(b"\xff\xc0")
    data[sof + 1] = 0xC9
    header = J.read_header(bytes(data))
    assert header.unsupported() == "arithmetic coding"


def sof_jpeg(width, height):
    """A header-only JPEG: SOI, SOF0 of the given size, SOS (no scan data)."""
    sof = struct.pack(">BHHB", 8, height, width, 3) + bytes([1, 0x22, 0, 2, 0x11, 1, 3, 0x11, 1])
    sos = bytes([3, 1, 0, 2, 0x11, 3, 0x11, 0, 63, 0])
    return (b"\xff\xd8" + b"\xff\xc0" + struct.pack(">H", len(sof) + 2) + sof
            + b"\xff\xda" + struct.pack(">H", len(sos) + 2) + sos)


def test_huge_dimensions_are_refused_before_any_pixel_is_decoded(dvpp):
    data = sof_jpeg(60000, 60000)
    ptr, n = dvpp.host_ptr(data)
    assert m.dvpp_jpeg_get_image_info(ptr, n) == (60000, 60000, 3, 0)
    assert m.dvpp_jpeg_predict_dec_size(ptr, n, 1) == (0, INVALID_PARAM)
    ret, sync, _desc, _, _ = dvpp.decode(data, NV12, size=4096)
    assert (ret, sync) == (0, INVALID_PARAM)


@pytest.mark.parametrize("cut", [1, 2, 3, 10, 20, 100])
def test_truncated_headers_are_failure(dvpp, cut):
    data = jpeg_bytes(64, 48)
    sos = data.index(b"\xff\xda")
    short = data[:min(cut, sos)]
    ptr, n = dvpp.host_ptr(short)
    assert m.dvpp_jpeg_get_image_info(ptr, n)[3] in (FAILURE,)


def test_corrupt_scan_data_fails_the_sync_not_the_program(dvpp):
    data = bytearray(jpeg_bytes(64, 48))
    sos = data.index(b"\xff\xda")
    data = bytes(data[:sos + 20])        # header complete, scan cut
    ret, sync, _desc, _, _ = dvpp.decode(data, NV12, size=64 * 48 * 3)
    assert ret == 0 and sync in (0, FAILURE)   # libjpeg pads a short scan, as JPEGD's
    #                                            software path decodes "mcu数据不足" images


def _with_frame_size(data, width, height, keep):
    """``data`` claiming ``width`` x ``height``, cut ``keep`` bytes into its scan, ended by
    EOI (libjpeg pads what is missing)."""
    data = bytearray(data)
    sof = data.index(b"\xff\xc0")
    data[sof + 5:sof + 9] = struct.pack(">HH", height, width)
    sos = data.index(b"\xff\xda")
    scan = sos + 2 + struct.unpack(">H", data[sos + 2:sos + 4])[0]
    return bytes(data[:scan + keep]) + b"\xff\xd9"


def test_a_tiny_jpeg_claiming_8192_by_8192_is_refused_in_memory_bounded_by_the_file(dvpp):
    # Regression: 1.5 KB claiming 8192 x 8192 decoded (libjpeg pads the missing MCUs) in
    # 11.6 s and 1.3 GB. A Huffman scan spends at least 2 bits per 8 x 8 block: this 4:2:0
    # frame has 1024 x 1024 + 2 x 512 x 512 blocks, so its scan needs 393,216 bytes.
    bomb = _with_frame_size(jpeg_bytes(64, 48), 8192, 8192, 64)
    assert len(bomb) < 2048
    ptr, n = dvpp.host_ptr(bomb)
    assert m.dvpp_jpeg_get_image_info(ptr, n) == (8192, 8192, 3, 0)   # the header is fine
    tracemalloc.start()
    try:
        ret, sync, desc, _, size = dvpp.decode(bomb, NV12)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert size == 8192 * 8192 * 3 // 2            # the program's own buffer, as predicted
    assert (ret, sync) == (0, FAILURE)
    assert m.dvpp_get_pic_desc_ret_code(desc) == FAILURE
    assert "cannot hold its 8192 x 8192 frame" in acl.get_recent_err_msg()
    assert peak < 2 * MiB
    assert J.read_header(bomb).blocks == 1024 * 1024 + 2 * 512 * 512


def test_a_jpeg_cut_short_still_decodes_as_the_dvpps_software_path_does(dvpp):
    # JPEGD constraints: "支持mcu数据不足的异常图片解码"; libjpeg pads the missing MCUs
    data = jpeg_bytes(256, 256)
    cut = _with_frame_size(data, 256, 256, (len(data) * 3) // 5)
    ret, sync, desc, _, _ = dvpp.decode(cut, NV12)
    assert (ret, sync) == (0, 0)
    assert desc_fields(desc)[:2] == (256, 256)


def test_sampling_factors_outside_1_to_4_are_an_unreadable_header(dvpp):
    data = bytearray(jpeg_bytes(64, 48))
    sof = data.index(b"\xff\xc0")
    data[sof + 11] = 0x02                           # the first component: h 0, v 2
    ptr, n = dvpp.host_ptr(bytes(data))
    assert m.dvpp_jpeg_get_image_info(ptr, n)[-1] == FAILURE   # libjpeg JERR_BAD_SAMPLING


@given(st.binary(max_size=300))
@example(b"\xff\xd8")
@example(b"\xff\xd8\xff\xc0\x00\x02\xff\xda\x00\x02")
@example(b"\xff\xd8\xff\xe1\x00\x10Exif\x00\x00MM\x00\x2a\xff\xff\xff\xff")
def test_random_bytes_never_raise_from_the_header_reader(data):
    for blob in (data, b"\xff\xd8" + data):
        try:
            J.read_header(blob)
        except J.UnreadableImage:
            pass


def test_info_refuses_device_memory_in_the_host_run_mode(dvpp):
    dev, n = dvpp.device(jpeg_bytes(64, 48))
    assert m.dvpp_jpeg_get_image_info(dev, n) == (0, 0, 0, INVALID_PARAM)
    assert "host memory" in acl.get_recent_err_msg()


def test_decode_refuses_host_memory_and_bad_handles(dvpp):
    data = jpeg_bytes(64, 48)
    ptr, n = dvpp.host_ptr(data)
    out, _ = m.dvpp_malloc(8192)
    desc = dvpp.pic(out, 8192, NV12)
    assert m.dvpp_jpeg_decode_async(dvpp.channel, ptr, n, desc, dvpp.stream) == INVALID_PARAM
    assert dvpp.rt.sanitizer.reports[-1].kind == "wrong-memory"
    dev, n = dvpp.device(data)
    assert m.dvpp_jpeg_decode_async(dvpp.channel, dev, n, 12345, dvpp.stream) == 107017
    m.dvpp_destroy_pic_desc(desc)
    assert m.dvpp_jpeg_decode_async(dvpp.channel, dev, n, desc, dvpp.stream) == 107017


# -- JPEGE -----------------------------------------------------------------------------------------

def nv12_picture(w, h, wstride, hstride, seed=0):
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:hstride, 0:wstride]
    y = ((xx * 3 + yy * 2) % 256).astype(np.uint8)
    uv = np.full((hstride // 2, wstride), 128, np.uint8)
    uv[:h // 2, :w] = rng.integers(100, 156, (h // 2, w), dtype=np.uint8)
    return np.concatenate([y.ravel(), uv.ravel()]), y


def encode(dvpp, w, h, wstride, hstride, level, fmt=NV12, raw=None, capacity=None):
    if raw is None:
        raw, _ = nv12_picture(w, h, wstride, hstride)
    src, n = dvpp.device(raw.tobytes())
    desc = dvpp.pic(src, n, fmt, width=w, height=h, width_stride=wstride,
                    height_stride=hstride)
    cfg = m.dvpp_create_jpege_config()
    m.dvpp_set_jpege_config_level(cfg, level)
    predicted, ret = m.dvpp_jpeg_predict_enc_size(desc, cfg)
    if ret:
        return ret, None, None
    capacity = predicted if capacity is None else capacity
    out, _ = m.dvpp_malloc(capacity)
    size = np.array([capacity], np.uint32)
    ret = m.dvpp_jpeg_encode_async(dvpp.channel, desc, out, acl.util.numpy_to_ptr(size), cfg,
                                   dvpp.stream)
    sync = acl.rt.synchronize_stream(dvpp.stream)
    assert (ret, sync) == (0, 0)
    return 0, predicted, bytes(dvpp.read(out, int(size[0])))


def test_jpeg_encode_round_trips_and_stays_inside_the_prediction(dvpp):
    raw, y = nv12_picture(96, 64, 112, 64)
    _ret, predicted, jpg = encode(dvpp, 96, 64, 112, 64, 95, raw=raw)
    # acldvppJpegPredictEncSize: input bytes + 640 + 128, rounded up to 2 MiB
    assert predicted == 2 * MiB and len(jpg) <= predicted
    back = np.asarray(Image.open(io.BytesIO(jpg)).convert("YCbCr"))
    assert back.shape == (64, 96, 3)
    assert np.abs(back[..., 0].astype(int) - y[:64, :96]).mean() < 3


@pytest.mark.parametrize("w, h, wstride, hstride, code", [
    (96, 64, 100, 64, INVALID_PARAM),     # width stride not 16-aligned
    (96, 64, 80, 64, INVALID_PARAM),      # width stride below the width
    (96, 64, 96, 70, INVALID_PARAM),      # height stride above the height, not 16-aligned
    (96, 65, 96, 65, INVALID_PARAM),      # odd height for YUV420SP
    (16, 64, 16, 64, INVALID_PARAM),      # below 32
    (8200, 64, 8208, 64, INVALID_PARAM),  # above 8192
])
def test_jpege_input_rules(dvpp, w, h, wstride, hstride, code):
    raw = np.zeros(max(wstride * hstride * 3 // 2, 1), np.uint8)
    assert encode(dvpp, w, h, wstride, hstride, 90, raw=raw)[0] == code


def test_jpege_format_and_packed_stride(dvpp):
    raw = np.zeros(4096 * 4, np.uint8)
    assert encode(dvpp, 64, 48, 64, 48, 90, fmt=RGB888, raw=raw)[0] == FORMAT_NOT_MATCH
    yuyv = PixelFormat.PIXEL_FORMAT_YUYV_PACKED_422
    assert encode(dvpp, 64, 48, 64, 48, 90, fmt=yuyv, raw=raw)[0] == INVALID_PARAM
    ret, _predicted, jpg = encode(dvpp, 64, 48, 128, 48, 90, fmt=yuyv,
                                 raw=np.full(128 * 48, 128, np.uint8))
    assert ret == 0 and Image.open(io.BytesIO(jpg)).size == (64, 48)
    # acl_dvpp.h: levels 0 to 100 (the setter stores more; the encoder refuses it)
    assert encode(dvpp, 64, 48, 64, 48, 101, raw=raw)[0] == INVALID_PARAM


def test_jpege_output_too_small_is_refused(dvpp):
    raw, _ = nv12_picture(64, 64, 64, 64, seed=3)
    src, n = dvpp.device(raw.tobytes())
    desc = dvpp.pic(src, n, NV12, width=64, height=64, width_stride=64, height_stride=64)
    cfg = m.dvpp_create_jpege_config()
    m.dvpp_set_jpege_config_level(cfg, 100)
    out, _ = m.dvpp_malloc(64)
    size = np.array([64], np.uint32)
    assert m.dvpp_jpeg_encode_async(dvpp.channel, desc, out, acl.util.numpy_to_ptr(size), cfg,
                                    dvpp.stream) == 0
    assert acl.rt.synchronize_stream(dvpp.stream) == INVALID_PARAM
    assert size[0] == 64   # not written
    assert any(r.kind == "media-overflow" for r in dvpp.rt.sanitizer.reports)


# -- the Hypothesis property: predicted buffers hold what is written, one byte short is refused ----

@given(w=st.integers(32, 200), h=st.integers(32, 160), quality=st.integers(1, 100),
       subsampling=st.sampled_from([0, 1, 2]), fmt=st.sampled_from([NV12, NV21, UNKNOWN]))
@example(w=33, h=33, quality=100, subsampling=0, fmt=NV12)
def test_decode_writes_exactly_the_predicted_bytes(w, h, quality, subsampling, fmt):
    data = jpeg_bytes(w, h, quality=quality, subsampling=subsampling, seed=w * h)
    header = J.read_header(data)
    predicted = J.predict_dec_size(data, fmt, 64)
    layout = J.jpegd_layout(header, fmt, 64)
    # the prediction holds JPEGD's layout (exactly, but for YUV420SP asked by name, which the
    # vendor predicts from a 128-aligned width)
    assert layout.size <= predicted
    assert layout.size == predicted or fmt in (NV12, NV21)
    assert layout.width_stride % 64 == 0 and layout.height_stride % 16 == 0
    assert layout.width_stride >= layout.width and layout.height_stride >= layout.height
    assert len(J.decode(data, layout, header)) == layout.size
    if fmt in (NV12, NV21):
        # the 128 x 16 strides the vendor's samples set for YUV420SP fit the prediction too
        sample = J.jpegd_layout(header, fmt, 64, width_stride=-(-layout.width // 128) * 128,
                                height_stride=layout.height_stride)
        assert sample.size <= predicted


@given(w=st.integers(16, 100).map(lambda x: 2 * x), h=st.integers(16, 80).map(lambda x: 2 * x),
       pad=st.integers(0, 3), level=st.integers(0, 100))
def test_encode_output_stays_inside_the_prediction(w, h, pad, level):
    wstride = -(-w // 16) * 16 + 16 * pad
    raw = np.random.default_rng(w + h).integers(0, 256, wstride * h * 3 // 2, dtype=np.uint8)
    predicted = J.predict_enc_size(NV12, w, h, wstride, h, level)
    jpg = J.encode(raw.tobytes(), NV12, w, h, wstride, h, level)
    assert len(jpg) <= predicted
    assert Image.open(io.BytesIO(jpg)).size == (w, h)


def test_end_to_end_one_byte_short_for_every_output_format(dvpp):
    for subsampling, fmts in ((0, (5, 6, 1, 2, UNKNOWN)), (1, (3, 4, 1, 2)), (2, (1, 2))):
        data = jpeg_bytes(70, 50, subsampling=subsampling)
        ptr, n = dvpp.host_ptr(data)
        header = J.read_header(data)
        for fmt in fmts:
            predicted, ret = m.dvpp_jpeg_predict_dec_size(ptr, n, int(fmt))
            size = J.jpegd_layout(header, fmt, 64).size
            assert ret == 0 and size <= predicted
            assert dvpp.decode(data, fmt, size=size)[:2] == (0, 0)
            assert dvpp.decode(data, fmt, size=size - 1)[:2] == (0, INVALID_PARAM)


# -- PNGD ------------------------------------------------------------------------------------------

def png_bytes(mode, w, h, seed=0):
    rng = np.random.default_rng(seed)
    channels = {"L": 1, "LA": 2, "RGB": 3, "RGBA": 4}[mode]
    arr = rng.integers(0, 256, (h, w, channels), dtype=np.uint8)
    img = Image.fromarray(arr[..., 0] if channels == 1 else arr, mode)
    out = io.BytesIO()
    img.save(out, "PNG")
    return out.getvalue(), img


@pytest.mark.parametrize("mode, components", [("L", 1), ("LA", 2), ("RGB", 3), ("RGBA", 4)])
@pytest.mark.parametrize("fmt", [RGB888, RGBA8888, UNKNOWN])
def test_png_decode_matches_pillow_exactly(dvpp, mode, components, fmt):
    data, img = png_bytes(mode, 50, 40)
    ptr, n = dvpp.host_ptr(data)
    assert m.dvpp_png_get_image_info(ptr, n) == (50, 40, components, 0)
    alpha = components in (2, 4)
    if fmt is RGBA8888 and not alpha:
        assert dvpp.decode(data, fmt, size=1 << 16, png=True)[:2] == (0, FORMAT_NOT_MATCH)
        return
    ret, sync, desc, out, size = dvpp.decode(data, fmt, png=True)
    assert (ret, sync) == (0, 0)
    channels = 4 if fmt is RGBA8888 or (fmt is UNKNOWN and alpha) else 3
    # PNGD chapter: width stride = width aligned to 128, x 3 or x 4; height to 16
    assert desc_fields(desc) == (50, 40, 128 * channels, 48, 16 if channels == 4 else 12)
    # acldvppPngPredictDecSize: RGB888 x 3, RGBA8888 and UNKNOWN x 4
    assert size == 128 * 48 * (3 if fmt is RGB888 else 4)
    raw = dvpp.read(out, 128 * channels * 48).reshape(48, 128 * channels)
    ref = np.asarray(img.convert("RGBA" if channels == 4 else "RGB")).reshape(40, -1)
    assert (raw[:40, :50 * channels] == ref).all()


def test_png_rules(dvpp):
    data, _ = png_bytes("RGB", 40, 40)
    ptr, n = dvpp.host_ptr(data)
    assert m.dvpp_png_predict_dec_size(ptr, n, 1) == (0, FORMAT_NOT_MATCH)
    assert m.dvpp_png_predict_dec_size(ptr, n, int(RGB888)) == (128 * 3 * 48, 0)
    assert m.dvpp_png_get_image_info(ptr, 29) == (0, 0, 0, INVALID_PARAM)
    img = Image.new("P", (40, 40))
    out = io.BytesIO()
    img.save(out, "PNG")
    ptr, n = dvpp.host_ptr(out.getvalue())
    assert m.dvpp_png_get_image_info(ptr, n) == (0, 0, 0, FORMAT_NOT_MATCH)   # palette
    # one byte short
    size = 128 * 3 * 48
    assert dvpp.decode(data, RGB888, size=size - 1, png=True)[:2] == (0, INVALID_PARAM)


def png_header_only(width, height, color=2, depth=8):
    ihdr = struct.pack(">IIBBBBB", width, height, depth, color, 0, 0, 0)
    chunk = b"IHDR" + ihdr
    return (b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + chunk
            + struct.pack(">I", zlib.crc32(chunk)))


def test_hostile_pngs_give_codes(dvpp):
    huge = png_header_only(1 << 30, 1 << 30)
    ptr, n = dvpp.host_ptr(huge)
    assert m.dvpp_png_get_image_info(ptr, n) == (1 << 30, 1 << 30, 3, 0)
    assert m.dvpp_png_predict_dec_size(ptr, n, int(RGB888)) == (0, INVALID_PARAM)
    assert dvpp.decode(huge, RGB888, size=4096, png=True)[:2] == (0, INVALID_PARAM)
    # a header that lies about its size, and a truncated image
    data, _ = png_bytes("RGB", 64, 64)
    liar = data[:16] + struct.pack(">I", 40) + data[20:]
    assert dvpp.decode(liar, RGB888, size=1 << 16, png=True)[:2] == (0, FAILURE)
    assert dvpp.decode(data[:60], RGB888, size=1 << 16, png=True)[:2] == (0, FAILURE)


@given(st.binary(min_size=30, max_size=200))
def test_random_png_headers_never_raise(data):
    blob = b"\x89PNG\r\n\x1a\n" + data
    try:
        header = Pn.read_header(blob)
        Pn.predict_dec_size(blob, int(UNKNOWN))
        Pn.pngd_layout(header, int(UNKNOWN))
    except (Pn.InvalidArgument, Pn.FormatNotMatch):
        pass


def test_threads_decode_at_once_each_on_its_stream(dvpp):
    import threading
    data = jpeg_bytes(96, 64)
    dev, n = dvpp.device(data)
    results = []

    def work():
        acl.rt.set_device(0)
        stream, _ = acl.rt.create_stream()
        out, _ = m.dvpp_malloc(128 * 64 * 3 // 2)
        desc = dvpp.pic(out, 128 * 64 * 3 // 2, NV12)
        codes = []
        for _ in range(5):
            codes.append(m.dvpp_jpeg_decode_async(dvpp.channel, dev, n, desc, stream))
            codes.append(acl.rt.synchronize_stream(stream))
        results.append((codes, bytes(dvpp.read(out, 128 * 64 * 3 // 2))))
        acl.rt.destroy_stream(stream)
        acl.rt.reset_device(0)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 4 and all(set(codes) == {0} for codes, _ in results)
    assert len({pixels for _, pixels in results}) == 1


def test_without_pillow_the_decode_fails_with_a_message(dvpp, monkeypatch):
    import sys
    data = jpeg_bytes(64, 48)
    ptr, n = dvpp.host_ptr(data)
    monkeypatch.setitem(sys.modules, "PIL", None)     # from PIL import Image: ImportError
    # the header and the rules need no Pillow
    assert m.dvpp_jpeg_predict_dec_size(ptr, n, 1) == (128 * 48 * 3 // 2, 0)
    assert dvpp.decode(data, NV12)[:2] == (0, 207000)
    assert "pip install 'ascend-memsim[media]'" in acl.get_recent_err_msg()


def test_freeing_the_output_before_the_decode_runs_is_reported(dvpp):
    data = jpeg_bytes(64, 48)
    dev, n = dvpp.device(data)
    out, _ = m.dvpp_malloc(64 * 48 * 3 // 2)
    desc = dvpp.pic(out, 64 * 48 * 3 // 2, NV12)
    assert m.dvpp_jpeg_decode_async(dvpp.channel, dev, n, desc, dvpp.stream) == 0
    assert m.dvpp_free(out) == 0
    assert acl.rt.synchronize_stream(dvpp.stream) != 0
    kinds = {r.kind for r in dvpp.rt.sanitizer.reports}
    assert "free-with-pending-work" in kinds
