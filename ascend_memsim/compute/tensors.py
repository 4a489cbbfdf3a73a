"""Tensor descriptors, data buffers and the handle table of the compute plane.

pyacl hands these out as ints (``acl.create_tensor_desc`` returns the aclTensorDesc pointer,
``acl.create_data_buffer`` the aclDataBuffer pointer; hicann/runtime
python/pyACL/py_init_acl.cpp builds them with ``Py_BuildValue("k", ptr)``). Here each is an
object in one :class:`HandleTable` per runtime, keyed by an int that is never a memory
address. DECISION: a destroyed or unknown handle is ACL_ERROR_RT_INVALID_HANDLE (107017), as
for streams and contexts; the C API would read freed memory. Handles never destroyed are
reported as leaks at aclFinalize.

numpy is not needed here; only the kernels need it (:func:`numpy_dtype`).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..memory.args import SIZE_MAX, as_int
from ..memory.constants import DATA_TYPE_BITS, DataType, Format
from ..memory.errors import (
    FeatureNotSupported,
    InvalidArgument,
    InvalidArgumentType,
    InvalidHandle,
    UnsupportedDataType,
)
from ..memory.sites import capture_site

__all__ = [
    "HANDLE_BASE", "Handle", "Layout", "TensorDesc", "DataBuffer", "HandleTable", "numpy_dtype",
    "data_type", "require_numpy", "as_list",
]

#: Compute handles are ints from here, 64 apart (streams: 0x1_0000_0000, contexts: 0x2_...).
HANDLE_BASE = 0x3_0000_0000

#: aclDataType -> numpy dtype name, for the types numpy has.
NUMPY_NAMES: dict[DataType, str] = {
    DataType.FLOAT: "float32", DataType.FLOAT16: "float16", DataType.INT8: "int8",
    DataType.INT32: "int32", DataType.UINT8: "uint8", DataType.INT16: "int16",
    DataType.UINT16: "uint16", DataType.UINT32: "uint32", DataType.INT64: "int64",
    DataType.UINT64: "uint64", DataType.DOUBLE: "float64", DataType.BOOL: "bool",
    DataType.COMPLEX64: "complex64", DataType.COMPLEX128: "complex128",
}
_BY_NUMPY_NAME = {name: dt for dt, name in NUMPY_NAMES.items()}


def require_numpy() -> Any:
    """The numpy module, or FeatureNotSupported saying how to get it."""
    try:
        import numpy
    except ImportError:  # pragma: no cover - numpy is in the test extra
        raise FeatureNotSupported("operator kernels and models compute with numpy, which is "
                                  "not installed: pip install 'ascend-memsim[numpy]'") from None
    return numpy


_DTYPES: dict[DataType, Any] = {}


def numpy_dtype(dtype: DataType) -> Any:
    """The numpy dtype of an aclDataType. Raises UnsupportedDataType when numpy has none."""
    found = _DTYPES.get(dtype)
    if found is not None:
        return found
    name = NUMPY_NAMES.get(dtype)
    if name is None:
        raise UnsupportedDataType(f"{dtype.name} (aclDataType {int(dtype)}) has no numpy "
                                  f"dtype, so the simulator's kernels cannot compute in it")
    found = _DTYPES[dtype] = require_numpy().dtype(name)
    return found


def data_type(value: object, what: str = "data_type") -> DataType:
    """An aclDataType from its int value, or (for stand-ins) a numpy dtype name.

    Raises:
        InvalidArgument: not a known aclDataType.
    """
    if isinstance(value, str):
        found = _BY_NUMPY_NAME.get(value.lower())
        if found is None and value.upper().removeprefix("ACL_") in DataType.__members__:
            found = DataType[value.upper().removeprefix("ACL_")]
        if found is None:
            raise InvalidArgument(f"{what} {value!r} is neither a numpy dtype name "
                                  f"({', '.join(sorted(_BY_NUMPY_NAME))}) nor an aclDataType")
        return found
    number = as_int(value, what, -(1 << 31), (1 << 31) - 1)
    try:
        return DataType(number)
    except ValueError:
        raise InvalidArgument(f"{what} {number} is not an aclDataType") from None


def as_list(value: object, what: str) -> list[Any]:
    """A Python list argument (the binding checks PyList_Check: a tuple is refused)."""
    if not isinstance(value, list):
        raise InvalidArgumentType(f"{what} must be a list, got {type(value).__name__}")
    return value


@dataclass(eq=False)
class Handle:
    """What every compute handle has: its int, its kind and where it was made."""

    handle: int = field(init=False, default=0)
    site: Any = field(init=False, default=None, repr=False)
    #: the C call that makes it and the one that destroys it (for leak reports)
    made_by = "aclCreate"
    destroyed_by = "aclDestroy"
    kind = "handle"
    #: a handle describes memory (a data buffer's, a picture's) or holds none of its own: a
    #: leak report lists it apart and counts no bytes for it (checks/reports.py holds_memory)
    holds_memory = False

    # What the sanitizer's leak report reads (as of a block).
    @property
    def ptr(self) -> int:
        return self.handle

    @property
    def size(self) -> int:
        return 0

    @property
    def extra(self) -> dict[str, Any]:
        return {"site": self.site}

    def describe(self) -> str:
        return f"{self.kind} {self.handle:#x} ({self.made_by}; destroy with {self.destroyed_by})"


@dataclass(frozen=True, slots=True)
class Layout:
    """What a tensor descriptor describes, fixed: see :meth:`TensorDesc.layout`."""

    dtype: DataType
    dims: tuple[int, ...]
    format: int
    static: bool
    nbytes: int

    def spec(self) -> str:
        return f"{self.dtype.name}{list(self.dims)}"


@dataclass(eq=False)
class TensorDesc(Handle):
    """aclTensorDesc: data type, dims (int64, -1 a dynamic dim) and format."""

    dtype: DataType = DataType.FLOAT
    dims: tuple[int, ...] = ()
    format: int = int(Format.ND)
    name: str = ""
    #: aclSetTensorConst: a copy of the constant value (None: not constant)
    const: bytes | None = field(default=None, repr=False)
    _layout: Layout | None = field(default=None, init=False, repr=False)
    made_by = "aclCreateTensorDesc"
    destroyed_by = "aclDestroyTensorDesc"
    kind = "tensor descriptor"

    def layout(self) -> Layout:
        """An immutable snapshot of the type, dims and format (made once per change), which
        queued work keeps: later changes to the descriptor do not reach it."""
        layout = self._layout
        if layout is None or (layout.dtype, layout.dims, layout.format) != (
                self.dtype, self.dims, self.format):
            layout = self._layout = Layout(self.dtype, self.dims, self.format, self.static,
                                           self.byte_size())
        return layout

    @property
    def static(self) -> bool:
        return all(d >= 0 for d in self.dims)

    def element_count(self) -> int:
        """aclGetTensorDescElementCount; DECISION: 0 while a dim is dynamic (-1, -2)."""
        if not self.static:
            return 0
        count = 1
        for d in self.dims:
            count *= d
        return count

    def byte_size(self) -> int:
        """aclGetTensorDescSize: elements times the type's size (sub-byte types packed,
        rounded up to a byte); 0 for a dynamic shape or ACL_STRING."""
        return -(-self.element_count() * DATA_TYPE_BITS.get(self.dtype, 0) // 8)

    def spec(self) -> str:
        return f"{self.dtype.name}{list(self.dims)}"


@dataclass(eq=False)
class DataBuffer(Handle):
    """aclDataBuffer: an address and a size; the memory stays the caller's."""

    addr: int = 0
    nbytes: int = 0
    made_by = "aclCreateDataBuffer"
    destroyed_by = "aclDestroyDataBuffer"
    kind = "data buffer"

    @property
    def size(self) -> int:
        return self.nbytes


H = TypeVar("H", bound=Handle)


class HandleTable:
    """The live compute handles of one runtime, by int. Thread-safe (one lock).

    Every kind (descriptors, buffers, op attributes and handles, model descriptions,
    datasets) shares one numbering, so a handle of one kind passed as another is refused.
    """

    def __init__(self, record_sites: Callable[[], bool] = lambda: False, *,
                 base: int = HANDLE_BASE) -> None:
        self.lock = threading.RLock()
        #: the first handle; each plane numbers from its own base, so one plane's handle
        #: given to another is refused as unknown
        self.base = base
        self._live: dict[int, Handle] = {}
        self._numbers = itertools.count()
        self._record_sites = record_sites

    def add(self, obj: H) -> H:
        with self.lock:
            obj.handle = self.base + 64 * next(self._numbers)
            if self._record_sites():
                obj.site = capture_site()
            self._live[obj.handle] = obj
        return obj

    def get(self, handle: object, cls: type[H], what: str | None = None) -> H:
        """The live handle of class ``cls``.

        Raises:
            InvalidArgumentType: not an int. InvalidArgument: 0 (NULL).
            InvalidHandle: unknown, destroyed, or a handle of another kind.
        """
        obj = self._live.get(handle) if handle.__class__ is int else None
        if obj.__class__ is cls:  # the common case: a live handle of the exact class
            return obj
        what = what or cls.kind
        number = as_int(handle, what, None, SIZE_MAX)
        if number == 0:
            raise InvalidArgument(f"{what} is NULL")
        obj = self._live.get(number)
        if not isinstance(obj, cls):
            other = "" if obj is None else f" (it is a {obj.kind})"
            raise InvalidHandle(f"{what} {number:#x} does not exist or was destroyed{other}")
        return obj

    def remove(self, handle: object, cls: type[H], what: str | None = None) -> H:
        """Destroy a live handle; raises as :meth:`get`."""
        with self.lock:
            obj = self.get(handle, cls, what)
            del self._live[obj.handle]
            return obj

    def live(self, cls: type[Handle] = Handle) -> list[Handle]:
        with self.lock:
            return [h for h in self._live.values() if isinstance(h, cls)]

    def clear(self) -> list[Handle]:
        """Forget every handle; the ones that were live."""
        with self.lock:
            live, self._live = list(self._live.values()), {}
            return live


def make_tensor_desc(dtype: object, dims: object, fmt: object) -> TensorDesc:
    """Checked arguments of aclCreateTensorDesc (dims must be a list of ints >= -2).

    Raises:
        InvalidArgument, InvalidArgumentType: a bad type, dims or format.
    """
    kind = data_type(dtype)
    dims = as_list(dims, "dims")
    checked = tuple(as_int(d, f"dims[{i}]", -2, (1 << 63) - 1) for i, d in enumerate(dims))
    fmt = as_int(fmt, "format", -(1 << 31), (1 << 31) - 1)
    if fmt not in Format._value2member_map_:
        raise InvalidArgument(f"format {fmt} is not an aclFormat")
    return TensorDesc(dtype=kind, dims=checked, format=fmt)
