"""Mapped virtual memory under the sanitizer and as operator memory.

An unmapped page of a reservation, an access running past a mapping, an access after
aclrtUnmapMem and a read of bytes never written are each reported (with the call, map and
unmap sites); strict mode refuses them. Operators read and write mapped memory like any
device memory, across two handles.
"""

import io

import numpy as np
import pytest

import ascend_memsim.acl as acl
from ascend_memsim import InvalidPointer, MiB, Runtime, Sanitizer

RT_PARAM = acl.ACL_ERROR_RT_PARAM_INVALID
PROP = {"handleType": 0, "allocationType": 0, "memAttr": acl.ACL_HBM_MEM_HUGE,
        "location": {"id": 0, "type": 1}, "reserve": 0}


@pytest.fixture(params=["report", "strict"])
def rt(request):
    out = io.StringIO()
    sanitizer = Sanitizer(request.param, output=out)
    with Runtime("A2", hbm_bytes=256 * MiB, sanitizer=sanitizer) as runtime:
        runtime.set_device(0)
        runtime.out = out
        yield runtime


def mapped(size=4 * MiB, handles=2):
    va, ret = acl.rt.reserve_mem_address(size * 2, 0, 0, 0)
    assert ret == 0
    step = size // handles
    for i in range(handles):
        h, ret = acl.rt.malloc_physical(step, PROP, 0)
        assert ret == 0
        assert acl.rt.map_mem(va + i * step, step, 0, h, 0) == 0
    return va


def host(size):
    buf = np.zeros(size, np.uint8)
    return buf, acl.util.numpy_to_ptr(buf)


def finding(rt, kind):
    kinds = [r.kind for r in rt.sanitizer.reports]
    assert kinds == [kind], (kinds, rt.out.getvalue())
    return rt.sanitizer.reports[0]


def test_unmapped_page_of_a_reservation(rt):
    va = mapped()
    _, dst = host(64)
    assert acl.rt.memcpy(dst, 64, va + 5 * MiB, 64, 2) == RT_PARAM
    report = finding(rt, "invalid-address")
    assert report.where == (f"{va + 5 * MiB:#x} is 5242880 bytes inside the 8388608-byte "
                            f"reserved range at {va:#x}, where nothing is mapped")


def test_a_mapping_without_access(rt):
    va, _ = acl.rt.reserve_mem_address(2 * MiB, 0, 0, 0)
    h, _ = acl.rt.malloc_physical(2 * MiB, PROP, 0)
    assert acl.rt.mem_map_no_access(va, 2 * MiB, 0, h, 0) == 0
    assert acl.rt.memset(va, 8, 0, 8) == RT_PARAM
    assert "which its device may not access" in finding(rt, "invalid-address").where


def test_access_past_a_mapping(rt):
    va = mapped()
    data = bytes(128)
    src = acl.util.bytes_to_ptr(data)
    # the two mappings are contiguous (4 MiB); the copy runs 64 bytes into the unmapped page
    assert acl.rt.memcpy(va + 4 * MiB - 64, 128, src, 128, 1) == RT_PARAM
    report = finding(rt, "out-of-bounds")
    assert report.where.startswith("64 bytes past the end of the 2097152-byte mapping")


def test_use_after_unmap_names_the_map_and_unmap_sites(rt):
    va = mapped()
    assert acl.rt.memset(va, 64, 1, 64) == 0
    assert acl.rt.unmap_mem(va) == 0
    ret = acl.rt.memset(va, 64, 1, 64)
    assert ret == RT_PARAM
    report = finding(rt, "use-after-free")
    text = report.format()
    assert "which was unmapped" in text
    assert "allocated at" in text and "freed at" in text and "test_vmm_sanitizer.py" in text


def test_uninitialised_read_of_mapped_memory(rt):
    va = mapped()
    assert acl.rt.memset(va, 100, 0, 100) == 0
    _, dst = host(200)
    ret = acl.rt.memcpy(dst, 200, va, 200, 2)
    assert ret == (RT_PARAM if rt.sanitizer.strict else 0)
    report = finding(rt, "uninitialized-read")
    assert "bytes [100, 200)" in report.where


def test_async_copies_check_mapped_memory_when_queued(rt):
    va = mapped()
    stream, _ = acl.rt.create_stream()
    data = bytes(range(256)) * 16
    src = acl.util.bytes_to_ptr(data)
    assert acl.rt.memcpy_async(va + 2 * MiB - 2048, 4096, src, 4096, 1, stream) == 0
    assert acl.rt.memcpy_async(va + 8 * MiB, 16, src, 16, 1, stream) == RT_PARAM
    assert acl.rt.synchronize_stream(stream) == 0
    buf, dst = host(4096)
    assert acl.rt.memcpy(dst, 4096, va + 2 * MiB - 2048, 4096, 2) == 0
    assert buf.tobytes() == bytes(range(256)) * 16
    acl.rt.destroy_stream(stream)


@pytest.mark.parametrize("rt", ["report"], indirect=True)
def test_an_operator_reads_and_writes_mapped_memory_across_handles(rt):
    va = mapped()
    a = np.arange(1024, dtype=np.float32)
    b = np.full(1024, 0.5, np.float32)
    # x straddles the two handles; y and the output lie in the second one
    x_ptr, y_ptr, out_ptr = va + 2 * MiB - 2048, va + 2 * MiB + 8192, va + 3 * MiB
    for ptr, array in ((x_ptr, a), (y_ptr, b)):
        assert acl.rt.memcpy(ptr, array.nbytes, acl.util.numpy_to_ptr(array), array.nbytes,
                             1) == 0
    descs = [acl.create_tensor_desc(acl.ACL_FLOAT, [1024], acl.ACL_FORMAT_ND) for _ in range(3)]
    bufs = [acl.create_data_buffer(p, 4096) for p in (x_ptr, y_ptr, out_ptr)]
    assert acl.op.execute_v2("Add", descs[:2], bufs[:2], descs[2:], bufs[2:], 0, 0) == 0
    assert acl.rt.synchronize_stream(0) == 0
    out = np.zeros(1024, np.float32)
    assert acl.rt.memcpy(acl.util.numpy_to_ptr(out), 4096, out_ptr, 4096, 2) == 0
    np.testing.assert_array_equal(out, a + b)
    assert rt.sanitizer.reports == []
    for buf in bufs:
        acl.destroy_data_buffer(buf)
    for desc in descs:
        acl.destroy_tensor_desc(desc)


def test_ptr_to_numpy_views_mapped_memory_in_device_run_mode():
    with Runtime("A2", hbm_bytes=256 * MiB, run_mode="device", sanitizer="off") as rt:
        rt.set_device(0)
        va = mapped()
        assert acl.rt.memset(va + 16, 16, 9, 16) == 0
        view = acl.util.ptr_to_numpy(va, (48,), 2)   # NPY_UINT8
        assert list(view[16:32]) == [9] * 16
        view[0] = 5   # the handle's own bytes
        out = np.zeros(1, np.uint8)
        assert acl.rt.memcpy(acl.util.numpy_to_ptr(out), 1, va, 1, 2) == 0
        assert out.tobytes() == b"\x05"
        # a view cannot span two handles (acl.util raises, as for any address it cannot view)
        with pytest.raises(InvalidPointer, match="span 2 physical handles"):
            acl.util.ptr_to_numpy(va + 2 * MiB - 8, (16,), 2)


def test_physical_memory_takes_back_what_the_quarantine_holds():
    out = io.StringIO()
    sanitizer = Sanitizer(output=out, quarantine_bytes=1 << 30)
    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer=sanitizer) as rt:
        rt.set_device(0)
        ptr, _ = acl.rt.malloc(60 * MiB, acl.ACL_MEM_MALLOC_HUGE_ONLY)
        assert acl.rt.free(ptr) == 0                     # held by the quarantine
        assert rt.device(0).held()
        handle, ret = acl.rt.malloc_physical(40 * MiB, PROP, 0)
        assert ret == 0                                  # the held memory was taken back
        assert not rt.device(0).held()
        assert acl.rt.get_mem_info(acl.ACL_HBM_MEM)[0] == 24 * MiB
        # and a request that fails even so leaves the quarantine as it was
        ptr, _ = acl.rt.malloc(20 * MiB, acl.ACL_MEM_MALLOC_HUGE_ONLY)
        assert acl.rt.free(ptr) == 0
        assert acl.rt.malloc_physical(40 * MiB, PROP, 0)[1] == acl.ACL_ERROR_RT_MEMORY_ALLOCATION
        assert len(rt.device(0).held()) == 1
        rt.device(0).check_invariants()
        assert acl.rt.free_physical(handle) == 0
