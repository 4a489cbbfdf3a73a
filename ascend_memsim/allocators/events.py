"""record_stream's delayed reuse: the events a freed block waits for.

Source: ``Ascend/pytorch`` ``torch_npu/csrc/core/npu/NPUCachingAllocator.cpp`` ("the source"):
``insert_events``, ``process_events``, ``synchronize_and_free_events``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..memory.constants import EventRecordedStatus
from .blocks import Block

__all__ = ["StreamEvents"]


class StreamEvents:
    """The events of :class:`~ascend_memsim.allocators.caching.NpuCachingAllocator` (a mixin:
    the allocator keeps ``_events``, stream -> [(event, block)], and frees blocks with
    ``_free_block``)."""

    _events: dict[int, list[tuple[int, Block]]]
    # the allocator's (caching.py), which this mixin uses
    runtime: Any
    if TYPE_CHECKING:
        def _free_block(self, block: Block) -> None: ...

    def _insert_events(self, block: Block) -> None:
        """insert_events (the source): an event recorded on each stream that used the block."""
        events = self.runtime.events
        streams, block.stream_uses = block.stream_uses, set()
        for stream in sorted(streams):
            event = events.create()
            events.record(event, stream)
            block.event_count += 1
            self._events.setdefault(stream, []).append((event, block))

    def _process_events(self) -> None:
        """process_events (the source): free the blocks whose events have all completed;
        per stream, stop at the first event not yet complete."""
        if not self._events:
            return
        events = self.runtime.events
        for stream in list(self._events):
            queue = self._events[stream]
            while queue:
                event, block = queue[0]
                if events.recorded_status(event) is not EventRecordedStatus.COMPLETE:
                    break
                queue.pop(0)
                events.destroy(event)
                block.event_count -= 1
                if block.event_count == 0:
                    self._free_block(block)
            if not queue:
                del self._events[stream]

    def _synchronize_and_free_events(self) -> None:
        """synchronize_and_free_events (the source): wait for every event, free its block."""
        events = self.runtime.events
        for stream, queue in list(self._events.items()):
            for event, block in queue:
                events.synchronize(event)
                events.destroy(event)
                block.event_count -= 1
                if block.event_count == 0:
                    self._free_block(block)
            del self._events[stream]

    def _pending(self) -> list[Block]:
        return [b for queue in self._events.values() for _e, b in queue]
