"""The pytest fixture ``npu_allocator``: torch_npu's caching allocator over the test's device.

``@pytest.mark.npu_allocator(product="A2", capacity="1GiB", conf="expandable_segments:True",
max_allocated="300MiB", max_reserved="400MiB")`` and a test taking ``npu_allocator`` get an
:class:`~ascend_memsim.allocators.NpuCachingAllocator` on the ``memsim`` fixture's runtime
(``conf`` as ``PYTORCH_NPU_ALLOC_CONF``, ``cann`` its CANN version, ``device`` its device).
When the test body ends (the test's own failure, as the ``memsim`` fixture's checks):

- a peak of allocated bytes over ``max_allocated``, or of reserved bytes (the segments) over
  ``max_reserved``, fails the test with the peak, the budget and the ``malloc`` that reached
  the peak (size, stream, its Python frames);
- tensors still allocated fail it, each with its size and allocation site (DECISION: a
  tensor the test never freed is a leak, as a device block is for ``memsim``; cached
  segments are not: holding them is what the allocator is for). ``leak_check=False``
  lets them be.

Then the fixture frees what is left and empties the cache, so the device blocks of the
segments are not reported again as the test's device leaks. ``product`` and ``capacity``
(the main memory's size) set the ``memsim`` runtime; a ``memsim`` marker or an indirect
parameter of ``memsim`` overrides them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import pytest

from ..allocators import NpuCachingAllocator
from ..allocators.rules import DEFAULT_CANN
from ..memory.errors import AclError
from ..memory.sites import Site, capture_site, format_site
from ..memory.units import format_bytes, parse_size
from ..runtime.runtime import Runtime
from ._keys import CALL_CHECKS, merge_keywords

__all__ = ["budgeted_allocator", "BudgetedAllocator", "ALLOCATOR_KEYS", "runtime_settings"]

#: Every keyword the ``npu_allocator`` marker takes.
ALLOCATOR_KEYS = ("product", "capacity", "conf", "cann", "device", "max_allocated",
                  "max_reserved", "leak_check")

class _BadSettings(Exception):
    pass


class _Peak:
    """The malloc that last raised a peak: its value, size, stream and site."""

    __slots__ = ("value", "size", "stream", "site", "allocated")
    site: Site | None

    def __init__(self) -> None:
        self.value, self.size, self.stream, self.site = 0, 0, 0, None
        #: allocated bytes at that moment
        self.allocated = 0

    def describe(self) -> str:
        where = format_site(self.site, "      ")
        return (f"  reached by malloc({format_bytes(self.size)}) on stream {self.stream}"
                + (f", at\n{where}" if where else " (site not recorded)"))


class BudgetedAllocator(NpuCachingAllocator):
    """An :class:`NpuCachingAllocator` that keeps, for the fixture, each live tensor's
    allocation site and the ``malloc`` that raised the allocated and the reserved peak.

    Costs one stack walk (:func:`~ascend_memsim.memory.sites.capture_site`) and two
    comparisons per ``malloc``: a testing tool, not the replay's allocator.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: live tensors: ptr -> (size asked, stream, site)
        self.sites: dict[int, tuple[int, int, Site]] = {}
        self.allocated_peak, self.reserved_peak = _Peak(), _Peak()

    def malloc(self, size: object, stream: int = 0) -> int:
        site = capture_site()
        # one lock (the allocator's, re-entrant) around both: another thread's free of the
        # same block cannot come between
        with self._lock:
            ptr = super().malloc(size, stream)
            if ptr:
                size = cast(int, size)  # the malloc checked it
                self.sites[ptr] = (size, stream, site)
                stats = self.stats
                allocated = stats.allocated_bytes[0].current
                for peak, stat in ((self.allocated_peak, stats.allocated_bytes[0]),
                                   (self.reserved_peak, stats.reserved_bytes[0])):
                    if stat.peak > peak.value:
                        peak.value, peak.size, peak.stream, peak.site = (
                            stat.peak, size, stream, site)
                        peak.allocated = allocated
        return ptr

    def free(self, ptr: object) -> None:
        with self._lock:
            super().free(ptr)
            self.sites.pop(cast(int, ptr), None)  # the free checked it

    def release_all(self) -> None:
        """Free every live tensor, then empty the cache (the fixture's end)."""
        with self._lock:
            for ptr in list(self.sites):
                self.free(ptr)
            self.empty_cache()


def _merge(settings: dict, marker: Any) -> None:
    if marker.args:
        raise _BadSettings(f"@pytest.mark.npu_allocator takes keywords only, got "
                           f"{marker.args!r}; write npu_allocator(product='A2', conf=...)")
    merge_keywords(settings, dict(marker.kwargs), ALLOCATOR_KEYS, "@pytest.mark.npu_allocator",
                   _BadSettings)


def _allocator_settings(node: pytest.Item) -> dict:
    """The npu_allocator markers of ``node``, far to near, merged and checked."""
    settings: dict[str, Any] = {}
    for marker in reversed(list(node.iter_markers("npu_allocator"))):
        _merge(settings, marker)
    for key in ("max_allocated", "max_reserved", "capacity"):
        value = settings.get(key)
        try:
            settings[key] = None if value is None else parse_size(value)
        except AclError as e:
            raise _BadSettings(f"npu_allocator {key}={value!r}: {e.message}") from None
    if not isinstance(settings.setdefault("leak_check", True), bool):
        raise _BadSettings(f"npu_allocator leak_check={settings['leak_check']!r}: write True "
                           f"or False")
    cann = settings.setdefault("cann", DEFAULT_CANN)
    if not isinstance(cann, str):
        raise _BadSettings(f"npu_allocator cann={cann!r}: write a version such as '9.1.0'")
    device = settings.setdefault("device", 0)
    if device.__class__ is not int or device < 0:
        raise _BadSettings(f"npu_allocator device={device!r}: write a device id (int)")
    return settings


def runtime_settings(node: pytest.Item) -> dict:
    """The ``memsim`` settings the npu_allocator markers of ``node`` give: ``product``, and
    ``capacity`` as the ``capacity`` key (the plugin turns it into the main memory's size
    once the product is known). Bad settings are left for the fixture to report."""
    try:
        settings = _allocator_settings(node)
    except _BadSettings:
        return {}
    return {k: settings[k] for k in ("product", "capacity") if settings.get(k) is not None}


def _over(nodeid: str, what: str, peak: _Peak, budget: int, extra: str = "") -> str:
    return "\n".join([
        f"npu_allocator: {nodeid}: {what} peaked at {format_bytes(peak.value)} "
        f"({peak.value} bytes), over the max_{what.split()[0]} budget of "
        f"{format_bytes(budget)}{extra};", peak.describe()])


def _leaks(nodeid: str, alloc: BudgetedAllocator) -> str:
    live = sorted(alloc.sites.items())
    lines = [f"npu_allocator: {nodeid} left {len(live)} tensor(s) allocated in the caching "
             f"allocator; free them, or write @pytest.mark.npu_allocator(leak_check=False) "
             f"if the test means to:"]
    for ptr, (size, stream, site) in live:
        lines.append(f"  {format_bytes(size)} at {ptr:#x} on stream {stream} (block of "
                     f"{format_bytes(alloc.block_size(ptr))})")
        where = format_site(site, "      ")
        lines.append("    allocated at\n" + where if where else "    (site not recorded)")
    return "\n".join(lines)


def _check(nodeid: str, alloc: BudgetedAllocator, settings: dict) -> list[str]:
    """What the test body did wrong; then free what is left and empty the cache."""
    problems = []
    with alloc._lock:
        max_allocated, max_reserved = settings["max_allocated"], settings["max_reserved"]
        if max_allocated is not None and alloc.allocated_peak.value > max_allocated:
            problems.append(_over(nodeid, "allocated bytes", alloc.allocated_peak,
                                  max_allocated))
        if max_reserved is not None and alloc.reserved_peak.value > max_reserved:
            peak = alloc.reserved_peak
            problems.append(_over(nodeid, "reserved bytes", peak, max_reserved,
                                  f" (allocated then {format_bytes(peak.allocated)}, reserved "
                                  f"but unallocated {format_bytes(peak.value - peak.allocated)})"))
        if settings["leak_check"] and alloc.sites:
            problems.append(_leaks(nodeid, alloc))
        alloc.release_all()
    return problems


def budgeted_allocator(request: pytest.FixtureRequest,
                       memsim: Runtime) -> Iterator[BudgetedAllocator]:
    """The ``npu_allocator`` fixture's body: torch_npu's caching allocator on the ``memsim``
    runtime; budgets and leaks fail the test."""
    try:
        settings = _allocator_settings(request.node)
        alloc = BudgetedAllocator(memsim, settings["device"], settings.get("conf", ""),
                                  cann=settings["cann"])
    except (_BadSettings, AclError, ValueError) as e:
        bad: str | None = f"npu_allocator settings of {request.node.nodeid}: {e}"
    else:
        bad = None
    if bad is not None:
        pytest.fail(bad, pytrace=False)
    done = []

    def check() -> list[str]:
        done.append(True)
        return _check(request.node.nodeid, alloc, settings)

    request.node.stash.setdefault(CALL_CHECKS, []).append(check)
    yield alloc
    if not done:
        # the body failed (its own failure is the story) or the check never ran: give the
        # segments back so that the device is left as the test found it
        alloc.release_all()
