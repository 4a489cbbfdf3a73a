"""Properties of the 2D and batch copies against a naive model (a bytearray per block)."""

import ctypes

from hypothesis import given
from hypothesis import strategies as st

from ascend_memsim import MiB, Runtime, acl

H2D, D2H = acl.ACL_MEMCPY_HOST_TO_DEVICE, acl.ACL_MEMCPY_DEVICE_TO_HOST
TO_DEVICE = {"dstLoc": {"id": 0, "type": 1}, "srcLoc": {"id": 0, "type": 0}}
BLOCK = 256          # bytes asked; on A2 the footprint is 320 (rule size 288, 64-byte pages)


def _read(ptr, count):
    out, _ = acl.rt.malloc_host(count)
    assert acl.rt.memcpy(out, count, ptr, count, D2H) == 0
    data = acl.util.ptr_to_bytes(out, count)
    acl.rt.free_host(out)
    return data


@given(width=st.integers(1, 24), height=st.integers(1, 12), spitch_extra=st.integers(0, 8),
       dpitch_extra=st.integers(0, 40), offset=st.integers(0, 64), data=st.data())
def test_memcpy2d_matches_the_model_or_changes_nothing(width, height, spitch_extra,
                                                       dpitch_extra, offset, data):
    spitch, dpitch = width + spitch_extra, width + dpitch_extra
    source = data.draw(st.binary(min_size=spitch * height, max_size=spitch * height))
    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer="off") as rt:
        acl.init()
        acl.rt.set_device(0)
        dev, _ = acl.rt.malloc(BLOCK, 0)
        footprint = rt.block(dev).footprint
        assert footprint == 320
        assert acl.rt.memset(dev, BLOCK, 0xEE, BLOCK) == 0
        src, _ = acl.rt.malloc_host(len(source))
        ctypes.memmove(src, source, len(source))
        code = acl.rt.memcpy2d(dev + offset, dpitch, src, spitch, width, height, H2D)
        model = bytearray(b"\xee" * BLOCK)
        if offset + (height - 1) * dpitch + width <= footprint:
            assert code == 0
            for row in range(height):
                at = offset + row * dpitch
                piece = source[row * spitch:row * spitch + width]
                model[at:at + width] = piece[:max(0, min(width, BLOCK - at))]
        else:
            assert code == acl.ACL_ERROR_RT_PARAM_INVALID
        assert _read(dev, BLOCK) == bytes(model)
        acl.finalize()


@given(sizes=st.lists(st.integers(0, 96), min_size=1, max_size=6), data=st.data())
def test_a_batch_moves_every_entry_or_none(sizes, data):
    """The fail index is the first bad entry (one running past its block's footprint)."""
    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer="off") as rt:
        acl.init()
        acl.rt.set_device(0)
        blocks = [acl.rt.malloc(64, 0)[0] for _ in sizes]
        assert {rt.block(b).footprint for b in blocks} == {128}
        for block in blocks:
            assert acl.rt.memset(block, 64, 0, 64) == 0
        src, _ = acl.rt.malloc_host(128)
        ctypes.memmove(src, bytes(range(128)), 128)
        offsets = [data.draw(st.integers(0, 64)) for _ in sizes]
        dsts = [b + o for b, o in zip(blocks, offsets, strict=True)]
        bad = [i for i, (o, n) in enumerate(zip(offsets, sizes, strict=True)) if n and o + n > 128]
        got = acl.rt.memcpy_batch(dsts, [128] * len(sizes), [src] * len(sizes), sizes,
                                  len(sizes), [TO_DEVICE], [0], 1)
        if not any(sizes):
            assert got == (2**64 - 1, 0)
        elif bad:
            assert got == (bad[0], acl.ACL_ERROR_RT_PARAM_INVALID)
        else:
            assert got == (2**64 - 1, 0)
        for block, offset, size in zip(blocks, offsets, sizes, strict=True):
            expected = bytearray(64)
            if not bad and size:
                end = min(64, offset + size)
                if offset < 64:
                    expected[offset:end] = bytes(range(end - offset))
            assert _read(block, 64) == bytes(expected)
        acl.finalize()
