"""Sizes in bytes: the one parser (``"64MiB"``, ``"1.5GiB"``) every size setting goes through.

Markers, configs (the aclInit JSON, pytest ini options), profile overrides and the command
line all accept a size as an int or as text read by :func:`parse_size`.
"""

from __future__ import annotations

import math

from .errors import InvalidArgument

__all__ = ["parse_size"]


def parse_size(text: str | int) -> int:
    """Bytes from ``123``, ``64B``, ``4KiB``, ``2MiB``, ``1GiB``, ``1.5GiB``, ``2M`` or ``1e3``.

    A number with a point or an exponent (``1.5GiB``, ``1e3``, ``1.5e3``) is accepted when it
    makes a whole number of bytes; ``0x``-prefixed hexadecimal is read as such (``0x1e3`` is
    483). Negative, infinite and overflowing values are refused.

    >>> parse_size("2MiB"), parse_size("1GiB"), parse_size("123"), parse_size("4k")
    (2097152, 1073741824, 123, 4096)
    >>> parse_size("1e3"), parse_size("1.5e3"), parse_size("0x1e3")
    (1000, 1500, 483)

    Raises:
        InvalidArgument: not a size (or a negative one).
    """
    if isinstance(text, int) and not isinstance(text, bool):
        if text < 0:
            raise InvalidArgument(f"size {text} is negative")
        return text
    s = str(text).strip().replace("_", "").replace(" ", "")
    units = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20,
             "mb": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30,
             "t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40}
    i = len(s)
    while i and s[i - 1].isalpha():
        i -= 1
    number, unit = s[:i], s[i:].lower()
    if unit not in units or not number:
        raise InvalidArgument(f"size {text!r} is not a size (examples: 123, 64B, 2MiB, 1GiB)")
    decimal = not number.lower().lstrip("+-").startswith(("0x", "0o", "0b"))
    try:
        if decimal and any(c in number for c in ".eE"):
            value: float | int = float(number) * units[unit]
        else:
            value = int(number, 0) * units[unit]
    except ValueError:
        raise InvalidArgument(f"size {text!r} is not a size (examples: 123, 2MiB)") from None
    if not math.isfinite(value):
        raise InvalidArgument(f"size {text!r} is not a size (too large to read)")
    if value < 0:
        raise InvalidArgument(f"size {text!r} is negative")
    if value != int(value):
        raise InvalidArgument(f"size {text!r} is not a whole number of bytes")
    return int(value)
