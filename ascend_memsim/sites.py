"""Where in the user's program a call came from: the Python stack without simulator frames.

Recording a site costs a stack walk (tens of microseconds), so devices record them only when
``Device.record_sites`` is on (the sanitizer, the pytest plugin and traces turn it on).
"""

from __future__ import annotations

import os
import sys
import traceback

__all__ = ["Site", "capture_site", "format_site"]

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))

#: A call site: the user's frames, outermost first.
Site = tuple[traceback.FrameSummary, ...]


# co_filename -> True for the simulator's own files; saves an abspath per frame (hot path).
_OWN_FILE: dict[str, bool] = {}


def capture_site(limit: int = 16) -> Site:
    """The calling stack, innermost ``limit`` user frames, simulator frames left out.

    O(stack depth); each file name is classified once.
    """
    frames = []
    own_file = _OWN_FILE
    frame = sys._getframe(1)
    while frame is not None and len(frames) < limit:
        code = frame.f_code
        filename = code.co_filename
        own = own_file.get(filename)
        if own is None:
            own = own_file[filename] = os.path.abspath(filename).startswith(_PACKAGE_DIR)
        if not own:
            frames.append(traceback.FrameSummary(filename, frame.f_lineno, code.co_name,
                                                 lookup_line=False))
        frame = frame.f_back
    frames.reverse()
    return tuple(frames)


def format_site(site: Site | None, indent: str = "    ") -> str:
    """The site as ``file:line in function`` lines, innermost last ('' for None)."""
    if not site:
        return ""
    return "\n".join(f"{indent}{f.filename}:{f.lineno} in {f.name}" for f in site)
