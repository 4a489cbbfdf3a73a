"""The answers of a study kept on disk, one small JSON file per cell, named by the SHA-256 of
everything that decides the answer: the snapshot's bytes (their own SHA-256), the product, the
capacity, the setting, the CANN version, the step, the window, this package's version and the
entry format. A study that was interrupted finds the cells it finished and replays only the
rest.

A cache entry is written whole or not at all (a temporary file renamed over it), so an
interrupted write leaves no half entry. It is one JSON object: ``key`` (the cell's key, the
file's own name), ``answer`` (the fields of :data:`~ascend_memsim.plan.cells.ANSWER_FIELDS`)
and ``checksum``, the SHA-256 of the key and the answer written canonically
(:func:`checksum`).

Entries are read as files nobody vouches for (:meth:`ResultCache.get`): a regular file only
(checked with ``lstat`` before it is opened, and again with ``fstat`` on the descriptor, opened
with ``O_NONBLOCK | O_NOFOLLOW``: a FIFO, a device or a symlink planted as an entry is never
opened or never followed), at most :data:`MAX_ENTRY_BYTES`, read in one bounded read, one
object of the three fields with the right key, the right checksum and values of the right
types. Anything else raises :class:`DamagedEntry`, which the study reports as a
:class:`CacheWarning` and replays; the answer's own consistency (ranges, what
the search can answer) is checked by the study, which knows the cell.

DECISION: what the checksum protects against: an entry damaged on disk (a bit flipped, a
file cut short, an editor's stray save) and an entry copied or renamed under another cell's
name (the key inside it no longer matches). It is not keyed: someone who can write the
folder can also write a new entry with its checksum recomputed; the consistency checks then
refuse only an answer that contradicts itself or its cell (a fit below one step, above the
capacity, a peak above the capacity that fits). A cache folder is trusted as far as the
people who can write to it (docs/internals/security.md).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import tempfile
from typing import Any

from .. import __version__
from ..memory.errors import InvalidArgument, InvalidArgumentType

__all__ = ["ResultCache", "cell_key", "checksum", "DamagedEntry", "CacheWarning",
           "MAX_ENTRY_BYTES", "ENTRY_FORMAT"]

#: a cell's entry is a few hundred bytes; a larger file is not one of ours
MAX_ENTRY_BYTES = 64 * 1024
#: the layout of an entry (in the key: an entry of another layout is never looked up)
ENTRY_FORMAT = 2
_ENTRY_FIELDS = frozenset({"key", "answer", "checksum"})
#: flags that open a file without waiting on it (a FIFO with no writer) nor following a
#: symlink in its last component; 0 where the platform has no such flag
_OPEN_FLAGS = (os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0)
               | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_BINARY", 0))


class DamagedEntry(ValueError):
    """A cache entry is there but not to be trusted; the message says why."""


class CacheWarning(UserWarning):
    """A study's cache: an entry not used (damaged, made for another cell, an answer the
    search could not give: its cell is replayed), or an answer that could not be kept (the
    message names the entry or folder and why)."""


def cell_key(sha256: str, product: str, capacity: int, setting: str, cann: str, step: int,
             window: int) -> str:
    """The cache key of one cell (hex), with this package's version in it (another version
    may answer differently) and the entry format."""
    text = json.dumps([sha256, product, capacity, setting, cann, step, window, __version__,
                       ENTRY_FORMAT])
    return hashlib.sha256(text.encode()).hexdigest()


def checksum(key: str, answer: dict[str, Any]) -> str:
    """The SHA-256 (hex) of ``key`` and ``answer`` as canonical JSON (keys sorted, no spaces,
    ASCII): the same for the values read back as for those written, since a float's JSON is
    its shortest round-trip text. Time O(size of the answer).

    Raises:
        ValueError: a value JSON cannot hold (NaN, infinity).
    """
    text = json.dumps({"key": key, "answer": answer}, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=True, allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON holds")


class ResultCache:
    """A folder of answers, ``<folder>/<key[:2]>/<key>.json``. ``fields`` maps each field an
    answer must have to the types its value may take. :meth:`prepare` checks the folder
    before a study's first cell."""

    def __init__(self, folder: str | os.PathLike[str],
                 fields: dict[str, tuple[type, ...]]) -> None:
        if not isinstance(folder, (str, os.PathLike)):
            raise InvalidArgumentType(f"the cache must be a folder's path, not "
                                      f"{type(folder).__name__}")
        self.folder = os.fspath(folder)
        if not isinstance(self.folder, str):
            raise InvalidArgumentType("the cache must be a folder's path as text")
        self.fields = fields

    def path(self, key: str) -> str:
        """Where the entry of ``key`` lives."""
        return os.path.join(self.folder, key[:2], key + ".json")

    def prepare(self) -> None:
        """Make the folder if it is missing and check that an entry can be written there
        (a file made and removed), so that a study fails before its first replay rather
        than after it.

        Raises:
            InvalidArgument: the path is not a directory, cannot be made, or cannot be
                written to (the message names it and why).
        """
        folder = self.folder
        hint = "give a folder this user can write to, or keep no cache"
        if not folder:
            raise InvalidArgument(f"the cache folder is an empty path: {hint}")
        if os.path.lexists(folder) and not os.path.isdir(folder):
            raise InvalidArgument(f"the cache folder {folder} is not a directory: {hint}")
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError as e:
            raise InvalidArgument(f"cannot make the cache folder {folder}: "
                                  f"{e.strerror or e}: {hint}") from None
        try:
            fd, probe = tempfile.mkstemp(prefix=".probe-", dir=folder)
            os.close(fd)
            os.unlink(probe)
        except OSError as e:
            raise InvalidArgument(f"cannot write in the cache folder {folder}: "
                                  f"{e.strerror or e}: {hint}") from None

    def get(self, key: str) -> dict[str, Any] | None:
        """The answer kept for ``key``, or None when there is none. Time and memory at most
        O(:data:`MAX_ENTRY_BYTES`).

        Raises:
            DamagedEntry: an entry is there but is not a regular file, is too large, cannot
                be read, is not one JSON object of an entry, names another key, fails its
                checksum, or holds a field of the wrong type (the message says which).
        """
        path = self.path(key)
        try:
            before = os.lstat(path)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise DamagedEntry(f"cannot be read: {e.strerror or e}") from None
        _check_regular(before)
        try:
            fd = os.open(path, _OPEN_FLAGS)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise DamagedEntry(f"cannot be read: {e.strerror or e}") from None
        try:
            _check_regular(os.fstat(fd))
            data = _read_bounded(fd, MAX_ENTRY_BYTES + 1)
        except OSError as e:
            raise DamagedEntry(f"cannot be read: {e.strerror or e}") from None
        finally:
            os.close(fd)
        if len(data) > MAX_ENTRY_BYTES:
            raise DamagedEntry(f"larger than {MAX_ENTRY_BYTES // 1024} KiB, no entry's size")
        try:
            value = json.loads(data, parse_constant=_no_constant)
        except (ValueError, RecursionError):
            raise DamagedEntry("not JSON") from None
        if not isinstance(value, dict) or set(value) != _ENTRY_FIELDS:
            raise DamagedEntry("not a cache entry (an object of key, answer and checksum)")
        if value["key"] != key:
            raise DamagedEntry("made for another cell (the key inside it is not its name): "
                               "copied or renamed")
        answer = value["answer"]
        if not isinstance(answer, dict) or set(answer) != set(self.fields):
            raise DamagedEntry("its answer does not have the fields of one")
        try:
            expected = checksum(key, answer)
        except ValueError:
            raise DamagedEntry("its answer holds a value JSON cannot") from None
        if value["checksum"] != expected:
            raise DamagedEntry("its checksum does not match its contents (damaged or edited)")
        for name, types in self.fields.items():
            # bool is an int: an int field takes no bool, a bool field no int
            if type(answer[name]) not in types:
                raise DamagedEntry(f"{name} has the type {type(answer[name]).__name__}, "
                                   f"not {' or '.join(t.__name__ for t in types)}")
        return answer

    def put(self, key: str, answer: dict[str, Any]) -> None:
        """Keep ``answer`` under ``key`` with its checksum, written whole (a temporary file
        renamed over the entry).

        Raises:
            OSError: the entry could not be written (the folder went away, the disk is full).
        """
        path = self.path(key)
        entry = {"key": key, "answer": answer, "checksum": checksum(key, answer)}
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=os.path.dirname(path))
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(entry, f, sort_keys=True)
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise


def _check_regular(st: os.stat_result) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise DamagedEntry("not a regular file (a directory, FIFO, device or symlink): never "
                           "opened")
    if st.st_size > MAX_ENTRY_BYTES:
        raise DamagedEntry(f"larger than {MAX_ENTRY_BYTES // 1024} KiB, no entry's size")


def _read_bounded(fd: int, limit: int) -> bytes:
    """At most ``limit`` bytes of ``fd``, read until its end or the limit."""
    parts: list[bytes] = []
    left = limit
    while left > 0:
        part = os.read(fd, left)
        if not part:
            break
        parts.append(part)
        left -= len(part)
    return b"".join(parts)
