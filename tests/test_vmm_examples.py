"""The virtual-memory programs: the vendor's physical-memory sample and torch_npu's
expandable segment, with exact memory figures at every step on A2, A3 and 950PR."""

import importlib.util
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import ascend_memsim.acl as acl
from ascend_memsim import MiB, Runtime

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _example(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "examples",
                                                                      f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# hicann/runtime example/1_basic_features/memory/8_physical_memory_sharing_withoutpid/README.md,
# 示例输出 (process A, then B; "..." stands for an address or handle)
VENDOR_LINES = [
    "[INFO]  Process A: allocate physical memory successfully",
    "[INFO]  Process A: reserve virtual memory successfully",
    "Source data: 123",
    "[INFO]  Process B: map virtual memory address to physical memory handle",
    "[INFO]  Process B: copy memory from device address 0x... to host address 0x...",
    "[INFO]  Destination data: 123",
    "[INFO]  Process B: complete the physical memory sharing",
    "[INFO]  Process B: release the virtual and physical memory successfully",
    "[INFO]  Process A: release the virtual and physical memory successfully",
]


def test_vendor_physical_memory_sample_prints_what_the_sample_prints():
    env = dict(os.environ, PYTHONPATH=ROOT)
    done = subprocess.run([sys.executable, os.path.join(ROOT, "examples",
                                                        "vmm_physical_memory.py")],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = [re.sub(r"0x[0-9a-f]+", "0x...", line) for line in done.stdout.splitlines()]
    # the vendor's lines appear in order (the sample logs a few more of its own)
    it = iter(lines)
    assert all(any(line == want for line in it) for want in VENDOR_LINES), lines
    # the sample reads a whole granule of which it wrote one int: the sanitizer says so
    assert done.stderr.count("[uninitialized-read]") == 1, done.stderr
    assert "bytes [4, 2097152)" in done.stderr


@pytest.fixture(params=["A2", "A3", "950PR"])
def product(request):
    with Runtime(request.param, hbm_bytes=256 * MiB, device_count=2) as rt:
        assert acl.rt.set_device(0) == 0
        yield rt


def _figures():
    free, total, ret = acl.rt.get_mem_info(acl.ACL_HBM_MEM)
    assert ret == 0
    return free, total


def _write(ptr, size, seed):
    pattern = bytes(range(251))
    data = (pattern[seed % 251:] + pattern[:seed % 251]) * (size // 251 + 1)
    data = data[:size]
    assert acl.rt.memcpy(ptr, size, acl.util.bytes_to_ptr(data), size, 1) == 0
    return data


def _read(ptr, size):
    out = np.zeros(size, np.uint8)
    assert acl.rt.memcpy(acl.util.numpy_to_ptr(out), size, ptr, size, 2) == 0
    return out.tobytes()


def _state(rt):
    space = rt.vmm.space
    return (_figures(), sorted((r.ptr, tuple(r.maps)) for r in space.reservations.values()),
            sorted((h.handle, h.refs, tuple(sorted(h.maps))) for h in space.handles.values()))


def _refused(rt, code, call, *args):
    before = _state(rt)
    assert call(*args) == code, acl.get_recent_err_msg()
    assert _state(rt) == before


def test_expandable_segment(product):
    rt = product
    mod = _example("vmm_expandable_segment")
    seg = mod.K_LARGE_BUFFER
    free0, total = _figures()
    assert free0 == total
    segment = mod.ExpandableSegment(0)
    # 1 1/8 of the device's memory in address space, and not a byte of memory
    assert segment.max_handles == -(-(total + total // 8) // seg)
    assert _figures() == (free0, total)
    arena = mod.TensorArena(segment)

    def expect_mapped(n):
        assert segment.mapped_bytes == n * seg
        assert _figures() == (total - n * seg, total)
        usage, ret = acl.rt.get_mem_usage_info(0, 4)
        if ret == 0:  # 950PR has no usage info
            assert usage[0].cur_mem_size == n * seg

    # tensors grow: 30 MiB needs two segments, 50 MiB straddles into a fourth
    t1 = arena.grow(30 * MiB)
    d1 = _write(t1, 30 * MiB, 1)
    expect_mapped(2)
    t2 = arena.grow(50 * MiB)
    d2 = _write(t2, 50 * MiB, 2)
    expect_mapped(4)
    # misuse in the middle: each refused, nothing changed
    space = rt.vmm.space
    h0 = segment.handles[0]
    _refused(rt, acl.ACL_ERROR_RT_PARAM_INVALID, acl.rt.unmap_mem, segment.ptr + 10 * seg)
    _refused(rt, acl.ACL_ERROR_RT_PARAM_INVALID, acl.rt.map_mem, segment.ptr, seg, 0, h0, 0)
    _refused(rt, acl.ACL_ERROR_RT_PARAM_INVALID, acl.rt.release_mem_address, segment.ptr)
    _refused(rt, acl.ACL_ERROR_RT_PARAM_INVALID, acl.rt.map_mem, segment.ptr + 10 * seg,
             seg - 2 * MiB, 0, h0, 0)
    _refused(rt, acl.ACL_ERROR_RT_PARAM_INVALID, acl.rt.map_mem, segment.ptr + 10 * seg, seg,
             2 * MiB, h0, 0)
    foreign, ret = acl.rt.malloc_physical(seg, segment._prop() | {"location": {"id": 1,
                                                                             "type": 1}}, 0)
    assert ret == 0
    _refused(rt, acl.ACL_ERROR_RT_PARAM_INVALID, acl.rt.map_mem, segment.ptr + 10 * seg, seg,
             0, foreign, 0)
    assert acl.rt.free_physical(foreign) == 0
    space.check_invariants()

    # grow until the device is full: 256 MiB hold 12 segments
    n_max = total // seg
    tensors = [(t1, d1), (t2, d2)]
    while segment.mapped_bytes + seg <= n_max * seg:
        ptr = arena.grow(15 * MiB)
        tensors.append((ptr, _write(ptr, 15 * MiB, len(tensors))))
    mapped = segment.mapped_bytes // seg
    expect_mapped(mapped)
    assert mapped == n_max
    # the next tensor does not fit: the oldest are dropped, their whole segments unmapped
    ptr = arena.grow(40 * MiB)
    data = _write(ptr, 40 * MiB, 99)
    dropped = len(tensors) + 1 - len(arena.tensors)
    assert dropped >= 2
    expect_mapped(segment.mapped_bytes // seg)
    assert segment.mapped_bytes // seg <= n_max
    # the surviving tensors' bytes are intact across the unmapping of other segments
    for (tptr, tdata) in tensors[dropped:]:
        assert _read(tptr, len(tdata)) == tdata
    assert _read(ptr, 40 * MiB) == data
    # a dropped tensor's first segment is gone: reading it is refused
    assert acl.rt.memcpy(acl.util.numpy_to_ptr(np.zeros(16, np.uint8)), 16, t1, 16, 2) == \
        acl.ACL_ERROR_RT_PARAM_INVALID
    for device in rt.devices():
        device.check_invariants()
    space.check_invariants()

    segment.close()
    assert _figures() == (total, total)
    assert not space.reservations and not space.handles


def test_demo_runs():
    env = dict(os.environ, PYTHONPATH=ROOT)
    done = subprocess.run([sys.executable, os.path.join(ROOT, "examples",
                                                        "vmm_expandable_segment.py")],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "after close: device free" in done.stdout
    assert done.stderr == ""
