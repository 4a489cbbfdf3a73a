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
  blocks reserved so a stale pointer is not silently reused by a later malloc), or to a
  virtual range after aclrtUnmapMem;
* ``invalid-address`` [error]: an access where nothing was ever allocated or registered;
* ``out-of-bounds`` [error]: an access past a block's footprint (or past a run of mappings);
* ``padding-access`` [warning]: past the requested size but inside the footprint (the hidden
  padding that the rounding rule adds, or the page rounding beyond it): legal on hardware, a
  latent bug;
* ``uninitialized-read`` [error]: a read of bytes never written (initcheck, per run);
* ``readonly-write`` [error]: a write to ACL_MEM_ACCESS_USER_SPACE_READONLY memory
  (DECISION: reported even for host copies, which the runtime lets through);
* ``free-with-pending-work`` [error]: free while queued async work still targets the block;
* ``wrong-memcpy-kind`` [warning]: a copy whose kind contradicts its pointers (a host-to-device
  copy passed as DEVICE_TO_HOST); DECISION: a warning, not an error, since the runtime copies
  by address and the copy works (strict mode does not fail it);
* ``leak`` [error, never fails a call]: blocks live at reset_device / finalize.

Reports print in a compute-sanitizer-like form to ``output`` (``"stderr"``, the default,
``"stdout"``, a file-like object, or None to keep them quiet) and stay in
:attr:`Sanitizer.reports`; :meth:`Sanitizer.summary` counts them.

The quarantine: a freed block leaves the live blocks at once (aclrtCheckMemType, block
lookups, aclrtGetMemUsageInfo and observers see it freed), but the oldest ones are really
released only when the quarantine holds more than ``quarantine_bytes``, or when a malloc on
the device does not fit otherwise (the device takes the quarantined memory back for that
malloc; if it fails even so, the quarantine is left as it was). A quarantined block counts
as free in aclrtGetMemInfo (the program freed it, and a malloc that needs it gets it); only
its addresses stay out of reuse (see :meth:`Device.hold`).

Locks (DECISION, one order for the whole sanitizer): :attr:`Sanitizer.lock` is innermost.
Code holding it never calls into a device, the streams or host memory; a device's lock may
be held when it is taken (the quarantine's interceptor runs under the device lock). So the
quarantine picks the blocks to release under the sanitizer's lock and releases them on the
device after dropping it.

Configure with ``Runtime(sanitizer="strict")``, ``Runtime(sanitizer=Sanitizer(...))`` or the
aclInit JSON: ``{"memsim": {"sanitizer": "strict"}}`` or
``{"memsim": {"sanitizer": {"mode": "report", "quarantine_bytes": 67108864}}}``.

Size: over 600 lines, on purpose: every check reads the same freed-block history and
quarantine under one lock; the report text lives in reports.py and the option checks in
options.py.
"""

from __future__ import annotations

import sys
import threading
from collections import Counter, OrderedDict, deque
from collections.abc import Callable
from typing import Any, TextIO, cast

from sortedcontainers import SortedDict

from ..data.host import HostBlock
from ..data.plane import overrun
from ..memory.args import as_ptr
from ..memory.errors import AclError, InvalidArgument, InvalidPointer, SanitizerError
from ..memory.sites import Site, capture_site, site_of
from ..runtime.config import register_config_key
from ..runtime.hooks import register_checker
from .options import OPTIONS, check_flag, check_number, check_output, check_size
from .reports import KINDS, MODES, Report, holds_memory, plural_bytes

__all__ = ["Sanitizer", "SanitizerError"]


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
        return cast("str", self.block.describe())

    @property
    def alloc_site(self) -> Site | None:
        return site_of(self.block)


#: How far a block may be from a bad address and still be named as the nearest one.
_NEAR = 1 << 30

class Sanitizer:
    """Checks and reports for one runtime. See the module docstring for the findings."""

    def __init__(self, mode: str = "report", *, output: TextIO | str | None = "stderr",
                 quarantine_bytes: int = 0, initcheck: bool = True, history: int = 4096,
                 record_sites: bool = True, site_depth: int = 8, leaks: bool = True,
                 print_limit: int = 100) -> None:
        self.mode = mode
        #: where reports print: a file-like object, "stderr", "stdout" or None (nowhere)
        self.output = check_output(output)
        #: print at most this many reports (compute-sanitizer's --print-limit); all are kept
        self.print_limit = check_number(print_limit, "print_limit", 0)
        #: bytes, or text such as "64MiB"
        self.quarantine_bytes = check_size(quarantine_bytes, "quarantine_bytes")
        self.initcheck = check_flag(initcheck, "initcheck")
        self.record_sites = check_flag(record_sites, "record_sites")
        self.site_depth = check_number(site_depth, "site_depth", 1)
        #: report blocks still live at reset_device / finalize (tools with a leak check of
        #: their own turn this off)
        self.leak_check = check_flag(leaks, "leaks")
        #: called as ``leak_sink(call, leaked)`` with everything still live at each
        #: reset_device / finalize (blocks, host blocks, physical and compute handles),
        #: whatever ``leaks`` says: how a tool with a leak check of its own sees them all
        self.leak_sink: Callable[[str, list[Any]], None] | None = None
        self.reports: list[Report] = []
        #: copies through unregistered host memory (legal; kept, at most ``history``)
        self.notes: list[Report] = []
        # Innermost lock: never call a device, the streams or host memory while holding it
        # (see "Locks" in the module docstring).
        self.lock = threading.RLock()
        self._history = check_number(history, "history", 0)
        #: freed blocks by start, oldest first (at most ``history``)
        self._freed: OrderedDict[int, _Freed] = OrderedDict()
        # An index of where freed blocks lie, for _freed_at: start -> (end, entry), disjoint
        # pieces, the newest freed block on top where freed ranges overlap (a freed address
        # was reused, then freed again). Brought up to date lazily, at the next lookup, so a
        # free costs two list appends: _fresh (remembered since) and _stale (dropped since).
        # None: rebuild from _freed (more than ``history`` frees without a lookup).
        self._pieces: SortedDict[Any, Any] | None = None  # made at the first lookup
        self._fresh: list[_Freed] = []
        self._stale: list[_Freed] = []
        self._quarantine: deque[Any] = deque()
        self._quarantined = 0
        self.runtime: Any = None

    def __repr__(self) -> str:
        return f"Sanitizer({self.mode!r}, {self.summary()})"

    @property
    def mode(self) -> str:
        """``"off"``, ``"report"`` or ``"strict"``; may be changed at any time."""
        return self._mode

    @mode.setter
    def mode(self, mode: str) -> None:
        if not isinstance(mode, str) or mode not in MODES:
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
            unknown = [k for k in spec if k not in OPTIONS]
            if unknown:
                raise InvalidArgument(f"unknown sanitizer option(s) {unknown!r}; known: "
                                      f"{list(OPTIONS)}")
            return cls(**spec)
        raise InvalidArgument(f"sanitizer must be a mode, a dict or a Sanitizer, got {spec!r}")

    def attach(self, runtime: Any) -> None:
        """Bind to ``runtime``: record allocation sites, flush the quarantine on pressure."""
        self.runtime = runtime
        if self.on and self.record_sites:
            runtime.set_record_sites(True)
            runtime.host.record_sites = True
        if self.on:
            runtime.host.on_forget = self._forget_buffer
        if self.on and self.quarantine_bytes:
            runtime.add_reclaim_listener(self._reclaimed)

    def detach(self, runtime: Any) -> None:
        """Undo :meth:`attach` (a runtime that takes another sanitizer)."""
        if self._reclaimed in runtime.reclaim_listeners:
            runtime.remove_reclaim_listener(self._reclaimed)
        if runtime.host.on_forget == self._forget_buffer:
            runtime.host.on_forget = None

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

    def counts(self) -> Counter[Any]:
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
        out = self.output
        if isinstance(out, str):
            out = sys.stderr if out == "stderr" else sys.stdout
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
        """The most recently freed block that held ``addr``, if still in the history.

        O(log h) in the history, after bringing the index up to date (amortised O(log h) per
        free since the last lookup). A freed range overwritten by a newer freed block stays
        hidden there after the newer one leaves the history.
        """
        with self.lock:
            pieces = self._index()
            i = pieces.bisect_right(addr)
            if i:
                end, entry = pieces.peekitem(i - 1)[1]
                if addr < end:
                    return cast("_Freed | None", entry)
        return None

    def _index(self) -> SortedDict[Any, Any]:
        """The freed-range index, brought up to date (call with the lock held)."""
        pieces = self._pieces
        if pieces is None:
            pieces = self._pieces = SortedDict()
            fresh = list(self._freed.values())
        else:
            for entry in self._stale:
                span = entry.ptr + max(entry.limit, 1)
                for start in list(pieces.irange(entry.ptr, span, inclusive=(True, False))):
                    if pieces[start][1] is entry:
                        del pieces[start]
            fresh = self._fresh
        freed = self._freed
        for entry in fresh:
            if freed.get(entry.ptr) is entry:
                _paint(pieces, entry.ptr, entry.ptr + max(entry.limit, 1), entry)
        self._fresh, self._stale = [], []
        return pieces

    def _nearest(self, addr: int) -> str:
        """``96 bytes past the end of the 100-byte block at 0x...`` (or nothing near)."""
        runtime = self.runtime
        space = None if runtime is None else runtime.vmm.space
        reservation = None if space is None else space.reservation_at(addr)
        if space is not None and reservation is not None:
            mapping = space.mapping_at(addr)
            if mapping is not None:
                return (f"{addr:#x} is in the {mapping.describe()}, which its device may not "
                        f"access (mapped by aclrtMemMapNoAccess; aclrtMemSetAccess grants it)")
            return (f"{addr:#x} is {plural_bytes(addr - reservation.ptr)} inside the "
                    f"{reservation.size}-byte reserved range at {reservation.ptr:#x}, where "
                    f"nothing is mapped")
        regions: list[Any] = []
        # Only the memory the address points into: a device's window, or host memory
        # (aclrtMallocHost blocks sit at real process addresses, anywhere).
        if runtime is not None and addr >= runtime.host_limit:
            device = runtime.device_holding(addr)
            if device is not None:
                regions.extend(device.neighbours(addr))
        if runtime is not None:
            regions.extend(runtime.host.blocks())
            if addr < runtime.host_limit:
                regions.extend(runtime.host.registrations())
        best = None
        for r in regions:
            distance = addr - (r.ptr + r.size) if addr >= r.ptr else r.ptr - addr
            if best is None or distance < best[0]:
                best = (distance, r)
        # DECISION: a block more than 1 GiB away is no clue to what the address meant.
        if best is None or best[0] > _NEAR:
            return f"{addr:#x} is not near any live allocation"
        distance, r = best
        if addr >= r.ptr + r.size:
            return (f"{addr:#x} is {plural_bytes(addr - r.ptr - r.size)} past the end of the "
                    f"{r.describe()}")
        if addr >= r.ptr:
            return f"{addr:#x} is {plural_bytes(addr - r.ptr)} inside the {r.describe()}"
        return f"{addr:#x} is {plural_bytes(r.ptr - addr)} before the {r.describe()}"

    # -- access findings (called by the data plane) ---------------------------------------------

    def bad_address(self, call: str, addr: int, count: int, write: bool) -> None:
        if not self.on:
            return
        freed = self._freed_at(addr)
        if freed is not None:
            how = getattr(freed.block, "gone", None) or (
                "which user code no longer holds" if freed.free_site is None
                and getattr(freed.block, "kind", None) else "which was freed")
            where = (f"{addr:#x} is {plural_bytes(addr - freed.ptr)} inside the "
                     f"{freed.description}, "
                     f"{how}")
            self._report("use-after-free", call, addr, count, where, write=write, freed=freed)
        else:
            self._report("invalid-address", call, addr, count, self._nearest(addr), write=write)

    def out_of_bounds(self, call: str, addr: int, count: int, write: bool, region: Any) -> None:
        if not self.on:
            return
        # the wording of the call's own error message (get_recent_err_msg), from one function
        where = overrun(region, addr - region.base, count)
        self._report("out-of-bounds", call, addr, count, where, write=write, region=region)

    def padding_access(self, call: str, addr: int, count: int, write: bool,
                       region: Any) -> None:
        end = addr + count - region.base
        block = getattr(region, "block", None)
        if block is not None and end > block.rule_size:
            # Block.page_rounding: the footprint beyond the rule size, not the rule's padding.
            inside = f"its page rounding (past the {block.rule_size}-byte rule size)"
        elif block is not None:
            inside = "the hidden padding that the rounding rule adds"
        else:
            inside = f"its hidden padding (the footprint is {region.limit} bytes)"
        where = (f"{plural_bytes(end - region.size)} past the end of the {region.describe()}, into "
                 f"{inside} (legal on hardware, a latent bug)")
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

    def wrong_memory(self, call: str, addr: int, count: int, write: bool, region: Any,
                     why: str) -> None:
        """An operator or model given memory of the wrong kind (host memory, another
        device's block) where device memory of the current device is needed."""
        if not self.on:
            return
        where = f"{addr:#x} is in the {region.describe()}: {why}"
        self._report("wrong-memory", call, addr, count, where, write=write, region=region)

    def media_overflow(self, call: str, addr: int, count: int, write: bool, region: Any,
                       why: str) -> None:
        """A DVPP picture whose declared size runs past its buffer: the access the hardware
        would have made, reported; the call fails with the vendor's code (not the strict
        sanitizer's), so the report never raises."""
        if not self.on:
            return
        self._report("media-overflow", call, addr, count, why, write=write, region=region,
                     fail=False)

    def wrong_memcpy_kind(self, call: str, dst: int, src: int, count: int, kind: Any,
                          actual: Any, src_region: Any, dst_region: Any) -> None:
        """A copy passed ``kind`` whose pointers make ``actual`` (the copy went by the
        addresses, as the runtime's does): both ends, and what each pointer is."""
        if not self.on:
            return
        where = (f"kind {kind.name} ({int(kind)}), but src {src:#x} is "
                 f"{_side(src_region)} memory (the {src_region.describe()}) and dst "
                 f"{dst:#x} is {_side(dst_region)} memory (the {dst_region.describe()}): "
                 f"the pointers make {actual.name} ({int(actual)}); the copy went by the "
                 f"addresses, as the runtime's does")
        device = dst_region if not dst_region.host else src_region
        self._report("wrong-memcpy-kind", call, dst, count, where, write=True,
                     region=device if not device.host else None)

    def unchecked_host(self, call: str, addr: int, count: int, write: bool) -> None:
        """A copy through host memory the simulator did not hand out (a raw address the
        process has mapped): noted in :attr:`notes`, not reported, since it is legal; its
        bounds cannot be checked."""
        note = Report("unchecked-host-memory", call, addr, count,
                      f"{addr:#x} is unregistered host memory mapped by the process; the "
                      f"simulator cannot check the bounds of the buffer it belongs to",
                      write)
        with self.lock:
            self.notes.append(note)
            if len(self.notes) > self._history:
                del self.notes[0]

    def ipc_close_order(self, call: str, addr: int, size: int, where: str, *,
                        fail: bool = True) -> None:
        """The exporter of IPC memory closed its key or freed the block while an importer
        still had it open (11-07, aclrtIpcMemClose: every importer closes first). ``fail``:
        strict mode refuses the call (false for a free, reported after it happened)."""
        if self.on:
            self._report("ipc-close-order", call, addr, size, where, fail=fail)

    def kernel_error(self, call: str, where: str) -> None:
        """A kernel or model function that raised (or returned the wrong outputs) when its
        queued work ran; ``where`` holds its traceback. The call then fails with its code."""
        if not self.on:
            return
        self._report("kernel-error", call, 0, 0, where, fail=False)

    # -- frees ---------------------------------------------------------------------------------

    def free(self, device: Any, ptr: Any, call: str = "aclrtFree", block: Any = False,
             skip: int = 0) -> Any:
        """Free ``ptr`` on ``device`` with the checks; the released block (or None if held).

        ``block``: the live block at ``ptr`` (or None) when the caller has looked it up.
        ``skip``: how many frames above the caller are the simulator's (the free site's walk
        jumps over them, see :func:`capture_site`).
        O(log n) as Device.free, plus a stack capture (the free site).

        Raises:
            InvalidArgument, InvalidArgumentType: NULL or not an int (as Device.free).
            InvalidPointer: as Device.free (after an invalid/double free report).
            SanitizerError: strict mode, free with pending work.
        """
        if block is False:
            ptr = as_ptr(ptr)
            block = device.block(ptr)
        if block is not None and self.runtime.streams.pending:
            self._check_pending(call, block)
        # the walk starts above this frame and the ones the caller named
        free_site = capture_site(self.site_depth, 1 + skip) if self.record_sites else None
        try:
            if not self.quarantine_bytes:
                block = device.free(ptr)
                self._remember(block.ptr, block.footprint, block, free_site)
                return block
            # Freed for the program at once; the memory stays held until it leaves the
            # quarantine (Device.hold).
            block = device.hold(ptr)
        except InvalidPointer:
            self._bad_free(call, ptr)
            raise
        block.extra = block.extra or {}
        block.extra["quarantined"] = True
        with self.lock:
            self._remember(block.ptr, block.footprint, block, free_site)
            self._quarantine.append((device, block))
            self._quarantined += block.footprint
            over = []
            while self._quarantined > self.quarantine_bytes and self._quarantine:
                over.append(self._quarantine.popleft())
                self._quarantined -= over[-1][1].footprint
        _release(over)
        return None

    def _check_pending(self, call: str, block: Any) -> None:
        """Report a free of ``block`` while queued work still uses it (strict: refuse it)."""
        pending = self.runtime.streams.pending_on(block.ptr, block.end)
        if pending:
            where = (f"the {block.describe()} is still used by queued work: "
                     + "; ".join(op.describe() for op in pending))
            self._report("free-with-pending-work", call, block.ptr, block.size, where,
                         region=_BlockView(block))

    def free_host(self, host: Any, ptr: Any, call: str = "aclrtFreeHost") -> Any:
        """As :meth:`free` for aclrtMallocHost blocks.

        Raises:
            InvalidArgument, InvalidArgumentType: NULL or not an int.
            InvalidPointer: not a live host block's start (after an invalid/double free report).
            SanitizerError: strict mode, free with pending work (nothing changes).
        """
        ptr = as_ptr(ptr)
        region = host.region_at(ptr)
        if isinstance(region, HostBlock) and region.ptr == ptr:
            self._check_pending(call, region)
        try:
            block = host.free_host(ptr)
        except InvalidPointer:
            self._bad_free(call, ptr)
            raise
        self._remember(block.ptr, block.footprint, block,
                       self.capture() if self.record_sites else None)
        return block

    def _bad_free(self, call: str, ptr: Any) -> None:
        try:
            ptr = as_ptr(ptr)
        except AclError:
            return  # NULL or not an int: the caller's error says so; nothing to report
        with self.lock:
            freed = self._freed.get(ptr)
        if freed is not None:
            self._report("double-free", call, ptr, 0, f"{ptr:#x} is the {freed.description}, "
                         f"already freed", freed=freed, fail=False)
        else:
            # An interior pointer names its block: the report carries the block's allocation
            # site, or, inside a freed block, its allocation and free sites.
            region = self._holder(ptr)
            inside = self._freed_at(ptr) if region is None else None
            self._report("invalid-free", call, ptr, 0, self._nearest(ptr), region=region,
                         freed=inside, fail=False)

    def _holder(self, addr: int) -> Any:
        """The live device block or host region holding ``addr`` (for a report), or None."""
        runtime = self.runtime
        return None if runtime is None else runtime.data.region_at(addr)

    def _remember(self, ptr: int, limit: int, block: Any, free_site: Site | None) -> None:
        """Keep a freed block for later reports. O(1): the index catches up at lookup."""
        with self.lock:
            freed = self._freed
            entry = _Freed(ptr, limit, block, free_site)
            old = freed.pop(ptr, None)
            freed[ptr] = entry
            evicted = freed.popitem(last=False)[1] if len(freed) > self._history else None
            if self._pieces is None:
                return
            if len(self._fresh) > self._history:
                # Many frees and no lookup: rebuilding at the next lookup is cheaper.
                self._pieces, self._fresh, self._stale = None, [], []
                return
            self._fresh.append(entry)
            if old is not None:
                self._stale.append(old)
            if evicted is not None:
                self._stale.append(evicted)

    def unmapped(self, mapping: Any) -> None:
        """A mapping was removed (aclrtUnmapMem): a later access to its range is reported as
        use after free, "which was unmapped", with its map and unmap sites."""
        self._remember(mapping.ptr, mapping.size, mapping,
                       self.capture() if self.record_sites else None)

    def _forget_buffer(self, registration: Any) -> None:
        """A registered host buffer that user code let go of counts as freed (no free site)."""
        registration.obj = None
        self._remember(registration.ptr, registration.size, registration, None)

    def flush_quarantine(self, device: Any = None) -> int:
        """Really release quarantined blocks (of ``device``, or all); how many."""
        with self.lock:
            keep: deque[Any] = deque()
            out: list[Any] = []
            for entry in self._quarantine:
                (out if device is None or entry[0] is device else keep).append(entry)
            self._quarantine = keep
            self._quarantined -= sum(block.footprint for _, block in out)
        _release(out)
        return len(out)

    def _reclaimed(self, device: Any, blocks: list[Any]) -> None:
        """A malloc took back quarantined blocks (see :meth:`Device.hold`): forget them.

        Called under the device's lock; takes only the sanitizer's (innermost) lock.
        """
        taken = {id(b) for b in blocks}
        with self.lock:
            self._quarantine = deque(q for q in self._quarantine if id(q[1]) not in taken)
            self._quarantined = sum(b.footprint for _, b in self._quarantine)

    # -- leaks ---------------------------------------------------------------------------------

    def forget_device(self, device: Any) -> None:
        """Drop quarantined blocks of a device being reset (they are not leaks)."""
        with self.lock:
            self._quarantine = deque(q for q in self._quarantine if q[0] is not device)
            self._quarantined = sum(b.footprint for _, b in self._quarantine)

    def leaks(self, call: str, blocks: list[Any]) -> None:
        """Report each block (or handle) still live at ``call`` (reset_device, finalize): a
        block with its bytes, a handle with none (:func:`~.reports.holds_memory`)."""
        sink = self.leak_sink
        if sink is not None and blocks:
            sink(call, blocks)
        if not (self.on and self.leak_check):
            return
        for block in blocks:
            if holds_memory(block):
                size, where = block.size, f"the {block.describe()} was never freed"
            else:
                size, where = 0, f"the {block.describe()} was never destroyed"
            self._report("leak", call, block.ptr, size, where, region=_BlockView(block),
                         fail=False)


class _BlockView:
    """Just enough of a region for a report about a device or host block."""

    __slots__ = ("block",)

    def __init__(self, block: Any) -> None:
        self.block = block

    def describe(self) -> str:
        return cast("str", self.block.describe())

    def site(self) -> Site | None:
        return site_of(self.block)


def _side(region: Any) -> str:
    """``host`` or ``device``, for a region."""
    return "host" if region.host else "device"


def _release(held: list[Any]) -> None:
    """Give quarantined blocks back to their devices (called without the sanitizer's lock)."""
    for device, block in held:
        device.release_held(block)


def _paint(pieces: SortedDict[Any, Any], start: int, end: int, entry: _Freed) -> None:
    """Put ``entry`` on ``[start, end)`` in the disjoint pieces, cutting back what it covers.

    O(log n + k) for k pieces covered.
    """
    i = pieces.bisect_left(start)
    if i:
        before, (stop, old) = pieces.peekitem(i - 1)
        if stop > start:
            pieces[before] = (start, old)
            if stop > end:
                pieces[end] = (stop, old)
    for key in list(pieces.irange(start, end, inclusive=(True, False))):
        stop, old = pieces.pop(key)
        if stop > end:
            pieces[end] = (stop, old)
    pieces[start] = (end, entry)


def _config_sanitizer(kwargs: dict[str, Any], value: Any) -> None:
    Sanitizer.make(value)
    kwargs["sanitizer"] = value


register_config_key("sanitizer", _config_sanitizer)
register_checker(Sanitizer.make)
