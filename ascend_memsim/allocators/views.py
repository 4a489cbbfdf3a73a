"""What the caching allocator holds, as torch_npu shows it: the segments and their blocks,
``memory_snapshot()`` and the trace history (``device_traces``).

Sources: ``Ascend/pytorch`` ``torch_npu/csrc/npu/Module.cpp`` (memorySnapshot:
segmentInfoToDict, the trace entries) and ``torch_npu/csrc/core/npu/NPUCachingAllocator.cpp``
(``snapshot``, ``record_trace``).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..memory.errors import InvalidArgument

if TYPE_CHECKING:
    from .blocks import Block, Pool, PrivatePool
    from .workspace import NpuWorkspaceAllocator

__all__ = ["SnapshotViews"]


class SnapshotViews:
    """The views of :class:`~ascend_memsim.allocators.caching.NpuCachingAllocator` (a mixin:
    it reads the allocator's blocks under its lock)."""

    _history: deque[Any] | None
    # the allocator's (caching.py), which this mixin reads
    _lock: threading.RLock
    runtime: Any
    device: int
    workspace: NpuWorkspaceAllocator
    _active: dict[int, Block]
    _small: Pool
    _large: Pool
    _pools: dict[tuple[int, int], PrivatePool]
    _dropped: list[tuple[int, int]]
    if TYPE_CHECKING:
        def _pending(self) -> list[Block]: ...

        def _drain_dropped(self) -> None: ...
    #: called for each trace entry while the history is on: its ``frames`` (a list of
    #: {"filename", "line", "name"}, innermost first); None: no frames, as before
    trace_frames: Callable[[], list[Any]] | None = None

    def record_history(self, enabled: bool = True, *, max_entries: int = 100_000) -> None:
        """torch_npu.npu.memory._record_memory_history: keep the last ``max_entries`` trace
        entries (alloc, free_requested, free_completed, segment_alloc, segment_free, oom)
        for :meth:`memory_snapshot`'s ``device_traces`` (a ring buffer, as torch's)."""
        if max_entries.__class__ is not int or max_entries < 1:
            raise InvalidArgument(f"max_entries must be a positive int, not {max_entries!r}")
        with self._lock:
            self._history = deque(maxlen=max_entries) if enabled else None

    def history_length(self) -> int:
        """The trace entries recorded so far (0 while the history is off). O(1)."""
        history = self._history
        return 0 if history is None else len(history)

    def _trace(self, action: str, addr: int, size: int, stream: int) -> None:
        # record_trace (the source); OOM entries carry device_free instead of addr
        key = "device_free" if action == "oom" else "addr"
        frames = self.trace_frames
        history = self._history
        assert history is not None  # called only while the history is on
        history.append({"action": action, key: addr, "size": size, "stream": stream,
                        "pool_id": (0, 0), "frames": frames() if frames else []})

    def memory_snapshot(self, pool_id: tuple[int, int] | None = None) -> dict[str, Any]:
        """torch_npu.npu.memory._snapshot()'s dict: ``segments`` sorted by address, each with
        torch_npu's keys and its ``blocks``, and ``device_traces`` (one list per device;
        empty unless :meth:`record_history` is on). Frames are empty unless
        :attr:`trace_frames` gives them (trace entries only). Source:
        ``csrc/npu/Module.cpp`` (memorySnapshot's segmentInfoToDict) and
        ``NPUCachingAllocator.cpp`` ``snapshot``; the workspace allocator's blocks follow
        (``NPUWorkspaceAllocator.cpp`` ``get_segm``, ``get_trace``)."""
        with self._lock:
            segments = []
            for seg in self.segments(pool_id):
                blocks = [{"address": b["address"], "size": b["size"],
                           "requested_size": b["requested_size"], "state": b["state"],
                           "frames": []} for b in seg["blocks"]]
                allocated = sum(b["size"] for b in blocks if b["state"] == "active_allocated")
                active = [b for b in blocks if b["state"] != "inactive"]
                segments.append({
                    "device": self.device, "address": seg["address"],
                    "total_size": seg["total_size"], "allocated_size": allocated,
                    "active_size": sum(b["size"] for b in active),
                    "requested_size": sum(b["requested_size"] for b in active),
                    "stream": seg["stream"], "segment_pool_id": seg["pool_id"],
                    "segment_type": "small" if seg["small"] else "large",
                    "is_expandable": seg["expandable"], "frames": [], "blocks": blocks})
            # the workspace allocator's blocks after the caching allocator's segments, and
            # (history on) three entries each at the start of the trace: get_segm and
            # get_trace (NPUWorkspaceAllocator.cpp), merged as Module.cpp memorySnapshot does;
            # the source never marks its block allocated, so the block shows "inactive"
            head: list[dict[str, Any]] = []
            for ptr, size, requested, stream in (self.workspace.blocks() if pool_id is None
                                                 else ()):
                segments.append({
                    "device": self.device, "address": ptr, "total_size": size,
                    "allocated_size": 0, "active_size": 0, "requested_size": 0,
                    "stream": stream, "segment_pool_id": (0, 0), "segment_type": "large",
                    "is_expandable": False, "frames": [],
                    "blocks": [{"address": ptr, "size": size, "requested_size": requested,
                                "state": "inactive", "frames": []}]})
                head.extend({"action": action, "addr": ptr, "size": size, "stream": stream,
                             "pool_id": (0, 0), "frames": []}
                            for action in ("workspace_snapshot", "segment_alloc", "alloc"))
            traces: list[list[Any]] = [[] for _ in range(self.runtime.device_count)]
            if self._history is not None:
                # DECISION: the snapshot shares the history's entries (never changed once
                # appended) instead of copying each, so a run's trace costs its bytes once,
                # not twice, at the end; a caller that edits an entry of one snapshot edits
                # it in the later ones too (torch's are fresh dicts)
                traces[self.device] = head + list(self._history)
            return {"segments": segments, "device_traces": traces}

    def segments(self, pool_id: tuple[int, int] | None = None) -> list[dict[str, Any]]:
        """The segments, by address (a memory pool's only, with ``pool_id``): ``address``,
        ``total_size``, ``stream``, ``small``, ``expandable``, ``pool_id`` ((0, 0) for the
        device's own pools, a MemPool's id) and
        ``blocks`` (``address``, ``size``, ``requested_size``, ``state``: "active_allocated",
        "active_pending_free" or "inactive", torch_npu's snapshot words)."""
        with self._lock:
            if self._dropped:
                self._drain_dropped()
            heads = {}
            b: Block | None
            cached = [self._small, self._large,
                      *(p for pp in self._pools.values() for p in (pp.small, pp.large))]
            for b in [*self._active.values(), *(b for p in cached for b in p.blocks.values()),
                      *self._pending()]:
                owner = b.pool.owner
                if pool_id is not None and (owner is None or owner.id != pool_id):
                    continue
                while b.prev is not None:
                    b = b.prev
                heads[b.ptr] = b
            out: list[dict[str, Any]] = []
            for ptr in sorted(heads):
                head, b, blocks = heads[ptr], heads[ptr], []
                # an expandable segment shows each run of mapped blocks as a segment, as
                # torch's snapshot does
                while b is not None:
                    if b.mapped:
                        state = ("active_allocated" if b.allocated else
                                 "active_pending_free" if b.event_count else "inactive")
                        blocks.append({"address": b.ptr, "size": b.size,
                                       "requested_size": b.requested_size, "state": state})
                    if blocks and (b.next is None or not b.next.mapped):
                        out.append({"address": blocks[0]["address"],
                                    "total_size": sum(x["size"] for x in blocks),
                                    "stream": head.stream, "small": head.small,
                                    "pool_id": (0, 0) if head.pool.owner is None
                                    else head.pool.owner.id,
                                    "expandable": head.segment is not None, "blocks": blocks})
                        blocks = []
                    b = b.next
            out.sort(key=lambda seg: seg["address"])
            return out
