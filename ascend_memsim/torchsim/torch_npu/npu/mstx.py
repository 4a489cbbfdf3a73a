"""The stand-in ``torch_npu.npu.mstx`` (``torch_npu/npu/mstx.py``): the profiler's markers
(``mstx.mark``, ``range_start`` / ``range_end``, ``range_push`` / ``range_pop``,
``mstx_range``, ``annotate``), which a script leaves in for its profiles.

What each returns when no profiler collects markers is what torch_npu's ``MstxMgr``
(``torch_npu/csrc/profiler/mstx_mgr.cpp``) returns while ``isMstxEnable()`` is false:
``range_start`` 0 (the id ``range_end`` ignores), ``range_push`` and ``range_pop`` -1, and
``mark`` nothing. DECISION: mstx is never enabled in an estimate (the stand-in's profiler
collects nothing, see :mod:`..profiler`), so every marker is a no-op that lets the script
run on; a bad message, domain or stream is warned about and answered as torch_npu's Python
checks answer it (``mark``: None, ``range_start``: 0, ``range_push`` / ``range_pop``: -1).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

from .._missing import not_modelled

__all__ = ["mstx", "annotate"]

__getattr__ = not_modelled("torch_npu.npu.mstx")


def _stream_ok(stream: Any, call: str) -> bool:
    from .streams import Stream

    if stream and not isinstance(stream, Stream):
        warnings.warn(f"Invalid stream for mstx.{call} function. Please provide a valid "
                      f"stream.", stacklevel=3)
        return False
    return True


def _text_ok(value: Any, what: str, call: str) -> bool:
    if not value or not isinstance(value, str):
        warnings.warn(f"Invalid {what} for mstx.{call} function. Please provide a valid "
                      f"{what} string.", stacklevel=3)
        return False
    return True


def _checked(message: Any, domain: Any, stream: Any, call: str) -> bool:
    """torch_npu's checks of a range's arguments, in its order (the first failure warns)."""
    return (_text_ok(message, "message", call) and _text_ok(domain, "domain", call)
            and _stream_ok(stream, call))


class mstx:
    """torch_npu's marker API (every method static); markers are off in an estimate."""

    annotate: Any

    @staticmethod
    def mark(message: str, stream: Any = None, domain: str = "default") -> None:
        """An instant marker: nothing to record."""
        if not _text_ok(message, "message", "mark"):
            return
        if not isinstance(domain, str):
            warnings.warn("Invalid domain for mstx.mark function. Please provide a valid "
                          "domain string.", stacklevel=2)
            return
        _stream_ok(stream, "mark")

    @staticmethod
    def range_push(message: str, stream: Any = None, domain: str = "default") -> int:
        """Open a nested range: -1, the depth torch_npu answers while markers are off."""
        _checked(message, domain, stream, "range_push")
        return -1

    @staticmethod
    def range_pop(domain: str = "default") -> int:
        """Close the innermost range: -1 (markers off)."""
        _text_ok(domain, "domain", "range_pop")
        return -1

    @staticmethod
    def range_start(message: str, stream: Any = None, domain: str = "default") -> int:
        """Open a range: its id, 0 while markers are off (``range_end`` ignores 0)."""
        _checked(message, domain, stream, "range_start")
        return 0

    @staticmethod
    def range_end(range_id: int, domain: str = "default") -> None:
        """Close the range ``range_start`` opened."""
        if not isinstance(range_id, int):
            warnings.warn("Invalid message for mstx.range_end function. Please provide the "
                          "return value from mstx.range_start.", stacklevel=2)
            return
        _text_ok(domain, "domain", "range_end")

    @staticmethod
    def mstx_range(message: str, stream: Any = None,
                   domain: str = "default") -> Callable[[Callable], Callable]:
        """A decorator: the function's calls as ranges."""
        def wrapper(func: Callable) -> Callable:
            @functools.wraps(func)
            def inner(*args: Any, **kwargs: Any) -> Any:
                range_id = mstx.range_start(message, stream, domain)
                try:
                    return func(*args, **kwargs)
                finally:
                    mstx.range_end(range_id, domain)
            return inner
        return wrapper


class annotate:
    """A range as a context manager or a decorator (the function's name when no message)."""

    def __init__(self, message: str = "", stream: Any = None, domain: str = "default") -> None:
        self.message, self.stream, self.domain = message, stream, domain
        self.range_id: int | None = None

    def __enter__(self) -> annotate:
        self.range_id = mstx.range_start(self.message, self.stream, self.domain)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.range_id is not None:
            mstx.range_end(self.range_id, self.domain)
            self.range_id = None

    def __call__(self, func: Callable) -> Callable:
        if not self.message:
            self.message = func.__name__
        return mstx.mstx_range(self.message, self.stream, self.domain)(func)


mstx.annotate = annotate
