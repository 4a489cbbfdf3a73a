"""How a script's process ends, for the runners that run a script inside this process
(``ascend-memsim run`` and ``estimate``): its ``atexit`` handlers, kept and run when it
ends, and the exit status of ``sys.exit(code)``. One implementation for both runners
(``ascend_memsim/cli/script.py``, ``ascend_memsim/torchsim/process.py``).
"""

from __future__ import annotations

import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any

__all__ = ["ExitHandlers", "exit_status"]


def exit_status(code: object) -> int:
    """The process status of ``sys.exit(code)``, as the interpreter computes it: None is 0,
    an int (True and False too) is itself, anything else is printed on stderr and is 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return int(code)
    print(code, file=sys.stderr)
    return 1


class ExitHandlers:
    """What ``atexit.register`` / ``atexit.unregister`` do, for the handlers registered while
    a script runs: kept here, run by :meth:`run` when the script ends (last registered
    first). Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._handlers: list[tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]] = []

    def register(self, func: Callable[..., Any], /, *args: Any,
                 **kwargs: Any) -> Callable[..., Any]:
        if not callable(func):
            raise TypeError("the first argument must be callable")
        with self._lock:
            self._handlers.append((func, args, kwargs))
        return func

    def unregister(self, func: Callable[..., Any], /) -> None:
        with self._lock:
            self._handlers = [h for h in self._handlers if h[0] != func]

    def run(self) -> None:
        """Call each handler once, last registered first. An exception in one, a
        ``sys.exit`` too, is printed and the rest run, the status unchanged (as the
        interpreter does: "Exception ignored in atexit callback"). A SystemExit marked
        ``ends_process`` (an ``os._exit`` the runner turned into one) ends the process
        there: it is raised, and no later handler runs."""
        while True:
            with self._lock:
                if not self._handlers:
                    return
                func, args, kwargs = self._handlers.pop()
            try:
                func(*args, **kwargs)
            except SystemExit as e:
                if getattr(e, "ends_process", False):
                    raise
                _ignored(func, e)
            except BaseException as e:  # as the interpreter: print it, go on
                _ignored(func, e)


def _ignored(func: Callable[..., Any], error: BaseException) -> None:
    print(f"Exception ignored in atexit callback: {func!r}", file=sys.stderr)
    traceback.print_exception(type(error), error, error.__traceback__, file=sys.stderr)
