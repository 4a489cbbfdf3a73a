"""Argument checks for the public entry points: each raises with the argument's name.

Public methods call these once and then work on plain ints; internals never re-check.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping

from .constants import MallocAttrType, MemType
from .errors import InvalidArgument, InvalidArgumentType, InvalidRuntimeParam

__all__ = [
    "as_int", "as_size", "as_ptr", "int_or_none", "parse_malloc_config", "parse_mem_type_query",
    "as_str", "shown", "SIZE_MAX", "UINT32_MAX",
]

#: The largest value a C ``size_t`` (and a 64-bit pointer) can hold.
SIZE_MAX = (1 << 64) - 1
#: The largest uint32_t: policy words, memType masks, reserve fields.
UINT32_MAX = 0xFFFF_FFFF


def as_int(value: object, name: str, lo: int | None = 0, hi: int | None = SIZE_MAX) -> int:
    """``value`` as an int in ``[lo, hi]`` (None: unbounded); bool, float, str, None refused.

    Anything with ``__index__`` (numpy integers, IntEnum members) is accepted.

    Raises:
        InvalidArgumentType: not an integer.
        InvalidArgument: out of range.
    """
    if value.__class__ is int:
        # the common case, on every malloc and free: a plain int (bool is a subclass, not int)
        number = value
    elif isinstance(value, bool):
        raise InvalidArgumentType(f"{name} must be an int, got bool {value!r}")
    else:
        number = _index(value, name)
    if (lo is not None and number < lo) or (hi is not None and number > hi):
        raise InvalidArgument(f"{name}={number} is outside {_range(lo, hi)}")
    return number


def _range(lo: int | None, hi: int | None) -> str:
    """``[lo, hi]``, an open end said in words."""
    if lo is None:
        return f"(-inf, {hi}]" if hi is not None else "the integers"
    return f"[{lo}, {hi}]" if hi is not None else f"[{lo}, +inf)"


def _index(value: object, name: str) -> int:
    """``operator.index(value)`` as a plain int. Whatever the object's ``__index__`` raises
    (a user's class may raise anything, not only TypeError) makes a wrong argument, never a
    crash."""
    try:
        # any object: whatever its __index__ does (or its lack of one) is caught below
        number = operator.index(value)  # type: ignore[arg-type]
    except Exception as error:
        cause = "" if isinstance(error, TypeError) else (
            f" (its __index__ raised {type(error).__name__})")
        raise InvalidArgumentType(
            f"{name} must be an int, got {shown(value)}{cause}") from None
    # an int subclass may carry methods that raise (its __repr__): go on with the plain int
    return number if number.__class__ is int else int.__index__(number)


#: How many characters of an argument's repr a message quotes.
SHOWN_CHARS = 80


def shown(value: object, typed: bool = True) -> str:
    """``type repr`` of an argument for an error message (``typed=False``: the repr alone),
    the repr cut to :data:`SHOWN_CHARS`; never an exception (a user's ``__repr__`` may raise,
    or be huge).

    >>> shown(3.5), shown("x" * 100)[-11:], shown([1], typed=False)
    ('float 3.5', '(102 chars)', '[1]')
    """
    kind = type(value).__name__
    try:
        text = repr(value)
    except Exception as error:
        why = f"its __repr__ raised {type(error).__name__}"
        return f"{kind} ({why})" if typed else f"<{kind} ({why})>"
    if len(text) > SHOWN_CHARS:
        text = f"{text[:SHOWN_CHARS]}... ({len(text)} chars)"
    return f"{kind} {text}" if typed else text


def as_str(value: object, name: str, *, empty: bool = False) -> str:
    """A str argument that becomes a C string (a path, a name): non-empty unless ``empty``,
    and without NUL (pyacl's ``"s"`` format refuses one with ValueError).

    Raises:
        InvalidArgumentType: not a str, or empty.
        InvalidArgument: it holds a NUL character.
    """
    # issubclass(type(value), str) narrows nothing for the checker: value is a str here
    if not issubclass(type(value), str) or not (empty or str.__len__(value)):  # type: ignore[arg-type]
        kind = "a str" if empty else "a non-empty str"
        raise InvalidArgumentType(f"{name} must be {kind}, got {shown(value)}")
    text = str.__str__(value)
    if "\0" in text:
        raise InvalidArgument(f"{name} holds a NUL character, which a C string cannot")
    return text


def as_size(value: object, name: str = "size") -> int:
    """A byte count for an allocation: an int in ``[1, SIZE_MAX]``.

    Raises:
        InvalidArgumentType, InvalidArgument: as :func:`as_int`; size 0 is InvalidArgument.
    """
    size = as_int(value, name, None, None)
    if size == 0:
        raise InvalidArgument(f"{name} must be > 0 (got 0)")
    if not 0 < size <= SIZE_MAX:
        raise InvalidArgument(f"{name}={size} is outside [1, {SIZE_MAX}] (a size_t, not 0)")
    return size


def as_ptr(value: object, name: str = "ptr") -> int:
    """A pointer argument: a non-NULL int in ``[1, SIZE_MAX]``.

    Raises:
        InvalidArgumentType: not an int (a str, None, a float).
        InvalidArgument: NULL (0) or out of the 64-bit range.
    """
    ptr = as_int(value, name)
    if ptr == 0:
        raise InvalidArgument(f"{name} is NULL")
    return ptr


def int_or_none(value: object) -> int | None:
    """``value`` as an int when it is an integer (``__index__``: numpy integers too; not
    bool), else None. For lookups that must not raise (whatever ``__index__`` raises)."""
    if value.__class__ is int:
        return value
    if isinstance(value, bool):
        return None
    try:
        # any object: whatever its __index__ does (or its lack of one) is caught below
        number = operator.index(value)  # type: ignore[arg-type]
    except Exception:
        return None
    return number if number.__class__ is int else int.__index__(number)


def parse_malloc_config(cfg: object) -> dict[int, int]:
    """An aclrtMallocConfig given as ``{attr_type: value}`` or ``[(attr_type, value), ...]``.

    Raises:
        InvalidArgument, InvalidArgumentType: an unknown attribute type or a bad value.
    """
    if cfg is None:
        return {}
    if isinstance(cfg, Mapping):
        pairs: Iterable[object] = cfg.items()
    elif isinstance(cfg, (list, tuple)):
        pairs = cfg
    else:
        raise InvalidArgumentType(
            f"cfg must be a dict {{attr_type: value}} or a list of pairs, got {type(cfg).__name__}")
    attrs: dict[int, int] = {}
    for pair in pairs:
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise InvalidArgumentType(f"cfg entry {shown(pair)} is not an (attr_type, value) "
                                      f"pair")
        kind = as_int(pair[0], "cfg attr_type", 0, SIZE_MAX)
        if kind not in MallocAttrType._value2member_map_:
            # memory.cpp: an unknown attribute type is ACL_ERROR_RT_PARAM_INVALID.
            raise InvalidRuntimeParam(f"cfg attr_type {kind} is not an aclrtMallocAttrType "
                                  f"({', '.join(f'{m.name}={m.value}' for m in MallocAttrType)})")
        attrs[kind] = as_int(pair[1], f"cfg {MallocAttrType(kind).name}", 0, SIZE_MAX)
    return attrs


_ALL_MEM_TYPES = int(MemType.DEV | MemType.DVPP | MemType.RSVD)


def parse_mem_type_query(addr_list: object, mem_type: object,
                         reserve: object) -> tuple[list[int], int]:
    """The arguments of aclrtCheckMemType, checked: (addresses, memType bits).

    Raises:
        InvalidArgumentType: addr_list not a list or tuple of ints.
        InvalidArgument: an empty list, a mem_type with unknown or no bits, reserve != 0.
    """
    if not isinstance(addr_list, (list, tuple)):
        raise InvalidArgumentType(f"addr_list must be a list of ints, got "
                                  f"{type(addr_list).__name__}")
    if not addr_list:
        raise InvalidArgument("addr_list is empty")
    addrs = [as_int(a, f"addr_list[{i}]") for i, a in enumerate(addr_list)]
    kinds = as_int(mem_type, "mem_type", 0, UINT32_MAX)
    if not kinds or kinds & ~_ALL_MEM_TYPES:
        raise InvalidArgument(f"mem_type={kinds:#x} must be a non-empty OR of "
                              f"ACL_RT_MEM_TYPE_DEV/DVPP/RSVD (0x2, 0x8, 0x10)")
    if as_int(reserve, "reserve", 0, UINT32_MAX) != 0:
        raise InvalidArgument("reserve must be 0")
    return addrs, kinds
