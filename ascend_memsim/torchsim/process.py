"""How the script's process ends, in an estimate: every way of ending is a status, never a
silent "fits".

- ``sys.exit(code)`` anywhere in the script (a function target too): the status Python's own
  exit would give: None and False are 0, True is 1, an int is itself, anything else (a
  message) is 1 (:func:`~ascend_memsim.runtime.exits.exit_status`).
- ``os._exit(code)``: in the script's own process it ends the script with that status, and
  the estimate reports (the real call would end the process before any summary); in a
  process the script forked (DataLoader workers, ``multiprocessing``) it is the real call.
- ``atexit`` handlers the script registers run when the script ends, still in the estimate
  (their allocations are counted, their ``os._exit`` is a status; their errors, a
  ``sys.exit`` too, are printed and change nothing), as its process would run them at its
  exit (:class:`~ascend_memsim.runtime.exits.ExitHandlers`, which ``ascend-memsim run``
  shares).
- A child the script forks with ``os.fork()`` that returns out of the script ends there with
  the script's status, instead of going on to print a second summary (:func:`run`).
- A thread the script starts (``threading.Thread``, a ``ThreadPoolExecutor``'s workers:
  transformers loads checkpoint shards so) runs on the estimate's fake tensors too, its NPU
  tensors allocated and freed as the main thread's, an out-of-memory raised in it
  (:func:`install_threads`).
"""

from __future__ import annotations

import atexit
import os
import threading
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import _disable_current_modes, _pop_mode, _push_mode

from ..runtime.exits import ExitHandlers, exit_status

__all__ = ["ScriptExit", "run", "install_threads", "drain_autograd"]


class ScriptExit(SystemExit):
    """``os._exit(status)`` in the script's process, unwound to the estimate (a SystemExit,
    so a script runner takes it as the script's exit with that status; unlike
    ``sys.exit``, the script's ``atexit`` handlers do not run after it)."""

    #: a script runner that sees it does not run the exit handlers after it
    ends_process = True

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


def run(body: Callable[[], int]) -> int:
    """Run the script (``body``, which gives its status) under the module's rules; its
    status."""
    pid = os.getpid()
    real_exit, register, unregister = os._exit, atexit.register, atexit.unregister
    handlers = ExitHandlers()

    def _exit(status: int) -> None:
        if os.getpid() != pid:
            real_exit(status)
        raise ScriptExit(status)

    os._exit = _exit  # type: ignore[assignment]
    atexit.register, atexit.unregister = handlers.register, handlers.unregister
    try:
        try:
            status = body()
        except ScriptExit as e:
            return e.status
        except SystemExit as e:
            status = exit_status(e.code)
        try:
            handlers.run()
        except ScriptExit as e:
            return e.status
    finally:
        os._exit, atexit.register, atexit.unregister = real_exit, register, unregister
    if os.getpid() != pid:
        # a child the script forked came back out of it: it ends here, as its own process
        real_exit(status)
    return status


def install_threads(session: Any) -> Callable[[], None]:
    """Make each thread started while ``session`` runs a thread of the script: the session's
    modes (fake tensors, then the tracker) on its stack while it runs, its ident in
    ``session.script_threads`` (an out-of-memory is raised there, not deferred as on
    autograd's threads); a callable that undoes it."""
    # (_bootstrap_inner, not run: a subclass overrides run; the thread's body is run from
    # _bootstrap_inner in every Python the project supports)
    thread_cls: Any = threading.Thread
    run_thread = thread_cls._bootstrap_inner
    modes = (session._fake, session._tracker)

    def run_in_session(self: threading.Thread) -> None:
        # pushed on this thread's own stack, without the modes' __enter__ (whose bookkeeping
        # is the main thread's)
        for mode in modes:
            _push_mode(mode)
        ident = threading.get_ident()
        session.script_threads.add(ident)
        try:
            run_thread(self)
        finally:
            session.script_threads.discard(ident)
            for _ in modes:
                _pop_mode()

    thread_cls._bootstrap_inner = run_in_session

    def undo() -> None:
        thread_cls._bootstrap_inner = run_thread

    return undo


def drain_autograd(fake_mode: Any) -> None:
    """Run one backward on autograd's NPU thread with no dispatch mode active, so that the
    thread has let go of the estimate's backward passes before the caller goes on.

    Why: autograd's device thread drops a finished backward's state (which holds the
    estimate's dispatch modes, Python objects) after the caller has its result; if the
    caller's interpreter is shutting down by then, that thread cannot take the GIL and the
    process aborts ("terminate called without an active exception"). The thread runs its
    tasks one at a time, so once this backward has run, the earlier ones are let go; this
    one's state holds no Python mode (the tensors it touches are still held here)."""
    with fake_mode:
        leaf = torch.empty((), device="npu", requires_grad=True)
        out = leaf * 2
    with _disable_current_modes():
        out.backward()
    del out, leaf
