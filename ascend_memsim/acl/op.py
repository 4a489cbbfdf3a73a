"""acl.op: single operators: attributes, execute_v2, handles, cast. Kernels are Python
functions (:func:`ascend_memsim.compute.ops.register_op`; built-in numpy kernels).

Signatures and return shapes follow hicann/runtime python/pyACL/op/op.cpp.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..memory.args import as_int
from ._face import compute as _compute
from ._face import face as _face
from ._face import face_dir as _face_dir


@_face()
def set_model_dir(model_dir: str) -> None:
    _compute().set_model_dir(model_dir)


@_face(0, bare=True)
def create_attr() -> int:
    return _compute().create_attr()


@_face(None, bare=True)
def destroy_attr(attr: int) -> None:
    _compute().destroy_attr(attr)


def _setter(kind: str) -> Callable[..., int]:
    @_face()
    def set_attr(attr: int, attr_name: str, value: Any) -> None:
        _compute().set_attr(attr, kind, attr_name, value)

    set_attr.__name__ = set_attr.__qualname__ = f"set_attr_{kind}"
    set_attr.__doc__ = f"aclopSetAttr{kind.title().replace('_', '')}: ``ret``."
    return set_attr


def _typed_setter(kind: str) -> Callable[..., tuple[int, int]]:
    plain = _setter(kind)

    def set_attr(attr: int, attr_name: str, value: Any, /) -> tuple[int, int]:
        return attr, plain(attr, attr_name, value)

    set_attr.__name__ = set_attr.__qualname__ = f"set_attr_{kind}"
    set_attr.__doc__ = (f"aclopSetAttr{kind.title().replace('_', '')}: ``attr, ret`` (pyacl "
                        f"returns the attr handle too).")
    return set_attr


_ATTR_SETTERS = [_setter(kind) for kind in (
    "bool", "int", "float", "string", "list_bool", "list_int", "list_float", "list_string",
    "list_list_int")] + [_typed_setter("data_type"), _typed_setter("list_data_type")]


@_face()
def execute_v2(op_type: str, input_desc: list, inputs: list, output_desc: list, outputs: list,
               attr: int, stream: int) -> None:
    """aclopExecuteV2: queued on ``stream``; the kernel runs when the stream is synchronised."""
    _compute().execute(op_type, input_desc, inputs, output_desc, outputs, attr, stream)


@_face()
def execute(op_type: str, input_desc: list, inputs: list, output_desc: list,
                outputs: list, attr: int, stream: int) -> None:
    """aclopExecute (deprecated): as execute_v2."""
    _compute().execute(op_type, input_desc, inputs, output_desc, outputs, attr, stream,
                       call="aclopExecute")




@_face(0)
def create_handle(op_type: str, input_desc: list, output_desc: list, op_attr: int) -> int:
    return _compute().create_handle(op_type, input_desc, output_desc, op_attr)


@_face()
def execute_with_handle(handle: int, inputs: list, outputs: list, stream: int) -> None:
    _compute().execute_with_handle(handle, inputs, outputs, stream)


@_face(None, bare=True)
def destroy_handle(handle: int) -> None:
    _compute().destroy_handle(handle)


@_face()
def cast(src_desc: int, src_buffer: int, dst_desc: int, dst_buffer: int, truncate: int,
         stream: int) -> None:
    _compute().cast(src_desc, src_buffer, dst_desc, dst_buffer, truncate, stream)


@_face(0)
def create_handle_for_cast(src_desc: int, dst_desc: int, truncate: int) -> int:
    as_int(truncate, "truncate", 0, 255)
    return _compute().create_handle("Cast", [src_desc], [dst_desc], 0)


_EXPORTS = (
    set_model_dir, create_attr, destroy_attr,
    *_ATTR_SETTERS, execute_v2, execute, create_handle, execute_with_handle, destroy_handle,
    cast, create_handle_for_cast,
)
# The generated queries and setters become module attributes, as pyacl has them.
globals().update({fn.__name__: fn for fn in _EXPORTS})
if TYPE_CHECKING:
    # (the checker does not see the names made above)
    def __getattr__(name: str) -> Any: ...
__all__ = [fn.__name__ for fn in _EXPORTS]

__dir__ = _face_dir(globals())
