"""Replay a trace on any product, policy and capacity; find the smallest capacity that fits.

:func:`replay` runs a :class:`~ascend_memsim.observe.trace.Trace` against a fresh
:class:`~ascend_memsim.runtime.runtime.Runtime` and reports, unlike RMM's replay benchmark, *which*
event failed first and why (the request, the live bytes per stream, the largest free run, why
no fallback happened), and keeps each stream's bytes apart. :func:`smallest_capacity` finds by
bisection the smallest capacity on which the whole trace fits.

The simulator gives every block its own address, so a recorded pointer is only a name: replay
maps it to the block the simulated device gives. A trace that frees a pointer twice, or frees
one it never allocated, is reported in :attr:`ReplayResult.problems` with the line number and
the replay goes on.

Size: over 600 lines, on purpose: :func:`replay` is one pass over the events whose helpers
(the per-stream bytes, the physical handles of virtual memory, the timeline) share that
pass's state as closures, and :func:`smallest_capacity` is that pass run by bisection.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .. import checks as _checks  # noqa: F401  (registers the checker and config keys)
from ..memory.constants import ErrorCode, MiB
from ..memory.device import Block
from ..memory.errors import AclError, InvalidArgument
from ..memory.profiles import DEFAULT_PRODUCT, MEMORY_SPAN, get_profile
from ..memory.rules import Api, policy_name
from ..memory.units import format_bytes, parse_size, plural
from ..runtime.runtime import Runtime
from .fields import MAX_DEVICES
from .plain import brief
from .recorded import RECORDED_EVENTS, Recorded
from .stream import _BIT, TraceStream, records
from .timeline import Timeline, _Timeline
from .trace import Trace

__all__ = ["replay", "smallest_capacity", "ReplayResult", "Failure", "Bisection", "Timeline",
           "tty_progress", "parse_size", "shown_frame", "FRAME_CHARS"]

Progress = Callable[[int, int], None]
#: what replay reads: a trace in memory or a stream of a file
Source = Trace | TraceStream
_API_ABSENT = _BIT["api"]


@dataclass
class Failure:
    """The first event that could not be replayed, and the state of its device then."""

    index: int
    line: int
    event: dict[str, Any]
    message: str
    code: int
    live_bytes: int
    live_by_stream: dict[Any, int]
    free_bytes: int
    largest_free_run: int
    capacity: int

    def __str__(self) -> str:
        e = self.event
        named = {s: b for s, b in self.live_by_stream.items() if s is not None}
        streams = ", ".join(f"stream {s}: {format_bytes(b)}"
                            for s, b in sorted(self.live_by_stream.items(), key=str)) if named \
            else ""
        lines = [f"first failure: event {self.index} (line {self.line}): {e.get('api')}"
                 f"(size={e.get('size')}, policy={policy_name(e.get('policy', 0))}) on device "
                 f"{e.get('device', 0)}" + (f", stream {e['stream']}"
                                            if e.get("stream") is not None else "")
                 + (" (it failed when recorded too)" if e.get("event") == "malloc_failed"
                    else ""),
                 *("    " + m for m in self.message.splitlines()),
                 f"    live: {format_bytes(self.live_bytes)}" + (f" ({streams})" if streams
                                                                  else ""),
                 f"    free: {format_bytes(self.free_bytes)} of {format_bytes(self.capacity)};"
                 f" largest free run {format_bytes(self.largest_free_run)}"]
        stack = e.get("stack")
        if isinstance(stack, list) and stack:
            lines.append("    recorded at:")
            lines += [f"        {shown_frame(frame)}" for frame in stack]
        return "\n".join(lines)


@dataclass
class ReplayResult:
    """What a replay did: counts, peak, the first failure, problems in the trace."""

    name: str
    product: str
    capacity: int
    policy: int | None
    total: int
    replayed: int = 0
    mallocs: int = 0
    frees: int = 0
    failures: int = 0
    first_failure: Failure | None = None
    recorded_failures: int = 0
    recorded_failures_now_fit: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    #: events counted that place no memory of their own: a pool's calls (its granules are
    #: replayed as physical memory) and sharing between processes (:mod:`.recorded`)
    recorded: dict[str, int] = field(default_factory=dict)
    #: the most bytes of other processes' memory this one had imported at once
    imported_peak: int = 0
    peak_bytes: int = 0
    peak_index: int = -1
    peak_by_stream: dict[Any, int] = field(default_factory=dict)
    #: when the trace has stacks: (innermost frame, footprint bytes, blocks) live at the
    #: peak, largest first
    peak_sites: list[tuple[str, int, int]] = field(default_factory=list)
    #: bytes of main memory below the highest byte any block used (on any device): every
    #: capacity from here up to the one replayed gives the same placements
    high_water: int = 0
    problems: list[str] = field(default_factory=list)
    timeline: Timeline | None = None
    #: the most bytes requested (not footprints) live at once, all devices
    requested_peak: int = 0
    #: the device of the last event replayed
    last_device: int = 0
    #: the runtime after the replay, when ``keep_runtime`` (the caller closes it)
    runtime: Runtime | None = None
    #: where the capacity came from: "as given", the product's own, or as recorded
    capacity_note: str = ""

    @property
    def fits(self) -> bool:
        """True when every malloc of the trace succeeded; in a trace that names the device
        it was recorded on, a malloc recorded as failed too (see :func:`replay`)."""
        return self.failures == 0

    def __str__(self) -> str:
        policy = "as recorded" if self.policy is None else policy_name(self.policy)
        lines = [f"replayed {self.replayed} of {self.total} events of {self.name} on "
                 f"{self.product}: capacity {format_bytes(self.capacity)}"
                 f"{' ' * bool(self.capacity_note)}{self.capacity_note}, policy {policy}",
                 f"  {plural(self.mallocs, 'malloc')}, {plural(self.frees, 'free')}, "
                 f"{self.failures} failed; peak "
                 f"footprint {format_bytes(self.peak_bytes)} at event {self.peak_index}"]
        if len(self.peak_by_stream) > 1:
            lines.append("  peak per stream: " + ", ".join(
                f"{s}: {format_bytes(b)}" for s, b in sorted(self.peak_by_stream.items(),
                                                               key=str)))
        if self.recorded_failures:
            lines.append(f"  {self.recorded_failures} recorded malloc failures probed; "
                         f"{self.recorded_failures_now_fit} would succeed here")
        if self.recorded:
            lines.append("  recorded, no memory of their own: " + ", ".join(
                f"{n} {k}" for k, n in sorted(self.recorded.items()))
                + (f"; imports peak at {format_bytes(self.imported_peak)} of other "
                   f"processes' memory" if self.imported_peak else ""))
        if self.skipped:
            lines.append("  not replayed: " + ", ".join(f"{n} {k}" for k, n in
                                                        sorted(self.skipped.items())))
        lines.append("  the whole trace fits" if self.fits else "  " + str(
            self.first_failure).replace("\n", "\n  "))
        if self.problems:
            lines.append(f"  {len(self.problems)} problem(s) in the trace:")
            lines += [f"    {p}" for p in self.problems[:20]]
            if len(self.problems) > 20:
                lines.append(f"    ... and {len(self.problems) - 20} more")
        return "\n".join(lines)


def _capacity_key(product: str) -> str:
    return "hbm_bytes" if get_profile(product).hbm_bytes else "ddr_bytes"


def _default_capacity(trace: Source) -> int | None:
    """DECISION: a trace replays on the capacity its header records, on whatever product it
    replays on, so that ``replay --product`` and the player (which compares products on one
    capacity) agree and a lesson recorded on a small device keeps its point on another part;
    the report says so, with the product's own capacity beside it. A trace that records
    none (a torch snapshot, an RMM log) replays on the product's own capacity."""
    recorded = trace.header.get("product")
    try:
        key = _capacity_key(recorded) if isinstance(recorded, str) else None
    except AclError:   # a product the simulator does not know: no capacity to read
        key = None
    value = trace.header.get(key) if key else None
    if not (isinstance(value, int) and not isinstance(value, bool) and value > 0):
        return None
    if value % 64 or value > MEMORY_SPAN:
        raise InvalidArgument(
            f"{trace.name}: the trace header's {key}={value} is not a capacity the "
            f"simulator takes (a multiple of 64 bytes up to {MEMORY_SPAN}); give one")
    return value


def _knows_its_device(trace: Source) -> bool:
    """True when the trace's header names the product and capacity it was recorded on (the
    project's own traces). DECISION: then a malloc recorded as failed that fails again is
    a failure of the replay, so a trace recorded on a small device replays with its
    out-of-memory errors; other traces' recorded failures (a torch snapshot's ``oom``: a
    tensor request of the caching allocator, which a replay of segments only approximates;
    an RMM log's) are probes only, counted apart."""
    product = trace.header.get("product")
    if not isinstance(product, str):
        return False
    try:
        capacity = trace.header.get(_capacity_key(product))
    except AclError:   # a product the simulator does not know
        return False
    return type(capacity) is int and capacity > 0


#: the most characters of one stack frame that text output shows
FRAME_CHARS = 200


def shown_frame(frame: str, limit: int = FRAME_CHARS) -> str:
    """A recorded stack frame for text output: at most ``limit`` characters, the cut ones
    counted (a trace may hold a frame of any length).

    >>> shown_frame("x" * 300, 10)
    'xxxxxxxxxx... (290 more characters)'
    """
    return frame if len(frame) <= limit else \
        f"{frame[:limit]}... ({len(frame) - limit} more characters)"


def _profile_of(trace: Source, product: str | None) -> Any:
    """The profile of ``product``, else of the product the trace's header names (an
    unknown one is an error naming the file), else of the default product.

    Raises:
        InvalidArgument: an unknown product.
    """
    if product is not None:
        return get_profile(product)
    recorded = trace.header.get("product")
    if not recorded:
        return get_profile(DEFAULT_PRODUCT)
    try:
        return get_profile(recorded)
    except AclError as e:
        raise InvalidArgument(f"{trace.name}: the trace header names product "
                              f"{brief(recorded)}, which the simulator does not know "
                              f"({getattr(e, 'message', e)}); choose one with --product"
                              ) from None


def site_of(block: Block) -> str:
    """The innermost recorded frame of ``block``'s allocation (``file:line in function``)."""
    stack = (block.extra or {}).get("stack")
    return stack[-1] if stack else _NO_SITE


_NO_SITE = "(no stack recorded)"


def _device_count(trace: Source, profile: Any) -> int | None:
    """The devices a replay needs beyond the product's own count, or None. A trace in memory
    is asked; a stream is not read twice: it gets the most the simulator makes (64), which
    changes no placement (devices are made on first use)."""
    if isinstance(trace, Trace):
        devices = max([e.get("device", 0) for e in trace.events
                       if isinstance(e.get("device"), int)] + [0]) + 1
    else:
        devices = _MAX_DEVICES
    return min(devices, _MAX_DEVICES) if devices > profile.device_count else None


_MAX_DEVICES = MAX_DEVICES


def replay(trace: Source, product: str | None = None, *, capacity: int | None = None,
           policy: int | None = None, api: str | None = None, stop_at_failure: bool = False,
           stop_after: int | None = None, timeline: bool = False,
           progress: Progress | None = None, keep_runtime: bool = False,
           observers: list[Any] | None = None, **overrides: Any) -> ReplayResult:
    """Run ``trace`` on a fresh runtime of ``product`` with ``capacity`` bytes of main memory.

    ``trace`` is a :class:`~ascend_memsim.observe.trace.Trace` in memory or a
    :class:`~ascend_memsim.observe.stream.TraceStream` (from ``open_trace``), read in one
    pass. ``policy`` / ``api`` replace the recorded ones for every malloc. ``stop_at_failure``
    ends at the first failed malloc; ``stop_after`` after that event index (for a map at a
    given moment, with ``keep_runtime``). ``observers`` are added to the fresh runtime (e.g.
    a :class:`~ascend_memsim.observe.stats.MemoryStats`). Without ``capacity``, a trace
    replays on the capacity its header records, on any product (:func:`_default_capacity`);
    a malloc
    recorded as failed is probed, and counts as a failure when it fails again in a trace
    that names its device (:func:`_knows_its_device`). ``timeline`` keeps at most
    ~2,000 points (:class:`Timeline`). ``progress(done, total)`` is called about 100 times,
    in events for a trace in memory, in bytes of the file for a stream.

    Time O(events x allocator cost); memory O(live blocks + distinct stacks + timeline
    points), independent of the trace's length when it is a stream.

    Raises:
        InvalidArgument: an unknown product, a bad capacity or API.
    """
    profile = _profile_of(trace, product)
    if capacity is not None:
        capacity_note = "as given"
    else:
        capacity = _default_capacity(trace)
        own = format_bytes(profile.total(profile.main_memory))
        capacity_note = f"{profile.name}'s own"
        if capacity is not None:
            capacity_note = f"as recorded on {trace.header.get('product')}" + (
                f" ({profile.name} has {own}; --capacity sets it)"
                if capacity != profile.capacity(profile.main_memory) else "")
    settings = dict(overrides)
    if capacity is not None:
        settings[_capacity_key(profile.name)] = capacity
    devices = _device_count(trace, profile)
    if devices is not None:
        settings["device_count"] = devices
    # DECISION: replay reports the trace's own problems; the sanitizer (leaks at close,
    # and its cost per call) is off unless asked for.
    settings.setdefault("sanitizer", "off")
    rt = Runtime(profile, **settings)
    for observer in observers or ():
        rt.add_observer(observer)
    forced_api = Api.parse(api) if api is not None else None
    total_events = len(trace.events) if isinstance(trace, Trace) else 0
    result = ReplayResult(trace.name, rt.profile.name, rt.profile.total(
        rt.profile.main_memory), policy, total_events, capacity_note=capacity_note)
    name = trace.name
    # (device, recorded ptr) -> (block, stream, allocation site or None before any stack)
    live: dict[tuple[int, Any], tuple[Block, Any, str]] = {}
    failed: set[tuple[int, Any]] = set()
    stream_bytes: dict[Any, int] = {}
    peak_by_stream = result.peak_by_stream
    total = requested = 0
    track = _Timeline(Timeline(capacity=result.capacity)) \
        if timeline else None
    stacks = False
    # footprint bytes and blocks per allocation site, from the first recorded stack on
    by_site: dict[str, list[int]] = {}
    at_peak: dict[str, list[int]] = {}
    main = rt.profile.main_memory
    apis: dict[Any, Api] = {}
    devices_seen: dict[str, Any] = {}
    index = -1
    last_change = -1
    recorded = Recorded(result.recorded, result.problems, name)
    own_failures = _knows_its_device(trace)

    def changed(index: int, block: Block | _Physical, site: str | None, sign: int) -> None:
        nonlocal total, at_peak
        footprint = block.footprint
        total += sign * footprint
        if site is not None:
            entry = by_site.get(site)
            if entry is None:
                entry = by_site[site] = [0, 0]
            entry[0] += sign * footprint
            entry[1] += sign
        if total > result.peak_bytes:
            result.peak_bytes, result.peak_index = total, index
            if stacks:   # O(sites) per new peak
                at_peak = {k: list(v) for k, v in by_site.items() if v[0] > 0}
        if track is not None:
            track.change(index, block.module_name, sign * footprint, total)

    def stream_add(stream: Any, n: int) -> None:
        now = stream_bytes[stream] = stream_bytes.get(stream, 0) + n
        if now > peak_by_stream.get(stream, 0):
            peak_by_stream[stream] = now

    # (device, recorded handle) -> (its address in the device, its stand-in for the tallies)
    physical: dict[tuple[int, Any], tuple[int, _Physical]] = {}

    def physical_event(index: int, event: Any, device: Any) -> str | None:
        """Place or give back a physical memory handle's memory (aclrtMallocPhysical, 11-04) in
        the same heap as the blocks; "stop" at a failure when asked to."""
        nonlocal last_change
        key = (event.device, event.get("handle"))
        if event.kind == "free_physical":
            entry = physical.pop(key, None)
            if entry is not None:
                device.give_physical(entry[0])
                changed(index, entry[1], None, -1)
                last_change = index
                entry[1].tell(device, "free_physical")
            return None
        footprint, page = event.get("footprint"), event.get("page")
        align = (1 << 30) if page == "huge1g" else 2 * MiB
        if (type(footprint) is not int or not 0 < footprint <= MEMORY_SPAN
                or footprint % align or key in physical):
            result.problems.append(f"{name}:{event.line}: malloc_physical with footprint "
                                   f"{footprint!r} on {page!r} pages cannot be replayed")
            return None
        try:
            size = event.get("size")
            size = size if type(size) is int and 0 < size <= footprint else footprint
            ptr = device.take_physical(footprint, align, "aclrtMallocPhysical", size=size)
        except AclError as e:
            result.failures += 1
            if result.first_failure is None:
                alloc = device.allocators[main]
                call = "aclrtMallocPhysical" if event.get("pool") is None else \
                    "aclrtMemPoolMallocAsync"
                result.first_failure = Failure(
                    index, event.line, dict(event.as_dict(), api=call),
                    getattr(e, "message", str(e)), int(e.code),
                    sum(b.footprint for b in device.blocks()), {}, alloc.free_bytes,
                    alloc.largest_free_run(), alloc.capacity)
            return "stop" if stop_at_failure else None
        info = {"handle": event.get("handle"), "size": size, "footprint": footprint,
                "page": page, "phys": ptr}
        pool = event.get("pool")
        if type(pool) is int:   # a stream-ordered pool's granule (runtime/pools.py)
            va = event.get("va")
            info.update(pool=pool, **({"va": va} if type(va) is int else {}))
        stand_in = _Physical(footprint, info, "memory pool" if "pool" in info else "APP")
        top = ptr + footprint - device.allocators[main].base
        if top > result.high_water:   # smallest_capacity's bound counts physical memory
            result.high_water = top
        physical[key] = (ptr, stand_in)
        changed(index, stand_in, None, +1)
        last_change = index
        stand_in.tell(device, "malloc_physical")
        return None

    events = records(trace, progress) if isinstance(trace, Trace) else trace.records(progress)
    for index, event in enumerate(events):
        if stop_after is not None and index > stop_after:
            index -= 1
            break
        kind = event.kind
        result.replayed += 1
        device_id = event.device
        result.last_device = device_id
        device = devices_seen.get(device_id)
        if device is None:
            try:
                device = devices_seen[device_id] = rt.device(device_id)
            except AclError as e:
                result.problems.append(f"{name}:{event.line}: {e}")
                continue
        if kind == "malloc" or kind == "malloc_failed":
            call_api = forced_api
            if call_api is None:
                recorded_api = "aclrtMalloc" if event.absent & _API_ABSENT else event.api
                call_api = apis.get(recorded_api) if type(recorded_api) is str else None
                if call_api is None:
                    try:
                        call_api = Api.parse(recorded_api)
                    except AclError as e:
                        result.problems.append(f"{name}:{event.line}: {e}")
                        continue
                    if type(recorded_api) is str:
                        apis[recorded_api] = call_api
            call_policy = (event.policy or 0) if policy is None else policy
            key = (device_id, event.ptr)
            try:
                block = device.allocate(event.size, call_policy, api=call_api,
                                        module=33 if event.module is None else event.module)
            except AclError as e:
                if kind == "malloc_failed":
                    result.recorded_failures += 1
                    if not own_failures:
                        continue
                else:
                    failed.add(key)
                result.failures += 1
                if track is not None:
                    track.failure(index)
                if result.first_failure is None:
                    alloc = device.allocators[main]
                    shown = dict(event.as_dict(), api=call_api.value, policy=call_policy)
                    result.first_failure = Failure(
                        index, event.line, shown, getattr(e, "message", str(e)),
                        int(getattr(e, "code", ErrorCode.RT_MEMORY_ALLOCATION)),
                        sum(b.footprint for b in device.blocks()),
                        {s: n for s, n in stream_bytes.items() if n}, alloc.free_bytes,
                        alloc.largest_free_run(), alloc.capacity)
                if stop_at_failure:
                    break
                continue
            top = block.ptr + block.footprint - device.allocators[main].base
            if top > result.high_water:
                result.high_water = top
            if kind == "malloc_failed":
                # DECISION: a recorded failure is probed, then released: the program never
                # had that memory, so it must not stay live.
                result.recorded_failures += 1
                result.recorded_failures_now_fit += 1
                device.free(block.ptr)
                continue
            result.mallocs += 1
            stack = event.stack
            if type(stack) is tuple and stack:
                # the recorded allocation site, for the pictures and the peak's sites
                block.extra = {**(block.extra or {}), "stack": stack}
                site = stack[-1]
                stacks = True
            else:
                site = _NO_SITE if stacks else None
            if key in live:
                result.problems.append(
                    f"{name}:{event.line}: pointer {key[1]:#x} allocated again while "
                    f"live (a free is missing from the trace); the old block stays live")
                requested -= live[key][0].size
            stream = event.stream
            live[key] = (block, stream, site)
            requested += block.size
            if requested > result.requested_peak:
                result.requested_peak = requested
            footprint = block.footprint
            now = stream_bytes[stream] = stream_bytes.get(stream, 0) + footprint
            if now > peak_by_stream.get(stream, 0):
                peak_by_stream[stream] = now
            changed(index, block, site, +1)
            last_change = index
        elif kind == "free":
            key = (device_id, event.ptr)
            entry = live.pop(key, None)
            if entry is None:
                if key in failed:
                    failed.discard(key)
                else:
                    ptr = key[1]
                    text = f"{ptr:#x}" if isinstance(ptr, int) else repr(ptr)
                    result.problems.append(
                        f"{name}:{event.line}: free of {text}, which is not live "
                        f"(freed twice, or never allocated in this trace)")
                continue
            block, stream, site = entry
            device.free(block.ptr)
            result.frees += 1
            requested -= block.size
            stream_bytes[stream] -= block.footprint
            changed(index, block, site, -1)
            last_change = index
        elif kind == "reset":
            # DECISION: replay acts on the device's "reset" event (blocks discarded), not on
            # reset_device reference counts.
            for key in [k for k in physical if k[0] == device_id]:
                stand_in = physical.pop(key)[1]
                changed(index, stand_in, None, -1)
                last_change = index
                stand_in.tell(device, "free_physical")
            for block in device.reset():
                for key, (b, stream, site) in list(live.items()):
                    if b is block:
                        del live[key]
                        requested -= block.size
                        stream_add(stream, -block.footprint)
                        changed(index, block, site, -1)
                        last_change = index
        elif kind == "malloc_physical" or kind == "free_physical":
            if physical_event(index, event, device) == "stop":
                break
        elif kind in RECORDED_EVENTS:
            recorded.event(event, device)
        elif kind in ("set_device", "reset_device"):
            continue
        else:
            result.skipped[str(kind)] = result.skipped.get(str(kind), 0) + 1
    result.total = max(result.total, index + 1)
    result.imported_peak = recorded.imported_peak
    result.peak_sites = sorted(((site, b, n) for site, (b, n) in at_peak.items()),
                               key=lambda row: (-row[1], row[0]))
    if track is not None:
        track.finish(last_change)
        track.track.events = result.total
        result.timeline = track.track
    if keep_runtime:
        result.runtime = rt
    else:
        rt.close()
    return result


class _Physical:
    """What the tallies read of a block, for physical memory (charged to APP), and what the
    observers (statistics, pictures) are told of it, as the runtime tells them."""

    __slots__ = ("footprint", "info", "module_name")

    def __init__(self, footprint: int, info: dict[str, Any], module_name: str = "APP") -> None:
        self.footprint = footprint
        self.info = info
        #: the timeline's component: APP, or "memory pool" for a pool's granule
        self.module_name = module_name

    def tell(self, device: Any, event: str) -> None:
        """Send ``event`` (malloc_physical or free_physical) to the device's observers."""
        for observer in [*device.observers, *device.subscribers.get(event, ())]:
            observer(event, device, self.info)


@dataclass
class Bisection:
    """The result of :func:`smallest_capacity`."""

    product: str
    step: int
    #: the smallest capacity found that fits, or None when no capacity does
    capacity: int | None
    runs: int
    #: the replay at ``capacity - step`` (the failure that one step less causes), if run
    below: ReplayResult | None
    reason: str = ""

    def __str__(self) -> str:
        if self.capacity is None:
            return (f"the trace does not fit on {self.product} at any simulated capacity: "
                    f"{self.reason}")
        text = (f"smallest capacity on {self.product} that fits the whole trace: "
                f"{format_bytes(self.capacity)} ({self.capacity} bytes; searched in steps of "
                f"{format_bytes(self.step)}, {self.runs} replays)")
        if self.below is not None and self.below.first_failure is not None:
            text += (f"\nwith {format_bytes(self.capacity - self.step)}:\n  "
                     + str(self.below.first_failure).replace("\n", "\n  "))
        return text


def smallest_capacity(trace: Source, product: str | None = None, *, step: int = 2 * MiB,
                      policy: int | None = None, progress: Progress | None = None,
                      **overrides: Any) -> Bisection:
    """The smallest multiple of ``step`` bytes of main memory on which ``trace`` fits.

    One replay on the largest simulated capacity first: if the trace fits there, the
    high-water mark of that run (the highest byte any block used) is an upper bound, because
    first-fit never looks past it, so every capacity from the high-water mark up gives the
    same placements (without huge-page fallbacks, exactly those capacities fit). Then a
    search down from that bound, in strides doubling from ``step`` until one fails, and a
    bisection of the last stride, never below the peak of the requested bytes (no smaller
    device can hold them; taken from the first replay for a stream, from the events for a
    trace in memory); each fitting trial lowers the bound to its own high-water mark.
    About 2 + 2 log2(distance / step) replays for an answer ``distance`` below the mark (2
    when it is the mark), each failing one stopping at its first failure; each replay is one
    pass over ``trace`` (memory O(live blocks) for a stream). First-fit placement
    is not strictly monotone in the capacity, so the answer is the smallest capacity the
    search saw fit with one step less failing (DECISION: 2 MiB steps by default, the huge
    page; 64 B steps on request).

    ``progress(run, 0)`` is called as each replay starts, and ``progress(done, total)``
    during it (see :func:`replay`).

    Raises:
        InvalidArgument: a step that is not a positive multiple of 64 bytes.
    """
    if not isinstance(step, int) or step <= 0 or step % 64:
        raise InvalidArgument(f"step must be a positive multiple of 64 bytes, got {step!r}")
    product = _profile_of(trace, product).name
    runs = 0

    def attempt(capacity: int) -> ReplayResult:
        nonlocal runs
        runs += 1
        if progress is not None:
            progress(runs, 0)
        return replay(trace, product, capacity=capacity, policy=policy, stop_at_failure=True,
                      progress=progress, **overrides)

    largest = MEMORY_SPAN // step * step
    peak = _requested_peak(trace) if isinstance(trace, Trace) else None
    if peak is not None and max(step, -(-peak // step) * step) > largest:
        return _too_large(product, step, runs, None, peak, largest)
    result = attempt(largest)
    if not result.fits:
        failure = result.first_failure
        if failure is not None and failure.code != ErrorCode.RT_MEMORY_ALLOCATION:
            return Bisection(product, step, None, runs, result, failure.message)
        return Bisection(product, step, None, runs, result,
                         f"not even the largest simulated capacity ({format_bytes(largest)}) "
                         f"holds it")
    if peak is None:
        peak = result.requested_peak
    # the requested bytes live at their peak: no smaller device can hold them
    hi = max(step, -(-peak // step) * step)
    lo = hi - step  # the largest multiple of the step known too small (exclusive bound)
    hi = max(hi, -(-result.high_water // step) * step)
    below: ReplayResult | None = None
    # Most often the answer is at or just below the mark (a smaller device differs only where
    # a huge-page request falls back to normal pages): step down from it in growing strides
    # until a capacity fails, then bisect the last stride.
    stride = step
    while hi - lo > step:
        trial_at = max(lo + step, hi - stride)
        trial = attempt(trial_at)
        if not trial.fits:
            lo, below = trial_at, trial
            break
        hi = max(lo + step, -(-trial.high_water // step) * step)
        stride *= 2
    while hi - lo > step:
        mid = (lo + hi) // 2 // step * step
        trial = attempt(mid)
        if trial.fits:
            hi = max(lo + step, -(-trial.high_water // step) * step)
        else:
            lo, below = mid, trial
    if below is None or lo != hi - step:
        below = attempt(hi - step) if hi - step > 0 else None
    return Bisection(product, step, hi, runs, below)


def _requested_peak(trace: Trace) -> int:
    """The most bytes the events of ``trace`` request live at once (O(events))."""
    live: dict[tuple[int, Any], int] = {}
    now = peak = 0
    for event in trace.events:
        key = (event.get("device", 0), event.get("ptr"))
        if event.get("event") == "malloc" and isinstance(event.get("size"), int):
            now += event["size"] - live.get(key, 0)
            live[key] = event["size"]
            peak = max(peak, now)
        elif event.get("event") == "free":
            now -= live.pop(key, 0)
    return peak


def _too_large(product: str, step: int, runs: int, result: ReplayResult | None, peak: int,
               largest: int) -> Bisection:
    return Bisection(product, step, None, runs, result,
                     f"its requested bytes peak at {format_bytes(peak)}, more than the "
                     f"largest simulated capacity ({format_bytes(largest)})")


def tty_progress(stream: Any = None, label: str = "replay") -> Progress | None:
    """A progress callback drawing ``replay  42%`` on ``stream`` (stderr by default) if it
    is a terminal, else None.

    ``(done, total)`` with a total draws the percentage; ``(run, 0)`` starts replay number
    ``run`` of a bisection, drawn in front of the percentage.
    """
    stream = stream or sys.stderr
    if not getattr(stream, "isatty", lambda: False)():
        return None
    run = 0

    def show(done: int, total: int) -> None:
        nonlocal run
        if total:
            head = f"bisection: replay {run}, " if run else f"{label} "
            stream.write(f"\r{head}{100 * done // total:3d}%")
            if done >= total and not run:
                stream.write("\n")
        else:
            run = done
            stream.write(f"\rbisection: replay {done}      ")
        stream.flush()

    return show
