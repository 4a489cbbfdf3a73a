"""The answers of a study kept on disk, one small JSON file per cell, named by the SHA-256 of
everything that decides the answer: the snapshot's bytes (their own SHA-256), the product, the
capacity, the setting, the CANN version, the step, the window and this package's version. A
study that was interrupted finds the cells it finished and replays only the rest.

A cache entry is written whole or not at all (a temporary file renamed over it), so an
interrupted write leaves no half entry. Entries are read as files nobody vouches for: at most
:data:`MAX_ENTRY_BYTES`, one JSON object of the row's fields with values of the right types;
anything else is ignored (and replayed again), never trusted.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from typing import Any

from .. import __version__

__all__ = ["ResultCache", "cell_key", "MAX_ENTRY_BYTES"]

#: a cell's entry is a few hundred bytes; a larger file is not one of ours
MAX_ENTRY_BYTES = 64 * 1024


def cell_key(sha256: str, product: str, capacity: int, setting: str, cann: str, step: int,
             window: int) -> str:
    """The cache key of one cell (hex), with this package's version in it: another version
    may answer differently."""
    text = json.dumps([sha256, product, capacity, setting, cann, step, window, __version__])
    return hashlib.sha256(text.encode()).hexdigest()


class ResultCache:
    """A folder of answers, ``<folder>/<key[:2]>/<key>.json``; made on the first write.
    ``fields`` maps each field an entry must have to the types its value may take."""

    def __init__(self, folder: str | os.PathLike[str], fields: dict[str, tuple[type, ...]]) -> None:
        self.folder = os.fspath(folder)
        self.fields = fields

    def _path(self, key: str) -> str:
        return os.path.join(self.folder, key[:2], key + ".json")

    def get(self, key: str) -> dict[str, Any] | None:
        """The entry for ``key``, or None: none, unreadable, or not a row."""
        try:
            with open(self._path(key), "rb") as f:
                text = f.read(MAX_ENTRY_BYTES + 1)
        except OSError:
            return None
        if len(text) > MAX_ENTRY_BYTES:
            return None
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):
            return None
        return value if self._is_row(value) else None

    def _is_row(self, value: Any) -> bool:
        if not isinstance(value, dict) or set(value) != set(self.fields):
            return False
        for name, types in self.fields.items():
            v = value[name]
            # bool is an int: an int field takes no bool, a bool field no int
            if type(v) not in types:
                return False
        return True

    def put(self, key: str, row: dict[str, Any]) -> None:
        """Keep ``row`` under ``key``, written whole (a temporary file renamed)."""
        path = self._path(key)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=os.path.dirname(path))
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(row, f, sort_keys=True)
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
