"""End to end: programs that use the call sequences of the vendor's operator and model samples,
run unchanged under ``ascend-memsim run`` in a fresh interpreter.

They follow (our own code, same calls in the same order) the vendor's ``acl_execute_add``
(``acl.op.execute_v2``), ``acl_execute_slice`` (``create_handle`` / ``execute_with_handle``
with host buffers, read back with ``ptr_to_bytes`` of device memory: a program that runs on
the device, so ``--run-mode device``), ``resnet50_imagenet_classification`` (``acl.mdl``,
synchronous) and ``resnet50_async_imagenet_classification`` (``execute_async``, callbacks on a
``start_thread`` thread) from Ascend/samples.
"""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

ADD = '''
import numpy as np
import acl

def check(what, ret):
    if ret != 0:
        raise Exception(f"{what} failed ret={ret}")

acl.init()
check("set_device", acl.rt.set_device(0))
context, ret = acl.rt.create_context(0)
check("create_context", ret)
stream, ret = acl.rt.create_stream()
check("create_stream", ret)
attr = acl.op.create_attr()
check("set_model_dir", acl.op.set_model_dir("../test_data/op_models"))
a = np.random.randint(100, size=(8, 16)).astype(np.int32)
b = np.random.randint(100, size=(8, 16)).astype(np.int32)
descs, buffers, devs = [], [], []
for x in (a, b):
    desc = acl.create_tensor_desc(3, [8, 16], 2)
    size = acl.get_tensor_desc_size(desc)
    dev, ret = acl.rt.malloc(size, 2)
    check("malloc", ret)
    data = x.tobytes()
    ptr = acl.util.bytes_to_ptr(data)
    check("memcpy", acl.rt.memcpy(dev, size, ptr, size, 1))
    descs.append(desc); devs.append(dev); buffers.append(acl.create_data_buffer(dev, size))
out_desc = acl.create_tensor_desc(3, [8, 16], 2)
size = acl.get_tensor_desc_size(out_desc)
out_dev, ret = acl.rt.malloc(size, 2)
out_buf = acl.create_data_buffer(out_dev, size)
host, ret = acl.rt.malloc_host(size)
check("execute_v2", acl.op.execute_v2("Add", descs, buffers, [out_desc], [out_buf], attr,
                                      stream))
check("synchronize_stream", acl.rt.synchronize_stream(stream))
check("memcpy", acl.rt.memcpy(host, size, out_dev, size, 2))
out = np.frombuffer(acl.util.ptr_to_bytes(host, size), dtype=np.int32).reshape((8, 16))
print("ADD OK" if (out == a + b).all() else "ADD WRONG")
for buf, dev, desc in zip(buffers + [out_buf], devs + [out_dev], descs + [out_desc]):
    check("destroy_data_buffer", acl.destroy_data_buffer(buf))
    check("free", acl.rt.free(dev))
    acl.destroy_tensor_desc(desc)
acl.op.destroy_attr(attr)
check("free_host", acl.rt.free_host(host))
check("destroy_stream", acl.rt.destroy_stream(stream))
check("destroy_context", acl.rt.destroy_context(context))
check("reset_device", acl.rt.reset_device(0))
check("finalize", acl.finalize())
'''

SLICE = '''
import numpy as np
import acl

acl.init()
acl.rt.set_device(0)
context, ret = acl.rt.create_context(0)
stream, ret = acl.rt.create_stream()
attr = acl.op.create_attr()
ret = acl.op.set_model_dir("../op_models_fp16")
d_x = acl.create_tensor_desc(1, [60, 300], 2)
size_x = acl.get_tensor_desc_size(d_x)
d_offsets = acl.create_tensor_desc(3, [2], 2)
size_2 = acl.get_tensor_desc_size(d_offsets)
d_size = acl.create_tensor_desc(3, [2], 2)
d_out = acl.create_tensor_desc(1, [60, 300], 2)
dev_out, ret = acl.rt.malloc(size_x, 0)
out_buf = acl.create_data_buffer(dev_out, size_x)
handle, ret = acl.op.create_handle("Slice", [d_x, d_offsets, d_size], [d_out], attr)
x_bytes = np.ones((60, 300), dtype=np.float16).tobytes()
x_buf = acl.create_data_buffer(acl.util.bytes_to_ptr(x_bytes), size_x)
off_bytes = np.zeros(2, dtype=np.int32).tobytes()
off_buf = acl.create_data_buffer(acl.util.bytes_to_ptr(off_bytes), size_2)
size_bytes = np.array([60, 300], dtype=np.int32).tobytes()
size_buf = acl.create_data_buffer(acl.util.bytes_to_ptr(size_bytes), size_2)
print(acl.op.execute_with_handle(handle, [x_buf, off_buf, size_buf], [out_buf], stream))
print(acl.rt.synchronize_stream(stream))
out = np.frombuffer(acl.util.ptr_to_bytes(dev_out, size_x), dtype=np.float16)
values, counts = np.unique(out, return_counts=True)
print("count:", counts)
acl.op.destroy_handle(handle)
for buf, desc in ((x_buf, d_x), (off_buf, d_offsets), (size_buf, d_size)):
    acl.destroy_data_buffer(buf)
    acl.destroy_tensor_desc(desc)
acl.destroy_data_buffer(out_buf)
acl.rt.free(dev_out)
acl.destroy_tensor_desc(d_out)
acl.op.destroy_attr(attr)
acl.rt.destroy_stream(stream)
acl.rt.destroy_context(context)
acl.rt.reset_device(0)
acl.finalize()
'''

RESNET = '''
import sys
import numpy as np
import acl

model_path = sys.argv[1]
acl.init()
acl.rt.set_device(0)
context, ret = acl.rt.create_context(0)
model_id, ret = acl.mdl.load_from_file(model_path)
assert ret == 0, ret
print(f"model_id:{model_id}")
desc = acl.mdl.create_desc()
ret = acl.mdl.get_desc(desc, model_id)
inputs = [acl.rt.malloc(acl.mdl.get_input_size_by_index(desc, i), 0)[0]
          for i in range(acl.mdl.get_num_inputs(desc))]
outputs = [acl.rt.malloc(acl.mdl.get_output_size_by_index(desc, i), 0)[0]
           for i in range(acl.mdl.get_num_outputs(desc))]


def make_dataset(ptrs, sizer):
    dataset = acl.mdl.create_dataset()
    for i, ptr in enumerate(ptrs):
        buf = acl.create_data_buffer(ptr, sizer(desc, i))
        _, ret = acl.mdl.add_dataset_buffer(dataset, buf)
        if ret:
            acl.destroy_data_buffer(buf)
    return dataset


def destroy_dataset(dataset):
    for i in range(acl.mdl.get_dataset_num_buffers(dataset)):
        acl.destroy_data_buffer(acl.mdl.get_dataset_buffer(dataset, i))
    acl.mdl.destroy_dataset(dataset)


for image in range(2):
    img = np.full(3 * 224 * 224, image, dtype=np.float16)
    size = acl.mdl.get_input_size_by_index(desc, 0)
    data = img.tobytes()
    acl.rt.memcpy(inputs[0], size, acl.util.bytes_to_ptr(data), size, 1)
    in_ds = make_dataset(inputs, acl.mdl.get_input_size_by_index)
    out_ds = make_dataset(outputs, acl.mdl.get_output_size_by_index)
    ret = acl.mdl.execute(model_id, in_ds, out_ds)
    assert ret == 0, ret
    destroy_dataset(in_ds)
    destroy_dataset(out_ds)
    size = acl.mdl.get_output_size_by_index(desc, 0)
    host, ret = acl.rt.malloc_host(size)
    acl.rt.memcpy(host, size, outputs[0], size, 2)
    dims, ret = acl.mdl.get_cur_output_dims(desc, 0)
    probs = np.frombuffer(acl.util.ptr_to_bytes(host, size), dtype=np.float32)
    probs = probs.reshape(dims["dims"])
    top = probs.flatten().argsort()[-1:-6:-1]
    print("top5:", [int(i) for i in top])
    acl.rt.free_host(host)
acl.mdl.unload(model_id)
acl.mdl.destroy_desc(desc)
for ptr in inputs + outputs:
    acl.rt.free(ptr)
acl.rt.destroy_context(context)
acl.rt.reset_device(0)
acl.finalize()
'''

RESNET_ASYNC = '''
import sys
import numpy as np
import acl

model_path = sys.argv[1]
acl.init()
acl.rt.set_device(0)
context, ret = acl.rt.create_context(0)
stream, ret = acl.rt.create_stream()
model_id, ret = acl.mdl.load_from_file(model_path)
desc = acl.mdl.create_desc()
acl.mdl.get_desc(desc, model_id)
in_size = acl.mdl.get_input_size_by_index(desc, 0)
out_size = acl.mdl.get_output_size_by_index(desc, 0)
running = True
results = []


def process(args):
    ctx, timeout = args
    acl.rt.set_context(ctx)
    while running:
        acl.rt.process_report(timeout)


def callback(user_data):
    in_ds, out_ds = user_data
    buf = acl.mdl.get_dataset_buffer(out_ds, 0)
    ptr, size = acl.get_data_buffer_addr(buf), acl.get_data_buffer_size_v2(buf)
    host, ret = acl.rt.malloc_host(size)
    acl.rt.memcpy(host, size, ptr, size, 2)
    results.append(np.frombuffer(acl.util.ptr_to_bytes(host, size), np.float32).argmax())
    acl.rt.free_host(host)


tid, ret = acl.util.start_thread(process, [context, 50])
acl.rt.subscribe_report(tid, stream)
kept = []
for i in range(4):
    dev_in, _ = acl.rt.malloc(in_size, 0)
    dev_out, _ = acl.rt.malloc(out_size, 0)
    data = np.full(in_size // 2, i, np.float16).tobytes()
    acl.rt.memcpy(dev_in, in_size, acl.util.bytes_to_ptr(data), in_size, 1)
    in_ds, out_ds = acl.mdl.create_dataset(), acl.mdl.create_dataset()
    acl.mdl.add_dataset_buffer(in_ds, acl.create_data_buffer(dev_in, in_size))
    acl.mdl.add_dataset_buffer(out_ds, acl.create_data_buffer(dev_out, out_size))
    assert acl.mdl.execute_async(model_id, in_ds, out_ds, stream) == 0
    assert acl.rt.launch_callback(callback, [in_ds, out_ds], 1, stream) == 0
    kept.append((in_ds, out_ds, dev_in, dev_out))
assert acl.rt.synchronize_stream(stream) == 0
print("callbacks:", len(results))
acl.rt.unsubscribe_report(tid, stream)
running = False
acl.util.stop_thread(tid)
for in_ds, out_ds, dev_in, dev_out in kept:
    for ds in (in_ds, out_ds):
        acl.destroy_data_buffer(acl.mdl.get_dataset_buffer(ds, 0))
        acl.mdl.destroy_dataset(ds)
    acl.rt.free(dev_in)
    acl.rt.free(dev_out)
acl.mdl.unload(model_id)
acl.mdl.destroy_desc(desc)
acl.rt.destroy_stream(stream)
acl.rt.destroy_context(context)
acl.rt.reset_device(0)
acl.finalize()
'''

STAND_IN = {"inputs": [{"name": "data", "shape": [1, 3, 224, 224], "dtype": "float16",
                        "format": "NCHW"}],
            "outputs": [{"name": "prob", "shape": [1, 1000], "dtype": "float32"}],
            "weight_bytes": 102 * 2**20, "work_bytes": 8 * 2**20}


def run(tmp_path, source, *args, options=()):
    script = tmp_path / "program.py"
    script.write_text(textwrap.dedent(source))
    return subprocess.run(
        [sys.executable, "-m", "ascend_memsim", "run", *options, str(script), *args],
        env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True, text=True, timeout=120,
        cwd=tmp_path)


def test_add_through_execute_v2(tmp_path):
    done = run(tmp_path, ADD)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ADD OK" in done.stdout


def test_slice_through_a_handle_on_a_device_run_mode(tmp_path):
    done = run(tmp_path, SLICE, options=["--run-mode", "device"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.split()[:2] == ["0", "0"]
    assert "count: [18000]" in done.stdout


def test_slice_with_host_buffers_is_refused_on_a_host(tmp_path):
    done = run(tmp_path, SLICE)
    assert done.returncode != 0
    assert done.stdout.split()[0] == "107000"
    assert "wrong-memory" in done.stderr


@pytest.fixture
def model(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "resnet50.om.memsim.json").write_text(json.dumps(STAND_IN))
    return "model/resnet50.om"


def test_resnet50_classification_with_a_stand_in(tmp_path, model):
    done = run(tmp_path, RESNET, model)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "model_id:1" in done.stdout
    tops = [line for line in done.stdout.splitlines() if line.startswith("top5:")]
    assert len(tops) == 2 and tops[0] != tops[1]      # outputs follow the inputs


def test_resnet50_async_with_callbacks(tmp_path, model):
    done = run(tmp_path, RESNET_ASYNC, model)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "callbacks: 4" in done.stdout


def test_a_missing_stand_in_is_explained(tmp_path):
    done = run(tmp_path, RESNET, "model/resnet50.om")
    assert done.returncode != 0
    assert "AssertionError: 100003" in done.stderr


def test_numpy_is_available_for_these_programs():
    assert np.__version__
