"""Events: records queued on streams, waits between streams, and their times.

pyacl (hicann/runtime python/pyACL/rt/rt_synchronize.cpp): ``create_event()`` and
``create_event_with_flag(flag)`` return ``(event, ret)``; ``record_event(event, stream)``,
``synchronize_event(event)``, ``stream_wait_event(stream, event)`` (stream first),
``destroy_event(event)`` return ``ret``; ``query_event_status(event)`` returns
``(status, ret)`` with ACL_EVENT_RECORDED_STATUS_NOT_READY 0 / COMPLETE 1;
``event_elapsed_time(start, end)`` returns ``(ms, ret)``.

A record is queued work like a copy: it completes when its stream's work runs (at a
synchronisation). DECISIONs:

* an event never recorded is complete (the docs say so for events made with a flag);
  a new record makes it not ready again until the record runs;
* ``synchronize_event`` runs the recording stream's queued work; ``stream_wait_event`` queues
  on the waiting stream a step that runs the recording stream's work (so everything queued
  there before the wait has run when the waiting stream goes on);
* ``event_elapsed_time`` of an event whose record has not run is
  ACL_ERROR_RT_EVENT_NOT_COMPLETE 507006 (rt_error_codes.h); times are host
  ``perf_counter`` readings on the device's clock: a record completes when its stream
  reaches it, which is when it was queued (a stream with nothing ahead reaches it at once,
  as on hardware) or, if later, the stream's previous record plus the time the work between
  them took to run (a kernel, a blocking callback), since queued work runs only at a
  synchronisation here (so ``record; sleep(2); record`` is 2000 ms apart, as on hardware);
* destroying an event with a record still queued is allowed (the record then does nothing);
  an unknown or destroyed event is ACL_ERROR_RT_INVALID_HANDLE 107017, as for streams.
"""

from __future__ import annotations

import itertools
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any

from ..memory.args import UINT32_MAX, as_int
from ..memory.constants import EventFlag, EventRecordedStatus, EventStatus
from ..memory.errors import EventNotComplete, InvalidArgument, InvalidHandle
from .streams import Operation, Stream

__all__ = ["EVENT_BASE", "Event", "Events"]

#: Event handles are ints from here, 64 apart (streams 0x1_..., contexts 0x2_...).
EVENT_BASE = 0x4_0000_0000


@dataclass(eq=False)
class Event:
    handle: int
    device_id: int
    flags: int = 0
    #: the queued record not yet run (None: complete)
    pending: Operation | None = None
    stream: Stream | None = None
    #: perf_counter when the last record ran
    time: float | None = None
    destroyed: bool = False


class Events:
    """The events of one runtime. Thread-safe (one lock; queued work runs without it)."""

    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime
        self.lock = threading.RLock()
        self._events: dict[int, Event] = {}
        self._numbers = itertools.count()
        #: per stream, its last completed record: (device time, perf_counter when it ran)
        self._clock: weakref.WeakKeyDictionary[Stream, tuple[float, float]] = \
            weakref.WeakKeyDictionary()

    def create(self, flags: object = 0) -> int:
        """aclrtCreateEvent / aclrtCreateEventWithFlag: an event of the current device.

        Raises:
            InvalidArgument: a flag bit outside aclrtCreateEventWithFlag's (acl_rt.h).
        """
        flags = as_int(flags, "flag", 0, UINT32_MAX)
        unknown = flags & ~sum(EventFlag)
        if unknown:
            known = ", ".join(f"{f.name}={f.value:#x}" for f in EventFlag)
            raise InvalidArgument(f"event flag {flags:#x} has unknown bits {unknown:#x}; "
                                  f"known: {known}")
        device = self.runtime.current_device()
        with self.lock:
            handle = EVENT_BASE + 64 * next(self._numbers)
            self._events[handle] = Event(handle, device.device_id, flags)
            return handle

    def get(self, handle: object) -> Event:
        number = as_int(handle, "event")
        event = self._events.get(number)
        if event is None or event.destroyed:
            raise InvalidHandle(f"event {number:#x} does not exist or was destroyed")
        return event

    def destroy(self, handle: object) -> None:
        with self.lock:
            event = self.get(handle)
            event.destroyed = True
            del self._events[event.handle]
        self.runtime.pools.forget(event=event.handle)  # event-ordered reuse (11-10)

    def record(self, handle: object, stream: object, reset: bool = False) -> None:
        """aclrtRecordEvent (or aclrtResetEvent): queue the record on ``stream``."""
        call = "aclrtResetEvent" if reset else "aclrtRecordEvent"
        event = self.get(handle)
        target = self.runtime.streams.target(stream, call)

        def run(_stream: Stream) -> None:
            now = time.perf_counter()
            with self.lock:
                if event.pending is op:
                    event.pending = None
                    last = self._clock.get(target)
                    reached = queued if last is None else max(queued, last[0] + now - last[1])
                    self._clock[target] = (reached, now)
                    event.time = None if reset else reached

        queued = time.perf_counter()
        with self.lock:
            op = self.runtime.streams.enqueue(target, call, (), run)
            event.pending, event.stream = op, target
            self.runtime.pools.recorded(event.handle, target, op.seq)  # event-ordered reuse

    def synchronize(self, handle: object, timeout_ms: object = -1) -> None:
        """aclrtSynchronizeEvent (and ...WithTimeout, ``timeout_ms`` an int32, -1 for ever):
        run the recording stream's work (nothing if complete).

        DECISION: the simulated wait never times out: the work runs now, whatever the
        timeout.
        """
        as_int(timeout_ms, "timeout", -1, 2**31 - 1)
        event = self.get(handle)
        if event.pending is not None and event.stream is not None:
            self.runtime.streams.run([event.stream])

    def recorded_status(self, handle: object) -> EventRecordedStatus:
        """aclrtQueryEventStatus."""
        event = self.get(handle)
        return (EventRecordedStatus.NOT_READY if event.pending is not None
                else EventRecordedStatus.COMPLETE)

    def status(self, handle: object) -> EventStatus:
        """aclrtQueryEvent (deprecated; the opposite polarity)."""
        done = self.recorded_status(handle) is EventRecordedStatus.COMPLETE
        return EventStatus.COMPLETE if done else EventStatus.NOT_READY

    def wait(self, stream: object, handle: object) -> None:
        """aclrtStreamWaitEvent: ``stream`` goes on only after the event's record ran."""
        event = self.get(handle)
        target = self.runtime.streams.target(stream, "aclrtStreamWaitEvent")

        def run(_stream: Stream) -> None:
            source, record = event.stream, event.pending
            if record is not None and source is not None and source is not target:
                # only the work before the record: what follows it may itself wait for
                # this stream (a later wait in the other direction)
                self.runtime.streams.run([source], upto=record.seq)

        self.runtime.streams.enqueue(target, "aclrtStreamWaitEvent", (), run)
        self.runtime.pools.waited(target, event.handle)  # event-ordered reuse (11-10)

    def timestamp(self, handle: object) -> float:
        event = self.get(handle)
        if event.pending is not None or event.time is None:
            raise EventNotComplete(f"event {event.handle:#x} has no completed record")
        return event.time

    def elapsed_ms(self, start: object, end: object) -> float:
        """aclrtEventElapsedTime: milliseconds between two completed records."""
        return (self.timestamp(end) - self.timestamp(start)) * 1000.0

    def drop_device(self, device_id: int) -> None:
        """Forget the device's events (aclrtResetDevice, last reference)."""
        with self.lock:
            for key, event in list(self._events.items()):
                if event.device_id == device_id:
                    event.destroyed = True
                    del self._events[key]
