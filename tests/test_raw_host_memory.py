"""Raw host addresses never fault the process; memory the simulator keeps is refused; big
host blocks are poisoned lazily.

The risky programs run in a fresh interpreter, so a regression shows as a failed test (a
signal, a non-zero status) and not as a dead test run.
"""

import ctypes
import os
import subprocess
import sys
import textwrap

import pytest

import ascend_memsim.acl as acl
from ascend_memsim import GiB, InvalidPointer, MiB, Runtime, Sanitizer
from ascend_memsim.data import raw
from ascend_memsim.memory.errors import OutOfHostMemory

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/mem"),
                                reason="raw host memory is reached through /proc/self/mem")

PRELUDE = """
import ctypes, mmap, os, sys, tempfile
from ascend_memsim import Runtime, MiB, acl, InvalidPointer
rt = Runtime("A2", hbm_bytes=64 * MiB, sanitizer="off").__enter__()
rt.set_device(0)
dev, _ = acl.rt.malloc(8192, 0)
acl.rt.memset(dev, 8192, 7, 8192)

def device_bytes():
    host, _ = acl.rt.malloc_host(8192)
    acl.rt.memcpy(host, 8192, dev, 8192, 2)
    out = ctypes.string_at(host, 8192)
    acl.rt.free_host(host)
    return out

def refused(fn, *args):
    try:
        fn(*args)
    except InvalidPointer as error:
        return error.code
    return "accepted"
"""


def isolated(code: str) -> list[str]:
    """Run PRELUDE + ``code`` in a fresh interpreter; its output lines, after checking it
    ended normally (a SIGBUS or SIGSEGV is a negative status)."""
    done = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(code)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"status {done.returncode}: {done.stderr}"
    return done.stdout.split()


def test_the_vvar_page_is_refused_not_a_sigbus():
    """Issue 16 (11): [vvar] is mapped readable, but reading it raises SIGBUS."""
    with open("/proc/self/maps", encoding="ascii") as maps:
        if not any("[vvar]" in line for line in maps):
            pytest.skip("this kernel maps no [vvar] page")
    out = isolated("""
        vvar = next(int(line.split("-")[0], 16) for line in open("/proc/self/maps")
                    if "[vvar]" in line)
        print(acl.rt.memcpy(dev, 64, vvar, 64, 1))
        print(device_bytes() == b"\\x07" * 8192)
        print(acl.rt.memset(vvar, 64, 0, 64))
        print(refused(acl.util.ptr_to_bytes, vvar, 64))
        print("alive")
    """)
    assert out == ["107000", "True", "107000", "107000", "alive"]


def test_a_file_mapping_past_the_end_of_its_truncated_file_is_refused():
    """Issue 16 (11): a file mmap whose file was truncated afterwards: its pages past the
    new end raise SIGBUS when touched. Reads and writes are refused whole: the device block
    and the mapping's first page keep their bytes."""
    out = isolated("""
        f = tempfile.TemporaryFile()
        f.write(b"f" * 8192)
        f.flush()
        m = mmap.mmap(f.fileno(), 8192)
        f.truncate(100)
        addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
        print(acl.rt.memcpy(dev, 8192, addr, 8192, 1))      # the second page faults
        print(device_bytes() == b"\\x07" * 8192)
        print(acl.rt.memcpy(addr, 8192, dev, 8192, 2))      # probed first: nothing written
        print(m[:100] == b"f" * 100)
        print(acl.rt.memset(addr + 4096, 16, 1, 16))
        stream, _ = acl.rt.create_stream()
        print(acl.rt.memcpy_async(dev, 8192, addr, 8192, 1, stream))   # checked when it runs
        print(acl.rt.synchronize_stream(stream))
        print(acl.rt.memcpy(dev, 100, addr, 100, 1))        # the part still backed works
        print(device_bytes()[:100] == b"f" * 100)
        print("alive")
    """)
    assert out == ["107000", "True", "107000", "True", "107000", "0", "107000", "0", "True",
                   "alive"]


def test_a_registered_array_over_a_truncated_file_mapping_is_refused_not_a_sigbus():
    """numpy.frombuffer over a file's memory map, registered with numpy_to_ptr, then the
    file shrinks: its bytes move through /proc/self/mem, so the vanished page is 107000."""
    out = isolated("""
        import numpy as np
        f = tempfile.TemporaryFile()
        f.write(b"f" * 8192)
        f.flush()
        m = mmap.mmap(f.fileno(), 8192)
        array = np.frombuffer(m, np.uint8)
        ptr = acl.util.numpy_to_ptr(array)
        f.truncate(100)
        print(acl.rt.memcpy(dev, 8192, ptr, 8192, 1))
        print(device_bytes() == b"\x07" * 8192)
        print(acl.rt.memcpy(ptr, 8192, dev, 8192, 2))
        print(acl.rt.memset(ptr, 8192, 1, 8192))
        print(m[:100] == b"f" * 100)
        print(acl.rt.memcpy(ptr, 50, dev, 50, 2))           # the part still backed works
        print(m[:60] == b"\x07" * 50 + b"f" * 10)
        print(acl.util.ptr_to_bytes(ptr, 60) == b"\x07" * 50 + b"f" * 10)
        print(acl.rt.memcpy(dev, 100, ptr, 100, 1))
        print("alive")
    """)
    assert out == ["107000", "True", "107000", "107000", "True", "0", "True", "True", "0",
                   "alive"]


def test_raw_writes_next_to_a_host_block_are_refused():
    """Issue 16 (11): memset(p - 1024, ...) next to a malloc_host block returned 0 and
    corrupted the interpreter's heap (a crash later). Now each block has guard pages, and the
    simulator's own storage around it is refused."""
    out = isolated("""
        p, _ = acl.rt.malloc_host(64)
        ctypes.memset(p, 9, 64)
        print(acl.rt.memset(p - 1024, 1024, 0, 1024))       # the guard page before it
        print(acl.rt.memset(p - 1, 2, 0, 2))
        print(acl.rt.memset(p + 64, 64, 0, 64))             # past the block, in its slack
        print(acl.rt.memcpy(p + 4096, 64, dev, 64, 2))      # the guard page after it
        print(acl.rt.memcpy(dev, 64, p + 128, 64, 1))       # reading the slack too
        print("simulator keeps" in acl.get_recent_err_msg())
        print(ctypes.string_at(p, 64) == b"\\x09" * 64)
        for _ in range(100):                                # the heap is intact
            q, _ = acl.rt.malloc_host(100)
            acl.rt.free_host(q)
        acl.rt.free_host(p)
        print("alive")
    """)
    assert out == ["107000"] * 5 + ["True", "True", "alive"]


@pytest.fixture
def rt():
    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer=Sanitizer(output=None)) as runtime:
        runtime.set_device(0)
        yield runtime


def test_ptr_to_bytes_and_ptr_to_numpy_refuse_an_interpreter_address(rt):
    """Issue 16 (11): id(x) gave the object's bytes, and ptr_to_numpy a writable view of
    them; the docstrings promise InvalidPointer outside host blocks and registered buffers."""
    x = [1, 2, 3]
    for call in (lambda: acl.util.ptr_to_bytes(id(x), 16),
                 lambda: acl.util.ptr_to_numpy(id(x), (16,), 2)):
        with pytest.raises(InvalidPointer, match="not in a live aclrtMallocHost block") as e:
            call()
        assert e.value.code == 107000
    assert [r.kind for r in rt.sanitizer.reports] == ["invalid-address"] * 2
    assert x == [1, 2, 3]


def test_anonymous_memory_is_reached_directly_and_file_mappings_through_proc_mem(tmp_path):
    """A readable page of anonymous private memory is always backed (read directly, at full
    speed); a file mapping's page may be gone (reached through /proc/self/mem)."""
    import mmap

    import numpy as np

    array = np.ones(1 << 20, np.uint8)
    assert raw.mapping(array.ctypes.data, array.nbytes, True) == "anonymous"
    path = tmp_path / "f"
    path.write_bytes(b"x" * 8192)
    with open(path, "r+b") as f:
        m = mmap.mmap(f.fileno(), 8192)
        addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
        assert raw.mapping(addr, 8192, True) == "other"
        assert raw.mapping(addr - 1, 2, False) in (None, "other")
    code = ctypes.cast(ctypes.pythonapi.Py_IncRef, ctypes.c_void_p).value
    assert raw.mapping(code, 1, False) == "other" and raw.mapping(code, 1, True) is None


def test_a_raw_copy_still_works_both_ways(rt):
    import numpy as np

    dev, _ = acl.rt.malloc(4096, 0)
    src = np.arange(1024, dtype=np.int32)
    assert acl.rt.memcpy(dev, 4096, src.ctypes.data, 4096, 1) == 0
    out = np.zeros(1024, np.int32)
    assert acl.rt.memcpy(out.ctypes.data, 4096, dev, 4096, 2) == 0
    assert acl.rt.memset(out.ctypes.data + 8, 4, 1, 4) == 0
    assert (out[:2] == [0, 1]).all() and out[2] == 0x01010101 and (out[3:] == src[3:]).all()
    acl.rt.free(dev)


def test_malloc_host_of_4_gib_fills_nothing_until_touched(rt):
    """Issue 16 (16): malloc_host(2**32) wrote its poison over all 4 GiB inside one call.
    Now no page of it is touched by the call; the pages a simulated call first touches are
    poisoned then (so reading them unwritten is still reported), and what ctypes wrote
    before is kept."""
    try:
        p = rt.malloc_host(4 * GiB)
    except OutOfHostMemory:
        pytest.skip("the host may not map 4 GiB here")
    if raw.untouched(p, 1) is None:
        pytest.skip("/proc/self/pagemap cannot be read here")
    assert raw.untouched(p, 4 * GiB) == [(p, p + 4 * GiB)]
    assert ctypes.string_at(p + 3 * GiB, 8) == bytes(8)   # untouched pages read as zeros
    dev, _ = acl.rt.malloc(64, 0)
    ctypes.memmove(p + GiB, b"\x00" * 32 + b"d" * 32, 64)
    assert acl.rt.memcpy(dev, 64, p + GiB, 64, 1) == 0     # ctypes wrote it: no report
    assert rt.sanitizer.reports == []
    assert acl.rt.memcpy(dev, 64, p + 2 * GiB, 64, 1) == 0  # nobody did: reported
    assert [r.kind for r in rt.sanitizer.reports] == ["uninitialized-read"]
    assert acl.util.ptr_to_bytes(p + GiB, 64) == b"\x00" * 32 + b"d" * 32
    touched = 4 * GiB - sum(b - a for a, b in raw.untouched(p, 4 * GiB))
    assert touched <= 4 * raw.PAGE
    acl.rt.free(dev)
    rt.free_host(p)


def test_a_copy_into_a_lazily_poisoned_block_poisons_only_the_pages_it_half_covers(rt):
    """The pages a copy covers whole count as written at once (no poison needed); the bytes
    around it in its end pages get the poison, so reading them is still reported."""
    try:
        p = rt.malloc_host(64 * MiB)
    except OutOfHostMemory:
        pytest.skip("the host may not map 64 MiB here")
    if raw.untouched(p, 1) is None:
        pytest.skip("/proc/self/pagemap cannot be read here")
    page = raw.PAGE
    count = 3 * page
    dev, _ = acl.rt.malloc(count, 0)
    acl.rt.memset(dev, count, 5, count)
    assert acl.rt.memcpy(p + 100, count, dev, count, 2) == 0
    assert ctypes.string_at(p + 100, count) == b"\x05" * count
    assert ctypes.string_at(p, 100) != bytes(100)              # poisoned: half covered
    assert ctypes.string_at(p + 100 + count, 64) != bytes(64)
    assert rt.sanitizer.reports == []
    assert acl.rt.memcpy(dev, 64, p + 100 + count, 64, 1) == 0
    assert acl.rt.memcpy(dev, 100, p, 100, 1) == 0
    assert [r.kind for r in rt.sanitizer.reports] == ["uninitialized-read"] * 2
    assert raw.untouched(p + 5 * page, page) == [(p + 5 * page, p + 6 * page)]
    assert acl.rt.memset(p + 8 * page, 2 * page, 1, 2 * page) == 0   # whole pages only
    assert ctypes.string_at(p + 8 * page, 2 * page) == b"\x01" * 2 * page
    acl.rt.free(dev)
    rt.free_host(p)
