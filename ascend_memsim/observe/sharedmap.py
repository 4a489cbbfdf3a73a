"""Stream-ordered pools (11-10) and imports from other processes (11-04, 11-07) in the pictures.

A :class:`SharingView` is an observer (of a runtime, or of a replay: it reads the events'
plain fields, so a recorded trace draws as the program did) that keeps, per device:

- each pool's **granules**: the 2 MiB of device memory behind the pool's addresses, where they
  lie in the device's heap (``phys``) and where they are mapped in the pool (``va``);
- the pool's **blocks** (aclrtMemPoolMallocAsync, not yet given back by
  aclrtMemPoolFreeAsync);
- the **imports**: another process's memory this process maps (aclrtIpcMemImportByKey, or
  aclrtMemImportFromShareableHandle), with the exporter's pid.

:meth:`SharingView.annotate` turns a ``MapSnapshot`` (:mod:`ascend_memsim.observe.viz`) of a
device into one where each pool granule is drawn with the block it holds (the block's
requested bytes in that granule, the rest as the block's rounding to 2 MiB; a granule whose
block was given back as "cached") and the imports are listed under the device's memory,
labelled with their exporter (they are not this device's memory: DECISION, drawn apart,
never at an address of this process's heap, since each simulated process keeps its own heap).
"""

from __future__ import annotations

import html
import threading
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..memory.rules import Page
from ..memory.units import format_bytes
from .regions import BlockLike, is_physical

if TYPE_CHECKING:
    from ..runtime.runtime import Runtime

__all__ = ["SharingView", "PoolGranule", "Import", "import_change", "imports_svg",
           "POOL_COLOR", "CACHED_COLOR", "IMPORT_COLOR"]

#: a pool block's requested bytes (the Okabe-Ito sky blue), a cached granule (light grey)
POOL_COLOR = "#56B4E9"
CACHED_COLOR = "#BBBBBB"
#: memory of another process (the Okabe-Ito yellow)
IMPORT_COLOR = "#F0E442"
GRANULE = 2 << 20


@dataclass(frozen=True, slots=True)
class PoolGranule(BlockLike):
    """One granule of a pool as the map draws it (reads as a block does): ``size`` bytes of
    the block it holds lie in it (all of it when cached)."""

    ptr: int
    size: int
    footprint: int
    device_id: int
    pool: int
    va: int
    #: the block's start and requested size; 0 when the granule is cached
    block: int = 0
    asked: int = 0
    page = Page.HUGE
    module_name = "memory pool"
    counted_as = "pool granule"

    @property
    def fill(self) -> str:
        return POOL_COLOR if self.block else CACHED_COLOR

    @property
    def swatch(self) -> str:
        return "memory pool block" if self.block else "memory pool, cached (given back)"

    @property
    def label(self) -> str:
        if not self.block:
            return f"pool {self.pool:#x}, cached"
        return f"pool block {self.block:#x}, {format_bytes(self.asked)}"

    @property
    def tip(self) -> str:
        where = f"2 MiB granule of memory pool {self.pool:#x}, mapped at {self.va:#x}"
        if not self.block:
            return f"{where}: cached (its block was given back by aclrtMemPoolFreeAsync)"
        return (f"{where}: {format_bytes(self.size)} of the {self.asked}-byte block at "
                f"{self.block:#x} (aclrtMemPoolMallocAsync)")

    def describe(self) -> str:
        return self.tip


@dataclass(frozen=True, slots=True)
class Import:
    """Another process's memory this process maps: an IPC key's block, or a shareable
    handle's physical memory."""

    kind: str          # "IPC key" or "shareable handle"
    name: str          # the key, or the handle in this process
    ptr: int           # its address (IPC) or handle (shareable) in this process
    size: int
    exporter: int | None
    memory_device: int | None

    @property
    def label(self) -> str:
        owner = "another process" if self.exporter is None else f"process {self.exporter}"
        device = "" if self.memory_device is None else f" (device {self.memory_device})"
        return f"{self.kind} {self.name}: {format_bytes(self.size)} of {owner}{device}"


class _Device:
    def __init__(self) -> None:
        #: phys -> (pool, va)
        self.granules: dict[int, tuple[int, int]] = {}
        #: (pool, block ptr) -> bytes asked
        #: (pool, ptr) -> size, as the events gave them (a field may be missing: None)
        self.blocks: dict[tuple[int | None, int | None], Any] = {}
        #: ("ipc", ptr) or ("shareable", handle) -> Import
        self.imports: dict[tuple[str, int], Import] = {}


def _int(value: Any) -> int | None:
    return value if type(value) is int else None


class SharingView:
    """An observer keeping what the pictures draw of pools and imports (module docstring).
    Thread-safe; O(granules + blocks + imports) memory."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._devices: dict[int, _Device] = {}

    @classmethod
    def attach(cls, runtime: Runtime) -> SharingView:
        """A new view observing ``runtime`` from now on."""
        view = cls()
        runtime.add_observer(view)
        return view

    def __call__(self, event: str, device: Any, info: dict[str, Any]) -> None:
        if event not in _EVENTS:
            return
        get = info.get
        with self._lock:
            state = self._devices.get(device.device_id)
            if state is None:  # not setdefault: that would make a _Device per event
                state = self._devices[device.device_id] = _Device()
            if event == "reset":
                state.granules.clear()
                state.blocks.clear()
            elif event in ("malloc_physical", "free_physical"):
                pool, va, phys = _int(get("pool")), _int(get("va")), _int(get("phys"))
                if pool is None or va is None or phys is None:
                    return
                if event == "malloc_physical":
                    state.granules[phys] = (pool, va)
                else:
                    state.granules.pop(phys, None)
            elif event in ("mem_pool_malloc", "mem_pool_free"):
                key = (_int(get("pool")), _int(get("ptr")))
                if event == "mem_pool_malloc" and _int(get("size")) is not None:
                    state.blocks[key] = get("size")
                else:
                    state.blocks.pop(key, None)
            elif event == "mem_pool_destroy":
                state.blocks = {k: v for k, v in state.blocks.items() if k[0] != get("pool")}
            else:
                self._imports(event, state, info)

    @staticmethod
    def _imports(event: str, state: _Device, info: dict[str, Any]) -> None:
        key, opened = import_change(event, info)
        if key is None:
            return
        if opened is not None:
            state.imports[key] = opened
        else:
            state.imports.pop(key, None)

    def imports(self, device_id: int) -> list[Import]:
        """The imports open on ``device_id`` now, oldest first."""
        with self._lock:
            state = self._devices.get(device_id)
            return [] if state is None else list(state.imports.values())

    def annotate(self, snapshot: Any, device_id: int) -> Any:
        """``snapshot`` of ``device_id`` with its pool granules drawn with their blocks and
        its imports listed (see the module docstring)."""
        with self._lock:
            state = self._devices.get(device_id) or _Device()
            granules = dict(state.granules)
            blocks = dict(state.blocks)
            imports = list(state.imports.values())
        if not granules and not imports:
            return snapshot
        # the block (its start and size) holding each granule's address: O(the blocks'
        # granules), a block counted for no more granules than the device has
        holders: dict[tuple[int, int], tuple[int, int]] = {}
        for (pool, ptr), asked in blocks.items():
            for k in range(min(-(-asked // GRANULE), len(granules))):
                holders[(pool, ptr + k * GRANULE)] = (ptr, asked)
        drawn = []
        for region in snapshot.blocks:
            where = granules.get(region.ptr) if is_physical(region) else None
            if where is None:
                drawn.append(region)
                continue
            pool, va = where
            holder = holders.get((pool, va))
            if holder is None:
                drawn.append(PoolGranule(region.ptr, region.footprint, region.footprint,
                                         device_id, pool, va))
            else:
                start, asked = holder
                inside = max(0, min(asked - (va - start), region.footprint))
                drawn.append(PoolGranule(region.ptr, inside, region.footprint, device_id,
                                         pool, va, start, asked))
        return replace(snapshot, blocks=drawn, imports=imports)


def imports_svg(imports: list[Import], body: list[str], left: float, bar_w: float, y: float,
                row_bytes: int) -> float:
    """Draw a map's imports (SVG elements appended to ``body``) under its rows, one row
    each: a bar of the import's size (rows of ``row_bytes``, at most the row), at no
    address of this device (not its memory). The y below them."""
    if not imports:
        return y
    body.append(f'<text x="{left}" y="{y + 14}" class="legend">Mapped from other processes '
                f"(their memory; not counted above): {len(imports)}</text>")
    y += 22
    for entry in imports:
        w = max(2.0, min(entry.size, row_bytes) / row_bytes * bar_w)
        tip = html.escape(f"{entry.label}, mapped at {entry.ptr:#x}" if entry.kind == "IPC key"
                          else entry.label)
        body.append(f'<rect x="{left}" y="{y + 1}" width="{w:.2f}" height="14" '
                    f'fill="{IMPORT_COLOR}" class="import"><title>{tip}</title></rect>')
        body.append(f'<text x="{left + 5}" y="{y + 11.5}" class="inl">'
                    f"{html.escape(entry.label)}</text>")
        y += 19
    return y


def import_change(event: str, info: dict[str, Any]) -> tuple[tuple[str, int] | None, Import | None]:
    """What a sharing event does to the imports: (its key, the :class:`Import` it opens, or
    None when it closes one); (None, None) when it is no import's event or its fields are
    not plain."""
    get = info.get
    ipc = event.startswith("ipc")
    number = _int(get("ptr")) if ipc else _int(get("handle"))
    if number is None:
        return None, None
    key = ("ipc" if ipc else "shareable", number)
    if event in ("ipc_import", "shareable_import"):
        size = _int(get("size"))
        if size is None:
            return None, None
        name = str(get("key", ""))[:80] if ipc else f"{key[1]:#x}"
        return key, Import("IPC key" if ipc else "shareable handle", name, key[1], size,
                           _int(get("exporter")), _int(get("memory_device")))
    if event == "shareable_release" or (event == "ipc_close" and get("role") == "importer"):
        return key, None
    return None, None


_EVENTS = frozenset({"reset", "malloc_physical", "free_physical", "mem_pool_malloc",
                     "mem_pool_free", "mem_pool_destroy", "ipc_import", "ipc_close",
                     "shareable_import", "shareable_release"})
