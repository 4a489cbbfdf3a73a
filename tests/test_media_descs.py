"""acl.media's descriptions, configs and channels: lifecycle, getters/setters, handle checks."""

import threading

import pytest

import ascend_memsim.acl as acl
from ascend_memsim import MiB, Runtime, Sanitizer
from ascend_memsim.media.constants import PixelFormat
from ascend_memsim.media.descs import RoiConfig
from ascend_memsim.media.plane import media_plane

m = acl.media
INVALID_PARAM = 100000
INVALID_HANDLE = 107017

# (create, destroy, [(setter, getter, value)]) for every description kind with setters
KINDS = {
    "pic": (m.dvpp_create_pic_desc, m.dvpp_destroy_pic_desc, [
        (m.dvpp_set_pic_desc_data, m.dvpp_get_pic_desc_data, 0x1234_5678_9ABC),
        (m.dvpp_set_pic_desc_size, m.dvpp_get_pic_desc_size, 0xFFFF_FFFF),
        (m.dvpp_set_pic_desc_format, m.dvpp_get_pic_desc_format, 12),
        (m.dvpp_set_pic_desc_width, m.dvpp_get_pic_desc_width, 224),
        (m.dvpp_set_pic_desc_height, m.dvpp_get_pic_desc_height, 225),
        (m.dvpp_set_pic_desc_width_stride, m.dvpp_get_pic_desc_width_stride, 240),
        (m.dvpp_set_pic_desc_height_stride, m.dvpp_get_pic_desc_height_stride, 226),
        (m.dvpp_set_pic_desc_ret_code, m.dvpp_get_pic_desc_ret_code, 7)]),
    "stream": (m.dvpp_create_stream_desc, m.dvpp_destroy_stream_desc, [
        (m.dvpp_set_stream_desc_data, m.dvpp_get_stream_desc_data, 0x10_0000),
        (m.dvpp_set_stream_desc_size, m.dvpp_get_stream_desc_size, 4096),
        (m.dvpp_set_stream_desc_format, m.dvpp_get_stream_desc_format, 3),
        (m.dvpp_set_stream_desc_timestamp, m.dvpp_get_stream_desc_timestamp, 1 << 40),
        (m.dvpp_set_stream_desc_ret_code, m.dvpp_get_stream_desc_ret_code, 9),
        (m.dvpp_set_stream_desc_eos, m.dvpp_get_stream_desc_eos, 1)]),
    "resize": (m.dvpp_create_resize_config, m.dvpp_destroy_resize_config, [
        (m.dvpp_set_resize_config_interpolation, m.dvpp_get_resize_config_interpolation, 1)]),
    "jpege": (m.dvpp_create_jpege_config, m.dvpp_destroy_jpege_config, [
        (m.dvpp_set_jpege_config_level, m.dvpp_get_jpege_config_level, 90)]),
    "border": (m.dvpp_create_border_config, m.dvpp_destroy_border_config, [
        (m.dvpp_set_border_config_border_type, m.dvpp_get_border_config_border_type, 1),
        (m.dvpp_set_border_config_top, m.dvpp_get_border_config_top, 2),
        (m.dvpp_set_border_config_bottom, m.dvpp_get_border_config_bottom, 4),
        (m.dvpp_set_border_config_left, m.dvpp_get_border_config_left, 6),
        (m.dvpp_set_border_config_right, m.dvpp_get_border_config_right, 8)]),
    "channel": (m.dvpp_create_channel_desc, m.dvpp_destroy_channel_desc, []),
}


@pytest.fixture
def rt():
    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer=Sanitizer(output=None)) as runtime:
        runtime.set_device(0)
        yield runtime


def test_pixel_formats_are_the_headers():
    # acl_dvpp.h acldvppPixelFormat; the vendor's Python samples write 1 for NV12
    assert (m.PIXEL_FORMAT_YUV_400, m.PIXEL_FORMAT_YUV_SEMIPLANAR_420,
            m.PIXEL_FORMAT_YVU_SEMIPLANAR_420, m.PIXEL_FORMAT_RGB_888,
            m.PIXEL_FORMAT_BGR_888) == (0, 1, 2, 12, 13)
    assert m.PIXEL_FORMAT_BGR_888_PLANAR == 70 and m.PIXEL_FORMAT_UNKNOWN == 10000
    assert PixelFormat(1001) is PixelFormat.PIXEL_FORMAT_YVU_SEMIPLANAR_440
    assert (m.DVPP_CHNMODE_VPC, m.DVPP_CHNMODE_JPEGD, m.DVPP_CHNMODE_JPEGE) == (1, 2, 4)
    assert (m.BORDER_CONSTANT, m.BORDER_REFLECT_101) == (0, 3)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_lifecycle_getters_and_setters(rt, kind):
    create, destroy, fields = KINDS[kind]
    handle = create()
    assert handle != 0
    for setter, getter, value in fields:
        assert getter(handle) == 0  # the header's default
        assert setter(handle, value) == 0
        assert getter(handle) == value
    assert destroy(handle) == 0
    # destroyed: the code, the getters give their C default, and the message says why
    assert destroy(handle) == INVALID_HANDLE
    for setter, getter, value in fields:
        assert setter(handle, value) == INVALID_HANDLE
        assert getter(handle) == 0
        assert "destroyed" in acl.get_recent_err_msg()


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_foreign_and_other_kind_handles_are_refused(rt, kind):
    _create, destroy, fields = KINDS[kind]
    compute = acl.create_data_buffer(0, 0)  # a compute handle: unknown to the media plane
    other = m.dvpp_create_roi_config(0, 1, 0, 1)
    for bad in (compute, other, 0x4_0000_0001):
        assert destroy(bad) == INVALID_HANDLE
        for setter, getter, value in fields:
            assert setter(bad, value) == INVALID_HANDLE
            assert getter(bad) == 0
    assert destroy(0) == INVALID_PARAM and "NULL" in acl.get_recent_err_msg()
    # and a media handle means nothing to the compute plane
    assert acl.destroy_data_buffer(other) == INVALID_HANDLE
    assert m.dvpp_destroy_roi_config(other) == 0 and acl.destroy_data_buffer(compute) == 0


@pytest.mark.parametrize("value", [-1, 1 << 32, True, 1.0, None, "1"])
def test_a_setter_outside_its_c_type_changes_nothing(rt, value):
    pic = m.dvpp_create_pic_desc()
    assert m.dvpp_set_pic_desc_width(pic, 64) == 0
    assert m.dvpp_set_pic_desc_width(pic, value) == INVALID_PARAM
    assert m.dvpp_get_pic_desc_width(pic) == 64
    roi = m.dvpp_create_roi_config(0, 9, 0, 9)
    # all four edges are checked before any is set
    assert m.dvpp_set_roi_config(roi, 2, 3, 4, value) == INVALID_PARAM
    assert media_plane(rt).get(roi, RoiConfig).describe_area() == (
        "(left 0, right 9, top 0, bottom 9)")
    assert m.dvpp_create_roi_config(0, 1, value, 3) == 0


def test_batch_pictures_are_the_batchs(rt):
    batch = m.dvpp_create_batch_pic_desc(3)
    pics = [m.dvpp_get_pic_desc(batch, i) for i in range(3)]
    assert len(set(pics)) == 3 and 0 not in pics
    assert m.dvpp_get_pic_desc(batch, 3) == 0 and "outside" in acl.get_recent_err_msg()
    assert m.dvpp_set_pic_desc_width(pics[1], 32) == 0
    assert m.dvpp_get_pic_desc_width(m.dvpp_get_pic_desc(batch, 1)) == 32
    # a batch's picture is destroyed with the batch, not alone
    assert m.dvpp_destroy_pic_desc(pics[0]) == INVALID_PARAM
    assert "acldvppDestroyBatchPicDesc" in acl.get_recent_err_msg()
    assert m.dvpp_destroy_batch_pic_desc(batch) == 0
    assert m.dvpp_get_pic_desc_width(pics[1]) == 0
    assert m.dvpp_set_pic_desc_width(pics[1], 1) == INVALID_HANDLE
    for size in (0, 257, -1):
        assert m.dvpp_create_batch_pic_desc(size) == 0


def test_channel_lifecycle(rt):
    desc = m.dvpp_create_channel_desc()
    assert m.dvpp_get_channel_desc_channel_id(desc) == 0
    assert m.dvpp_destroy_channel(desc) == INVALID_PARAM  # not open
    assert m.dvpp_set_channel_desc_mode(desc, m.DVPP_CHNMODE_VPC) == 0
    assert m.dvpp_create_channel(desc) == 0
    assert m.dvpp_create_channel(desc) == INVALID_PARAM and "already" in acl.get_recent_err_msg()
    assert m.dvpp_set_channel_desc_mode(desc, 2) == INVALID_PARAM
    assert m.dvpp_destroy_channel_desc(desc) == INVALID_PARAM  # the channel is open
    second = m.dvpp_create_channel_desc()
    assert m.dvpp_create_channel(second) == 0
    assert m.dvpp_get_channel_desc_channel_id(second) != m.dvpp_get_channel_desc_channel_id(
        desc)
    for d in (desc, second):
        assert m.dvpp_destroy_channel(d) == 0 and m.dvpp_destroy_channel_desc(d) == 0
    assert m.dvpp_create_channel(desc) == INVALID_HANDLE
    bad = m.dvpp_create_channel_desc()
    assert m.dvpp_set_channel_desc_mode(bad, 16) == 0  # stored; refused when opened
    assert m.dvpp_create_channel(bad) == INVALID_PARAM and "mode" in acl.get_recent_err_msg()


def test_channel_param(rt):
    desc = m.dvpp_create_channel_desc()
    assert m.dvpp_get_channel_desc_param(desc, 0) == (0, 0, 0)
    assert m.dvpp_set_channel_desc_param(desc, 0, 3) == (desc, 0)
    assert m.dvpp_get_channel_desc_param(desc, 0) == (4, 3, 0)
    # pyacl gives the description back whatever the code (media_common.cpp)
    assert m.dvpp_set_channel_desc_param(desc, 1, 3) == (desc, INVALID_PARAM)
    assert m.dvpp_set_channel_desc_param(0x4_0000_0001, 0, 3) == (0x4_0000_0001, INVALID_HANDLE)
    assert m.dvpp_set_channel_desc_param("x", 0, 3) == (0, INVALID_PARAM)
    assert m.dvpp_get_channel_desc_param(0x4_0000_0001, 0) == (0, 0, INVALID_HANDLE)


def test_border_values(rt):
    config = m.dvpp_create_border_config()
    assert [m.dvpp_get_border_config_value(config, i) for i in range(4)] == [0.0] * 4
    assert m.dvpp_set_border_config_value(config, 2, 127.5) == 0
    assert m.dvpp_get_border_config_value(config, 2) == 127.5
    assert m.dvpp_set_border_config_value(config, 4, 1.0) == INVALID_PARAM
    assert m.dvpp_get_border_config_value(config, 4) == -1.0
    for bad in (float("nan"), float("inf"), "1", None, True):
        assert m.dvpp_set_border_config_value(config, 0, bad) == INVALID_PARAM
    assert m.dvpp_get_border_config_value(config, 0) == 0.0


def test_descriptions_never_destroyed_are_leaks(rt):
    rt.sanitizer.on = True
    m.dvpp_create_pic_desc()
    m.dvpp_create_batch_pic_desc(2)
    open_channel = m.dvpp_create_channel_desc()
    m.dvpp_create_channel(open_channel)
    leaks = [h.describe() for h in media_plane(rt).close()]
    # the batch is one leak, not three
    assert len(leaks) == 3, leaks
    assert any("acldvppDestroyBatchPicDesc" in text for text in leaks)


def test_handles_from_many_threads_are_distinct(rt):
    made: list[int] = []

    def work():
        with rt:
            rt.set_device(0)
            made.extend(m.dvpp_create_pic_desc() for _ in range(200))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(made)) == 800 and 0 not in made
    assert all(m.dvpp_destroy_pic_desc(h) == 0 for h in made)


#: Every name of pyacl's acl.media method table (hicann/runtime
#: python/pyACL/media/pymedia_methods.cpp, g_methodsMedia; the USE_MDL block included).
PYMEDIA = set("""
dvpp_malloc dvpp_malloc_with_cfg dvpp_free dvpp_create_channel dvpp_destroy_channel
dvpp_create_channel_desc dvpp_destroy_channel_desc dvpp_set_channel_desc_param
dvpp_get_channel_desc_param dvpp_get_channel_desc_channel_id dvpp_create_pic_desc
dvpp_destroy_pic_desc dvpp_set_pic_desc_data dvpp_set_pic_desc_size dvpp_set_pic_desc_format
dvpp_set_pic_desc_width dvpp_set_pic_desc_height dvpp_set_pic_desc_width_stride
dvpp_set_pic_desc_height_stride dvpp_set_pic_desc_ret_code dvpp_get_pic_desc_data
dvpp_get_pic_desc_size dvpp_get_pic_desc_format dvpp_get_pic_desc_width
dvpp_get_pic_desc_height dvpp_get_pic_desc_width_stride dvpp_get_pic_desc_height_stride
dvpp_get_pic_desc_ret_code dvpp_create_stream_desc dvpp_destroy_stream_desc
dvpp_set_stream_desc_data dvpp_set_stream_desc_size dvpp_set_stream_desc_format
dvpp_set_stream_desc_timestamp dvpp_set_stream_desc_ret_code dvpp_set_stream_desc_eos
dvpp_get_stream_desc_data dvpp_get_stream_desc_size dvpp_get_stream_desc_format
dvpp_get_stream_desc_timestamp dvpp_get_stream_desc_ret_code dvpp_get_stream_desc_eos
dvpp_create_batch_pic_desc dvpp_destroy_batch_pic_desc dvpp_get_pic_desc
dvpp_vpc_resize_async dvpp_vpc_crop_async dvpp_vpc_batch_crop_async
dvpp_vpc_crop_and_paste_async dvpp_vpc_batch_crop_and_paste_async dvpp_vpc_crop_resize_async
dvpp_vpc_batch_crop_resize_async dvpp_vpc_crop_resize_paste_async
dvpp_vpc_batch_crop_resize_paste_async dvpp_vpc_batch_crop_resize_make_border_async
dvpp_create_roi_config dvpp_destroy_roi_config dvpp_set_roi_config dvpp_set_roi_config_left
dvpp_set_roi_config_right dvpp_set_roi_config_top dvpp_set_roi_config_bottom
dvpp_create_resize_config dvpp_destroy_resize_config dvpp_set_resize_config_interpolation
dvpp_get_resize_config_interpolation dvpp_jpeg_decode_async dvpp_jpeg_get_image_info
dvpp_jpeg_get_image_info_v2 dvpp_jpeg_predict_dec_size dvpp_jpeg_encode_async
dvpp_jpeg_predict_enc_size dvpp_create_jpege_config dvpp_destroy_jpege_config
dvpp_set_jpege_config_level dvpp_get_jpege_config_level
vdec_create_channel vdec_destroy_channel vdec_create_channel_desc vdec_destroy_channel_desc
vdec_set_channel_desc_channel_id vdec_set_channel_desc_thread_id vdec_set_channel_desc_callback
vdec_set_channel_desc_entype vdec_set_channel_desc_out_pic_format
vdec_set_channel_desc_out_pic_width vdec_set_channel_desc_out_pic_height
vdec_set_channel_desc_ref_frame_num vdec_get_channel_desc_channel_id
vdec_get_channel_desc_thread_id vdec_get_channel_desc_callback vdec_get_channel_desc_entype
vdec_get_channel_desc_out_pic_format vdec_get_channel_desc_out_pic_width
vdec_get_channel_desc_out_pic_height vdec_get_channel_desc_ref_frame_num vdec_send_frame
vdec_send_skipped_frame vdec_create_frame_config vdec_destroy_frame_config
vdec_get_channel_desc_out_mode vdec_set_channel_desc_out_mode vdec_get_channel_desc_bit_depth
vdec_set_channel_desc_bit_depth vdec_set_channel_desc_param vdec_get_channel_desc_param
venc_create_channel venc_destroy_channel venc_send_frame venc_create_channel_desc
venc_destroy_channel_desc venc_set_channel_desc_thread_id venc_set_channel_desc_callback
venc_set_channel_desc_entype venc_set_channel_desc_pic_format venc_set_channel_desc_pic_width
venc_set_channel_desc_pic_height venc_set_channel_desc_key_frame_interval
venc_get_channel_desc_channel_id venc_get_channel_desc_thread_id
venc_get_channel_desc_callback venc_get_channel_desc_entype venc_get_channel_desc_pic_format
venc_get_channel_desc_pic_width venc_get_channel_desc_pic_height
venc_get_channel_desc_key_frame_interval venc_create_frame_config venc_destroy_frame_config
venc_set_frame_config_force_i_frame venc_set_frame_config_eos
venc_get_frame_config_force_i_frame venc_get_frame_config_eos venc_get_channel_desc_buf_addr
venc_set_channel_desc_buf_addr venc_get_channel_desc_buf_size venc_set_channel_desc_buf_size
venc_get_channel_desc_max_bit_rate venc_set_channel_desc_max_bit_rate
venc_get_channel_desc_rc_mode venc_set_channel_desc_rc_mode venc_get_channel_desc_src_rate
venc_set_channel_desc_src_rate venc_get_channel_desc_param venc_set_channel_desc_param
dvpp_create_border_config dvpp_destroy_border_config dvpp_set_border_config_value
dvpp_set_border_config_border_type dvpp_set_border_config_top dvpp_set_border_config_bottom
dvpp_set_border_config_left dvpp_set_border_config_right dvpp_get_border_config_value
dvpp_get_border_config_border_type dvpp_get_border_config_top dvpp_get_border_config_bottom
dvpp_get_border_config_left dvpp_get_border_config_right dvpp_vpc_convert_color_async
dvpp_vpc_pyr_down_async dvpp_set_channel_desc_mode dvpp_png_decode_async
dvpp_png_get_image_info dvpp_png_predict_dec_size
dvpp_create_hist dvpp_destroy_hist dvpp_get_hist_dims dvpp_get_hist_data dvpp_get_hist_ret_code
dvpp_clear_hist dvpp_create_lut_map dvpp_destroy_lut_map dvpp_get_lut_map_dims
dvpp_get_lut_map_data dvpp_vpc_equalize_hist_async dvpp_vpc_make_border_async
dvpp_vpc_calc_hist_async
""".split())


#: The acldvpp functions acl_dvpp.h declares (Ascend/graphengine
#: inc/external/acl/ops/acl_dvpp.h), and the two channel-parameter calls pyacl's
#: media_common.cpp calls (declared in later headers).
C_DVPP = set("""
acldvppMalloc acldvppFree acldvppCreateChannelDesc acldvppDestroyChannelDesc
acldvppGetChannelDescChannelId acldvppCreatePicDesc acldvppDestroyPicDesc acldvppSetPicDescData
acldvppSetPicDescSize acldvppSetPicDescFormat acldvppSetPicDescWidth acldvppSetPicDescHeight
acldvppSetPicDescWidthStride acldvppSetPicDescHeightStride acldvppSetPicDescRetCode
acldvppGetPicDescData acldvppGetPicDescSize acldvppGetPicDescFormat acldvppGetPicDescWidth
acldvppGetPicDescHeight acldvppGetPicDescWidthStride acldvppGetPicDescHeightStride
acldvppGetPicDescRetCode acldvppCreateRoiConfig acldvppDestroyRoiConfig acldvppSetRoiConfigLeft
acldvppSetRoiConfigRight acldvppSetRoiConfigTop acldvppSetRoiConfigBottom acldvppSetRoiConfig
acldvppCreateResizeConfig acldvppDestroyResizeConfig acldvppCreateJpegeConfig
acldvppDestroyJpegeConfig acldvppSetJpegeConfigLevel acldvppGetJpegeConfigLevel
acldvppCreateStreamDesc acldvppDestroyStreamDesc acldvppSetStreamDescData
acldvppSetStreamDescSize acldvppSetStreamDescFormat acldvppSetStreamDescTimestamp
acldvppSetStreamDescRetCode acldvppSetStreamDescEos acldvppGetStreamDescData
acldvppGetStreamDescSize acldvppGetStreamDescFormat acldvppGetStreamDescTimestamp
acldvppGetStreamDescRetCode acldvppGetStreamDescEos acldvppJpegGetImageInfo
acldvppJpegGetImageInfoV2 acldvppJpegPredictEncSize acldvppJpegPredictDecSize
acldvppPngGetImageInfo acldvppPngPredictDecSize acldvppCreateChannel acldvppDestroyChannel
acldvppVpcResizeAsync acldvppVpcCropAsync acldvppVpcCropResizeAsync acldvppVpcBatchCropAsync
acldvppVpcBatchCropResizeAsync acldvppVpcCropAndPasteAsync acldvppVpcCropResizePasteAsync
acldvppVpcBatchCropAndPasteAsync acldvppVpcBatchCropResizePasteAsync acldvppJpegDecodeAsync
acldvppJpegEncodeAsync acldvppPngDecodeAsync acldvppVpcConvertColorAsync
acldvppVpcPyrDownAsync acldvppSetChannelDescMode acldvppSetResizeConfigInterpolation
acldvppGetResizeConfigInterpolation acldvppCreateBatchPicDesc acldvppGetPicDesc
acldvppDestroyBatchPicDesc acldvppCreateLutMap acldvppDestroyLutMap acldvppGetLutMapDims
acldvppGetLutMapData acldvppVpcEqualizeHistAsync acldvppCreateBorderConfig
acldvppSetBorderConfigValue acldvppSetBorderConfigBorderType acldvppSetBorderConfigTop
acldvppSetBorderConfigBottom acldvppSetBorderConfigLeft acldvppSetBorderConfigRight
acldvppGetBorderConfigValue acldvppGetBorderConfigBorderType acldvppGetBorderConfigTop
acldvppGetBorderConfigBottom acldvppGetBorderConfigLeft acldvppGetBorderConfigRight
acldvppDestroyBorderConfig acldvppVpcMakeBorderAsync acldvppVpcCalcHistAsync acldvppCreateHist
acldvppDestroyHist acldvppGetHistDims acldvppGetHistData acldvppGetHistRetCode acldvppClearHist
acldvppVpcBatchCropResizeMakeBorderAsync
acldvppSetChannelDescParam acldvppGetChannelDescParam
""".split())


def test_every_media_function_is_pyacls_and_has_its_c_name():
    from ascend_memsim import aclrt
    names = [n for n in m.__all__ if not n.isupper()]
    assert set(names) <= PYMEDIA, set(names) - PYMEDIA
    by_fn = {fn: c for c, fn in aclrt.C_NAMES.items()}
    for name in names:
        c_name = by_fn[getattr(m, name)]
        assert c_name in C_DVPP or c_name.startswith(("aclvdec", "aclvenc")), c_name
    assert aclrt.acldvppVpcBatchCropResizeMakeBorderAsync is (
        m.dvpp_vpc_batch_crop_resize_make_border_async)
    assert aclrt.acldvppGetChannelDescChannelId is m.dvpp_get_channel_desc_channel_id
