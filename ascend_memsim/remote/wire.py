"""What crosses between an owner and its workers: plain values, as bounded JSON.

A message is one ASCII JSON text in one ``multiprocessing.connection`` frame of at most
:data:`MAX_MESSAGE` bytes and :data:`MAX_VALUES` values. Nothing is unpickled: a value is
None, a bool, an int, a float, a str, or one of the tagged forms ``{"L": [...]}`` (list),
``{"T": [...]}`` (tuple), ``{"B": "<base64>"}`` (bytes) and ``{"D": [[key, value], ...]}``
(dict), nested at most :data:`MAX_DEPTH` deep (a JSON array inside a tagged form reads as a
list). Decoding anything else raises :class:`WireError`, which the owner answers with an
error (never a crash).

Memory (DECISION): a frame over either limit is refused before it is parsed (over
:data:`MAX_MESSAGE`, before its body is read), and the bytes of a frame read whole go once they
are text. So reading a frame of ``n`` bytes that holds ``v`` values holds at most
``6n + 64v`` bytes: its bytes and text (``2n``, one after the other), its strings (4 bytes a
character at most, ``4n``, with the pieces json joins) and 64 bytes a value besides its
characters (a value of 3 characters, ``[],``, costs 64 bytes; a ``[key, value]`` pair of a
dict about 150): at most ``7 * MAX_MESSAGE`` (448 MiB) for any frame, measured by
``benchmarks/bench_hostile_memory.py``.

Before the first message, both sides prove they hold the key: the worker with
:func:`handshake` (``multiprocessing.connection``'s HMAC challenge, each read bounded by a
deadline), the owner with :class:`Admission`, the same exchange one frame at a time, so one
thread can admit many connections at once (``remote/_acceptor.py``).
"""

from __future__ import annotations

import base64
import binascii
import hmac
import itertools
import json
import os
import struct
import time
from multiprocessing import AuthenticationError
from multiprocessing import connection as mpc
from typing import Any

__all__ = ["MAX_MESSAGE", "MAX_BYTES", "MAX_VALUES", "MAX_DEPTH", "HANDSHAKE_FRAME",
           "WireError", "TooBig", "encode", "pack", "unpack", "receive", "values", "frame",
           "handshake", "Admission", "read_within"]

#: DECISION: the largest frame either side sends or reads. The largest honest message carries
#: one host buffer's bytes (a worker's array, pushed before a call or written back after one,
#: goes one a frame when they do not fit together; a ``ptr_to_bytes`` reply), base64-encoded
#: (4 characters for 3 bytes), beside a call's name, a few arguments and at most 16 frames of
#: its site (a few kilobytes): so a frame of 64 MiB carries a buffer of a little under 48 MiB
#: (:data:`MAX_BYTES`). A bigger frame is refused (before its body is read) and ends the
#: connection.
MAX_MESSAGE = 64 << 20
#: more bytes than this never fit in one message (a buffer or a read of more raises
#: ValueError; the owner refuses such a read before it reads)
MAX_BYTES = MAX_MESSAGE // 4 * 3
#: DECISION: the most JSON values (numbers, strings, arrays, objects) one frame may hold.
#: An honest message holds few: a call's arguments (the longest are memcpy_batch's four
#: lists, one entry a copy), its site (at most 16 x 4), the arrays pushed or written back
#: (4 each; a list past the limit goes one a frame, as past :data:`MAX_MESSAGE`). A value
#: costs up to 64 bytes once parsed however few characters it takes (``[],`` is 3), so the
#: count, not the size, bounds what a frame of small values costs (64 MiB at most).
MAX_VALUES = 1 << 20
#: DECISION: how deep lists, tuples and dicts may nest in one message.
MAX_DEPTH = 16
#: the largest frame of the handshake (``multiprocessing.connection`` reads at most 256)
HANDSHAKE_FRAME = 256

_SCALARS = (type(None), bool, int, float, str)
_CONTAINERS = (list, tuple, dict)


class WireError(ValueError):
    """A message that is not a plain value (wrong form, too deep, too big)."""


class TooBig(WireError):
    """A message over :data:`MAX_MESSAGE` bytes or :data:`MAX_VALUES` values."""


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


def values(data: bytes | bytearray) -> int:
    """At least how many JSON values the text ``data`` holds: one, and one more for each
    ``,``, ``:``, ``[`` and ``{`` (those inside strings too, so never fewer). O(len(data)),
    one pass in C (a copy without them, let go at once: a third of the time four counts
    take)."""
    return len(data) - len(data.translate(None, b",:[{")) + 1


def _check_size(data: bytes | bytearray) -> None:
    """Raises TooBig for a frame over either limit (see the module docstring)."""
    if len(data) > MAX_MESSAGE:
        raise TooBig(f"a message of {len(data)} bytes is over the limit of {MAX_MESSAGE}")
    count = values(data)
    if count > MAX_VALUES:
        raise TooBig(f"a message of {count} values is over the limit of {MAX_VALUES}")


def pack(message: dict) -> bytes:
    """One message (a dict of plain values) as the bytes of one frame.

    Raises:
        WireError: not plain values (TooBig: over :data:`MAX_MESSAGE` bytes or
            :data:`MAX_VALUES` values).
    """
    # ensure_ascii (json's default): the text is ASCII, one byte a character
    data = json.dumps(encode(message), separators=(",", ":"), allow_nan=True).encode("ascii")
    _check_size(data)
    return data


def unpack(data: bytes | bytearray) -> dict:
    """The message in one frame's bytes.

    Time O(len(data)); memory: see the module docstring.

    Raises:
        WireError: not ASCII JSON, over a limit (TooBig, before parsing), not the tagged
            forms, or not a dict.
    """
    return _parse(_text(data))


def receive(conn: mpc.Connection, deadline: float | None = None) -> dict:
    """The next message on ``conn``: its frame read (by ``deadline``, ``time.monotonic()``,
    or waiting as long as it takes), its bytes let go once they are text, then parsed.

    Raises:
        OSError: a frame over :data:`MAX_MESSAGE` (nothing more is read: the stream can no
            longer be read), or the connection failed.
        EOFError: the other side closed.
        TimeoutError: the deadline passed first.
        WireError: as :func:`unpack`.
    """
    # the frame's bytes go (with the call) before the values are built
    text = _text(read_within(conn, deadline, MAX_MESSAGE))
    return _parse(text)


def _text(data: bytes | bytearray) -> str:
    _check_size(data)
    if not data.isascii():  # pack writes ASCII: a wider character is escaped
        raise WireError("not a JSON message: a byte outside ASCII")
    return data.decode("ascii")


def _parse(text: str) -> dict:
    try:
        message = _DECODER.decode(text)
    except WireError:
        raise
    except (ValueError, RecursionError) as e:  # not JSON, too many digits, deep
        raise WireError(f"not a JSON message: {type(e).__name__}") from None
    if type(message) is not dict:
        raise WireError("a message is a dict")
    _check_depth(message)
    return message


def _tagged(pairs: list[tuple[str, Any]]) -> Any:
    """The value of one JSON object (json calls it innermost first, so a tagged form becomes
    its value as soon as it is read, and only one tree is ever built)."""
    if len(pairs) != 1:
        raise WireError("a JSON object outside the tagged forms L, T, B, D")
    (tag, body), = pairs
    if type(body) is list:
        if tag == "L":
            return body
        if tag == "T":
            return tuple(body)
        if tag == "D":
            return _dict(body)
    elif tag == "B" and type(body) is str:
        try:
            return base64.b64decode(body, validate=True)
        except (binascii.Error, ValueError):
            raise WireError("B: not base64") from None
    raise WireError(f"an unknown tag {tag!r}" if tag not in ("L", "T", "D", "B")
                    else f"{tag}: a body of type {type(body).__name__}")


def _dict(pairs: list) -> dict:
    out = {}
    for pair in pairs:
        if type(pair) is not list or len(pair) != 2:
            raise WireError("D: not a list of [key, value] pairs")
        key, value = pair
        if type(key) not in _SCALARS and type(key) not in (bytes, tuple):
            raise WireError(f"D: a key of type {type(key).__name__}")
        try:
            out[key] = value
        except TypeError:  # a tuple key holding a list
            raise WireError("D: an unhashable key") from None
    return out


_DECODER = json.JSONDecoder(object_pairs_hook=_tagged)


def _check_depth(message: dict) -> None:
    """Raises WireError for a value nested deeper than :data:`MAX_DEPTH` (the message is at
    depth 0, what it holds at 1, as :func:`encode` counts). O(values), memory O(depth)."""
    walking = [iter(itertools.chain.from_iterable(message.items()))]
    while walking:
        for value in walking[-1]:
            kind = type(value)
            if kind in _CONTAINERS:
                if value and len(walking) + 1 > MAX_DEPTH:
                    raise WireError(f"a value nested deeper than {MAX_DEPTH}")
                walking.append(iter(itertools.chain.from_iterable(value.items())
                                    if kind is dict else value))
                break
        else:
            walking.pop()


# -- frames and the handshake ------------------------------------------------------------------

def frame(data: bytes) -> bytes:
    """``data`` as one ``multiprocessing.connection`` frame (a 4-byte big-endian size, then
    the bytes), for a frame under 2 GiB."""
    return struct.pack("!i", len(data)) + data


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
        return bytes(read_within(self._conn, self._deadline, maxlength))


class _Paused(Exception):
    """A scripted challenge function asked for a frame the script does not have yet."""


class _Script:
    """A connection's face for ``multiprocessing.connection``'s challenge functions: reads
    come from ``incoming``, writes are kept in ``sent``; a read past the script pauses the
    function (so its own code computes each message, whatever the Python version)."""

    def __init__(self, *incoming: bytes) -> None:
        self._incoming = list(incoming)
        self.sent: list[bytes] = []

    def send_bytes(self, data: bytes) -> None:
        self.sent.append(bytes(data))

    def recv_bytes(self, maxlength: int | None = None) -> bytes:
        if not self._incoming:
            raise _Paused
        return self._incoming.pop(0)


def _scripted(fn: Any, authkey: bytes, *incoming: bytes) -> list[bytes]:
    """What challenge function ``fn`` sends, given ``incoming``, up to its next read."""
    script = _Script(*incoming)
    try:
        fn(script, authkey)
    except _Paused:
        pass
    return script.sent


class Admission:
    """The owner's side of the handshake as a state machine: :meth:`feed` it each frame the
    peer sends, send what :meth:`take` gives, until :meth:`feed` says the peer is in.

    The exchange is ``multiprocessing.connection``'s (``deliver_challenge`` then
    ``answer_challenge``, as ``Listener.accept`` runs them), its messages made by those very
    functions: the challenge, the response a key holder gives to it, the answer to the
    peer's challenge (``mpc.Client`` and :func:`handshake` connect). DECISION: the response
    is checked against the one this Python's ``answer_challenge`` makes, so the owner and its
    workers run one Python version (they do: the owner starts them). Each frame is at most
    :data:`HANDSHAKE_FRAME` bytes; the owner bounds the whole in time.
    """

    __slots__ = ("_authkey", "_expected", "_out", "_step")

    def __init__(self, authkey: bytes) -> None:
        self._authkey = authkey
        challenge, = _scripted(mpc.deliver_challenge, authkey)
        self._expected, = _scripted(mpc.answer_challenge, authkey, challenge)
        self._out = frame(challenge)
        self._step = 0

    def take(self) -> bytes:
        """The bytes to send now (then empty until the next :meth:`feed`)."""
        out, self._out = self._out, b""
        return out

    def feed(self, data: bytes) -> bool:
        """One frame from the peer; True once both sides have proved the key.

        Raises:
            multiprocessing.AuthenticationError: the peer holds another key, or spoke out of
                turn (:meth:`take` then holds the refusal, for a peer that waits for one).
        """
        step, self._step = self._step, self._step + 1
        if step == 0:  # the peer's response to our challenge
            if not hmac.compare_digest(data, self._expected):
                self._out += frame(_FAILURE)
                raise AuthenticationError("digest received was wrong")
            self._out += frame(_WELCOME)
            return False
        if step == 1:  # the peer's own challenge: our answer
            try:
                answer = _scripted(mpc.answer_challenge, self._authkey, data)
            except (AssertionError, AuthenticationError, ValueError):
                raise AuthenticationError("the peer's challenge is not one") from None
            self._out += frame(answer[0])
            return False
        if step == 2 and data == _WELCOME:
            return True
        raise AuthenticationError("digest sent was rejected")


#: ``multiprocessing.connection``'s welcome and failure messages (``WELCOME`` before Python
#: 3.12, ``_WELCOME`` since)
_WELCOME: bytes = vars(mpc).get("_WELCOME") or vars(mpc)["WELCOME"]
_FAILURE: bytes = vars(mpc).get("_FAILURE") or vars(mpc)["FAILURE"]


def read_within(conn: mpc.Connection, deadline: float | None, maxlength: int) -> bytearray:
    """One frame of ``conn`` (``multiprocessing.connection``'s: a 4-byte big-endian size, or
    -1 then 8 bytes, then the bytes), read by ``deadline`` (``time.monotonic()``; None: as
    long as it takes). Memory grows with the bytes that arrive, never with the size a
    header claims.

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


#: the most bytes one read asks for (the read's buffer is this big, whatever arrives)
_CHUNK = 1 << 20


def _read(conn: mpc.Connection, size: int, deadline: float | None) -> bytearray:
    out = bytearray()
    fd = conn.fileno()
    while len(out) < size:
        if deadline is not None:
            left = deadline - time.monotonic()
            # readable: the read below returns at once, with at least one byte or end of file
            if left <= 0 or not mpc.wait([conn], left):
                raise TimeoutError("no answer in time")
        chunk = os.read(fd, min(size - len(out), _CHUNK))
        if not chunk:
            raise EOFError
        out += chunk
    return out
