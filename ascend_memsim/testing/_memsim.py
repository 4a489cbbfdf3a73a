"""The ``memsim`` fixture's machinery: the runtime it makes from the merged settings, the
peak and leak bookkeeping, and the failure texts (:mod:`.plugin` holds the hooks and imports
this module when a test first asks for the fixture, so a pytest run that uses none of it does
not import the simulator).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import _pytest
import pluggy
import pytest

from ..checks.faults import Fault, parse_faults
from ..compute.ops import registered_ops
from ..compute.plane import compute_plane
from ..memory.errors import AclError
from ..memory.profiles import DEFAULT_PRODUCT, Profile, get_profile
from ..memory.sites import Frame, Site, format_site
from ..memory.units import format_bytes, parse_size
from ..runtime.runtime import Runtime
from ._findings import FAIL_ON, failing_findings, findings_text, sanitizer_setting
from ._keys import CALL_FAILED, FAULTS, MARKER_KEYS, STATE, merge_keywords, product_option
from .npu_allocator import runtime_settings

__all__ = ["memsim_runtime", "State", "TOP_SITES"]

#: Allocation sites listed for a test over its peak budget.
TOP_SITES = 5


class _Peak:
    """An observer: footprint bytes live per device, the peak, and per allocation site the
    bytes it held at the peak. O(sites) per new peak."""

    def __init__(self, runtime: Runtime) -> None:
        self.live: dict[int, int] = {}
        self.by_site: dict[int, dict[str, list[int]]] = {}
        self.peak = 0
        self.peak_device = 0
        self.at_peak: dict[str, list[int]] = {}
        self._names: dict[int, tuple[Any, str]] = {}
        for block in runtime.blocks():
            self._add(block.device_id, block, +1)

    def _site(self, block: Any) -> str:
        # Blocks allocated from one stack share its Site: name it once (keyed by identity,
        # the Site held so its id stays its own).
        site = block.alloc_site
        known = self._names.get(id(site))
        if known is not None and known[0] is site:
            return known[1]
        frames = _test_frames(site)
        if not frames:
            name = "(allocation site not recorded)"
        else:
            f = frames[-1]
            name = f"{f.filename}:{f.lineno} in {f.name}"
        self._names[id(site)] = (site, name)
        return name

    def _add(self, device: int, block: Any, sign: int) -> None:
        total = self.live[device] = self.live.get(device, 0) + sign * block.footprint
        sites = self.by_site.setdefault(device, {})
        entry = sites.setdefault(self._site(block), [0, 0])
        entry[0] += sign * block.footprint
        entry[1] += sign
        if total > self.peak:
            self.peak, self.peak_device = total, device
            self.at_peak = {k: list(v) for k, v in sites.items() if v[0] > 0}

    def __call__(self, event: str, device: Any, info: dict) -> None:
        if event == "malloc":
            self._add(device.device_id, info["block"], +1)
        elif event == "free":
            self._add(device.device_id, info["block"], -1)
        elif event == "reset":
            for block in info["blocks"]:
                self._add(device.device_id, block, -1)

    def top_sites(self) -> list[str]:
        rows = sorted(self.at_peak.items(), key=lambda kv: (-kv[1][0], kv[0]))[:TOP_SITES]
        return [f"  {format_bytes(b):>22} in {n} block{'s' * (n != 1)}: {site}"
                for site, (b, n) in rows]


@dataclass
class State:
    """What the hooks need of one test's runtime."""

    runtime: Runtime
    leak_check: bool
    fail_on: str
    max_peak: int | None
    peak: _Peak
    at_reset: list = field(default_factory=list)
    report_mark: int = 0
    before_call: set = field(default_factory=set)
    reset_mark: int = 0
    #: ids of the blocks already reported as the call's leaks
    reported: set = field(default_factory=set)

    def print_findings(self, shown: Sequence[Any] = ()) -> None:
        """Print the test body's sanitizer findings that are not in ``shown`` (the failure's
        own) on stderr, as the sanitizer would have as they happened (it prints nowhere in
        the fixture, so that no finding is printed twice)."""
        sanitizer = getattr(self.runtime, "sanitizer", None)
        if sanitizer is None or sanitizer.output is not None:
            return      # a sanitizer told where to print has printed them
        skip = {id(r) for r in shown}
        for report in sanitizer.reports[self.report_mark:][:sanitizer.print_limit]:
            if id(report) not in skip:
                print(report.format(), file=sys.stderr)

    def mark_call(self) -> None:
        """Before the test body: what is live now is the fixtures', not the body's leaks."""
        self.before_call = {id(b) for b in self.runtime.blocks()}
        self.before_call.update(id(h) for h in _live_handles(self.runtime))
        self.reset_mark = len(self.at_reset)

    def call_problems(self, nodeid: str, checks: Sequence[Any] = ()) -> list[str]:
        """The test body's problems; ``checks`` (of fixtures built on this runtime, such as
        npu_allocator) run first, each giving its problems and giving back what it holds,
        so that it is no device leak."""
        problems = []
        for check in checks:
            problems += check()
        if self.leak_check:
            leaked = [b for b in self.runtime.blocks() if id(b) not in self.before_call]
            discarded = self.at_reset[self.reset_mark:]
            handles = [h for h in _live_handles(self.runtime) if id(h) not in self.before_call]
            self.reported.update(id(b) for b in leaked + discarded + handles)
            if leaked or discarded or handles:
                problems.append(_leak_report(nodeid, leaked, discarded, handles))
        sanitizer = getattr(self.runtime, "sanitizer", None)
        if sanitizer is not None:
            failing = failing_findings(sanitizer.reports[self.report_mark:], self.fail_on)
            # each finding once: those that fail the test in its failure, the rest printed
            self.print_findings(failing)
            if failing:
                problems.append(findings_text(
                    f"memsim: {nodeid}", failing,
                    "write @pytest.mark.memsim(fail_on='never') if the test means to cause them"))
        if self.max_peak is not None and self.peak.peak > self.max_peak:
            problems.append("\n".join([
                f"memsim: {nodeid}: device {self.peak.peak_device} peaked at "
                f"{format_bytes(self.peak.peak)} ({self.peak.peak} bytes of footprint), over "
                f"the max_peak budget of {format_bytes(self.max_peak)}; held at the peak by:",
                *self.peak.top_sites()]))
        return problems


class _BadSettings(Exception):
    pass


def _merge(settings: dict, args: tuple, kwargs: dict, where: str) -> None:
    if len(args) > 1:
        raise _BadSettings(f"{where}: at most one positional argument (the product), got "
                           f"{args!r}; write memsim(product='A2', hbm_bytes=...)")
    if args:
        kwargs = {"product": args[0], **kwargs}
    merge_keywords(settings, kwargs, MARKER_KEYS, where, _BadSettings)


def _settings(request: pytest.FixtureRequest) -> dict:
    """The merged settings of one test: defaults, option, npu_allocator markers (product,
    capacity), memsim markers (far to near), param."""
    settings: dict[str, Any] = {"product": product_option(request.config) or DEFAULT_PRODUCT}
    settings.update(runtime_settings(request.node))
    markers = list(request.node.iter_markers("memsim"))
    for marker in reversed(markers):
        _merge(settings, marker.args, dict(marker.kwargs), "@pytest.mark.memsim")
    param = getattr(request, "param", None)
    if param is not None:
        where = "indirect parameter of memsim"
        if isinstance(param, (str, Profile)):
            _merge(settings, (param,), {}, where)
        elif isinstance(param, dict):
            _merge(settings, (), param, where)
        else:
            raise _BadSettings(f"{where}: {param!r} is neither a product name nor a dict of "
                               f"marker keywords; write e.g. ['A2', '950PR'] or "
                               f"[{{'product': 'A2', 'hbm_bytes': 64 * 2**20}}]")
    capacity = settings.pop("capacity", None)
    if capacity is not None:
        # npu_allocator(capacity=...): the size of the product's main memory
        profile = get_profile(settings["product"])
        settings.setdefault("hbm_bytes" if profile.hbm_bytes else "ddr_bytes", capacity)
    for key in ("leak_check",):
        if not isinstance(settings.get(key, True), bool):
            raise _BadSettings(f"memsim {key}={settings[key]!r}: write True or False")
    fail_on = settings.setdefault("fail_on", request.config.getini("memsim_fail_on"))
    if fail_on not in FAIL_ON:
        raise _BadSettings(f"memsim fail_on={fail_on!r}: write one of {', '.join(FAIL_ON)}")
    max_peak = settings.get("max_peak", request.config.getini("memsim_max_peak") or None)
    try:
        settings["max_peak"] = None if max_peak is None else parse_size(max_peak)
    except AclError as e:
        raise _BadSettings(f"memsim max_peak={max_peak!r}: {e.message}") from None
    if settings.get("record_sites") not in (None, True, False):
        raise _BadSettings(f"memsim record_sites={settings['record_sites']!r}: write True, "
                           f"False or leave it out")
    return settings


def _fresh_faults(specs: object) -> list[Fault]:
    # A Fault object in a marker may be shared by several tests (a module-level pytestmark):
    # each test gets its own copy with fresh counters, so no state passes between tests.
    return [fault.fresh() for fault in parse_faults(specs)]


_RUNNER_DIRS = tuple(os.path.dirname(str(m.__file__)) + os.sep for m in (_pytest, pluggy))


def _test_frames(site: Site | None) -> Site | tuple[Frame, ...] | None:
    """The site without pytest's own frames: from the test function inwards."""
    if not site:
        return site
    runner = [i for i, f in enumerate(site) if f.filename.startswith(_RUNNER_DIRS)]
    return site[runner[-1] + 1:] if runner else site


def _live_handles(runtime: Runtime) -> list:
    """The compute handles (descriptors, buffers, ...) live in ``runtime``; a test that
    never made any has no compute plane, and none is made to say so."""
    plane = compute_plane(runtime, make=False)
    return [] if plane is None else plane.handles.live()


def _sanitizer(spec: object) -> object:
    """The sanitizer setting with leak reports off (the fixture lists leaks itself), unless a
    dict turns them on, and printing nowhere unless a dict says where: the fixture shows each
    finding once (:meth:`State.print_findings`)."""
    return sanitizer_setting(spec, leaks=False, output=None)


def _leak_report(nodeid: str, leaked: list, at_reset: list, handles: Sequence[Any] = ()) -> str:
    lines = [f"memsim: {nodeid} leaked {len(leaked) + len(at_reset)} device block(s) and "
             f"{len(handles)} handle(s); free them, or write "
             f"@pytest.mark.memsim(leak_check=False) if the test means to:"]
    for handle in handles:
        lines.append(f"  {handle.describe()}")
        site = format_site(_test_frames(handle.site), "      ")
        if site:
            lines.append("    made at\n" + site)
    for block in at_reset + leaked:
        when = " (discarded while live, by reset_device or finalize)" if block in at_reset else ""
        lines.append(f"  device {block.device_id}: {block.describe()}{when}")
        site = format_site(_test_frames(block.alloc_site), "      ")
        lines.append("    allocated at\n" + site if site else
                     "    (allocation site not recorded: record_sites=False)")
    return "\n".join(lines)


def memsim_runtime(request: pytest.FixtureRequest) -> Iterator[Runtime]:
    """The ``memsim`` fixture's body: a fresh, active simulated runtime with device 0 set;
    leaks fail the test."""
    try:
        settings = _settings(request)
        product = settings.pop("product")
        leak_check = settings.pop("leak_check", True)
        record_sites = settings.pop("record_sites", None)
        device = settings.pop("device", 0)
        fail_on = settings.pop("fail_on")
        max_peak = settings.pop("max_peak")
        faults = _fresh_faults(settings.pop("faults", None))
        ops = settings.pop("ops", None) or {}
        if not isinstance(ops, dict):
            raise _BadSettings(f"memsim ops={ops!r}: write a dict of op type -> kernel")
        # The fixture lists leaks itself, as a test failure; the sanitizer reports the rest.
        settings["sanitizer"] = _sanitizer(settings.get("sanitizer", "report"))
        runtime = Runtime(product, **settings)
        try:
            if device is not None:
                runtime.set_device(device)
            # last: the kernels are registered (process-wide) once nothing else can fail
            kernels = ExitStack()
            if ops:
                kernels.enter_context(registered_ops(ops))
        except BaseException:
            runtime.close()     # a runtime made and not handed out is closed here
            raise
    except (_BadSettings, AclError) as e:
        bad: str | None = f"memsim settings of {request.node.nodeid}: {e}"
    else:
        bad = None
    if bad is not None:
        # failed outside the except block: the settings error is the whole story, not a
        # "During handling of the above exception" chain
        pytest.fail(bad, pytrace=False)
    wants_sites = leak_check or max_peak is not None
    runtime.set_record_sites(wants_sites if record_sites is None else record_sites)
    for fault in faults:
        fault.install(runtime)
    request.node.stash[FAULTS] = faults
    sanitizer = getattr(runtime, "sanitizer", None)
    state = State(runtime, leak_check, fail_on, max_peak, _Peak(runtime),
                   report_mark=len(sanitizer.reports) if sanitizer is not None else 0)
    at_reset = state.at_reset

    def on_reset(event: str, device: object, info: dict) -> None:
        # reset_device discards the blocks still live on the device: leaks too.
        at_reset.extend(info["blocks"])

    if leak_check:
        runtime.add_observer(on_reset, events=("reset",))
    runtime.add_observer(state.peak, events=("malloc", "free", "reset"))
    request.node.stash[STATE] = state
    with runtime, kernels:
        yield runtime
        # what the call did not report: blocks a fixture allocated before the test body
        leaked = [b for b in runtime.blocks() if id(b) not in state.reported]
        discarded = [b for b in at_reset if id(b) not in state.reported]
        handles = [h for h in _live_handles(runtime) if id(h) not in state.reported]
    # the item lives until the session ends, as pytest's items do: what it holds of this
    # runtime goes now (kept, every test's runtime stayed live and each collection of the
    # heap walked them all: 1.5 ms a test at 3,000 tests against 0.9 ms at 500)
    stash = request.node.stash
    for key in (STATE, FAULTS):
        if key in stash:
            del stash[key]
    if (leak_check and (leaked or discarded or handles)
            and not request.node.stash.get(CALL_FAILED, False)):
        pytest.fail(_leak_report(request.node.nodeid, leaked, discarded, handles),
                    pytrace=False)
