"""Host callbacks on streams (aclrtSubscribeReport / aclrtLaunchCallback /
aclrtProcessReport) and the threads pyacl starts for them (acl.util.start_thread).

pyacl (hicann/runtime python/pyACL/rt/rt_synchronize.cpp, util/thread.cpp):
``subscribe_report(thread_id, stream)``, ``unsubscribe_report(thread_id, stream)``,
``process_report(timeout_ms)`` (-1: wait for ever), ``launch_callback(fn, user_data,
block_type, stream)`` all return ``ret``; the callback is called as ``fn(user_data)``.
``start_thread(fn, args)`` returns ``(thread_id, ret)`` and calls ``fn(args)`` (``fn()`` when
args is None); ``stop_thread(thread_id)`` joins it and returns ``ret``.

A launched callback is queued work: when its stream's work runs, the callback is handed to
the subscribed thread, whose ``process_report`` calls it. DECISIONs:

* launching on a stream no thread subscribed is ACL_ERROR_RT_STREAM_NO_CB_REG 107015
  (rt_error_codes.h); subscribing a stream twice ACL_ERROR_REPEAT_SUBSCRIBE 100033;
  unsubscribing a stream the thread did not subscribe ACL_ERROR_STREAM_NOT_SUBSCRIBE 100034;
  ``process_report`` on a thread that subscribed nothing ACL_ERROR_THREAD_NOT_SUBSCRIBE
  100035, and with nothing arriving in time ACL_ERROR_WAIT_CALLBACK_TIMEOUT 100036
  (acl_base_rt.h);
* a blocking callback (ACL_CALLBACK_BLOCK) holds its stream until it has run; if the
  subscribed thread is the one running the stream's work, or it is unsubscribed or has
  ended meanwhile (any thread: one from ``start_thread``, a ``threading.Thread``, the main
  thread), the callback runs on the stream's thread instead (real hardware would hang; a
  test should not);
* subscribing a thread id that names no live thread of the process is
  ACL_ERROR_INVALID_PARAM 100000: the runtime keys subscriptions by the id without looking
  at it (``hicann/runtime`` ``src/runtime/core/src/utils/subscribe.cc``
  ``CbSubscribe::Insert``), so on hardware a callback for it would never run;
* an exception in a callback is printed with its traceback and does not stop the thread;
* thread ids are ``threading.get_ident()`` values, so a thread that was not started with
  ``start_thread`` can subscribe with its own id.
"""

from __future__ import annotations

import queue
import sys
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..memory.args import SIZE_MAX, as_int
from ..memory.constants import CallbackBlock
from ..memory.errors import (
    CallbackTimeout,
    InvalidArgument,
    InvalidArgumentType,
    NoCallbackStream,
    RepeatSubscribe,
    StreamNotSubscribed,
    ThreadNotSubscribed,
)
from .streams import Stream

__all__ = ["Callbacks"]


@dataclass(eq=False)
class _Report:
    fn: Callable[[Any], Any]
    user_data: Any
    #: set when the callback has returned (a blocking launch waits for it)
    done: threading.Event = field(default_factory=threading.Event)
    #: taken by the one thread that runs the callback
    claimed: threading.Lock = field(default_factory=threading.Lock)


@dataclass(eq=False)
class _Thread:
    thread: threading.Thread
    error: BaseException | None = None


def _alive(tid: int) -> bool:
    """True when a live thread of the process has the ident ``tid``: any thread that runs
    Python (``threading`` lists them all, and drops one that has ended). O(threads)."""
    return any(t.ident == tid and t.is_alive() for t in threading.enumerate())


class Callbacks:
    """Subscriptions, callback queues and pyacl threads of one runtime. Thread-safe."""

    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime
        self.lock = threading.RLock()
        #: stream -> subscribed thread id
        self._subscribed: dict[Stream, int] = {}
        #: thread id -> its queue of callbacks to process
        self._queues: dict[int, queue.SimpleQueue[Any]] = {}
        self._threads: dict[int, _Thread] = {}

    # -- subscriptions -------------------------------------------------------------------------

    def subscribe(self, thread_id: object, stream: object) -> None:
        """aclrtSubscribeReport: callbacks launched on ``stream`` go to thread ``thread_id``.

        Raises:
            InvalidArgument: the id names no live thread of this process.
            RepeatSubscribe: the stream is subscribed already.
        """
        tid = as_int(thread_id, "thread_id", 1, SIZE_MAX)
        target = self.runtime.streams.target(stream, "aclrtSubscribeReport")
        if not _alive(tid):
            raise InvalidArgument(f"thread_id {tid} names no live thread of this process "
                                  f"(give threading.get_ident() of the thread that calls "
                                  f"process_report, or start_thread's id)")
        with self.lock:
            if target in self._subscribed:
                raise RepeatSubscribe(f"stream {target.handle:#x} is already subscribed by "
                                      f"thread {self._subscribed[target]}")
            self._subscribed[target] = tid
            self._queues.setdefault(tid, queue.SimpleQueue())

    def unsubscribe(self, thread_id: object, stream: object) -> None:
        tid = as_int(thread_id, "thread_id", 1, SIZE_MAX)
        target = self.runtime.streams.stream(stream)
        with self.lock:
            if self._subscribed.get(target) != tid:
                raise StreamNotSubscribed(f"thread {tid} did not subscribe stream "
                                          f"{target.handle:#x}")
            del self._subscribed[target]

    def _subscriber(self, tid: int) -> bool:
        """True while ``tid`` still subscribes a stream and its thread is alive."""
        with self.lock:
            if tid not in self._subscribed.values():
                return False
        return _alive(tid)

    # -- callbacks -----------------------------------------------------------------------------

    def launch(self, fn: object, user_data: Any, block_type: object, stream: object) -> None:
        """aclrtLaunchCallback: queue ``fn(user_data)`` on ``stream``."""
        if not callable(fn):
            raise InvalidArgumentType(f"the callback must be callable, got "
                                      f"{type(fn).__name__}")
        block = as_int(block_type, "block_type", 0, 1)
        target = self.runtime.streams.target(stream, "aclrtLaunchCallback")
        with self.lock:
            tid = self._subscribed.get(target)
            if tid is None:
                raise NoCallbackStream(f"stream {target.handle:#x} has no subscribed thread: "
                                       f"call acl.rt.subscribe_report(thread_id, stream) first")

        def run(_stream: Stream) -> None:
            with self.lock:
                owner = self._subscribed.get(target, tid)
                inbox = self._queues.get(owner)
            report = _Report(fn, user_data)
            if inbox is None or owner == threading.get_ident():
                self._call(report)
                return
            inbox.put(report)
            if block == CallbackBlock.BLOCK:
                while not report.done.wait(0.05):
                    if not self._subscriber(owner):
                        self._call(report)  # does nothing if the subscriber claimed it
                        report.done.wait()
                        return

        self.runtime.streams.enqueue(target, "aclrtLaunchCallback", (), run)

    @staticmethod
    def _call(report: _Report) -> None:
        """Run the callback once (whichever thread claims it first), then mark it done."""
        if not report.claimed.acquire(blocking=False):
            return
        try:
            report.fn(report.user_data)
        except Exception:
            traceback.print_exc(file=sys.stderr)
        finally:
            report.done.set()

    def process(self, timeout_ms: object) -> None:
        """aclrtProcessReport: run one callback handed to this thread, waiting up to
        ``timeout_ms`` (-1: for ever)."""
        timeout = as_int(timeout_ms, "timeout", -1, 2**31 - 1)
        tid = threading.get_ident()
        with self.lock:
            inbox = self._queues.get(tid)
            if inbox is None or tid not in self._subscribed.values():
                raise ThreadNotSubscribed(f"thread {tid} subscribed no stream "
                                          f"(acl.rt.subscribe_report)")
        try:
            report = inbox.get(timeout=None if timeout == -1 else timeout / 1000)
        except queue.Empty:
            raise CallbackTimeout(f"no callback arrived within {timeout} ms") from None
        self._call(report)

    # -- acl.util.start_thread / stop_thread -----------------------------------------------

    def start_thread(self, fn: object, args: Any) -> int:
        if not callable(fn):
            raise InvalidArgumentType(f"start_thread takes a callable, got {type(fn).__name__}")
        holder: list[_Thread] = []

        def body() -> None:
            try:
                fn() if args is None else fn(args)
            except BaseException as error:  # kept for stop_thread, as pyacl does
                holder[0].error = error

        thread = threading.Thread(target=body, name="acl.util.start_thread", daemon=True)
        holder.append(_Thread(thread))
        thread.start()
        ident = thread.ident
        assert ident is not None  # started: it has one
        with self.lock:
            self._threads[ident] = holder[0]
        return ident

    def stop_thread(self, thread_id: object) -> None:
        """Join the thread. Raises RuntimeError when its function raised (pyacl does)."""
        tid = as_int(thread_id, "thread_id", 0, SIZE_MAX)
        with self.lock:
            started = self._threads.get(tid)
            if started is None:
                raise InvalidArgument(f"thread {tid} was not started with start_thread "
                                      f"(or was stopped already)")
        started.thread.join()
        with self.lock:
            self._threads.pop(tid, None)
            for stream, owner in list(self._subscribed.items()):
                if owner == tid:
                    del self._subscribed[stream]
        if started.error is not None:
            raise RuntimeError(f"the thread's function raised {started.error!r}") \
                from started.error
