"""What replay does with the events that place no memory of their own.

Two families (the runtime emits them: ``runtime/pools.py``, ``runtime/sharing.py``):

- **stream-ordered pools** (11-10): ``mem_pool_create``, ``mem_pool_destroy``,
  ``mem_pool_malloc``, ``mem_pool_free``, ``mem_pool_trim``, ``mem_pool_set_attr``. A
  pool's memory is its 2 MiB granules, recorded as ``malloc_physical`` / ``free_physical``
  events carrying ``pool`` (and ``va``, where the granule is mapped in the pool); replay
  places and gives those back as any physical memory, so peaks, failures and
  :func:`~ascend_memsim.observe.replay.smallest_capacity` count pool memory as the runtime
  charges it. The pool calls themselves are counted.
- **memory shared between processes** (11-04 shareable handles, 11-07 IPC keys):
  ``ipc_export``, ``ipc_set_import_pid``, ``ipc_set_attr``, ``ipc_import``, ``ipc_close``,
  ``shareable_export``, ``shareable_set_pid``, ``shareable_import``, ``shareable_release``.
  An export shares memory the trace placed already; a whitelist or an attribute changes no
  memory; an import maps another process's memory: no memory is placed. They are counted,
  and the bytes imported are kept apart (now and at their peak), never in the peak of this
  process's memory.

Each such event is told to the replay's observers with its recorded fields (each checked: a
plain int, or a string where the runtime writes one), so statistics count them and pictures
draw them as they do in the recorded program. An event whose fields are not what the runtime
writes is counted, described in the replay's problems, and told to no observer.
"""

from __future__ import annotations

from typing import Any

__all__ = ["POOL_EVENTS", "SHARING_EVENTS", "RECORDED_EVENTS", "Recorded"]

POOL_EVENTS = ("mem_pool_create", "mem_pool_destroy", "mem_pool_malloc", "mem_pool_free",
               "mem_pool_trim", "mem_pool_set_attr")
SHARING_EVENTS = ("ipc_export", "ipc_set_import_pid", "ipc_set_attr", "ipc_import",
                  "ipc_close", "shareable_export", "shareable_set_pid", "shareable_import",
                  "shareable_release")
RECORDED_EVENTS = frozenset(POOL_EVENTS + SHARING_EVENTS)

#: the int fields each event needs to be told to observers; the others are optional
_NEEDS = {"mem_pool_malloc": ("pool", "ptr", "size", "footprint"),
          "mem_pool_free": ("pool", "ptr", "size", "footprint"),
          "ipc_import": ("ptr", "size"), "ipc_close": ("ptr", "size"),
          "shareable_import": ("handle", "size"), "shareable_release": ("handle", "size")}
_INTS = ("pool", "ptr", "size", "footprint", "handle", "exporter", "memory_device", "keep",
         "released", "max_size", "attr", "type", "value")
_STRS = ("key", "role")
#: the most a field may hold: 64-bit addresses and sizes
_LIMIT = 1 << 64


def _plain_int(value: Any) -> bool:
    return type(value) is int and 0 <= value < _LIMIT


class Recorded:
    """Counts and imported bytes of one replay (see the module docstring). O(open imports)
    memory."""

    def __init__(self, counts: dict[str, int], problems: list[str], name: str) -> None:
        self.counts = counts
        self.problems = problems
        self.name = name
        #: (device, "ipc" ptr | "shareable" handle) -> bytes of an open import
        self.imports: dict[tuple[Any, ...], int] = {}
        self.imported = 0
        self.imported_peak = 0

    def event(self, event: Any, device: Any) -> None:
        """Count ``event`` (a stream record), keep the imported bytes, tell the observers."""
        kind = event.kind
        self.counts[kind] = self.counts.get(kind, 0) + 1
        info = self._info(event)
        if info is None:
            return
        if kind in ("ipc_import", "shareable_import", "ipc_close", "shareable_release"):
            self._imports(kind, event.device, info)
        for observer in [*device.observers, *device.subscribers.get(kind, ())]:
            observer(kind, device, info)

    def _info(self, event: Any) -> dict[str, Any] | None:
        """The recorded fields an observer reads, checked; None (and a problem) when a
        needed one is missing or of the wrong kind."""
        info: dict[str, Any] = {}
        for key in _INTS:
            value = event.get(key)
            if _plain_int(value):
                info[key] = value
        for key in _STRS:
            value = event.get(key)
            if type(value) is str:
                info[key] = value[:200]
        shareable = event.get("shareable")
        if _plain_int(shareable) or type(shareable) is str:
            info["shareable"] = shareable if type(shareable) is int else shareable[:300]
        stream = event.get("stream")
        if stream is not None:
            info["stream"] = stream
        missing = [k for k in _NEEDS.get(event.kind, ()) if k not in info]
        if missing:
            self.problems.append(f"{self.name}:{event.line}: {event.kind} without a plain "
                                 f"{', '.join(missing)}: counted, not drawn")
            return None
        return info

    def _imports(self, kind: str, device: int, info: dict[str, Any]) -> None:
        key = (device, "ipc", info["ptr"]) if kind.startswith("ipc") else \
            (device, "shareable", info["handle"])
        if kind.endswith("import"):
            size = info.get("footprint", info["size"])
            self.imported += size - self.imports.get(key, 0)
            self.imports[key] = size
            self.imported_peak = max(self.imported_peak, self.imported)
        elif kind == "shareable_release" or info.get("role") == "importer":
            self.imported -= self.imports.pop(key, 0)
