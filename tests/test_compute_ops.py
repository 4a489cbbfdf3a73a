"""acl.op: kernels queued on streams, built-in kernels, registration, and the checks."""

import io

import numpy as np
import pytest

import ascend_memsim.acl as acl
from ascend_memsim import MiB, Runtime, Sanitizer, register_op, registered_ops, unregister_op

ND = acl.ACL_FORMAT_ND
DTYPES = {np.dtype("float32"): acl.ACL_FLOAT, np.dtype("float16"): acl.ACL_FLOAT16,
          np.dtype("int32"): acl.ACL_INT32, np.dtype("int64"): acl.ACL_INT64}


@pytest.fixture
def rt():
    out = io.StringIO()
    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer=Sanitizer(output=out)) as runtime:
        runtime.set_device(0)
        yield runtime


class Tensors:
    """Device tensors for a test: descriptor, buffer and memory, freed at the end."""

    def __init__(self, rt):
        self.rt = rt
        self.made = []

    def put(self, array):
        array = np.ascontiguousarray(array)
        desc = acl.create_tensor_desc(DTYPES[array.dtype], list(array.shape), ND)
        size = acl.get_tensor_desc_size(desc)
        dev = self.rt.malloc(max(size, 1))
        if size:
            assert acl.rt.memcpy(dev, size, acl.util.numpy_to_ptr(array), size, 1) == 0
        buf = acl.create_data_buffer(dev, size)
        self.made.append((desc, buf, dev))
        return desc, buf

    def empty(self, shape, dtype, fill=0):
        desc = acl.create_tensor_desc(DTYPES[np.dtype(dtype)], list(shape), ND)
        size = acl.get_tensor_desc_size(desc)
        dev = self.rt.malloc(max(size, 1))
        self.rt.memset(dev, size, fill, size)
        buf = acl.create_data_buffer(dev, size)
        self.made.append((desc, buf, dev))
        return desc, buf

    def get(self, buf, shape, dtype):
        dev = acl.get_data_buffer_addr(buf)
        out = np.zeros(shape, dtype)
        if out.nbytes:
            assert acl.rt.memcpy(acl.util.numpy_to_ptr(out), out.nbytes, dev, out.nbytes,
                                 2) == 0
        return out

    def release(self):
        for desc, buf, dev in self.made:
            acl.destroy_data_buffer(buf)
            acl.destroy_tensor_desc(desc)
            self.rt.free(dev)


@pytest.fixture
def t(rt):
    tensors = Tensors(rt)
    yield tensors
    tensors.release()


def run(t, op, inputs, out_shape, out_dtype, attrs=None, stream=0):
    ins = [t.put(x) for x in inputs]
    out_desc, out_buf = t.empty(out_shape, out_dtype)
    attr = acl.op.create_attr()
    for name, value in (attrs or {}).items():
        setter = {bool: acl.op.set_attr_bool, int: acl.op.set_attr_int,
                  list: acl.op.set_attr_list_int}[type(value)]
        assert setter(attr, name, value) == 0
    ret = acl.op.execute_v2(op, [d for d, _ in ins], [b for _, b in ins], [out_desc],
                            [out_buf], attr, stream)
    acl.op.destroy_attr(attr)
    assert ret == 0, acl.get_recent_err_msg()
    assert acl.rt.synchronize_stream(stream) == 0, acl.get_recent_err_msg()
    return t.get(out_buf, out_shape, out_dtype)


def test_add_runs_at_synchronisation_not_before(rt, t):
    a = np.arange(128, dtype=np.int32).reshape(8, 16)
    b = np.full((8, 16), 7, np.int32)
    stream, _ = acl.rt.create_stream()
    (da, ba), (db, bb) = t.put(a), t.put(b)
    out_desc, out_buf = t.empty((8, 16), np.int32, fill=0)
    assert acl.op.execute_v2("Add", [da, db], [ba, bb], [out_desc], [out_buf], 0, stream) == 0
    assert (t.get(out_buf, (8, 16), np.int32) == 0).all()      # queued, not run
    assert acl.rt.synchronize_stream(stream) == 0
    assert (t.get(out_buf, (8, 16), np.int32) == a + b).all()
    acl.rt.destroy_stream(stream)


rng = np.random.default_rng(0)
X = rng.standard_normal((3, 4)).astype(np.float32)
Y = rng.standard_normal((3, 4)).astype(np.float32) + 3


@pytest.mark.parametrize("op, inputs, attrs, expected", [
    ("Sub", [X, Y], {}, X - Y),
    ("Mul", [X, Y], {}, X * Y),
    ("Div", [X, Y], {}, X / Y),
    ("Relu", [X], {}, np.maximum(X, 0)),
    ("MatMul", [X, Y], {"transpose_x2": True}, X @ Y.T),
    ("BatchMatMul", [np.stack([X, X]), np.stack([Y.T, Y.T])], {}, np.stack([X @ Y.T] * 2)),
    ("Transpose", [X], {"perm": [1, 0]}, X.T),
    ("Transpose", [X, np.array([1, 0], np.int32)], {}, X.T),
    ("Slice", [X, np.array([1, 1], np.int32), np.array([2, -1], np.int32)], {}, X[1:3, 1:]),
    ("ConcatD", [X, Y], {"concat_dim": 1}, np.concatenate([X, Y], 1)),
    ("Concat", [np.array(0, np.int32), X, Y], {}, np.concatenate([X, Y], 0)),
    ("SoftmaxV2", [X], {}, np.exp(X) / np.exp(X).sum(-1, keepdims=True)),
    ("ReduceSum", [X, np.array([1], np.int32)], {"keep_dims": True}, X.sum(1, keepdims=True)),
    ("ReduceSumD", [X], {"axes": [0]}, X.sum(0)),
])
def test_builtin_kernels_match_numpy(rt, t, op, inputs, attrs, expected):
    got = run(t, op, inputs, expected.shape, np.float32, attrs)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_cast_and_integer_div(rt, t):
    got = run(t, "Cast", [X], X.shape, np.float16)
    assert got.dtype == np.float16 and (got == X.astype(np.float16)).all()
    a, b = np.array([7, -7], np.int32), np.array([2, 2], np.int32)
    assert (run(t, "Div", [a, b], (2,), np.int32) == a // b).all()


def test_acl_op_cast(rt, t):
    src_desc, src_buf = t.put(X)
    dst_desc, dst_buf = t.empty(X.shape, np.float16)
    assert acl.op.cast(src_desc, src_buf, dst_desc, dst_buf, 0, 0) == 0
    assert acl.rt.synchronize_stream(0) == 0
    assert (t.get(dst_buf, X.shape, np.float16) == X.astype(np.float16)).all()
    handle, ret = acl.op.create_handle_for_cast(src_desc, dst_desc, 0)
    assert ret == 0 and acl.op.destroy_handle(handle) is None


def test_slice_through_a_handle(rt, t):
    x = np.ones((6, 30), np.float16)
    (dx, bx), (db, bb), (ds, bs) = (t.put(x), t.put(np.array([0, 0], np.int32)),
                                    t.put(np.array([6, 30], np.int32)))
    out_desc, out_buf = t.empty((6, 30), np.float16)
    attr = acl.op.create_attr()
    handle, ret = acl.op.create_handle("Slice", [dx, db, ds], [out_desc], attr)
    assert ret == 0
    assert acl.op.execute_with_handle(handle, [bx, bb, bs], [out_buf], 0) == 0
    assert acl.rt.synchronize_stream(0) == 0
    assert np.bincount(t.get(out_buf, (6, 30), np.float16).astype(int).ravel()).tolist() == [
        0, 180]
    assert acl.op.destroy_handle(handle) is None
    assert acl.op.execute_with_handle(handle, [bx, bb, bs], [out_buf], 0) == 107017
    acl.op.destroy_attr(attr)


def test_an_unregistered_op_is_op_not_found_with_how_to(rt, t):
    (d, b) = t.put(X)
    assert acl.op.execute_v2("MyOp", [d], [b], [d], [b], 0, 0) == 100024
    message = acl.get_recent_err_msg()
    assert "register_op('MyOp'" in message and "registered_ops" in message
    handle, ret = acl.op.create_handle("MyOp", [d], [d], 0)
    assert (handle, ret) == (0, 100024)


@pytest.mark.parametrize("attr", [np.array([], dtype=np.int8), np.ones(2), 0.0, "0"])
def test_an_attr_that_is_not_an_int_is_invalid_param(rt, t, attr):
    """execute_v2's attr is a handle, 0 or None: an array (whose == gives an array), a float
    or a str is ACL_ERROR_INVALID_PARAM and queues nothing (an array's ValueError escaped,
    found by the fuzz test)."""
    (d, b) = t.put(X)
    assert acl.op.execute_v2("Add", [d, d], [b, b], [d], [b], attr, 0) == 100000
    assert rt.streams.pending == 0
    assert acl.op.execute_v2("Add", [d, d], [b, b], [d], [b], np.int64(0), 0) == 0


def test_register_op_plain_decorator_and_scoped(rt, t):
    register_op("Twice", lambda inputs, attrs: inputs[0] * 2)
    try:
        assert (run(t, "Twice", [X], X.shape, np.float32) == X * 2).all()

        @register_op("Twice")
        def thrice(inputs, attrs):
            return inputs[0] * 3

        assert (run(t, "Twice", [X], X.shape, np.float32) == X * 3).all()
        with registered_ops(Twice=lambda inputs, attrs: inputs[0] * 4,
                            Add=lambda inputs, attrs: inputs[0] - inputs[1]):
            assert (run(t, "Twice", [X], X.shape, np.float32) == X * 4).all()
            assert (run(t, "Add", [X, Y], X.shape, np.float32) == X - Y).all()
        assert (run(t, "Twice", [X], X.shape, np.float32) == X * 3).all()
        assert (run(t, "Add", [X, Y], X.shape, np.float32) == X + Y).all()   # built-in again
    finally:
        unregister_op("Twice")
    assert acl.op.execute_v2("Twice", [], [], [], [], 0, 0) == 100024


def test_kernels_get_attrs_and_output_specs(rt, t):
    seen = {}

    def kernel(inputs, attrs, outputs):
        seen.update(attrs=attrs, outputs=outputs)
        return np.zeros(outputs[0].shape, outputs[0].dtype)

    with registered_ops(Spy=kernel):
        attr = acl.op.create_attr()
        acl.op.set_attr_string(attr, "mode", "fast")
        acl.op.set_attr_list_float(attr, "scales", [1, 2.5])
        assert acl.op.set_attr_data_type(attr, "dst", acl.ACL_FLOAT16) == (attr, 0)
        d, b = t.put(X)
        od, ob = t.empty((2,), np.int64)
        assert acl.op.execute_v2("Spy", [d], [b], [od], [ob], attr, 0) == 0
        acl.op.set_attr_int(attr, "late", 1)          # after launch: not seen
        assert acl.rt.synchronize_stream(0) == 0
        acl.op.destroy_attr(attr)
    assert seen["attrs"] == {"mode": "fast", "scales": [1.0, 2.5], "dst": acl.ACL_FLOAT16}
    assert seen["outputs"][0].shape == (2,) and seen["outputs"][0].dtype == np.int64


@pytest.mark.parametrize("setter, value", [
    ("set_attr_int", 1.5), ("set_attr_float", "x"), ("set_attr_bool", 300),
    ("set_attr_string", 3), ("set_attr_list_int", (1, 2)), ("set_attr_list_string", [1]),
    ("set_attr_list_list_int", [[1], 2]),
    # float() raised through the face for these (found by the fuzz test)
    ("set_attr_float", np.ones(3)), ("set_attr_float", 2**1100),
    ("set_attr_list_float", [1.0, np.zeros((2, 2))]), ("set_attr_list_float", [2**1100]),
])
def test_bad_attr_values_change_nothing(rt, setter, value):
    attr = acl.op.create_attr()
    assert getattr(acl.op, setter)(attr, "a", value) == 100000
    assert rt.extension("compute", None).attr(attr).values == {}
    acl.op.destroy_attr(attr)
    assert getattr(acl.op, setter)(attr, "a", value) in (100000, 107017)


def test_a_host_pointer_is_refused_and_reported(rt, t):
    d, _ = t.put(X)
    host = np.array(X)
    hb = acl.create_data_buffer(acl.util.numpy_to_ptr(host), host.nbytes)
    od, ob = t.empty(X.shape, np.float32)
    assert acl.op.execute_v2("Relu", [d], [hb], [od], [ob], 0, 0) == 107000
    assert "device memory" in acl.get_recent_err_msg()
    assert rt.sanitizer.counts()["wrong-memory"] == 1
    assert rt.streams.pending == 0                     # nothing queued
    acl.destroy_data_buffer(hb)


def test_memory_of_another_device_is_refused():
    with Runtime("A3", hbm_bytes=64 * MiB, sanitizer=Sanitizer(output=None)) as rt:
        rt.set_device(1)
        other = rt.malloc(64)
        rt.memset(other, 64, 0, 64)
        rt.set_device(0)
        mine = rt.malloc(64)
        desc = acl.create_tensor_desc(acl.ACL_FLOAT, [16], ND)
        a, b = acl.create_data_buffer(other, 64), acl.create_data_buffer(mine, 64)
        assert acl.op.execute_v2("Relu", [desc], [a], [desc], [b], 0, 0) == 107000
        assert "device 1" in acl.get_recent_err_msg()
        assert rt.sanitizer.counts()["wrong-memory"] == 1


def test_buffers_must_cover_their_descriptors(rt, t):
    d, b = t.put(X)
    small_dev = rt.malloc(8)
    small = acl.create_data_buffer(small_dev, 8)
    assert acl.op.execute_v2("Relu", [d], [small], [d], [b], 0, 0) == 100021
    assert acl.op.execute_v2("Relu", [d], [b], [d], [small], 0, 0) == 100022
    assert acl.op.execute_v2("Relu", [d], [b, b], [d], [b], 0, 0) == 100021
    assert acl.op.execute_v2("Relu", (d,), [b], [d], [b], 0, 0) == 100000    # not a list
    # a buffer whose size covers the descriptor but whose memory (footprint 64) does not
    big = acl.create_tensor_desc(acl.ACL_FLOAT, [100], ND)
    lying = acl.create_data_buffer(small_dev, 400)
    assert acl.op.execute_v2("Relu", [big], [lying], [big], [lying], 0, 0) == 107000
    assert "past the end" in acl.get_recent_err_msg()
    acl.destroy_tensor_desc(big)
    assert rt.streams.pending == 0
    acl.destroy_data_buffer(small)
    acl.destroy_data_buffer(lying)
    rt.free(small_dev)


def test_uninitialised_input_is_reported_when_the_kernel_runs(rt, t):
    desc = acl.create_tensor_desc(acl.ACL_FLOAT, [4], ND)
    dev = rt.malloc(16)
    buf = acl.create_data_buffer(dev, 16)
    od, ob = t.empty((4,), np.float32)
    assert acl.op.execute_v2("Relu", [desc], [buf], [od], [ob], 0, 0) == 0
    assert rt.sanitizer.counts()["uninitialized-read"] == 0
    assert acl.rt.synchronize_stream(0) == 0
    assert rt.sanitizer.counts()["uninitialized-read"] == 1
    acl.destroy_data_buffer(buf)
    acl.destroy_tensor_desc(desc)
    rt.free(dev)


def test_output_freed_while_queued(rt, t):
    d, b = t.put(X)
    desc = acl.create_tensor_desc(acl.ACL_FLOAT, list(X.shape), ND)
    dev = rt.malloc(X.nbytes)
    out = acl.create_data_buffer(dev, X.nbytes)
    assert acl.op.execute_v2("Relu", [d], [b], [desc], [out], 0, 0) == 0
    rt.free(dev)
    assert rt.sanitizer.counts()["free-with-pending-work"] == 1
    assert acl.rt.synchronize_stream(0) == 107000
    assert rt.sanitizer.counts()["use-after-free"] == 1
    acl.destroy_data_buffer(out)
    acl.destroy_tensor_desc(desc)


def test_a_kernel_that_raises_is_reported_and_writes_nothing(rt, t):
    def broken(inputs, attrs):
        raise ZeroDivisionError("boom")

    d, b = t.put(X)
    od, ob = t.empty(X.shape, np.float32, fill=0)
    with registered_ops(Broken=broken):
        assert acl.op.execute_v2("Broken", [d], [b], [od], [ob], 0, 0) == 0
        assert acl.rt.synchronize_stream(0) == 507015
    message = acl.get_recent_err_msg()
    assert "ZeroDivisionError: boom" in message and "Traceback" in message
    report = next(r for r in rt.sanitizer.reports if r.kind == "kernel-error")
    assert "in broken" in report.where
    assert (t.get(ob, X.shape, np.float32) == 0).all()


def test_a_kernel_that_calls_sys_exit_fails_the_call_not_the_program(rt, t):
    def quits(inputs, attrs):
        raise SystemExit(3)

    d, b = t.put(X)
    od, ob = t.empty(X.shape, np.float32, fill=0)
    with registered_ops(Quits=quits):
        assert acl.op.execute_v2("Quits", [d], [b], [od], [ob], 0, 0) == 0
        assert acl.rt.synchronize_stream(0) == 507015
    assert "SystemExit: 3" in acl.get_recent_err_msg()
    assert rt.sanitizer.counts()["kernel-error"] == 1
    assert (t.get(ob, X.shape, np.float32) == 0).all()


def test_wrong_output_shape_or_dtype(rt, t):
    d, b = t.put(X)
    od, ob = t.empty(X.shape, np.float32)
    with registered_ops(F64=lambda inputs, attrs: inputs[0].astype(np.float64),
                        Flat=lambda inputs, attrs: inputs[0].ravel()):
        for op in ("F64", "Flat"):
            assert acl.op.execute_v2(op, [d], [b], [od], [ob], 0, 0) == 0
            assert acl.rt.synchronize_stream(0) == 100022
            assert "descriptor says float32[3, 4]" in acl.get_recent_err_msg()


def test_work_runs_in_stream_order_with_copies(rt, t):
    # a copy queued after the op sees the op's output
    d, b = t.put(X)
    od, ob = t.empty(X.shape, np.float32)
    host = np.zeros_like(X)
    assert acl.op.execute_v2("Relu", [d], [b], [od], [ob], 0, 0) == 0
    assert acl.rt.memcpy_async(acl.util.numpy_to_ptr(host), X.nbytes,
                               acl.get_data_buffer_addr(ob), X.nbytes, 2, 0) == 0
    assert acl.rt.synchronize_device() == 0
    assert (host == np.maximum(X, 0)).all()


@pytest.mark.memsim(ops={"Neg": lambda inputs, attrs: -inputs[0]})
def test_marker_registers_ops_for_one_test(memsim):
    t = Tensors(memsim)
    assert (run(t, "Neg", [X], X.shape, np.float32) == -X).all()
    t.release()


def test_marker_ops_are_gone_after_the_test(rt, t):
    d, b = t.put(X)
    assert acl.op.execute_v2("Neg", [d], [b], [d], [b], 0, 0) == 100024


def test_threads_running_operators_on_their_own_streams(rt):
    import threading

    errors = []

    def worker(seed):
        try:
            acl.rt.set_device(0)
            stream, _ = acl.rt.create_stream()
            t = Tensors(rt)
            for i in range(20):
                a = np.full((4, 4), seed * 100 + i, np.int32)
                got = run(t, "Add", [a, a], (4, 4), np.int32, stream=stream)
                if not (got == 2 * a).all():
                    errors.append((seed, i))
            t.release()
            acl.rt.destroy_stream(stream)
            acl.rt.reset_device(0)
        except Exception as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    assert rt.extension("compute", None).handles.live() == []
