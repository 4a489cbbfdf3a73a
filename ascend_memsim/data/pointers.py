"""pyacl's acl.util conversions between host objects and pointers.

``bytes_to_ptr`` / ``numpy_to_ptr`` register a buffer with the runtime's host memory and give
its simulated address; ``ptr_to_bytes`` / ``ptr_to_numpy`` read (or view) memory the
simulator knows: a live aclrtMallocHost block or registered buffer (device memory in the
device run mode; managed memory, aclrtMemAllocManaged, always). DECISION: a raw host
address is refused here (see :func:`_host_region`).
"""

from __future__ import annotations

from typing import Any

from ..memory.args import as_int, as_ptr, int_or_none, shown
from ..memory.constants import RunMode
from ..memory.errors import InvalidArgument, InvalidArgumentType, InvalidPointer

__all__ = ["NPY_TYPES", "bytes_to_ptr", "numpy_to_ptr", "numpy_contiguous_to_ptr",
           "ptr_to_bytes", "ptr_to_numpy"]

#: The largest numpy index (intp on a 64-bit host).
_INTP_MAX = (1 << 63) - 1

#: ptr_to_numpy type codes (pyacl docs, function-ptr_to_numpy) -> numpy dtype names.
NPY_TYPES = {0: "bool", 1: "int8", 2: "uint8", 3: "int16", 4: "uint16", 5: "int32",
             6: "uint32", 7: "int64", 8: "uint64", 9: "longlong", 10: "ulonglong",
             11: "float32", 12: "float64", 23: "float16"}


# ``runtime``: the Runtime, a layer above this one (so Any here); numpy is optional, so an
# array is duck-typed (Any) once its type name says ndarray

def bytes_to_ptr(runtime: Any, data: object) -> int:
    """acl.util.bytes_to_ptr: the (simulated) address of a bytes or bytearray buffer.

    The buffer stays registered, and alive, while user code holds it.

    Raises:
        InvalidArgumentType: not bytes or bytearray (or a bytes object shorter than 2).
    """
    if not isinstance(data, (bytes, bytearray)):
        raise InvalidArgumentType(f"bytes_to_ptr takes bytes, got {type(data).__name__}")
    return int(runtime.host.register(data).ptr)


def numpy_to_ptr(runtime: Any, array: Any) -> int:
    """acl.util.numpy_to_ptr: the (simulated) address of a numpy array's data.

    As pyacl does, an array that is not C-contiguous is copied first; the copy is held by
    no one, so its address dangles at once (as on hardware).

    Raises:
        InvalidArgumentType: not a numpy array, or an array of Python objects (dtype object,
            or a structured dtype with object fields).
    """
    if type(array).__name__ != "ndarray":
        raise InvalidArgumentType(f"numpy_to_ptr takes a numpy.ndarray, got "
                                  f"{type(array).__name__}")
    if array.dtype.hasobject:
        # Its bytes are PyObject pointers: copying them to or from the device corrupts the
        # interpreter (pyacl hands out the raw buffer; refusing is the simulator's check).
        raise InvalidArgumentType(f"numpy_to_ptr: an array of dtype {array.dtype} holds Python "
                                  f"objects (their pointers), not data; convert it to a "
                                  f"numeric dtype")
    if not array.flags["C_CONTIGUOUS"]:
        array = array.copy(order="C")
    return int(runtime.host.register(array).ptr)


def numpy_contiguous_to_ptr(runtime: Any, array: Any) -> tuple[int, object]:
    """acl.util.numpy_contiguous_to_ptr: ``(address, array)``, ``array`` C-contiguous (the
    argument itself when it is, else a copy the caller must keep alive).

    Raises:
        InvalidArgumentType: as :func:`numpy_to_ptr`.
    """
    if type(array).__name__ == "ndarray" and not array.flags["C_CONTIGUOUS"]:
        array = array.copy(order="C")
    return numpy_to_ptr(runtime, array), array


def _host_region(runtime: Any, call: str, ptr: object, size: int,
                 write: bool) -> tuple[Any, int]:
    """(region, offset) of host memory at ``ptr``; device memory is refused before the
    sanitizer looks at the access (nothing is read, so there is nothing to report).

    DECISION: only memory the simulator knows (a live host block or registered buffer; device
    memory in the device run mode; managed memory, which the host reaches as the device does,
    11-05): a raw address (``id(x)``, ``arr.ctypes.data``) is refused,
    as the docstrings of ``ptr_to_bytes`` / ``ptr_to_numpy`` promise, since a view of it
    would bypass every check. memcpy and memset take raw addresses (see the module doc).
    """
    ptr = as_ptr(ptr)
    data = runtime.data
    with data.lock:
        region = data.region_at(ptr)
        if (region is not None and not region.host and runtime.run_mode is not RunMode.DEVICE
                and not getattr(region, "managed", False)):
            raise InvalidPointer(f"{call}: {ptr:#x} is device memory; the host cannot read it "
                                 f"directly (copy it with memcpy first, or simulate a program "
                                 f"that runs on the device: run_mode 'device')")
        if region is None:
            runtime.sanitizer.bad_address(call, ptr, size, write)
            raise InvalidPointer(f"{call}: {ptr:#x} is not in a live aclrtMallocHost block or "
                                 f"a registered host buffer (acl.util reads only memory the "
                                 f"simulator knows; memcpy takes raw host addresses)")
        region, offset = data.resolve(call, ptr, size, write=write)
        return region, offset


def ptr_to_bytes(runtime: Any, ptr: object, size: object) -> bytes:
    """acl.util.ptr_to_bytes: ``size`` bytes of host memory at ``ptr``, as a new bytes object.

    Raises:
        InvalidPointer: not inside a live host block or registered buffer, or past its end.
    """
    size = as_int(size, "size")
    if size == 0:
        return b""
    region, offset = _host_region(runtime, "ptr_to_bytes", ptr, size, write=False)
    if not region.host:  # ACL_DEVICE run mode: device memory read directly
        return bytes(region.read(offset, size))
    return bytes(region.source(offset, size))


def ptr_to_numpy(runtime: Any, ptr: object, shape: Any, type_code: Any) -> Any:
    """acl.util.ptr_to_numpy: a numpy array over host memory at ``ptr`` (shares the memory).

    ``type_code`` is pyacl's int code (11 = float32, see :data:`NPY_TYPES`) or a dtype.
    DECISION: the returned array is writable, so the host block counts as written.

    Raises:
        InvalidArgument: an unknown type code, a dtype of Python objects, a shape that is not an
            int or a list/tuple of ints >= 0, or one numpy cannot index.
        InvalidArgumentType: a dimension that is not an int.
        InvalidPointer: as ptr_to_bytes.
    """
    import numpy  # optional: only this conversion needs it

    code = int_or_none(type_code)
    if code is not None:
        if code not in NPY_TYPES:
            raise InvalidArgument(f"type code {code} is not one of {sorted(NPY_TYPES)}")
        dtype = numpy.dtype(NPY_TYPES[code])
    else:
        try:
            dtype = numpy.dtype(type_code)
        except Exception:  # e.g. '1/0', {'x': 1}, an object whose __repr__ raises
            raise InvalidArgument(f"np_type {shown(type_code)} is not a numpy type") from None
    if dtype.hasobject:
        raise InvalidArgument(f"ptr_to_numpy: dtype {dtype} holds Python object pointers; host "
                              f"memory holds only data")
    length = int_or_none(shape)
    if length is not None:
        given: tuple[object, ...] = (length,)
    elif isinstance(shape, (list, tuple)):
        given = tuple(shape)
    elif type(shape).__name__ == "ndarray" and shape.ndim == 1:
        given = tuple(shape.tolist())
    else:
        raise InvalidArgument(f"shape {shown(shape)} is neither an int nor a list, tuple or 1-D "
                              f"array of ints")
    # numpy's own limit: each dimension, and the product of the non-zero ones, fit in intp
    # (numpy.empty((0, 2**63)) raises ValueError).
    dims = tuple(as_int(d, f"shape[{i}]", 0, _INTP_MAX) for i, d in enumerate(given))
    count, nonzero = 1, 1
    for d in dims:
        count *= d
        nonzero *= max(d, 1)
    # A sub-array dtype (("i4", (2,))) adds its own dimensions, as numpy.empty(dims, dtype).
    if nonzero * dtype.itemsize > _INTP_MAX or len(dims) + len(dtype.shape) > 64:
        raise InvalidArgument(f"shape {dims} of {dtype} is larger than numpy can index "
                              f"(at most 64 dimensions, {_INTP_MAX} bytes)")
    size = count * dtype.itemsize
    if size == 0:
        return numpy.empty(dims, dtype)
    region, offset = _host_region(runtime, "ptr_to_numpy", ptr, size, write=True)
    view = region.view(offset, size) if region.host else None
    if view is None:  # device memory (device run mode), or a memory-mapped buffer
        view = region.direct_view(offset, size)
    return numpy.frombuffer(view, dtype=dtype).reshape(dims + dtype.shape)


