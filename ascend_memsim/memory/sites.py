"""Where in the user's program a call came from: the Python stack without simulator frames.

Capturing a :class:`Site` walks the stack and keeps only (code object, instruction offset)
pairs; line numbers and the readable frames are worked out on first use. Devices record
sites only when ``Device.record_sites`` is on (the sanitizer, the pytest plugin and traces
turn it on).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterable, Iterator
from types import CodeType, FrameType
from typing import NamedTuple, overload

__all__ = ["Frame", "Site", "capture_site", "format_site", "site_of", "calls_from"]

# The whole package (this file is in its memory/ subpackage): its frames are never the user's.
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep

# co_filename -> what a site does with its frames (_KEEP, _SKIP, _STOP); saves an abspath
# per frame on the hot path.
_KIND: dict[str, int] = {}
_KEEP, _SKIP, _STOP = 0, 1, 2

#: Tools that call the user's code: a site ends at the first of their frames, so it shows
#: the user's program from the test function (pytest, Hypothesis), the script (runpy,
#: ``python -m``, ``ascend-memsim run``) or a worker process's target (multiprocessing)
#: inwards.
_TOOL_MODULES = ("_pytest", "pluggy", "hypothesis", "runpy", "multiprocessing")


def _kind(filename: str) -> int:
    path = os.path.abspath(filename)
    if path.startswith(_PACKAGE_DIR):
        return _SKIP
    if filename == "<frozen runpy>" or os.path.basename(filename) == "ascend-memsim":
        return _STOP
    for name in _TOOL_MODULES:
        origin = getattr(sys.modules.get(name), "__file__", None)
        if origin is None:
            continue
        origin = os.path.abspath(origin)
        # runpy is one file; the others are packages
        inside = path.startswith(os.path.dirname(origin) + os.sep) and name != "runpy"
        if path == origin or inside:
            return _STOP
    return _KEEP


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
            self._frames = tuple(Frame(code.co_filename, _line(code, lasti), code.co_name)
                                 for code, lasti in self._raw)
        return self._frames

    def __iter__(self) -> Iterator[Frame]:
        return iter(self.frames)

    def __len__(self) -> int:
        return len(self._raw) if self._frames is None else len(self._frames)

    @overload
    def __getitem__(self, index: int) -> Frame: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[Frame, ...]: ...

    def __getitem__(self, index: int | slice) -> Frame | tuple[Frame, ...]:
        return self.frames[index]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Site) and self.frames == other.frames

    def __hash__(self) -> int:
        return hash(self.frames)

    def __repr__(self) -> str:
        return f"Site({list(self.frames)!r})"

    @classmethod
    def of_frames(cls, frames: Iterable[Frame]) -> Site:
        """A site of frames given as they are (another process's, which has no code objects
        here)."""
        site = cls(())
        site._frames = tuple(frames)
        return site


_getframe = sys._getframe


def _line(code: CodeType, lasti: int) -> int:
    """The source line of the instruction at byte offset ``lasti`` (what ``f_lineno`` says
    while the frame runs it). O(instructions of the code object)."""
    line = code.co_firstlineno
    for start, end, number in code.co_lines():
        if start <= lasti < end:
            return line if number is None else number
        if number is not None:
            line = number
    return line


def capture_site(limit: int = 10, skip: int = 0) -> Site:
    """The calling stack, innermost ``limit`` user frames: the simulator's frames left out,
    and nothing from the first tool frame (pytest, Hypothesis, runpy) outwards.

    ``skip``: how many frames from the caller outwards are known to be the simulator's (the
    caller itself, its caller, ...); the walk starts above them without looking at them.
    O(stack depth); each file name is classified once. Reads no line numbers (their lookup
    costs more than the walk): :class:`Site` works them out when its frames are first read.
    """
    if _CALLS_FROM:
        found = _CALLS_FROM.get(threading.get_ident())
        if found is not None:
            return found
    codes: list[CodeType] = []
    key: list[int] = []
    kinds = _KIND
    # Python makes a frame object for each frame the walk reads: jumping over the known
    # ones is the cheapest way to leave them out.
    frame: FrameType | None = _getframe(1 + skip)
    left = limit
    while frame is not None:
        code = frame.f_code
        kind = kinds.get(code.co_filename)
        if kind is None:
            kind = kinds[code.co_filename] = _kind(code.co_filename)
        if kind == _KEEP:
            codes.append(code)
            key.append(id(code))
            key.append(frame.f_lasti)
            left -= 1
            if not left:
                break
        elif kind == _STOP:
            break
        frame = frame.f_back
    # One Site per distinct stack: a program allocates from a few places many times, so a
    # million live blocks share a few Site objects. Keyed by code ids (hashing a code object
    # costs more than the walk); the Site holds its code objects, so an id in the cache
    # names the same code for as long as the entry lives.
    found = _SITES.get(frozen := tuple(key))
    if found is None:
        if len(_SITES) >= _SITES_MAX:
            _SITES.clear()
        found = _SITES[frozen] = Site(tuple(zip(reversed(codes), reversed(key[1::2]))))
    return found


#: thread id -> the site every call on that thread comes from (see calls_from); empty
#: unless a thread serves another process
_CALLS_FROM: dict[int, Site] = {}


@contextlib.contextmanager
def calls_from(site: Site) -> Iterator[Site]:
    """Make :func:`capture_site` on this thread return ``site`` for the ``with`` block: the
    calls come from another process's frames (an owner serving a worker's call,
    :mod:`ascend_memsim.remote`), not from this thread's stack."""
    ident = threading.get_ident()
    _CALLS_FROM[ident] = site
    try:
        yield site
    finally:
        del _CALLS_FROM[ident]


#: (code id, offset, ...) of a stack, innermost first -> its Site (see capture_site)
_SITES: dict[tuple[int, ...], Site] = {}
_SITES_MAX = 1 << 16


def site_of(region: object) -> Site | None:
    """The allocation site a device block (``alloc_site``) or a host region
    (``extra["site"]``) keeps, or None."""
    site = getattr(region, "alloc_site", None)
    if site is None:
        extra = getattr(region, "extra", None)
        site = None if extra is None else extra.get("site")
    return site


def format_site(site: Site | tuple[Frame, ...] | None, indent: str = "    ") -> str:
    """The site as ``file:line in function`` lines, innermost last ('' for None)."""
    if not site:
        return ""
    return "\n".join(f"{indent}{f.filename}:{f.lineno} in {f.name}" for f in site)
