"""Built-in numpy kernels for common operators, so operator samples run with no registration.

Each kernel is ``fn(inputs, attrs, outputs)``: the input arrays, the attribute dict and the
:class:`~ascend_memsim.compute.launch.OutputSpec` of each output; it returns the output
array(s) in the outputs' dtypes. Semantics follow the operator specs of the CANN operator
library (Add/Sub/Mul broadcast; MatMul's ``transpose_x1``/``transpose_x2``, BatchMatMul's
``adj_x1``/``adj_x2``; Slice's ``offsets``/``size`` inputs with -1 meaning "to the end";
ConcatD's ``concat_dim``; SoftmaxV2's ``axes``; ReduceSum's ``axes`` input and ``keep_dims``).
DECISION: integer Div floors (numpy ``floor_divide``); results are cast to the output
descriptor's dtype, so a float16 Add computes in float16.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .tensors import require_numpy

__all__ = ["BUILTIN_KERNELS"]


def _cast(result: Any, outputs: Any) -> Any:
    return require_numpy().asarray(result).astype(outputs[0].dtype, copy=False)


def _binary(fn_name: str) -> Callable[..., Any]:
    def kernel(inputs: Any, attrs: Any, outputs: Any) -> Any:
        np = require_numpy()
        fn = getattr(np, fn_name)
        dtype = outputs[0].dtype
        if fn_name != "true_divide":
            return fn(inputs[0], inputs[1]).astype(dtype, copy=False)
        if np.issubdtype(dtype, np.integer):
            fn = np.floor_divide
        with np.errstate(all="ignore"):
            return _cast(fn(inputs[0], inputs[1]), outputs)
    kernel.__name__ = fn_name
    return kernel


def _cast_kernel(inputs: Any, attrs: Any, outputs: Any) -> Any:
    with require_numpy().errstate(all="ignore"):
        return inputs[0].astype(outputs[0].dtype)


def _relu(inputs: Any, attrs: Any, outputs: Any) -> Any:
    np = require_numpy()
    return _cast(np.maximum(inputs[0], 0), outputs)


def _matmul(inputs: Any, attrs: Any, outputs: Any) -> Any:
    np = require_numpy()
    a, b = inputs[0], inputs[1]
    if attrs.get("transpose_x1", False):
        a = a.T
    if attrs.get("transpose_x2", False):
        b = b.T
    out = np.matmul(a, b)
    if len(inputs) > 2:
        out = out + inputs[2]
    return _cast(out, outputs)


def _batch_matmul(inputs: Any, attrs: Any, outputs: Any) -> Any:
    np = require_numpy()
    a, b = inputs[0], inputs[1]
    if attrs.get("adj_x1", False):
        a = np.swapaxes(a, -1, -2)
    if attrs.get("adj_x2", False):
        b = np.swapaxes(b, -1, -2)
    return _cast(np.matmul(a, b), outputs)


def _transpose(inputs: Any, attrs: Any, outputs: Any) -> Any:
    perm = attrs.get("perm")
    if perm is None and len(inputs) > 1:
        perm = [int(p) for p in inputs[1].reshape(-1)]
    return _cast(require_numpy().transpose(inputs[0], perm), outputs)


def _slice(inputs: Any, attrs: Any, outputs: Any) -> Any:
    x = inputs[0]
    if len(inputs) >= 3:
        begin = [int(v) for v in inputs[1].reshape(-1)]
        size = [int(v) for v in inputs[2].reshape(-1)]
    else:
        begin, size = list(attrs["offsets"]), list(attrs["size"])
    index = tuple(slice(b, None if s == -1 else b + s) for b, s in zip(begin, size))
    return _cast(x[index], outputs)


def _concat(inputs: Any, attrs: Any, outputs: Any) -> Any:
    np = require_numpy()
    if "concat_dim" in attrs or "axis" in attrs:
        axis, tensors = attrs.get("concat_dim", attrs.get("axis")), inputs
    else:
        # Concat (not ConcatD): the first input is the axis.
        axis, tensors = int(inputs[0].reshape(-1)[0]), inputs[1:]
    return _cast(np.concatenate(tensors, axis=int(axis)), outputs)


def _concat_v2(inputs: Any, attrs: Any, outputs: Any) -> Any:
    """ConcatV2: the last input is the axis (ConcatV2D: the ``concat_dim`` attribute)."""
    if "concat_dim" in attrs or "axis" in attrs:
        return _concat(inputs, attrs, outputs)
    axis = int(inputs[-1].reshape(-1)[0])
    return _cast(require_numpy().concatenate(inputs[:-1], axis=axis), outputs)


def _softmax(inputs: Any, attrs: Any, outputs: Any) -> Any:
    np = require_numpy()
    axes = attrs.get("axes", attrs.get("axis", [-1]))
    axes = tuple(axes) if isinstance(axes, (list, tuple)) else (axes,)
    x = inputs[0].astype(np.float64)
    e = np.exp(x - x.max(axis=axes, keepdims=True))
    return _cast(e / e.sum(axis=axes, keepdims=True), outputs)


def _reduce_sum(inputs: Any, attrs: Any, outputs: Any) -> Any:
    np = require_numpy()
    axes: tuple[int, ...] | None
    if len(inputs) > 1:
        axes = tuple(int(a) for a in inputs[1].reshape(-1))
    else:
        axes = attrs.get("axes")
        axes = tuple(axes) if axes is not None else None
    if axes == ():
        axes = None  # an empty axes list reduces over every axis
    keep = bool(attrs.get("keep_dims", False))
    return _cast(np.sum(inputs[0], axis=axes, keepdims=keep), outputs)


BUILTIN_KERNELS: dict[str, Callable[..., Any]] = {
    "Add": _binary("add"), "AddV2": _binary("add"), "Sub": _binary("subtract"),
    "Mul": _binary("multiply"), "Div": _binary("true_divide"),
    "RealDiv": _binary("true_divide"), "Maximum": _binary("maximum"),
    "Minimum": _binary("minimum"), "Cast": _cast_kernel, "Relu": _relu,
    "MatMul": _matmul, "MatMulV2": _matmul, "BatchMatMul": _batch_matmul,
    "BatchMatMulV2": _batch_matmul, "Transpose": _transpose, "TransposeD": _transpose,
    "Slice": _slice, "SliceD": _slice, "Concat": _concat, "ConcatD": _concat,
    "ConcatV2": _concat_v2, "ConcatV2D": _concat_v2, "Softmax": _softmax, "SoftmaxV2": _softmax,
    "ReduceSum": _reduce_sum, "ReduceSumD": _reduce_sum,
}
