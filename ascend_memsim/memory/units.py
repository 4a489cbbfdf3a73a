"""Sizes in bytes: the one parser and the one formatter (and counts of things, in words).

Markers, configs (the aclInit JSON, pytest ini options), profile overrides and the command
line all accept a size as an int or as text read by :func:`parse_size` (``"64MiB"``,
``"1.5GiB"``). Every size the package prints goes through :func:`format_bytes` (exact), or
:func:`human_bytes` (rounded) where a plan is read, not a rule.

DECISION: every unit is binary, ``KB``/``MB``/``GB`` included (``"2MB"`` is 2 MiB, 2,097,152
bytes): device memory comes in binary units (2 MiB huge pages), and PyTorch, whose users
write ``"2MB"``, means MiB by it. A program that means 2,000,000 bytes writes ``2000000``
or ``2e6``. The help texts, the error message and the docs say so.
"""

from __future__ import annotations

import math

from .errors import InvalidArgument

__all__ = ["parse_size", "format_bytes", "human_bytes", "plural"]


def parse_size(text: str | int) -> int:
    """Bytes from ``123``, ``64B``, ``4KiB``, ``2MiB``, ``1GiB``, ``1.5GiB``, ``2M`` or ``1e3``.

    Units are binary and case does not matter: ``K``, ``KB``, ``KiB`` are 1024 bytes; ``M``,
    ``MB``, ``MiB`` 2**20; ``G``, ``GB``, ``GiB`` 2**30; ``T``, ``TB``, ``TiB`` 2**40.

    A number with a point or an exponent (``1.5GiB``, ``1e3``, ``1.5e3``) is accepted when it
    makes a whole number of bytes; ``0x``-prefixed hexadecimal is read as such (``0x1e3`` is
    483). Negative, infinite and overflowing values are refused.

    >>> parse_size("2MiB"), parse_size("1GiB"), parse_size("123"), parse_size("4k")
    (2097152, 1073741824, 123, 4096)
    >>> parse_size("1e3"), parse_size("1.5e3"), parse_size("0x1e3")
    (1000, 1500, 483)
    >>> parse_size("2MB") == parse_size("2MiB") == 2 * 1024 * 1024
    True

    Digits of other scripts are refused (full-width ``"\\uff15MiB"``), though ``int()``
    would read them.

    Raises:
        InvalidArgument: not a size (or a negative one).
    """
    if isinstance(text, int) and not isinstance(text, bool):
        if text < 0:
            raise InvalidArgument(f"size {text} is negative")
        return text
    s = str(text).strip().replace("_", "").replace(" ", "")
    if not s.isascii():
        # int() and float() take any script's digits (full-width ones): a size is ASCII
        raise InvalidArgument(f"size {text!r} is not a size: write it in ASCII digits")
    units = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20,
             "mb": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30,
             "t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40}
    i = len(s)
    while i and s[i - 1].isalpha():
        i -= 1
    number, unit = s[:i], s[i:].lower()
    if unit not in units or not number:
        raise InvalidArgument(f"size {text!r} is not a size (examples: 123, 64B, 2MiB, 1GiB; "
                              f"units are binary, 2MB = 2MiB = 2097152 bytes)")
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


_UNITS = (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10), ("B", 1))


def format_bytes(n: int) -> str:
    """``4 MiB``, ``2 MiB + 32 B``, ``96 B``: exact, in the largest unit that fits and at most
    one small remainder (under 1024 of a unit: ``3 MiB + 512 KiB``); a size that needs more
    is its bytes with one rounded unit: ``2097120 B (2.00 MiB)``.

    DECISION: one style everywhere, exact, because the rules this package shows live in the
    last bytes (2,097,152 bytes asked for become 2,097,184, two huge pages): a rounded figure
    would hide them; and readable, so never a sum of three units ("1 MiB + 1023 KiB + 992 B"
    is 2 MiB less 32 bytes, which no one reads at a glance).

    >>> format_bytes(2 * 1024 * 1024 + 32), format_bytes(4 << 20), format_bytes(0)
    ('2 MiB + 32 B', '4 MiB', '0 B')
    >>> format_bytes((2 << 20) - 32), format_bytes((3 << 20) + (512 << 10))
    ('2097120 B (2.00 MiB)', '3 MiB + 512 KiB')
    >>> format_bytes(-192)
    '-192 B'
    """
    if n < 0:
        return "-" + format_bytes(-n)
    index = next(i for i, (_, scale) in enumerate(_UNITS) if n >= scale or scale == 1)
    unit, scale = _UNITS[index]
    count, rest = divmod(n, scale)
    if rest == 0:
        return f"{count} {unit}"
    for small, small_scale in _UNITS[index + 1:]:
        if rest % small_scale == 0 and rest // small_scale < 1024:
            return f"{count} {unit} + {rest // small_scale} {small}"
    if f"{n / scale:.2f}" == "1024.00" and index:    # rounds up to the next unit
        unit, scale = _UNITS[index - 1]
    return f"{n} B ({n / scale:.2f} {unit})"


def human_bytes(n: int) -> str:
    """``19.46 GiB``, ``44 MiB``, ``512 B``: at most two decimals in the largest unit, as
    people read a size (and torch's out-of-memory message writes one).

    DECISION: the answers of a replay through the caching allocator and of its capacity
    search print this way, being read as plans ("a 24 GiB card is enough"); their exact
    bytes are in ``--json``. Every other size prints with :func:`format_bytes`.

    >>> human_bytes(20894166630), human_bytes(44 << 20), human_bytes(3 << 29), human_bytes(512)
    ('19.46 GiB', '44 MiB', '1.5 GiB', '512 B')
    """
    if n < 0:
        return "-" + human_bytes(-n)
    for index, (unit, scale) in enumerate(_UNITS[:-1]):
        if n >= scale:
            text = f"{n / scale:.2f}".rstrip("0").rstrip(".")
            if text == "1024" and index:   # rounds up to the next unit
                unit = _UNITS[index - 1][0]
                text = "1"
            return f"{text} {unit}"
    return f"{n} B"


def plural(n: int, noun: str, nouns: str | None = None) -> str:
    """``n`` and the noun agreeing with it: ``1 block``, ``2 blocks``, ``0 bytes``.

    >>> plural(1, "malloc"), plural(3, "free"), plural(0, "byte"), plural(2, "entry", "entries")
    ('1 malloc', '3 frees', '0 bytes', '2 entries')
    """
    return f"{n} {noun if n == 1 else nouns or noun + 's'}"
