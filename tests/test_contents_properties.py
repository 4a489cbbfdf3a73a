"""Property: across random copies and memsets, memory reads back what a bytearray model holds."""

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from ascend_memsim import InvalidPointer, MiB, Runtime
from ascend_memsim.data.contents import Contents

# Regions: (kind, size). Sizes straddle the 64-byte granule and the DENSE/chunk split is
# covered by the Contents test below with a tiny chunk-sized block.
REGIONS = [("device", 100), ("device", 4096), ("device", 3 * 65536 + 5), ("host", 77),
           ("host", 5000), ("buffer", 300), ("bytes", 257)]


def _offset_and_count(draw, size):
    offset = draw(st.integers(0, size - 1))
    count = draw(st.integers(1, size - offset))
    return offset, count


@st.composite
def operations(draw):
    ops = []
    for _ in range(draw(st.integers(1, 12))):
        if draw(st.booleans()):
            region = draw(st.integers(0, len(REGIONS) - 1))
            offset, count = _offset_and_count(draw, REGIONS[region][1])
            ops.append(("memset", region, offset, count, draw(st.integers(-300, 300))))
        else:
            src = draw(st.integers(0, len(REGIONS) - 1))
            dst = draw(st.integers(0, len(REGIONS) - 1))
            src_off = draw(st.integers(0, REGIONS[src][1] - 1))
            dst_off = draw(st.integers(0, REGIONS[dst][1] - 1))
            count = draw(st.integers(1, min(REGIONS[src][1] - src_off,
                                            REGIONS[dst][1] - dst_off)))
            ops.append(("memcpy", dst, dst_off, src, src_off, count))
    return ops


@given(operations())
@example([("memcpy", 2, 65530, 2, 0, 70000)])
def test_memory_reads_back_the_model(ops):
    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer="off") as rt:
        rt.set_device(0)
        model = []
        ptrs = []
        keep = []
        for kind, size in REGIONS:
            initial = bytes((i * 7 + size) & 0xFF for i in range(size))
            model.append(bytearray(initial))
            if kind == "device":
                ptr = rt.malloc(size)
                staging = bytearray(initial)
                keep.append(staging)
                rt.memcpy(ptr, size, rt.host.register(staging).ptr, size, 1)
            elif kind == "host":
                ptr = rt.malloc_host(size)
                staging = bytearray(initial)
                keep.append(staging)
                rt.memcpy(ptr, size, rt.host.register(staging).ptr, size, 0)
            elif kind == "buffer":
                buf = bytearray(initial)
                keep.append(buf)
                ptr = rt.host.register(buf).ptr
            else:
                buf = bytes(initial)
                keep.append(buf)
                ptr = rt.host.register(buf).ptr
            ptrs.append(ptr)
        for op in ops:
            if op[0] == "memset":
                _, region, offset, count, value = op
                rt.memset(ptrs[region] + offset, count, value, count)
                model[region][offset:offset + count] = bytes((value & 0xFF,)) * count
            else:
                _, dst, dst_off, src, src_off, count = op
                rt.memcpy(ptrs[dst] + dst_off, count, ptrs[src] + src_off, count, 4)
                model[dst][dst_off:dst_off + count] = bytes(model[src][src_off:src_off + count])
        for (kind, size), ptr, expected in zip(REGIONS, ptrs, model, strict=True):
            out = bytearray(size)
            rt.memcpy(rt.host.register(out).ptr, size, ptr, size, 2)
            assert out == expected, kind
        # The bytes object was written in place, through its registration.
        assert keep[-1] == model[-1] and REGIONS[-1][0] == "bytes"
        del keep


@given(st.lists(st.tuples(st.sampled_from(["fill", "write", "copy"]), st.integers(0, 2000),
                          st.integers(1, 700), st.integers(0, 255)), max_size=20))
@example([("write", 0, 700, 1), ("copy", 10, 700, 0)])  # overlapping, dst after src
@example([("write", 300, 700, 1), ("copy", 0, 700, 44)])  # overlapping, dst before src
def test_chunked_contents_match_a_bytearray(ops):
    """Chunk boundaries: a block above the dense limit, with the chunk size shrunk to 512.

    A copy moves ``count`` bytes from ``offset`` to ``offset + value * 3 - 383`` (clamped):
    forwards and backwards, overlapping or not, across chunk edges; memmove semantics.
    """
    contents = Contents(2600)
    contents.shift = 9
    model = bytearray(2600)
    written = bytearray(2600)
    for kind, offset, count, value in ops:
        count = min(count, 2600 - offset)
        if kind == "copy":
            dst = min(max(0, offset + value * 3 - 383), 2600 - count)
            contents.copy_from(contents, offset, dst, count)
            model[dst:dst + count] = model[offset:offset + count]
            offset = dst
        elif kind == "fill":
            contents.fill(offset, count, value)
            model[offset:offset + count] = bytes((value,)) * count
        else:
            data = bytes((value + i) & 0xFF for i in range(count))
            contents.write(offset, memoryview(data))
            model[offset:offset + count] = data
        written[offset:offset + count] = b"\1" * count
    assert contents.read(0, 2600) == model
    gap = contents.written.first_gap(0, 2600)
    first_unwritten = written.find(0)
    if first_unwritten < 0:
        assert gap is None
    else:
        assert gap[0] == first_unwritten


def test_a_copy_that_does_not_fit_changes_nothing():
    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer="off") as rt:
        rt.set_device(0)
        ptr = rt.malloc(100)
        rt.memset(ptr, 100, 1, 100)
        host = rt.malloc_host(1000)
        rt.memset(host, 1000, 2, 1000)
        with pytest.raises(InvalidPointer):
            rt.memcpy(ptr, 1000, host, 1000, 1)
        out = bytearray(100)
        rt.memcpy(rt.host.register(out).ptr, 100, ptr, 100, 2)
        assert out == b"\1" * 100
