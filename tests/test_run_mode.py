"""Run mode 'device' (ACL_DEVICE): host and device memory are one for operators and ptr_to_*."""

import json

import numpy as np
import pytest

import ascend_memsim.acl as acl
from ascend_memsim import InvalidArgument, MiB, Runtime, Sanitizer


def test_default_is_host_and_device_mode_answers_acl_device():
    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer="off"):
        assert acl.rt.get_run_mode() == (acl.ACL_HOST, 0)
    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer="off", run_mode="device"):
        assert acl.rt.get_run_mode() == (acl.ACL_DEVICE, 0)
    with pytest.raises(InvalidArgument):
        Runtime("A2", run_mode="board")


def test_device_mode_takes_host_operands_and_reads_device_memory():
    sanitizer = Sanitizer(output=None)
    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer=sanitizer, run_mode="device") as rt:
        rt.set_device(0)
        x = np.arange(-3, 3, dtype=np.float32)
        desc = acl.create_tensor_desc(acl.ACL_FLOAT, [6], acl.ACL_FORMAT_ND)
        host_in = acl.create_data_buffer(acl.util.numpy_to_ptr(x), 24)
        dev = rt.malloc(24)
        out = acl.create_data_buffer(dev, 24)
        assert acl.op.execute_v2("Relu", [desc], [host_in], [desc], [out], 0, 0) == 0
        assert acl.rt.synchronize_stream(0) == 0
        got = np.frombuffer(acl.util.ptr_to_bytes(dev, 24), np.float32)
        assert (got == np.maximum(x, 0)).all()
        view = acl.util.ptr_to_numpy(dev, (6,), 11)
        view[:] = 7
        assert (np.frombuffer(acl.util.ptr_to_bytes(dev, 24), np.float32) == 7).all()
        assert sanitizer.reports == []
        for buf in (host_in, out):
            acl.destroy_data_buffer(buf)
        acl.destroy_tensor_desc(desc)
        rt.free(dev)


def test_host_mode_refuses_reading_device_memory_directly():
    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer="off") as rt:
        rt.set_device(0)
        dev = rt.malloc(8)
        with pytest.raises(ValueError, match="run_mode 'device'"):
            acl.util.ptr_to_bytes(dev, 8)
        rt.free(dev)


def test_run_mode_from_the_acl_init_config(tmp_path):
    config = tmp_path / "acl.json"
    config.write_text(json.dumps({"memsim": {"run_mode": "device"}}))
    assert acl.init(str(config)) == 0
    assert acl.rt.get_run_mode() == (acl.ACL_DEVICE, 0)
    assert acl.finalize() == 0
    config.write_text(json.dumps({"memsim": {"run_mode": 7}}))
    assert acl.init(str(config)) == 100000


def test_an_adopted_runtime_in_use_refuses_a_new_run_mode(tmp_path):
    config = tmp_path / "acl.json"
    config.write_text(json.dumps({"memsim": {"run_mode": "device"}}))
    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer="off") as rt:
        rt.set_device(0)
        assert acl.init(str(config)) == 100000
        assert rt.run_mode == acl.ACL_HOST
        rt.reset_device(0)
