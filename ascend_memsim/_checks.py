"""Argument checks for the public entry points: each raises with the argument's name.

Public methods call these once and then work on plain ints; internals never re-check.
"""

from __future__ import annotations

import operator

from .errors import InvalidArgument, InvalidArgumentType

__all__ = ["as_int", "as_size", "as_ptr", "int_or_none", "SIZE_MAX", "UINT32_MAX"]

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
        raise InvalidArgument(f"{name}={number} is outside [{lo}, {hi}]")
    return number


def _index(value: object, name: str) -> int:
    try:
        return operator.index(value)
    except TypeError:
        raise InvalidArgumentType(
            f"{name} must be an int, got {type(value).__name__} {value!r}") from None


def as_size(value: object, name: str = "size") -> int:
    """A byte count for an allocation: an int in ``[1, SIZE_MAX]``.

    Raises:
        InvalidArgumentType, InvalidArgument: as :func:`as_int`; size 0 is InvalidArgument.
    """
    size = as_int(value, name)
    if size == 0:
        raise InvalidArgument(f"{name} must be > 0 (got 0)")
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
    bool), else None. For lookups that must not raise."""
    if value.__class__ is int:
        return value
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None
