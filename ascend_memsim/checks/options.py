"""The options of a sanitizer config, checked when the sanitizer is made (so at acl.init).

A bad value is refused with an exception that names the option, never accepted to fail later.
"""

from __future__ import annotations

from typing import Any

from ..memory.args import SIZE_MAX, as_int
from ..memory.errors import AclError, InvalidArgument, InvalidArgumentType
from ..memory.units import parse_size

__all__ = ["OPTIONS", "check_number", "check_size", "check_flag", "check_output"]

#: The options a sanitizer config may hold (the keyword arguments of Sanitizer).
OPTIONS = ("mode", "output", "quarantine_bytes", "initcheck", "history", "record_sites",
           "site_depth", "leaks", "print_limit")


def check_number(value: Any, key: str, lo: int) -> int:
    """A whole-number sanitizer option, checked when the sanitizer is made (acl.init).

    Raises:
        InvalidArgument, InvalidArgumentType: not an int in ``[lo, 2**64 - 1]``; the message
            names the option.
    """
    return as_int(value, f"sanitizer option {key!r}", lo, SIZE_MAX)


def check_size(value: Any, key: str) -> int:
    """A size option: bytes, or text such as "64MiB" (memory.units.parse_size).

    Raises:
        InvalidArgument, InvalidArgumentType: not a size; the message names the option.
    """
    if isinstance(value, bool) or value is None:
        raise InvalidArgumentType(f"sanitizer option {key!r} must be a size, got {value!r}")
    try:
        return parse_size(value)
    except AclError as error:
        raise type(error)(f"sanitizer option {key!r}: {error.message}") from None


def check_flag(value: Any, key: str) -> bool:
    """A true/false sanitizer option. Raises InvalidArgumentType for anything but a bool."""
    if not isinstance(value, bool):
        raise InvalidArgumentType(f"sanitizer option {key!r} must be true or false, got "
                                  f"{value!r}")
    return value


def check_output(value: Any) -> Any:
    """The ``output`` option: "stderr", "stdout", None, or an object with a ``write`` method.

    Raises:
        InvalidArgument: anything else (the message names the option).
    """
    if value is None or (isinstance(value, str) and value in ("stderr", "stdout")):
        return value
    if not isinstance(value, str) and callable(getattr(value, "write", None)):
        return value
    raise InvalidArgument(f"sanitizer option 'output' must be \"stderr\", \"stdout\", null "
                          f"(print nothing) or a file-like object, got {value!r}")
