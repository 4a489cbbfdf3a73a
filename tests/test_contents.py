"""Memory contents: sparse storage, memcpy and memset rules, observer events."""

import ctypes
import os
import subprocess
import sys
import textwrap
import tracemalloc

import numpy as np
import pytest

from ascend_memsim import (
    GiB,
    InvalidArgument,
    InvalidPointer,
    InvalidRuntimeParam,
    MallocPolicy,
    MemcpyKind,
    MiB,
    Runtime,
    acl,
)
from ascend_memsim.data.contents import CHUNK_BYTES, Contents, Runs, contents_of
from ascend_memsim.memory.constants import ErrorCode
from ascend_memsim.runtime.peer import peer_access

H2D, D2H, D2D, H2H = (MemcpyKind.HOST_TO_DEVICE, MemcpyKind.DEVICE_TO_HOST,
                      MemcpyKind.DEVICE_TO_DEVICE, MemcpyKind.HOST_TO_HOST)


@pytest.fixture
def rt():
    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer="off") as runtime:
        runtime.set_device(0)
        yield runtime


def put(rt, data: bytes) -> int:
    """A device block holding ``data``."""
    ptr = rt.malloc(len(data))
    buf = bytearray(data)
    rt.memcpy(ptr, len(data), rt.host.register(buf).ptr, len(data), H2D)
    return ptr


def get(rt, ptr: int, count: int) -> bytes:
    out = bytearray(count)
    reg = rt.host.register(out)
    rt.memcpy(reg.ptr, count, ptr, count, D2H)
    return bytes(out)


# -- Runs and Contents ---------------------------------------------------------------------------

def test_runs_merge_and_gaps():
    r = Runs()
    r.add(10, 20)
    r.add(30, 40)
    assert r.first_gap(10, 20) is None
    assert r.first_gap(0, 15) == (0, 10)
    assert r.first_gap(15, 35) == (20, 30)
    r.add(20, 30)
    assert r.runs() == [(10, 40)] and r.covered() == 30
    r.add(0, 5)
    r.add(5, 10)
    assert r.runs() == [(0, 40)]


def test_contents_reads_zero_where_never_written_and_back_what_was():
    c = Contents(1000)
    c.write(100, memoryview(b"abc"))
    assert c.read(98, 7) == b"\0\0abc\0\0"
    c.fill(0, 2, 0x1FF & 0xFF)
    assert c.read(0, 3) == b"\xff\xff\0"
    assert c.written.runs() == [(0, 2), (100, 103)]


def test_big_block_is_sparse_and_whole_chunk_fill_costs_nothing():
    c = Contents(8 * GiB)
    c.write(5 * GiB + 7, memoryview(b"x" * 100))
    assert c.materialised_bytes() == CHUNK_BYTES
    c.fill(0, 4 * CHUNK_BYTES, 9)
    assert c.materialised_bytes() == CHUNK_BYTES
    assert c.read(CHUNK_BYTES - 2, 4) == b"\x09" * 4
    # A write across a chunk boundary lands in both chunks.
    c.write(CHUNK_BYTES - 1, memoryview(b"ab"))
    assert c.read(CHUNK_BYTES - 2, 4) == b"\x09ab\x09"


def traced_peak(fn) -> int:
    """Peak bytes the interpreter allocated while ``fn`` ran (memory maps not counted)."""
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_small_write_after_a_whole_block_fill_builds_no_big_temporary():
    with Runtime("A2", hbm_bytes=2 * GiB, sanitizer="off") as rt:
        rt.set_device(0)
        dev = rt.malloc(GiB - 4096, MallocPolicy.NORMAL_ONLY)
        footprint = rt.block(dev).footprint
        rt.memset(dev, footprint, 7, footprint)
        peak = traced_peak(lambda: rt.memset(dev, 1, 1, 1))
        assert peak < 4 * MiB, f"{peak} bytes"
        assert contents_of(rt.block(dev)).materialised_bytes() <= CHUNK_BYTES
        assert get(rt, dev, 3) == b"\x01\x07\x07"
        assert get(rt, dev + footprint - 2, 2) == b"\x07\x07"


def test_reads_of_unwritten_and_filled_chunks_build_no_big_temporary():
    c = Contents(32 * CHUNK_BYTES)
    c.fill(CHUNK_BYTES, CHUNK_BYTES, 5)
    assert c.materialised_bytes() == 0
    out = bytearray(CHUNK_BYTES + 4)
    peak = traced_peak(lambda: c.read_into(4, memoryview(out)))
    assert peak < 4 * MiB, f"{peak} bytes"
    assert out[-9:] == b"\x00" + b"\x05" * 8
    assert out.count(5) == 8 and out.count(0) == CHUNK_BYTES - 4


def test_big_fills_of_a_one_chunk_block_match_a_model():
    c = Contents(GiB - 4096)
    c.fill(3, GiB - 4096 - 10, 7)
    assert c.materialised_bytes() <= 2 * CHUNK_BYTES
    c.write(CHUNK_BYTES * 5 + 1, memoryview(b"xyz"))
    c.fill(CHUNK_BYTES - 1, 2, 0)
    for at, want in ((0, b"\x00\x00\x00\x07"), (CHUNK_BYTES - 2, b"\x07\x00\x00\x07"),
                     (CHUNK_BYTES * 5, b"\x07xyz\x07"), (GiB - 4096 - 9, b"\x07\x07\x00")):
        assert c.read(at, len(want)) == want
    assert c.materialised_bytes() <= 4 * CHUNK_BYTES  # chunks 0, 1, 5 and the last
    assert c.written.runs() == [(3, GiB - 4096 - 7)]


def test_device_to_device_copies_go_chunk_to_chunk():
    with Runtime("A2", hbm_bytes=2 * GiB, sanitizer="off") as rt:
        rt.set_device(0)
        a = rt.malloc(3 * CHUNK_BYTES, MallocPolicy.NORMAL_ONLY)
        b = rt.malloc(3 * CHUNK_BYTES, MallocPolicy.NORMAL_ONLY)
        model = bytearray(3 * CHUNK_BYTES)
        for at, data in ((0, b"head"), (CHUNK_BYTES - 3, b"across"), (2 * CHUNK_BYTES, b"end")):
            buf = bytearray(data)
            rt.memcpy(a + at, len(buf), rt.host.register(buf).ptr, len(buf), H2D)
            model[at:at + len(buf)] = buf
        rt.memset(a + CHUNK_BYTES + 100, 50, 9, 50)
        model[CHUNK_BYTES + 100:CHUNK_BYTES + 150] = b"\x09" * 50
        n = 2 * CHUNK_BYTES + 8
        peak = traced_peak(lambda: rt.memcpy(b + 8, n, a, n, D2D))
        assert peak < 4 * MiB, f"{peak} bytes"
        for at in (8, CHUNK_BYTES + 5, CHUNK_BYTES + 108, 2 * CHUNK_BYTES + 8):
            assert get(rt, b + at, 60) == bytes(model[at - 8:at + 52])
        # Overlapping copies inside one block behave as memmove, in both directions.
        rt.memcpy(a + 2, CHUNK_BYTES, a, CHUNK_BYTES, D2D)
        model[2:2 + CHUNK_BYTES] = model[:CHUNK_BYTES]
        rt.memcpy(a + CHUNK_BYTES, 100, a + CHUNK_BYTES + 1, 100, D2D)
        model[CHUNK_BYTES:CHUNK_BYTES + 100] = model[CHUNK_BYTES + 1:CHUNK_BYTES + 101]
        for at in (0, CHUNK_BYTES - 8, CHUNK_BYTES + 90):
            assert get(rt, a + at, 64) == bytes(model[at:at + 64])


def test_64_gb_device_with_60_gb_allocated_stays_small(tmp_path):
    """RSS of a fresh interpreter: 60 GB allocated, 16 MiB written, under 100 MiB."""
    script = textwrap.dedent("""
        import resource, sys
        from ascend_memsim import GiB, MiB, Runtime
        with Runtime("A2", hbm_bytes=64 * GiB, sanitizer="off") as rt:
            rt.set_device(0)
            ptrs = [rt.malloc(4 * GiB) for _ in range(15)]
            data = bytearray(b"\\x5a" * MiB)
            src = rt.host.register(data).ptr
            for i in range(16):
                rt.memcpy(ptrs[i % 15] + i * 3 * MiB, MiB, src, MiB, 1)
            out = bytearray(MiB)
            rt.memcpy(rt.host.register(out).ptr, MiB, ptrs[3] + 3 * 3 * MiB, MiB, 2)
            assert out == data
            scale = 1 if sys.platform == "darwin" else 1024
            print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1024 // scale) // 1024)
    """)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=root, env={**os.environ, "PYTHONPATH": root}, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stderr
    rss_kib = int(done.stdout.split()[-1])
    assert rss_kib < 100 * 1024, f"peak RSS {rss_kib} KiB"


# -- memcpy rules --------------------------------------------------------------------------------

def test_round_trip_host_device_host(rt):
    data = bytes(range(256)) * 5
    ptr = put(rt, data)
    assert get(rt, ptr, len(data)) == data


def test_count_zero_succeeds_and_does_nothing(rt):
    # memory.cpp (newer): count 0 returns ACL_SUCCESS before any other check (even NULL).
    rt.memcpy(0, 0, 0, 0, 99)
    rt.memset(0, 0, 7, 0)
    ptr = put(rt, b"k" * 64)
    events = []
    rt.add_observer(lambda event, device, info: events.append(event))
    rt.memset(ptr, 64, 7, 0)
    rt.memcpy(ptr, 64, ptr + 1024, 0, 3)
    assert events == []
    assert get(rt, ptr, 64) == b"k" * 64
    assert rt.sanitizer.reports == []


def test_count_past_dest_max_is_rt_param_invalid(rt):
    ptr = put(rt, b"a" * 64)
    buf = bytearray(b"b" * 64)
    src = rt.host.register(buf).ptr
    with pytest.raises(InvalidRuntimeParam) as info:
        rt.memcpy(ptr, 32, src, 64, H2D)
    assert info.value.code == ErrorCode.RT_PARAM_INVALID
    assert get(rt, ptr, 64) == b"a" * 64


@pytest.mark.parametrize("kind", [6, 7, 8, -1])
def test_kinds_outside_0_to_5_are_invalid_param(rt, kind):
    ptr = put(rt, b"a" * 64)
    with pytest.raises(InvalidArgument) as info:
        rt.memcpy(ptr, 64, ptr + 1, 8, kind)
    assert info.value.code == ErrorCode.INVALID_PARAM


@pytest.mark.parametrize("which", ["dst", "src"])
def test_null_pointer_is_invalid_param(rt, which):
    ptr = put(rt, b"a" * 64)
    dst, src = (0, ptr) if which == "dst" else (ptr, 0)
    with pytest.raises(InvalidArgument, match=which):
        rt.memcpy(dst, 64, src, 8, D2D)


def test_direction_comes_from_the_addresses(rt):
    # The vendor's async sample passes a host buffer with DEVICE_TO_HOST; it works there.
    buf = bytearray(b"q" * 32)
    src = rt.host.register(buf).ptr
    out = bytearray(32)
    rt.memcpy(rt.host.register(out).ptr, 32, src, 32, D2H)
    assert out == b"q" * 32


def test_host_to_host_and_device_to_device(rt):
    a = rt.malloc_host(64)
    rt.memset(a, 64, 0x41, 64)
    b = rt.malloc_host(64)
    rt.memcpy(b, 64, a, 64, H2H)
    d1 = rt.malloc(64)
    d2 = rt.malloc(64)
    rt.memcpy(d1, 64, b, 64, H2D)
    rt.memcpy(d2 + 10, 54, d1, 20, D2D)
    assert get(rt, d2 + 10, 20) == b"A" * 20


def test_same_src_and_dst_succeeds(rt):
    ptr = put(rt, b"xy" * 32)
    rt.memcpy(ptr, 64, ptr, 64, D2D)
    assert get(rt, ptr, 64) == b"xy" * 32


def test_copies_between_devices_need_p2p_memory():
    with Runtime("A2", hbm_bytes=64 * MiB, device_count=2, sanitizer="off") as rt:
        rt.set_device(1)
        plain1 = rt.malloc(64, MallocPolicy.NORMAL_ONLY)
        p2p1 = rt.malloc(64, MallocPolicy.NORMAL_ONLY_P2P)
        rt.set_device(0)
        p2p0 = put(rt, b"z" * 64)
        rt.free(p2p0)
        p2p0 = rt.malloc(64, MallocPolicy.NORMAL_ONLY_P2P)
        rt.memset(p2p0, 64, 0x33, 64)
        with pytest.raises(InvalidRuntimeParam, match="P2P"):
            rt.memcpy(plain1, 64, p2p0, 64, D2D)
        # P2P memory at both ends, but no peer access yet
        with pytest.raises(InvalidRuntimeParam, match="peer access"):
            rt.memcpy(p2p1, 64, p2p0, 64, D2D)
        assert get(rt, p2p1, 64) == bytes(64)
        peer_access(rt).enable(1, 0)
        rt.memcpy(p2p1, 64, p2p0, 64, D2D)
        assert get(rt, p2p1, 64) == b"\x33" * 64


def test_copy_leaving_the_footprint_fails_and_changes_nothing(rt):
    ptr = put(rt, b"k" * 100)
    block = rt.block(ptr)
    buf = bytearray(b"w" * 300)
    src = rt.host.register(buf).ptr
    with pytest.raises(InvalidPointer, match="past the end"):
        rt.memcpy(ptr, 300, src, block.footprint + 1, H2D)
    assert get(rt, ptr, 100) == b"k" * 100


def test_unknown_addresses_are_errors_not_crashes(rt):
    ptr = put(rt, b"k" * 64)
    # unmapped in the process (page 0, far below any mapping) or in a device's window
    for addr in (1, 12345, 1 << 40, (1 << 44) + (1 << 42)):
        with pytest.raises(InvalidPointer):
            rt.memcpy(ptr, 64, addr, 8, H2D)
        assert acl.rt.memcpy(addr, 64, ptr, 8, D2H) == ErrorCode.RT_PARAM_INVALID
    assert get(rt, ptr, 64) == b"k" * 64


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs /proc/self/maps")
def test_raw_host_addresses_the_process_mapped(rt):
    ptr = put(rt, b"k" * 64)
    array = np.zeros(64, np.uint8)
    assert acl.rt.memcpy(array.ctypes.data, 64, ptr, 64, D2H) == 0
    assert bytes(array) == b"k" * 64
    array[:] = 7
    assert acl.rt.memcpy(ptr, 64, array.ctypes.data, 64, H2D) == 0
    assert get(rt, ptr, 64) == b"\x07" * 64
    buffer = ctypes.create_string_buffer(b"z" * 64, 64)
    assert acl.rt.memcpy(ptr, 64, ctypes.addressof(buffer), 64, H2D) == 0
    assert acl.rt.memset(ctypes.addressof(buffer), 64, 1, 64) == 0
    assert buffer.raw == b"\x01" * 64
    # code is mapped read-only: readable, never written
    code = ctypes.cast(ctypes.pythonapi.Py_IncRef, ctypes.c_void_p).value
    assert acl.rt.memcpy(code, 64, ptr, 8, D2H) == ErrorCode.RT_PARAM_INVALID
    assert "writable" in acl.get_recent_err_msg()
    assert acl.rt.memcpy(ptr, 64, code, 8, H2D) == 0


def test_memcpy_needs_a_current_device():
    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer="off"):
        assert acl.rt.memcpy(1, 1, 2, 1, 0) == ErrorCode.RT_CONTEXT_NULL


# -- memset ---------------------------------------------------------------------------------------

def test_memset_uses_the_low_byte(rt):
    ptr = rt.malloc(64)
    rt.memset(ptr, 64, 0x1234, 64)
    assert get(rt, ptr, 64) == b"\x34" * 64
    rt.memset(ptr, 64, -1, 8)
    assert get(rt, ptr, 9) == b"\xff" * 8 + b"\x34"


def test_memset_count_past_max_count(rt):
    ptr = rt.malloc(64)
    with pytest.raises(InvalidRuntimeParam):
        rt.memset(ptr, 16, 1, 17)
    assert acl.rt.memset(ptr, 16, 1, 17) == ErrorCode.RT_PARAM_INVALID
    assert acl.rt.memset(0, 16, 1, 1) == ErrorCode.INVALID_PARAM


def test_face_shapes(rt):
    ptr, ret = acl.rt.malloc(64, 0)
    assert ret == 0
    assert acl.rt.memset(ptr, 64, 1, 64) == 0
    assert acl.rt.memcpy(ptr, 64, ptr, 64, 3) == 0
    assert acl.rt.memcpy(ptr, 64, ptr, 64, 7) == ErrorCode.INVALID_PARAM
    assert acl.rt.memcpy(ptr, "64", ptr, 64, 3) == ErrorCode.INVALID_PARAM


# -- observer events -----------------------------------------------------------------------------

def test_memcpy_and_memset_events(rt):
    seen = []
    rt.add_observer(lambda event, device, info: seen.append((event, info)))
    ptr = rt.malloc(64)
    host = rt.malloc_host(64)
    rt.memset(ptr, 64, 5, 32)
    rt.memcpy(host, 64, ptr, 32, D2H)
    events = [(e, i) for e, i in seen if e in ("memcpy", "memset")]
    assert events == [
        ("memset", {"ptr": ptr, "count": 32, "value": 5, "stream": None}),
        ("memcpy", {"dst": host, "src": ptr, "count": 32, "kind": int(D2H), "stream": None}),
    ]


def test_failed_copy_emits_nothing(rt):
    seen = []
    rt.add_observer(lambda event, device, info: seen.append(event))
    ptr = rt.malloc(64)
    with pytest.raises(InvalidPointer):
        rt.memcpy(ptr, 64, 99, 8, H2D)
    assert "memcpy" not in seen


def test_threads_copying_to_their_own_blocks_do_not_mix(rt):
    import threading

    errors = []

    def worker(value: int) -> None:
        try:
            rt.set_device(0)
            for _ in range(50):
                ptr = rt.malloc(3000)
                rt.memset(ptr, 3000, value, 3000)
                data = get(rt, ptr, 3000)
                if data != bytes((value,)) * 3000:
                    errors.append(value)
                rt.free(ptr)
        except Exception as e:  # reported through the list
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(v,)) for v in range(1, 5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    rt.device(0).check_invariants()


def test_copying_never_written_or_filled_memory_makes_nothing():
    with Runtime("A2", hbm_bytes=8 * GiB, sanitizer="off") as rt:
        rt.set_device(0)
        size = 2 * GiB
        a = rt.malloc(size, MallocPolicy.NORMAL_ONLY)
        b = rt.malloc(size, MallocPolicy.NORMAL_ONLY)
        rt.memcpy(b, size, a, size, D2D)  # a was never written: b reads zeros, holds no bytes
        assert contents_of(rt.block(b)).materialised_bytes() == 0
        assert get(rt, b + CHUNK_BYTES + 5, 16) == bytes(16)
        rt.memset(a, size, 7, size)  # whole chunks stay ints, and so do their copies
        rt.memcpy(b + 64, size - 64, a + 64, size - 64, D2D)
        assert contents_of(rt.block(b)).materialised_bytes() == CHUNK_BYTES  # the first chunk
        assert get(rt, b, 80) == bytes(64) + b"\x07" * 16
        assert get(rt, b + size - 8, 8) == b"\x07" * 8


def test_a_copy_that_runs_out_of_host_memory_changes_nothing(monkeypatch):
    from ascend_memsim.data import contents

    with Runtime("A2", hbm_bytes=4 * GiB, sanitizer="off") as rt:
        rt.set_device(0)
        a = rt.malloc(GiB + 4096, MallocPolicy.NORMAL_ONLY)  # past DENSE_LIMIT: 64 MiB chunks
        b = rt.malloc(GiB + 4096, MallocPolicy.NORMAL_ONLY)
        for at in range(0, 4 * CHUNK_BYTES, CHUNK_BYTES):  # real bytes in every chunk of a
            buf = bytearray(b"data")
            rt.memcpy(a + at, 4, rt.host.register(buf).ptr, 4, H2D)
        buf = bytearray(b"keep")
        rt.memcpy(b + CHUNK_BYTES, 4, rt.host.register(buf).ptr, 4, H2D)
        before = dict(contents_of(rt.block(b)).chunks), contents_of(rt.block(b)).written.runs()
        made = []
        limit = [2]
        real = contents.zeroed_buffer

        def two_then_out(size):
            if len(made) == limit[0]:
                raise MemoryError
            made.append(size)
            return real(size)

        monkeypatch.setattr(contents, "zeroed_buffer", two_then_out)
        with pytest.raises(MemoryError):
            rt.memcpy(b, 4 * CHUNK_BYTES, a, 4 * CHUNK_BYTES, D2D)
        assert len(made) == 2
        after = contents_of(rt.block(b))
        assert (dict(after.chunks), after.written.runs()) == before
        assert get(rt, b, 4) == bytes(4) and get(rt, b + CHUNK_BYTES, 4) == b"keep"
        made.clear()
        limit[0] = 1
        eight = bytearray(b"8 bytes!")
        with pytest.raises(MemoryError):  # host to device writes are all or nothing too
            across = rt.host.register(eight).ptr  # into chunks 2 and 3, both new
            rt.memcpy(b + 3 * CHUNK_BYTES - 4, 8, across, 8, H2D)
        assert (dict(after.chunks), after.written.runs()) == before


@pytest.mark.parametrize("mode", ["off", "report", "strict"])
def test_a_copy_onto_itself_is_still_checked(mode):
    """Issue 9: memcpy with dst == src skipped every check. The runtime returns success for
    it without touching memory (api_error.cc, MemCopySync); the simulator still refuses a
    range outside live memory, and moves nothing."""
    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer={"mode": mode, "output": None}) as rt:
        rt.set_device(0)
        assert acl.rt.memcpy(0x1234, 8, 0x1234, 8, 0) == ErrorCode.RT_PARAM_INVALID
        dev = rt.malloc(100)
        assert acl.rt.memcpy(dev, 4096, dev, 4096, 3) == ErrorCode.RT_PARAM_INVALID
        assert acl.rt.memcpy(dev, 100, dev, 100, 3) == 0
        stream, _ = acl.rt.create_stream()
        assert acl.rt.memcpy_async(dev, 4096, dev, 4096, 3, stream) == ErrorCode.RT_PARAM_INVALID
        assert acl.rt.memcpy_async(dev, 100, dev, 100, 3, stream) == 0
        if mode == "strict":
            # strict refuses a free while queued work still uses the block
            assert acl.rt.free(dev) == ErrorCode.RT_PARAM_INVALID
            assert acl.rt.synchronize_stream(stream) == 0
            rt.free(dev)
        else:
            rt.free(dev)
            # the queued self-copy now targets freed memory: it fails when it runs
            assert acl.rt.synchronize_stream(stream) == ErrorCode.RT_PARAM_INVALID
        if mode == "report":
            kinds = {r.kind for r in rt.sanitizer.reports}
            assert {"invalid-address", "out-of-bounds", "use-after-free"} <= kinds
            assert "uninitialized-read" not in kinds
        acl.rt.destroy_stream(stream)
