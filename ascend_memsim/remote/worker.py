"""A worker: a Python process whose pyacl face calls run on an owner's simulated machine.

``ascend_memsim.connect()`` (in a process an :class:`~.owner.Owner` started, or with its
address and key) connects, and from then on every function of ``acl`` (``ascend_memsim.acl``,
which ``import acl`` names after the call) sends its name and arguments to the owner and
returns what the call returned there, as the worker's own simulated process (its pid is
:attr:`Worker.pid`, also ``acl.rt.device_get_bare_tgid()``). The functions are replaced in
the face's modules, so code that calls them through the modules (``acl.rt.malloc(...)``)
reaches the owner; a function bound before (``from acl.rt import malloc`` in a parent that
forked the worker) still runs locally.

Host buffers: see :mod:`.owner` (copies kept in step before and after each call).
``acl.get_recent_err_msg`` and ``acl.app_log`` stay local (the message of the worker's last
failed call; the worker's logger).

A worker that forks (DECISION): the child never uses its parent's connection (the child's
copy of it is closed at the fork). Its first call connects to the owner anew, with the address
and key its parent used, as a simulated process of its own that has called nothing yet (no
device set, none of the parent's host buffers); if it cannot reach the owner, that call and
every later one raise :class:`OwnerLost` saying so. A forked child is a process of its own
on hardware too: what the parent set up is not the child's.
"""

from __future__ import annotations

import ctypes
import os
import socket
import sys
import threading
import time
import types
from collections.abc import Callable
from multiprocessing import connection as mpc
from typing import Any

import numpy as np

from .. import acl
from ..acl import _pyacl, install_acl, mdl, media, op, rt, util
from ..acl._face import remember_error
from ..data.registered import bytes_address
from ..memory import errors
from ..memory.sites import capture_site
from ..runtime.config import load_config
from ..runtime.runtime import Runtime
from . import wire
from .owner import ENV_ADDRESS, ENV_KEY, NOT_SERVED, refusal, serving_here

__all__ = ["Worker", "connect", "OwnerLost", "CALL_SECONDS", "CONNECT_SECONDS"]

#: DECISION: a call the owner has not answered in this many seconds ends the connection
#: (TimeoutError); the owner's own end of file ends it at once
CALL_SECONDS = 300.0
#: DECISION: connect() gives up (OwnerLost) when the owner has not accepted, authenticated
#: and greeted it in this many seconds (the owner admits connections side by side: an idle
#: one ahead of this worker does not delay it)
CONNECT_SECONDS = 60.0

#: how many of the worker's frames go with each call (its site in the owner's reports)
SITE_FRAMES = 10
_LOCAL = frozenset(("get_recent_err_msg", "app_log", "install_acl", "uninstall_acl"))
_MODULES: tuple[tuple[str, types.ModuleType], ...] = (
    ("", acl), ("rt.", rt), ("util.", util), ("op.", op), ("mdl.", mdl), ("media.", media))


class OwnerLost(ConnectionError):
    """The owner closed the connection, died, or did not answer in time."""


class Worker:
    """The connection of a worker process to its owner (one per process).

    Thread-safe: calls from several threads go one at a time, and the owner runs them on one
    thread of the worker's simulated process (DECISION: the worker's threads share that
    thread's current device and context).
    """

    def __init__(self, conn: mpc.Connection, pid: int, *, timeout: float, address: Any = None,
                 authkey: bytes | None = None, connect_timeout: float = CONNECT_SECONDS) -> None:
        self._conn = conn
        self.pid = pid
        self.timeout = timeout
        self._lock = threading.Lock()
        #: ptr -> [the worker's buffer, its bytes as the owner last saw them (arrays)]
        self._mirrors: dict[int, list] = {}
        self._ptrs: dict[int, int] = {}  # id(buffer) -> ptr
        self._saved: dict[tuple[types.ModuleType, str], Any] = {}
        self._lost: str | None = None
        # where a fork's child connects (see the module docstring)
        self._address, self._authkey, self._connect_timeout = address, authkey, connect_timeout
        self._os_pid = os.getpid()

    def __repr__(self) -> str:
        return f"Worker(pid={self.pid})"

    def call(self, name: str, args: tuple) -> Any:
        """Run the face function ``name`` (``"rt.malloc"``) with ``args`` at the owner.

        Raises:
            OwnerLost: the connection ended (or, in a fork's child, could not be made).
            TypeError: an argument that is not a plain value.
            ValueError: the arguments do not fit in one message.
            The error the call raised there (the util helpers raise, as pyacl's).
        """
        if self._os_pid != os.getpid():
            self._rejoin()
        with self._lock:
            if self._lost is not None:
                raise OwnerLost(self._lost)
            push, drop = self._outgoing()
            site = [[f.filename, f.lineno, f.name] for f in capture_site(SITE_FRAMES)]
            message = {"call": name, "args": list(args), "push": push, "drop": drop,
                       "site": site}
            try:
                try:
                    data = wire.pack(message)
                except wire.TooBig:
                    if not push:
                        raise
                    # the changed arrays go ahead, one a message, then the call alone
                    self._push_apart(push)
                    message["push"] = push = []
                    data = wire.pack(message)
            except wire.TooBig as e:
                raise ValueError(f"{name}: {e}") from None
            except wire.WireError as e:
                raise TypeError(f"{name}: {e}") from None
            for ptr in drop:
                self._forget(ptr)
            for ptr, now in push:
                self._mirrors[ptr][1] = now
            reply = self._exchange(data)
            for ptr, now in reply.get("pull", ()):
                self._write_back(ptr, now)
        if "err" in reply:
            remember_error(errors.AclError(reply["err"]))
        if "ok" in reply:
            return reply["ok"]
        raise _error(reply)

    def close(self) -> None:
        """End the connection (the owner ends the worker's simulated process) and give the
        face its local functions back."""
        with self._lock:
            self._lost = self._lost or "the worker closed its connection"
            self._conn.close()
        for (module, attr), fn in self._saved.items():
            setattr(module, attr, fn)
        self._saved.clear()
        global _worker
        if _worker is self:
            _worker = None

    def _exchange(self, data: bytes) -> dict:
        """Send one message; its reply (the copies written back ahead of it, applied)."""
        try:
            self._conn.send_bytes(data)
            while True:
                try:
                    reply = wire.receive(self._conn, time.monotonic() + self.timeout)
                except TimeoutError:
                    raise self._lose(f"the owner did not answer in {self.timeout} s") from None
                if reply.get("more") is not True:
                    return reply
                for ptr, now in reply.get("pull", ()):
                    self._write_back(ptr, now)
        except OwnerLost:
            raise
        except (EOFError, OSError) as e:
            raise self._lose(f"the connection to the owner ended: {type(e).__name__}") from None
        except wire.WireError as e:
            raise self._lose(f"the owner's reply: {e}") from None

    def _push_apart(self, push: list) -> None:
        """Send changed arrays one a message, ahead of a call they do not fit in with.

        Raises:
            TooBig: one array alone is over the limit (possible only if the limit fell after
                it was registered: its bytes are not sent, and not retried).
        """
        for ptr, now in push:
            try:
                data = wire.pack({"push": [[ptr, now]]})
            except wire.TooBig as e:
                self._mirrors[ptr][1] = now
                raise wire.TooBig(f"the array registered at {ptr:#x} changed, and its "
                                  f"{len(now)} bytes alone are too many ({e}): the owner's "
                                  f"copy keeps its old bytes") from None
            reply = self._exchange(data)
            if "ok" not in reply:
                raise _error(reply)
            self._mirrors[ptr][1] = now

    def _rejoin(self) -> None:
        """In a fork's child: connect anew, as a simulated process of its own (see the module
        docstring); its parent's buffers are not its own.

        Raises:
            OwnerLost: the owner cannot be reached (and every later call says so).
        """
        with _connect_lock:
            if self._os_pid == os.getpid():
                return  # another thread of this child did it
            _drop_parents_connection(self)
            self._mirrors.clear()
            self._ptrs.clear()
            self._os_pid = os.getpid()
            try:
                if self._address is None or self._authkey is None:
                    raise OwnerLost("the owner's address or key is not known here")
                self._conn, self.pid = _dial(self._address, self._authkey,
                                             self._connect_timeout)
                self._lost = None
            except OwnerLost as e:
                self._lost = (f"this process (os pid {os.getpid()}) was forked from a worker "
                              f"and could not connect to the owner as a process of its own: "
                              f"{e}")
                raise OwnerLost(self._lost) from None

    def _lose(self, why: str) -> OwnerLost:
        """End the connection for ``why``; the error to raise."""
        self._lost = why
        self._conn.close()
        return OwnerLost(why)

    # -- host buffers -----------------------------------------------------------------------

    def _outgoing(self) -> tuple[list, list]:
        """The arrays that changed here and the buffers no one here holds any more."""
        push, drop = [], []
        for ptr, mirror in self._mirrors.items():
            # the mirror's own reference and getrefcount's argument: nobody else holds it
            if sys.getrefcount(mirror[0]) <= 2:
                drop.append(ptr)
            elif isinstance(mirror[0], np.ndarray):
                now = mirror[0].tobytes()
                if now != mirror[1]:
                    push.append([ptr, now])
        return push, drop

    def _forget(self, ptr: int) -> None:
        obj = self._mirrors.pop(ptr)[0]
        del self._ptrs[id(obj)]

    def _write_back(self, ptr: Any, data: Any) -> None:
        mirror = self._mirrors.get(ptr)
        if mirror is None or type(data) is not bytes:
            return
        obj = mirror[0]
        if isinstance(obj, np.ndarray):
            if obj.flags.writeable and len(data) == obj.nbytes:
                np.copyto(obj, np.frombuffer(data, obj.dtype).reshape(obj.shape))
        elif len(data) == len(obj):
            # pyacl writes a bytes object in place too (see ascend_memsim.data.host)
            ctypes.memmove(bytes_address(obj), data, len(data))
        mirror[1] = data

    def bytes_to_ptr(self, data: bytes, /) -> int:
        data = _pyacl.bytes_object(data)
        ptr = self._ptrs.get(id(data))
        if ptr is None:
            ptr = self.call("util.bytes_to_ptr", (data,))
            # no second reference: the buffer is dropped when its last user lets go
            self._remember(ptr, data, None)
        return ptr

    def numpy_to_ptr(self, array: Any, /) -> int:
        """acl.util.numpy_to_ptr in a worker: the array's bytes registered in the owner's
        process; the same pointer while the array lives.

        Raises:
            InvalidArgumentType: not a numpy.ndarray, or one holding Python objects.
        """
        if type(array).__name__ != "ndarray":
            raise errors.InvalidArgumentType(f"numpy_to_ptr takes a numpy.ndarray, got "
                                             f"{type(array).__name__}")
        ptr = self._ptrs.get(id(array))
        if ptr is not None:
            return ptr
        # a non-contiguous array is copied first and the copy held by no one (as pyacl)
        keep = bool(array.flags["C_CONTIGUOUS"])
        data = b"" if array.dtype.hasobject else array.tobytes()
        ptr = self.call("util.numpy_to_ptr", (array.dtype.str, list(array.shape), data,
                                              bool(array.flags.writeable), keep))
        if keep:
            self._remember(ptr, array, data)
        return ptr

    def numpy_contiguous_to_ptr(self, array: Any, /) -> tuple[int, Any]:
        if type(array).__name__ == "ndarray" and not array.flags["C_CONTIGUOUS"]:
            array = np.ascontiguousarray(array)
        return self.numpy_to_ptr(array), array

    def ptr_to_bytes(self, ptr: int, size: int, /) -> bytes:
        return self.call("util.ptr_to_bytes", (ptr, size))

    def ptr_to_numpy(self, ptr: int, shape: tuple, np_type: int, /) -> Any:
        """A *copy* of the host memory at ``ptr`` (DECISION: a worker cannot view the
        owner's memory; writes to the array do not reach it)."""
        dtype, dims, data = self.call("util.ptr_to_numpy", (ptr, shape, np_type))
        return np.frombuffer(bytearray(data), np.dtype(dtype)).reshape(dims)

    def _remember(self, ptr: int, obj: Any, data: bytes | None) -> None:
        self._mirrors[ptr] = [obj, data]
        self._ptrs[id(obj)] = ptr

    def init(self, path: Any = _pyacl._NO_PATH) -> int:
        """acl.init in a worker: the config file is read here, applied at the owner."""
        try:
            config = load_config(_pyacl.config_path(path))
        except errors.AclError as error:
            remember_error(error)
            return int(error.code)
        return self.call("init", (config,) if config else ())

    # -- the face -----------------------------------------------------------------------------

    def install(self) -> None:
        """Replace the face's functions with calls to the owner; ``import acl`` names it."""
        host: dict[str, Callable[..., Any]]
        host = {"util.bytes_to_ptr": self.bytes_to_ptr, "util.numpy_to_ptr": self.numpy_to_ptr,
                "util.numpy_contiguous_to_ptr": self.numpy_contiguous_to_ptr,
                "util.ptr_to_bytes": self.ptr_to_bytes, "util.ptr_to_numpy": self.ptr_to_numpy,
                "init": self.init}
        for prefix, module in _MODULES:
            for attr in module.__all__:
                fn = getattr(module, attr)
                if not callable(fn) or isinstance(fn, type) or attr in _LOCAL:
                    continue
                self._saved[(module, attr)] = fn
                name = prefix + attr
                if name in NOT_SERVED:  # refused here: a callable cannot cross
                    replacement = refusal(fn, name)
                else:
                    replacement = host.get(name) or self._forwarder(name)
                setattr(module, attr, replacement)
        install_acl()

    def _forwarder(self, name: str) -> Callable[..., Any]:
        call = self.call

        def forward(*args: Any) -> Any:
            return call(name, args)
        forward.__name__ = forward.__qualname__ = name.rpartition(".")[2]
        forward.__doc__ = f"``acl.{name}``, run at the owner (ascend_memsim.remote)."
        return forward


def _error(reply: dict) -> Exception:
    """The exception a reply carries: a simulator error by its class, else a built-in."""
    message = reply.get("message", "")
    if reply.get("raise") == "AclError":
        cls = getattr(errors, str(reply.get("class")), None)
        if not (isinstance(cls, type) and issubclass(cls, errors.AclError)):
            cls = errors.AclError
        error = cls.__new__(cls)
        errors.AclError.__init__(error, str(message))
        return error
    kind = {e.__name__: e for e in (TypeError, ValueError, OverflowError, KeyError, IndexError,
                                    MemoryError, RuntimeError, AttributeError)}
    return kind.get(str(reply.get("raise")), RuntimeError)(str(message))


_worker: Worker | None = None
_connect_lock = threading.Lock()


def connect(address: Any = None, authkey: bytes | None = None, *,
            timeout: float = CALL_SECONDS, connect_timeout: float = CONNECT_SECONDS) -> Worker:
    """Connect this process to its owner and make its pyacl face the owner's (see the module
    docstring). Without arguments, the address and key the owner put in the environment.

    ``connect_timeout``: seconds to reach the owner, prove the key and be greeted;
    ``timeout``: seconds each later call waits for its answer. The process's own simulated
    runtime, if any (a copy a fork brought from the parent), is no longer the face's. Calling
    it again returns the same connection (in a fork's child of a worker: its own, made anew).

    Raises:
        RuntimeError: no owner is named (neither arguments nor environment), or this process
            is the owner.
        OwnerLost: the owner could not be reached, or did not answer in ``connect_timeout`` s.
        multiprocessing.AuthenticationError: the key is wrong.
    """
    global _worker
    old = _worker
    if old is not None and old._os_pid != os.getpid():
        old._rejoin()  # a fork's child of a worker: its own connection, or OwnerLost
        return old
    with _connect_lock:
        if _worker is not None:
            if _worker._lost is None:
                return _worker
            _worker.close()  # lost: the face's own functions back before a new one
        if serving_here():
            raise RuntimeError("this process serves the machine: its own calls run here, "
                               "only the processes it starts connect")
        if address is None:
            address = os.environ.get(ENV_ADDRESS)
            if authkey is None and os.environ.get(ENV_KEY):
                authkey = bytes.fromhex(os.environ[ENV_KEY])
        if address is None or authkey is None:
            raise RuntimeError(f"no owner to connect to: pass an address and key, or start "
                               f"this process from one that called ascend_memsim.serve "
                               f"({ENV_ADDRESS}, {ENV_KEY})")
        if isinstance(address, str) and ":" in address and not address.startswith("/"):
            host, _, port = address.rpartition(":")
            address = (host, int(port))
        conn, pid = _dial(address, authkey, connect_timeout)
        worker = Worker(conn, pid, timeout=timeout, address=address, authkey=authkey,
                        connect_timeout=connect_timeout)
        with Runtime.active_lock:  # a fork's copies of the parent's runtimes
            Runtime.active.clear()
            Runtime.acting.clear()
        worker.install()
        _worker = worker
        return worker


def _dial(address: Any, authkey: bytes, seconds: float) -> tuple[mpc.Connection, int]:
    """A connection to the owner at ``address``, authenticated, and the pid its greeting
    gives this process; all within ``seconds``.

    Raises:
        OwnerLost: no owner there, no answer in time, or not a greeting.
        multiprocessing.AuthenticationError: the key is wrong.
    """
    deadline = time.monotonic() + seconds
    family = socket.AF_UNIX if isinstance(address, str) else socket.AF_INET
    while True:
        sock = socket.socket(family)
        try:
            sock.settimeout(max(deadline - time.monotonic(), 0.001))
            sock.connect(address)
            sock.setblocking(True)
            break
        except BlockingIOError:  # a Unix socket's listen queue is full: wait for room
            sock.close()
            if time.monotonic() >= deadline:
                raise OwnerLost(f"the owner did not answer in {seconds} s") from None
            time.sleep(0.01)
        except OSError as e:
            sock.close()
            raise OwnerLost(f"cannot reach the owner at {address!r}: {e}") from None
    conn = mpc.Connection(sock.detach())
    try:
        wire.handshake(conn, authkey, deadline, owner=False)
        pid = wire.unpack(wire.read_within(conn, deadline, 4096)).get("pid")
        if type(pid) is not int:
            raise OwnerLost("the owner's greeting has no pid")
    except OwnerLost:
        conn.close()
        raise
    except TimeoutError:
        conn.close()
        raise OwnerLost(f"the owner did not answer in {seconds} s") from None
    except (EOFError, OSError, AssertionError, wire.WireError) as e:
        conn.close()
        raise OwnerLost(f"the owner closed the connection: {type(e).__name__}") from None
    except BaseException:
        conn.close()
        raise
    return conn, pid


def _drop_parents_connection(worker: Worker) -> None:
    """Close this process's copy of the connection (the parent's socket stays open): a fork's
    child that never calls must not keep the parent's worker process alive at the owner."""
    try:
        worker._conn.close()
    except OSError:
        pass


def _after_fork_in_child() -> None:
    """In a fork's child: new locks (a thread of the parent may have held them at the fork),
    and never the parent's connection."""
    global _connect_lock
    _connect_lock = threading.Lock()
    if _worker is not None:
        _worker._lock = threading.Lock()
        _drop_parents_connection(_worker)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
