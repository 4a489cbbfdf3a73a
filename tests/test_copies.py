"""The rest of the copy chapter (11-03): 2D, batch, descriptor and offset copies, the 32-bit
memset and the deprecated conditional copy. Each rule and each misuse: the documented code,
and a failed call changes nothing."""

import ctypes
import struct

import pytest

from ascend_memsim import MiB, Runtime, acl, aclrt
from ascend_memsim.memory.constants import ErrorCode as E

H2D, D2H, D2D, H2H = (acl.ACL_MEMCPY_HOST_TO_DEVICE, acl.ACL_MEMCPY_DEVICE_TO_HOST,
                      acl.ACL_MEMCPY_DEVICE_TO_DEVICE, acl.ACL_MEMCPY_HOST_TO_HOST)
INNER = acl.ACL_MEMCPY_INNER_DEVICE_TO_DEVICE
SIZE_MAX = 2**64 - 1
DEVICE = {"id": 0, "type": 1}      # aclrtMemLocation: ACL_MEM_LOCATION_TYPE_DEVICE
HOST = {"id": 0, "type": 0}        # ACL_MEM_LOCATION_TYPE_HOST
TO_DEVICE = {"dstLoc": DEVICE, "srcLoc": HOST}
TO_HOST = {"dstLoc": HOST, "srcLoc": DEVICE}


def _runtime(product="A2", **kw):
    rt = Runtime(product, hbm_bytes=64 * MiB, sanitizer=kw.pop("sanitizer", "off"), **kw)
    rt.__enter__()
    acl.init()
    assert acl.rt.set_device(0) == 0
    return rt


@pytest.fixture
def rt():
    runtime = _runtime()
    yield runtime
    acl.finalize()
    runtime.__exit__(None, None, None)


def host(data: bytes) -> int:
    ptr, ret = acl.rt.malloc_host(max(len(data), 1))
    assert ret == 0
    ctypes.memmove(ptr, data, len(data))
    return ptr


def device(data: bytes) -> int:
    ptr, ret = acl.rt.malloc(len(data), 0)
    assert ret == 0 and acl.rt.memcpy(ptr, len(data), host(data), len(data), H2D) == 0
    return ptr


def read(ptr: int, count: int) -> bytes:
    out = host(bytes(count))
    assert acl.rt.memcpy(out, count, ptr, count, D2H) == 0
    return acl.util.ptr_to_bytes(out, count)


# -- 2D copies ---------------------------------------------------------------------------------

def test_2d_round_trip_keeps_the_pitch(rt):
    src = host(bytes(range(256)) * 4)                    # 8 rows of 128 bytes
    dev = device(bytes(512))
    assert acl.rt.memcpy2d(dev, 64, src, 128, 48, 8, H2D) == 0
    rows = read(dev, 512)
    for r in range(8):
        assert rows[r * 64:r * 64 + 48] == (bytes(range(256)) * 4)[r * 128:r * 128 + 48]
        assert rows[r * 64 + 48:r * 64 + 64] == bytes(16)        # the gap is untouched
    out = host(bytes(8 * 48))
    assert acl.rt.memcpy2d(out, 48, dev, 64, 48, 8, acl.ACL_MEMCPY_DEFAULT) == 0
    assert acl.util.ptr_to_bytes(out, 48) == rows[:48]


@pytest.mark.parametrize("args, code", [
    # memory.cpp CheckMemcpy2dParam
    (lambda s, d: (0, 64, s, 64, 64, 2, H2D), E.INVALID_PARAM),
    (lambda s, d: (d, 64, s, 32, 64, 2, H2D), E.INVALID_PARAM),          # width > spitch
    (lambda s, d: (d, 32, s, 64, 64, 2, H2D), E.INVALID_PARAM),          # width > dpitch
    (lambda s, d: (d, 64, s, 64, 64, 2, H2H), E.INVALID_PARAM),
    (lambda s, d: (d, 64, s, 64, 64, 2, INNER), E.INVALID_PARAM),
    (lambda s, d: (d, 64, s, 64, 64, 2, 5), E.INVALID_PARAM),
    (lambda s, d: (d, 64, s, 64, 64, 2, 1.0), E.INVALID_PARAM),
    # api_error.cc MemCopy2DCheckParam / MemCopy2DSync
    (lambda s, d: (d, 64, s, 64, 64, 5 * 2**20 + 1, H2D), E.RT_PARAM_INVALID),
    (lambda s, d: (d, 64, d, 64, 64, 2, D2D), E.RT_FEATURE_NOT_SUPPORT),
    (lambda s, d: (s, 64, s, 64, 64, 2, H2D), E.RT_PARAM_INVALID),       # host to host
    (lambda s, d: (d + 256, 64, d, 64, 64, 2, H2D), E.RT_PARAM_INVALID),   # device to device
    (lambda s, d: (s, 64, d, 300, 64, 3, D2H), E.RT_PARAM_INVALID),      # 3rd row past src
    (lambda s, d: (d + 64, 1024, s, 64, 64, 2, H2D), E.RT_PARAM_INVALID),  # 2nd row past dst
    # DECISION (data/copies.py): a row the pitch carries out of its buffer is refused,
    # not taken as other process memory
    (lambda s, d: (d, 64, s, 4096, 64, 2, H2D), E.RT_PARAM_INVALID),
])
def test_2d_misuse(rt, args, code):
    src = host(b"s" * 256)
    dst = device(bytes(512))
    before = read(dst, 512), acl.util.ptr_to_bytes(src, 256)
    assert acl.rt.memcpy2d(*args(src, dst)) == code
    assert (read(dst, 512), acl.util.ptr_to_bytes(src, 256)) == before


def test_2d_zero_width_or_height_succeeds_before_any_check(rt):
    assert acl.rt.memcpy2d(0, 0, 0, 0, 0, 5, 99) == 0
    assert acl.rt.memcpy2d(0, 0, 0, 0, 5, 0, 99) == 0


def test_2d_async_queues_and_allows_device_to_device(rt):
    src = device(bytes(range(128)))
    dst = device(bytes(128))
    stream, _ = acl.rt.create_stream()
    assert acl.rt.memcpy2d_async(dst, 64, src, 64, 32, 2, D2D, stream) == 0
    assert read(dst, 128) == bytes(128)                  # queued, not run
    assert acl.rt.synchronize_stream(stream) == 0
    got = read(dst, 128)
    assert got[:32] == bytes(range(32)) and got[64:96] == bytes(range(64, 96))
    # a bad stream queues nothing
    assert acl.rt.memcpy2d_async(dst, 64, src, 64, 32, 2, D2D, 12345) == E.RT_INVALID_HANDLE
    assert rt.streams.pending == 0


def test_2d_reads_of_unwritten_rows_are_reported():
    runtime = _runtime(sanitizer={"output": None})
    try:
        dev, _ = acl.rt.malloc(256, 0)
        out = host(bytes(256))
        assert acl.rt.memcpy2d(out, 64, dev, 64, 64, 2, D2H) == 0
        assert any(r.kind == "uninitialized-read" for r in runtime.sanitizer.reports)
    finally:
        acl.finalize()
        runtime.__exit__(None, None, None)


# -- batch copies ----------------------------------------------------------------------------

def test_batch_copies_host_to_device_and_back(rt):
    a, b = device(bytes(64)), device(bytes(64))
    src = host(b"x" * 64 + b"y" * 64)
    assert acl.rt.memcpy_batch([a, b], [64, 64], [src, src + 64], [64, 32], 2,
                               [TO_DEVICE], [0], 1) == (SIZE_MAX, 0)
    assert read(a, 64) == b"x" * 64 and read(b, 64) == b"y" * 32 + bytes(32)
    out = host(bytes(128))
    assert acl.rt.memcpy_batch_v2([out, out + 64], [64, 64], [a, b], [64, 64], 2,
                                  [TO_HOST], [0], 1) == 0
    assert acl.util.ptr_to_bytes(out, 128) == read(a, 64) + read(b, 64)


def test_batch_attributes_apply_from_their_index(rt):
    a = device(bytes(64))
    src = host(b"q" * 64)
    out = host(bytes(64))
    assert acl.rt.memcpy_batch([a, out], [64, 64], [src, a], [64, 64], 2,
                               [TO_DEVICE, TO_HOST], [0, 1], 2) == (SIZE_MAX, 0)
    assert acl.util.ptr_to_bytes(out, 64) == b"q" * 64


def test_a_bad_entry_gives_its_index_and_nothing_moves(rt):
    """api_impl.cc ApiImpl::MemcpyBatch checks every entry (CheckMemCpyAttr) before the
    driver copies; failIndex names the entry."""
    a, b = device(bytes(64)), device(bytes(64))
    src = host(b"z" * 64)
    # entry 1: its destination is host memory, but the attribute says device
    assert acl.rt.memcpy_batch([a, src], [64, 64], [src, b], [64, 64], 2,
                               [TO_DEVICE], [0], 1) == (1, E.RT_PARAM_INVALID)
    assert read(a, 64) == bytes(64)
    # entry 2: device to device
    assert acl.rt.memcpy_batch([a, b, a], [64] * 3, [src, src, b], [8] * 3, 3,
                               [TO_DEVICE], [0], 1) == (2, E.RT_PARAM_INVALID)
    # entry 0 runs past its block
    assert acl.rt.memcpy_batch([a], [128], [src], [128], 1,
                               [TO_DEVICE], [0], 1) == (0, E.RT_PARAM_INVALID)
    # a device id that is not the memory's
    wrong = {"dstLoc": {"id": 1, "type": 1}, "srcLoc": HOST}
    assert acl.rt.memcpy_batch([a], [64], [src], [64], 1, [wrong], [0], 1) == \
        (0, E.RT_PARAM_INVALID)
    assert read(a, 64) == bytes(64) and read(b, 64) == bytes(64)


@pytest.mark.parametrize("args, code", [
    # memory.cpp MemcpyBatchImpl / ValidateMemcpyBatchParams: no index
    (lambda d, s: ([d], [64], [s], [64], 0, [TO_DEVICE], [0], 1), E.INVALID_PARAM),
    (lambda d, s: ([d], [32], [s], [64], 1, [TO_DEVICE], [0], 1), E.INVALID_PARAM),
    (lambda d, s: ([d], [64], [s], [64], 1, [{**TO_DEVICE, "rsv": [0, 1]}], [0], 1),
     E.INVALID_PARAM),
    (lambda d, s: ([d], [64], [s], [64], 2, [TO_DEVICE], [0], 1), E.INVALID_PARAM),  # lengths
    # api_error.cc MemcpyBatch
    (lambda d, s: ([d], [64], [s], [64], 1, [], [], 0), E.RT_PARAM_INVALID),
    (lambda d, s: ([d], [64], [s], [64], 1, [TO_DEVICE] * 2, [0, 1], 2), E.RT_PARAM_INVALID),
    (lambda d, s: ([d, d], [64] * 2, [s, s], [64] * 2, 2, [TO_DEVICE], [1], 1),
     E.RT_PARAM_INVALID),
    (lambda d, s: ([d] * 3, [64] * 3, [s] * 3, [64] * 3, 3, [TO_DEVICE] * 2, [0, 0], 2),
     E.RT_PARAM_INVALID),
    (lambda d, s: ([d] * 3, [64] * 3, [s] * 3, [64] * 3, 3, [TO_DEVICE] * 2, [0, 3], 2),
     E.RT_PARAM_INVALID),
    (lambda d, s: ([d] * 4097, [1] * 4097, [s] * 4097, [1] * 4097, 4097, [TO_DEVICE], [0], 1),
     E.RT_PARAM_INVALID),                                # DEVMM_MEMCPY_BATCH_MAX_COUNT
])
def test_batch_misuse(rt, args, code):
    dst, src = device(bytes(64)), host(b"m" * 64)
    assert acl.rt.memcpy_batch(*args(dst, src)) == (SIZE_MAX, code)
    assert read(dst, 64) == bytes(64)


def test_a_batch_of_zero_sizes_succeeds_before_any_check(rt):
    assert acl.rt.memcpy_batch([0], [0], [0], [0], 1, None, None, 0) == (SIZE_MAX, 0)


def test_async_batches_queue_every_entry_or_none(rt):
    a, b = device(bytes(64)), device(bytes(64))
    src = host(b"w" * 64)
    stream, _ = acl.rt.create_stream()
    assert acl.rt.memcpy_batch_async([a, b], [64, 64], [src, src], [64, 0], 2,
                                     [TO_DEVICE], [0], 1, stream) == (1, E.RT_PARAM_INVALID)
    assert rt.streams.pending == 0     # DECISION: the runtime's loop would have queued entry 0
    assert acl.rt.memcpy_batch_async_v2([a, b], [64, 64], [src, src], [64, 64], 2,
                                        [TO_DEVICE], [0], 1, stream) == 0
    assert read(a, 64) == bytes(64)
    assert acl.rt.synchronize_stream(stream) == 0
    assert read(a, 64) == b"w" * 64 == read(b, 64)


# -- copy descriptors ------------------------------------------------------------------------

def test_descriptor_sizes_per_product():
    for product, size in (("A2", 32), ("A3", 32), ("950PR", 64)):
        runtime = _runtime(product)
        assert acl.rt.get_memcpy_desc_size(INNER) == (size, 0)
        assert acl.rt.get_memcpy_desc_size(D2D) == (0, E.RT_FEATURE_NOT_SUPPORT)
        assert acl.rt.get_memcpy_desc_size(8) == (0, E.INVALID_PARAM)
        acl.finalize()
        runtime.__exit__(None, None, None)
    runtime = Runtime("310P", ddr_bytes=64 * MiB, sanitizer="off")
    with runtime:
        acl.init()
        acl.rt.set_device(0)
        assert acl.rt.get_memcpy_desc_size(INNER) == (0, E.RT_FEATURE_NOT_SUPPORT)
        acl.finalize()


def test_the_documented_descriptor_sequence(rt):
    """11-03 aclrtMemcpyAsyncWithDesc: size, device memory for it, set, copy on a stream."""
    size, _ = acl.rt.get_memcpy_desc_size(INNER)
    desc, _ = acl.rt.malloc(size, 0)
    src, dst = device(bytes(range(200))), device(bytes(200))
    assert acl.rt.set_memcpy_desc(desc, INNER, src, dst, 150, 0) == (desc, 0)
    # the descriptor is an rtMemcpyAddrInfo in device memory (pkg_inc/runtime/runtime/mem.h)
    assert struct.unpack("<IIIIQQ", read(desc, 32)) == (0, 0, 0, 150, src, dst)
    stream, _ = acl.rt.create_stream()
    assert acl.rt.memcpy_async_with_desc(desc, INNER, stream) == 0
    assert acl.rt.synchronize_stream(stream) == 0
    assert read(dst, 200) == bytes(range(150)) + bytes(50)


def test_the_descriptor_is_read_when_the_copy_runs(rt):
    desc, _ = acl.rt.malloc(32, 0)
    src, dst, other = device(b"a" * 64), device(bytes(64)), device(b"b" * 64)
    stream, _ = acl.rt.create_stream()
    assert acl.rt.set_memcpy_desc(desc, INNER, src, dst, 64, 0)[1] == 0
    assert acl.rt.memcpy_async_with_desc(desc, INNER, stream) == 0
    assert acl.rt.set_memcpy_desc(desc, INNER, other, dst, 64, 0)[1] == 0
    assert acl.rt.synchronize_stream(stream) == 0
    assert read(dst, 64) == b"b" * 64


@pytest.mark.parametrize("args, code", [
    # memory.cpp aclrtSetMemcpyDescImpl
    (lambda d, s, t, h: (0, INNER, s, t, 64, 0), (0, E.INVALID_PARAM)),
    (lambda d, s, t, h: (d, 8, s, t, 64, 0), (0, E.INVALID_PARAM)),
    (lambda d, s, t, h: (d, INNER, 0, t, 64, 0), (0, E.INVALID_PARAM)),
    (lambda d, s, t, h: (d, INNER, s, t, 0, 0), (0, E.INVALID_PARAM)),
    (lambda d, s, t, h: (d, INNER, s, t, 64, 1), (0, E.INVALID_PARAM)),     # config reserved
    # api_error.cc ApiErrorDecorator::SetMemcpyDesc
    (lambda d, s, t, h: (d, D2D, s, t, 64, 0), (0, E.RT_FEATURE_NOT_SUPPORT)),
    (lambda d, s, t, h: (d, INNER, s, t, 2**32 + 1, 0), (0, E.RT_PARAM_INVALID)),
    (lambda d, s, t, h: (d + 32, INNER, s, t, 64, 0), (0, E.RT_PARAM_INVALID)),  # 64-aligned
    (lambda d, s, t, h: (h, INNER, s, t, 64, 0), (0, E.RT_PARAM_INVALID)),   # desc on host
    (lambda d, s, t, h: (d, INNER, h, t, 64, 0), (0, E.RT_PARAM_INVALID)),   # src on host
])
def test_set_memcpy_desc_misuse(rt, args, code):
    desc, _ = acl.rt.malloc(64, 0)
    src, dst = device(b"s" * 64), device(bytes(64))
    hst = host(bytes(64))
    assert acl.rt.memset(desc, 64, 0x11, 64) == 0
    given = args(desc, src, dst, hst)
    # pyacl returns the descriptor address it was given, whatever the code
    assert acl.rt.set_memcpy_desc(*given) == (given[0], code[1])
    assert read(desc, 64) == b"\x11" * 64


def test_memcpy_async_with_desc_misuse(rt):
    desc, _ = acl.rt.malloc(32, 0)
    stream, _ = acl.rt.create_stream()
    assert acl.rt.memcpy_async_with_desc(desc, INNER, 0) == E.INVALID_PARAM   # stream NULL
    assert acl.rt.memcpy_async_with_desc(0, INNER, stream) == E.INVALID_PARAM
    assert acl.rt.memcpy_async_with_desc(desc, D2D, stream) == E.RT_FEATURE_NOT_SUPPORT
    assert acl.rt.memcpy_async_with_desc(host(bytes(32)), INNER, stream) == E.RT_PARAM_INVALID
    assert rt.streams.pending == 0
    # a descriptor never set describes a copy of 0 bytes... unwritten memory reads as zeros
    assert acl.rt.memcpy_async_with_desc(desc, INNER, stream) == 0
    assert acl.rt.synchronize_stream(stream) == 0


# -- copies through base-address cells -------------------------------------------------------

def test_memcpy_async_with_offset_reads_the_bases_when_it_runs(rt):
    src, dst = device(bytes(range(128))), device(bytes(128))
    cells = device(dst.to_bytes(8, "little") + src.to_bytes(8, "little"))
    stream, _ = acl.rt.create_stream()
    assert acl.rt.memcpy_async_with_offset(cells, 64, 16, cells + 8, 32, 64, INNER, stream) == 0
    assert acl.rt.synchronize_stream(stream) == 0
    assert read(dst, 128) == bytes(16) + bytes(range(64, 96)) + bytes(80)


@pytest.mark.parametrize("args, code", [
    (lambda c: (c, 64, 0, c + 8, 32, 0, D2D, 0), E.RT_PARAM_INVALID),      # kind must be 6
    (lambda c: (c, 16, 0, c + 8, 32, 0, INNER, 0), E.RT_PARAM_INVALID),    # past dest_max
    (lambda c: (0x1234, 64, 0, c + 8, 32, 0, INNER, 0), E.RT_PARAM_INVALID),
    (lambda c: (c, 64, 0, c + 8, 32, 0, INNER, 999), E.RT_INVALID_HANDLE),
])
def test_memcpy_async_with_offset_misuse(rt, args, code):
    cells = device(bytes(16))
    assert acl.rt.memcpy_async_with_offset(*args(cells)) == code
    assert rt.streams.pending == 0
    assert acl.rt.memcpy_async_with_offset(0, 0, 0, 0, 0, 0, 99, 0) == 0   # count 0


def test_bases_that_name_host_memory_fail_when_the_copy_runs(rt):
    h = host(b"h" * 64)
    dst = device(bytes(64))
    cells = device(dst.to_bytes(8, "little") + h.to_bytes(8, "little"))
    assert acl.rt.memcpy_async_with_offset(cells, 64, 0, cells + 8, 64, 0, INNER, 0) == 0
    assert acl.rt.synchronize_stream(0) == E.RT_PARAM_INVALID
    assert read(dst, 64) == bytes(64)


# -- 32-bit memset ---------------------------------------------------------------------------

def test_memset_d32_fills_32_bit_values(rt):
    dev = device(bytes(64))
    assert acl.rt.memset_d32(dev, 64, 0xDEADBEEF, 15) == 0
    assert read(dev, 64) == bytes.fromhex("efbeadde") * 15 + bytes(4)
    h = host(bytes(16))
    assert acl.rt.memset_d32(h, 16, 0x01010101, 4) == 0
    assert acl.util.ptr_to_bytes(h, 16) == b"\x01" * 16
    stream, _ = acl.rt.create_stream()
    assert acl.rt.memset_d32_async(dev, 64, 7, 16, stream) == 0
    assert read(dev, 4) == bytes.fromhex("efbeadde")
    assert acl.rt.synchronize_stream(stream) == 0
    assert read(dev, 8) == (7).to_bytes(4, "little") * 2


@pytest.mark.parametrize("args, code", [
    # memory.cpp aclrtMemsetD32Impl
    (lambda d, r: (0, 64, 1, 4), E.INVALID_PARAM),
    (lambda d, r: (d + 2, 64, 1, 4), E.INVALID_PARAM),              # not 4-byte aligned
    (lambda d, r: (d, 15, 1, 4), E.INVALID_PARAM),                  # N * 4 > memSize
    (lambda d, r: (r, 64, 1, 4), E.INVALID_PARAM),                  # not aclrt memory
    (lambda d, r: (d, 2**64 - 1, 1, 33), E.RT_PARAM_INVALID),       # past the footprint
    (lambda d, r: (d, 64, 2**32, 4), E.INVALID_PARAM),              # value is uint32
])
def test_memset_d32_misuse(rt, args, code):
    dev = device(bytes(64))
    reg = acl.util.bytes_to_ptr(bytes(64))
    assert acl.rt.memset_d32(*args(dev, reg)) == code
    assert read(dev, 64) == bytes(64)
    assert acl.rt.memset_d32(0, 0, 0, 0) == 0                       # N = 0


# -- the deprecated conditional copy ---------------------------------------------------------

def test_memcpy_async_with_condition_is_memcpy_async(rt):
    src, dst = host(b"c" * 32), device(bytes(32))
    assert acl.rt.memcpy_async_with_condition(dst, 32, src, 32, H2D, 0) == 0
    assert acl.rt.synchronize_stream(0) == 0
    assert read(dst, 32) == b"c" * 32
    # 11-03: HOST_TO_HOST when the program runs on the host (EP) is not supported
    other = host(bytes(32))
    assert acl.rt.memcpy_async_with_condition(other, 32, src, 32, H2H, 0) == \
        E.RT_FEATURE_NOT_SUPPORT
    assert rt.streams.pending == 0


def test_the_c_names(rt):
    assert aclrt.aclrtGetMemcpyDescSize(INNER) == (32, 0)
    dev = device(bytes(8))
    assert aclrt.aclrtMemsetD32(dev, 8, 5, 2) == 0
    assert aclrt.aclrtMemcpy2d(dev, 8, host(b"12345678"), 8, 8, 1, H2D) == 0


def test_the_sanitizer_sees_queued_2d_and_batch_copies():
    """A block freed while a queued 2D or batch copy still targets it: reported at the free
    (free-with-pending-work) and when the copy runs (use-after-free), with stacks."""
    runtime = _runtime(sanitizer={"output": None})
    try:
        src = host(b"p" * 256)
        for queue in (
            lambda dst, s: acl.rt.memcpy2d_async(dst, 64, src, 64, 64, 2, H2D, s),
            lambda dst, s: acl.rt.memcpy_batch_async_v2([dst], [64], [src], [64], 1,
                                                        [TO_DEVICE], [0], 1, s),
        ):
            dst, _ = acl.rt.malloc(256, 0)
            stream, _ = acl.rt.create_stream()
            assert queue(dst, stream) == 0
            assert acl.rt.free(dst) == 0
            assert acl.rt.synchronize_stream(stream) == E.RT_PARAM_INVALID
        kinds = [r.kind for r in runtime.sanitizer.reports]
        assert kinds.count("free-with-pending-work") == 2 and kinds.count("use-after-free") == 2
        assert all(r.call_site and r.alloc_site for r in runtime.sanitizer.reports)
        assert {r.call for r in runtime.sanitizer.reports if r.kind == "use-after-free"} == \
            {"aclrtMemcpy2dAsync", "aclrtMemcpyBatchAsync"}
        assert all(r.queued_site for r in runtime.sanitizer.reports
                   if r.kind == "use-after-free")
    finally:
        acl.finalize()
        runtime.__exit__(None, None, None)


def test_2d_sanitizer_findings_name_the_first_row_concerned():
    """One report per kind and call, at the first row it concerns: a row reaching into the
    padding (A2: 256 bytes asked, 288 by the rule, footprint 320), and the first source row
    holding a byte never written (the gaps between rows are not read, so they are not)."""
    runtime = _runtime(sanitizer={"output": None})
    try:
        dev, _ = acl.rt.malloc(256, 0)
        src = host(b"r" * 512)
        assert acl.rt.memcpy2d(dev, 64, src, 64, 64, 5, H2D) == 0      # row 4 ends at 320
        pads = [r for r in runtime.sanitizer.reports if r.kind == "padding-access"]
        assert [(p.address, p.size) for p in pads] == [(dev + 256, 64)]
        out = host(bytes(512))
        fresh, _ = acl.rt.malloc(512, 0)
        assert acl.rt.memset(fresh, 512, 1, 100) == 0                  # bytes [0, 100)
        # rows at 0, 64 (written), 128, 192 (never written): one report, at row 2
        assert acl.rt.memcpy2d(out, 16, fresh, 64, 16, 4, D2H) == 0
        unread = [r for r in runtime.sanitizer.reports
                  if r.kind == "uninitialized-read" and r.call == "aclrtMemcpy2d"]
        assert [(u.address, u.size) for u in unread] == [(fresh + 128, 16)]
    finally:
        acl.finalize()
        runtime.__exit__(None, None, None)


def test_2d_into_a_block_stored_in_chunks():
    """A 100 MiB block filled whole is kept in 64 MiB chunks (contents.py): a 2D copy across
    the chunk boundary lands in both, and leaves the gap between its rows as it was."""
    with Runtime("A2", hbm_bytes=256 * MiB, sanitizer="off"):
        acl.init()
        acl.rt.set_device(0)
        big, ret = acl.rt.malloc(100 * MiB, 0)
        assert ret == 0 and acl.rt.memset(big, 100 * MiB, 3, 100 * MiB) == 0
        src = host(b"AB" * 8)
        at = big + 64 * MiB - 12
        assert acl.rt.memcpy2d(at, 16, src, 8, 8, 2, H2D) == 0
        assert read(at - 4, 32) == b"\x03" * 4 + b"AB" * 4 + b"\x03" * 8 + b"AB" * 4 + b"\x03" * 4
        acl.finalize()
