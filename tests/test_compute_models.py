"""acl.mdl: stand-ins, loading charges memory, descriptions, datasets, execution."""

import json

import numpy as np
import pytest

import ascend_memsim.acl as acl
from ascend_memsim import MiB, Runtime, Sanitizer, register_model, unregister_model

SPEC = {"inputs": [{"name": "x", "shape": [2, 3], "dtype": "float32", "format": "ND"},
                   {"name": "k", "shape": [1], "dtype": 3}],
        "outputs": [{"name": "y", "shape": [2, 3], "dtype": "float32"}],
        "weight_bytes": 4 * MiB, "work_bytes": 1 * MiB}


@pytest.fixture
def rt():
    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer=Sanitizer(output=None)) as runtime:
        runtime.set_device(0)
        yield runtime


@pytest.fixture
def model_path(tmp_path):
    path = tmp_path / "net.om"
    spec = dict(SPEC, fn="helper.py:double_plus_k")
    (tmp_path / "helper.py").write_text(
        "def double_plus_k(inputs):\n"
        "    x, k = inputs\n"
        "    return (x * 2 + k[0]).astype(x.dtype)\n")
    (tmp_path / "net.om.memsim.json").write_text(json.dumps(spec))
    return str(path)


def used(rt):
    free, total = rt.get_mem_info(acl.ACL_HBM_MEM)
    return total - free


def put(rt, array):
    array = np.ascontiguousarray(array)
    dev = rt.malloc(array.nbytes)
    assert acl.rt.memcpy(dev, array.nbytes, acl.util.numpy_to_ptr(array), array.nbytes, 1) == 0
    return dev


def dataset(devs_sizes):
    ds = acl.mdl.create_dataset()
    for dev, size in devs_sizes:
        _, ret = acl.mdl.add_dataset_buffer(ds, acl.create_data_buffer(dev, size))
        assert ret == 0
    return ds


def drop(ds):
    for i in range(acl.mdl.get_dataset_num_buffers(ds)):
        acl.destroy_data_buffer(acl.mdl.get_dataset_buffer(ds, i))
    assert acl.mdl.destroy_dataset(ds) == 0


def test_load_charges_and_unload_releases(rt, model_path):
    before = used(rt)
    assert acl.mdl.query_size(model_path) == (1 * MiB, 4 * MiB, 0)
    model_id, ret = acl.mdl.load_from_file(model_path)
    assert ret == 0 and model_id > 0
    assert used(rt) - before >= 5 * MiB
    assert {u.name for u in rt.get_mem_usage_info(0, 10)} >= {"GE"}
    assert acl.mdl.unload(model_id) == 0
    assert used(rt) == before
    assert acl.mdl.unload(model_id) == 100011


def test_a_model_that_does_not_fit_fails_and_charges_nothing(rt, tmp_path):
    path = str(tmp_path / "huge.om")
    register_model(path, dict(SPEC, weight_bytes=60 * MiB, work_bytes=8 * MiB))
    try:
        before = used(rt)
        assert acl.mdl.load_from_file(path) == (0, 207001)
        assert used(rt) == before
    finally:
        unregister_model(path)


def test_descriptions(rt, model_path):
    model_id, _ = acl.mdl.load_from_file(model_path)
    desc = acl.mdl.create_desc()
    assert acl.mdl.get_num_inputs(desc) == 0              # empty until get_desc
    assert acl.mdl.get_desc(desc, model_id) == 0
    assert (acl.mdl.get_num_inputs(desc), acl.mdl.get_num_outputs(desc)) == (2, 1)
    assert acl.mdl.get_input_size_by_index(desc, 0) == 24
    assert acl.mdl.get_input_size_by_index(desc, 1) == 4
    assert acl.mdl.get_output_size_by_index(desc, 0) == 24
    assert acl.mdl.get_input_dims(desc, 0) == ({"name": "x", "dimCount": 2, "dims": [2, 3]}, 0)
    assert acl.mdl.get_cur_output_dims(desc, 0)[0]["dims"] == [2, 3]
    assert acl.mdl.get_input_dims(desc, 5) == ({}, 100000)
    assert acl.mdl.get_input_data_type(desc, 1) == acl.ACL_INT32
    assert acl.mdl.get_output_data_type(desc, 0) == acl.ACL_FLOAT
    assert acl.mdl.get_input_format(desc, 0) == acl.ACL_FORMAT_ND
    assert acl.mdl.get_input_format(desc, 9) == -1
    assert acl.mdl.get_input_name_by_index(desc, 1) == "k"
    assert acl.mdl.get_output_index_by_name(desc, "y") == (0, 0)
    assert acl.mdl.get_input_index_by_name(desc, "nope") == (0, 100000)
    assert acl.mdl.get_dynamic_batch(desc) == ({"batchCount": 0, "batch": []}, 0)
    assert acl.mdl.get_dynamic_hw(desc, -1) == ({"hwCount": 0, "hw": []}, 0)
    assert acl.mdl.get_input_dynamic_gear_count(desc, -1) == (0, 0)
    assert acl.mdl.get_input_dynamic_dims(desc, -1, 5000) == (None, 100000)
    assert acl.mdl.get_desc(desc, 999) == 100011
    assert acl.mdl.destroy_desc(desc) == 0
    assert acl.mdl.destroy_desc(desc) == 107017
    acl.mdl.unload(model_id)


def test_execute_runs_the_function_and_checks_datasets(rt, model_path):
    model_id, _ = acl.mdl.load_from_file(model_path)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    dx, dk = put(rt, x), put(rt, np.array([5], np.int32))
    dy = rt.malloc(24)
    ins, outs = dataset([(dx, 24), (dk, 4)]), dataset([(dy, 24)])
    assert acl.mdl.execute(model_id, ins, outs) == 0
    y = np.zeros((2, 3), np.float32)
    acl.rt.memcpy(acl.util.numpy_to_ptr(y), 24, dy, 24, 2)
    assert (y == x * 2 + 5).all()
    # count and size mismatches
    short = dataset([(dx, 24)])
    assert acl.mdl.execute(model_id, short, outs) == 100017
    assert acl.mdl.execute(model_id, ins, ins) == 100018
    small = dataset([(dx, 8), (dk, 4)])
    assert acl.mdl.execute(model_id, small, outs) == 100017
    assert acl.mdl.execute(999, ins, outs) == 100011
    for ds in (ins, outs, short, small):
        drop(ds)
    for dev in (dx, dk, dy):
        rt.free(dev)
    acl.mdl.unload(model_id)


def test_execute_async_is_queued_and_default_outputs_are_deterministic(rt, tmp_path):
    path = str(tmp_path / "plain.om")
    register_model(path, {"inputs": SPEC["inputs"], "outputs": SPEC["outputs"]})
    try:
        model_id, _ = acl.mdl.load_from_file(path)
        stream, _ = acl.rt.create_stream()
        dx, dk = put(rt, np.ones((2, 3), np.float32)), put(rt, np.array([1], np.int32))
        results = []
        for _ in range(2):
            dy = rt.malloc(24)
            rt.memset(dy, 24, 0, 24)
            ins, outs = dataset([(dx, 24), (dk, 4)]), dataset([(dy, 24)])
            assert acl.mdl.execute_async(model_id, ins, outs, stream) == 0
            y = np.zeros(6, np.float32)
            acl.rt.memcpy(acl.util.numpy_to_ptr(y), 24, dy, 24, 2)
            assert (y == 0).all()                           # not run yet
            assert acl.rt.synchronize_stream(stream) == 0
            acl.rt.memcpy(acl.util.numpy_to_ptr(y), 24, dy, 24, 2)
            results.append(y)
            drop(ins)
            drop(outs)
            rt.free(dy)
        assert (results[0] == results[1]).all() and results[0].any()
        rt.free(dx)
        rt.free(dk)
        acl.rt.destroy_stream(stream)
        acl.mdl.unload(model_id)
    finally:
        unregister_model(path)


def test_registered_fn_and_wrong_outputs(rt, tmp_path):
    path = str(tmp_path / "bad.om")
    register_model(path, SPEC, fn=lambda inputs: [inputs[0].astype(np.float64)])
    try:
        model_id, _ = acl.mdl.load_from_file(path)
        dx, dk, dy = rt.malloc(24), rt.malloc(4), rt.malloc(24)
        for dev, n in ((dx, 24), (dk, 4)):
            rt.memset(dev, n, 0, n)
        ins, outs = dataset([(dx, 24), (dk, 4)]), dataset([(dy, 24)])
        assert acl.mdl.execute(model_id, ins, outs) == 100018
        assert "float64" in acl.get_recent_err_msg()
        drop(ins)
        drop(outs)
        for dev in (dx, dk, dy):
            rt.free(dev)
        acl.mdl.unload(model_id)
    finally:
        unregister_model(path)


def test_with_mem_variants_use_the_callers_memory(rt, model_path):
    work, weight = rt.malloc(1 * MiB), rt.malloc(4 * MiB)
    before = used(rt)
    model_id, ret = acl.mdl.load_from_file_with_mem(model_path, work, 1 * MiB, weight, 4 * MiB)
    assert ret == 0 and used(rt) == before
    assert acl.mdl.load_from_file_with_mem(model_path, work, 1 * MiB, weight, 1024) == (
        0, 100000)
    host, _ = acl.rt.malloc_host(4 * MiB)
    assert acl.mdl.load_from_file_with_mem(model_path, work, 1 * MiB, host, 4 * MiB)[1] == 107000
    acl.mdl.unload(model_id)
    acl.rt.free_host(host)
    rt.free(work)
    rt.free(weight)


def test_load_from_mem_reads_a_stand_in_or_a_registered_file(rt, tmp_path, model_path):
    blob = json.dumps(SPEC).encode()
    model_id, ret = acl.mdl.load_from_mem(acl.util.bytes_to_ptr(blob), len(blob))
    assert ret == 0
    assert acl.mdl.query_size_from_mem(acl.util.bytes_to_ptr(blob), len(blob)) == (
        1 * MiB, 4 * MiB, 0)
    acl.mdl.unload(model_id)
    om = tmp_path / "real.om"
    om.write_bytes(b"\x00not json\x01" * 10)
    raw = om.read_bytes()
    assert acl.mdl.load_from_mem(acl.util.bytes_to_ptr(raw), len(raw)) == (0, 100013)
    register_model(str(om), SPEC)
    try:
        model_id, ret = acl.mdl.load_from_mem(acl.util.bytes_to_ptr(raw), len(raw))
        assert ret == 0
        acl.mdl.unload(model_id)
    finally:
        unregister_model(str(om))


def test_missing_or_bad_stand_ins_say_what_to_write(rt, tmp_path):
    missing = str(tmp_path / "none.om")
    assert acl.mdl.load_from_file(missing) == (0, 100003)
    message = acl.get_recent_err_msg()
    assert "none.om.memsim.json" in message and '"inputs"' in message
    assert "register_model" in message
    exists = tmp_path / "exists.om"
    exists.write_bytes(b"om")
    assert acl.mdl.load_from_file(str(exists)) == (0, 100013)
    (tmp_path / "exists.om.memsim.json").write_text('{"inputs": [], "outputs": 3}')
    assert acl.mdl.load_from_file(str(exists)) == (0, 100013)
    (tmp_path / "exists.om.memsim.json").write_text(
        json.dumps(dict(SPEC, fn="no_such_module_xyz:f")))
    assert acl.mdl.load_from_file(str(exists)) == (0, 100013)
    assert "no_such_module_xyz" in acl.get_recent_err_msg()
    assert acl.mdl.load_from_file(3) == (0, 100000)
    assert rt.blocks() == []                                # nothing charged


def test_datasets(rt):
    ds = acl.mdl.create_dataset()
    buf = acl.create_data_buffer(0, 0)
    assert acl.mdl.add_dataset_buffer(ds, buf) == (ds, 0)
    assert acl.mdl.add_dataset_buffer(ds, 0xBAD) == (ds, 107017)
    assert acl.mdl.get_dataset_num_buffers(ds) == 1
    assert acl.mdl.get_dataset_buffer(ds, 0) == buf
    assert acl.mdl.get_dataset_buffer(ds, 1) == 0
    assert acl.mdl.destroy_dataset(ds) == 0
    assert acl.get_data_buffer_size_v2(buf) == 0            # the buffer outlives the dataset
    assert acl.mdl.get_dataset_num_buffers(ds) == 0
    acl.destroy_data_buffer(buf)


def test_an_unloaded_model_leaks_at_finalize(tmp_path, model_path):
    sanitizer = Sanitizer(output=None)
    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer=sanitizer):
        acl.init()
        acl.rt.set_device(0)
        acl.mdl.load_from_file(model_path)
        acl.finalize()
    wheres = [r.where for r in sanitizer.reports if r.kind == "leak"]
    assert any("aclmdlUnload" in w for w in wheres)
    assert sum("HBM" in w for w in wheres) == 2               # work and weight blocks
