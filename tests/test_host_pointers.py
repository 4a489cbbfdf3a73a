"""Real host pointers: malloc_host is real memory; raw mapped addresses are accepted."""

import ctypes
import os

import numpy as np
import pytest

import ascend_memsim.acl as acl
from ascend_memsim import MiB, Runtime, Sanitizer

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/maps"),
                                reason="raw host addresses are checked in /proc/self/maps")


@pytest.fixture
def rt():
    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer=Sanitizer(output=None)) as runtime:
        runtime.set_device(0)
        yield runtime


def test_ctypes_writes_into_malloc_host_memory_are_what_memcpy_reads(rt):
    host, ret = acl.rt.malloc_host(256)
    assert ret == 0
    payload = bytes(range(256))
    ctypes.memmove(host, payload, 256)
    dev, _ = acl.rt.malloc(256, 0)
    assert acl.rt.memcpy(dev, 256, host, 256, 1) == 0
    back, _ = acl.rt.malloc_host(256)
    assert acl.rt.memcpy(back, 256, dev, 256, 2) == 0
    assert ctypes.string_at(back, 256) == payload
    view = np.ctypeslib.as_array((ctypes.c_uint8 * 256).from_address(back))
    assert (view == np.arange(256)).all()
    assert acl.util.ptr_to_bytes(back, 256) == payload
    assert rt.sanitizer.reports == []                 # no false uninitialised read
    for p in (host, back):
        acl.rt.free_host(p)
    acl.rt.free(dev)


def test_reading_host_memory_nobody_wrote_is_still_reported(rt):
    host, _ = acl.rt.malloc_host(64)
    dev, _ = acl.rt.malloc(64, 0)
    assert acl.rt.memcpy(dev, 64, host, 64, 1) == 0
    assert [r.kind for r in rt.sanitizer.reports] == ["uninitialized-read"]
    acl.rt.free_host(host)
    acl.rt.free(dev)


def test_raw_addresses_are_noted_not_reported(rt):
    dev, _ = acl.rt.malloc(64, 0)
    src = np.arange(16, dtype=np.float32)
    assert acl.rt.memcpy(dev, 64, src.ctypes.data, 64, 1) == 0
    out = np.zeros(16, np.float32)
    stream, _ = acl.rt.create_stream()
    assert acl.rt.memcpy_async(out.ctypes.data, 64, dev, 64, 2, stream) == 0
    assert acl.rt.synchronize_stream(stream) == 0
    assert (out == src).all()
    assert rt.sanitizer.reports == []
    assert [n.kind for n in rt.sanitizer.notes] == ["unchecked-host-memory"] * 3
    acl.rt.destroy_stream(stream)
    acl.rt.free(dev)


def test_arrays_of_python_objects_are_refused(rt):
    objects = np.array([object(), object()], dtype=object)
    with pytest.raises(TypeError, match="Python objects"):
        acl.util.numpy_to_ptr(objects)


def test_a_failed_raw_copy_changes_nothing(rt):
    dev, _ = acl.rt.malloc(64, 0)
    acl.rt.memset(dev, 64, 3, 64)
    code = ctypes.cast(ctypes.pythonapi.Py_IncRef, ctypes.c_void_p).value
    assert acl.rt.memcpy(code, 64, dev, 64, 2) == 107000        # read-only mapping
    assert acl.rt.memset(code, 64, 0, 64) == 107000
    host, _ = acl.rt.malloc_host(64)
    acl.rt.memcpy(host, 64, dev, 64, 2)
    assert ctypes.string_at(host, 64) == b"\x03" * 64
    acl.rt.free_host(host)
    acl.rt.free(dev)


class HostCachingAllocator:
    """A pinned-memory cache as frameworks keep one: blocks from malloc_host, reused by size,
    filled with ctypes.memmove and copied to the device."""

    def __init__(self):
        self.free_blocks: dict[int, list[int]] = {}
        self.owned: list[int] = []

    def get(self, size):
        if self.free_blocks.get(size):
            return self.free_blocks[size].pop()
        ptr, ret = acl.rt.malloc_host(size)
        assert ret == 0
        self.owned.append(ptr)
        return ptr

    def put(self, ptr, size):
        self.free_blocks.setdefault(size, []).append(ptr)

    def release(self):
        for ptr in self.owned:
            assert acl.rt.free_host(ptr) == 0


def test_a_caching_allocator_that_fills_host_memory_with_memmove(rt):
    cache = HostCachingAllocator()
    dev, _ = acl.rt.malloc(4096, 0)
    for step in range(5):
        data = np.full(1024, step, np.int32)
        staging = cache.get(data.nbytes)
        ctypes.memmove(staging, data.ctypes.data, data.nbytes)
        assert acl.rt.memcpy(dev, 4096, staging, data.nbytes, 1) == 0
        cache.put(staging, data.nbytes)
        out = np.zeros(1024, np.int32)
        assert acl.rt.memcpy(out.ctypes.data, out.nbytes, dev, out.nbytes, 2) == 0
        assert (out == step).all()
    assert len(cache.owned) == 1                      # reused, never reallocated
    cache.release()
    acl.rt.free(dev)
    assert rt.sanitizer.reports == []


def test_freed_host_memory_is_a_use_after_free_not_foreign_memory(rt):
    host, _ = acl.rt.malloc_host(128)
    dev, _ = acl.rt.malloc(128, 0)
    acl.rt.memset(dev, 128, 1, 128)
    assert acl.rt.free_host(host) == 0
    assert acl.rt.memcpy(host, 128, dev, 128, 2) == 107000
    assert acl.rt.memcpy(host + 64, 64, dev, 64, 2) == 107000
    assert [r.kind for r in rt.sanitizer.reports] == ["use-after-free"] * 2
    acl.rt.free(dev)
