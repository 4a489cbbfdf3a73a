"""End to end: pyacl programs with the JPEG and video call sequences of the vendor's Python
samples (vpc_jpeg_resnet50_imagenet_classification, venc_image,
vdec_resnet50_classification), run unchanged under ``ascend-memsim run``."""

import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(tmp_path, source, *options):
    script = tmp_path / "program.py"
    script.write_text(source)
    return subprocess.run(
        [sys.executable, "-m", "ascend_memsim", "run", *options, str(script)],
        env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True, text=True, timeout=120,
        cwd=tmp_path)


COMMON = '''
import acl
import numpy as np

def check(what, ret):
    if ret != 0:
        raise SystemExit(f"{what} failed: {ret} {acl.get_recent_err_msg()}")

def pic(data, size, fmt, w=0, h=0, ws=0, hs=0):
    d = acl.media.dvpp_create_pic_desc()
    for name, v in (("data", data), ("size", size), ("format", fmt), ("width", w),
                    ("height", h), ("width_stride", ws), ("height_stride", hs)):
        check(name, getattr(acl.media, "dvpp_set_pic_desc_" + name)(d, v))
    return d

check("init", acl.init())
check("set_device", acl.rt.set_device(0))
context, ret = acl.rt.create_context(0)
stream, ret = acl.rt.create_stream()
'''

JPEG_PROGRAM = COMMON + '''
channel = acl.media.dvpp_create_channel_desc()
check("create_channel", acl.media.dvpp_create_channel(channel))
jpg = np.fromfile("cat.jpg", dtype=np.byte)
host = acl.util.numpy_to_ptr(jpg)
w, h, c, ret = acl.media.dvpp_jpeg_get_image_info(host, jpg.size)
check("get_image_info", ret)
dev_in, ret = acl.media.dvpp_malloc(jpg.size)
check("memcpy", acl.rt.memcpy(dev_in, jpg.size, host, jpg.size, 1))
# the sample's own rule: 128 x 16 alignment, x 3/2
aw, ah = (w + 127) // 128 * 128, (h + 15) // 16 * 16
size = aw * ah * 3 // 2
predicted, ret = acl.media.dvpp_jpeg_predict_dec_size(host, jpg.size, 1)
check("predict", ret)
assert predicted <= size, (predicted, size)
dec_out, ret = acl.media.dvpp_malloc(size)
dec = pic(dec_out, size, 1, w, h, aw, ah)
check("decode", acl.media.dvpp_jpeg_decode_async(channel, dev_in, jpg.size, dec, stream))
check("sync", acl.rt.synchronize_stream(stream))
w, h = acl.media.dvpp_get_pic_desc_width(dec), acl.media.dvpp_get_pic_desc_height(dec)
ws = acl.media.dvpp_get_pic_desc_width_stride(dec)
hs = acl.media.dvpp_get_pic_desc_height_stride(dec)
print(f"decoded {w}x{h} strides {ws}x{hs}")
# VPC resize to the model's 224 x 224 NV12
rs_size = 224 * 224 * 3 // 2
rs_out, ret = acl.media.dvpp_malloc(rs_size)
src = pic(dec_out, size, 1, w, h, ws, hs)
dst = pic(rs_out, rs_size, 1, 224, 224, 224, 224)
config = acl.media.dvpp_create_resize_config()
check("resize", acl.media.dvpp_vpc_resize_async(channel, src, dst, config, stream))
check("sync", acl.rt.synchronize_stream(stream))
model_id, ret = acl.mdl.load_from_file("model/resnet50_aipp.om")
check("load", ret)
desc = acl.mdl.create_desc()
check("get_desc", acl.mdl.get_desc(desc, model_id))
inputs, outputs = acl.mdl.create_dataset(), acl.mdl.create_dataset()
buf_in = acl.create_data_buffer(rs_out, rs_size)
_, ret = acl.mdl.add_dataset_buffer(inputs, buf_in)
out_size = acl.mdl.get_output_size_by_index(desc, 0)
dev_out, ret = acl.rt.malloc(out_size, 0)
buf_out = acl.create_data_buffer(dev_out, out_size)
_, ret = acl.mdl.add_dataset_buffer(outputs, buf_out)
check("execute", acl.mdl.execute(model_id, inputs, outputs))
host_out = np.zeros(1000, np.float32)
check("memcpy", acl.rt.memcpy(acl.util.numpy_to_ptr(host_out), out_size, dev_out, out_size, 2))
print("top class", int(host_out.argmax()))
# JPEG encode the decoded picture back (the sample's JPEG_ENC path, size through a pointer)
jconfig = acl.media.dvpp_create_jpege_config()
check("level", acl.media.dvpp_set_jpege_config_level(jconfig, 100))
enc_in = pic(dec_out, size, 1, w, h, ws, hs)
enc_size, ret = acl.media.dvpp_jpeg_predict_enc_size(enc_in, jconfig)
check("predict_enc", ret)
enc_out, ret = acl.media.dvpp_malloc(enc_size)
out_len = np.array([enc_size], dtype=np.int32)
check("encode", acl.media.dvpp_jpeg_encode_async(channel, enc_in, enc_out,
                                                   acl.util.numpy_to_ptr(out_len), jconfig,
                                                   stream))
check("sync", acl.rt.synchronize_stream(stream))
n = int(out_len[0])
encoded = np.zeros(n, np.uint8)
check("memcpy", acl.rt.memcpy(acl.util.numpy_to_ptr(encoded), n, enc_out, n, 2))
encoded.tofile("out.jpg")
print(f"encoded {n} of {enc_size} bytes")
for d in (dec, src, dst, enc_in):
    check("destroy pic", acl.media.dvpp_destroy_pic_desc(d))
acl.media.dvpp_destroy_resize_config(config)
acl.media.dvpp_destroy_jpege_config(jconfig)
for p in (dev_in, dec_out, rs_out, enc_out):
    check("dvpp_free", acl.media.dvpp_free(p))
for b in (buf_in, buf_out):
    acl.destroy_data_buffer(b)
acl.mdl.destroy_dataset(inputs)
acl.mdl.destroy_dataset(outputs)
acl.mdl.destroy_desc(desc)
acl.mdl.unload(model_id)
acl.rt.free(dev_out)
check("destroy_channel", acl.media.dvpp_destroy_channel(channel))
acl.media.dvpp_destroy_channel_desc(channel)
acl.rt.destroy_stream(stream)
acl.rt.destroy_context(context)
acl.rt.reset_device(0)
acl.finalize()
'''


def write_inputs(tmp_path):
    yy, xx = np.mgrid[0:300, 0:400]
    arr = np.stack([xx % 256, yy % 256, (xx + yy) % 256], 2).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(arr).save(out, "JPEG", quality=92)
    (tmp_path / "cat.jpg").write_bytes(out.getvalue())
    (tmp_path / "model").mkdir()
    spec = {"inputs": [{"name": "data", "shape": [1, 75264], "dtype": "uint8"}],
            "outputs": [{"name": "prob", "shape": [1, 1000], "dtype": "float32"}],
            "weight_bytes": 1 << 20, "work_bytes": 1 << 20}
    (tmp_path / "model" / "resnet50_aipp.om.memsim.json").write_text(json.dumps(spec))
    return arr


@pytest.mark.parametrize("product", ["A2", "310P"])
def test_jpeg_decode_resize_model_and_encode(tmp_path, product):
    arr = write_inputs(tmp_path)
    done = run(tmp_path, JPEG_PROGRAM, "--product", product)
    assert done.returncode == 0, done.stdout + done.stderr
    # the strides the program set (the sample's 128 x 16) are kept
    assert "decoded 400x300 strides 512x304" in done.stdout
    assert "ERROR SUMMARY: 0 errors" in done.stdout + done.stderr
    back = np.asarray(Image.open(tmp_path / "out.jpg").convert("RGB")).astype(int)
    assert back.shape == arr.shape and np.abs(back - arr).mean() < 4


def test_the_sizes_copy_bug_of_the_jpeg_sample_is_an_uninitialized_read(tmp_path):
    """The sample hands bytes_to_ptr(copy) to dvpp_jpeg_encode_async and then reads its own
    array: it copies back the whole predicted buffer, bytes JPEGE never wrote."""
    write_inputs(tmp_path)
    buggy = JPEG_PROGRAM.replace(
        "acl.util.numpy_to_ptr(out_len), jconfig",
        "acl.util.bytes_to_ptr(size_bytes), jconfig").replace(
        "out_len = np.array([enc_size], dtype=np.int32)",
        "out_len = np.array([enc_size], dtype=np.int32)\nsize_bytes = out_len.tobytes()")
    done = run(tmp_path, buggy)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "uninitialized-read" in done.stdout + done.stderr


VIDEO_PROGRAM = COMMON + '''
import threading
W, H = 128, 128
running = [True]

def report_loop(args):
    acl.rt.set_context(context)
    while running[0]:
        acl.rt.process_report(args[0])

tid, ret = acl.util.start_thread(report_loop, [100])
check("start_thread", ret)
chunks = []

def venc_callback(input_pic, output_stream, user_data):
    data = acl.media.dvpp_get_stream_desc_data(output_stream)
    size = acl.media.dvpp_get_stream_desc_size(output_stream)
    host = np.zeros(size, np.uint8)
    check("memcpy", acl.rt.memcpy(acl.util.numpy_to_ptr(host), size, data, size, 2))
    chunks.append(host.tobytes())

venc = acl.media.venc_create_channel_desc()
for name, v in (("thread_id", tid), ("entype", EN_TYPE), ("pic_format", 1),
                ("key_frame_interval", 16), ("pic_height", H), ("pic_width", W)):
    check(name, getattr(acl.media, "venc_set_channel_desc_" + name)(venc, v))
check("callback", acl.media.venc_set_channel_desc_callback(venc, venc_callback))
check("venc_create_channel", acl.media.venc_create_channel(venc))
frame_config = acl.media.venc_create_frame_config()
yuv = np.full(W * H * 3 // 2, 128, np.uint8)
yuv[:W * H] = np.tile(np.arange(W, dtype=np.uint8), H)
pic_dev, ret = acl.media.dvpp_malloc(yuv.size)
check("memcpy", acl.rt.memcpy(pic_dev, yuv.size, acl.util.numpy_to_ptr(yuv), yuv.size, 1))
picture = pic(pic_dev, yuv.size, 1)
acl.media.venc_set_frame_config_eos(frame_config, 0)
for i in range(8):
    check("venc_send_frame", acl.media.venc_send_frame(venc, picture, 0, frame_config, None))
acl.media.venc_set_frame_config_eos(frame_config, 1)
check("eos", acl.media.venc_send_frame(venc, 0, 0, frame_config, None))
check("venc_destroy_channel", acl.media.venc_destroy_channel(venc))
stream_bytes = b"".join(chunks)
print(f"encoded {len(chunks)} frames, {len(stream_bytes)} bytes")

decoded = []

def vdec_callback(input_stream, output_pic, user_data):
    decoded.append((acl.media.dvpp_get_pic_desc_ret_code(output_pic),
                    acl.media.dvpp_get_pic_desc_data(output_pic)))
    check("destroy stream", acl.media.dvpp_destroy_stream_desc(input_stream))
    check("destroy pic", acl.media.dvpp_destroy_pic_desc(output_pic))

vdec = acl.media.vdec_create_channel_desc()
acl.media.vdec_set_channel_desc_channel_id(vdec, 10)
acl.media.vdec_set_channel_desc_thread_id(vdec, tid)
acl.media.vdec_set_channel_desc_callback(vdec, vdec_callback)
acl.media.vdec_set_channel_desc_entype(vdec, EN_TYPE)
acl.media.vdec_set_channel_desc_out_pic_format(vdec, 2)
check("vdec_create_channel", acl.media.vdec_create_channel(vdec))
arr = np.frombuffer(stream_bytes, np.uint8).copy()
in_dev, ret = acl.media.dvpp_malloc(arr.size)
check("memcpy", acl.rt.memcpy(in_dev, arr.size, acl.util.numpy_to_ptr(arr), arr.size, 1))
vdec_config = acl.media.vdec_create_frame_config()
outs = []
for i in range(3):
    sd = acl.media.dvpp_create_stream_desc()
    acl.media.dvpp_set_stream_desc_data(sd, in_dev)
    acl.media.dvpp_set_stream_desc_size(sd, arr.size)
    out, ret = acl.media.dvpp_malloc(W * H * 3 // 2)
    outs.append(out)
    op = pic(out, W * H * 3 // 2, 2, W, H, W, H)
    check("vdec_send_frame", acl.media.vdec_send_frame(vdec, sd, op, vdec_config, None))
check("vdec_destroy_channel", acl.media.vdec_destroy_channel(vdec))
running[0] = False
check("stop_thread", acl.util.stop_thread(tid))
host = np.zeros(W * H * 3 // 2, np.uint8)
check("memcpy", acl.rt.memcpy(acl.util.numpy_to_ptr(host), host.size, outs[0], host.size, 2))
print(f"decoded {len(decoded)} frames, ret codes {sorted({r for r, _ in decoded})}, "
      f"luma error {np.abs(host[:W * H].astype(int) - yuv[:W * H]).mean():.2f}")
for p in outs + [pic_dev, in_dev]:
    check("dvpp_free", acl.media.dvpp_free(p))
acl.media.dvpp_destroy_pic_desc(picture)
acl.media.venc_destroy_frame_config(frame_config)
acl.media.vdec_destroy_frame_config(vdec_config)
acl.media.venc_destroy_channel_desc(venc)
acl.media.vdec_destroy_channel_desc(vdec)
acl.rt.destroy_stream(stream)
acl.rt.destroy_context(context)
acl.rt.reset_device(0)
acl.finalize()
'''


@pytest.mark.parametrize("en_type", [0, 1])
def test_venc_then_vdec_as_the_samples_do(tmp_path, en_type):
    pytest.importorskip("av", reason="VDEC/VENC need PyAV (the media extra)")
    done = run(tmp_path, VIDEO_PROGRAM.replace("EN_TYPE", str(en_type)))
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "encoded 8 frames" in out
    assert "decoded 3 frames, ret codes [0]" in out
    error = float(out.split("luma error ")[1].split()[0])
    assert error < 3
    assert "ERROR SUMMARY: 0 errors" in out
