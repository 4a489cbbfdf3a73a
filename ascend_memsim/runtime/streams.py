"""Streams and contexts: handles, lifecycles, and the calls that queue asynchronous work
(the queuing and running itself is in :mod:`ascend_memsim.runtime.work`).

``memcpy_async`` and ``memset_async`` check their arguments and addresses at once (a bad call
returns its code and queues nothing), then queue the work on the stream. Queued work runs
only when the program synchronises (``synchronize_stream``, ``synchronize_device``,
``free_with_dev_sync``, ``destroy_stream``), in submission order. So the ordering bugs of real
code show: ``free`` releases at once even while queued work still targets the block, and that
work then fails when it runs (the sanitizer names both).

DECISIONs (the vendor documents no code for these in the sources read):

* an unknown or destroyed stream or context handle is ACL_ERROR_RT_INVALID_HANDLE (107017);
* a queued operation that fails when it runs makes the synchronising call return its error
  (the first one); the rest of the queue still runs;
* ``synchronize_device`` runs the work of all the device's streams in submission order;
* ``destroy_stream`` runs the stream's queued work first, and so does ``destroy_context`` for
  the streams of the context (a destroy never loses work silently). From the moment a destroy
  starts, the stream (or the context's streams, and new streams in that context) refuses new
  work with ACL_ERROR_RT_INVALID_HANDLE (107017), as a destroyed one does: work is either
  accepted and run by the destroy, or refused; none is accepted and dropped.
  ``reset_device`` (last reference) and ``finalize`` run the device's queued work, then
  discard its streams (aclrtResetDevice waits for unfinished tasks, vendor api_ref; work
  that fails then is reported and does not fail the reset);
* stream 0 (or None) is the default stream of the current device; a handle is checked as an
  int first (bool, float: ACL_ERROR_INVALID_PARAM 100000);
* queuing work on a stream of another device than the current one is
  ACL_ERROR_RT_STREAM_CONTEXT (107003); synchronising or destroying it is allowed (the
  stream names its device);
* queued work runs under one lock per runtime, so work on a stream runs in submission order
  even when several threads synchronise it, and a synchronising call returns only after all
  earlier work on its streams has run.
* each device has a default context; ``create_context`` takes a device reference as
  ``set_device`` does and ``destroy_context`` drops it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..memory.args import as_int
from ..memory.constants import StreamFlag
from ..memory.errors import (
    InvalidArgument,
    InvalidHandle,
    StreamContextMismatch,
)
from .stream_values import StreamValues
from .work import Operation, Stream, StreamWork

__all__ = ["CONTEXT_BASE", "STREAM_BASE", "Context", "Operation", "Stream", "Streams"]

#: Stream handles are ints from here, 64 apart; none is a memory address.
STREAM_BASE = 0x1_0000_0000
#: Context handles likewise.
CONTEXT_BASE = 0x2_0000_0000


@dataclass(eq=False)
class Context:
    """A context: a device, and whether it is the device's default one."""

    handle: int
    device_id: int
    default: bool = False
    destroyed: bool = False
    #: aclrtDestroyContext has started: its streams take no new work, no new stream is made
    closing: bool = False


class Streams(StreamValues, StreamWork):
    """The streams and contexts of one runtime: handles, lifecycles, and the aclrt calls that
    queue work (the queuing and running itself is :class:`StreamWork`'s, the value writes and
    waits of 11-09 :class:`~.stream_values.StreamValues`').

    Thread-safe: ``lock`` guards the tables; queued work runs outside it, under ``run_lock``.
    """

    def __init__(self, runtime: Any) -> None:
        super().__init__(runtime)
        self._streams: dict[int, Stream] = {}
        self._defaults: dict[int, Stream] = {}
        self._contexts: dict[int, Context] = {}
        self._default_contexts: dict[int, Context] = {}
        self._handles = itertools.count()

    # -- handles -------------------------------------------------------------------------------

    def stream(self, handle: object) -> Stream:
        """The live stream for ``handle`` (0 or None: the current device's default stream).

        Raises:
            InvalidArgumentType: not an int (bool, float, str, an array).
            InvalidHandle: unknown or destroyed. DeviceNotSet: no current device.
        """
        number = 0 if handle is None else as_int(handle, "stream")
        if number == 0:
            device_id = self.runtime.current_device().device_id
            with self.lock:
                stream = self._defaults.get(device_id)
                if stream is None:
                    stream = self._defaults[device_id] = Stream(0, device_id, 0)
                return stream
        stream = self._streams.get(number)
        if stream is None or stream.destroyed:
            raise InvalidHandle(f"stream {number:#x} does not exist or was destroyed")
        return stream

    def create_stream(self) -> int:
        """aclrtCreateStream: a new stream on the current device; its handle."""
        device_id = self.runtime.current_device().device_id
        context = self.get_context()
        with self.lock:
            owner = self._contexts.get(context)
            if owner is None or owner.closing:
                raise InvalidHandle(f"context {context:#x} is being destroyed; no new stream "
                                    f"can be made in it")
            handle = STREAM_BASE + 64 * next(self._handles)
            self._streams[handle] = Stream(handle, device_id, context)
            return handle

    def create_stream_with_config(self, priority: object, flag: object) -> int:
        """aclrtCreateStreamWithConfig (pyacl rt_stream.cpp: ``(priority, flag)``, no device
        argument): a stream on the current device.

        DECISION: priority 0..7 on every product (the docs give 0..7 on 310P and a fixed 0
        elsewhere; a simulated stream has no priority to honour); flags are the
        ACL_STREAM_* bits of acl_rt.h.

        Raises:
            InvalidArgument: a priority outside 0..7 or unknown flag bits.
        """
        as_int(priority, "priority", 0, 7)
        bits = as_int(flag, "flag", 0, 0xFFFF_FFFF)
        unknown = bits & ~sum(StreamFlag)
        if unknown:
            raise InvalidArgument(f"stream flag {bits:#x} has unknown bits {unknown:#x}")
        return self.create_stream()

    def destroy_stream(self, handle: object) -> None:
        """aclrtDestroyStream: run the stream's queued work, then destroy it.

        DECISION: the stream is destroyed even when its queued work fails (the error is
        still returned): the work ran, as on a device, and a handle left half-destroyed
        could be neither used nor destroyed again. The same holds for
        :meth:`destroy_context`.

        Raises:
            InvalidArgumentType: not an int.
            InvalidHandle: unknown, destroyed, or the default stream (0).
            AclError: the first queued operation that failed (the stream is destroyed anyway).
        """
        if handle is None or as_int(handle, "stream") == 0:
            raise InvalidHandle("the default stream cannot be destroyed")
        with self.lock:
            stream = self.stream(handle)
            if stream.closing:
                raise InvalidHandle(f"stream {stream.handle:#x} is already being destroyed")
            # From here new work is refused, so the drain below runs all that was accepted.
            stream.closing = True
        try:
            self._run([stream])
        finally:
            with self.lock:
                stream.destroyed = True
                self._streams.pop(stream.handle, None)
            self.runtime.pools.forget(stream=stream)  # event-ordered reuse (11-10)

    def synchronize_stream(self, handle: object) -> None:
        """aclrtSynchronizeStream: run the stream's queued work in order.

        Raises:
            InvalidHandle: unknown or destroyed stream.
            AclError: the first queued operation that failed (the others still ran).
        """
        stream = self.stream(handle)
        try:
            self._run([stream])
        finally:
            self.runtime.pools.synchronized(stream.device_id)  # release thresholds (11-10)

    def synchronize_device(self, device_id: int | None = None) -> None:
        """aclrtSynchronizeDevice: run every stream's work on the device, in submission order.

        Raises:
            AclError: the first queued operation that failed.
        """
        if device_id is None:
            device_id = self.runtime.current_device().device_id
        with self.lock:
            streams = [s for s in (*self._defaults.values(), *self._streams.values())
                       if s.device_id == device_id]
        try:
            self._run(streams)
        finally:
            self.runtime.pools.synchronized(device_id)  # release thresholds (11-10)

    def target(self, handle: object, call: str) -> Stream:
        """The live stream ``handle`` names, checked for queuing work (see :meth:`enqueue`)."""
        return self._target(handle, call)

    def _target(self, handle: object, call: str) -> Stream:
        """The live stream ``handle`` names, for queuing work from the current device.

        Raises:
            InvalidHandle: an unknown or destroyed stream.
            StreamContextMismatch: the stream belongs to another device than the current one.
        """
        stream = self.stream(handle)
        current = self.runtime.current_device_or_none()
        if current is not None and current.device_id != stream.device_id:
            raise StreamContextMismatch(
                f"{call}: stream {stream.handle:#x} belongs to device {stream.device_id}, but "
                f"the current device is {current.device_id}")
        return stream

    def enqueue(self, handle: object, call: str, ranges: tuple[tuple[int, int], ...],
                run: Callable[[Stream], None]) -> Operation:
        """Queue ``run(stream)`` on the stream (a handle or a :class:`Stream`); it touches
        ``ranges``.

        Raises:
            InvalidHandle, StreamContextMismatch: see :meth:`_target`; InvalidHandle also
                for a stream being destroyed.
        """
        stream = handle if isinstance(handle, Stream) else self._target(handle, call)
        return self.queue_on(stream, call, ranges, run)

    def _enqueue_access(self, handle: object, call: str,
                        accesses: tuple[tuple[int, int, bool], ...],
                        run: Callable[[Stream], None], kind: int | None = None) -> None:
        """Check the stream, then each (address, count, write) access (deferred: liveness and
        bounds, and the P2P rule for a copy of ``kind``), then queue ``run``; a failed check
        queues nothing."""
        stream = self._target(handle, call)
        data = self.runtime.data
        with data.lock:
            regions = [data.resolve(call, addr, count, write=write, deferred=True)[0]
                       for addr, count, write in accesses]
            if len(regions) == 2:
                data.check_p2p(call, regions[0], regions[1], kind)
        self.enqueue(stream, call, tuple((addr, addr + count) for addr, count, _ in accesses),
                     run)

    def memcpy_async(self, dst: object, dest_max: object, src: object, count: object,
                     kind: object, stream: object = 0) -> None:
        """aclrtMemcpyAsync: check now (as aclrtMemcpy, and the stream), copy at synchronisation.

        Raises:
            InvalidArgument, InvalidRuntimeParam, InvalidPointer: as aclrtMemcpy (including
                the P2P rule between devices).
            InvalidHandle: an unknown or destroyed stream.
            StreamContextMismatch: a stream of another device.
        """
        data = self.runtime.data
        checked: tuple[int, int, int, int] | None = data.check_memcpy(dst, dest_max, src, count,
                                                                       kind)
        if checked is None:
            # memory.cpp (newer): count 0 succeeds before any other check.
            return
        dst, src, count, kind = checked
        call = "aclrtMemcpyAsync"
        self._enqueue_access(
            stream, call, ((src, count, False), (dst, count, True)),
            lambda s: data.copy(dst, src, count, kind, call=call, stream=s.handle), kind)

    def memset_async(self, ptr: object, max_count: object, value: object, count: object,
                     stream: object = 0) -> None:
        """aclrtMemsetAsync: check now, set at synchronisation.

        Raises:
            InvalidArgument, InvalidRuntimeParam, InvalidPointer: as aclrtMemset.
            InvalidHandle: an unknown or destroyed stream.
            StreamContextMismatch: a stream of another device.
        """
        data = self.runtime.data
        checked: tuple[int, int, int] | None = data.check_memset(ptr, max_count, value, count)
        if checked is None:
            return
        ptr, count, value = checked
        call = "aclrtMemsetAsync"
        self._enqueue_access(stream, call, ((ptr, count, True),),
                             lambda s: data.fill(ptr, count, value, call=call, stream=s.handle))

    def device_streams(self, device_id: int) -> list[Stream]:
        """The live streams of a device, its default stream included."""
        with self.lock:
            return [s for s in (*self._defaults.values(), *self._streams.values())
                    if s.device_id == device_id]

    def pending_on(self, start: int, end: int) -> list[Operation]:
        """Queued operations that touch ``[start, end)``. O(queued operations)."""
        if not self.pending:
            return []
        with self.lock:
            streams = (*self._defaults.values(), *self._streams.values())
            return self.queued_on(streams, start, end)

    def drop_device(self, device_id: int) -> None:
        """Discard the device's streams and contexts (aclrtResetDevice; the runtime has run their
        queued work first: what is still queued is dropped)."""
        with self.lock:
            for table in (self._streams, self._defaults):
                for key, stream in list(table.items()):
                    if stream.device_id == device_id:
                        self.pending -= len(stream.queue)
                        stream.queue = []
                        stream.destroyed = True
                        del table[key]
            for key, context in list(self._contexts.items()):
                if context.device_id == device_id:
                    context.destroyed = True
                    del self._contexts[key]
            self._default_contexts.pop(device_id, None)

    # -- contexts ------------------------------------------------------------------------------

    def _context(self, handle: object) -> Context:
        number = as_int(handle, "context")
        context = self._contexts.get(number)
        if context is None or context.destroyed:
            raise InvalidHandle(f"context {number:#x} does not exist or was destroyed")
        return context

    def create_context(self, device_id: object) -> int:
        """aclrtCreateContext: a context on ``device_id``, made current on this thread.

        Raises:
            InvalidDevice: a bad device id.
        """
        device = self.runtime.set_device(device_id)
        with self.lock:
            handle = CONTEXT_BASE + 64 * next(self._handles)
            self._contexts[handle] = Context(handle, device.device_id)
        self.runtime.threads.set_context(handle)
        return handle

    def destroy_context(self, handle: object) -> None:
        """aclrtDestroyContext: run the queued work of the context's streams, then destroy
        the context and its streams (as :meth:`destroy_stream` does for one stream).

        Raises:
            InvalidHandle: unknown, destroyed, or a default context.
            AclError: the first queued operation that failed (the context is destroyed anyway).
        """
        with self.lock:
            context = self._context(handle)
            if context.default:
                raise InvalidHandle("a device's default context cannot be destroyed")
            if context.closing:
                raise InvalidHandle(f"context {context.handle:#x} is already being destroyed")
            # From here its streams refuse new work and no stream is made in it, so the drain
            # below runs everything that was accepted.
            context.closing = True
            streams = [s for s in self._streams.values() if s.context == context.handle]
            for stream in streams:
                stream.closing = True
        try:
            self._run(streams)
        finally:
            with self.lock:
                if not context.destroyed:
                    context.destroyed = True
                    del self._contexts[context.handle]
                    for key, stream in list(self._streams.items()):
                        if stream.context == context.handle:
                            # Empty: nothing is queued on a closing stream after the drain.
                            assert not stream.queue, "work accepted on a closing stream"
                            stream.destroyed = True
                            del self._streams[key]
                    dropped = True
                else:
                    dropped = False
            for stream in streams if dropped else ():
                self.runtime.pools.forget(stream=stream)  # event-ordered reuse (11-10)
            if dropped:
                if self.runtime.threads.context() == context.handle:
                    self.runtime.threads.set_context(None)
                self.runtime.reset_device(context.device_id)

    def set_context(self, handle: object) -> None:
        """aclrtSetCurrentContext: make the context (and its device) current on this thread.

        Raises:
            InvalidHandle: unknown or destroyed.
        """
        with self.lock:
            context = self._context(handle)
        self.runtime.threads.set_context(context.handle, context.device_id)

    def get_context(self) -> int:
        """aclrtGetCurrentContext: this thread's context, else its device's default context.

        Raises:
            DeviceNotSet: no current device.
        """
        device_id = self.runtime.current_device().device_id
        handle = self.runtime.threads.context()
        with self.lock:
            context = self._contexts.get(handle) if handle is not None else None
            if context is not None and context.device_id == device_id:
                return context.handle
            context = self._default_contexts.get(device_id)
            if context is None:
                handle = CONTEXT_BASE + 64 * next(self._handles)
                context = Context(handle, device_id, default=True)
                self._default_contexts[device_id] = context
                self._contexts[handle] = context
            return context.handle
