"""The sanitizer: names at the faulting call what hardware lets pass or crashes on later.

Modes: ``"report"`` (the default) prints each finding and keeps it as a :class:`Report`; the
call behaves as it would without the sanitizer. ``"strict"`` also makes a call with an
*error* finding fail: it raises :class:`SanitizerError` (the pyacl face returns its code,
ACL_ERROR_RT_PARAM_INVALID 107000: DECISION, the vendor has no code for "the sanitizer
refused"). ``"off"`` checks nothing beyond what the runtime itself refuses.

Findings (``Report.kind``), severity in brackets:

* ``invalid-free`` [error]: free of an address that is not a live block's start;
* ``double-free`` [error]: free of a block already freed (with its alloc and free sites);
* ``use-after-free`` [error]: an access to a freed block (``quarantine_bytes`` keeps freed
  blocks reserved so a stale pointer is not silently reused by a later malloc);
* ``invalid-address`` [error]: an access where nothing was ever allocated or registered;
* ``out-of-bounds`` [error]: an access past a block's footprint;
* ``padding-access`` [warning]: past the requested size but inside the hidden padding that
  the rounding rule adds: legal on hardware, a latent bug;
* ``uninitialized-read`` [error]: a read of bytes never written (initcheck, per run);
* ``readonly-write`` [error]: a write to ACL_MEM_ACCESS_USER_SPACE_READONLY memory
  (DECISION: reported even for host copies, which the runtime lets through);
* ``free-with-pending-work`` [error]: free while queued async work still targets the block;
* ``leak`` [error, never fails a call]: blocks live at reset_device / finalize.

Reports print in a compute-sanitizer-like form to ``output`` (stderr by default; None keeps
them quiet) and stay in :attr:`Sanitizer.reports`; :meth:`Sanitizer.summary` counts them.

Configure with ``Runtime(sanitizer="strict")``, ``Runtime(sanitizer=Sanitizer(...))`` or the
aclInit JSON: ``{"memsim": {"sanitizer": "strict"}}`` or
``{"memsim": {"sanitizer": {"mode": "report", "quarantine_bytes": 67108864}}}``.
"""

from __future__ import annotations

import sys
import threading
from collections import Counter, OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any, TextIO

from .errors import InvalidArgument, InvalidPointer, SanitizerError
from .runtime import CONFIG_KEYS
from .sites import Site, capture_site, format_site

__all__ = ["KINDS", "MODES", "Report", "Sanitizer", "SanitizerError"]

MODES = ("off", "report", "strict")

#: kind -> severity
KINDS = {
    "invalid-free": "error", "double-free": "error", "use-after-free": "error",
    "invalid-address": "error", "out-of-bounds": "error", "padding-access": "warning",
    "uninitialized-read": "error", "readonly-write": "error",
    "free-with-pending-work": "error", "leak": "error",
}

_BAR = "========="


@dataclass(eq=False)
class Report:
    """One finding: what, in which call, where, and the sites of the memory involved."""

    kind: str
    call: str
    address: int
    size: int
    where: str
    write: bool | None = None
    block: str | None = None
    call_site: Site | None = field(default=None, repr=False)
    alloc_site: Site | None = field(default=None, repr=False)
    free_site: Site | None = field(default=None, repr=False)
    #: for queued work that faulted when it ran: where it was queued
    queued_site: Site | None = field(default=None, repr=False)

    @property
    def severity(self) -> str:
        return KINDS[self.kind]

    def format(self) -> str:
        """The compute-sanitizer-like text of the finding."""
        if self.kind == "leak":
            head = f"Leaked {self.size} bytes at {self.address:#x}, found by {self.call}"
        elif self.kind in ("invalid-free", "double-free"):
            head = f"Invalid free of {self.address:#x} in {self.call}"
        elif self.kind == "free-with-pending-work":
            head = f"Free of {self.address:#x} while queued work uses it, in {self.call}"
        else:
            access = "write" if self.write else "read"
            head = (f"Invalid {access} of {self.size} bytes at {self.address:#x} in "
                    f"{self.call}")
        lines = [f"{_BAR} {self.severity.upper()}: {head} [{self.kind}]",
                 f"{_BAR}     {self.where}"]
        for title, site in (("at", self.call_site), ("queued at", self.queued_site),
                            ("allocated at", self.alloc_site), ("freed at", self.free_site)):
            if site:
                lines.append(f"{_BAR}     {title}:")
                lines.append(format_site(site, indent=f"{_BAR}         "))
        lines.append(_BAR)
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format()


class _Freed:
    """A freed block or host block, remembered for later reports (described lazily)."""

    __slots__ = ("block", "free_site", "limit", "ptr")

    def __init__(self, ptr: int, limit: int, block: Any, free_site: Site | None) -> None:
        self.ptr = ptr
        self.limit = limit
        self.block = block
        self.free_site = free_site

    @property
    def description(self) -> str:
        return self.block.describe()

    @property
    def alloc_site(self) -> Site | None:
        extra = self.block.extra
        return None if extra is None else extra.get("site")


class Sanitizer:
    """Checks and reports for one runtime. See the module docstring for the findings."""

    def __init__(self, mode: str = "report", *, output: TextIO | str | None = "stderr",
                 quarantine_bytes: int = 0, initcheck: bool = True, history: int = 4096,
                 record_sites: bool = True, site_depth: int = 8, leaks: bool = True,
                 print_limit: int = 100) -> None:
        self.mode = mode
        self.output = output
        #: print at most this many reports (compute-sanitizer's --print-limit); all are kept
        self.print_limit = int(print_limit)
        self.quarantine_bytes = int(quarantine_bytes)
        self.initcheck = initcheck
        self.record_sites = record_sites
        self.site_depth = site_depth
        #: report blocks still live at reset_device / finalize (tools with a leak check of
        #: their own turn this off)
        self.leak_check = leaks
        self.reports: list[Report] = []
        self.lock = threading.RLock()
        self._history = history
        self._freed: OrderedDict[int, _Freed] = OrderedDict()
        self._quarantine: deque = deque()
        self._quarantined = 0
        self.runtime = None

    def __repr__(self) -> str:
        return f"Sanitizer({self.mode!r}, {self.summary()})"

    @property
    def mode(self) -> str:
        """``"off"``, ``"report"`` or ``"strict"``; may be changed at any time."""
        return self._mode

    @mode.setter
    def mode(self, mode: str) -> None:
        if mode not in MODES:
            raise InvalidArgument(f"sanitizer mode {mode!r} is not one of {MODES}")
        self._mode = mode
        #: plain attributes: read on every free and access
        self.on = mode != "off"
        self.strict = mode == "strict"

    @classmethod
    def make(cls, spec: Any) -> Sanitizer:
        """A sanitizer from ``None``/``"report"``/``"strict"``/``"off"``, a dict of keyword
        arguments (``{"mode": "strict", "quarantine_bytes": 1 << 26}``) or an instance.

        Raises:
            InvalidArgument: an unknown mode or key.
        """
        if isinstance(spec, Sanitizer):
            return spec
        if spec is None:
            return cls()
        if isinstance(spec, bool):
            return cls("report" if spec else "off")
        if isinstance(spec, str):
            return cls(spec)
        if isinstance(spec, dict):
            try:
                return cls(**spec)
            except TypeError as e:
                raise InvalidArgument(f"bad sanitizer config {spec!r}: {e}") from None
        raise InvalidArgument(f"sanitizer must be a mode, a dict or a Sanitizer, got {spec!r}")

    def attach(self, runtime) -> None:
        """Bind to ``runtime``: record allocation sites, flush the quarantine on pressure."""
        self.runtime = runtime
        if self.on and self.record_sites:
            runtime.set_record_sites(True)
            runtime.host.record_sites = True
        if self.on:
            runtime.host.on_forget = self._forget_buffer
        if self.on and self.quarantine_bytes:
            runtime.add_interceptor(self._relieve)

    def capture(self) -> Site:
        return capture_site(self.site_depth)

    # -- reports -------------------------------------------------------------------------------

    def summary(self) -> str:
        """``ERROR SUMMARY: 2 errors, 1 warning (double-free: 1, ...)``."""
        with self.lock:
            counts = Counter(r.kind for r in self.reports)
            errors = sum(n for k, n in counts.items() if KINDS[k] == "error")
        warnings = sum(counts.values()) - errors
        detail = ", ".join(f"{k}: {n}" for k, n in sorted(counts.items()))
        text = (f"ERROR SUMMARY: {errors} error{'s' * (errors != 1)}, "
                f"{warnings} warning{'s' * (warnings != 1)}")
        return f"{text} ({detail})" if detail else text

    def counts(self) -> Counter:
        """Findings by kind."""
        with self.lock:
            return Counter(r.kind for r in self.reports)

    def clear(self) -> list[Report]:
        """Forget the findings so far; the forgotten ones."""
        with self.lock:
            old, self.reports = self.reports, []
            return old

    def _report(self, kind: str, call: str, address: int, size: int, where: str, *,
                write: bool | None = None, region: Any = None, freed: _Freed | None = None,
                fail: bool = True) -> Report:
        report = Report(kind, call, address, size, where, write,
                        block=region.describe() if region is not None else None,
                        call_site=self.capture() if self.record_sites else None,
                        alloc_site=(region.site() if region is not None else
                                    freed.alloc_site if freed is not None else None),
                        free_site=freed.free_site if freed is not None else None)
        runtime = self.runtime
        if runtime is not None:
            op = runtime.streams.running()
            if op is not None:
                report.queued_site = op.site
        with self.lock:
            self.reports.append(report)
            count = len(self.reports)
        out = sys.stderr if self.output == "stderr" else self.output
        if out is not None and count <= self.print_limit:
            print(report.format(), file=out)
            if count == self.print_limit:
                print(f"========= print limit of {self.print_limit} reports reached; the rest "
                      f"are kept in the sanitizer's reports", file=out)
        if fail and self.strict and report.severity == "error":
            raise SanitizerError(f"sanitizer: {report.kind} in {report.call}: {report.where}",
                                 report)
        return report

    # -- where an address is ----------------------------------------------------------------

    def _freed_at(self, addr: int) -> _Freed | None:
        with self.lock:
            for entry in reversed(self._freed.values()):
                if entry.ptr <= addr < entry.ptr + max(entry.limit, 1):
                    return entry
        return None

    def _nearest(self, addr: int) -> str:
        """``96 bytes past the end of the 100-byte block at 0x...`` (or nothing near)."""
        runtime = self.runtime
        regions = []
        if runtime is not None:
            for device in runtime.devices():
                with device.lock:
                    ptrs = device._ptrs
                    i = ptrs.bisect_right(addr)
                    for j in (i - 1, i):
                        if 0 <= j < len(ptrs):
                            regions.append(device._blocks[ptrs[j]])
            regions.extend(runtime.host.blocks())
            regions.extend(runtime.host.registrations())
        best = None
        for r in regions:
            distance = addr - (r.ptr + r.size) if addr >= r.ptr else r.ptr - addr
            if best is None or distance < best[0]:
                best = (distance, r)
        if best is None:
            return f"{addr:#x} is not near any live allocation"
        distance, r = best
        if addr >= r.ptr + r.size:
            return (f"{addr:#x} is {addr - r.ptr - r.size} bytes past the end of the "
                    f"{r.describe()}")
        if addr >= r.ptr:
            return f"{addr:#x} is {addr - r.ptr} bytes inside the {r.describe()}"
        return f"{addr:#x} is {r.ptr - addr} bytes before the {r.describe()}"

    # -- access findings (called by the data plane) ---------------------------------------------

    def quarantined(self, region: Any) -> bool:
        if region.host:
            return False
        extra = region.block.extra
        return bool(extra) and "quarantined" in extra

    def bad_address(self, call: str, addr: int, count: int, write: bool) -> None:
        if not self.on:
            return
        freed = self._freed_at(addr)
        if freed is not None:
            how = ("which user code no longer holds" if freed.free_site is None
                   and getattr(freed.block, "kind", None) else "which was freed")
            where = f"{addr:#x} is {addr - freed.ptr} bytes inside the {freed.description}, {how}"
            self._report("use-after-free", call, addr, count, where, write=write, freed=freed)
        else:
            self._report("invalid-address", call, addr, count, self._nearest(addr), write=write)

    def out_of_bounds(self, call: str, addr: int, count: int, write: bool, region: Any) -> None:
        if not self.on:
            return
        end = addr + count
        where = (f"{end - region.base - region.size} bytes past the end of the "
                 f"{region.describe()} (footprint {region.limit}; the access ends "
                 f"{end - region.base - region.limit} bytes past it)")
        self._report("out-of-bounds", call, addr, count, where, write=write, region=region)

    def padding_access(self, call: str, addr: int, count: int, write: bool,
                       region: Any) -> None:
        end = addr + count - region.base
        where = (f"{end - region.size} bytes past the end of the {region.describe()}, inside "
                 f"its hidden padding (legal on hardware, a latent bug)")
        self._report("padding-access", call, addr, count, where, write=write, region=region)

    def readonly_write(self, call: str, addr: int, count: int, region: Any) -> None:
        where = f"{addr:#x} is in the {region.describe()}, allocated USER_SPACE_READONLY"
        self._report("readonly-write", call, addr, count, where, write=True, region=region)

    def uninitialized_read(self, call: str, addr: int, count: int, region: Any,
                           gap: tuple[int, int]) -> None:
        start, end = gap
        where = (f"bytes [{start}, {end}) of the {region.describe()} were never written "
                 f"(first of possibly several gaps)")
        self._report("uninitialized-read", call, addr, count, where, write=False, region=region)

    # -- frees ---------------------------------------------------------------------------------

    def free(self, device: Any, ptr: Any, call: str = "aclrtFree") -> Any:
        """Free ``ptr`` on ``device`` with the checks; the released block (or None if held).

        Raises:
            InvalidPointer: as Device.free (after an invalid/double free report).
            SanitizerError: strict mode, free with pending work.
        """
        block = device.block(ptr) if isinstance(ptr, int) else None
        if block is not None and block.extra and "quarantined" in block.extra:
            freed = self._freed.get(ptr)
            self._report("double-free", call, ptr, 0,
                         f"{ptr:#x} is the {block.describe()}, already freed", freed=freed,
                         fail=False)
            raise InvalidPointer(f"{ptr:#x} was already freed")
        if block is None:
            try:
                return device.free(ptr)
            except InvalidPointer:
                self._bad_free(call, ptr)
                raise
        pending = self.runtime.streams.pending_on(block.ptr, block.end)
        if pending:
            where = (f"the {block.describe()} is still used by queued work: "
                     + "; ".join(op.describe() for op in pending))
            self._report("free-with-pending-work", call, ptr, block.size, where,
                         region=_BlockView(block))
        free_site = self.capture() if self.record_sites else None
        if self.quarantine_bytes:
            with self.lock:
                block.extra = block.extra or {}
                block.extra["quarantined"] = True
                self._quarantine.append((device, block))
                self._quarantined += block.footprint
                self._remember(block.ptr, block.footprint, block, free_site)
                while self._quarantined > self.quarantine_bytes and self._quarantine:
                    self._release_oldest()
            return None
        released = device.free(ptr)
        self._remember(block.ptr, block.footprint, block, free_site)
        return released

    def free_host(self, host: Any, ptr: Any, call: str = "aclrtFreeHost") -> Any:
        """As :meth:`free` for aclrtMallocHost blocks."""
        try:
            block = host.free_host(ptr)
        except InvalidPointer:
            self._bad_free(call, ptr)
            raise
        self._remember(block.ptr, block.footprint, block,
                       self.capture() if self.record_sites else None)
        return block

    def _bad_free(self, call: str, ptr: Any) -> None:
        if not isinstance(ptr, int) or isinstance(ptr, bool) or ptr <= 0:
            return
        freed = self._freed.get(ptr)
        if freed is not None:
            self._report("double-free", call, ptr, 0, f"{ptr:#x} is the {freed.description}, "
                         f"already freed", freed=freed, fail=False)
        else:
            self._report("invalid-free", call, ptr, 0, self._nearest(ptr), fail=False)

    def _remember(self, ptr: int, limit: int, block: Any, free_site: Site | None) -> None:
        with self.lock:
            freed = self._freed
            freed.pop(ptr, None)
            freed[ptr] = _Freed(ptr, limit, block, free_site)
            if len(freed) > self._history:
                freed.popitem(last=False)

    def _forget_buffer(self, registration: Any) -> None:
        """A registered host buffer that user code let go of counts as freed (no free site)."""
        registration.obj = None
        self._remember(registration.ptr, registration.size, registration, None)

    def _release_oldest(self) -> None:
        device, block = self._quarantine.popleft()
        self._quarantined -= block.footprint
        if device.block(block.ptr) is block:
            device.free(block.ptr)

    def flush_quarantine(self, device: Any = None) -> int:
        """Really release quarantined blocks (of ``device``, or all); how many."""
        with self.lock:
            keep = deque()
            released = 0
            while self._quarantine:
                dev, block = self._quarantine.popleft()
                if device is None or dev is device:
                    self._quarantined -= block.footprint
                    if dev.block(block.ptr) is block:
                        dev.free(block.ptr)
                    released += 1
                else:
                    keep.append((dev, block))
            self._quarantine = keep
            return released

    def _relieve(self, request: Any) -> None:
        """Interceptor: release the device's quarantine when a malloc might not fit."""
        if not self._quarantine:
            return
        device = self.runtime.device(request.device_id)
        if device._main.largest_free_run() < request.size + (4 << 20):
            self.flush_quarantine(device)
        return

    # -- leaks ---------------------------------------------------------------------------------

    def forget_device(self, device: Any) -> None:
        """Drop quarantined blocks of a device being reset (they are not leaks)."""
        with self.lock:
            self._quarantine = deque(q for q in self._quarantine if q[0] is not device)
            self._quarantined = sum(b.footprint for _, b in self._quarantine)

    def leaks(self, call: str, blocks: list) -> None:
        """Report each block still live at ``call`` (reset_device, finalize)."""
        if not (self.on and self.leak_check):
            return
        for block in blocks:
            if block.extra and "quarantined" in block.extra:
                continue
            self._report("leak", call, block.ptr, block.size,
                         f"the {block.describe()} was never freed", region=_BlockView(block),
                         fail=False)


class _BlockView:
    """Just enough of a region for a report about a device or host block."""

    __slots__ = ("block",)

    def __init__(self, block: Any) -> None:
        self.block = block

    def describe(self) -> str:
        return self.block.describe()

    def site(self) -> Site | None:
        extra = self.block.extra
        return None if extra is None else extra.get("site")


def _config_sanitizer(kwargs: dict, value: Any) -> None:
    Sanitizer.make(value)
    kwargs["sanitizer"] = value


CONFIG_KEYS["sanitizer"] = _config_sanitizer
