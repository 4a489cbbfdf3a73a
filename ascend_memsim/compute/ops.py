"""Operators: the kernel registry, operator attributes (aclopAttr) and aclopExecuteV2.

A kernel is a Python function over numpy arrays, ``fn(inputs, attrs)`` (or
``fn(inputs, attrs, outputs)`` to be told each output's shape and dtype). Register one for the
whole process with :func:`register_op` (also a decorator), for a block with
:func:`registered_ops`, or for one test with ``@pytest.mark.memsim(ops={...})``. Registered
kernels override the built-in ones (:mod:`.kernels`). A kernel registered with device
variables (``register_op(name, fn, variables=[...])``, see :mod:`.symbols`) is called
``fn(inputs, attrs, outputs, variables)``.

A kernel may declare the workspace its operator takes on the device (``workspace``: bytes,
or ``workspace(inputs, attrs) -> bytes`` given each input's ``shape`` and ``dtype``; as
``register_op``'s argument or the function's ``workspace`` attribute). On a stream with a
registered allocator (11-08) it is taken from that allocator at each launch
(:func:`ascend_memsim.compute.launch.launch`). Built-in kernels take none.

The simulator needs no compiled ``.om`` operator models: the kernels stand in for them.
DECISION: ``acl.op.set_model_dir`` records the directory and succeeds even when it does not
exist (the vendor's samples point it at models built with ``atc``, which the simulator does
not read); an op type with no kernel is ACL_ERROR_OP_NOT_FOUND 100024, what the runtime
returns when no operator model matches.
"""

from __future__ import annotations

import contextlib
import inspect
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from ..memory.args import SIZE_MAX, as_int, as_str
from ..memory.errors import InvalidArgument, InvalidArgumentType, KernelError, OpNotFound
from .kernels import BUILTIN_KERNELS
from .symbols import DeviceVariable
from .tensors import Handle, data_type

__all__ = ["register_op", "unregister_op", "registered_ops", "find_kernel", "OpAttr",
           "OpHandle", "Kernel", "set_attr"]


@dataclass(frozen=True)
class Kernel:
    """A registered kernel: the function and whether it takes the output specs."""

    name: str
    fn: Callable[..., Any]
    wants_outputs: bool
    builtin: bool = False
    #: the device variables it uses (11-11): it is called with them as a fourth argument
    variables: tuple[DeviceVariable, ...] = ()
    #: the workspace the operator takes: bytes, or a function of (inputs, attrs)
    workspace: int | Callable[..., Any] = 0

    def __call__(self, inputs: list[Any], attrs: dict[str, Any], outputs: list[Any],
                 variables: dict[str, Any] | None = None) -> Any:
        if self.variables:
            return self.fn(inputs, attrs, outputs, variables)
        if self.wants_outputs:
            return self.fn(inputs, attrs, outputs)
        return self.fn(inputs, attrs)

    def workspace_for(self, inputs: list[Any], attrs: dict[str, Any]) -> int:
        """The workspace bytes of one launch (``inputs``: each input's shape and dtype).

        Raises:
            KernelError: the workspace function raised or gave no size.
        """
        workspace = self.workspace
        if not callable(workspace):
            return workspace
        try:
            return as_int(workspace(inputs, dict(attrs)), "workspace", 0, SIZE_MAX)
        except Exception as error:
            raise KernelError(f"the workspace function of kernel {self.name!r} failed: "
                              f"{type(error).__name__}: {error}") from error


def _variables(name: str, variables: object) -> tuple[DeviceVariable, ...]:
    """The kernel's device variables: DeviceVariable objects with distinct names."""
    if not isinstance(variables, (list, tuple)):
        raise InvalidArgumentType(f"the variables of {name!r} must be a list of device "
                                  f"variables, got {type(variables).__name__}")
    if not all(isinstance(v, DeviceVariable) for v in variables):
        raise InvalidArgumentType(f"the variables of {name!r} must come from "
                                  f"ascend_memsim.compute.symbols.device_variable")
    names = [v.name for v in variables]
    if len(set(names)) != len(names):
        raise InvalidArgument(f"the variables of {name!r} have one name twice: {names}")
    return tuple(variables)


def _kernel(name: str, fn: Callable[..., Any], builtin: bool = False,
            variables: tuple[DeviceVariable, ...] = (), workspace: object = None) -> Kernel:
    if not callable(fn):
        raise InvalidArgumentType(f"the kernel for {name!r} must be callable, got "
                                  f"{type(fn).__name__}")
    if workspace is None:
        workspace = getattr(fn, "workspace", 0)
    if not callable(workspace):
        workspace = as_int(workspace, f"the workspace of kernel {name!r}", 0, SIZE_MAX)
    if variables:
        return Kernel(name, fn, True, builtin, variables, workspace)
    params: Mapping[str, inspect.Parameter]
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        params = {}
    positional = [p for p in params.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    wants = len(positional) >= 3 or any(p.kind is p.VAR_POSITIONAL for p in params.values())
    return Kernel(name, fn, wants, builtin, workspace=workspace)


_lock = threading.RLock()
_registry: dict[str, Kernel] = {}
_BUILTINS = {name: _kernel(name, fn, builtin=True) for name, fn in BUILTIN_KERNELS.items()}


def _check_name(name: object) -> str:
    return as_str(name, "an op type")


def register_op(name: str, fn: Callable[..., Any] | None = None, *,
                variables: list[DeviceVariable] | tuple[DeviceVariable, ...] = (),
                workspace: int | Callable[..., Any] | None = None) -> Callable[..., Any]:
    """Make ``fn(inputs, attrs)`` the kernel of op type ``name`` for the whole process.

    Without ``fn`` it is a decorator: ``@register_op("MyAdd")``. Returns ``fn``. With
    ``variables`` (device variables, :func:`~ascend_memsim.compute.symbols.device_variable`)
    the kernel is ``fn(inputs, attrs, outputs, variables)``, ``variables`` a dict of
    writable uint8 arrays by name, stored back to device memory when it returns.
    ``workspace``: the device workspace each launch takes, in bytes, or
    ``workspace(inputs, attrs) -> bytes`` (default: ``fn.workspace`` if set, else 0).
    """
    name = _check_name(name)
    used = _variables(name, variables)
    if fn is None:
        return lambda f: register_op(name, f, variables=used, workspace=workspace)
    kernel = _kernel(name, fn, variables=used, workspace=workspace)
    with _lock:
        _registry[name] = kernel
    return fn


def unregister_op(name: str) -> None:
    """Forget the kernel registered for ``name`` (a built-in one comes back)."""
    with _lock:
        _registry.pop(_check_name(name), None)


@contextlib.contextmanager
def registered_ops(ops: Mapping[str, Callable[..., Any]] | None = None,
                   **more: Callable[..., Any]) -> Iterator[None]:
    """Register kernels for the ``with`` block only; what was registered before comes back."""
    wanted = {**(ops or {}), **more}
    kernels = {_check_name(name): _kernel(name, fn) for name, fn in wanted.items()}
    with _lock:
        saved = {name: _registry.get(name) for name in kernels}
        _registry.update(kernels)
    try:
        yield
    finally:
        with _lock:
            for name, old in saved.items():
                if old is None:
                    _registry.pop(name, None)
                else:
                    _registry[name] = old


def find_kernel(op_type: object) -> Kernel:
    """The kernel for ``op_type`` (registered first, then built-in).

    Raises:
        InvalidArgumentType: not a str. OpNotFound: no kernel.
    """
    name = _check_name(op_type)
    kernel = _registry.get(name) or _BUILTINS.get(name)
    if kernel is None:
        raise OpNotFound(
            f"no kernel for op type {name!r} (the simulator runs Python kernels instead of "
            f".om operator models). Register one: ascend_memsim.register_op({name!r}, "
            f"fn) with fn(inputs, attrs) -> output array(s); or "
            f"`with ascend_memsim.registered_ops({name}=fn):`; or in a test "
            f"@pytest.mark.memsim(ops={{{name!r}: fn}}). Built-in: "
            f"{', '.join(sorted(_BUILTINS))}")
    return kernel


@dataclass(eq=False)
class OpAttr(Handle):
    """aclopAttr: named attribute values handed to the kernel as a dict."""

    values: dict[str, Any] = field(default_factory=dict)
    made_by = "aclopCreateAttr"
    destroyed_by = "aclopDestroyAttr"
    kind = "op attr"


@dataclass(eq=False)
class OpHandle(Handle):
    """aclopHandle: an op type, its descriptors and attributes fixed at creation."""

    op_type: str = ""
    kernel: Kernel | None = None
    inputs: tuple[Any, ...] = ()
    outputs: tuple[Any, ...] = ()
    attrs: dict[str, Any] = field(default_factory=dict)
    made_by = "aclopCreateHandle"
    destroyed_by = "aclopDestroyHandle"
    kind = "op handle"


def _number(value: object, what: str, kind: type) -> Any:
    if kind is float:
        if isinstance(value, bool) or (not isinstance(value, (int, float)) and not hasattr(
                value, "__float__")):
            raise InvalidArgumentType(f"{what} must be a float, got {type(value).__name__}")
        try:
            return float(value)
        except OverflowError:  # an int past the double range
            raise InvalidArgument(f"{what} {value} is too large for a float") from None
        except (TypeError, ValueError) as error:  # an array of several values, a bad __float__
            raise InvalidArgumentType(f"{what} must be a float, got {type(value).__name__} "
                                      f"({error})") from None
    if kind is bool:
        # pyacl: set_attr_bool(attr, name, value) parses value as uint8 ("ksB").
        if isinstance(value, bool):
            return value
        return bool(as_int(value, what, 0, 255))
    return as_int(value, what, -(1 << 63), (1 << 63) - 1)


def _values(value: object, what: str) -> list[Any]:
    # pyop_methods: a list; a 1-D numpy array is still accepted (with a warning in pyacl).
    if type(value).__name__ == "ndarray" and getattr(value, "ndim", 0) == 1:
        return list(cast(Any, value).tolist())
    if not isinstance(value, list):
        raise InvalidArgumentType(f"{what} must be a list, got {type(value).__name__}")
    return value


def set_attr(attr: OpAttr, kind: str, name: object, value: object) -> None:
    """aclopSetAttr<kind>: check the value, then store it (a failed call stores nothing).

    ``kind``: bool, int, float, string, list_bool, list_int, list_float, list_string,
    list_list_int, data_type, list_data_type.

    Raises:
        InvalidArgument, InvalidArgumentType: a bad name or value.
    """
    name = as_str(name, "attribute name")
    what = f"attribute {name!r}"
    scalar = {"bool": bool, "int": int, "float": float}
    if kind in scalar:
        checked: Any = _number(value, what, scalar[kind])
    elif kind == "string":
        checked = as_str(value, what, empty=True)
    elif kind.startswith("list_") and kind[5:] in scalar:
        checked = [_number(v, f"{what}[{i}]", scalar[kind[5:]])
                   for i, v in enumerate(_values(value, what))]
    elif kind == "list_string":
        checked = _values(value, what)
        if not all(isinstance(v, str) for v in checked):
            raise InvalidArgumentType(f"{what} must be a list of str")
        checked = list(checked)
    elif kind == "list_list_int":
        checked = [[_number(v, f"{what}[{i}][{j}]", int)
                    for j, v in enumerate(_values(row, f"{what}[{i}]"))]
                   for i, row in enumerate(_values(value, what))]
    elif kind == "data_type":
        checked = data_type(value, what)
    elif kind == "list_data_type":
        checked = [data_type(v, f"{what}[{i}]") for i, v in enumerate(_values(value, what))]
    else:  # pragma: no cover - the face names the kinds
        raise InvalidArgument(f"unknown attribute kind {kind}")
    attr.values[name] = checked
