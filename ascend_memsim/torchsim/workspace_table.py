"""The workspace each operator takes on the NPU: a table for the common operators, with the
source of every figure, and the user's overrides.

How torch_npu gives an operator its workspace (``Ascend/op-plugin``
``op_plugin/utils/op_api_common.h``, ``EXEC_NPU_CMD``): it asks the aclnn operator's
``aclnnXxxGetWorkspaceSize`` for ``workspace_size`` and, when it is not 0, allocates that many
bytes for the call only. With ``TASK_QUEUE_ENABLE=2`` (``EXEC_NPU_CMD_V2``) the bytes come
from the stream's block of ``NPUWorkspaceAllocator`` (``OpPreparation::unsafe_empty_workspace
(size, stream)``, ``torch_npu/csrc/framework/utils/OpPreparation.cpp``), which grows to the
largest request and is kept; with ``TASK_QUEUE_ENABLE`` 0 or 1 (the default,
``OptionsManager::GetTaskQueueEnable``) they come from the caching allocator
(``unsafe_empty_workspace(size)``), a block freed when the call has been queued.

An aclnn operator's workspace is what its kernels' tiling asks for (``context->
GetWorkspaceSizes(1)[0]``, in ``hicann/ops-nn`` and ``hicann/ops-transformer``) plus the
intermediate tensors its executor makes (format conversions, casts, contiguous copies).
Ascend C kernels reserve the platform's system workspace,
``PlatformAscendC::GetLibApiWorkSpaceSize()``: 16 MiB on the Atlas A2/A3 parts (DAV_2201)
and the 950 (DAV_3510). The figures below follow the tiling of the template a training
shape takes; what depends on the chip's core count uses 48 vector cores (Atlas A2/A3's
910B1/B2 and 910_93 dies; fewer cores take less) and is marked ESTIMATE.

======================================  ==================================================
operator (as the dispatcher names it)   bytes per call
======================================  ==================================================
mm, addmm, bmm, baddbmm, addbmm,        20 MiB: ``RPC_WORKSIZE * MB_SIZE``, the base of
matmul, linear                          MatMulV3's workspace (``matmul/mat_mul_v3/op_host/
                                        op_tiling/matmul_v3_base_tiling.cpp``
                                        ``GetWorkspaceSize``; ``batch_mat_mul_v3`` inherits
                                        it). ESTIMATE: the extra copies of operands whose
                                        inner axis is not aligned (nd2nz) and the float32
                                        split-K buffers are not added.
convolution                             ESTIMATE: 16 MiB system workspace + input, weight
                                        and output with channels padded to C0 (32 bytes):
                                        ``aclnn_convolution.cpp`` (``conv/
                                        convolution_forward/op_host/op_api``) converts
                                        input and weight with ``l0op::TransData`` to
                                        NC1HWC0 / FRACTAL_Z inside the executor.
convolution_backward                    ESTIMATE: 16 MiB + grad_output, input and weight
                                        padded to C0 + the weight gradient in float32.
npu_fusion_attention,                   16 MiB ``WORK_SPACE_RESERVE_SIZE`` + per vector
_scaled_dot_product_flash_attention,    core ``2 * nRatio*s1*s2*4 + 4 * s1*align16(D)*4``
_scaled_dot_product_efficient_attention,(s1, s2 = 128 or the aligned length; nRatio =
_scaled_dot_product_fused_attention_    min(8, S2/128)): ``FlashAttentionScoreTiling
overrideable                            S1s2Bn2gs1::GetWorkspaceSize`` (``attention/
                                        flash_attention_score/op_host/flash_attention_
                                        score_tiling_general.cpp``). ESTIMATE: 48 cores.
npu_fusion_attention_grad and the       20 MiB ``WORKSPACE_BUFFER`` + 16 KiB + q, k, v in
``_backward`` of the three above        float32 + per core ``128*128 * (8 + 4*itemsize)``:
                                        ``FlashAttentionScoreGradTilingS1s2Bn2gs1s2::
                                        GetWorkspaceSize``. ESTIMATE: 48 cores, one
                                        128x128 base block per core.
native_layer_norm                       32 bytes: ``BASE_WSP_SIZE`` (``norm/layer_norm_v4/
                                        op_host/layer_norm_v4_tiling_base.cpp``).
native_layer_norm_backward              16 MiB + cores * align8(columns) * 4 * 2
                                        (``layer_norm_grad_v3_common_tiling.cpp``).
                                        ESTIMATE: 48 cores.
rms_norm, npu_rms_norm,                 16 MiB: ``SYS_WORKSPACE_SIZE`` (``norm/rms_norm/
rms_norm_backward, npu_rms_norm_        op_host/rms_norm_tiling.cpp``; the gradient's
backward                                ``MIN_WORKSPACE_SIZE``, ``rms_norm_grad``).
native_batch_norm,                      16 MiB: ``MINIMAL_WORKSPACE`` (``norm/batch_norm_v3/
_native_batch_norm_legit*,              op_host/batch_norm_v3_tiling_base.cpp``) and
native_batch_norm_backward              ``BNG_WORKSPACE_RESERVED`` (``batch_norm_grad_v3``).
_softmax, _log_softmax, _safe_softmax,  16 MiB on the 950 (``MINIMAL_WORKSPACE``,
their ``_backward_data``                ``activation/softmax_v2/op_host/arch35``); 0 on the
                                        others. ESTIMATE: ops-nn has no Ascend C tiling for
                                        them before arch35 (a TBE kernel, no workspace).
_foreach_* (elementwise)                32 bytes: ``WORK_SPACE_SIZE`` "foreach(vector) not
                                        need workspace" (``foreach/foreach_utils/op_host/
                                        foreach_tiling_class.h``).
_foreach_norm                           16 MiB: ``foreach_reduce_tiling_func.cpp``.
_fused_adam_, _fused_adamw_             16 MiB: the system workspace (``optim/fused_adamw/
                                        op_host/fused_adamw_tiling.cpp``;
                                        ``apply_adam_w_v2_tiling.cpp`` ``WORKSPACE_SIZE``).
npu_add_rms_norm                        16 MiB + 256 bytes (``norm/add_rms_norm/op_host/
                                        add_rms_norm_tiling.cpp``).
npu_swiglu, npu_swiglu_backward,        16 MiB: ``WORKSPACE_BUFFER`` (``activation/swi_glu/
npu_dynamic_quant                       op_host/swi_glu_tiling.cpp``, SwiGlu and
                                        SwiGluGrad); ``SYS_WORKSPACE_SIZE`` (``quant/
                                        dynamic_quant/op_host/dynamic_quant_tiling.cpp``).
npu_rotary_mul, npu_rotary_mul_         16 MiB (ops-transformer ``posembedding/rotary_
backward; npu_interleave_rope           position_embedding/op_host/rope_rotate_half_
                                        tiling.cpp``, ``rope_half_grad_tiling.cpp``); 32
                                        bytes (``interleave_rope_tiling.cpp``).
npu_moe_token_unpermute, its and        16 MiB: ``GetLibApiWorkSpaceSize`` or 16 MiB
npu_moe_token_permute's ``_grad_v2``,   (ops-transformer ``moe/moe_token_unpermute``,
npu_moe_finalize_routing,               ``_unpermute_grad``, ``_permute_grad`` tilings;
npu_grouped_matmul                      ``moe_finalize_routing_v2_tiling.cpp``
                                        ``WORKSPACE_RESERVED``; ``gmm/grouped_matmul``
                                        ``SYS_WORKSPACE_SIZE``). ESTIMATE: the quantised
                                        grouped matmul templates' extra is not added.
npu_moe_gating_top_k_softmax            0 (its tilings set ``workspaceSize_ = 0``).
npu_moe_compute_expert_tokens           16 MiB + experts * cores * 4 (``moe_compute_
                                        expert_tokens_tiling.cpp``). ESTIMATE: 48 cores.
npu_lightning_indexer                   16 MiB + 2,361,344 bytes per cube core (A2/A3), or
                                        + 4 * align128(S2) * 4 per cube core (950):
                                        ``LiCalcWorkspaceSize`` (``attention/lightning_
                                        indexer/op_host/lightning_indexer_tiling.cpp``).
                                        ESTIMATE: 24 cube cores; S2 the key's sequence axis.
npu_sparse_flash_attention              16 MiB + per cube core 2 x (score block * 6 +
                                        output block * 4 + 2 KiB) + 2,359,296 + 4,096
                                        (A2/A3), or + 128 * 576 * itemsize * 3 (950):
                                        ``SFAMlaTiling::GetWorkspaceSize`` (``sparse_flash_
                                        attention_tiling.cpp``). ESTIMATE: 24 cube cores,
                                        the largest blocks (128 rows, 512 keys), no flash
                                        decoding.
npu_all_gather_base_mm,                 16 MiB + x2 copied ND to NZ (K, N aligned to 256
npu_mm_reduce_scatter_base              bytes of elements) + the gathered x1 when it is not
                                        an output, or + the whole (M, N) product for the
                                        reduce-scatter: ``MC2SetWorkspace``,
                                        ``MC2SetWorkspaceReduceScatter`` (``mc2/all_gather_
                                        matmul``, ``mc2/matmul_reduce_scatter`` op_tiling).
                                        ESTIMATE: a bias's float32 copy not added.
npu_alltoallv_gmm, npu_gmm_alltoallv    16 MiB + A * H1 * itemsize, twice without
                                        ``permute_out``; 16 MiB + A * N1 * 2 (``allto_allv_
                                        grouped_mat_mul_tiling.cpp``, ``grouped_mat_mul_
                                        allto_allv_tiling.cpp``, A3).
npu_convert_weight_to_int4pack          0: no device kernel (packed on the host,
                                        ``ConvertWeightToINT4PackKernelNpuOpApi.cpp``).
======================================  ==================================================

Every other operator counts 0, and the estimate says how many calls that was.

Overrides (:func:`load_overrides`, ``ascend-memsim estimate --workspace-table FILE.json``,
``--workspace OP=SIZE``): a JSON object whose keys are operator names as above (no
``aten.`` prefix, no overload: ``mm``, ``_foreach_add_``) and values the bytes every call of
that operator takes (an int, or a size such as ``"24MiB"``); the key ``"*"`` gives the bytes of
every operator the table does not cover. A file is data: plain JSON, read in bounded time and
memory, anything else refused with a message.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from ..memory.units import parse_size

__all__ = ["WorkspaceTable", "WorkspaceTableError", "load_overrides", "DEFAULT_ENTRIES",
           "MAX_FILE_BYTES"]

MiB = 1 << 20
#: PlatformAscendC::GetLibApiWorkSpaceSize on DAV_2201 and DAV_3510
SYSTEM = 16 * MiB
#: ESTIMATE: vector cores of Atlas A2/A3's 910B1/B2 (see the module's docstring)
CORES = 48
#: ESTIMATE: their cube (AI) cores, one to two vector cores
CUBE_CORES = 24
#: the largest override file read (an override table is a few lines)
MAX_FILE_BYTES = 1 << 20
_MAX_KEYS = 10_000
_MAX_BYTES = 1 << 50
_NAME = re.compile(r"\A(?:\*|[A-Za-z_][A-Za-z0-9_]{0,127})\Z")


class WorkspaceTableError(ValueError):
    """An override table that is not a JSON object of operator names and sizes."""


def _up(n: int, step: int) -> int:
    return -(-n // step) * step


def _tensor(x: Any) -> Any:
    return x if hasattr(x, "shape") and hasattr(x, "element_size") else None


def _c0_bytes(t: Any, pad_dim0: bool = False) -> int:
    """Bytes of ``t`` with dim 1 padded to C0 (32 bytes of elements), and dim 0 to 16 for a
    weight in FRACTAL_Z."""
    t = _tensor(t)
    if t is None:
        return 0
    shape, item = list(t.shape), t.element_size()
    if len(shape) >= 2:
        shape[1] = _up(shape[1], max(32 // item, 1))
        if pad_dim0:
            shape[0] = _up(shape[0], 16)
    n = 1
    for d in shape:
        n *= int(d)
    return n * item


def _fixed(n: int) -> Callable:
    return lambda args, out, product: n


def _conv(args: tuple, out: Any, product: str) -> int:
    return SYSTEM + _c0_bytes(args[0]) + _c0_bytes(args[1], True) + _c0_bytes(out)


def _conv_backward(args: tuple, out: Any, product: str) -> int:
    weight = _tensor(args[2])
    grad_weight = weight.numel() * 4 if weight is not None else 0
    return (SYSTEM + _c0_bytes(args[0]) + _c0_bytes(args[1]) + _c0_bytes(args[2], True)
            + grad_weight)


def _qkv(args: tuple) -> tuple[Any, Any, Any]:
    return _tensor(args[0]), _tensor(args[1]), _tensor(args[2])


def _head_dim(q: Any, args: tuple) -> int:
    # npu_fusion_attention(query, key, value, head_num, input_layout, ...): BSH and SBH
    # hold the heads in the last axis
    if len(args) > 4 and isinstance(args[4], str) and args[4] in ("BSH", "SBH"):
        heads = args[3] if isinstance(args[3], int) and args[3] > 0 else 1
        return max(int(q.shape[-1]) // heads, 1)
    return int(q.shape[-1])


def _seq(t: Any, args: tuple) -> int:
    layout = args[4] if len(args) > 4 and isinstance(args[4], str) else "BNSD"
    axis = {"BSH": 1, "BSND": 1, "SBH": 0, "TND": 0}.get(layout, -2)
    return int(t.shape[axis])


def _attention(args: tuple, out: Any, product: str) -> int:
    q, k, _v = _qkv(args)
    if q is None or k is None:
        return SYSTEM
    s1, s2 = _seq(q, args), _seq(k, args)
    s1_block, s2_block = min(128, _up(s1, 16)), min(128, _up(s2, 16))
    n_ratio = max(min(8, -(-s2 // 128)), 1)
    bmm1 = n_ratio * s1_block * s2_block * 4
    return SYSTEM + CORES * (2 * bmm1 + 4 * s1_block * _up(_head_dim(q, args), 16) * 4)


def _attention_grad(q: Any, k: Any, v: Any) -> int:
    if q is None or k is None or v is None:
        return 20 * MiB + 16 * 1024
    fp32 = 4 * (q.numel() + k.numel() + v.numel())
    return 20 * MiB + 16 * 1024 + fp32 + CORES * 128 * 128 * (8 + 4 * q.element_size())


def _attention_backward(args: tuple, out: Any, product: str) -> int:
    # torch's _scaled_dot_product_*_backward(grad_out, query, key, value, ...)
    return _attention_grad(*_qkv(args[1:4]))


def _npu_attention_backward(args: tuple, out: Any, product: str) -> int:
    # torch_npu's npu_fusion_attention_grad(query, key, value, dy, ...)
    return _attention_grad(*_qkv(args[:3]))


def _layer_norm_backward(args: tuple, out: Any, product: str) -> int:
    x = _tensor(args[1])
    cols = 1
    for d in (args[2] if len(args) > 2 and isinstance(args[2], (list, tuple)) else ()):
        cols *= int(d)
    if x is None:
        return SYSTEM
    return SYSTEM + CORES * _up(cols, 8) * 4 * 2


def _softmax(args: tuple, out: Any, product: str) -> int:
    return SYSTEM if product.startswith("950") else 0


#: name -> (bytes per call from (args, output, product), where the figure comes from)
DEFAULT_ENTRIES: dict[str, tuple[Callable, str]] = {}


def _add(names: str, rule: Callable, source: str) -> None:
    for name in names.split():
        DEFAULT_ENTRIES[name] = (rule, source)


_add("mm addmm bmm baddbmm addbmm matmul linear", _fixed(20 * MiB),
     "20 MiB: MatMulV3 tiling RPC_WORKSIZE (ops-nn matmul_v3_base_tiling.cpp); ESTIMATE: "
     "nd2nz and split-K extras not added")
_add("convolution", _conv,
     "ESTIMATE: 16 MiB + input, weight, output padded to C0 (aclnn_convolution TransData)")
_add("convolution_backward", _conv_backward,
     "ESTIMATE: 16 MiB + grad_output, input, weight padded to C0 + float32 weight gradient")
_add("npu_fusion_attention _scaled_dot_product_flash_attention "
     "_scaled_dot_product_efficient_attention _scaled_dot_product_fused_attention_overrideable",
     _attention, "16 MiB + per-core buffers: FlashAttentionScoreTilingS1s2Bn2gs1 "
     "GetWorkspaceSize (ops-transformer); ESTIMATE: 48 cores")
_GRAD_SOURCE = ("20 MiB + 16 KiB + float32 q, k, v + per-core buffers: "
                "FlashAttentionScoreGradTiling"
     "S1s2Bn2gs1s2 GetWorkspaceSize (ops-transformer); ESTIMATE: 48 cores")
_add("_scaled_dot_product_flash_attention_backward _scaled_dot_product_efficient_attention_"
     "backward _scaled_dot_product_fused_attention_overrideable_backward", _attention_backward,
     _GRAD_SOURCE)
_add("npu_fusion_attention_grad", _npu_attention_backward, _GRAD_SOURCE)
_add("native_layer_norm", _fixed(32), "32 bytes: layer_norm_v4 BASE_WSP_SIZE (ops-nn)")
_add("native_layer_norm_backward", _layer_norm_backward,
     "16 MiB + cores * align8(columns) * 8: layer_norm_grad_v3_common_tiling (ops-nn); "
     "ESTIMATE: 48 cores")
_add("rms_norm npu_rms_norm rms_norm_backward npu_rms_norm_backward", _fixed(SYSTEM),
     "16 MiB: rms_norm_tiling SYS_WORKSPACE_SIZE, rms_norm_grad MIN_WORKSPACE_SIZE (ops-nn)")
_add("native_batch_norm _native_batch_norm_legit _native_batch_norm_legit_functional "
     "_native_batch_norm_legit_no_training native_batch_norm_backward", _fixed(SYSTEM),
     "16 MiB: batch_norm_v3 MINIMAL_WORKSPACE, batch_norm_grad_v3 BNG_WORKSPACE_RESERVED "
     "(ops-nn)")
_add("_softmax _log_softmax _safe_softmax _softmax_backward_data _log_softmax_backward_data",
     _softmax, "16 MiB on the 950 (softmax_v2 arch35 MINIMAL_WORKSPACE, ops-nn); ESTIMATE: "
     "0 elsewhere (no Ascend C tiling before arch35)")
_add("_foreach_norm", _fixed(SYSTEM), "16 MiB: foreach_reduce_tiling_func WORK_SPACE_SIZE "
     "(ops-nn)")
_add("_fused_adam_ _fused_adamw_ _fused_adam _fused_adamw", _fixed(SYSTEM),
     "16 MiB: the system workspace (fused_adamw_tiling, apply_adam_w_v2_tiling; ops-nn)")

# torch_npu's fused operators (ascend_memsim.torchsim.ops), where a tiling gives the figure
_add("npu_add_rms_norm", _fixed(SYSTEM + 256),
     "16 MiB + 256: add_rms_norm_tiling usrSize + sysWorkspaceSize (ops-nn)")
_add("npu_swiglu npu_swiglu_backward", _fixed(SYSTEM),
     "16 MiB: swi_glu_tiling WORKSPACE_BUFFER, SwiGlu and SwiGluGrad (ops-nn)")
_add("npu_dynamic_quant", _fixed(SYSTEM), "16 MiB: dynamic_quant_tiling SYS_WORKSPACE_SIZE "
     "(ops-nn)")
_add("npu_rotary_mul npu_rotary_mul_backward", _fixed(SYSTEM),
     "16 MiB: rope_rotate_half_tiling, rope_interleaved_tiling, rope_half_grad_tiling "
     "sysWorkspaceSize (ops-transformer)")
_add("npu_interleave_rope", _fixed(32), "32 bytes: interleave_rope_tiling "
     "DEFAULT_WORKSPACE_SIZE (ops-transformer)")
_add("npu_moe_token_unpermute npu_moe_token_unpermute_grad_v2 npu_moe_token_permute_grad_v2",
     _fixed(SYSTEM), "16 MiB: GetLibApiWorkSpaceSize / sysWorkspaceSize of moe_token_"
     "unpermute, moe_token_unpermute_grad, moe_token_permute_grad tilings (ops-transformer)")
_add("npu_moe_finalize_routing", _fixed(SYSTEM),
     "16 MiB: moe_finalize_routing_v2_tiling WORKSPACE_RESERVED (ops-transformer)")
_add("npu_grouped_matmul", _fixed(SYSTEM), "16 MiB: grouped_matmul_tiling SYS_WORKSPACE_SIZE "
     "(ops-transformer); ESTIMATE: the quantised templates' extra not added")
_add("npu_moe_gating_top_k_softmax", _fixed(0),
     "0: moe_gating_top_k_softmax tilings set workspaceSize_ = 0 (ops-transformer)")


def _expert_tokens(args: tuple, out: Any, product: str) -> int:
    # npu_moe_compute_expert_tokens(sorted_expert_for_source_row, num_expert)
    experts = args[1] if len(args) > 1 and isinstance(args[1], int) else 0
    return SYSTEM + experts * CORES * 4


_add("npu_moe_compute_expert_tokens", _expert_tokens,
     "16 MiB + experts * cores * 4: moe_compute_expert_tokens_tiling (ops-transformer); "
     "ESTIMATE: 48 cores")



def _numel(x: Any) -> int:
    n = 1
    for d in x.shape:
        n *= int(d)
    return n


def _lightning_indexer(args: tuple, out: Any, product: str) -> int:
    # LiCalcWorkspaceSize: per cube core, two 512 x 512 float32 score blocks, the top-k
    # decode buffers (2 * 8 * 2 * 2048 * 4) and their parameters (2 * 8 * 16 * 8)
    if not product.startswith("950"):
        return SYSTEM + CUBE_CORES * (512 * 512 * 4 * 2 + 2 * 8 * 2 * 2048 * 4 + 2 * 8 * 16 * 8)
    key = _tensor(args[1]) if len(args) > 1 else None
    s2 = int(key.shape[0 if key.dim() == 3 else 1]) if key is not None else 0
    return SYSTEM + CUBE_CORES * 4 * _up(s2, 128) * 4


def _sparse_flash_attention(args: tuple, out: Any, product: str) -> int:
    query = _tensor(args[0]) if args else None
    if query is None:
        return SYSTEM
    if product.startswith("950"):
        return SYSTEM + CUBE_CORES * 128 * 576 * query.element_size() * 3
    d = _up(int(query.shape[-1]), 32)
    score = 512 * 128            # s2 base (512) x the 128-row m base, the largest block
    per_core = (2 * (score * 4 + score * 2 + d * 128 * 4 + 128 * 4 + 128 * 4)
                + 4 * 512 * (512 + 64) * 2 + 4 * 128 * 4 * 2)
    return SYSTEM + CUBE_CORES * per_core


def _nd2nz(k: int, n: int, item: int) -> int:
    """MC2's copy of x2 in NZ: K and N aligned to 256 bytes of elements."""
    step = max(256 // item, 1)
    return _up(k, step) * _up(n, step) * item


def _all_gather_mm(args: tuple, out: Any, product: str) -> int:
    x1, x2 = (_tensor(a) for a in args[:2])
    if x1 is None or x2 is None:
        return SYSTEM
    item = x1.element_size()
    size = SYSTEM + _nd2nz(int(x1.shape[1]), int(x2.shape[1]), item)
    gathered = out[1] if isinstance(out, (tuple, list)) and len(out) > 1 else None
    if gathered is not None and gathered.numel() == 0 and len(args) > 3:
        # not an output: the gathered x1 goes to the workspace (isStorageGather false)
        size += _up(_numel(x1) * item, 512) * int(args[3])
    return size


def _mm_reduce_scatter(args: tuple, out: Any, product: str) -> int:
    x1, x2 = (_tensor(a) for a in args[:2])
    if x1 is None or x2 is None:
        return SYSTEM
    item = out.element_size() if _tensor(out) is not None else x1.element_size()
    product_bytes = _up(int(x1.shape[0]) * int(x2.shape[1]) * item, 512)
    return SYSTEM + _nd2nz(int(x1.shape[1]), int(x2.shape[1]), x1.element_size()) + product_bytes


def _alltoallv_gmm(args: tuple, out: Any, product: str) -> int:
    x = _tensor(args[0]) if args else None
    if x is None or not isinstance(out, (tuple, list)):
        return SYSTEM
    comm = int(out[0].shape[0]) * int(x.shape[1]) * x.element_size()
    return SYSTEM + comm + (comm if out[2] is None else 0)


def _gmm_alltoallv(args: tuple, out: Any, product: str) -> int:
    x = _tensor(args[0]) if args else None
    if x is None or not isinstance(out, (tuple, list)):
        return SYSTEM
    # FP16_DATASIZE: the tiling counts 2 bytes whatever the dtype
    return SYSTEM + int(x.shape[0]) * int(out[0].shape[1]) * 2


_add("npu_lightning_indexer", _lightning_indexer,
     "16 MiB + per cube core buffers: lightning_indexer_tiling LiCalcWorkspaceSize "
     "(ops-transformer); ESTIMATE: 24 cube cores")
_add("npu_sparse_flash_attention", _sparse_flash_attention,
     "16 MiB + per cube core buffers: SFAMlaTiling::GetWorkspaceSize (ops-transformer); "
     "ESTIMATE: 24 cube cores, the largest blocks, no flash decoding")
_add("npu_all_gather_base_mm", _all_gather_mm,
     "16 MiB + NZ copy of x2 + the gathered x1 unless output: all_gather_matmul_tiling "
     "MC2SetWorkspace (ops-transformer); ESTIMATE: bias copy not added")
_add("npu_mm_reduce_scatter_base", _mm_reduce_scatter,
     "16 MiB + NZ copy of x2 + the (M, N) product: matmul_reduce_scatter_tiling "
     "MC2SetWorkspaceReduceScatter (ops-transformer); ESTIMATE: bias copy not added")
_add("npu_alltoallv_gmm", _alltoallv_gmm,
     "16 MiB + A * H1 * itemsize (twice without permute_out): allto_allv_grouped_mat_mul "
     "tiling (ops-transformer)")
_add("npu_gmm_alltoallv", _gmm_alltoallv,
     "16 MiB + A * N1 * 2: grouped_mat_mul_allto_allv_tiling SetWorkspace (ops-transformer)")
_add("npu_convert_weight_to_int4pack", _fixed(0),
     "0: no device kernel, the packing is on the host (op-plugin "
     "ConvertWeightToINT4PackKernelNpuOpApi.cpp)")

_FOREACH = (_fixed(32), "32 bytes: foreach_tiling_class.h WORK_SPACE_SIZE, \"foreach(vector) "
                        "not need workspace\" (ops-nn)")


class WorkspaceTable:
    """The bytes of workspace an operator call takes: :data:`DEFAULT_ENTRIES`, then the
    ``overrides`` (operator name -> bytes per call; ``"*"`` for every operator the table
    does not cover), for ``product``. ``enabled`` False: no operator takes a workspace.

    >>> table = WorkspaceTable({"mm": "24MiB"})
    >>> table.source("mm"), table.source("cumsum") is None
    ('override: 25165824 bytes per call', True)
    """

    def __init__(self, overrides: Mapping[str, Any] | None = None, *,
                 product: str = "A2", enabled: bool = True) -> None:
        self.overrides = check_overrides(overrides or {}, "overrides")
        self.product, self.enabled = product, enabled
        self._rules: dict[str, Callable | None] = {}

    def _rule(self, name: str) -> Callable | None:
        rule = self._rules.get(name, False)
        if rule is False:
            if name in self.overrides:
                rule = _fixed(self.overrides[name])
            elif name in DEFAULT_ENTRIES:
                rule = DEFAULT_ENTRIES[name][0]
            elif name.startswith("_foreach_"):
                rule = _FOREACH[0]
            elif "*" in self.overrides:
                rule = _fixed(self.overrides["*"])
            else:
                rule = None
            self._rules[name] = rule
        # the table holds rules or None (False only marks a miss)
        return rule  # type: ignore[return-value]

    def size(self, name: str, args: tuple, out: Any) -> int | None:
        """Bytes the call of operator ``name`` takes (None: not in the table)."""
        rule = self._rule(name)
        return None if rule is None else int(rule(args, out, self.product))

    def source(self, name: str) -> str | None:
        """Where ``name``'s figure comes from (None: not in the table)."""
        if name in self.overrides:
            return f"override: {self.overrides[name]} bytes per call"
        if name in DEFAULT_ENTRIES:
            return DEFAULT_ENTRIES[name][1]
        if name.startswith("_foreach_"):
            return _FOREACH[1]
        if "*" in self.overrides:
            return f"override *: {self.overrides['*']} bytes per call"
        return None


def check_overrides(overrides: Any, where: str) -> dict[str, int]:
    """``overrides`` as {operator name: bytes}; WorkspaceTableError naming ``where`` and the
    entry when it is not a mapping of names to sizes."""
    if not isinstance(overrides, Mapping):
        raise WorkspaceTableError(f"{where}: a workspace table is a JSON object of operator "
                                  f"names and sizes, not {type(overrides).__name__}")
    if len(overrides) > _MAX_KEYS:
        raise WorkspaceTableError(f"{where}: more than {_MAX_KEYS} entries")
    out = {}
    for name, value in overrides.items():
        if not isinstance(name, str) or not _NAME.match(name):
            raise WorkspaceTableError(
                f"{where}: {str(name)[:80]!r} is not an operator name (letters, digits and _, "
                f"as the dispatcher names it: mm, _foreach_add_; or *)")
        if value.__class__ is int:
            size = value
        elif isinstance(value, str) and len(value) <= 64:
            try:
                size = parse_size(value)
            except (ValueError, TypeError) as e:
                raise WorkspaceTableError(f"{where}: {name}: {e}") from None
        else:
            raise WorkspaceTableError(f"{where}: {name}: the bytes must be an int or a size "
                                      f"such as \"16MiB\", not {str(value)[:80]!r}")
        if not 0 <= size <= _MAX_BYTES:
            raise WorkspaceTableError(f"{where}: {name}: {size} bytes is out of range "
                                      f"(0 to {_MAX_BYTES})")
        out[name] = size
    return out


def _no_duplicates(pairs: list) -> dict:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise WorkspaceTableError("an operator is named twice")
    return dict(pairs)


def load_overrides(path: str) -> dict[str, int]:
    """Read a workspace table file (a JSON object: operator name -> bytes per call).
    Reads at most :data:`MAX_FILE_BYTES` + 1 bytes.

    Raises:
        WorkspaceTableError: the file is too large, not UTF-8 JSON, not an object of
            operator names and sizes, or names an operator twice.
        OSError: the file cannot be read.
    """
    with open(path, "rb") as f:
        data = f.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise WorkspaceTableError(f"{path}: larger than {MAX_FILE_BYTES} bytes; a workspace "
                                  f"table is a short JSON object")
    try:
        table = json.loads(data.decode("utf-8"), object_pairs_hook=_no_duplicates,
                           parse_constant=_refuse_constant)
    except WorkspaceTableError as e:
        raise WorkspaceTableError(f"{path}: {e}") from None
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise WorkspaceTableError(f"{path}: not JSON ({str(e)[:120]})") from None
    return check_overrides(table, path)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a size")
