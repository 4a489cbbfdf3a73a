"""torch_npu's quantisation operators on the fake NPU: ``npu_dynamic_quant``,
``npu_quant_matmul``, ``npu_quantize``, and the MX and block quantisations
(``npu_dynamic_mx_quant``, ``_with_dual_axis``, ``npu_dynamic_block_mx_quant``,
``npu_dynamic_block_quant``, ``npu_grouped_dynamic_mx_quant``), ``npu_kronecker_quant``,
``npu_convert_weight_to_int4pack``.

Schemas: ``op_plugin/config/op_plugin_functions.yaml`` (Ascend/op-plugin at 517f2e7d). A
dtype argument is torch_npu's number (``torch.int8`` passes as 1, ``torch_npu.hifloat8`` as
290, the float4 pairs as 296/297: :data:`._common.DTYPES`). Outputs:

- ``npu_dynamic_quant(x)`` (``op_plugin/ops/opapi/DynamicQuantKernelNpuOpApi.cpp``, the
  ``npu_dynamic_quant`` meta): y of x's shape in int8, a float8 type, uint8 (hifloat8), or
  int32 with the last axis / 8 (quint4x2); scale float32 of x's shape without its last
  axis ("pertoken"), with the second-to-last replaced by the last ("perchannel"), or (1,)
  ("pertensor");
- ``npu_quant_matmul(x1 (..., M, K), x2 (..., K, N), scale)`` (``npu_quant_matmul_meta``,
  ``_meta_registrations.py``): (broadcast batch..., M, N), N x 8 for int32 (packed int4)
  x1 and x2 with x2 not transposed; int8 unless ``output_dtype`` says otherwise. The
  A8W4, MX-FP4 and float32-packed layouts are not modelled (their N is x2's);
- ``npu_quantize(x, scales, zero_points, dtype)`` (``npu_quantize_meta``): x's shape in uint8
  (quint8, uint8, hifloat8), int32 (qint32, int32), the float8 types, int8 otherwise; int32
  with the last axis / 8 for quint4x2;
- ``npu_dynamic_mx_quant(x, axis, block_size)`` (``npu_dynamic_mx_quant`` meta): y of x's
  shape in float8 (e5m2, e4m3fn), or uint8 with the last axis / 2 for float4; mxscale uint8
  of x's shape with ``axis`` made ceil(ceil(d / block_size) / 2), and a trailing 2;
- ``npu_dynamic_mx_quant_with_dual_axis(x)``: (y1, scale1, y2, scale2), y as above twice,
  scale1 over the last axis and scale2 over the second-to-last (block 32);
  ``npu_dynamic_block_mx_quant(x)``: (y, scale1, scale2), the same scales;
- ``npu_dynamic_block_quant(x (M, N) or (B, M, N))``: y of x's shape in ``dst_type``'s dtype;
  scale float32 with M and N divided (rounded up) by the row and column block sizes;
- ``npu_grouped_dynamic_mx_quant(x (M, N), group_index (G,))``: y as for the MX quant,
  mxscale uint8 (M / 2 / 32 + G, N, 2);
- ``npu_kronecker_quant(x, p1, p2)`` (``npu_kronecker_quant_meta``): int4 values packed in
  int32, x's shape with the last axis / 8, and a float32 scale (x.size(0),); with the MX-FP4
  ``dst_dtype`` (296) and a 3-D x, uint8 (x0, x1 * x2 / 2) and a uint8 scale
  (x0, ceil(x1 * x2 / 64), 2);
- ``npu_convert_weight_to_int4pack(weight, inner_k_tiles)``
  (``op_plugin/ops/opapi/ConvertWeightToINT4PackKernelNpuOpApi.cpp``; torch_npu's meta
  registrations have none): below Ascend 950, an int32 weight (2-D or 3-D, the last axis a
  multiple of 8) packed on the host, 8 values an int32, into an int32
  (weight.size(-2), weight.size(-1) / 8) tensor copied to the device: a 3-D weight gives
  that 2-D shape too, as the kernel sizes it (vllm-ascend's ``w4a16.py`` flattens the
  experts into the rows first); on the 950 (``npu_convert_weight_to_b4pack``) an int32 or
  float32 (float4 e2m1 values) weight keeps its shape with the last axis / 8, and its dtype.
  The kernel's checks are kept, with its messages: 2 or 3 dimensions, int32 or float32
  (int32 alone below the 950: it reads the values as int32), no zero axis, the last a
  multiple of 8, contiguous. ESTIMATE: an NZ weight's padded storage is not modelled (its
  shape is taken as ND, as :mod:`.layout` takes a format cast).

Autograd: none of these has a derivative in op-plugin's ``derivatives.yaml``.

Workspace (``workspace_table.py``): 16 MiB for ``npu_dynamic_quant`` (``SYS_WORKSPACE_SIZE``,
``quant/dynamic_quant/op_host/dynamic_quant_tiling.cpp``, hicann/ops-nn). ESTIMATE: the
others are left to the table's default (``npu_quant_matmul``'s depends on its template;
the MX quantisations' tilings are arch35 ones). ``npu_convert_weight_to_int4pack`` runs no
device kernel (the packing is on the host): 0 in the table.
"""

from __future__ import annotations

from typing import Any

import torch

from ._common import DTYPES, define, dtype_of, mx_scale_shape, product

__all__ = ["register", "npu_dynamic_quant", "npu_quant_matmul", "npu_quantize",
           "npu_dynamic_mx_quant", "npu_dynamic_mx_quant_with_dual_axis",
           "npu_dynamic_block_mx_quant", "npu_dynamic_block_quant",
           "npu_grouped_dynamic_mx_quant", "npu_kronecker_quant",
           "npu_convert_weight_to_int4pack"]

_SCHEMAS = (
    "npu_dynamic_quant(Tensor input, *, Tensor? smooth_scales=None, Tensor? group_index=None, "
    "int? dst_type=None, str quant_mode=\"pertoken\", float dst_type_max=0.0) "
    "-> (Tensor, Tensor)",
    "npu_quant_matmul(Tensor x1, Tensor x2, Tensor scale, *, Tensor? offset=None, "
    "Tensor? pertoken_scale=None, Tensor? bias=None, int? output_dtype=None, "
    "int? x1_dtype=None, int? x2_dtype=None, int? pertoken_scale_dtype=None, "
    "int? scale_dtype=None, int[]? group_sizes=None, Tensor? y_scale=None) -> Tensor",
    "npu_quantize(Tensor self, Tensor scales, Tensor? zero_points, int dtype, int axis=1, "
    "bool div_mode=True) -> Tensor",
    "npu_dynamic_mx_quant(Tensor input, *, int axis=-1, str round_mode=\"rint\", "
    "int dst_type=296, int block_size=32, int? scale_alg=0, float dst_type_max=0.0, "
    "float max_low_bound=0.0) -> (Tensor, Tensor)",
    "npu_dynamic_mx_quant_with_dual_axis(Tensor input, *, str round_mode=\"rint\", "
    "int dst_type=296, int scale_alg=0, float? dst_type_max=0.0) "
    "-> (Tensor, Tensor, Tensor, Tensor)",
    "npu_dynamic_block_mx_quant(Tensor input, *, str round_mode=\"rint\", int dst_type=296, "
    "int scale_alg=0, float dst_type_max=0.0) -> (Tensor, Tensor, Tensor)",
    "npu_dynamic_block_quant(Tensor x, *, float min_scale=0.0, str round_mode=\"rint\", "
    "int dst_type=1, int row_block_size=1, int col_block_size=128, float dst_type_max=0.0) "
    "-> (Tensor y, Tensor scale)",
    "npu_grouped_dynamic_mx_quant(Tensor x, Tensor group_index, *, str round_mode=\"rint\", "
    "int dst_type=23, int blocksize=32, int? scale_alg=0, float? dst_type_max=0.0) "
    "-> (Tensor, Tensor)",
    "npu_kronecker_quant(Tensor x, Tensor kronecker_p1, Tensor kronecker_p2, "
    "float? clip_ratio=None, int? dst_dtype=None, float? dst_type_max=None) "
    "-> (Tensor out, Tensor quant_scale)",
    "npu_convert_weight_to_int4pack(Tensor weight, int inner_k_tiles=0) -> Tensor",
)
_QUINT4X2, _HIFLOAT8, _FLOAT4_E2M1 = 16, 290, 296
_FLOAT8 = (torch.float8_e5m2, torch.float8_e4m3fn)


def _packed(x: Any, per: int, dtype: torch.dtype) -> Any:
    """``x``'s shape with the last axis divided by ``per`` (packed elements), in ``dtype``."""
    if x.shape[-1] % per:
        raise RuntimeError(f"the last dim of input must be divisible by {per} for a packed "
                           f"output dtype")
    return x.new_empty((*x.shape[:-1], x.shape[-1] // per), dtype=dtype)


def _dynamic_quant_fake(x, *, smooth_scales=None, group_index=None, dst_type=None,
                        quant_mode="pertoken", dst_type_max=0.0):
    if x.dim() <= 1:
        raise RuntimeError("Input shape dim should be greater than 1")
    if quant_mode == "pertensor":
        scale_shape = [1]
    elif quant_mode == "perchannel":
        scale_shape = [*x.shape[:-2], x.shape[-1]]
    else:
        scale_shape = list(x.shape[:-1])
    scale = x.new_empty(scale_shape, dtype=torch.float32)
    if dst_type == _QUINT4X2:
        return _packed(x, 8, torch.int32), scale
    dtype = dtype_of(dst_type, torch.int8)
    if dst_type != _HIFLOAT8 and dtype not in _FLOAT8:
        dtype = torch.int8
    return x.new_empty(x.shape, dtype=dtype), scale


def _quant_matmul_fake(x1, x2, scale, *, offset=None, pertoken_scale=None, bias=None,
                       output_dtype=None, x1_dtype=None, x2_dtype=None,
                       pertoken_scale_dtype=None, scale_dtype=None, group_sizes=None,
                       y_scale=None):
    batch = torch.broadcast_shapes(x1.shape[:-2], x2.shape[:-2])
    transposed = x1.shape[-1] == x2.shape[-2]
    n = x2.shape[-1]
    if x1.dtype == torch.int32 and x2.dtype == torch.int32 and not transposed:
        n *= 8
    dtype = dtype_of(output_dtype, torch.int8)
    longer = x1 if x1.dim() > x2.dim() else x2
    return longer.new_empty((*batch, x1.shape[-2], n), dtype=dtype)


def _quantize_fake(x, scales, zero_points, dtype, axis=1, div_mode=True):
    if dtype == _QUINT4X2:
        return _packed(x, 8, torch.int32)
    target = DTYPES.get(dtype, torch.int8)
    if target in (torch.quint8, torch.uint8):
        target = torch.uint8
    elif target in (torch.qint32, torch.int32):
        target = torch.int32
    elif target not in _FLOAT8:
        target = torch.int8
    return x.new_empty(x.shape, dtype=target)


def _mx_values(x: Any, dst_type: int) -> Any:
    """An MX quantisation's values: float8 of x's shape, or float4 pairs in uint8."""
    dtype = dtype_of(dst_type, torch.int8)
    if dtype in _FLOAT8:
        return x.new_empty(x.shape, dtype=dtype)
    return _packed(x, 2, torch.uint8)


def _dynamic_mx_quant_fake(x, *, axis=-1, round_mode="rint", dst_type=296, block_size=32,
                           scale_alg=0, dst_type_max=0.0, max_low_bound=0.0):
    if not -x.dim() <= axis < x.dim():
        raise RuntimeError(f"Parameter axis is out of input dimension range [{-x.dim()}, "
                           f"{x.dim() - 1}]")
    if not (0 < block_size <= 1024 and block_size % 32 == 0):
        raise RuntimeError("Parameter block_size must be divisible by 32 and no greater than "
                           "1024, greater than 0")
    scale = x.new_empty(mx_scale_shape(x.shape, axis, block_size), dtype=torch.uint8)
    return _mx_values(x, dst_type), scale


def _dual_axis_fake(x, *, round_mode="rint", dst_type=296, scale_alg=0, dst_type_max=0.0):
    scale1 = x.new_empty(mx_scale_shape(x.shape, -1), dtype=torch.uint8)
    scale2 = x.new_empty(mx_scale_shape(x.shape, -2), dtype=torch.uint8)
    return _mx_values(x, dst_type), scale1, _mx_values(x, dst_type), scale2


def _block_mx_fake(x, *, round_mode="rint", dst_type=296, scale_alg=0, dst_type_max=0.0):
    return (_mx_values(x, dst_type), x.new_empty(mx_scale_shape(x.shape, -1), dtype=torch.uint8),
            x.new_empty(mx_scale_shape(x.shape, -2), dtype=torch.uint8))


def _block_quant_fake(x, *, min_scale=0.0, round_mode="rint", dst_type=1, row_block_size=1,
                      col_block_size=128, dst_type_max=0.0):
    if x.dim() not in (2, 3):
        raise RuntimeError(f"Expected x to have 2 or 3 dimensions, but got {x.dim()}.")
    shape = list(x.shape)
    shape[-2] = -(-shape[-2] // row_block_size)
    shape[-1] = -(-shape[-1] // col_block_size)
    return (x.new_empty(x.shape, dtype=dtype_of(dst_type, torch.float8_e5m2)),
            x.new_empty(shape, dtype=torch.float32))


def _grouped_mx_fake(x, group_index, *, round_mode="rint", dst_type=23, blocksize=32,
                     scale_alg=0, dst_type_max=0.0):
    if x.dim() != 2 or group_index.dim() != 1 or blocksize != 32:
        raise RuntimeError("npu_grouped_dynamic_mx_quant takes a 2-D x, a 1-D group_index and "
                           "blocksize 32")
    scale = x.new_empty((x.shape[0] // 2 // blocksize + group_index.shape[0], x.shape[-1], 2),
                        dtype=torch.uint8)
    return _mx_values(x, dst_type), scale


def _kronecker_fake(x, p1, p2, clip_ratio=None, dst_dtype=None, dst_type_max=None):
    if dst_dtype == _FLOAT4_E2M1:
        if x.dim() != 3:
            raise RuntimeError("the dim num of input x must be 3")
        inner = x.shape[1] * x.shape[2]
        return (x.new_empty((x.shape[0], inner // 2), dtype=torch.uint8),
                x.new_empty((x.shape[0], -(-inner // 64), 2), dtype=torch.uint8))
    if dst_dtype not in (None, 3):
        raise RuntimeError("the dtype of dst_dtype must be int32, or mxfp4")
    return _packed(x, 8, torch.int32), x.new_empty((x.shape[0],), dtype=torch.float32)


def _int4pack_fake(weight, inner_k_tiles=0):
    # ConvertWeightToINT4PackKernelNpuOpApi.cpp: int4pack_params_check, then the packing
    if not weight.is_contiguous():
        raise RuntimeError("weight should be contiguous")
    if weight.dim() not in (2, 3):
        raise RuntimeError(f"weight shape only support dim num 2/3, but it is {weight.dim()}")
    if weight.dtype not in (torch.int32, torch.float32):
        raise RuntimeError(f"weight dtype only support int32 and float32, but it is "
                           f"{weight.dtype}")
    if any(d <= 0 for d in weight.shape):
        raise RuntimeError("weight dim should be greater than 0")
    if weight.shape[-1] % 8:
        raise RuntimeError(f"weight last dim should be the multiple of 8, but it is "
                           f"{weight.shape[-1]}")
    if product().startswith("950"):
        # npu_convert_weight_to_b4pack: the shape with the last axis / 8, weight's dtype
        return _packed(weight, 8, weight.dtype)
    if weight.dtype != torch.int32:
        # the packing reads the host copy as int32 (data_ptr<int32_t>), which torch refuses
        raise RuntimeError("npu_convert_weight_to_int4pack: below Ascend 950 the weight must "
                           "be int32 (expected scalar type Int but found Float)")
    return weight.new_empty((weight.shape[-2], weight.shape[-1] // 8), dtype=torch.int32)


def register(lib: Any) -> None:
    """Define the family's operators in ``lib`` (the ``npu`` namespace) and their fake
    kernels."""
    define(lib, _SCHEMAS, {
        "npu_dynamic_quant": _dynamic_quant_fake,
        "npu_quant_matmul": _quant_matmul_fake,
        "npu_quantize": _quantize_fake,
        "npu_dynamic_mx_quant": _dynamic_mx_quant_fake,
        "npu_dynamic_mx_quant_with_dual_axis": _dual_axis_fake,
        "npu_dynamic_block_mx_quant": _block_mx_fake,
        "npu_dynamic_block_quant": _block_quant_fake,
        "npu_grouped_dynamic_mx_quant": _grouped_mx_fake,
        "npu_kronecker_quant": _kronecker_fake,
        "npu_convert_weight_to_int4pack": _int4pack_fake,
    })


def npu_dynamic_quant(input: Any, **kwargs: Any) -> tuple:
    """``torch_npu.npu_dynamic_quant``: (y int8 or dst_type, scale float32)."""
    return torch.ops.npu.npu_dynamic_quant(input, **kwargs)


def npu_quant_matmul(x1: Any, x2: Any, scale: Any, **kwargs: Any) -> Any:
    """``torch_npu.npu_quant_matmul``: (batch..., M, N), int8 unless output_dtype."""
    return torch.ops.npu.npu_quant_matmul(x1, x2, scale, **kwargs)


def npu_quantize(self: Any, scales: Any, zero_points: Any, dtype: Any, axis: int = 1,
                 div_mode: bool = True) -> Any:
    """``torch_npu.npu_quantize``: ``self`` quantised to ``dtype``."""
    return torch.ops.npu.npu_quantize(self, scales, zero_points, dtype, axis, div_mode)


def npu_dynamic_mx_quant(input: Any, **kwargs: Any) -> tuple:
    """``torch_npu.npu_dynamic_mx_quant``: (y, mxscale uint8)."""
    return torch.ops.npu.npu_dynamic_mx_quant(input, **kwargs)


def npu_dynamic_mx_quant_with_dual_axis(input: Any, **kwargs: Any) -> tuple:
    """``torch_npu.npu_dynamic_mx_quant_with_dual_axis``: (y1, scale1, y2, scale2)."""
    return torch.ops.npu.npu_dynamic_mx_quant_with_dual_axis(input, **kwargs)


def npu_dynamic_block_mx_quant(input: Any, **kwargs: Any) -> tuple:
    """``torch_npu.npu_dynamic_block_mx_quant``: (y, scale1, scale2)."""
    return torch.ops.npu.npu_dynamic_block_mx_quant(input, **kwargs)


def npu_dynamic_block_quant(x: Any, **kwargs: Any) -> tuple:
    """``torch_npu.npu_dynamic_block_quant``: (y, scale float32 per block)."""
    return torch.ops.npu.npu_dynamic_block_quant(x, **kwargs)


def npu_grouped_dynamic_mx_quant(x: Any, group_index: Any, **kwargs: Any) -> tuple:
    """``torch_npu.npu_grouped_dynamic_mx_quant``: (y, mxscale uint8)."""
    return torch.ops.npu.npu_grouped_dynamic_mx_quant(x, group_index, **kwargs)


def npu_kronecker_quant(x: Any, kronecker_p1: Any, kronecker_p2: Any, clip_ratio: Any = None,
                        dst_dtype: Any = None, dst_type_max: Any = None) -> tuple:
    """``torch_npu.npu_kronecker_quant``: (int4 values packed in int32, scale)."""
    return torch.ops.npu.npu_kronecker_quant(x, kronecker_p1, kronecker_p2, clip_ratio,
                                             dst_dtype, dst_type_max)


def npu_convert_weight_to_int4pack(weight: Any, inner_k_tiles: int = 0) -> Any:
    """``torch_npu.npu_convert_weight_to_int4pack``: 8 int4 (float4 on the 950) values an
    element; (k, n / 8) int32 below the 950."""
    return torch.ops.npu.npu_convert_weight_to_int4pack(weight, inner_k_tiles)
