"""Unit-testing host-side operator code without hardware: a pytest test file.

``scaled_add`` below is the kind of code that drives an NPU: tensor descriptors, device
buffers, host-to-device copies, two queued operators (``Mul`` then ``Add``), a synchronisation
and the read-back. The tests run it on the simulator through the ``memsim`` fixture, whose
leak check fails a test that leaves a device block or a handle behind, and compare the result
with numpy. A custom kernel is registered for one test with the marker's ``ops`` option.

Run: python -m pytest examples/operator_unit_test.py   (or: python examples/operator_unit_test.py)
"""

import sys

import numpy as np
import pytest

import ascend_memsim.acl as acl

ND, HUGE_FIRST = acl.ACL_FORMAT_ND, acl.ACL_MEM_MALLOC_HUGE_FIRST
H2D, D2H = acl.ACL_MEMCPY_HOST_TO_DEVICE, acl.ACL_MEMCPY_DEVICE_TO_HOST


def check(ret, what):
    if ret != 0:
        raise RuntimeError(f"{what} failed: {ret} ({acl.get_recent_err_msg()})")


class DeviceTensor:
    """A float32 tensor on the device: descriptor, memory and data buffer."""

    def __init__(self, shape, host=None):
        self.shape = tuple(shape)
        self.desc = acl.create_tensor_desc(acl.ACL_FLOAT, list(shape), ND)
        self.size = acl.get_tensor_desc_size(self.desc)
        self.dev, ret = acl.rt.malloc(self.size, HUGE_FIRST)
        check(ret, "malloc")
        self.buf = acl.create_data_buffer(self.dev, self.size)
        if host is not None:
            host = np.ascontiguousarray(host, dtype=np.float32)
            check(acl.rt.memcpy(self.dev, self.size, acl.util.numpy_to_ptr(host), self.size,
                                H2D), "memcpy")

    def to_host(self):
        out = np.empty(self.shape, np.float32)
        check(acl.rt.memcpy(acl.util.numpy_to_ptr(out), self.size, self.dev, self.size, D2H),
              "memcpy")
        return out

    def release(self):
        acl.destroy_data_buffer(self.buf)
        acl.rt.free(self.dev)
        acl.destroy_tensor_desc(self.desc)


def run_op(op_type, inputs, output, stream, **int_attrs):
    attr = acl.op.create_attr()
    try:
        for name, value in int_attrs.items():
            check(acl.op.set_attr_int(attr, name, value), "set_attr_int")
        check(acl.op.execute_v2(op_type, [t.desc for t in inputs], [t.buf for t in inputs],
                                [output.desc], [output.buf], attr, stream), op_type)
    finally:
        acl.op.destroy_attr(attr)


def scaled_add(a, b, alpha):
    """alpha * a + b, computed on the device (the code under test)."""
    stream, ret = acl.rt.create_stream()
    check(ret, "create_stream")
    ta, tb = DeviceTensor(a.shape, a), DeviceTensor(b.shape, b)
    talpha = DeviceTensor((), np.float32(alpha))
    scaled, out = DeviceTensor(a.shape), DeviceTensor(a.shape)
    try:
        run_op("Mul", [ta, talpha], scaled, stream)
        run_op("Add", [scaled, tb], out, stream)
        check(acl.rt.synchronize_stream(stream), "synchronize_stream")
        return out.to_host()
    finally:
        for t in (ta, tb, talpha, scaled, out):
            t.release()
        acl.rt.destroy_stream(stream)


def test_scaled_add_matches_numpy(memsim):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((4, 8), np.float32), rng.standard_normal((4, 8), np.float32)
    np.testing.assert_allclose(scaled_add(a, b, 0.5), 0.5 * a + b, rtol=1e-6)


def test_scaled_add_leaves_no_device_memory_behind(memsim):
    before = acl.rt.get_mem_info(acl.ACL_HBM_MEM)
    scaled_add(np.ones((2, 2), np.float32), np.ones((2, 2), np.float32), 2.0)
    assert acl.rt.get_mem_info(acl.ACL_HBM_MEM) == before


def fake_mul(inputs, attrs):
    """A stand-in Mul that is off by one: the test below shows the kernel is really used."""
    return (inputs[0] * inputs[1] + 1).astype(np.float32)


@pytest.mark.memsim(ops={"Mul": fake_mul})
def test_a_registered_kernel_replaces_the_built_in_one(memsim):
    out = scaled_add(np.zeros((3,), np.float32), np.zeros((3,), np.float32), 1.0)
    assert (out == 1).all()


def test_an_unknown_operator_is_explained(memsim):
    t = DeviceTensor((2,), np.ones(2, np.float32))
    try:
        with pytest.raises(RuntimeError, match="register_op"):
            run_op("NoSuchOp", [t], t, 0)
    finally:
        t.release()


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
