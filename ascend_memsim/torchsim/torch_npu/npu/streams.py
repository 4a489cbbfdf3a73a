"""The stand-in ``torch_npu.npu.streams`` (``torch_npu/npu/streams.py``): streams of the
simulated runtime and events, which order nothing (fake tensors run no work); the caching
allocator keeps blocks per stream (a stream's ``npu_stream`` is its handle).
:mod:`torch_npu.npu <..npu>` re-exports them."""

from __future__ import annotations

from typing import Any

import torch

from ._state import _check, _own, _session

__all__ = ["Stream", "Event", "ExternalStream", "ExternalEvent", "SyncLaunchStream"]


class Stream:
    """torch_npu.npu.Stream: a stream of the simulated runtime (``npu_stream``: its handle)."""

    def __init__(self, device: Any = None, priority: int = 0, **kwargs: Any) -> None:
        _check(device)
        session = _session()
        self.npu_stream = kwargs.get("_handle")
        if self.npu_stream is None:
            self.npu_stream = session.runtime.streams.create_stream()
        self.device = torch.device("npu", _own())
        self.priority = priority

    def wait_event(self, event: Event) -> None:
        pass

    def wait_stream(self, stream: Stream) -> None:
        pass

    def record_event(self, event: Event | None = None) -> Event:
        event = event or Event()
        event.record(self)
        return event

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Stream) and other.npu_stream == self.npu_stream

    def __hash__(self) -> int:
        return hash(self.npu_stream)

    def __repr__(self) -> str:
        return (f"<torch_npu.npu.Stream device=npu:{_own()} "
                f"npu_stream={self.npu_stream:#x}>")


class Event:
    """torch_npu.npu.Event: records nothing (no work runs on fake tensors)."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False,
                 interprocess: bool = False) -> None:
        self.enable_timing = enable_timing

    def record(self, stream: Stream | None = None) -> None:
        pass

    def wait(self, stream: Stream | None = None) -> None:
        pass

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end_event: Event) -> float:
        return 0.0


class ExternalStream(Stream):
    """A stream made outside torch_npu, wrapped: the simulated runtime's stream
    ``stream_ptr`` names (one ``npurt().npuStreamCreate`` made), else a new stream of it."""

    def __init__(self, stream_ptr: int = 0, device: Any = None, **kwargs: Any) -> None:
        handle = None
        if isinstance(stream_ptr, int) and not isinstance(stream_ptr, bool) and stream_ptr:
            try:
                _session().runtime.streams.stream(stream_ptr)
                handle = stream_ptr
            except (LookupError, ValueError, TypeError):
                handle = None
        super().__init__(device, _handle=handle)


class ExternalEvent(Event):
    """torch_npu.npu.ExternalEvent (``torch_npu/npu/streams.py``): an event a capture takes as
    an external node, waitable before it is recorded and ``reset`` before reuse; it orders
    nothing here, as :class:`Event`."""

    def __init__(self) -> None:
        super().__init__(enable_timing=False, blocking=False, interprocess=False)

    def reset(self, stream: Stream | None = None) -> None:
        """Clear the recorded flag (nothing is recorded here)."""

    def __repr__(self) -> str:
        return "<torch_npu.npu.ExternalEvent uninitialized>"


class SyncLaunchStream(Stream):
    """A stream whose tasks launch synchronously (no task queue): a stream as any other."""
