"""What crosses between an owner and its workers: plain values, as bounded JSON.

A message is one JSON text (UTF-8) in one ``multiprocessing.connection`` frame of at most
:data:`MAX_MESSAGE` bytes. Nothing is unpickled: a value is None, a bool, an int, a float, a
str, or one of the tagged forms ``{"L": [...]}`` (list), ``{"T": [...]}`` (tuple),
``{"B": "<base64>"}`` (bytes) and ``{"D": [[key, value], ...]}`` (dict), nested at most
:data:`MAX_DEPTH` deep. Decoding anything else raises :class:`WireError`, which the owner
answers with an error (never a crash).

Before the first message, both sides prove they hold the key (:func:`handshake`:
``multiprocessing.connection``'s HMAC challenge, each read bounded by a deadline).
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import struct
import time
from multiprocessing import connection as mpc
from typing import Any

__all__ = ["MAX_MESSAGE", "MAX_DEPTH", "WireError", "TooBig", "encode", "decode", "pack",
           "unpack", "handshake", "read_within"]

#: DECISION: the largest message either side sends or reads (bytes of a host buffer travel
#: base64-encoded, a third larger); a bigger one is refused and ends the connection.
MAX_MESSAGE = 64 << 20
#: DECISION: how deep lists, tuples and dicts may nest in one message.
MAX_DEPTH = 16

_SCALARS = (type(None), bool, int, float, str)


class WireError(ValueError):
    """A message that is not a plain value (wrong form, too deep, too big)."""


class TooBig(WireError):
    """A message over :data:`MAX_MESSAGE` bytes."""


def encode(value: Any, depth: int = 0) -> Any:
    """``value`` as a JSON-ready object (see the module docstring).

    Raises:
        WireError: a value of another type, or nested too deep.
    """
    if depth > MAX_DEPTH:
        raise WireError(f"a value nested deeper than {MAX_DEPTH}")
    if type(value) in _SCALARS:
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"B": base64.b64encode(value).decode("ascii")}
    # subclasses (a face's dict of defaults, an IntEnum, a named tuple) go as their base
    if isinstance(value, list):
        return {"L": [encode(v, depth + 1) for v in value]}
    if isinstance(value, tuple):
        return {"T": [encode(v, depth + 1) for v in value]}
    if isinstance(value, dict):
        return {"D": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]}
    for base in (int, float, str):
        if isinstance(value, base):
            return base(value)
    raise WireError(f"{type(value).__name__} is not a plain value (None, bool, int, float, "
                    f"str, bytes, list, tuple, dict)")


def decode(obj: Any, depth: int = 0) -> Any:
    """The value a JSON-ready object from :func:`encode` stands for.

    Raises:
        WireError: any other form.
    """
    if depth > MAX_DEPTH:
        raise WireError(f"a value nested deeper than {MAX_DEPTH}")
    if type(obj) in _SCALARS:
        return obj
    if type(obj) is not dict or len(obj) != 1:
        raise WireError("a JSON array or object outside the tagged forms L, T, B, D")
    (tag, body), = obj.items()
    if tag == "B" and type(body) is str:
        try:
            return base64.b64decode(body, validate=True)
        except (binascii.Error, ValueError):
            raise WireError("B: not base64") from None
    if tag in ("L", "T") and type(body) is list:
        items = [decode(v, depth + 1) for v in body]
        return items if tag == "L" else tuple(items)
    if tag == "D" and type(body) is list:
        out = {}
        for pair in body:
            if type(pair) is not list or len(pair) != 2:
                raise WireError("D: not a list of [key, value] pairs")
            key = decode(pair[0], depth + 1)
            if type(key) not in _SCALARS and type(key) not in (bytes, tuple):
                raise WireError(f"D: a key of type {type(key).__name__}")
            try:
                out[key] = decode(pair[1], depth + 1)
            except TypeError:  # a tuple key holding a list
                raise WireError("D: an unhashable key") from None
        return out
    raise WireError(f"an unknown tag {tag!r}")


def pack(message: dict) -> bytes:
    """One message (a dict of plain values) as the bytes of one frame.

    Raises:
        WireError: not plain values (TooBig: over :data:`MAX_MESSAGE` bytes).
    """
    data = json.dumps(encode(message), separators=(",", ":"), allow_nan=True).encode("utf-8")
    if len(data) > MAX_MESSAGE:
        raise TooBig(f"a message of {len(data)} bytes is over the limit of {MAX_MESSAGE}")
    return data


def unpack(data: bytes) -> dict:
    """The message in one frame's bytes.

    Raises:
        WireError: not UTF-8 JSON, not the tagged forms, or not a dict.
    """
    if len(data) > MAX_MESSAGE:
        raise TooBig(f"a message of {len(data)} bytes is over the limit of {MAX_MESSAGE}")
    try:
        obj = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError) as e:  # not UTF-8, not JSON, too many digits, deep
        raise WireError(f"not a JSON message: {type(e).__name__}") from None
    message = decode(obj)
    if type(message) is not dict:
        raise WireError("a message is a dict")
    return message


def handshake(conn: mpc.Connection, authkey: bytes, deadline: float, *, owner: bool) -> None:
    """The HMAC challenge both ways (the owner challenges first), over by ``deadline``
    (``time.monotonic()``): a peer that says nothing, or half a frame, costs no more.

    Raises:
        TimeoutError: the deadline passed.
        multiprocessing.AuthenticationError: the other side holds another key.
        EOFError, OSError, AssertionError: the other side closed, or spoke out of turn.
    """
    within: Any = _Within(conn, deadline)  # a connection's face, as the challenge uses it
    if owner:
        mpc.deliver_challenge(within, authkey)
        mpc.answer_challenge(within, authkey)
    else:
        mpc.answer_challenge(within, authkey)
        mpc.deliver_challenge(within, authkey)


class _Within:
    """The two methods of a connection the challenge functions use, reads bounded in time."""

    def __init__(self, conn: mpc.Connection, deadline: float) -> None:
        self._conn = conn
        self._deadline = deadline

    def send_bytes(self, data: bytes) -> None:
        # a few dozen bytes: a socket's buffer takes them without waiting for the peer
        self._conn.send_bytes(data)

    def recv_bytes(self, maxlength: int) -> bytes:
        return read_within(self._conn, self._deadline, maxlength)


def read_within(conn: mpc.Connection, deadline: float, maxlength: int) -> bytes:
    """One frame of ``conn`` (``multiprocessing.connection``'s: a 4-byte big-endian size, or
    -1 then 8 bytes, then the bytes), read by ``deadline`` (``time.monotonic()``).

    Raises:
        TimeoutError: the deadline passed first.
        EOFError: the other side closed.
        OSError: a frame over ``maxlength`` bytes (nothing more is read).
    """
    size, = struct.unpack("!i", _read(conn, 4, deadline))
    if size == -1:
        size, = struct.unpack("!Q", _read(conn, 8, deadline))
    if size < 0 or size > maxlength:
        raise OSError(f"a frame of {size} bytes, over {maxlength}")
    return _read(conn, size, deadline)


def _read(conn: mpc.Connection, size: int, deadline: float) -> bytes:
    out = bytearray()
    while len(out) < size:
        left = deadline - time.monotonic()
        # readable: the read below returns at once, with at least one byte or end of file
        if left <= 0 or not mpc.wait([conn], left):
            raise TimeoutError("no answer in time")
        chunk = os.read(conn.fileno(), size - len(out))
        if not chunk:
            raise EOFError
        out += chunk
    return bytes(out)
