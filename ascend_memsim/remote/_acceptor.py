"""The owner's listening socket, and the one thread that admits the connections to it.

A connection costs no thread until it has proved the key: the acceptor holds every connection
still in its handshake in one selector, each with a deadline of its own, and moves each on as
its frames arrive (:class:`~.wire.Admission`). So a peer that says nothing delays no one: an
honest worker is admitted in the time its own handshake takes, however many idle connections
are open (DECISION: at most :data:`MAX_PENDING` of them are kept; a new connection past that
drops the oldest, so the newest, an honest worker among them, always gets its turn). A
connection that has proved the key is handed, blocking again, to ``admitted`` (the owner
serves it on a thread of its own).
"""

from __future__ import annotations

import errno
import logging
import os
import selectors
import shutil
import socket
import struct
import tempfile
import threading
import time
import traceback
import weakref
from collections.abc import Callable
from multiprocessing import AuthenticationError
from multiprocessing import connection as mpc
from typing import Any

from . import wire

__all__ = ["Acceptor", "MAX_PENDING", "BACKLOG"]

log = logging.getLogger("ascend_memsim.remote")

#: the listen queue: connections the kernel holds until the acceptor takes them (it takes
#: them as they come, so only a burst waits here)
BACKLOG = 128
#: DECISION: the most connections in their handshake at once (a socket and a few hundred
#: bytes each); the oldest is dropped for a new one past this, or when the process runs out
#: of file descriptors
MAX_PENDING = 1024
#: accept() errors that say this process, not the peer, is out of something
_OUT_OF = frozenset((errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM))


class _Pending:
    """One connection in its handshake: what it has sent of its current frame, what is
    still to send it, and its deadline."""

    __slots__ = ("sock", "deadline", "admission", "inbox", "size", "out", "writing")

    def __init__(self, sock: socket.socket, deadline: float, admission: wire.Admission) -> None:
        self.sock = sock
        self.deadline = deadline
        self.admission = admission
        self.inbox = bytearray()
        #: the current frame's size, once its 4-byte header is in
        self.size: int | None = None
        self.out = b""
        self.writing = False

    def wanted(self) -> int:
        """How many bytes of the current frame have not arrived (never past its end: what
        follows the handshake is the session's)."""
        return (4 if self.size is None else self.size) - len(self.inbox)


class Acceptor:
    """Listens on a fresh local address (a Unix socket in a private temporary directory;
    ``127.0.0.1`` where there are none) and admits connections that prove ``authkey`` within
    ``handshake_timeout`` seconds of their arrival, on one thread (see the module
    docstring). Each step is O(1) per event; a connection in its handshake costs O(1)."""

    def __init__(self, authkey: bytes, *, handshake_timeout: float,
                 admitted: Callable[[mpc.Connection], None],
                 max_pending: int | None = None) -> None:
        self._authkey = authkey
        self._timeout = handshake_timeout
        self._admitted = admitted
        self._max_pending = MAX_PENDING if max_pending is None else max_pending
        self._closed = False
        directory = None
        if hasattr(socket, "AF_UNIX"):
            directory = tempfile.mkdtemp(prefix="memsim-owner-")  # this user's alone (0700)
            self.address: Any = os.path.join(directory, "owner.sock")
            self._sock = socket.socket(socket.AF_UNIX)
            bind: Any = self.address
        else:
            self._sock = socket.socket(socket.AF_INET)
            bind = ("127.0.0.1", 0)
        # at close or exit; a fork's child that exits leaves the parent's address in place
        self._remove = weakref.finalize(self, _remove, directory, os.getpid())
        try:
            self._sock.bind(bind)
            self._sock.listen(BACKLOG)
            self._sock.setblocking(False)
            if not hasattr(socket, "AF_UNIX"):
                self.address = self._sock.getsockname()
            self._wake_in, self._wake_out = socket.socketpair()
        except BaseException:
            self._sock.close()
            self._remove()
            raise
        for end in (self._wake_in, self._wake_out):
            end.setblocking(False)
        self._thread = threading.Thread(target=self._run, name="memsim-owner-accept",
                                        daemon=True)
        self._thread.start()

    def close(self, timeout: float) -> None:
        """Stop admitting: the connections in their handshake are closed, then the listening
        socket and its address. Waits at most ``timeout`` s for the thread. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            self._wake_out.send(b"x")
        except OSError:
            pass
        self._thread.join(timeout)
        for sock in (self._sock, self._wake_in, self._wake_out):
            sock.close()
        self._remove()

    # -- the thread ---------------------------------------------------------------------------

    def _run(self) -> None:
        """Admit until closed. Nothing a peer does, and no thread that cannot start, ends
        this loop: only close() does."""
        selector = selectors.DefaultSelector()
        #: oldest first (one timeout for all: also the order of their deadlines)
        pending: dict[socket.socket, _Pending] = {}
        try:
            selector.register(self._sock, selectors.EVENT_READ)
            selector.register(self._wake_in, selectors.EVENT_READ)
            while not self._closed:
                wait = None
                if pending:
                    wait = max(0.0, next(iter(pending.values())).deadline - time.monotonic())
                for key, mask in selector.select(wait):
                    if self._closed:
                        break
                    try:
                        if key.fileobj is self._sock:
                            self._accept(selector, pending)
                        elif key.fileobj is not self._wake_in:
                            self._step(selector, pending, key.data, mask)
                    except Exception:  # a bug here: that connection ends, the rest go on
                        log.error("admitting a worker:\n%s", traceback.format_exc())
                        if key.data is not None:
                            self._drop(selector, pending, key.data)
                now = time.monotonic()
                while pending:
                    oldest = next(iter(pending.values()))
                    if oldest.deadline > now:
                        break
                    self._drop(selector, pending, oldest)
        finally:
            for item in list(pending.values()):
                item.sock.close()
            selector.close()

    def _accept(self, selector: selectors.BaseSelector, pending: dict) -> None:
        """Take every connection the listen queue holds."""
        while True:
            try:
                sock, _ = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                if e.errno in _OUT_OF and pending:  # room for the newer ones
                    self._drop(selector, pending, next(iter(pending.values())))
                    continue
                if e.errno in _OUT_OF:
                    time.sleep(0.01)  # nothing of ours to let go: the queue waits a moment
                return  # a peer gone before accept: the next event says what else came
            if len(pending) >= self._max_pending:
                self._drop(selector, pending, next(iter(pending.values())))
            sock.setblocking(False)
            item = _Pending(sock, time.monotonic() + self._timeout,
                            wire.Admission(self._authkey))
            pending[sock] = item
            selector.register(sock, selectors.EVENT_READ, item)
            self._send(selector, pending, item)

    def _step(self, selector: selectors.BaseSelector, pending: dict, item: _Pending,
              mask: int) -> None:
        """What one connection's event allows: send what is due, read what has come."""
        if mask & selectors.EVENT_WRITE and not self._send(selector, pending, item):
            return
        if not mask & selectors.EVENT_READ:
            return
        try:
            chunk = item.sock.recv(item.wanted())
        except (BlockingIOError, InterruptedError):
            return
        except OSError:  # reset
            self._drop(selector, pending, item)
            return
        if not chunk:  # the peer closed
            self._drop(selector, pending, item)
            return
        item.inbox += chunk
        if item.wanted():
            return
        if item.size is None:
            size, = struct.unpack("!i", item.inbox)
            if not 0 <= size <= wire.HANDSHAKE_FRAME:  # not a handshake's frame
                self._drop(selector, pending, item)
                return
            item.size, item.inbox = size, bytearray()
            if size:
                return  # the body comes with a later event (or is there already)
        data, item.size, item.inbox = bytes(item.inbox), None, bytearray()
        try:
            done = item.admission.feed(data)
        except AuthenticationError:  # the refusal goes out if it can, then the connection
            self._send(selector, pending, item)
            self._drop(selector, pending, item)
            return
        if not self._send(selector, pending, item) or not done:
            return
        selector.unregister(item.sock)
        del pending[item.sock]
        item.sock.setblocking(True)
        conn = mpc.Connection(item.sock.detach())
        try:
            self._admitted(conn)
        except Exception:  # a bug there: that connection ends, the acceptor lives on
            log.error("accepting a worker:\n%s", traceback.format_exc())
            conn.close()

    def _send(self, selector: selectors.BaseSelector, pending: dict, item: _Pending) -> bool:
        """Send what is due without waiting (the rest when the socket can take it); False
        when the connection failed and was dropped."""
        item.out += item.admission.take()
        if item.out:
            try:
                sent = item.sock.send(item.out)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError:
                self._drop(selector, pending, item)
                return False
            item.out = item.out[sent:]
        writing = bool(item.out)
        if writing != item.writing:
            item.writing = writing
            selector.modify(item.sock, selectors.EVENT_READ
                            | (selectors.EVENT_WRITE if writing else 0), item)
        return True

    def _drop(self, selector: selectors.BaseSelector, pending: dict, item: _Pending) -> None:
        if pending.pop(item.sock, None) is not None:
            selector.unregister(item.sock)
        item.sock.close()


def _remove(directory: str | None, pid: int) -> None:
    """Remove the listening socket's directory, if any (in the process that made it only)."""
    if directory is not None and os.getpid() == pid:
        shutil.rmtree(directory, ignore_errors=True)
