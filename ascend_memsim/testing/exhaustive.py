"""Exhaustive fault injection: run a callable once per allocation call, with that call failing.

:func:`exhaustive` first runs ``fn(runtime)`` once to list its allocation calls (the aclrtMalloc
family and aclrtMallocPhysical; by Python stack, and by how many calls that stack had made
before: the third allocation of a loop is a call of its own), then once per call with that
call failing, and reports where the code crashed (an exception other than the expected one)
or leaked (blocks or physical handles left live) instead of handling the error. ``by="site"``
fails only the first call of each stack.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..checks.faults import call_text, count_arg, error_class
from ..memory.device import Block
from ..memory.errors import AclError, InvalidArgument, InvalidArgumentType, OutOfDeviceMemory
from ..memory.physical import PhysicalHandle
from ..memory.rules import Request
from ..memory.sites import Site, capture_site, format_site, site_of
from ..runtime.runtime import Runtime

__all__ = ["exhaustive", "ExhaustiveReport", "SiteOutcome", "BY"]


def _site_key(site: Site) -> tuple:
    return tuple((f.filename, f.lineno, f.name) for f in site)


#: What one run of :func:`exhaustive` fails: each allocation call, or each site's first call.
BY = ("call", "site")


class _CallRecorder:
    """An interceptor that lists the allocation calls as (stack, occurrence), in call order;
    with ``first_only``, only the first call from each stack."""

    def __init__(self, first_only: bool) -> None:
        self.first_only = first_only
        self.counts: dict[tuple, int] = {}
        self.calls: list[tuple[tuple, int, Site, Request]] = []

    def __call__(self, request: Request) -> None:
        site = capture_site()
        key = _site_key(site)
        n = self.counts[key] = self.counts.get(key, 0) + 1
        if n == 1 or not self.first_only:
            self.calls.append((key, n, site, request))


class _FailCall:
    """An interceptor that fails the ``n``-th call from one stack and the ``times - 1`` after
    it (None: every one from the n-th on)."""

    def __init__(self, key: tuple, n: int, error: type[AclError], times: int | None) -> None:
        self.key = key
        self.n = n
        self.error = error
        self.times = times
        self.seen = 0
        self.fired = 0

    def __call__(self, request: Request) -> None:
        if self.times is not None and self.fired >= self.times:
            return
        if _site_key(capture_site()) != self.key:
            return
        self.seen += 1
        if self.seen < self.n:
            return
        self.fired += 1
        raise self.error(f"injected fault (exhaustive mode) at call #{self.seen} from this "
                         f"site: {call_text(request)}")


@dataclass
class SiteOutcome:
    """What the code did when one allocation site failed."""

    site: Site
    request: Request
    #: "handled", "crashed", "leaked" or "not reached"
    outcome: str
    exception: BaseException | None = None
    #: blocks and physical handles left live
    leaked: list[Block | PhysicalHandle] = field(default_factory=list)
    #: which call from the site failed (1: its first)
    occurrence: int = 1

    def describe(self) -> str:
        """The outcome, the failed call, the site and the evidence, several lines."""
        which = "" if self.occurrence == 1 else f" (call #{self.occurrence} from the site)"
        lines = [f"{self.outcome}: {call_text(self.request)}{which} failing at",
                 format_site(self.site, "    ")]
        if self.exception is not None:
            lines.append(f"  raised {type(self.exception).__name__}: {self.exception}")
        for block in self.leaked:
            lines.append(f"  leaked {block.describe()}")
            where = format_site(site_of(block), "      ")
            if where:
                lines.append("    allocated at\n" + where)
        return "\n".join(lines)


@dataclass
class ExhaustiveReport:
    """The outcome of each allocation site of an :func:`exhaustive` run."""

    outcomes: list[SiteOutcome]

    @property
    def failures(self) -> list[SiteOutcome]:
        """The sites where the code crashed or leaked."""
        return [o for o in self.outcomes if o.outcome in ("crashed", "leaked")]

    @property
    def ok(self) -> bool:
        return not self.failures

    def __str__(self) -> str:
        head = (f"{len(self.outcomes)} allocation call(s) failed one at a time: "
                f"{len(self.failures)} crashed or leaked")
        return "\n".join([head, *(o.describe() for o in self.failures)])

    def raise_if_failed(self) -> None:
        """Raise AssertionError listing the failures, if any."""
        if self.failures:
            raise AssertionError(str(self))


def _exception_classes(expected: object) -> tuple[type[BaseException], ...]:
    """``expected`` of :func:`exhaustive` as a tuple of exception classes.

    Raises:
        InvalidArgumentType: not an exception class, nor a tuple or list of them.
    """
    classes = (expected,) if isinstance(expected, type) else expected
    if not (isinstance(classes, (tuple, list)) and all(
            isinstance(c, type) and issubclass(c, BaseException) for c in classes)):
        raise InvalidArgumentType(f"expected={expected!r} is not an exception class or a tuple "
                                  f"of them; write e.g. expected=(MyError, OutOfDeviceMemory)")
    return tuple(classes)


def _live(runtime: Runtime) -> list[Block | PhysicalHandle]:
    """What the program left allocated: device blocks, then physical handles."""
    return [*runtime.blocks(), *runtime.vmm.handles()]


def exhaustive(fn: Callable[[Runtime], object], *, product: str = "A2",
               expected: Sequence[type[BaseException]] | type[BaseException] = (AclError,),
               error: object = OutOfDeviceMemory, times: int | None = 1,
               device: int | None = 0, by: str = "call",
               make_runtime: Callable[[], Runtime] | None = None,
               **overrides: Any) -> ExhaustiveReport:
    """Run ``fn(runtime)`` once per allocation call, with that call failing.

    First ``fn`` runs without faults to list its allocation calls: a site is the user's call
    stack at the allocation (simulator frames left out), and each call from a site counts
    (the third ``malloc`` of a loop is a call of its own). ``by="site"`` lists only the first
    call from each site (fewer runs; a loop is tried once). DECISION: ``"call"`` is the
    default, because code that handles its first allocation failing often mishandles a later
    one (a partly filled list to release); a loop of n allocations costs n runs.

    ``fn`` must finish the fault-free run without raising and without leaving blocks live.
    Then, for each call, a fresh active runtime (product and profile ``overrides``,
    ``device`` set; or ``make_runtime()``) runs ``fn`` with that call failing with ``error``
    (``times`` calls from the site fail, from that one on; None: every one, so a retry from
    the same line fails too). The code *handled* it when ``fn`` returned or raised one
    of ``expected`` (an exception class or a tuple of them) and left no block live; it
    *crashed* when it raised anything else; it *leaked* when blocks were live afterwards
    (listed with their allocation sites); a call the run never reached is *not reached*.

    Raises:
        AssertionError: the fault-free run leaked (nothing to compare against); whatever the
            fault-free run raises propagates.
        InvalidArgument: a bad ``error``, ``times`` or ``by``. InvalidArgumentType: a bad
            ``expected``.
    """
    if by not in BY:
        raise InvalidArgument(f"by={by!r}: write 'call' (each allocation call, the default) or "
                              f"'site' (the first call from each call stack)")
    error_cls = error_class(error)
    if times is not None:
        times = count_arg(times, "times", "write a count >= 1, or None for every call from the "
                                       "site")
    expected = _exception_classes(expected)

    def make() -> Runtime:
        # The report lists leaks itself; the sanitizer need not print them again.
        runtime = (make_runtime() if make_runtime is not None else
                   Runtime(product, **{"sanitizer": {"leaks": False}, **overrides}))
        runtime.set_record_sites(True)
        if make_runtime is None and device is not None:
            runtime.set_device(device)
        return runtime

    recorder = _CallRecorder(first_only=by == "site")
    with make() as runtime:
        runtime.add_interceptor(recorder)
        fn(runtime)
        live = _live(runtime)
        if live:
            raise AssertionError("exhaustive: without faults the callable leaves "
                                 f"{len(live)} block(s) or handle(s) live; it must free what it "
                                 "allocates "
                                 "so that leaks on error paths can be told apart:\n"
                                 + "\n".join(b.describe() for b in live))
    outcomes = []
    for key, occurrence, site, request in recorder.calls:
        failer = _FailCall(key, occurrence, error_cls, times)
        raised: BaseException | None = None
        with make() as runtime:
            runtime.add_interceptor(failer)
            try:
                fn(runtime)
            except Exception as e:  # classifying the code's exception is the job
                raised = e
            leaked = _live(runtime)
        if not failer.fired:
            outcome = "not reached"
        elif raised is not None and not isinstance(raised, expected):
            outcome = "crashed"
        elif leaked:
            outcome = "leaked"
        else:
            outcome = "handled"
        outcomes.append(SiteOutcome(site, request, outcome, raised, leaked, occurrence))
    return ExhaustiveReport(outcomes)

