"""Host memory, registered host buffers, acl.util conversions, contexts, DVPP, run mode."""

import ctypes
import gc
import logging

import numpy as np
import pytest

from ascend_memsim import (
    AclError,
    InvalidArgument,
    InvalidArgumentType,
    InvalidPointer,
    MemType,
    MiB,
    Runtime,
    acl,
    install_acl,
    uninstall_acl,
)
from ascend_memsim.data import pointers
from ascend_memsim.data.host import REGISTERED_BASE
from ascend_memsim.memory.constants import ErrorCode, RunMode
from ascend_memsim.memory.rules import DEVICE_SPAN

D2H, H2D = 2, 1


@pytest.fixture
def rt():
    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer="off") as runtime:
        runtime.set_device(0)
        yield runtime


# -- malloc_host / free_host --------------------------------------------------------------------

def test_malloc_host_is_64_byte_aligned_real_memory(rt):
    ptrs = [rt.malloc_host(n) for n in (1, 63, 64, 65, 1000)]
    assert all(p % 64 == 0 for p in ptrs)
    assert len(set(ptrs)) == 5
    for n, p in zip((1, 63, 64, 65, 1000), ptrs):
        ctypes.memset(p, 0x5A, n)                # real memory: ctypes may write it
        assert ctypes.string_at(p, n) == b"\x5a" * n
    for p in ptrs:
        rt.free_host(p)


def test_malloc_host_size_zero_and_bad_types(rt):
    assert acl.rt.malloc_host(0) == (0, ErrorCode.INVALID_PARAM)
    assert acl.rt.malloc_host(-1) == (0, ErrorCode.INVALID_PARAM)
    assert acl.rt.malloc_host(1.5) == (0, ErrorCode.INVALID_PARAM)


def test_free_host_twice_and_of_unknown_pointers(rt):
    ptr = rt.malloc_host(64)
    assert acl.rt.free_host(ptr) == 0
    assert acl.rt.free_host(ptr) == ErrorCode.RT_PARAM_INVALID
    assert acl.rt.free_host(0) == ErrorCode.INVALID_PARAM
    assert acl.rt.free_host(12345) == ErrorCode.RT_PARAM_INVALID
    dev = rt.malloc(64)
    assert acl.rt.free_host(dev) == ErrorCode.RT_PARAM_INVALID


def test_host_memory_keeps_what_is_written(rt):
    ptr = rt.malloc_host(100)
    rt.memset(ptr, 100, 3, 100)
    assert acl.util.ptr_to_bytes(ptr, 100) == b"\x03" * 100
    with pytest.raises(InvalidPointer):
        acl.util.ptr_to_bytes(ptr, 129)


# -- registered buffers ---------------------------------------------------------------------------

def test_bytes_to_ptr_writes_into_the_bytes_object(rt):
    """The vendor samples' pattern: copy into bytes from bytes_to_ptr, read with frombuffer."""
    data = np.ones(1000, dtype=np.byte).tobytes()
    ptr = acl.util.bytes_to_ptr(data)
    assert REGISTERED_BASE <= ptr < DEVICE_SPAN
    dev = rt.malloc(1000)
    rt.memset(dev, 1000, 7, 1000)
    assert acl.rt.memcpy(ptr, 1000, dev, 1000, D2H) == 0
    assert (np.frombuffer(data, dtype=np.byte) == 7).all()
    assert acl.util.bytes_to_ptr(data) == ptr


def test_writes_stay_inside_the_registered_buffer(rt):
    guard = bytes(bytearray(b"g" * 64))
    buf = bytes(bytearray(b"b" * 64))
    ptr = acl.util.bytes_to_ptr(buf)
    dev = rt.malloc(256)
    rt.memset(dev, 256, 0, 256)
    assert acl.rt.memcpy(ptr, 256, dev, 65, D2H) == ErrorCode.RT_PARAM_INVALID
    assert buf == b"b" * 64 and guard == b"g" * 64
    assert acl.rt.memcpy(ptr + 64, 8, dev, 1, D2H) == ErrorCode.RT_PARAM_INVALID


def test_numpy_to_ptr_and_ptr_to_numpy_share_memory(rt):
    arr = np.arange(16, dtype=np.float32)
    ptr = acl.util.numpy_to_ptr(arr)
    view = acl.util.ptr_to_numpy(ptr, (4, 4), 11)
    assert view.shape == (4, 4) and view.dtype == np.float32
    assert (view.ravel() == arr).all()
    view[0, 0] = 42
    assert arr[0] == 42
    dev = rt.malloc(64)
    rt.memcpy(dev, 64, ptr, 64, H2D)
    out = np.zeros(16, dtype=np.float32)
    rt.memcpy(acl.util.numpy_to_ptr(out), 64, dev, 64, D2H)
    assert (out == arr).all()


def test_ptr_to_numpy_over_malloc_host_memory(rt):
    ptr = rt.malloc_host(64)
    arr = acl.util.ptr_to_numpy(ptr, (16,), np.dtype(np.int32).num)
    arr[:] = np.arange(16)
    assert np.frombuffer(acl.util.ptr_to_bytes(ptr, 64), dtype=np.int32).tolist() == list(
        range(16))
    with pytest.raises(InvalidArgument):
        acl.util.ptr_to_numpy(ptr, (16,), 99)


def test_util_refuses_device_pointers_and_unknown_ones(rt):
    dev = rt.malloc(64)
    with pytest.raises(InvalidPointer, match="device memory"):
        acl.util.ptr_to_bytes(dev, 8)
    with pytest.raises(InvalidPointer):
        acl.util.ptr_to_bytes(REGISTERED_BASE + 12345, 8)
    with pytest.raises(InvalidArgumentType):
        acl.util.bytes_to_ptr("text")
    with pytest.raises(InvalidArgumentType):
        acl.util.numpy_to_ptr([1, 2, 3])


def test_non_contiguous_arrays_are_copied_and_singletons_refused(rt):
    arr = np.arange(20, dtype=np.int8)[::2]
    ptr = acl.util.numpy_to_ptr(arr)
    # pyacl copies a non-contiguous array; nobody holds the copy, so its address dangles.
    with pytest.raises(InvalidPointer):
        acl.util.ptr_to_bytes(ptr, 10)
    with pytest.raises(InvalidArgumentType):
        acl.util.bytes_to_ptr(b"x")


def test_a_buffer_dropped_by_user_code_is_forgotten(rt):
    buf = bytes(bytearray(b"z" * 64))
    ptr = acl.util.bytes_to_ptr(buf)
    assert acl.util.ptr_to_bytes(ptr, 4) == b"zzzz"
    del buf
    gc.collect()
    with pytest.raises(InvalidPointer):
        acl.util.ptr_to_bytes(ptr, 4)
    assert rt.host.registrations() == []


def test_registrations_are_swept(rt):
    keep = bytes(8)
    acl.util.bytes_to_ptr(keep)
    for _ in range(200):
        acl.util.bytes_to_ptr(bytes(8))
    assert len(rt.host.registrations()) < 100
    assert any(r.obj is keep for r in rt.host.registrations())


@pytest.fixture
def srt():
    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer={"mode": "report", "output": None}) as r:
        r.set_device(0)
        yield r


def test_a_view_of_a_live_array_is_not_orphaned(srt):
    arr = np.arange(200, dtype=np.uint8).reshape(2, 100)
    dev = srt.malloc(100)
    assert acl.rt.memcpy(dev, 100, acl.util.numpy_to_ptr(arr[1]), 100, H2D) == 0
    assert acl.rt.memcpy(dev, 100, acl.util.numpy_to_ptr(arr.reshape(-1)), 100, H2D) == 0
    out = bytes(100)
    assert acl.rt.memcpy(acl.util.bytes_to_ptr(out), 100, dev, 100, D2H) == 0
    assert out == bytes(range(100))
    # A view of an array user code holds only through a sibling view.
    sibling = np.arange(200, dtype=np.uint8).reshape(2, 100)[0]
    ptr = acl.util.numpy_to_ptr(sibling.base.reshape(2, 100)[1])
    assert acl.rt.memcpy(dev, 100, ptr, 100, H2D) == 0
    assert srt.sanitizer.reports == []
    del sibling
    gc.collect()
    assert acl.rt.memcpy(dev, 100, ptr, 100, H2D) == ErrorCode.RT_PARAM_INVALID


def test_ptr_to_numpy_over_a_bytes_buffer_keeps_it_alive(srt):
    data = bytes(4000)
    ptr = acl.util.bytes_to_ptr(data)
    view = acl.util.ptr_to_numpy(ptr, (4000,), 2)
    del data
    gc.collect()
    assert acl.rt.memset(ptr, 4000, 1, 4000) == 0
    assert view[0] == 1 and view[-1] == 1
    assert srt.sanitizer.reports == []
    del view
    gc.collect()
    assert acl.rt.memset(ptr, 4000, 1, 4000) == ErrorCode.RT_PARAM_INVALID


def test_ptr_to_numpy_takes_numpy_integers_where_pyacl_does(rt):
    """pyacl (numpy_convert.cpp): the type is "i" (numpy integers too), the shape a tuple of
    Python ints (PyLong_Type items), so a numpy integer in the shape is refused there."""
    host = rt.malloc_host(64)
    for shape, code, dtype, dims in [((4,), np.int64(2), np.uint8, (4,)),
                                     ((2, 2), np.uint8(11), np.float32, (2, 2))]:
        array = acl.util.ptr_to_numpy(host, shape, code)
        assert array.dtype == dtype and array.shape == dims
    with pytest.raises(InvalidArgument):
        acl.util.ptr_to_numpy(host, (4,), np.int64(99))
    for shape in (4.0, np.int64(4), (2, np.int32(2))):
        with pytest.raises(InvalidArgumentType):
            acl.util.ptr_to_numpy(host, shape, 2)


def test_a_shrunk_buffer_is_out_of_bounds_past_its_length(srt):
    dev = srt.malloc(100)
    srt.memset(dev, 100, 9, 100)
    # bytearrays, which only the core registers (pyacl's bytes_to_ptr takes bytes)
    target = bytearray(b"t" * 100)
    ptr = srt.host.register(target).ptr
    del target[50:]
    assert acl.rt.memcpy(ptr, 100, dev, 100, D2H) == ErrorCode.RT_PARAM_INVALID
    assert target == b"t" * 50
    assert acl.rt.memcpy(ptr, 50, dev, 50, D2H) == 0
    assert target == b"\x09" * 50
    source = bytearray(b"s" * 100)
    src = srt.host.register(source).ptr
    del source[40:]
    assert acl.rt.memcpy(dev, 100, src, 100, H2D) == ErrorCode.RT_PARAM_INVALID
    assert "now 40 bytes" in acl.get_recent_err_msg()
    assert acl.util.ptr_to_bytes(ptr, 50) == b"\x09" * 50
    out = bytearray(100)
    srt.memcpy(srt.host.register(out).ptr, 100, dev, 100, D2H)
    assert out == b"\x09" * 100
    assert [r.kind for r in srt.sanitizer.reports] == ["out-of-bounds"] * 2
    # Registering the buffer again drops the stale registration.
    again = srt.host.register(source).ptr
    assert again != src
    assert acl.util.ptr_to_bytes(again, 40) == b"s" * 40
    with pytest.raises(InvalidPointer):
        acl.util.ptr_to_bytes(src, 1)
    assert sum(r.obj is source for r in srt.host.registrations()) == 1


def test_util_refuses_device_memory_before_the_sanitizer_looks():
    for mode in ("report", "strict"):
        with Runtime("A2", hbm_bytes=64 * MiB, sanitizer={"mode": mode, "output": None}) as r:
            r.set_device(0)
            dev = r.malloc(64)
            with pytest.raises(InvalidPointer, match="device memory"):
                acl.util.ptr_to_bytes(dev, 10)
            with pytest.raises(InvalidPointer, match="device memory"):
                acl.util.ptr_to_numpy(dev, (10,), 2)
            assert r.sanitizer.reports == []


def test_util_names_are_listed_for_feature_detection():
    for name in ("bytes_to_ptr", "numpy_to_ptr", "ptr_to_bytes", "ptr_to_numpy"):
        assert name in dir(acl.util)


# -- contexts, run mode, DVPP, app_log -------------------------------------------------------------

def test_contexts(rt):
    default, ret = acl.rt.get_context()
    assert ret == 0 and default
    ctx, ret = acl.rt.create_context(0)
    assert ret == 0 and ctx != default
    assert acl.rt.get_context() == (ctx, 0)
    assert acl.rt.set_context(default) == 0
    assert acl.rt.get_context() == (default, 0)
    assert acl.rt.set_context(ctx) == 0
    assert acl.rt.destroy_context(ctx) == 0
    assert acl.rt.destroy_context(ctx) == ErrorCode.RT_INVALID_HANDLE
    assert acl.rt.set_context(ctx) == ErrorCode.RT_INVALID_HANDLE
    assert acl.rt.destroy_context(default) == ErrorCode.RT_INVALID_HANDLE
    assert acl.rt.create_context(5) == (0, ErrorCode.RT_INVALID_DEVICEID)


def test_create_context_holds_a_device_reference():
    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer="off") as rt:
        rt.set_device(0)
        ctx = rt.streams.create_context(0)
        ptr = rt.malloc(64)
        rt.streams.destroy_context(ctx)
        assert rt.block(ptr) is not None
        rt.reset_device(0)
        assert rt.block(ptr) is None


def test_get_context_without_a_device():
    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer="off"):
        assert acl.rt.get_context() == (0, ErrorCode.RT_CONTEXT_NULL)


def test_run_mode_is_host(rt):
    assert acl.rt.get_run_mode() == (RunMode.HOST, 0) == (1, 0)


def test_dvpp_memory_is_its_own_type(rt):
    ptr, ret = acl.media.dvpp_malloc(1000)
    assert ret == 0
    plain = rt.malloc(64)
    assert rt.check_mem_type([ptr], MemType.DVPP) == 1
    assert rt.check_mem_type([ptr], MemType.DEV) == 0
    assert rt.check_mem_type([plain], MemType.DVPP) == 0
    assert acl.media.dvpp_free(plain) == ErrorCode.RT_PARAM_INVALID
    assert acl.media.dvpp_free(ptr) == 0
    assert acl.media.dvpp_free(ptr) == ErrorCode.RT_PARAM_INVALID
    assert acl.media.dvpp_malloc(0) == (0, ErrorCode.INVALID_PARAM)


@pytest.mark.parametrize("product", ["950PR", "950DT"])
def test_dvpp_memory_is_ordinary_device_memory_on_950(product):
    """aclrtCheckMemType notes (11-01_device_memory_malloc_and_free.md): 950PR/950DT have no
    separate DVPP memory type; it is ordinary device memory. So check_mem_type sees device
    memory, and free and dvpp_free each free either kind."""
    with Runtime(product, hbm_bytes=64 * MiB, sanitizer="off") as rt:
        rt.set_device(0)
        dvpp, ret = acl.media.dvpp_malloc(1000)
        plain = rt.malloc(64)
        assert ret == 0
        assert rt.check_mem_type([dvpp, plain], MemType.DEV) == 1
        assert rt.check_mem_type([dvpp, plain], MemType.DVPP) == 1
        assert rt.check_mem_type([dvpp], MemType.RSVD) == 0
        assert acl.rt.free(dvpp) == 0
        assert acl.media.dvpp_free(plain) == 0
        other, _ = acl.media.dvpp_malloc(64)
        assert acl.media.dvpp_free(other) == 0
        assert rt.blocks() == []


def test_app_log(caplog):
    with caplog.at_level(logging.DEBUG, logger="acl.app"):
        assert acl.app_log(1, "hello") is None
        acl.app_log(3, "bad")
        assert acl.app_log([], "not logged") == ErrorCode.INVALID_PARAM
        assert acl.app_log(None, "not logged") == ErrorCode.INVALID_PARAM
        assert acl.app_log(np.int64(2), "numpy level") is None
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.INFO, "hello"), (logging.ERROR, "bad"), (logging.WARNING, "numpy level")]


def test_install_acl_provides_media():
    previous = install_acl()
    try:
        import acl as imported
        import acl.media

        assert imported.media.dvpp_malloc is acl.media.dvpp_malloc
    finally:
        uninstall_acl(previous)


def test_host_memory_needs_a_current_device():
    from ascend_memsim import Runtime, acl

    with Runtime("A2"):
        assert acl.rt.malloc_host(100) == (0, acl.ACL_ERROR_RT_CONTEXT_NULL)
        assert acl.rt.free_host(0x1000) == acl.ACL_ERROR_RT_CONTEXT_NULL


@pytest.mark.parametrize("array", [np.array([1, None, "x"], dtype=object),
                                   np.zeros(3, dtype=[("a", "O"), ("b", "i4")])])
def test_numpy_to_ptr_refuses_arrays_of_python_objects(rt, array):
    """Issue 9: a device-to-host copy into an object array overwrote PyObject pointers and
    crashed the interpreter. Such arrays are refused before they get an address."""
    with pytest.raises(InvalidArgumentType) as caught:
        acl.util.numpy_to_ptr(array)
    assert caught.value.code == ErrorCode.INVALID_PARAM and "object" in str(caught.value)
    assert rt.host.registrations() == []


@pytest.mark.parametrize(("shape", "np_type"), [
    ((0, 2**63), 1), ((2,), "O"), ((2,), "1/0"), ((2,), [("a", "O")]), ("ab", 1),
    ((2,) * 65, 1), ((2**62, 4), 1), ((2,), ("i4", -1)), (None, 1), ((2,), 17),
    ((2,), np.int8), ([2], 1), ((2,), ("i4", (2,))),
])
def test_ptr_to_numpy_raises_the_cores_exceptions(rt, shape, np_type):
    """Issue 9: these raised plain ValueError; acl.util raises the core's exceptions."""
    ptr = rt.malloc_host(64)
    with pytest.raises(AclError) as caught:
        acl.util.ptr_to_numpy(ptr, shape, np_type)
    assert caught.value.code == ErrorCode.INVALID_PARAM
    rt.free_host(ptr)


def test_ptr_to_numpy_with_a_sub_array_dtype_adds_its_dimensions(rt):
    """Issue 16 (14): a sub-array dtype raised a plain ValueError from reshape; numpy's own
    meaning (``numpy.empty((2,), ("i4", (2,)))`` has shape (2, 2)) is what a user expects."""
    ptr = rt.malloc_host(64)
    rt.memset(ptr, 64, 1, 64)
    # the core takes a dtype; pyacl's face takes only a type number (refused above)
    array = pointers.ptr_to_numpy(rt, ptr, (2,), ("i4", (2,)))
    assert array.shape == (2, 2) and array.dtype == np.int32
    assert (array == 0x01010101).all()
    assert pointers.ptr_to_numpy(rt, ptr, [2], [("a", "i4", (2,))]).shape == (2,)
    rt.free_host(ptr)


def test_ptr_to_numpy_takes_what_pyacl_takes(rt):
    """A tuple of ints and a numpy type number (numpy_convert.cpp, "kOi" and PyTuple_Size):
    a list, an array or a dtype worked here and raised on hardware."""
    ptr = rt.malloc_host(64)
    assert acl.util.ptr_to_numpy(ptr, (2, 4), 5).shape == (2, 4)
    assert acl.util.ptr_to_numpy(ptr, (0, 5), 5).shape == (0, 5)
    for shape, np_type in (([2, 4], 5), (np.array([2, 4]), 5), ((2, 4), np.int32),
                           ((2, 4), "int32")):
        with pytest.raises(InvalidArgumentType):
            acl.util.ptr_to_numpy(ptr, shape, np_type)
    rt.free_host(ptr)


def test_bytes_to_ptr_takes_bytes_only(rt):
    """bytes_convert.cpp: PyBytes_Check, so a bytearray raised on hardware and passed here.
    The core still registers a bytearray (Runtime.host.register)."""
    with pytest.raises(InvalidArgumentType, match="bytes_to_ptr takes bytes"):
        acl.util.bytes_to_ptr(bytearray(64))
    assert rt.host.register(bytearray(64)).ptr
