"""Where pyacl's binding is stricter than the core: the argument rules of its wrappers.

pyacl (hicann/runtime ``python/pyACL/``) parses each call's arguments before it reaches the
runtime. Where it refuses what the Pythonic core would take (a cfg that is not its dict, a
``None`` path, a ``bytearray``), the face refuses it too, so that a program that runs here
does not fail on hardware. pyacl raises ``TypeError``/``ValueError``/``KeyError`` there;
the face returns ACL_ERROR_INVALID_PARAM (100000) with a message instead, as for every
refused argument (see docs/reference/c-api.md).
"""

from __future__ import annotations

from typing import TypeGuard, TypeVar

from ..memory.args import SIZE_MAX, as_int, as_str, shown
from ..memory.errors import InvalidArgument, InvalidArgumentType

__all__ = ["malloc_config", "config_path", "bytes_object", "numpy_shape", "numpy_type",
           "log_message", "io_dims"]

_T = TypeVar("_T")


def _is_a(value: object, cls: type[_T]) -> TypeGuard[_T]:
    """``issubclass(type(value), cls)``: the C API's ``PyDict_Check`` and the like, which a
    ``__class__`` property cannot fool (``isinstance`` would ask it)."""
    return issubclass(type(value), cls)


def malloc_config(cfg: object) -> dict[int, int] | None:
    """pyacl's aclrtMallocConfig dict as the core's ``{attr_type: value}`` (None: no config).

    ``rt_memory.cpp`` (WrapAclRtMallocWithCfg, WrapAclRtMallocForTaskScheduler, the
    ``GetMallocConfigFromPydict`` family): ``cfg`` is a dict, ``{}`` for none, else
    ``{"numAttrs": n, "attrs": [{"attr": attr_type, "value": {"moduleId": m}}, ...]}`` with
    ``numAttrs`` equal to the list's length; a value names ``moduleId`` (uint16),
    ``deviceId`` (uint32) or ``rsv`` (up to 8 bytes), cast to the union member's width
    as C does. An attribute without ``"attr"`` is type 0 (the struct is zeroed), one without
    ``"value"`` has value 0. Dicts and lists are read as the C API reads them
    (PyDict_GetItemString, PyList_GetItem), so a subclass's overridden methods do not run.

    Raises:
        InvalidArgumentType: anything pyacl refuses (not a dict, no ``attrs`` list, a count
            that does not match, a value without a known key, a negative or non-int number).
    """
    if not _is_a(cfg, dict):
        raise InvalidArgumentType(f"cfg must be a dict as pyacl takes it ({{}} for none, or "
                                  f"{{'numAttrs': n, 'attrs': [{{'attr': t, 'value': "
                                  f"{{'moduleId': m}}}}]}}), got {shown(cfg)}")
    if not dict.__len__(cfg):
        return None
    attrs = dict.get(cfg, "attrs")
    if not _is_a(attrs, list):
        raise InvalidArgumentType(f"cfg['attrs'] must be a list of attribute dicts, got "
                                  f"{shown(attrs)}")
    attrs = list.copy(attrs)
    count = _number(dict.get(cfg, "numAttrs", 0), "cfg['numAttrs']", 0xFFFF_FFFF)
    if count != len(attrs):
        raise InvalidArgumentType(f"cfg['numAttrs'] is {count} but cfg['attrs'] holds "
                                  f"{len(attrs)} (pyacl: 'The numAttrs inputed does not match')")
    found: dict[int, int] = {}
    for i, attr in enumerate(attrs):
        where = f"cfg['attrs'][{i}]"
        if not _is_a(attr, dict):
            raise InvalidArgumentType(f"{where} must be a dict, got {shown(attr)}")
        kind = dict.get(attr, "attr", 0)
        # GetEnumValueFromPyDict: a missing or non-int "attr" leaves the zeroed field
        kind = as_int(int.__index__(kind), f"{where}['attr']", -(1 << 63), (1 << 63) - 1) \
            if _is_a(kind, int) else 0
        found[kind] = _union_value(dict.get(attr, "value"), where)
    return found


def _union_value(value: object, where: str) -> int:
    """An aclrtMallocAttrValue from its dict (GetUnionValueFromPyDict), as an int."""
    if value is None:
        return 0
    if not _is_a(value, dict):
        raise InvalidArgumentType(f"{where}['value'] must be a dict, got {shown(value)}")
    if dict.__contains__(value, "moduleId"):
        return _number(dict.get(value, "moduleId"), f"{where}['value']['moduleId']") & 0xFFFF
    if dict.__contains__(value, "deviceId"):
        return (_number(dict.get(value, "deviceId"), f"{where}['value']['deviceId']")
                & 0xFFFF_FFFF)
    if dict.__contains__(value, "rsv"):
        rsv = dict.get(value, "rsv")
        if not _is_a(rsv, list):
            raise InvalidArgumentType(f"{where}['value']['rsv'] must be a list, got {shown(rsv)}")
        raw = bytes(_number(b, f"{where}['value']['rsv'][{j}]") & 0xFF
                    for j, b in enumerate(list.copy(rsv)[:8]))
        return int.from_bytes(raw, "little")
    raise InvalidArgumentType(f"{where}['value'] names none of moduleId, deviceId, rsv "
                              f"(pyacl: 'No valid key found in aclrtMallocAttrValue')")


def _number(value: object, name: str, hi: int = SIZE_MAX) -> int:
    """An unsigned C long (PyLong_AsUnsignedLong: an int or int subclass, not negative)."""
    if not _is_a(value, int):
        raise InvalidArgumentType(f"{name} must be an int, got {shown(value)}")
    return as_int(int.__index__(value), name, 0, hi)


def config_path(path: object) -> str | None:
    """acl.init's argument: a str, or none at all (``PyArg_ParseTuple(args, "|s")`` in
    ``py_init_acl.cpp``; ``None`` is a TypeError there).

    Raises:
        InvalidArgumentType, InvalidArgument: not a str, or one holding NUL.
    """
    if path is _NO_PATH:
        return None
    return as_str(path, "acl.init's config path", empty=True)


#: acl.init() with no argument (a default of None would accept acl.init(None)).
_NO_PATH = object()


def bytes_object(data: object) -> bytes:
    """acl.util.bytes_to_ptr's argument: ``bytes`` only (bytes_convert.cpp: PyBytes_Check,
    so a bytearray is a ValueError there).

    Raises:
        InvalidArgumentType: not bytes.
    """
    if not _is_a(data, bytes):
        raise InvalidArgumentType(f"bytes_to_ptr takes bytes, got {shown(data)}")
    return data


def numpy_shape(shape: object) -> tuple:
    """acl.util.ptr_to_numpy's shape: a tuple of ints (numpy_convert.cpp: PyTuple_Size and
    PyLong_Type items; a list is a ValueError there).

    Raises:
        InvalidArgumentType: not a tuple of ints.
    """
    dims = tuple.__getitem__(shape, slice(None)) if _is_a(shape, tuple) else None
    if dims is None or not all(_is_a(d, int) and type(d) is not bool for d in dims):
        raise InvalidArgumentType(f"ptr_to_numpy's shape must be a tuple of ints, got "
                                  f"{shown(shape)}")
    return tuple(int.__index__(d) for d in dims)


def numpy_type(np_type: object) -> int:
    """acl.util.ptr_to_numpy's type: a numpy type number (``"i"``: an int32).

    Raises:
        InvalidArgumentType, InvalidArgument: not an int, or outside int32.
    """
    return as_int(np_type, "np_type", -(1 << 31), (1 << 31) - 1)


def log_message(message: object) -> str:
    """acl.app_log's message: a str (``"is"`` in py_init_acl.cpp).

    Raises:
        InvalidArgumentType, InvalidArgument: not a str, or one holding NUL.
    """
    return as_str(message, "app_log's message", empty=True)


#: ACL_MAX_DIM_CNT (acl_mdl.h): the dims an aclmdlIODims holds.
MAX_DIM_CNT = 128


def io_dims(dims: object) -> tuple[int, ...]:
    """acl.mdl.set_input_dynamic_dims's aclmdlIODims dict, ``{"name": str (unused),
    "dimCount": n, "dims": [int, ...]}``: its first ``dimCount`` dims, as uint64 (mdl_wrap.cpp
    ``WrapAclMdlSetInputDynamicDims``; model.cpp casts each to uint64).

    Raises:
        InvalidArgumentType: not a dict, no int ``dimCount``, ``dims`` not a list of at least
            ``dimCount`` ints (pyacl raises there).
        InvalidArgument: ``dimCount`` 0 (aclmdlSetInputDynamicDims refuses it) or over 128
            (the struct holds 128).
    """
    if not _is_a(dims, dict):
        raise InvalidArgumentType(f"dims must be a dict {{'dimCount': n, 'dims': [...]}}, got "
                                  f"{shown(dims)}")
    count = dict.get(dims, "dimCount")
    if not _is_a(count, int) or type(count) is bool:
        raise InvalidArgumentType(f"dims['dimCount'] must be an int, got {shown(count)}")
    count = as_int(int.__index__(count), "dims['dimCount']", 0, SIZE_MAX)
    if count == 0 or count > MAX_DIM_CNT:
        raise InvalidArgument(f"dims['dimCount'] is {count}; it must be 1 to {MAX_DIM_CNT}")
    values = dict.get(dims, "dims")
    if not _is_a(values, list):
        raise InvalidArgumentType(f"dims['dims'] must be a list, got {shown(values)}")
    values = list.copy(values)
    if len(values) < count or not all(_is_a(v, int) and type(v) is not bool
                                      for v in values[:count]):
        raise InvalidArgumentType(f"dims['dims'] must hold dimCount={count} ints, got "
                                  f"{shown(values)}")
    return tuple(as_int(int.__index__(v), f"dims['dims'][{i}]", -(1 << 63), (1 << 63) - 1)
                 & SIZE_MAX for i, v in enumerate(values[:count]))
