"""Property: for random products, formats and sizes, the buffer the rules say to allocate
holds everything the VPC writes, and a buffer one byte short is refused."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from media_helpers import m, pic_desc, put, read
from memory_sizes import capacity

import ascend_memsim.acl as acl
from ascend_memsim import MiB, Runtime, Sanitizer
from ascend_memsim.media.descs import PicDesc
from ascend_memsim.media.rules import LAYOUTS, check_picture, picture_size, strides_for, vpc_rules

GUARD = 64
SENTINEL = 0x5A


@st.composite
def cases(draw):
    product = draw(st.sampled_from(["A2", "310P", "950PR"]))
    rules = vpc_rules(Runtime(product).profile)
    src_fmt = draw(st.sampled_from(sorted(LAYOUTS)))
    dst_fmt = draw(st.sampled_from(sorted(rules.out_formats)))

    def side(lo, hi, even):
        value = draw(st.integers(lo, hi))
        return value + 1 if even and value % 2 else value

    src_l, dst_l = LAYOUTS[src_fmt], LAYOUTS[dst_fmt]
    # an input's height may be odd (see rules.check_picture's DECISION)
    sw, sh = side(10, 72, src_l.even_width), side(6, 48, False)
    dw, dh = side(10, 72, dst_l.even_width), side(6, 48, dst_l.even_height)
    interpolation = draw(st.sampled_from(sorted(rules.interpolations)))

    def area(width, height, left_align):
        """(left, right, top, bottom): left/top even (left a multiple of left_align), right
        and bottom odd, at least 10x6, inside width x height; or None (the whole picture)."""
        if not draw(st.booleans()):
            return None
        left = draw(st.integers(0, (width - 10) // left_align)) * left_align
        top = draw(st.integers(0, (height - 6) // 2)) * 2
        w = draw(st.integers(5, (width - left) // 2)) * 2
        h = draw(st.integers(3, (height - top) // 2)) * 2
        return left, left + w - 1, top, top + h - 1

    crop = area(sw, sh, 2)
    paste = area(dw, dh, rules.paste_left_align)
    return product, src_fmt, (sw, sh), dst_fmt, (dw, dh), interpolation, crop, paste


@given(cases(), st.integers(0, 2**32 - 1))
def test_what_the_vpc_writes_stays_in_the_buffer_the_rules_give(case, seed):
    product, src_fmt, (sw, sh), dst_fmt, (dw, dh), interpolation, crop, paste = case
    with Runtime(product, **capacity(product, 64 * MiB, ddr=64 * MiB),
                 sanitizer=Sanitizer(output=None)) as rt:
        rt.set_device(0)
        rules = vpc_rules(rt.profile)
        channel = m.dvpp_create_channel_desc()
        assert m.dvpp_create_channel(channel) == 0
        config = m.dvpp_create_resize_config()
        assert m.dvpp_set_resize_config_interpolation(config, interpolation) == 0
        ws, hs, size = strides_for(rules, src_fmt, sw, sh)
        assert size == picture_size(rules, src_fmt, ws, hs)
        raw = np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8).tobytes()
        src = pic_desc(put(rt, raw), size, src_fmt, sw, sh, ws, hs)
        ows, ohs, osize = strides_for(rules, dst_fmt, dw, dh)
        # the strides the rules give pass the rules
        check_picture(rules, PicDesc(data=1, size=osize, format=dst_fmt, width=dw, height=dh,
                                     width_stride=ows, height_stride=ohs), "out", True, "t")
        out, ret = m.dvpp_malloc(osize + GUARD)
        assert ret == 0
        assert acl.rt.memset(out, osize + GUARD, SENTINEL, osize + GUARD) == 0
        dst = pic_desc(out, osize, dst_fmt, dw, dh, ows, ohs)
        # a resize, or a crop-resize-paste of random areas (the whole picture when None)
        crop_roi = m.dvpp_create_roi_config(*(crop or (0, sw // 2 * 2 - 1, 0, sh // 2 * 2 - 1)))
        paste_roi = m.dvpp_create_roi_config(*(paste or (0, dw // 2 * 2 - 1, 0,
                                                         dh // 2 * 2 - 1)))
        if crop is None and paste is None:
            ret = m.dvpp_vpc_resize_async(channel, src, dst, config, 0)
        else:
            ret = m.dvpp_vpc_crop_resize_paste_async(channel, src, dst, crop_roi, paste_roi,
                                                     config, 0)
        assert ret == 0, acl.get_recent_err_msg()
        assert acl.rt.synchronize_device() == 0
        assert (read(rt, out + osize, GUARD) == SENTINEL).all()
        assert rt.sanitizer.reports == []

        # one byte short: the buffer, then the declared size
        short, ret = m.dvpp_malloc(osize - 1)
        assert ret == 0
        pic_desc(short, osize, dst_fmt, dw, dh, ows, ohs, dst)
        assert m.dvpp_vpc_resize_async(channel, src, dst, config, 0) == 100000
        assert [r.kind for r in rt.sanitizer.reports] == ["media-overflow"]
        assert m.dvpp_set_pic_desc_size(dst, osize - 1) == 0
        assert m.dvpp_vpc_resize_async(channel, src, dst, config, 0) == 100000
        assert "below the" in acl.get_recent_err_msg()
