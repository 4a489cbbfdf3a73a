"""acl.util: conversions between host objects and pointers (plain values, no code: errors
raise the core's exceptions, as pyacl raises on a bad argument), and host threads.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..data import pointers as _pointers
from ..runtime.active import current_runtime
from ._face import face as _face
from ._face import face_dir as _face_dir
from ._pyacl import bytes_object, numpy_shape, numpy_type


def bytes_to_ptr(data: bytes, /) -> int:
    """The address of a bytes object's buffer (registered; see ascend_memsim.data.host).
    ``bytes`` only, as pyacl (a bytearray is refused)."""
    return _pointers.bytes_to_ptr(current_runtime(), bytes_object(data))


def numpy_to_ptr(array: Any, /) -> int:
    """The address of a numpy array's data."""
    return _pointers.numpy_to_ptr(current_runtime(), array)


def numpy_contiguous_to_ptr(array: Any, /) -> tuple[int, Any]:
    """``ptr, array``: the address of a C-contiguous version of ``array`` (the array itself
    if it is one, else a copy) and that array, which the caller keeps alive while it uses
    the address (numpy_convert.cpp ``WrapNumpyContiguousToPtr``: PyArray_GETCONTIGUOUS)."""
    return _pointers.numpy_contiguous_to_ptr(current_runtime(), array)


def ptr_to_bytes(ptr: int, size: int, /) -> bytes:
    """``size`` bytes of a live malloc_host block or registered buffer at ``ptr`` (a raw
    host address raises InvalidPointer; memcpy takes those)."""
    return _pointers.ptr_to_bytes(current_runtime(), ptr, size)


def ptr_to_numpy(ptr: int, shape: tuple, np_type: int, /) -> Any:
    """A numpy array over a live malloc_host block or registered buffer at ``ptr``:
    ``shape`` a tuple of ints, ``np_type`` a numpy type number (``np.dtype(np.float32).num``),
    as pyacl takes them (a raw host address raises InvalidPointer)."""
    return _pointers.ptr_to_numpy(current_runtime(), ptr, numpy_shape(shape),
                                  numpy_type(np_type))


@_face(0)
def start_thread(fn: Callable[..., Any], args: Any) -> int:
    """``thread_id, ret``: a thread running ``fn(args)`` (``fn()`` when args is None)."""
    return current_runtime().callbacks.start_thread(fn, args)


@_face()
def stop_thread(thread_id: int) -> None:
    """Join the thread (``ret``); RuntimeError when its function raised, as pyacl."""
    current_runtime().callbacks.stop_thread(thread_id)


_EXPORTS = (
    bytes_to_ptr, numpy_to_ptr, numpy_contiguous_to_ptr, ptr_to_bytes, ptr_to_numpy,
    start_thread, stop_thread,
)
__all__ = [fn.__name__ for fn in _EXPORTS]

__dir__ = _face_dir(globals())
