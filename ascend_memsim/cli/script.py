"""Run a Python script as ``python SCRIPT.py`` would, its exit included, inside this process.

``ascend-memsim run`` needs the script's whole life to happen while the simulated runtime is
open: a real process, when its main module ends, first runs the ``atexit`` handlers, then
tears down its modules (the garbage collector finalizes the main module's objects, whose
``__del__`` may free device memory), and only then does the CANN runtime go away. A script run
by :func:`runpy.run_path` returns before any of that, so its clean-up would meet a runtime
already finalized (every release ACL_ERROR_UNINITIALIZE, every block a false leak).
"""

from __future__ import annotations

import atexit
import gc
import importlib
import io
import os
import pkgutil
import runpy
import sys
import traceback
import types
from collections.abc import Callable
from typing import Any

from ..runtime.exits import ExitHandlers, exit_status

__all__ = ["run_script", "run_module", "run_entry"]


def _code_of(path: str) -> types.CodeType:
    """The code of a script file: a compiled ``.pyc``, else its source (as runpy reads it)."""
    with io.open_code(os.path.abspath(path)) as f:
        code = pkgutil.read_code(f)
    if code is None:
        with io.open_code(os.path.abspath(path)) as f:
            code = compile(f.read(), path, "exec")
    return code


def _execute(path: str, namespace: dict) -> int:
    """Run the script in ``namespace``; its exit status (a traceback printed on an error)."""
    zipped = pkgutil.get_importer(path) is not None
    try:
        code = None if zipped else _code_of(path)
    except (SyntaxError, ValueError) as e:  # ValueError: a NUL byte (Python < 3.12)
        traceback.print_exception(type(e), e, None, file=sys.stderr)
        return 1
    def body() -> None:
        if code is None:
            # a zip application: runpy finds its __main__.py (its globals are runpy's copy)
            namespace.update(runpy.run_path(path, run_name="__main__"))
        else:
            exec(code, namespace)

    return _status_of(body, path)


def _status_of(body: Callable[[], object], path: str) -> int:
    """Run ``body`` as a process's main code; its exit status (a traceback printed on an
    error; the value ``body`` returns is a console script's ``sys.exit(main())``)."""
    try:
        returned = body()
    except SystemExit as e:
        if getattr(e, "ends_process", False):
            raise   # os._exit (an estimate's): no exit handler runs after it
        return exit_status(e.code)
    except BaseException as e:  # the script's failure is its exit status
        tb = e.__traceback__
        if getattr(e, "_ascend_memsim_user_error", False):
            # the simulation's answer at the script's line (an out-of-memory, a stop): the
            # script's own frames, no chain through the simulator's
            _print_user_traceback(e, path)
            return 1
        # leave out this module's frames: the traceback starts in the script, as python's
        while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
            tb = tb.tb_next
        traceback.print_exception(type(e), e, tb, file=sys.stderr)
        return 1
    return exit_status(returned)


#: ascend_memsim's own directory
_PACKAGES = (os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,)


def _print_user_traceback(error: BaseException, path: str) -> None:
    """``error`` as Python prints it, with the frames of the script and of the code it
    imported, not those of torch or of ascend_memsim."""
    frames = [f for f in traceback.extract_tb(error.__traceback__)
              if not f.filename.startswith(_internal_dirs())]
    lines = ["Traceback (most recent call last):\n", *traceback.format_list(frames),
             *traceback.format_exception_only(type(error), error)]
    sys.stderr.write("".join(lines))


def _internal_dirs() -> tuple[str, ...]:
    """The directories of ascend_memsim and (when imported) torch."""
    dirs = list(_PACKAGES)
    torch_file = getattr(sys.modules.get("torch"), "__file__", None)
    if torch_file:
        dirs.append(os.path.dirname(os.path.abspath(torch_file)) + os.sep)
    return tuple(dirs) + ("<frozen ",)


def run_script(path: str, argv: list[str]) -> int:
    """Run the script at ``path`` with ``sys.argv = argv`` as its own process would, up to
    the point where the interpreter ends; the exit status.

    The script runs as ``__main__`` with its directory first on ``sys.path``. When it ends
    (normally, by ``sys.exit`` or by an exception, whose traceback is printed), the
    interpreter's exit is done here, in its order: the ``atexit`` handlers registered while it
    ran are called (last first), then its main module is torn down (the garbage collector
    finalizes its objects, ``__del__`` included). ``sys.argv``, ``sys.path``,
    ``sys.modules["__main__"]`` and ``atexit`` are restored afterwards.

    DECISION: every handler registered through ``atexit`` while the script runs is the
    script's (its libraries' too: a real process would run them at its exit), and none
    registered before. Threads the script leaves running are not waited for.
    """
    handlers = ExitHandlers()
    saved = (sys.argv, list(sys.path), sys.modules.get("__main__"), atexit.register,
             atexit.unregister)
    module = types.ModuleType("__main__")
    # what runpy.run_path(path, run_name="__main__") sets
    module.__dict__.update(__file__=path, __cached__=None, __loader__=None, __package__="",
                           __spec__=None)
    namespace = module.__dict__
    try:
        sys.argv = list(argv)
        sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
        sys.modules["__main__"] = module
        atexit.register, atexit.unregister = handlers.register, handlers.unregister
        status = _execute(path, namespace)
        handlers.run()
    finally:
        atexit.register, atexit.unregister = saved[3], saved[4]
        if saved[2] is None:
            sys.modules.pop("__main__", None)
        else:
            sys.modules["__main__"] = saved[2]
    # Nothing of run's holds the module now: the collector finalizes its objects (their
    # globals intact, as at the interpreter's exit). Globals something else still holds
    # (a registry, a thread) stay, as they would in the process until it dies.
    del module, namespace
    gc.collect()
    sys.argv, sys.path[:] = saved[0], saved[1]
    return status


def _as_process(argv: list[str], path_entry: str, body: Callable[[], int]) -> int:
    """``body`` (which gives an exit status) with ``sys.argv = argv``, ``path_entry`` first on
    ``sys.path`` and the ``atexit`` handlers registered meanwhile run after it, as
    :func:`run_script` runs a script; everything restored afterwards."""
    handlers = ExitHandlers()
    saved = (sys.argv, list(sys.path), atexit.register, atexit.unregister)
    try:
        sys.argv = list(argv)
        sys.path.insert(0, path_entry)
        atexit.register, atexit.unregister = handlers.register, handlers.unregister
        status = body()
        handlers.run()
    finally:
        atexit.register, atexit.unregister = saved[2], saved[3]
        sys.argv, sys.path[:] = saved[0], saved[1]
    gc.collect()
    return status


def run_module(module: str, argv: list[str]) -> int:
    """``python -m module ARGS`` (``argv`` is ``[module, *ARGS]``) as :func:`run_script` runs a
    script: runpy's ``run_module`` as ``__main__`` (``sys.argv[0]`` its file), the current
    directory first on ``sys.path``, as ``python -m`` puts it; the exit status."""
    def main() -> None:
        runpy.run_module(module, run_name="__main__", alter_sys=True)

    return _as_process(argv, os.getcwd(), lambda: _status_of(main, module))


def run_entry(entry: str, argv: list[str]) -> int:
    """A console script (``entry`` "module:function", as its ``console_scripts`` entry point
    names it) with ``sys.argv = argv``: ``sys.exit(function())``, as pip's wrapper runs it;
    the exit status."""
    module_name, _, attr = entry.partition(":")

    def call() -> object:
        function: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            function = getattr(function, part)
        return function()

    return _as_process(argv, os.getcwd(), lambda: _status_of(call, module_name))
