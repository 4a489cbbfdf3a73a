"""``torch_npu.utils.FlopsCounter`` (``torch_npu/utils/flops_count.py``): the floating-point
operations of the matmul-like operators the script runs on the device.

On the machine the count is a process-wide singleton (``FlopCountContext`` in
``Ascend/pytorch`` ``torch_npu/csrc/flopcount/``): op-plugin's kernels add their flops to it
(``FLOP_COUNT``) while it is enabled, to ``traversedCount`` always and to ``recordedCount``
unless paused; ``start`` enables it, ``stop`` disables it and resets both counts to 0,
``get_flops()`` is ``[recorded, traversed]``. Every ``FlopsCounter`` shares the one count.

Which operators count, and how (``torch_npu/csrc/flopcount/FlopCounter.cpp``, the
``FLOP_COUNT`` calls of op-plugin's ``ops/opapi``):

- ``mm``, ``addmm``, ``bmm``, ``baddbmm``, and ``matmul`` (the operators torch's ``matmul``,
  ``linear`` and their gradients become on fake tensors: ``mm``, ``bmm``, ``mv``, ``dot``;
  op-plugin's ``matmul`` counts each the same way): ``2 * K * (the output's elements)``;
- ``convolution`` and ``convolution_backward``: ``conv_flop`` / ``conv_backward_flop``
  (``2 * prod(out[2:]) * prod(w[2:]) * N * Cout * Cin``; a transposed convolution takes the
  whole output shape, as the source's code does);
- ``npu_fusion_attention`` and its gradient: the two (forward) or four (backward) batched
  products of attention over the heads, ``B * N * Sq * Skv * D`` each, with no factor 2
  (``sdpa_flop_count`` as the source writes it), the layouts unpacked to (B, N, S, D);
- the matmul-communication fusions (``npu_all_gather_base_mm``: ``world_size`` times the
  local product when gathering x1; ``npu_mm_reduce_scatter_base``,
  ``npu_mm_all_reduce_base``, ``npu_quant_mm_reduce_scatter``: the local product).

How the estimate sees them: while the count is enabled, a dispatch mode sits just below
the estimate's tracker (it sees every operator the tracker runs, forward and backward, on
the script's thread and autograd's) and adds the flops of each of the operators above whose
output or input is on the NPU. It goes when the count stops or the estimate ends.

DECISION: ``mv`` and ``dot`` count as torch_npu's ``matmul`` counts them, also when the
script calls them directly (on fake tensors the two cannot be told apart); threads the
script starts itself are not counted (their dispatch stacks are their own); the counts are
Python ints (the machine's are int64). ``with FlopsCounter():`` fails as it does in torch_npu
2.14.0, whose ``__enter__`` calls a method the class does not have (``count_enable``): use
``start()`` and ``stop()``.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import (
    TorchDispatchMode,
    _get_current_dispatch_mode_stack,
    _pop_mode,
    _push_mode,
)
from torch.utils._pytree import tree_leaves

from .._missing import not_modelled
from ..npu._state import active

__all__ = ["FlopsCounter"]

__getattr__ = not_modelled("torch_npu.utils.flops_count")


# -- the formulas (FlopCounter.cpp) ----------------------------------------------------------

def _shape(t: Any) -> list[int]:
    return [int(s) for s in t.shape]


def mm_flop(a: Any, b: Any) -> int:
    """``mm_flop``: 2 * K * the product's elements (batch dims broadcast, then M and N)."""
    da, db = a.dim(), b.dim()
    if da <= 0 or db <= 0:
        raise RuntimeError(f"matmul got error dimentions: ({da}, {db})")
    batch = torch.broadcast_shapes(tuple(a.shape[:max(da - 2, 0)]),
                                   tuple(b.shape[:max(db - 2, 0)]))
    out = [*batch, *([a.shape[-2]] if da >= 2 else []), *([b.shape[-1]] if db >= 2 else [])]
    return 2 * int(a.shape[-1]) * math.prod(int(s) for s in out)


def bmm_flop(a: Any, b: Any) -> int:
    """``bmm_flop``: B * M * N * 2 * K."""
    (n, m, k), (n2, k2, p) = _shape(a), _shape(b)
    if n != n2 or k != k2:
        raise RuntimeError("The tensor dimension is incorrect")
    return n * m * p * 2 * k


def _conv_count(x: list[int], w: list[int], out: list[int], transposed: bool) -> int:
    conv = out if transposed else out[2:]
    return math.prod(conv) * math.prod(w[2:]) * x[0] * w[0] * w[1] * 2


def _t(shape: list[int]) -> list[int]:
    # the source swaps the first two dims of a 4-D shape ({s1, s0, s2, s3})
    return [shape[1], shape[0], *shape[2:4]]


def conv_flop(x: Any, w: Any, transposed: bool, out: Any) -> int:
    return _conv_count(_shape(x), _shape(w), _shape(out), transposed)


def conv_backward_flop(grad_out: Any, x: Any, w: Any, transposed: bool, mask: Any,
                       grad_x: Any, grad_w: Any) -> int:
    flop = 0
    if mask[0] and grad_x is not None:
        flop += _conv_count(_shape(grad_out), _shape(w), _shape(grad_x), not transposed)
    if mask[1] and grad_w is not None:
        g, i, gw = _t(_shape(grad_out)), _t(_shape(x)), _t(_shape(grad_w))
        flop += _conv_count(g, i, gw, False) if transposed else _conv_count(i, g, gw, False)
    return flop


def _attention_shapes(q: list[int], k: list[int], v: list[int], heads: int, layout: str,
                      cum_q: Any, cum_k: Any) -> tuple[list[int], list[int], list[int]]:
    """``_unpack_flash_attention_nested_shapes``: query, key and value as (B, N, S, D)."""
    if heads == 0:
        raise RuntimeError("Divisor head_num may be 0, please check it.")
    q1, q2, k1, k2, v1, v2 = q[1], q[2], k[1], k[2], v[1], v[2]
    # grouped or multi-query attention: the key's and value's heads read as the query's
    if layout in ("SBH", "BSH", "BSND"):
        if q2 != k2 and q2 != v2:
            k2 = v2 = q2
    elif q1 != k1 and q1 != v1:
        k1 = v1 = q1
    if layout == "BSH":
        return ([q[0], heads, q1, q2 // heads], [k[0], heads, k1, k2 // heads],
                [v[0], heads, v1, v2 // heads])
    if layout == "SBH":
        return ([q1, heads, q[0], q2 // heads], [k1, heads, k[0], k2 // heads],
                [v1, heads, v[0], v2 // heads])
    if layout == "BNSD":
        return q, k, v
    if layout == "BSND":
        return [q[0], q2, q1, q[3]], [k[0], k2, k1, k[3]], [v[0], v2, v1, v[3]]
    if layout == "TND":
        if not cum_q or not cum_k or len(cum_q) != len(cum_k):
            raise RuntimeError("The actual_seq_qlen and actual_seq_kvlen must be given, of "
                               "the same size, when TND")
        b = len(cum_q)
        return [b, q1, q[0] // b, q2], [b, k1, k[0] // b, k2], [b, v1, v[0] // b, v2]
    raise RuntimeError(f"input_layout {layout!r} is not one of BSH, SBH, BNSD, BSND, TND")


def _same(what: str, *values: int) -> None:
    if len(set(values)) != 1:
        raise RuntimeError(f"the dim of {what} is not equal")


def attention_flop(p: dict, backward: bool) -> int:
    """``flash_attention_forward_flop`` / ``flash_attention_backward_flop``."""
    q, k, v = _attention_shapes(_shape(p["query"]), _shape(p["key"]), _shape(p["value"]),
                                int(p["head_num"]), str(p["input_layout"]),
                                p.get("actual_seq_qlen"), p.get("actual_seq_kvlen"))
    (b, h, sq, dq), (b2, h2, sk, d2), (b3, h3, s3, dv) = q, k, v
    _same("0 between q and kv", b, b2, b3)
    _same("1 between q and kv", h, h2, h3)
    _same("2 between k and v", sk, s3)
    _same("3 between q and k", dq, d2)
    if not backward:
        return b * h * sq * dq * sk + b * h * sq * sk * dv
    # the gradient of the output is taken to be query-shaped (the source's dy_shape)
    _same("3 between v and grad", dv, dq)
    return (b * h * sq * dv * sk + b * h * sk * sq * dv + b * h * sq * sk * dq
            + b * h * dq * sq * sk)


def _bound(func: Any, args: tuple, kwargs: dict) -> dict:
    """The call's arguments by their schema names (defaults for those not given). O(args)."""
    bound = {}
    for i, a in enumerate(func._schema.arguments):
        if i < len(args):
            bound[a.name] = args[i]
        elif a.name in kwargs:
            bound[a.name] = kwargs[a.name]
        elif a.has_default_value():
            bound[a.name] = a.default_value
    return bound


def _first(out: Any) -> Any:
    return out[0] if isinstance(out, (tuple, list)) else out


_aten = torch.ops.aten
#: aten operator -> its flops from (arguments by name, output)
_ATEN: dict[Any, Callable[[dict, Any], int]] = {
    _aten.mm.default: lambda p, out: mm_flop(p["self"], p["mat2"]),
    _aten.addmm.default: lambda p, out: mm_flop(p["mat1"], p["mat2"]),
    _aten.bmm.default: lambda p, out: bmm_flop(p["self"], p["mat2"]),
    _aten.baddbmm.default: lambda p, out: bmm_flop(p["batch1"], p["batch2"]),
    _aten.mv.default: lambda p, out: mm_flop(p["self"], p["vec"]),
    _aten.dot.default: lambda p, out: mm_flop(p["self"], p["tensor"]),
    _aten.convolution.default:
        lambda p, out: conv_flop(p["input"], p["weight"], bool(p["transposed"]), out),
    _aten.convolution_backward.default:
        lambda p, out: conv_backward_flop(p["grad_output"], p["input"], p["weight"],
                                          bool(p["transposed"]), p["output_mask"],
                                          out[0], out[1]),
}
#: torch_npu operator (its name in torch's npu namespace) -> its flops
_NPU: dict[str, Callable[[dict, Any], int]] = {
    "npu_fusion_attention": lambda p, out: attention_flop(p, False),
    "npu_fusion_attention_grad": lambda p, out: attention_flop(p, True),
    "npu_all_gather_base_mm":
        lambda p, out: mm_flop(p["self"], p["x2"]) * (
            int(p["world_size"]) if int(p.get("gather_index", 0)) == 0 else 1),
    "npu_mm_reduce_scatter_base": lambda p, out: mm_flop(p["self"], p["x2"]),
    "npu_mm_all_reduce_base": lambda p, out: mm_flop(p["x1"], p["x2"]),
    "npu_quant_mm_reduce_scatter": lambda p, out: mm_flop(p["self"], p["x2"]),
}


def _rule(func: Any) -> Callable[[dict, Any], int] | None:
    rule = _ATEN.get(func)
    if rule is None and getattr(func, "namespace", "") == "npu":
        rule = _NPU.get(func._schema.name.split("::")[-1])
    return rule


def _on_npu(out: Any, args: Any) -> bool:
    for value in (out, args):
        for t in tree_leaves(value):
            if isinstance(t, torch.Tensor):
                return t.device.type == "npu"
    return False


# -- the count (FlopCountContext) ------------------------------------------------------------

class _Count:
    """The process's one count: enabled, paused, recorded and traversed flops."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.enabled = self.paused = False
        self.recorded = self.traversed = 0
        self.mode: _FlopMode | None = None

    def add(self, flops: int) -> None:
        with self.lock:
            if not self.enabled:
                return
            self.traversed += flops
            if not self.paused:
                self.recorded += flops


_count = _Count()


class _FlopMode(TorchDispatchMode):
    """Adds each counted operator's flops to the count (below the estimate's tracker).
    O(1) a call for an operator that does not count (a dict lookup), O(its arguments) for
    one that does."""

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        rule = _rule(func)
        if rule is not None and _on_npu(out, args):
            _count.add(rule(_bound(func, args, kwargs), out))
        return out


def _install(session: Any) -> None:
    """Put the counting mode just below the session's tracker on this thread's stack (the
    modes above it popped and pushed back in their order); nothing when the tracker is not
    on this thread's stack. O(modes on the stack)."""
    if _count.mode is not None:
        return
    stack = _get_current_dispatch_mode_stack()
    tracker = session._tracker
    if not any(m is tracker for m in stack):
        return
    above = []
    while True:
        mode = _pop_mode()
        above.append(mode)
        if mode is tracker:
            break
    counter = _FlopMode()
    _push_mode(counter)
    for mode in reversed(above):
        _push_mode(mode)
    _count.mode = counter
    session.on_exit(_end)


def _remove() -> None:
    """Take the counting mode off this thread's stack, wherever it is. O(modes)."""
    counter, _count.mode = _count.mode, None
    if counter is None:
        return
    stack = _get_current_dispatch_mode_stack()
    if not any(m is counter for m in stack):
        return
    above = []
    while True:
        mode = _pop_mode()
        if mode is counter:
            break
        above.append(mode)
    for mode in reversed(above):
        _push_mode(mode)


def _end() -> None:
    """The estimate ends: the mode goes and the count is reset, as a new process has it."""
    _remove()
    with _count.lock:
        _count.enabled = _count.paused = False
        _count.recorded = _count.traversed = 0


class FlopsCounter:
    """torch_npu's flop counter: ``start``, ``pause``, ``resume``, ``get_flops``, ``stop``
    (see the module's docstring for what counts)."""

    def start(self) -> None:
        """Enable the count (what is counted from now on adds to it)."""
        with _count.lock:
            _count.enabled = True
        session = active()
        if session is not None:
            _install(session)

    def stop(self) -> None:
        """Disable the count and reset it to 0."""
        _remove()
        with _count.lock:
            _count.enabled = _count.paused = False
            _count.recorded = _count.traversed = 0

    def pause(self) -> None:
        """Count only ``traversed`` until :meth:`resume`."""
        with _count.lock:
            _count.paused = True

    def resume(self) -> None:
        with _count.lock:
            _count.paused = False

    def get_flops(self) -> list[int]:
        """``[recorded, traversed]``: the flops counted while not paused, and all of them."""
        with _count.lock:
            return [_count.recorded, _count.traversed]

    def __enter__(self) -> None:
        # torch_npu 2.14.0's __enter__ calls self.count_enable(), which no class defines
        raise AttributeError("'FlopsCounter' object has no attribute 'count_enable'")

    def __exit__(self) -> None:
        raise AttributeError("'FlopsCounter' object has no attribute 'count_disable'")
