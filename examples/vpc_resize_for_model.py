"""A JPEG-less image pipeline: a raw NV12 camera frame resized by the VPC for a model.

The call sequence of the vendor's vpc_jpeg_resnet50 sample without the JPEG decode: the
frame goes to DVPP memory, acl.media.dvpp_vpc_resize_async makes the 224x224 NV12 picture
the model's AIPP input expects, in DVPP memory sized by the VPC's rules, and the model reads
that very buffer. Run it unchanged, as a pyacl program, under the simulator:

    ascend-memsim run examples/vpc_resize_for_model.py

The model (models/vpc_classifier.om) is a stand-in (models/vpc_classifier.om.memsim.json):
its classes are luminance levels, so its answer shows it saw the resized pixels.
"""

import os
import tempfile

import acl
import numpy as np
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = os.path.join(HERE, "models", "vpc_classifier.om")
NV12 = 1                       # PIXEL_FORMAT_YUV_SEMIPLANAR_420 (acl_dvpp.h)
SRC_W, SRC_H = 640, 480
DST_W, DST_H = 224, 224


def check(what, ret):
    if ret != 0:
        raise RuntimeError(f"{what} failed: {ret} {acl.get_recent_err_msg()}")


def camera_frame(path):
    """A synthetic frame, written as raw NV12 (what a camera or a decoder hands over)."""
    y, x = np.mgrid[0:SRC_H, 0:SRC_W]
    luma = (x * 200 // SRC_W + y * 55 // SRC_H).astype(np.uint8)
    chroma = np.full((SRC_H // 2, SRC_W), 128, np.uint8)
    with open(path, "wb") as f:
        f.write(luma.tobytes() + chroma.tobytes())
    return luma


def align(value, to):
    return (value + to - 1) // to * to


def pic_desc(data, size, width, height, width_stride, height_stride):
    desc = acl.media.dvpp_create_pic_desc()
    check("set data", acl.media.dvpp_set_pic_desc_data(desc, data))
    check("set size", acl.media.dvpp_set_pic_desc_size(desc, size))
    check("set format", acl.media.dvpp_set_pic_desc_format(desc, NV12))
    check("set width", acl.media.dvpp_set_pic_desc_width(desc, width))
    check("set height", acl.media.dvpp_set_pic_desc_height(desc, height))
    check("set width stride", acl.media.dvpp_set_pic_desc_width_stride(desc, width_stride))
    check("set height stride", acl.media.dvpp_set_pic_desc_height_stride(desc, height_stride))
    return desc


def main():
    frame_path = os.path.join(tempfile.mkdtemp(), "frame.nv12")
    luma = camera_frame(frame_path)

    check("init", acl.init())
    check("set_device", acl.rt.set_device(0))
    context, ret = acl.rt.create_context(0)
    check("create_context", ret)
    stream, ret = acl.rt.create_stream()
    check("create_stream", ret)
    channel = acl.media.dvpp_create_channel_desc()
    check("create_channel", acl.media.dvpp_create_channel(channel))

    # the frame, into DVPP memory (VPC input: widthStride 16-aligned, heightStride 2-aligned,
    # size = widthStride x heightStride x 3 / 2)
    with open(frame_path, "rb") as f:
        frame = f.read()
    in_ws, in_hs = align(SRC_W, 16), align(SRC_H, 2)
    in_size = in_ws * in_hs * 3 // 2
    in_dev, ret = acl.media.dvpp_malloc(in_size)
    check("dvpp_malloc input", ret)
    check("memcpy", acl.rt.memcpy(in_dev, in_size, acl.util.bytes_to_ptr(frame), len(frame), 1))
    in_desc = pic_desc(in_dev, in_size, SRC_W, SRC_H, in_ws, in_hs)

    # the model's input: 224x224 NV12, the output of the VPC, in DVPP memory
    out_ws, out_hs = align(DST_W, 16), align(DST_H, 2)
    out_size = out_ws * out_hs * 3 // 2
    out_dev, ret = acl.media.dvpp_malloc(out_size)
    check("dvpp_malloc output", ret)
    out_desc = pic_desc(out_dev, out_size, DST_W, DST_H, out_ws, out_hs)
    resize = acl.media.dvpp_create_resize_config()
    check("interpolation", acl.media.dvpp_set_resize_config_interpolation(resize, 1))
    check("vpc_resize_async",
          acl.media.dvpp_vpc_resize_async(channel, in_desc, out_desc, resize, stream))
    check("synchronize_stream", acl.rt.synchronize_stream(stream))
    print(f"VPC: {SRC_W}x{SRC_H} NV12 ({in_size} bytes) -> {DST_W}x{DST_H} NV12 "
          f"(strides {out_ws}x{out_hs}, {out_size} bytes)")

    # the model reads the VPC's output buffer as it is
    model_id, ret = acl.mdl.load_from_file(MODEL)
    check("load_from_file", ret)
    model_desc = acl.mdl.create_desc()
    check("get_desc", acl.mdl.get_desc(model_desc, model_id))
    inputs, outputs = acl.mdl.create_dataset(), acl.mdl.create_dataset()
    _, ret = acl.mdl.add_dataset_buffer(inputs, acl.create_data_buffer(out_dev, out_size))
    check("add input", ret)
    prob_size = acl.mdl.get_output_size_by_index(model_desc, 0)
    prob_dev, ret = acl.rt.malloc(prob_size, 0)
    check("malloc output", ret)
    _, ret = acl.mdl.add_dataset_buffer(outputs, acl.create_data_buffer(prob_dev, prob_size))
    check("add output", ret)
    check("execute", acl.mdl.execute(model_id, inputs, outputs))

    host, ret = acl.rt.malloc_host(max(prob_size, out_size))
    check("malloc_host", ret)
    check("memcpy", acl.rt.memcpy(host, prob_size, prob_dev, prob_size, 2))
    prob = np.frombuffer(acl.util.ptr_to_bytes(host, prob_size), np.float32)
    print(f"top class (luminance level): {int(prob.argmax())}, share {prob.max():.3f}")

    # what the model saw, against Pillow's resize of the frame on the host
    check("memcpy", acl.rt.memcpy(host, out_size, out_dev, out_size, 2))
    seen = np.frombuffer(acl.util.ptr_to_bytes(host, out_size), np.uint8)
    seen = seen[:out_ws * out_hs].reshape(out_hs, out_ws)[:DST_H, :DST_W].astype(int)
    want = np.asarray(Image.fromarray(luma).resize((DST_W, DST_H), Image.BILINEAR)).astype(int)
    print(f"model input vs the frame on the host: max difference {np.abs(seen - want).max()}")

    for dataset in (inputs, outputs):
        for i in range(acl.mdl.get_dataset_num_buffers(dataset)):
            acl.destroy_data_buffer(acl.mdl.get_dataset_buffer(dataset, i))
        acl.mdl.destroy_dataset(dataset)
    acl.mdl.destroy_desc(model_desc)
    check("unload", acl.mdl.unload(model_id))
    acl.rt.free(prob_dev)
    acl.rt.free_host(host)
    for desc in (in_desc, out_desc):
        check("destroy_pic_desc", acl.media.dvpp_destroy_pic_desc(desc))
    check("destroy_resize_config", acl.media.dvpp_destroy_resize_config(resize))
    check("dvpp_free", acl.media.dvpp_free(in_dev))
    check("dvpp_free", acl.media.dvpp_free(out_dev))
    check("destroy_channel", acl.media.dvpp_destroy_channel(channel))
    check("destroy_channel_desc", acl.media.dvpp_destroy_channel_desc(channel))
    check("destroy_stream", acl.rt.destroy_stream(stream))
    check("destroy_context", acl.rt.destroy_context(context))
    check("reset_device", acl.rt.reset_device(0))
    check("finalize", acl.finalize())


if __name__ == "__main__":
    main()
