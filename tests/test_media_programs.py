"""End to end: pyacl programs with the VPC's call sequences, run unchanged under
``ascend-memsim run`` in a fresh interpreter (the example, a batch crop-resize-paste program
after the vendor's C++ vpc samples, and the classic too-small output buffer)."""

import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(tmp_path, script, *options):
    return subprocess.run(
        [sys.executable, "-m", "ascend_memsim", "run", *options, str(script)],
        env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True, text=True, timeout=120,
        cwd=tmp_path)


@pytest.mark.parametrize("product", ["A2", "310P", "950PR"])
def test_the_example_runs_on_each_product(tmp_path, product):
    done = run(tmp_path, os.path.join(ROOT, "examples", "vpc_resize_for_model.py"),
               "--product", product)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "-> 224x224 NV12 (strides 224x224, 75264 bytes)" in done.stdout
    assert "max difference 1" in done.stdout or "max difference 0" in done.stdout
    # the gradient's levels are 0..254; the classifier names one of them
    assert "top class (luminance level):" in done.stdout


PROGRAM = '''
import acl
import numpy as np

def check(what, ret):
    if ret != 0:
        raise SystemExit(f"{what} failed: {ret} {acl.get_recent_err_msg()}")

def desc(data, size, fmt, w, h, ws, hs, d=None):
    d = acl.media.dvpp_create_pic_desc() if d is None else d
    for setter, v in ((acl.media.dvpp_set_pic_desc_data, data),
                      (acl.media.dvpp_set_pic_desc_size, size),
                      (acl.media.dvpp_set_pic_desc_format, fmt),
                      (acl.media.dvpp_set_pic_desc_width, w),
                      (acl.media.dvpp_set_pic_desc_height, h),
                      (acl.media.dvpp_set_pic_desc_width_stride, ws),
                      (acl.media.dvpp_set_pic_desc_height_stride, hs)):
        check(setter.__name__, setter(d, v))
    return d

check("init", acl.init())
check("set_device", acl.rt.set_device(0))
stream, ret = acl.rt.create_stream()
channel = acl.media.dvpp_create_channel_desc()
check("create_channel", acl.media.dvpp_create_channel(channel))
W, H = 128, 64
frame = np.arange(W * H * 3 // 2, dtype=np.uint32).astype(np.uint8).tobytes()
src_dev, ret = acl.media.dvpp_malloc(len(frame))
check("memcpy", acl.rt.memcpy(src_dev, len(frame), acl.util.bytes_to_ptr(frame), len(frame), 1))
src_batch = acl.media.dvpp_create_batch_pic_desc(1)
desc(src_dev, len(frame), 1, W, H, W, H, acl.media.dvpp_get_pic_desc(src_batch, 0))
dst_batch = acl.media.dvpp_create_batch_pic_desc(2)
outs = []
for i in range(2):
    size = 64 * 64 * 3 // 2
    dev, ret = acl.media.dvpp_malloc(size)
    check("memset", acl.rt.memset(dev, size, 0, size))
    desc(dev, size, 1, 64, 64, 64, 64, acl.media.dvpp_get_pic_desc(dst_batch, i))
    outs.append((dev, size))
crops = [acl.media.dvpp_create_roi_config(0, 63, 0, 63),
         acl.media.dvpp_create_roi_config(64, 127, 0, 63)]
pastes = [acl.media.dvpp_create_roi_config(16, 47, 16, 47)] * 2
config = acl.media.dvpp_create_resize_config()
check("batch crop resize paste", acl.media.dvpp_vpc_batch_crop_resize_paste_async(
    channel, src_batch, [2], dst_batch, crops, pastes, config, stream))
check("synchronize", acl.rt.synchronize_stream(stream))
host, ret = acl.rt.malloc_host(64 * 64)
for dev, size in outs:
    check("memcpy", acl.rt.memcpy(host, 64 * 64, dev, 64 * 64, 2))
    y = np.frombuffer(acl.util.ptr_to_bytes(host, 64 * 64), np.uint8).reshape(64, 64)
    print("pasted", int(y[16:48, 16:48].astype(bool).any()), "outside", int(y[:16].any()))
# the classic mistake: the output buffer sized for the picture, not for its strides
small, ret = acl.media.dvpp_malloc(100 * 50 * 3 // 2)
bad = desc(small, 112 * 50 * 3 // 2, 1, 100, 50, 112, 50)
one = acl.media.dvpp_create_pic_desc()
desc(src_dev, len(frame), 1, W, H, W, H, one)
print("small buffer", acl.media.dvpp_vpc_resize_async(channel, one, bad, config, stream))
acl.rt.free_host(host)
acl.finalize()
'''


def test_batch_crop_resize_paste_and_a_buffer_too_small(tmp_path):
    script = tmp_path / "program.py"
    script.write_text(textwrap.dedent(PROGRAM))
    done = run(tmp_path, script)
    assert done.stdout.count("pasted 1 outside 0") == 2, done.stdout + done.stderr
    assert "small buffer 100000" in done.stdout
    assert "[media-overflow]" in done.stderr and "bytes past its end" in done.stderr
    # run exits non-zero on findings (and the leaks the program left)
    assert done.returncode == 1
