"""The owner: one Python process holds the simulated machine and serves worker processes.

``serve(rt)`` listens on a local address (a Unix socket in a private temporary directory;
``127.0.0.1`` where there are none) with a random key, and puts both in this process's
environment (:data:`ENV_ADDRESS`, :data:`ENV_KEY`), so the workers it starts afterwards
(``multiprocessing``, spawn or fork) find it with ``ascend_memsim.connect()``. Each connection
is one worker process: the owner authenticates it (HMAC challenge, ``multiprocessing.connection``;
all connections at once on one thread, :mod:`._acceptor`, so an idle one delays no one),
spawns a simulated process for it on ``rt``'s machine (``rt.spawn_process()``, its own pid) and
serves its calls on a thread of its own, acting as that process
(:func:`~ascend_memsim.runtime.process.acting_as`): a call is a pyacl function's name and
plain arguments, run through the face here, and its result goes back as plain values
(:mod:`.wire`; nothing is unpickled). When the connection ends (the worker finished, or died),
the owner ends the simulated process as aclFinalize does: its IPC keys and imports are closed,
its devices reset, its leaks reported by its sanitizer and kept in :attr:`Owner.ended`.

Host buffers of a worker (DECISION): ``bytes_to_ptr`` / ``numpy_to_ptr`` in a worker register
a *copy* of the buffer in the worker's simulated process here; the worker sends the bytes
of its arrays that changed before each call, and gets back the bytes of the copies a call
changed (a copy to host, a synchronize that ends an async one), which it writes into its
objects. ``malloc_host`` blocks live here; a worker reads them with ``ptr_to_bytes`` /
``ptr_to_numpy`` (a copy, not a view; at most :data:`~.wire.MAX_BYTES`, refused before it is
read).
"""

from __future__ import annotations

import ctypes
import logging
import math
import os
import secrets
import socket
import threading
import time
import traceback
import weakref
from collections.abc import Callable
from multiprocessing import connection as mpc
from typing import Any

import numpy as np

from .. import acl
from ..acl import mdl, media, op, rt, util
from ..acl._face import face, forget_error, get_recent_err_msg
from ..data import pointers
from ..memory.errors import (
    AclError,
    AlreadyFinalized,
    AlreadyInitialized,
    FeatureNotSupported,
    InvalidArgument,
    InvalidArgumentType,
)
from ..memory.sites import Frame, Site, calls_from
from ..runtime.active import current_runtime
from ..runtime.config import parse_config
from ..runtime.process import acting_as
from . import wire
from ._acceptor import Acceptor

__all__ = ["Owner", "serve", "ENV_ADDRESS", "ENV_KEY", "HANDSHAKE_SECONDS"]

log = logging.getLogger("ascend_memsim.remote")

#: the owner's address and key (hex), for the worker processes it starts
ENV_ADDRESS = "ASCEND_MEMSIM_OWNER"
ENV_KEY = "ASCEND_MEMSIM_OWNER_KEY"
#: the most frames of a worker's stack a call carries (its site in reports)
SITE_FRAMES = 16
#: DECISION: a connection that has not authenticated within this many seconds of its
#: arrival is dropped (``serve(rt, handshake_timeout=...)``). The acceptor thread holds every
#: connection in its handshake at once (none costs a thread before it holds the key), so a
#: silent peer delays no one else
HANDSHAKE_SECONDS = 5.0
#: the acl.rt calls that take a Python callable or a host thread: not served (the owner
#: cannot run a worker's function)
NOT_SERVED = frozenset(("rt.launch_callback", "rt.process_report", "rt.subscribe_report",
                        "rt.unsubscribe_report", "util.start_thread", "util.stop_thread"))
_BUILTIN_ERRORS = {e.__name__: e for e in (TypeError, ValueError, OverflowError, KeyError,
                                            IndexError, MemoryError, RuntimeError)}


class Owner:
    """A server of one runtime's machine to worker processes (see the module docstring).

    ``with serve(rt) as owner:`` ... ; :meth:`close` ends every worker's process.
    """

    def __init__(self, runtime: Any, *, env: bool = True,
                 handshake_timeout: float | None = None, **process_options: Any) -> None:
        if handshake_timeout is None:
            handshake_timeout = HANDSHAKE_SECONDS
        if (type(handshake_timeout) not in (int, float) or not math.isfinite(handshake_timeout)
                or handshake_timeout <= 0):
            raise ValueError(f"handshake_timeout: a number of seconds > 0, not "
                             f"{handshake_timeout!r}")
        self.runtime = runtime
        self.authkey = secrets.token_bytes(32)
        self._process_options = process_options
        self._lock = threading.Condition()
        self._closing = False
        #: pid -> the live connection's session
        self.sessions: dict[int, _Session] = {}
        #: pid -> what the sanitizer found still live when that worker's process ended
        #: (``(call, description)`` pairs); a pid is here once its process has ended
        self.ended: dict[int, list[tuple[str, str]]] = {}
        self._threads: list[threading.Thread] = []
        self._acceptor = Acceptor(self.authkey, handshake_timeout=float(handshake_timeout),
                                  admitted=self._admitted)
        self.address = self._acceptor.address
        self._saved_env: dict[str, str | None] = {}
        if env:
            for name, value in ((ENV_ADDRESS, _show_address(self.address)),
                                (ENV_KEY, self.authkey.hex())):
                self._saved_env[name] = os.environ.get(name)
                os.environ[name] = value
        self._os_pid = os.getpid()
        _LIVE.add(self)

    def __repr__(self) -> str:
        return f"Owner({_show_address(self.address)!r}, workers={sorted(self.sessions)})"

    def __enter__(self) -> Owner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def wait_ended(self, pid: int, timeout: float) -> bool:
        """Wait until the worker process ``pid`` has ended (True), at most ``timeout`` s."""
        with self._lock:
            return self._lock.wait_for(lambda: pid in self.ended, timeout)

    def close(self, timeout: float = 10.0) -> None:
        """Stop listening, end every worker's connection and process; restore the
        environment (whatever else fails). Waits at most ``timeout`` s in all for the
        serving threads. Idempotent."""
        with self._lock:
            if self._closing:
                return
            self._closing = True
            sessions = list(self.sessions.values())
        _LIVE.discard(self)
        deadline = time.monotonic() + timeout
        try:
            self._acceptor.close(timeout)
            for session in sessions:
                session.shutdown()
            for thread in list(self._threads):  # a call that never returns is left behind
                thread.join(max(0.0, deadline - time.monotonic()))
        finally:
            for name, value in self._saved_env.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value

    # -- serving --------------------------------------------------------------------------

    def _admitted(self, conn: mpc.Connection) -> None:
        """Serve a connection that has proved the key on a thread of its own (the acceptor
        calls this)."""
        thread = threading.Thread(target=self._serve, args=(conn,), daemon=True,
                                  name="memsim-owner-worker")
        try:
            thread.start()
        except RuntimeError as e:  # out of threads: this worker reads end of file
            log.error("cannot start a thread to serve a worker (%s): its connection is "
                      "closed", e)
            conn.close()
            return
        self._threads = [t for t in self._threads if t.is_alive()] + [thread]

    def _serve(self, conn: mpc.Connection) -> None:
        with self._lock:
            if self._closing:
                conn.close()
                return
            try:
                process = self.runtime.spawn_process(**self._process_options)
            except Exception:  # options the runtime refuses: the worker reads end of file
                log.error("cannot start a worker process:\n%s", traceback.format_exc())
                conn.close()
                return
            # a worker's raw host address means nothing here: never read or write ours
            process.host.raw_access = False
            session = _Session(conn, process)
            self.sessions[process.pid] = session
        try:
            session.send({"pid": process.pid})
            with acting_as(process):
                session.run()
        finally:
            conn.close()
            with calls_from(Site.of_frames(())):  # no frame of the worker's ends it
                found = session.end()
            with self._lock:
                del self.sessions[process.pid]
                self.ended[process.pid] = found
                self._lock.notify_all()


#: the owners not closed yet (a fork's copies belong to another process: see serving_here)
_LIVE: weakref.WeakSet[Owner] = weakref.WeakSet()


def serving_here() -> bool:
    """Whether this Python process serves a machine (an owner it made is not closed)."""
    return any(owner._os_pid == os.getpid() for owner in list(_LIVE))


def serve(runtime: Any, *, env: bool = True, handshake_timeout: float | None = None,
          **process_options: Any) -> Owner:
    """Serve ``runtime``'s machine to worker processes (see the module docstring).

    ``env``: put the address and key in ``os.environ`` for the workers this process starts.
    ``handshake_timeout``: seconds a connection has to prove the key (default
    :data:`HANDSHAKE_SECONDS`). ``process_options``: for each worker's ``rt.spawn_process``
    (``sanitizer``, ...).

    Raises:
        ValueError: a handshake_timeout that is not a number of seconds > 0.
    """
    return Owner(runtime, env=env, handshake_timeout=handshake_timeout, **process_options)


def _show_address(address: Any) -> str:
    return address if isinstance(address, str) else f"{address[0]}:{address[1]}"


def _shutdown(conn: mpc.Connection) -> None:
    """Wake a thread blocked reading ``conn`` (it then reads end of file)."""
    try:
        with socket.socket(fileno=os.dup(conn.fileno())) as sock:
            sock.shutdown(socket.SHUT_RDWR)
    except (OSError, ValueError):
        pass


class _Session:
    """One worker's connection: its simulated process and the copies of its host buffers."""

    def __init__(self, conn: mpc.Connection, process: Any) -> None:
        self.conn = conn
        self.process = process
        #: ptr -> [the copy registered here, its bytes as the worker last saw them]
        self.mirrors: dict[int, list] = {}
        self._found: list[tuple[str, str]] = []
        process.sanitizer.leak_sink = self._sink

    def _sink(self, call: str, blocks: list) -> None:
        self._found.extend((call, block.describe()) for block in blocks)

    def send(self, message: dict) -> None:
        """Send one reply; the copies it writes back go ahead, one a message, when they do
        not fit in with it (``{"more": True, "pull": [[ptr, bytes]]}``)."""
        try:
            data = wire.pack(message)
        except wire.TooBig:
            for item in message.pop("pull", ()):
                self.send({"more": True, "pull": [item]})
            try:
                data = wire.pack(message)
            except wire.WireError as e:
                data = wire.pack({"raise": "ValueError", "message": f"the reply: {e}"})
        except wire.WireError as e:
            data = wire.pack({"raise": "ValueError", "message": f"the reply: {e}"})
        self.conn.send_bytes(data)

    def shutdown(self) -> None:
        _shutdown(self.conn)

    def run(self) -> None:
        """Serve calls until the worker closes the connection or a frame cannot be read.
        One frame is read and parsed at a time, in memory bounded by its size
        (:mod:`.wire`)."""
        while True:
            try:
                message = wire.receive(self.conn)
            except EOFError:
                return
            except OSError as e:  # over MAX_MESSAGE (the stream can no longer be read), reset
                try:
                    self.send({"raise": "ValueError", "message": f"connection ended: {e}"})
                except OSError:
                    pass
                return
            except wire.WireError as e:  # read whole: the next frame can be read
                reply = {"raise": "ValueError", "message": f"a bad message: {e}"}
            else:
                reply = self._answer(message)
                del message  # its values go before the next frame is read
            try:
                self.send(reply)
            except OSError:
                return

    def _answer(self, message: dict) -> dict:
        """The reply to one message: its call's, or the error that stopped it."""
        try:
            return self.handle(message)
        except wire.WireError as e:
            return {"raise": "ValueError", "message": f"a bad message: {e}"}
        except Exception as e:  # a bug here: the worker hears of it, the owner lives on
            log.error("serving worker process %d:\n%s", self.process.pid,
                      traceback.format_exc())
            return {"raise": "RuntimeError", "message": f"the owner failed: {e!r}"}

    def handle(self, message: dict) -> dict:
        """Run one call; its reply (an error of the call is in the reply, not raised).

        Raises:
            WireError: the message is not a call (name and argument list), or its site,
                pushed arrays or dropped buffers are malformed; nothing was applied.
        """
        if message.keys() == {"push"}:  # changed arrays sent ahead of a call too big for them
            self._apply(message["push"], [])
            return {"ok": None}
        name, args = message.get("call"), message.get("args", ())
        if type(name) is not str or type(args) not in (list, tuple):
            raise wire.WireError("a call is {'call': name, 'args': [...]}")
        fn = _table().get(name)
        if fn is None:
            return {"raise": "AttributeError", "message": f"no served function {name!r}"}
        site = _site(message.get("site", ()))
        # checked before anything applies: a refused message changes nothing
        self._apply(message.get("push", []), message.get("drop", []))
        forget_error()
        reply: dict[str, Any]
        try:
            with calls_from(site):
                if name in _HOST_CALLS:
                    result = fn(self, *args)
                else:
                    result = fn(*args)
        except AclError as error:  # the util helpers raise, as pyacl's do
            reply = {"raise": "AclError", "class": type(error).__name__,
                     "message": error.message}
        except Exception as error:  # a wrong call (arity), or a bug: never the owner's end
            kind = type(error).__name__
            if not isinstance(error, TypeError):
                log.warning("worker call %s failed:\n%s", name, traceback.format_exc())
            reply = {"raise": kind if kind in _BUILTIN_ERRORS else "RuntimeError",
                     "message": f"{kind}: {error}"}
        else:
            reply = {"ok": result}
        message_text = get_recent_err_msg()
        if message_text:
            reply["err"] = message_text
        reply["pull"] = self._changed()
        return reply

    def _apply(self, push: Any, drop: Any) -> None:
        """The worker's changed arrays and dropped buffers (all checked before any applies)."""
        if type(push) not in (list, tuple) or type(drop) not in (list, tuple):
            raise wire.WireError("push and drop are lists")
        for item in push:
            if (type(item) not in (list, tuple) or len(item) != 2 or type(item[0]) is not int
                    or item[0] not in self.mirrors
                    or type(item[1]) is not bytes
                    or not isinstance(self.mirrors[item[0]][0], np.ndarray)
                    or len(item[1]) != self.mirrors[item[0]][0].nbytes):
                raise wire.WireError("push: not [ptr, bytes] of a registered array")
        if any(type(ptr) is not int or ptr not in self.mirrors for ptr in drop):
            raise wire.WireError("drop: not a registered buffer")
        for ptr, data in push:
            copy = self.mirrors[ptr]
            # the copy's own buffer (a bytearray), whether or not the array is writeable
            ctypes.memmove(copy[0].ctypes.data, data, len(data))
            copy[1] = data
        for ptr in set(drop):
            # the registration now holds the last reference: the buffer counts as freed
            del self.mirrors[ptr]

    def _changed(self) -> list:
        """``[ptr, bytes]`` of each copy a call changed."""
        out = []
        for ptr, copy in self.mirrors.items():
            now = copy[0].tobytes() if isinstance(copy[0], np.ndarray) else bytes(
                memoryview(copy[0]))
            if now != copy[1]:
                copy[1] = now
                out.append([ptr, now])
        return out

    def end(self) -> list[tuple[str, str]]:
        """End the worker's simulated process (aclFinalize); what it left live."""
        self.mirrors.clear()
        try:
            self.process.close()
        except Exception:  # a strict sanitizer's report: the process is ended all the same
            log.warning("ending worker process %d:\n%s", self.process.pid,
                        traceback.format_exc())
        if self._found:
            log.warning("worker process %d ended with %d leaks: %s", self.process.pid,
                        len(self._found), "; ".join(d for _, d in self._found))
        return self._found

    # -- host buffers (util) ---------------------------------------------------------------

    def bytes_to_ptr(self, data: Any) -> int:
        ptr = pointers.bytes_to_ptr(self.process, data)
        self.mirrors[ptr] = [data, bytes(memoryview(data))]
        return ptr

    def numpy_to_ptr(self, dtype: Any, shape: Any, data: Any, writeable: Any,
                     keep: Any) -> int:
        if type(dtype) is not str or type(data) is not bytes or type(shape) is not list:
            raise InvalidArgumentType("numpy_to_ptr: a dtype str, a shape list and bytes")
        try:
            kind = np.dtype(dtype)
            if kind.hasobject:
                raise InvalidArgumentType(f"numpy_to_ptr: an array of dtype {kind} holds "
                                          f"Python objects (their pointers), not data")
            array = np.frombuffer(bytearray(data), kind).reshape(shape)
        except (TypeError, ValueError) as e:
            raise InvalidArgument(f"numpy_to_ptr: not an array: {e}") from None
        array.flags.writeable = bool(writeable)
        ptr = pointers.numpy_to_ptr(self.process, array)
        if keep:
            self.mirrors[ptr] = [array, data]
        return ptr

    def ptr_to_bytes(self, ptr: Any, size: Any) -> bytes:
        if type(size) is int and size > wire.MAX_BYTES:  # never read only to be refused
            raise ValueError(f"ptr_to_bytes: {size} bytes do not fit in one message (at "
                             f"most {wire.MAX_BYTES})")
        return pointers.ptr_to_bytes(self.process, ptr, size)

    def ptr_to_numpy(self, ptr: Any, shape: Any, np_type: Any) -> tuple:
        array = util.ptr_to_numpy(ptr, shape, np_type)  # a view: nothing copied yet
        if array.nbytes > wire.MAX_BYTES:
            raise ValueError(f"ptr_to_numpy: {array.nbytes} bytes do not fit in one message "
                             f"(at most {wire.MAX_BYTES})")
        return array.dtype.str, list(array.shape), array.tobytes()


def _site(frames: Any) -> Site:
    """The worker's frames a call comes from (``[[file, line, function], ...]``, outermost
    first), as the site the sanitizer and traces show.

    Raises:
        WireError: another form, or more than :data:`SITE_FRAMES` frames.
    """
    if type(frames) not in (list, tuple) or len(frames) > SITE_FRAMES:
        raise wire.WireError(f"site: a list of at most {SITE_FRAMES} frames")
    out = []
    for frame in frames:
        if (type(frame) not in (list, tuple) or len(frame) != 3 or type(frame[0]) is not str
                or type(frame[1]) is not int or type(frame[2]) is not str):
            raise wire.WireError("site: a frame is [file, line, function]")
        out.append(Frame(frame[0][:1000], frame[1], frame[2][:200]))
    return Site.of_frames(out)


def _init(config: Any = None) -> None:
    """aclInit of the worker's process: its config (read by the worker) applied as to an
    adopted runtime (``Runtime.adopt_config``)."""
    process = current_runtime()
    if process.acl_initialized:
        raise AlreadyInitialized("acl.init was already called; call acl.finalize first")
    if config is not None and type(config) is not dict:
        raise InvalidArgumentType("acl.init: the config is a JSON object")
    process.adopt_config(parse_config(config))
    process.acl_initialized = True


def _finalize() -> None:
    process = current_runtime()
    if not process.acl_initialized:
        raise AlreadyFinalized("acl.finalize without a matching acl.init")
    process.acl_initialized = False
    process.release_adoption()


def refusal(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    """``fn``'s failure, in its return convention: the owner does not serve it."""
    def refuse(*args: Any) -> None:
        raise FeatureNotSupported(f"{name} is not served to worker processes (it takes a "
                                  f"Python callable or runs on the owner's host)")
    if not hasattr(fn, "defaults"):  # a helper that raises, as pyacl's do
        return refuse
    made: Any = fn  # a face function (acl/_face.py), which carries its return convention
    return face(*made.defaults, bare=made.bare, ok=made.ok)(refuse)


_TABLE: dict[str, Callable[..., Any]] = {}
#: the calls a session serves itself (host buffers of the worker)
_HOST_CALLS = frozenset(("util.bytes_to_ptr", "util.numpy_to_ptr", "util.ptr_to_bytes",
                         "util.ptr_to_numpy"))


def _table() -> dict[str, Callable[..., Any]]:
    """Served name -> the function that serves it (made once)."""
    if _TABLE:
        return _TABLE
    table: dict[str, Callable[..., Any]] = {
        "init": face()(_init), "finalize": face()(_finalize),
        "util.bytes_to_ptr": _Session.bytes_to_ptr, "util.numpy_to_ptr": _Session.numpy_to_ptr,
        "util.ptr_to_bytes": _Session.ptr_to_bytes, "util.ptr_to_numpy": _Session.ptr_to_numpy,
    }
    for prefix, module in (("", acl), ("rt.", rt), ("op.", op), ("mdl.", mdl),
                           ("media.", media), ("util.", util)):
        for attr in module.__all__:
            fn = getattr(module, attr)
            name = prefix + attr
            if name in table or not callable(fn) or isinstance(fn, type):
                continue
            if prefix == "rt." and name not in NOT_SERVED:
                table[name] = getattr(fn, "unrouted", fn)
            else:
                table[name] = refusal(fn, name)
    table["get_soc_name"] = acl.get_soc_name
    _TABLE.update(table)
    return _TABLE
