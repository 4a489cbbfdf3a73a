"""Event-ordered reuse of stream-ordered pools (11-10): which records each stream waited for.

``hicann/runtime`` ``docs/zh/api_ref/11-10_ordered_stream_memory_allocation.md``
("内存复用机制"): with ACL_RT_MEM_POOL_REUSE_FOLLOW_EVENT_DEPENDENCIES a stream may reuse a
segment freed on another stream once it waited (aclrtStreamWaitEvent) for an event recorded
on the freeing stream after the free: the runtime's sequence maps (``PoolRegistry::
UpdateEventMap`` / ``UpdateSeqMap``). :class:`EventOrder` keeps them for
:class:`~ascend_memsim.runtime.pools.MemPools`, which holds its lock around every call.

Bounded: an event's entry goes with aclrtDestroyEvent, a stream's with aclrtDestroyStream
(as the stream waited for, once no segment it freed is cached), a device's with its reset;
so the tables hold live events, streams and cached segments only, however long the program
runs.
"""

from __future__ import annotations

from typing import Any

__all__ = ["EventOrder"]


class EventOrder:
    """The records and the waits (see the module docstring). Not thread-safe by itself."""

    def __init__(self) -> None:
        #: event handle -> (stream it was last recorded on, that record's submission number)
        self.records: dict[int, tuple[Any, int]] = {}
        #: (waiting stream, recording stream) -> the latest record waited for
        self.waited: dict[tuple[Any, Any], int] = {}

    def recorded(self, event: int, stream: Any, seq: int) -> None:
        """aclrtRecordEvent queued the record ``seq`` of ``event`` on ``stream``."""
        self.records[event] = (stream, seq)

    def wait(self, stream: Any, event: int) -> None:
        """aclrtStreamWaitEvent: ``stream`` waits for the event's last record."""
        record = self.records.get(event)
        if record is not None and record[0] is not stream:
            key = (stream, record[0])
            self.waited[key] = max(self.waited.get(key, 0), record[1])

    def reached(self, stream: Any, source: Any) -> int:
        """The latest record of ``source`` that ``stream`` waited for (0: none)."""
        return self.waited.get((stream, source), 0)

    def forget(self, event: int | None, stream: Any, freeing: set[Any]) -> None:
        """aclrtDestroyEvent / aclrtDestroyStream: drop its entries. A destroyed stream waits
        no more; as the stream waited for, it stays while a segment it freed is cached
        (``freeing``: the streams of the cached segments; its frees ran, the destroy drained
        it)."""
        if event is not None:
            self.records.pop(event, None)
        if stream is None:
            return
        for key in [k for k in self.waited if k[0].destroyed
                    or (k[1].destroyed and k[1] not in freeing)]:
            del self.waited[key]

    def forget_device(self, device_id: int) -> None:
        """The device is being reset: its streams and events go."""
        for key in [k for k in self.waited if k[0].device_id == device_id]:
            del self.waited[key]
        for event in [k for k, r in self.records.items() if r[0].device_id == device_id]:
            del self.records[event]
