"""Where in the user's program a call came from: the Python stack without simulator frames.

Capturing a :class:`Site` walks the stack and keeps only (code object, line) pairs, a few
microseconds; the readable frames are built on first use. Devices record sites only when
``Device.record_sites`` is on (the sanitizer, the pytest plugin and traces turn it on).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from types import CodeType
from typing import NamedTuple

__all__ = ["Frame", "Site", "capture_site", "format_site"]

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep

# co_filename -> True for the simulator's own files; saves an abspath per frame (hot path).
_OWN_FILE: dict[str, bool] = {}


class Frame(NamedTuple):
    """One frame of a site, as ``traceback.FrameSummary`` names its fields."""

    filename: str
    lineno: int
    name: str


class Site:
    """A call site: the user's frames, outermost first. Iterable, indexable, sliceable."""

    __slots__ = ("_raw", "_frames")

    def __init__(self, raw: tuple[tuple[CodeType, int], ...]) -> None:
        self._raw = raw
        self._frames: tuple[Frame, ...] | None = None

    @property
    def frames(self) -> tuple[Frame, ...]:
        if self._frames is None:
            self._frames = tuple(Frame(code.co_filename, line, code.co_name)
                                 for code, line in self._raw)
        return self._frames

    def __iter__(self) -> Iterator[Frame]:
        return iter(self.frames)

    def __len__(self) -> int:
        return len(self._raw)

    def __getitem__(self, index):  # an int gives a Frame, a slice a tuple of them
        return self.frames[index]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Site) and self.frames == other.frames

    def __hash__(self) -> int:
        return hash(self.frames)

    def __repr__(self) -> str:
        return f"Site({list(self.frames)!r})"


def capture_site(limit: int = 10) -> Site:
    """The calling stack, innermost ``limit`` user frames, simulator frames left out.

    O(stack depth); each file name is classified once.
    """
    raw: list[tuple[CodeType, int]] = []
    append = raw.append
    own_file = _OWN_FILE
    frame = sys._getframe(1)
    left = limit
    while frame is not None:
        code = frame.f_code
        own = own_file.get(code.co_filename)
        if own is None:
            own = own_file[code.co_filename] = (
                os.path.abspath(code.co_filename).startswith(_PACKAGE_DIR))
        if not own:
            append((code, frame.f_lineno))
            left -= 1
            if not left:
                break
        frame = frame.f_back
    raw.reverse()
    return Site(tuple(raw))


def format_site(site: Site | tuple | None, indent: str = "    ") -> str:
    """The site as ``file:line in function`` lines, innermost last ('' for None)."""
    if not site:
        return ""
    return "\n".join(f"{indent}{f.filename}:{f.lineno} in {f.name}" for f in site)
