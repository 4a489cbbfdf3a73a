"""acl.media's VDEC and VENC: the vendor samples' call sequences, callbacks on the report
thread, H.264/H.265 round trips, and refusals."""

import sys
import threading

import numpy as np
import pytest

import ascend_memsim.acl as acl
from ascend_memsim import MiB, Runtime, Sanitizer

av = pytest.importorskip("av", reason="VDEC/VENC need PyAV (the media extra)")
m = acl.media
W, H = 160, 128
INVALID_PARAM, FORMAT_NOT_MATCH, FEATURE_UNSUPPORTED = 100000, 100027, 200006


def picture(i=0):
    """An NV12 picture (W x H, strides W and H) whose luma is a moving ramp."""
    yuv = np.full(W * H * 3 // 2, 128, np.uint8)
    yuv[:W * H] = ((np.arange(W)[None, :] * 2 + np.arange(H)[:, None] + 8 * i) % 220 + 16
                   ).astype(np.uint8).ravel()
    return yuv


class ReportThread:
    """The samples' callback thread: acl.util.start_thread looping on process_report."""

    def __init__(self):
        self.running = True
        self.seen = []
        self.tid, ret = acl.util.start_thread(self._loop, [50])
        assert ret == 0

    def _loop(self, args):
        acl.rt.set_device(0)      # the samples' threads set their context first
        while self.running:
            acl.rt.process_report(args[0])
        acl.rt.reset_device(0)

    def stop(self):
        self.running = False
        assert acl.util.stop_thread(self.tid) == 0


@pytest.fixture
def rt():
    with Runtime("A2", hbm_bytes=256 * MiB, sanitizer=Sanitizer(output=None)) as runtime:
        acl.rt.set_device(0)
        yield runtime


def to_device(array):
    dev, ret = m.dvpp_malloc(array.size)
    assert ret == 0
    assert acl.rt.memcpy(dev, array.size, acl.util.numpy_to_ptr(array), array.size, 1) == 0
    return dev


def from_device(dev, size):
    out = np.zeros(size, np.uint8)
    assert acl.rt.memcpy(acl.util.numpy_to_ptr(out), size, dev, size, 2) == 0
    return out


def venc(thread, frames, en_type=0, force_i=()):
    """Encode ``frames`` as the venc sample does; (the stream, callback thread ids)."""
    chunks, threads = [], []

    def callback(pic, stream, user_data):
        threads.append(threading.get_ident())
        assert m.dvpp_get_stream_desc_ret_code(stream) == 0
        size = m.dvpp_get_stream_desc_size(stream)
        chunks.append(from_device(m.dvpp_get_stream_desc_data(stream), size).tobytes())

    ch = m.venc_create_channel_desc()
    for name, value in (("thread_id", thread.tid), ("entype", en_type), ("pic_format", 1),
                        ("key_frame_interval", 16), ("pic_height", H), ("pic_width", W)):
        assert getattr(m, f"venc_set_channel_desc_{name}")(ch, value) == 0
    assert m.venc_set_channel_desc_callback(ch, callback) == 0
    assert m.venc_create_channel(ch) == 0
    config = m.venc_create_frame_config()
    devs = []
    for i, yuv in enumerate(frames):
        dev = to_device(yuv)
        devs.append(dev)
        pic = m.dvpp_create_pic_desc()
        m.dvpp_set_pic_desc_data(pic, dev)
        m.dvpp_set_pic_desc_size(pic, yuv.size)
        m.venc_set_frame_config_force_i_frame(config, int(i in force_i))
        assert m.venc_send_frame(ch, pic, 0, config, None) == 0
        m.dvpp_destroy_pic_desc(pic)
    m.venc_set_frame_config_eos(config, 1)
    assert m.venc_send_frame(ch, 0, 0, config, None) == 0
    assert m.venc_send_frame(ch, 0, 0, config, None) == 0       # a second eos: nothing more
    m.venc_set_frame_config_eos(config, 0)
    assert m.venc_destroy_channel(ch) == 0
    # every callback ran before destroy returned, on the report thread
    assert len(chunks) == len(frames)
    for name, fn in (("venc_destroy_frame_config", config), ("venc_destroy_channel_desc", ch)):
        assert getattr(m, name)(fn) == 0
    for dev in devs:
        m.dvpp_free(dev)
    return b"".join(chunks), threads


def vdec(thread, stream, sends=1, en_type=0, fmt=2, out_size=W * H * 3 // 2):
    """Decode as the vdec sample does: the same stream sent ``sends`` times."""
    results = []

    def callback(input_desc, output_desc, user_data):
        results.append((user_data, m.dvpp_get_pic_desc_ret_code(output_desc),
                        m.dvpp_get_pic_desc_width(output_desc),
                        m.dvpp_get_pic_desc_height(output_desc),
                        m.dvpp_get_pic_desc_data(output_desc), threading.get_ident()))
        assert m.dvpp_destroy_stream_desc(input_desc) == 0
        assert m.dvpp_destroy_pic_desc(output_desc) == 0

    ch = m.vdec_create_channel_desc()
    m.vdec_set_channel_desc_channel_id(ch, 10)
    m.vdec_set_channel_desc_thread_id(ch, thread.tid)
    m.vdec_set_channel_desc_callback(ch, callback)
    m.vdec_set_channel_desc_entype(ch, en_type)
    m.vdec_set_channel_desc_out_pic_format(ch, fmt)
    assert m.vdec_create_channel(ch) == 0
    data = to_device(np.frombuffer(stream, np.uint8).copy())
    config = m.vdec_create_frame_config()
    outs = []
    for i in range(sends):
        sd = m.dvpp_create_stream_desc()
        m.dvpp_set_stream_desc_data(sd, data)
        m.dvpp_set_stream_desc_size(sd, len(stream))
        out, _ = m.dvpp_malloc(max(out_size, 1))
        outs.append(out)
        pd = m.dvpp_create_pic_desc()
        m.dvpp_set_pic_desc_data(pd, out)
        m.dvpp_set_pic_desc_size(pd, out_size)
        m.dvpp_set_pic_desc_format(pd, fmt)
        assert m.vdec_send_frame(ch, sd, pd, config, i) == 0
    assert m.vdec_destroy_channel(ch) == 0
    assert len(results) == sends
    m.vdec_destroy_frame_config(config)
    m.vdec_destroy_channel_desc(ch)
    return results, outs


@pytest.mark.parametrize("en_type", [0, 1, 2, 3])
def test_venc_then_vdec_round_trip_through_the_report_thread(rt, en_type):
    thread = ReportThread()
    frames = [picture(i) for i in range(6)]
    stream, venc_threads = venc(thread, frames, en_type, force_i=(3,))
    assert stream[:4] == b"\x00\x00\x00\x01"     # Annex B start code
    assert set(venc_threads) == {thread.tid}
    results, outs = vdec(thread, stream, sends=2, en_type=en_type, fmt=1)
    thread.stop()
    assert [r[0] for r in results] == [0, 1]        # user data, in send order
    assert all(r[1:4] == (0, W, H) for r in results)
    assert {r[5] for r in results} == {thread.tid}
    # each send of the whole stream outputs its first frame; lossy, so a tolerance
    first = from_device(outs[0], W * H * 3 // 2)
    assert np.abs(first[:W * H].astype(int) - frames[0][:W * H]).mean() < 4
    assert np.abs(first[W * H:].astype(int) - 128).max() <= 3


def test_vdec_nv21_and_the_output_layout(rt):
    thread = ReportThread()
    stream, _ = venc(thread, [picture()])
    results, _outs = vdec(thread, stream, fmt=2)
    thread.stop()
    assert results[0][1] == 0


def test_vdec_output_too_small_sets_the_ret_code_and_reports(rt):
    thread = ReportThread()
    stream, _ = venc(thread, [picture()])
    results, _ = vdec(thread, stream, out_size=W * H * 3 // 2 - 1)
    thread.stop()
    assert results[0][1] == INVALID_PARAM
    assert any(r.kind == "media-overflow" for r in rt.sanitizer.reports)


def test_vdec_garbage_stream_fails_the_frame_not_the_program(rt):
    thread = ReportThread()
    garbage = bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8))
    results, _ = vdec(thread, garbage, sends=2)
    thread.stop()
    assert all(r[1] != 0 for r in results)


def test_channel_refusals(rt):
    ch = m.vdec_create_channel_desc()
    # no callback set yet
    assert m.vdec_create_channel(ch) == INVALID_PARAM
    assert m.vdec_get_channel_desc_callback(ch) is None
    m.vdec_set_channel_desc_callback(ch, lambda *a: None)
    # thread id 0 / not a live thread
    assert m.vdec_create_channel(ch) == INVALID_PARAM
    m.vdec_set_channel_desc_thread_id(ch, threading.get_ident())
    m.vdec_set_channel_desc_out_pic_format(ch, 12)
    assert m.vdec_create_channel(ch) == FORMAT_NOT_MATCH
    m.vdec_set_channel_desc_out_pic_format(ch, 1)
    assert m.vdec_create_channel(ch) == 0
    assert m.vdec_create_channel(ch) == INVALID_PARAM          # twice
    assert m.vdec_destroy_channel(ch) == 0
    assert m.vdec_destroy_channel(ch) == INVALID_PARAM         # twice
    assert m.vdec_send_frame(ch, 0, 0, 0, None) == INVALID_PARAM
    assert m.vdec_destroy_channel_desc(ch) == 0
    assert m.vdec_get_channel_desc_out_pic_format(ch) == 0     # destroyed: the default
    venc_ch = m.venc_create_channel_desc()
    m.venc_set_channel_desc_callback(venc_ch, lambda *a: None)
    m.venc_set_channel_desc_thread_id(venc_ch, threading.get_ident())
    assert m.venc_create_channel(venc_ch) == INVALID_PARAM     # 0 x 0 picture
    m.venc_set_channel_desc_pic_width(venc_ch, W)
    m.venc_set_channel_desc_pic_height(venc_ch, H)
    assert m.venc_create_channel(venc_ch) == 0
    config = m.venc_create_frame_config()
    m.venc_set_frame_config_eos(config, 1)
    assert m.venc_send_frame(venc_ch, 0, 0, config, None) == 0
    m.venc_set_frame_config_eos(config, 0)
    pic = m.dvpp_create_pic_desc()
    assert m.venc_send_frame(venc_ch, pic, 0, config, None) == INVALID_PARAM   # after eos
    assert m.venc_destroy_channel(venc_ch) == 0
    for fn, h in ((m.dvpp_destroy_pic_desc, pic), (m.venc_destroy_frame_config, config),
                  (m.venc_destroy_channel_desc, venc_ch)):
        assert fn(h) == 0


def test_params_and_getters(rt):
    ch = m.venc_create_channel_desc()
    assert m.venc_set_channel_desc_param(ch, 4, 640) == 0           # ACL_VENC_PIC_WIDTH_UINT32
    assert m.venc_get_channel_desc_pic_width(ch) == 640
    assert m.venc_get_channel_desc_param(ch, 4) == (640, 0)
    assert m.venc_set_channel_desc_param(ch, 12, 5) == 0
    assert m.venc_get_channel_desc_param(ch, 12) == (5, 0)
    assert m.venc_set_channel_desc_param(ch, 99, 1) == INVALID_PARAM
    fn = lambda *a: None  # noqa: E731
    assert m.venc_set_channel_desc_param(ch, 1, fn) == 0
    assert m.venc_get_channel_desc_callback(ch) is fn
    m.venc_destroy_channel_desc(ch)
    vch = m.vdec_create_channel_desc()
    assert m.vdec_get_channel_desc_param(vch, 0) == (0, 0, 0)
    assert m.vdec_set_channel_desc_param(vch, 0, 7) == (vch, 0)
    assert m.vdec_get_channel_desc_param(vch, 0) == (4, 7, 0)
    assert m.vdec_set_channel_desc_out_mode(vch, 1) == 0
    assert m.vdec_get_channel_desc_out_mode(vch) == 1
    m.vdec_destroy_channel_desc(vch)


def test_callbacks_run_even_when_the_report_thread_is_gone(rt):
    thread = ReportThread()
    stream, _ = venc(thread, [picture()])
    got = []
    ch = m.vdec_create_channel_desc()
    m.vdec_set_channel_desc_thread_id(ch, thread.tid)
    m.vdec_set_channel_desc_callback(ch, lambda i, o, u: got.append(u))
    assert m.vdec_create_channel(ch) == 0
    thread.stop()     # the thread stops, dropping its subscription, before any frame
    data = to_device(np.frombuffer(stream, np.uint8).copy())
    sd = m.dvpp_create_stream_desc()
    m.dvpp_set_stream_desc_data(sd, data)
    m.dvpp_set_stream_desc_size(sd, len(stream))
    out, _ = m.dvpp_malloc(W * H * 2)
    pd = m.dvpp_create_pic_desc()
    m.dvpp_set_pic_desc_data(pd, out)
    m.dvpp_set_pic_desc_size(pd, W * H * 2)
    config = m.vdec_create_frame_config()
    assert m.vdec_send_frame(ch, sd, pd, config, "x") == 0
    assert m.vdec_destroy_channel(ch) == 0
    assert got == ["x"]


def test_no_video_on_950():
    with Runtime("950PR", hbm_bytes=64 * MiB, sanitizer=Sanitizer(output=None)):
        acl.rt.set_device(0)
        ch = m.vdec_create_channel_desc()
        m.vdec_set_channel_desc_callback(ch, lambda *a: None)
        m.vdec_set_channel_desc_thread_id(ch, threading.get_ident())
        assert m.vdec_create_channel(ch) == FEATURE_UNSUPPORTED
        assert "VDEC" in acl.get_recent_err_msg()


def test_one_thread_programs_get_their_callbacks_inline_and_may_send_from_them(rt):
    """The channel's thread is the sending thread itself: each callback runs when its frame
    is sent, and may send again (the channel's lock is re-entrant)."""
    thread = ReportThread()
    stream, _ = venc(thread, [picture(i) for i in range(2)])
    thread.stop()
    data = to_device(np.frombuffer(stream, np.uint8).copy())
    seen = []
    ch = m.vdec_create_channel_desc()
    config = m.vdec_create_frame_config()

    def send(tag):
        sd = m.dvpp_create_stream_desc()
        m.dvpp_set_stream_desc_data(sd, data)
        m.dvpp_set_stream_desc_size(sd, len(stream))
        out, _ = m.dvpp_malloc(W * H * 3 // 2)
        pd = m.dvpp_create_pic_desc()
        m.dvpp_set_pic_desc_data(pd, out)
        m.dvpp_set_pic_desc_size(pd, W * H * 3 // 2)
        assert m.vdec_send_frame(ch, sd, pd, config, tag) == 0

    def callback(input_desc, output_desc, tag):
        seen.append((tag, m.dvpp_get_pic_desc_ret_code(output_desc)))
        if tag == "first":
            send("second")

    m.vdec_set_channel_desc_thread_id(ch, threading.get_ident())
    m.vdec_set_channel_desc_callback(ch, callback)
    assert m.vdec_create_channel(ch) == 0
    send("first")
    assert seen == [("first", 0), ("second", 0)]
    assert m.vdec_destroy_channel(ch) == 0


def test_without_pyav_a_channel_is_refused_with_a_message(rt, monkeypatch):
    monkeypatch.setitem(sys.modules, "av", None)     # import av raises ImportError
    ch = m.venc_create_channel_desc()
    m.venc_set_channel_desc_callback(ch, lambda *a: None)
    m.venc_set_channel_desc_thread_id(ch, threading.get_ident())
    m.venc_set_channel_desc_pic_width(ch, W)
    m.venc_set_channel_desc_pic_height(ch, H)
    assert m.venc_create_channel(ch) == 207000
    assert "pip install 'ascend-memsim[media]'" in acl.get_recent_err_msg()
    assert m.venc_destroy_channel_desc(ch) == 0     # nothing was opened


def test_vdec_scales_to_the_channel_output_size(rt):
    thread = ReportThread()
    stream, _ = venc(thread, [picture()])
    got = []
    ch = m.vdec_create_channel_desc()
    m.vdec_set_channel_desc_thread_id(ch, thread.tid)
    m.vdec_set_channel_desc_callback(ch, lambda i, o, u: got.append(
        (m.dvpp_get_pic_desc_width(o), m.dvpp_get_pic_desc_height(o),
         m.dvpp_get_pic_desc_width_stride(o), m.dvpp_get_pic_desc_ret_code(o))))
    m.vdec_set_channel_desc_out_pic_width(ch, 63)
    m.vdec_set_channel_desc_out_pic_height(ch, 48)
    assert m.vdec_create_channel(ch) == INVALID_PARAM            # odd width
    m.vdec_set_channel_desc_out_pic_width(ch, 80)
    assert m.vdec_create_channel(ch) == 0
    data = to_device(np.frombuffer(stream, np.uint8).copy())
    sd = m.dvpp_create_stream_desc()
    m.dvpp_set_stream_desc_data(sd, data)
    m.dvpp_set_stream_desc_size(sd, len(stream))
    out, _ = m.dvpp_malloc(80 * 48 * 3 // 2)
    pd = m.dvpp_create_pic_desc()
    m.dvpp_set_pic_desc_data(pd, out)
    m.dvpp_set_pic_desc_size(pd, 80 * 48 * 3 // 2)
    config = m.vdec_create_frame_config()
    assert m.vdec_send_frame(ch, sd, pd, config, None) == 0
    assert m.vdec_destroy_channel(ch) == 0
    thread.stop()
    assert got == [(80, 48, 80, 0)]
    luma = from_device(out, 80 * 48)
    assert abs(int(luma.mean()) - int(picture()[:W * H].mean())) < 8
