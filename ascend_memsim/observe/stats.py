"""Memory statistics per device, in the spirit of ``torch.npu.memory_stats``.

A :class:`MemoryStats` is a device observer: attach it to a runtime and it keeps, per device,
counters named like PyTorch's (``"<stat>.<pool>.<metric>"``):

- stats: ``allocation`` (block count), ``footprint_bytes`` (bytes the blocks occupy, what
  aclrtGetMemInfo subtracts), ``requested_bytes`` (bytes the program asked for);
- pools: ``all``, ``memory.HBM``/``memory.DDR``, ``page.normal``/``page.huge``/``page.huge1g``,
  ``component.<module name>`` (``component.APP`` by default);
- metrics: ``current``, ``peak``, ``allocated`` (running total), ``freed`` (running total);

plus ``num_ooms`` (failed mallocs), ``num_fallbacks`` (HUGE_FIRST blocks placed on normal
pages), ``num_resets`` and ``reset_blocks`` (blocks still live when the device was reset),
and, once the program made such calls, ``num_<event>s`` of the stream memory, cache and
device-variable events (:data:`COUNTED_EVENTS`: ``num_value_writes``, ``num_cmos``, ...).

>>> from ascend_memsim import Runtime, MiB
>>> with Runtime("A2", hbm_bytes=64 * MiB) as rt:
...     stats = MemoryStats.attach(rt)
...     _ = rt.set_device(0)
...     ptr = rt.malloc(2 * MiB)
...     snap = stats.snapshot(0)
>>> snap["requested_bytes.all.current"], snap["footprint_bytes.all.current"]
(2097152, 4194304)

Updating costs a few dict operations per event, and nothing at all when no observer is
attached (the device checks ``if self.observers`` first).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from ..memory.constants import MODULE_NAMES
from ..memory.units import format_bytes, plural

if TYPE_CHECKING:
    from ..memory.device import Block, Device
    from ..runtime.runtime import Runtime

__all__ = ["MemoryStats", "STATS", "METRICS", "COUNTED_EVENTS", "memory_summary"]

#: The counted quantities and the metrics kept for each pool.
STATS = ("allocation", "footprint_bytes", "requested_bytes")
METRICS = ("current", "peak", "allocated", "freed")


class _Counter:
    """current / peak / allocated / freed of one quantity in one pool."""

    __slots__ = ("current", "peak", "allocated", "freed")

    def __init__(self) -> None:
        self.current = self.peak = self.allocated = self.freed = 0

    def add(self, n: int) -> None:
        self.current += n
        self.allocated += n
        if self.current > self.peak:
            self.peak = self.current

    def sub(self, n: int) -> None:
        self.current -= n
        self.freed += n


class _DeviceStats:
    """The counters of one device, by (stat, pool)."""

    def __init__(self) -> None:
        self.counters: dict[tuple[str, str], _Counter] = {}
        self.num_ooms = 0
        self.num_fallbacks = 0
        self.num_resets = 0
        self.reset_blocks = 0
        #: memory shared between processes (runtime/ipc.py, runtime/shareable.py): event
        #: counts, and the bytes this process maps from other processes' memory
        self.sharing: dict[str, int] = {}
        #: custom allocators (11-08, runtime/custom_alloc.py): event counts, and the
        #: workspace bytes registered allocators have handed out and not yet had back
        self.allocator: dict[str, int] = {}
        #: ``num_<event>s`` of the COUNTED_EVENTS
        self.calls: dict[str, int] = {}

    def _counter(self, stat: str, pool: str) -> _Counter:
        counter = self.counters.get((stat, pool))
        if counter is None:
            counter = self.counters[(stat, pool)] = _Counter()
        return counter

    @staticmethod
    def _pools(block: Block) -> tuple[str, ...]:
        return ("all", f"memory.{block.memory.value}", f"page.{block.page.value}",
                f"component.{MODULE_NAMES.get(block.module, block.module)}")

    def allocated(self, block: Block) -> None:
        for pool in self._pools(block):
            self._counter("allocation", pool).add(1)
            self._counter("footprint_bytes", pool).add(block.footprint)
            self._counter("requested_bytes", pool).add(block.size)
        if block.fallback:
            self.num_fallbacks += 1

    def _change(self, pool: str, info: dict[str, Any], sign: int) -> None:
        # one allocation of info's footprint and size, added (sign > 0) or taken from pool
        for stat, n in (("allocation", 1), ("footprint_bytes", info["footprint"]),
                        ("requested_bytes", info["size"])):
            counter = self._counter(stat, pool)
            if sign > 0:
                counter.add(n)
            else:
                counter.sub(n)

    def physical(self, info: dict[str, Any], sign: int) -> None:
        """Physical memory of aclrtMallocPhysical (virtual memory, 11-04): pools ``all`` and
        ``physical``, its page kind and APP (the runtime charges it to APP)."""
        for pool in ("all", "physical", f"page.{info['page']}", "component.APP"):
            self._change(pool, info, sign)

    def pool_block(self, info: dict[str, Any], sign: int) -> None:
        """A block of a stream-ordered memory pool (11-10) handed out (aclrtMemPoolMallocAsync)
        or given back (aclrtMemPoolFreeAsync): pool ``mem_pool`` only (its memory is counted
        as physical memory, by granule)."""
        self._change("mem_pool", info, sign)

    def gauge(self, name: str, delta: int) -> None:
        """Move ``<name>.current`` of :attr:`sharing` by ``delta`` bytes, and its peak."""
        counts = self.sharing
        now = counts.get(f"{name}.current", 0) + delta
        counts[f"{name}.current"] = now
        counts[f"{name}.peak"] = max(counts.get(f"{name}.peak", 0), now)

    def freed(self, block: Block) -> None:
        for pool in self._pools(block):
            self._counter("allocation", pool).sub(1)
            self._counter("footprint_bytes", pool).sub(block.footprint)
            self._counter("requested_bytes", pool).sub(block.size)


class MemoryStats:
    """A device observer that keeps torch-style memory statistics for every device.

    Thread-safe: device events arrive under the device lock; the stats have a lock of their
    own for readers.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._devices: dict[int, _DeviceStats] = {}

    @classmethod
    def attach(cls, runtime: Runtime) -> MemoryStats:
        """A new MemoryStats observing every device of ``runtime`` from now on."""
        stats = cls()
        runtime.add_observer(stats)
        return stats

    def _stats(self, device_id: int) -> _DeviceStats:
        """The device's counters, made at its first event (call under the lock)."""
        stats = self._devices.get(device_id)
        if stats is None:
            stats = self._devices[device_id] = _DeviceStats()
        return stats

    def __call__(self, event: str, device: Device, info: dict[str, Any]) -> None:
        """Observer entry point; unknown events are ignored."""
        if event in _SHARING:
            self._shared(event, device, info)
            return
        if event in _ALLOCATOR:
            self._custom(event, device, info)
            return
        if event in COUNTED_EVENTS:
            with self._lock:
                stats = self._stats(device.device_id)
                name = counter_name(event)
                stats.calls[name] = stats.calls.get(name, 0) + 1
        if event in _MANAGED:
            self._managed(event, device, info)
            return
        if event not in ("malloc", "free", "malloc_failed", "reset", "malloc_physical",
                         "free_physical", "mem_pool_malloc", "mem_pool_free"):
            return
        with self._lock:
            stats = self._stats(device.device_id)
            if event == "malloc":
                stats.allocated(info["block"])
            elif event == "free":
                stats.freed(info["block"])
            elif event == "malloc_failed":
                stats.num_ooms += 1
            elif event in ("malloc_physical", "free_physical"):
                stats.physical(info, 1 if event == "malloc_physical" else -1)
            elif event in ("mem_pool_malloc", "mem_pool_free"):
                stats.pool_block(info, 1 if event == "mem_pool_malloc" else -1)
            else:
                # DECISION: blocks discarded by a reset count as freed, so current bytes
                # return to zero as the device's free memory does.
                stats.num_resets += 1
                for block in info["blocks"]:
                    stats.freed(block)
                    stats.reset_blocks += 1

    def _shared(self, event: str, device: Device, info: dict[str, Any]) -> None:
        """Count a sharing event; an import's bytes are another process's memory, so they
        are kept apart (``imported_bytes``), never in the device's pools."""
        with self._lock:
            stats = self._stats(device.device_id)
            counts = stats.sharing
            name = counter_name(event)
            counts[name] = counts.get(name, 0) + 1
            size = info.get("footprint", info.get("size", 0))
            if event in ("ipc_import", "shareable_import"):
                stats.gauge("imported_bytes", size)
            elif ((event == "ipc_close" and info.get("role") == "importer")
                  or event == "shareable_release"):
                stats.gauge("imported_bytes", -size)

    def _custom(self, event: str, device: Device, info: dict[str, Any]) -> None:
        """Count a custom allocator event (``num_allocator_registers``, ...); the workspace
        it hands out is the allocator's memory, already counted where it came from, so its
        bytes are kept apart (``allocator_bytes``)."""
        with self._lock:
            stats = self._devices.get(device.device_id)
            if stats is None:
                stats = self._devices[device.device_id] = _DeviceStats()
            counts = stats.allocator
            name = f"num_{event}s"
            counts[name] = counts.get(name, 0) + 1
            if event == "allocator_alloc":
                now = counts.get("allocator_bytes.current", 0) + info["size"]
                counts["allocator_bytes.current"] = now
                counts["allocator_bytes.peak"] = max(counts.get("allocator_bytes.peak", 0), now)
            elif event == "allocator_free":
                counts["allocator_bytes.current"] = (counts.get("allocator_bytes.current", 0)
                                                     - info["size"])

    def _managed(self, event: str, device: Device, info: dict[str, Any]) -> None:
        """Count a managed-memory call (11-05, runtime/managed.py): ``num_<event>s``, and the
        bytes of managed memory charged to the device (``managed_bytes``; they are counted
        as physical memory in the pools too)."""
        with self._lock:
            stats = self._stats(device.device_id)
            counts = stats.sharing
            name = counter_name(event)
            counts[name] = counts.get(name, 0) + 1
            if event in ("managed_alloc", "managed_free"):
                sign = 1 if event == "managed_alloc" else -1
                stats.gauge("managed_bytes", sign * info["footprint"])

    def device_ids(self) -> list[int]:
        """The devices that have had an event so far."""
        with self._lock:
            return sorted(self._devices)

    def snapshot(self, device_id: int = 0) -> dict[str, int]:
        """All counters of one device as a flat dict (keys sorted), zeros before any event.

        The ``.all`` pool always appears; the others appear once they have been used.
        """
        with self._lock:
            stats = self._devices.get(device_id) or _DeviceStats()
            out: dict[str, int] = {}
            pools = {pool for _, pool in stats.counters} | {"all"}
            for stat in STATS:
                for pool in pools:
                    counter = stats.counters.get((stat, pool)) or _Counter()
                    for metric in METRICS:
                        out[f"{stat}.{pool}.{metric}"] = getattr(counter, metric)
            out["num_ooms"] = stats.num_ooms
            out["num_fallbacks"] = stats.num_fallbacks
            out["num_resets"] = stats.num_resets
            out["reset_blocks"] = stats.reset_blocks
            # shared memory: only once the process shared some (the keys are absent before)
            out.update(stats.sharing)
            out.update(stats.calls)
            # custom allocators likewise (absent before their first event)
            out.update(stats.allocator)
            current = out["requested_bytes.all.current"]
            # what the rounding rule and page granularity cost right now
            out["overhead_bytes.all.current"] = out["footprint_bytes.all.current"] - current
            return dict(sorted(out.items()))

    def reset_peak(self, device_id: int | None = None) -> None:
        """Set every peak to its current value (torch.npu.reset_peak_memory_stats)."""
        with self._lock:
            targets = (self._devices.values() if device_id is None
                       else [self._devices[device_id]] if device_id in self._devices else [])
            for stats in targets:
                for counter in stats.counters.values():
                    counter.peak = counter.current
                if "allocator_bytes.current" in stats.allocator:
                    stats.allocator["allocator_bytes.peak"] = (
                        stats.allocator["allocator_bytes.current"])

    def summary(self, device_id: int = 0) -> str:
        """A table of the snapshot for terminals (see :func:`memory_summary`)."""
        return memory_summary(self.snapshot(device_id), device_id)


#: The sharing events (see runtime/sharing.py emit) the statistics count.
_SHARING = frozenset({"ipc_export", "ipc_import", "ipc_close", "shareable_export",
                      "shareable_import", "shareable_release"})


#: The custom allocator events (see runtime/custom_alloc.py) the statistics count.
_ALLOCATOR = frozenset({"allocator_register", "allocator_unregister", "allocator_alloc",
                        "allocator_free"})


#: The events counted as ``num_<event>s``: value write and wait (11-09, runtime/streams.py),
#: cache operations (11-06, runtime/cmo.py: ``cmo`` is any of the three CMO launches), and
#: device variables (11-11, compute/symbols.py: loaded on a device, unloaded, copied).
COUNTED_EVENTS = frozenset({"value_write", "value_wait", "cmo", "cmo_wait_barrier",
                            "cmo_set_desc", "symbol_load", "symbol_unload", "symbol_copy"})
def counter_name(event: str) -> str:
    """The statistics' count of ``event``: ``num_`` and the event's plural
    (``num_cmos``, ``num_symbol_copies``, ``num_managed_prefetches``)."""
    if event.endswith("y"):
        return f"num_{event[:-1]}ies"
    return f"num_{event}{'es' if event.endswith(('ch', 'sh', 'x')) else 's'}"


#: The managed-memory events (runtime/managed.py) the statistics count.
_MANAGED = frozenset({"managed_alloc", "managed_free", "managed_advise", "managed_prefetch",
                      "managed_prefetch_batch", "p2p_map"})


def _fmt(n: int, is_bytes: bool) -> str:
    return format_bytes(n) if is_bytes else str(n)


def memory_summary(snapshot: dict[str, int], device_id: int = 0) -> str:
    """A torch.memory_summary-like table of a :meth:`MemoryStats.snapshot` (exact sizes;
    the columns widen to the longest figure)."""
    pools = sorted({k.split(".", 1)[1].rsplit(".", 1)[0] for k in snapshot
                    if k.startswith("allocation.")}, key=lambda p: (p != "all", p))
    rows = []
    for stat in STATS:
        is_bytes = stat.endswith("bytes")
        for pool in pools:
            rows.append((stat + " " + pool,
                         [_fmt(snapshot[f"{stat}.{pool}.{m}"], is_bytes) for m in METRICS]))
    width = max([14] + [len(v) + 2 for _, row in rows for v in row])
    lines = [f"memory statistics of device {device_id}",
             f"{'':32}" + "".join(f"{m:>{width}}" for m in
                                  ("current", "peak", "allocated", "freed"))]
    for name, row in rows:
        lines.append(f"{name:32}" + "".join(f"{v:>{width}}" for v in row))
    lines.append(f"out-of-memory failures: {snapshot['num_ooms']}; huge-page fallbacks: "
                 f"{snapshot['num_fallbacks']}; resets: {snapshot['num_resets']} "
                 f"({plural(snapshot['reset_blocks'], 'block')} still live)")
    lines.append(f"padding and page rounding now: "
                 f"{_fmt(snapshot['overhead_bytes.all.current'], True)}")
    return "\n".join(lines)
