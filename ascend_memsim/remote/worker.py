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
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
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

__all__ = ["Worker", "connect", "OwnerLost", "CALL_SECONDS"]

#: DECISION: a call the owner has not answered in this many seconds ends the connection
#: (TimeoutError); the owner's own end of file ends it at once
CALL_SECONDS = 300.0

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

    def __init__(self, conn: mpc.Connection, pid: int, *, timeout: float) -> None:
        self._conn = conn
        self.pid = pid
        self.timeout = timeout
        self._lock = threading.Lock()
        #: ptr -> [the worker's buffer, its bytes as the owner last saw them]
        self._mirrors: dict[int, list] = {}
        self._ptrs: dict[int, int] = {}  # id(buffer) -> ptr
        self._saved: dict[tuple[types.ModuleType, str], Any] = {}
        self._lost: str | None = None

    def __repr__(self) -> str:
        return f"Worker(pid={self.pid})"

    def call(self, name: str, args: tuple) -> Any:
        """Run the face function ``name`` (``"rt.malloc"``) with ``args`` at the owner.

        Raises:
            OwnerLost: the connection ended.
            TypeError: an argument that is not a plain value.
            The error the call raised there (the util helpers raise, as pyacl's).
        """
        with self._lock:
            if self._lost is not None:
                raise OwnerLost(self._lost)
            push, drop = self._outgoing()
            site = [[f.filename, f.lineno, f.name] for f in capture_site(SITE_FRAMES)]
            try:
                data = wire.pack({"call": name, "args": list(args), "push": push,
                                  "drop": drop, "site": site})
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
        try:
            self._conn.send_bytes(data)
            if not self._conn.poll(self.timeout):
                self._lose(f"the owner did not answer in {self.timeout} s")
            reply = wire.unpack(self._conn.recv_bytes(wire.MAX_MESSAGE))
        except (EOFError, OSError) as e:
            self._lose(f"the connection to the owner ended: {type(e).__name__}")
        except wire.WireError as e:
            self._lose(f"the owner's reply: {e}")
        return reply

    def _lose(self, why: str) -> None:
        self._lost = why
        self._conn.close()
        raise OwnerLost(why)

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
            self._remember(ptr, data, data)
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

    def _remember(self, ptr: int, obj: Any, data: bytes) -> None:
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
            timeout: float = CALL_SECONDS) -> Worker:
    """Connect this process to its owner and make its pyacl face the owner's (see the module
    docstring). Without arguments, the address and key the owner put in the environment.

    The process's own simulated runtime, if any (a copy a fork brought from the parent), is
    no longer the face's. Calling it again returns the same connection.

    Raises:
        RuntimeError: no owner is named (neither arguments nor environment), or this process
            is the owner.
        multiprocessing.AuthenticationError: the key is wrong.
    """
    global _worker
    with _connect_lock:
        if _worker is not None and _worker._lost is None and os.getpid() == _worker_os_pid:
            return _worker
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
        conn = mpc.Client(address, authkey=authkey)
        try:
            if not conn.poll(timeout):
                raise OwnerLost("the owner did not answer")
            pid = wire.unpack(conn.recv_bytes(wire.MAX_MESSAGE)).get("pid")
            if type(pid) is not int:
                raise OwnerLost("the owner's greeting has no pid")
        except OwnerLost:
            conn.close()
            raise
        except (EOFError, OSError, wire.WireError) as e:
            conn.close()
            raise OwnerLost(f"the owner closed the connection: {type(e).__name__}") from None
        worker = Worker(conn, pid, timeout=timeout)
        with Runtime.active_lock:  # a fork's copies of the parent's runtimes
            Runtime.active.clear()
            Runtime.acting.clear()
        worker.install()
        _set_worker(worker)
        return worker


_worker_os_pid = -1


def _set_worker(worker: Worker) -> None:
    global _worker, _worker_os_pid
    _worker, _worker_os_pid = worker, os.getpid()
