"""Queued work: the operations a stream holds, and running them in submission order.

:class:`StreamWork` is the machinery under :class:`~ascend_memsim.runtime.streams.Streams`
(which adds the table of streams and contexts and the aclrt calls): it numbers each queued
operation, appends it to its stream's FIFO, counts what is pending, and runs the queues of
several streams merged by submission order, under one run lock.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..memory.errors import AclError, InvalidHandle

__all__ = ["Operation", "Stream", "StreamWork"]


@dataclass(eq=False)
class Operation:
    """One queued piece of work: what it touches and how to run it."""

    seq: int
    call: str
    #: (first address, one past the last) of each range it reads or writes
    ranges: tuple[tuple[int, int], ...]
    run: Callable[[], None] = field(repr=False)
    site: object = field(default=None, repr=False)

    def describe(self) -> str:
        spans = ", ".join(f"[{a:#x}, {b:#x})" for a, b in self.ranges)
        return f"{self.call} #{self.seq} on {spans}"


@dataclass(eq=False)
class Stream:
    """A stream of one device: a FIFO of queued operations."""

    handle: int
    device_id: int
    context: int
    queue: list[Operation] = field(default_factory=list)
    destroyed: bool = False
    #: a destroy has started: queued work still runs, new work is refused
    closing: bool = False


class StreamWork:
    """Work queued on streams: numbering, queuing and running it. Thread-safe.

    ``lock`` guards the streams' queues (and, in the subclass, the tables); queued work runs
    outside it, under ``run_lock``. DECISION: one run lock for all streams rather than one
    per stream: ``synchronize_device`` merges several streams by submission order, and
    per-stream locks would have to be taken several at a time (a deadlock when an observer
    running inside one operation synchronises another stream); the byte moves are serialised
    by the data plane's lock anyway, so a single lock costs no parallelism.
    """

    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime
        self.lock = threading.RLock()
        #: held while queued work is taken and run (reentrant: an observer may synchronise)
        self.run_lock = threading.RLock()
        self._seq = itertools.count(1)
        #: queued operations not yet run, over all streams
        self.pending = 0
        self._running = threading.local()

    def queue_on(self, stream: Stream, call: str, ranges: tuple[tuple[int, int], ...],
                 run: Callable[[Stream], None]) -> Operation:
        """Queue ``run(stream)`` on a live stream; it touches ``ranges``.

        Raises:
            InvalidHandle: the stream is destroyed or being destroyed.
        """
        with self.lock:
            if stream.destroyed or stream.closing:
                raise InvalidHandle(f"stream {stream.handle:#x} was destroyed or is being "
                                    f"destroyed")
            op = Operation(next(self._seq), call, ranges, lambda: run(stream))
            sanitizer = self.runtime.sanitizer
            if sanitizer.on and sanitizer.record_sites:
                op.site = sanitizer.capture()
            stream.queue.append(op)
            self.pending += 1
            return op

    def _run(self, streams: list[Stream], upto: int | None = None) -> None:
        """Run the streams' queued work in submission order, under :attr:`run_lock`; with
        ``upto``, only the operations submitted up to that one (an event's record: a wait
        for it needs no later work).

        Another thread already running work on these streams finishes first, so work queued
        earlier never runs after work queued later.
        """
        with self.run_lock:
            with self.lock:
                queues = [s.queue for s in streams if s.queue]
                if upto is not None:
                    queues = [[op for op in q if op.seq <= upto] for q in queues]
                    queues = [q for q in queues if q]
                if not queues:
                    return
                work = (queues[0] if len(queues) == 1
                        else list(heapq.merge(*queues, key=lambda op: op.seq)))
                for s in streams:
                    s.queue = ([] if upto is None
                               else [op for op in s.queue if op.seq > upto])
                self.pending -= len(work)
            first: AclError | None = None
            running = self._running
            for op in work:
                previous, running.op = getattr(running, "op", None), op
                try:
                    op.run()
                except AclError as error:
                    if first is None:
                        first = error
                finally:
                    running.op = previous
        if first is not None:
            raise first

    def run(self, streams: list[Stream], upto: int | None = None) -> None:
        """Run the queued work of ``streams`` (events and callbacks wait through this), up
        to submission ``upto`` if given."""
        self._run(streams, upto)

    def running(self) -> Operation | None:
        """The queued operation this thread is running now, if any (for reports)."""
        return getattr(self._running, "op", None)

    def queued_on(self, streams: Iterable[Any], start: int, end: int) -> list[Operation]:
        """Operations queued on ``streams`` that touch ``[start, end)``. O(queued
        operations)."""
        if not self.pending:
            return []
        with self.lock:
            return [op for s in streams for op in s.queue
                    if any(a < end and start < b for a, b in op.ranges)]
