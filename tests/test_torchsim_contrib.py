"""The stand-in ``torch_npu.contrib`` (torchsim/torch_npu/contrib/): every public name of
torch_npu 2.14.0's contrib is there in an estimate; each module's parameters and each
piece's outputs have torch_npu's shapes and dtypes (read from the wheel's
``torch_npu/contrib/module/*.py``, ``function/*.py`` and op-plugin's kernels); the graphs
keep what torch_npu's keep; the state made ahead (dropout masks, roll indices) is held as
on the machine and forgotten with the estimate; and a training step's peak, by hand.

Figures by hand: torch_npu's caching allocator makes each storage a block of its bytes + 32,
rounded up to 512 (:func:`block`); ``workspace=False`` throughout (contrib's own operators
take none)."""

import json
import math
import os
import warnings

import pytest

torch = pytest.importorskip("torch", reason="torchsim runs scripts on torch's fake tensors; "
                                           "install the torch extra: pip install -e '.[torch]'")

from test_torchsim_host import _run  # noqa: E402  (one estimate of a function, checked to run)

from ascend_memsim.torchsim.torch_npu._missing import NotModelled  # noqa: E402

SURFACE = os.path.join(os.path.dirname(__file__), "data", "torch_npu_surface.json")
F16, F32, I8, I32, I64, U8 = (torch.float16, torch.float32, torch.int8, torch.int32,
                              torch.int64, torch.uint8)


def block(nbytes: int) -> int:
    """A storage's block on A2: the +32 pad, then 512-byte steps."""
    return -(-(nbytes + 32) // 512) * 512 if nbytes else 0


def blocks(*outs) -> int:
    """The blocks of tensors given as (shape, dtype)."""
    return sum(block(math.prod(shape) * dtype.itemsize) for shape, dtype in outs)


def allocated() -> int:
    return torch.npu.memory_allocated()


def t(*shape, dtype=F32, grad=False):
    return torch.empty(shape, dtype=dtype, device="npu", requires_grad=grad)


def sd(x) -> tuple:
    return tuple(x.shape), x.dtype


def test_every_public_name_of_contrib_is_there_and_the_others_say_they_are_not():
    with open(SURFACE, encoding="utf-8") as f:
        names = json.load(f)["modules"]["torch_npu.contrib"]
    assert len(names) == 26

    def script(out):
        import torch_npu
        import torch_npu.contrib
        from torch_npu.contrib.function import roll
        from torch_npu.contrib.module import ROIAlign
        from torch_npu.contrib.module.multihead_attention import _MHAConfig

        contrib = torch_npu.contrib
        out["missing"] = [n for n in names if not hasattr(contrib, n)]
        out["all"] = sorted(contrib.__all__)
        out["same"] = (ROIAlign is contrib.ROIAlign, roll is contrib.roll,
                       contrib.NpuFairseqDropout is contrib.NpuCachedDropout,
                       _MHAConfig.use_fussion_mha)
        # imported by torch_npu's contrib but not modelled: a probe answers False, a use
        # says which name
        out["iou"] = hasattr(contrib, "npu_iou")
        try:
            getattr(contrib, "Mish")  # noqa: B009  (the access is the point)
        except NotModelled as e:
            out["message"] = str(e)

    out, _ = _run(script)
    assert out["missing"] == [] and out["all"] == sorted(names)
    assert out["same"] == (True, True, True, False)
    assert not out["iou"]
    assert "torch_npu.contrib.Mish is not modelled" in out["message"]


def test_each_modules_parameters_are_torch_npus_and_cost_their_blocks():
    """The parameters and buffers each module makes (their names, shapes, dtypes) and the
    device memory ``.npu()`` takes for them."""
    seen = {}

    def script(out):
        from torch_npu.contrib import (
            ChannelShuffle,
            Focus,
            LabelSmoothingCrossEntropy,
            LinearA8W8Quant,
            LinearQuant,
            LinearWeightQuant,
            ModulatedDeformConv,
            MultiheadAttention,
            NpuCachedDropout,
            NpuDropPath,
            PSROIPool,
            ROIAlign,
        )
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            makers = {
                "LinearQuant": lambda: LinearQuant(1024, 512, offset=True),
                "LinearA8W8Quant": lambda: LinearA8W8Quant(1024, 512, bias=False,
                                                           pertoken_scale=True),
                "LinearWeightQuant": lambda: LinearWeightQuant(
                    1024, 512, antiquant_offset=True, quant_scale=True, quant_offset=True),
                "MultiheadAttention": lambda: MultiheadAttention(1024, 16, kdim=512,
                                                                 add_bias_kv=True),
                "ModulatedDeformConv": lambda: ModulatedDeformConv(32, 64, 3, padding=1),
                "Focus": lambda: Focus(8, 16, k=3),
                "ChannelShuffle": lambda: ChannelShuffle(64),
                "ROIAlign": lambda: ROIAlign((7, 7), 1 / 16, 2),
                "PSROIPool": lambda: PSROIPool(),
                "LabelSmoothingCrossEntropy": lambda: LabelSmoothingCrossEntropy(10, 0.1),
                "NpuCachedDropout": lambda: NpuCachedDropout(0.1),
                "NpuDropPath": lambda: NpuDropPath(0.1),
            }
            for name, make in makers.items():
                before = allocated()
                module = make().npu()
                out[name] = (allocated() - before, {
                    n: sd(p) for n, p in [*module.named_parameters(), *module.named_buffers()]})
                out[name + ".grad"] = {n: p.requires_grad for n, p in module.named_parameters()}
                if name == "LinearQuant":
                    # the quantised weight put in, as torch_npu's examples do: the float32
                    # one is freed
                    before = allocated()
                    module.weight.data = t(512, 1024, dtype=I8)
                    out["int8 weight"] = allocated() - before
                del module
        out["warned"] = [str(w.message) for w in caught
                         if issubclass(w.category, FutureWarning)]

    seen, _ = _run(script)
    v512 = ((512,), F32)
    w32 = ((512, 1024), F32)                               # 2 MiB in the default dtype
    assert seen["LinearQuant"] == (
        blocks(w32, v512, v512, ((512,), I32)),
        {"weight": w32, "scale": v512, "offset": v512, "bias": ((512,), I32)})
    assert not any(seen["LinearQuant.grad"].values())
    # 512 KiB of int8 in, 2 MiB of float32 out
    assert seen["int8 weight"] == block(512 * 1024) - block(512 * 1024 * 4)
    assert seen["LinearA8W8Quant"] == (
        blocks(w32, v512, v512), {"weight": w32, "scale": v512, "pertoken_scale": v512})
    assert seen["warned"] == ["torch_npu.contrib.module.LinearA8W8Quant is deprecated and will "
                              "be removed in a future version. Use torch_npu.contrib.module."
                              "LinearQuant instead."]
    assert seen["LinearWeightQuant"] == (blocks(w32, *[v512] * 5), {
        "weight": w32, "antiquant_scale": v512, "antiquant_offset": v512,
        "quant_scale": v512, "quant_offset": v512, "bias": v512})
    # four projections (k from kdim 512), their biases and bias_k, bias_v (1, 1, 1024)
    e = ((1024,), F32)
    mha = {"bias_k": ((1, 1, 1024), F32), "bias_v": ((1, 1, 1024), F32),
           "k_proj.weight": ((1024, 512), F32), "k_proj.bias": e,
           **{f"{p}.weight": ((1024, 1024), F32) for p in ("v_proj", "q_proj", "out_proj")},
           **{f"{p}.bias": e for p in ("v_proj", "q_proj", "out_proj")}}
    assert seen["MultiheadAttention"] == (blocks(*mha.values()), mha)
    assert all(seen["MultiheadAttention.grad"].values())
    # weight (64, 32, 3, 3), bias (64,), the offset convolution 3 * 3 * 3 = 27 channels
    dcn = {"weight": ((64, 32, 3, 3), F32), "bias": ((64,), F32),
           "conv_offset.weight": ((27, 32, 3, 3), F32), "conv_offset.bias": ((27,), F32)}
    assert seen["ModulatedDeformConv"] == (blocks(*dcn.values()), dcn)
    # Conv2d (16, 4 * 8, 3, 3) without bias, BatchNorm2d (16) and its buffers
    focus = {"conv.conv.weight": ((16, 32, 3, 3), F32), "conv.bn.weight": ((16,), F32),
             "conv.bn.bias": ((16,), F32), "conv.bn.running_mean": ((16,), F32),
             "conv.bn.running_var": ((16,), F32), "conv.bn.num_batches_tracked": ((), I64)}
    assert seen["Focus"] == (blocks(*focus.values()), focus)
    for name in ("ChannelShuffle", "ROIAlign", "PSROIPool", "LabelSmoothingCrossEntropy",
                 "NpuCachedDropout", "NpuDropPath"):
        assert seen[name] == (0, {}), name


def test_outputs_have_the_shapes_and_dtypes_of_torch_npus_code():
    def script(out):
        import torch_npu  # noqa: F401
        from torch_npu.contrib import (
            ChannelShuffle,
            Focus,
            LabelSmoothingCrossEntropy,
            LinearA8W8Quant,
            LinearQuant,
            LinearWeightQuant,
            ModulatedDeformConv,
            MultiheadAttention,
            PSROIPool,
            ROIAlign,
            fuse_add_softmax_dropout,
            matmul_transpose,
            npu_batched_multiclass_nms,
            npu_bbox_coder_decode_xywh2xyxy,
            npu_bbox_coder_encode_xyxy2xywh,
            npu_bbox_coder_encode_yolo,
            npu_fast_condition_index_put,
            npu_fused_attention,
            npu_fused_attention_with_layernorm,
            npu_multiclass_nms,
            npu_single_level_responsible_flags,
            roll,
        )
        from torch_npu.contrib.module.multihead_attention import _MHAConfig

        x1, x2 = t(2, 32, 7, 7), t(2, 32, 7, 7)
        out["shuffle"] = [sd(o) for o in ChannelShuffle(64).npu()(x1, x2)]
        out["shuffle_full"] = sd(ChannelShuffle(64, split_shuffle=False).npu()(x1, x2))
        out["focus"] = sd(Focus(8, 16, k=3).npu()(t(4, 8, 32, 32)))
        out["lsce"] = sd(LabelSmoothingCrossEntropy(10, 0.1)(t(8, 10, dtype=F16),
                                                             t(8, dtype=I64)))
        quant = LinearQuant(64, 32).npu()
        quant.weight.data = t(32, 64, dtype=I8)
        out["quant"] = sd(quant(t(4, 64, dtype=I8)))
        half = LinearQuant(64, 32, output_dtype=F16).npu()
        half.weight.data = t(32, 64, dtype=I8)
        out["quant_f16"] = sd(half(t(4, 64, dtype=I8)))
        # A4W4: 8 int4 values in each int32, the weight (128, 8) is (128, 64) of int4
        a4w4 = LinearQuant(64, 128, bias=False).npu()
        a4w4.weight.data = t(128, 8, dtype=I32)
        out["quant_a4w4"] = sd(a4w4(t(1, 8, dtype=I32)))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            a8w8 = LinearA8W8Quant(64, 32).npu()
        a8w8.weight.data = t(32, 64, dtype=I8)
        out["a8w8"] = sd(a8w8(t(3, 4, 64, dtype=I8)))
        wq = LinearWeightQuant(64, 32).npu()
        wq.weight.data = t(32, 64, dtype=I8)
        out["weight_quant"] = sd(wq(t(4, 64, dtype=F16)))
        wq8 = LinearWeightQuant(64, 32, quant_scale=True).npu()
        wq8.weight.data = t(32, 64, dtype=I8)
        out["weight_quant_int8"] = sd(wq8(t(4, 64, dtype=F16)))
        out["dcn"] = sd(ModulatedDeformConv(8, 16, 3, padding=1).npu()(t(2, 8, 10, 10)))
        out["dcn_stride"] = sd(ModulatedDeformConv(8, 16, 3, stride=2, padding=1).npu()(
            t(2, 8, 10, 10)))
        roi = ROIAlign((7, 7), 1 / 16, 2)
        out["roi"] = sd(roi(t(2, 8, 32, 32, dtype=F16), t(5, 5)))
        out["roi_f16_rois"] = sd(roi(t(2, 8, 32, 32), t(5, 5, dtype=F16)))
        out["psroi"] = sd(PSROIPool()(t(2, 49 * 22, 32, 32), t(2, 5, 6)))
        mha = MultiheadAttention(256, 16).npu().half()
        x, mask = t(128, 256, dtype=F16), t(2, 1, 64, 64, dtype=F16)
        out["mha_off"] = mha(x, x, x, 2, 64, 64, mask)
        _MHAConfig.set_fussion()
        y, weights = mha(x, x, x, 2, 64, 64, mask)
        out["mha"] = (sd(y), weights)
        out["mt"] = sd(matmul_transpose(t(2, 4, 8, 16, dtype=F16), t(2, 4, 8, 16, dtype=F16)))
        out["roll"] = sd(roll(t(2, 8, 8, 4), (-3, -3), (1, 2)))
        out["nms"] = [sd(o) for o in npu_multiclass_nms(t(100, 4), t(100, 5))]
        out["nms_per_class"] = [sd(o) for o in npu_multiclass_nms(t(100, 4, 4), t(100, 5),
                                                                   max_num=20)]
        out["bnms"] = [sd(o) for o in npu_batched_multiclass_nms(t(2, 100, 4), t(2, 100, 5))]
        out["flags"] = sd(npu_single_level_responsible_flags((8, 8), t(5, 4, dtype=F16),
                                                             (16, 16), 3))
        boxes = t(5, 4, dtype=F16)
        out["yolo"] = sd(npu_bbox_coder_encode_yolo(boxes, boxes, t(5, dtype=I64)))
        out["encode"] = sd(npu_bbox_coder_encode_xyxy2xywh(boxes, boxes, is_normalized=True))
        out["decode"] = sd(npu_bbox_coder_decode_xywh2xyxy(boxes, boxes))
        out["index_put"] = sd(npu_fast_condition_index_put(boxes, t(5, 4, dtype=torch.bool),
                                                           2.0))
        drop = torch.nn.Dropout(0.1)
        out["fused_softmax"] = sd(fuse_add_softmax_dropout(
            True, drop, t(32, 1, 128, 128, dtype=F16), t(32, 1, 128, 128, dtype=F16), 64))
        out["plain_softmax"] = sd(fuse_add_softmax_dropout(
            True, drop, t(2, 1, 100, 100), t(2, 1, 100, 100), 64))
        hs, am = t(64, 768, dtype=F16), t(2, 1, 32, 32, dtype=F16)
        ks, bs = [t(768, 768, dtype=F16)] * 3, [t(768, dtype=F16)] * 3
        out["fa"] = sd(npu_fused_attention(hs, am, *ks, *bs))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out["fal"] = [sd(o) for o in npu_fused_attention_with_layernorm(
                hs, am, *ks, *bs, t(768, dtype=F16), t(768, dtype=F16))]
        out["fal_warned"] = [w.category for w in caught]

    out, _ = _run(script, workspace=False)
    assert out["shuffle"] == [((2, 32, 7, 7), F32)] * 2           # 64 channels / 2 groups
    assert out["shuffle_full"] == ((2, 64, 7, 7), F32)
    assert out["focus"] == ((4, 16, 16, 16), F32)                  # 32 / 2, k 3 padded by 1
    assert out["lsce"] == ((), F32)                                # mean(dtype=float32)
    assert out["quant"] == ((4, 32), I8)                           # npu_quant_matmul's int8
    assert out["quant_f16"] == ((4, 32), F16)
    assert out["quant_a4w4"] == ((1, 128), I8)
    assert out["a8w8"] == ((3, 4, 32), I8)
    assert out["weight_quant"] == ((4, 32), F16)                   # x's dtype
    assert out["weight_quant_int8"] == ((4, 32), I8)               # int8 with quant_scale
    assert out["dcn"] == ((2, 16, 10, 10), F32)
    assert out["dcn_stride"] == ((2, 16, 5, 5), F32)               # Ho, Wo of the offsets
    assert out["roi"] == ((5, 8, 7, 7), F32)                       # the features made float
    assert out["roi_f16_rois"] == ((5, 8, 7, 7), F16)              # cast back for f16 rois
    assert out["psroi"] == ((12, 22, 7, 7), F32)                   # 2 images x 6 rois
    assert out["mha_off"] == (None, None)                          # before set_fussion
    assert out["mha"] == (((128, 256), F16), None)
    assert out["mt"] == ((2, 4, 8, 8), F16)
    assert out["roll"] == ((2, 8, 8, 4), F32)
    # padded to max_num (50 by default) whatever the scores; float16 as the operator's
    assert out["nms"] == [((50, 5), F16), ((50,), F16)]
    assert out["nms_per_class"] == [((20, 5), F16), ((20,), F16)]
    assert out["bnms"] == [((2, 50, 5), F16), ((2, 50), F16)]
    assert out["flags"] == ((8 * 8 * 3,), U8)
    # the dtype checks always cast: float32 boxes in, float32 deltas out
    assert out["yolo"] == out["encode"] == out["decode"] == ((5, 4), F32)
    assert out["index_put"] == ((5, 4), F16)
    assert out["fused_softmax"] == ((32, 1, 128, 128), F16)
    assert out["plain_softmax"] == ((2, 1, 100, 100), F32)
    assert out["fa"] == ((64, 768), F16)
    assert out["fal"] == [((64, 768), F16), ((64, 768), F16)]
    assert out["fal_warned"] == [FutureWarning]


def _held(make, forward):
    """The bytes the graph and the result hold after ``forward(*make())`` beyond its
    inputs (which are kept by the script), and whether each input that needs one got a
    gradient."""
    def script(out):
        import torch_npu  # noqa: F401
        inputs = make()
        before = allocated()
        result = forward(*inputs)
        out["held"] = allocated() - before
        loss = result.float().sum() if not isinstance(result, tuple) else sum(
            r.float().sum() for r in result)
        loss.backward()
        out["grads"] = [sd(i.grad) for i in inputs
                        if isinstance(i, torch.Tensor) and i.requires_grad]

    out, _ = _run(script, workspace=False)
    return out


def _roi():
    from torch_npu.contrib import ROIAlign
    return ROIAlign((7, 7), 1 / 16, 2), t(2, 8, 32, 32, grad=True), t(5, 5)


def _psroi():
    from torch_npu.contrib import PSROIPool
    return PSROIPool(), t(2, 49 * 22, 32, 32, grad=True), t(2, 5, 6)


def _lsce():
    from torch_npu.contrib import LabelSmoothingCrossEntropy
    return LabelSmoothingCrossEntropy(1000, 0.1), t(64, 1000, grad=True), t(64, dtype=I64)


def _dcn():
    from torch_npu.contrib import ModulatedDeformConv
    module = ModulatedDeformConv(8, 16, 3, padding=1).npu()
    with torch.no_grad():
        module(t(2, 8, 10, 10))     # the first call moves its row orders to the device
    return module, t(2, 8, 10, 10, grad=True)


def _mha():
    from torch_npu.contrib import MultiheadAttention
    from torch_npu.contrib.module.multihead_attention import _MHAConfig
    _MHAConfig.set_fussion()
    return MultiheadAttention(256, 16).npu().half(), t(128, 256, dtype=F16, grad=True)


def _fused_attention():
    hs = t(64, 768, dtype=F16, grad=True)
    kernels = [t(768, 768, dtype=F16, grad=True) for _ in range(3)]
    biases = [t(768, dtype=F16, grad=True) for _ in range(3)]
    return (hs, t(2, 1, 32, 32, dtype=F16), *kernels, *biases)


def _fused_softmax(x, mask):
    # the fused path never calls the dropout module
    return contrib("fuse_add_softmax_dropout")(True, None, mask, x * 2, 64, p=0.1)


def contrib(name):
    """torch_npu.contrib's ``name`` (in an estimate: the stand-in's)."""
    import torch_npu.contrib
    return getattr(torch_npu.contrib, name)


HELD = [
    # ROIAlign keeps the rois alone: the output (5, 8, 7, 7) is all the call adds
    ("roi_align", _roi, lambda m, x, r: m(x * 2, r), [((5, 8, 7, 7), F32)],
     [((2, 8, 32, 32), F32)]),
    # npu_ps_roi_pooling's derivative keeps the rois: the output only
    ("ps_roi_pooling", _psroi, lambda m, x, r: m(x * 2, r), [((12, 22, 7, 7), F32)],
     [((2, 49 * 22, 32, 32), F32)]),
    # the softmax cross entropy keeps the logits (x * 2) and the one-hot labels, float32
    # (64, 1000) each; the mean float32 ()
    ("label_smoothing", _lsce, lambda m, x, y: m(x * 2, y),
     [((64, 1000), F32), ((64, 1000), F32), ((), F32)], [((64, 1000), F32)]),
    # the sigmoid's mask (2, 9, 10, 10) of the offset convolution's output; the operator's
    # deformed input (2, 8, 10 * 3, 10 * 3) and offset_all (2, 27, 10, 10); the output
    ("deform_conv", _dcn, lambda m, x: m(x),
     [((2, 9, 10, 10), F32), ((2, 8, 30, 30), F32), ((2, 27, 10, 10), F32),
      ((2, 16, 10, 10), F32)], [((2, 8, 10, 10), F32)]),
    # B 2, N 16, D 16, T = S = 64: y (128, 256), the bit mask 2 * 16 * 64 * 64 / 8, q, k, v
    # (2, 16, 64, 16), the scores float32 and the probabilities (2, 16, 64, 64), the context
    ("multihead_attention", _mha, lambda m, x: m(x, x, x, 2, 64, 64, t(2, 1, 64, 64,
                                                                         dtype=F16))[0],
     [((128, 256), F16), ((16384,), U8), *[((2, 16, 64, 16), F16)] * 3,
      ((2, 16, 64, 64), F32), ((2, 16, 64, 64), F16), ((128, 256), F16)],
     [((128, 256), F16)]),
    # the context (64, 768), q, k, v (2, 12, 32, 64), the softmax (2, 12, 32, 32) and its
    # byte mask; the projections made on the way are freed
    ("fused_attention", _fused_attention, lambda *a: contrib("npu_fused_attention")(*a),
     [((64, 768), F16), *[((2, 12, 32, 64), F16)] * 3, ((2, 12, 32, 32), F16),
      ((2 * 12 * 32 * 32,), U8)],
     [((64, 768), F16), *[((768, 768), F16)] * 3, *[((768,), F16)] * 3]),
    # roll keeps its input (x * 2, on the context) and makes its two int64 row indices
    ("roll", lambda: (t(2, 8, 8, 4, grad=True),),
     lambda x: contrib("roll")(x * 2, (-3, -3), (1, 2)),
     [((2, 8, 8, 4), F32), ((2, 8, 8, 4), F32), ((64,), I64), ((64,), I64)],
     [((2, 8, 8, 4), F32)]),
    # matmul_transpose keeps both inputs
    ("matmul_transpose", lambda: (t(2, 4, 8, 16, grad=True), t(2, 4, 8, 16, grad=True)),
     lambda a, b: contrib("matmul_transpose")(a * 2, b * 2),
     [((2, 4, 8, 8), F32), ((2, 4, 8, 16), F32), ((2, 4, 8, 16), F32)],
     [((2, 4, 8, 16), F32)] * 2),
    # the fused path: a byte mask of 32 * 128 * 128 (a multiple of 128) elements, the
    # softmax and the result kept; the scores x * 2 freed
    ("fuse_add_softmax_dropout", lambda: (t(32, 1, 128, 128, dtype=F16, grad=True),
                                          t(32, 1, 128, 128, dtype=F16)), _fused_softmax,
     [((32 * 128 * 128,), U8), ((32, 1, 128, 128), F16), ((32, 1, 128, 128), F16)],
     [((32, 1, 128, 128), F16)]),
]


@pytest.mark.parametrize("make, forward, held, grads", [c[1:] for c in HELD],
                         ids=[c[0] for c in HELD])
def test_the_graph_keeps_what_torch_npus_keeps(make, forward, held, grads):
    out = _held(make, forward)
    assert out["held"] == blocks(*held)
    assert out["grads"] == grads


def test_masks_made_ahead_are_held_between_steps_and_forgotten_with_the_estimate():
    """NpuCachedDropout and NpuDropPath: the first step asks, each forward of the hooked
    model then makes what was asked (a bit mask (ceil(4096 / 128) * 16,) = 512 B for the
    (4, 1024) activations; a random tensor (4, 1) on the drop-path stream), the next step
    takes them. roll's indices stay from the first call on."""
    def script(out):
        from torch_npu.contrib import NpuCachedDropout, NpuDropPath, roll
        model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), NpuDropPath(0.1),
                                    NpuCachedDropout(0.1)).npu()
        NpuDropPath.enable_droppath_ensemble(model)
        NpuCachedDropout.enable_dropout_ensemble(model)
        x = t(4, 1024)
        base = allocated()
        with torch.no_grad():
            first = model(x)            # both ask; the forward hook makes the mask
            out["after_first"] = allocated() - base
            out["first_is_linear"] = first.shape
            del first
            second = model(x)           # the pre-hook makes the random tensor; both taken
            out["after_second"] = allocated() - base
            del second
        out["tasks"] = (len(NpuCachedDropout.task_dict), len(NpuDropPath.task_dict))
        x = t(1, 16, 16, 8)
        before = allocated()
        y1 = roll(x, (-2, -2), (1, 2))
        out["roll"] = allocated() - before
        before = allocated()
        y2 = roll(x, (-2, -2), (1, 2))
        out["roll_again"] = allocated() - before
        del y1, y2

    out, _ = _run(script, workspace=False)
    act = block(4 * 1024 * 4)
    mask = block(-(-4 * 1024 // 128) * 128 // 8)               # 512 B of bits
    # the first step: the output and the mask made for the next
    assert out["after_first"] == act + mask
    # the second: x / keep * random (the quotient freed), the dropout's result; the next
    # step's mask made after it, the random tensor (4, 1) made and taken (freed)
    assert out["after_second"] == act + mask
    assert out["tasks"] == (1, 1)
    # the (1, 16, 16, 8) rolled, and the first time only two int64 (256,) indices
    assert out["roll"] == block(16 * 16 * 8 * 4) + 2 * block(256 * 8)
    assert out["roll_again"] == block(16 * 16 * 8 * 4)

    def after(out):
        from torch_npu.contrib import NpuCachedDropout, NpuDropPath, roll
        from torch_npu.contrib.module.multihead_attention import _MHAConfig
        out["state"] = (NpuCachedDropout.task_dict, NpuDropPath.task_dict, roll.index_dict,
                        NpuCachedDropout.dropout_stream, _MHAConfig.use_fussion_mha)

    out, _ = _run(after)
    assert out["state"] == ({}, {}, {}, None, False)


def test_the_prefetcher_holds_the_next_batch_on_its_stream():
    """Over a DataLoader of 4 batches of (16, 3, 32, 32) float32 (192 KiB) and int64 labels
    (16,): made, it holds the first pair on the device; each next() gives it and holds the
    one after, so a step holds two; then (None, None)."""
    def script(out):
        from torch.utils.data import DataLoader, TensorDataset
        from torch_npu.contrib import Prefetcher
        data = TensorDataset(torch.randn(64, 3, 32, 32), torch.arange(64))
        base = allocated()
        prefetcher = Prefetcher(DataLoader(data, batch_size=16))
        out["made"] = allocated() - base
        out["side_stream"] = prefetcher.stream != torch.npu.current_stream()
        seen = []
        x, y = prefetcher.next()
        while x is not None:
            seen.append((sd(x), sd(y), x.device.type, allocated() - base))
            x, y = prefetcher.next()
        out["seen"] = seen
        out["end"] = (x, y)

    out, _ = _run(script, workspace=False)
    pair = block(16 * 3 * 32 * 32 * 4) + block(16 * 8)
    assert out["made"] == pair and out["side_stream"]
    batch = (((16, 3, 32, 32), F32), ((16,), I64), "npu")
    # three steps with the next pair prefetched, the last alone
    assert out["seen"] == [(*batch, 2 * pair)] * 3 + [(*batch, pair)]
    assert out["end"] == (None, None)


def test_bad_input_says_what_is_wrong():
    def script(out):
        from torch_npu.contrib import (
            LinearQuant,
            LinearWeightQuant,
            MultiheadAttention,
            PSROIPool,
            ROIAlign,
            npu_bbox_coder_encode_yolo,
            npu_fast_condition_index_put,
            roll,
        )
        from torch_npu.contrib.module.multihead_attention import _MHAConfig
        weight_quant = LinearWeightQuant(64, 32).npu()
        _MHAConfig.set_fussion()
        mha = MultiheadAttention(64, 4).npu()
        cases = {
            "rois": lambda: ROIAlign((7, 7), 1 / 16, 2)(t(1, 8, 16, 16), t(5, 4)),
            "float_input": lambda: LinearQuant(64, 32).npu()(t(4, 64)),
            "pooled": lambda: PSROIPool(7, 7, 1 / 16, 5, 22),
            "condition": lambda: npu_fast_condition_index_put(t(4), t(4), 0),
            "roll": lambda: roll(t(4, 4, 4), (1, 1), (0, 1)),
            "boxes": lambda: npu_bbox_coder_encode_yolo(t(5, 4), t(6, 4), t(5, dtype=I32)),
            "heads": lambda: MultiheadAttention(100, 16),
            # the float32 weight torch_npu makes is read as packed int4: K = 64 * 8
            "float_weight": lambda: weight_quant(t(4, 64, dtype=F16)),
            # heads 4, head size 16: the fused operator wants multiples of 16
            "align": lambda: mha(t(32, 64), t(32, 64), t(32, 64), 2, 16, 16,
                                 t(2, 1, 16, 16)),
            "no_mask": lambda: MultiheadAttention(256, 16).npu()(
                t(32, 256), t(32, 256), t(32, 256), 2, 16, 16),
        }
        for name, call in cases.items():
            try:
                call()
            except Exception as e:
                out[name] = (type(e).__name__, str(e))

    out, _ = _run(script)
    assert out["rois"] == ("ValueError", "Expected rois.dim() == 2 and rois.size(1) == 5")
    assert out["float_input"][0] == "ValueError" and "torch.float32" in out["float_input"][1]
    assert out["pooled"] == ("ValueError",
                             "only pooled_height == pooled_width == group_size supported.")
    assert out["condition"] == ("TypeError", "Expected condition.dtype in [torch.bool]")
    assert out["roll"] == ("ValueError", "Expected x.dim() == 4")
    assert out["boxes"] == ("ValueError", "Expected bboxes.size(0) == gt_bboxes.size(0)")
    assert out["heads"] == ("ValueError", "embed_dim must be divisible by num_heads")
    assert out["float_weight"][0] == "RuntimeError" and "weight_k_dim is 512" in (
        out["float_weight"][1])
    assert out["align"] == ("RuntimeError", "tgt_len, src_len, attn_head_num, "
                                            "attn_dim_per_head should align to 16.")
    assert out["no_mask"][0] == "TypeError" and "'attn_mask' must be Tensor" in (
        out["no_mask"][1])


def test_a_training_step_through_fused_attention_and_label_smoothing_peaks_by_hand():
    """MultiheadAttention on the fused operator (E 256, 16 heads of 16, B 2, T = S = 64,
    float32, no dropout) into LabelSmoothingCrossEntropy over the 256 features as classes,
    backward and an SGD step.

    Held before: the parameters, four (256, 256) weights (256 KiB each) and four (256,)
    biases; x (128, 256) 128 KiB; the mask (2, 1, 64, 64) 32 KiB; the targets (128,) int64.
    The forward adds the operator's y and context (128, 256), q, k, v (2, 16, 64, 16) (128
    KiB each), the scores and probabilities (2, 16, 64, 64) (512 KiB each), the bit mask
    (16 KiB), the one-hot labels (128, 256) and the loss (). The peak is in the fused
    operator's backward: y and the one-hot labels are freed by then (the cross entropy's
    node has run), its saved tensors but y are alive, with the incoming gradient (128, 256),
    the loss's gradient (ones, ()) that ``backward()`` holds throughout, and all eleven
    gradients the operator makes: four (256, 256), three (128, 256) (x needs none, but the
    operator makes them), four (1, 256) for the biases (autograd sums them to (256,) after
    the node's inputs and saved tensors are let go, below that peak)."""
    def script(out):
        import torch_npu  # noqa: F401
        from torch_npu.contrib import LabelSmoothingCrossEntropy, MultiheadAttention
        from torch_npu.contrib.module.multihead_attention import _MHAConfig
        _MHAConfig.set_fussion()
        mha = MultiheadAttention(256, 16).npu()
        loss_fn = LabelSmoothingCrossEntropy(256, 0.1)
        opt = torch.optim.SGD(mha.parameters(), lr=0.1)
        x, mask, target = t(128, 256), t(2, 1, 64, 64), t(128, dtype=I64)
        out["before"] = allocated()
        loss = loss_fn(mha(x, x, x, 2, 64, 64, mask)[0], target)
        out["forward"] = allocated() - out["before"]
        loss.backward()
        opt.step()
        out["after"] = allocated() - out["before"]
        out["grads"] = sorted(sd(p.grad) for p in mha.parameters())

    out, result = _run(script, workspace=False)
    weight, bias = block(256 * 256 * 4), block(256 * 4)
    act = block(128 * 256 * 4)                                  # (128, 256) float32
    head = block(2 * 16 * 64 * 16 * 4)                          # q, k, v
    scores = block(2 * 16 * 64 * 64 * 4)
    bits = block(2 * 16 * 64 * 64 // 8)
    scalar = block(4)
    before = 4 * weight + 4 * bias + act + block(2 * 64 * 64 * 4) + block(128 * 8)
    assert out["before"] == before
    saved = 3 * head + 2 * scores + act + bits                 # context, not y
    assert out["forward"] == saved + act + act + scalar          # + y, one-hot, loss
    grads = 4 * weight + 3 * act + 4 * block(256 * 4)
    assert result.peak_allocated == before + scalar + scalar + saved + act + grads
    # after the step: the loss, and each parameter's gradient
    assert out["after"] == scalar + 4 * weight + 4 * bias
    assert out["grads"] == sorted([((256, 256), F32)] * 4 + [((256,), F32)] * 4)
