"""The pytest plugin: a fresh simulated runtime per test, leak checks, faults, ``import acl``.

Registered through the ``pytest11`` entry point, so installing the package enables it.

Fixture ``memsim``: a fresh, active :class:`~ascend_memsim.Runtime` with device 0 set on the
test's thread; the pyacl face (``ascend_memsim.acl``, or ``import acl`` with ``--memsim-acl``)
talks to it. When the test body ends, every block it left live, and every block that a
``reset_device`` (or finalize) inside it discarded, fails the test, listed with its allocation
site. Fixture ``memsim_faults``: the faults the marker installed (to read their counters).
Fixture ``npu_allocator`` (marker ``npu_allocator``): torch_npu's caching allocator on that
runtime, with budgets on its peaks (:mod:`ascend_memsim.testing.npu_allocator`).

Settings, closest first: an indirect parameter (``@pytest.mark.parametrize("memsim",
["A2", "950PR"], indirect=True)``, a product name or a dict of marker keywords), the marker
(``@pytest.mark.memsim(product="950PR", hbm_bytes=64 * MiB, leak_check=False,
faults=[{"nth": 2, "api": "malloc"}])``; a marker alone also requests the fixture), the
``--memsim-product`` option, the ``memsim_product`` ini setting, then the default product.
``ops={"MyOp": fn}`` registers operator kernels for the test only (as
:func:`~ascend_memsim.registered_ops`). ``sanitizer="strict"`` (or ``"report"``, the
default, ``"off"``, or a dict of
:class:`~ascend_memsim.checks.sanitizer.Sanitizer` options) sets the sanitizer's mode; it never
reports leaks unless the dict says ``"leaks": True``, since the fixture lists them itself.

Failures are the test's own (its call fails, as pytest-memray's do), never teardown errors:
blocks the test body allocated and left live (or let a reset discard); sanitizer findings of
the test (errors by default; ``fail_on="warning"`` also fails on warnings, ``"never"`` only
prints them; ini ``memsim_fail_on``); and a device peak over ``max_peak`` (marker keyword or
ini ``memsim_max_peak``), listed with the allocation sites that held the memory at the peak.
Blocks a fixture allocated before the test body and never freed are still listed at
teardown. Every size (``hbm_bytes``, ``max_peak``, ...) may be written ``"64MiB"``. With
``-v`` the session ends with the tests of the highest device peaks.

Option ``--memsim-acl`` (ini ``memsim_acl = true``) makes ``import acl`` resolve to the
simulator for the whole run, collection included. Without it, an ``import acl`` that nothing
installed answers fails with a ``ModuleNotFoundError`` (``name == "acl"``, so code catching
``ImportError`` behaves as before) whose message says what to add (:data:`ACL_HINT`); a real
pyacl, or ``install_acl()``, still wins, and ``importlib.util.find_spec("acl")`` still
answers None. Each test gets its own runtime and every
piece of state lives in it, so ``pytest -n 2`` (pytest-xdist) needs nothing special.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.abc
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import _pytest
import pluggy
import pytest

from ..acl import install_acl, uninstall_acl
from ..checks.faults import Fault, parse_faults
from ..compute.ops import registered_ops
from ..compute.plane import compute_plane
from ..memory.errors import AclError
from ..memory.profiles import DEFAULT_PRODUCT, PROFILES, Profile, get_profile
from ..memory.sites import Frame, Site, format_site
from ..memory.units import format_bytes, parse_size
from ..runtime.runtime import Runtime
from ._findings import FAIL_ON, failing_findings, findings_text, sanitizer_setting
from .npu_allocator import CALL_CHECKS, npu_allocator, runtime_settings
from .npu_allocator import MARKER_DOC as _ALLOCATOR_MARKER_DOC

__all__ = ["memsim", "memsim_faults", "npu_allocator", "MARKER_KEYS", "ACL_HINT"]

#: Profile fields a marker (or an indirect parameter dict) may override.
PROFILE_KEYS = tuple(f.name for f in dataclasses.fields(Profile)
                     if f.name not in ("name", "description", "aliases", "sources"))
#: Every keyword the ``memsim`` marker takes.
MARKER_KEYS = ("product", "leak_check", "faults", "device", "record_sites", "sanitizer",
               "fail_on", "max_peak", "ops", *PROFILE_KEYS)
#: Allocation sites listed for a test over its peak budget, and tests in the -v summary.
TOP_SITES = 5
TOP_TESTS = 10

_MARKER_DOC = ("memsim(product=None, *, leak_check=True, faults=None, device=0, "
               "record_sites=None, sanitizer='report', fail_on='error', max_peak=None, "
               "ops=None, hbm_bytes=None, ddr_bytes=None, "
               "device_count=None, ...): "
               "settings of the simulated Ascend runtime the `memsim` fixture yields "
               "(ascend-memsim)")

#: The message of an ``import acl`` that fails in a run without ``--memsim-acl``.
ACL_HINT = ("No module named 'acl': pyacl (the Ascend runtime's Python module) is not installed "
            "here. To run `import acl` against the simulator, add --memsim-acl to the pytest "
            "command line, or `memsim_acl = true` to the [pytest] ini section (pyproject.toml: "
            "[tool.pytest.ini_options]), or call ascend_memsim.install_acl() before the "
            "import; or write `from ascend_memsim import acl`.")

_call_failed = pytest.StashKey[bool]()
_faults_key = pytest.StashKey[list]()
_state_key = pytest.StashKey["_State"]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("memsim", "ascend-memsim (simulated Ascend device memory)")
    group.addoption("--memsim-product", default=None, metavar="PRODUCT",
                    help=f"product the memsim fixture simulates (known: {sorted(PROFILES)}; "
                         f"default {DEFAULT_PRODUCT})")
    group.addoption("--memsim-acl", action="store_true", default=None,
                    help="make `import acl` resolve to the simulator for the code under test")
    parser.addini("memsim_product", "product the memsim fixture simulates", default="")
    parser.addini("memsim_acl", "make `import acl` resolve to the simulator", type="bool",
                  default=False)
    parser.addini("memsim_fail_on", "sanitizer findings that fail a test: error (default), "
                  "warning or never", default="error")
    parser.addini("memsim_max_peak", "device peak budget of every memsim test (e.g. 48MiB)",
                  default="")


def _product_option(config: pytest.Config) -> str | None:
    return config.getoption("memsim_product") or config.getini("memsim_product") or None


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", _MARKER_DOC)
    config.addinivalue_line("markers", _ALLOCATOR_MARKER_DOC)
    product = _product_option(config)
    if product is not None:
        try:
            get_profile(product)
        except AclError:
            raise pytest.UsageError(f"--memsim-product/memsim_product {product!r} is not a "
                                    f"product; write one of {sorted(PROFILES)}") from None
    config.pluginmanager.register(_PeakSummary(), "memsim-peak-summary")
    if config.getini("memsim_fail_on") not in FAIL_ON:
        raise pytest.UsageError(f"memsim_fail_on = {config.getini('memsim_fail_on')!r}: write "
                                f"one of {', '.join(FAIL_ON)}")
    if config.getini("memsim_max_peak"):
        try:
            parse_size(config.getini("memsim_max_peak"))
        except AclError as e:
            raise pytest.UsageError(f"memsim_max_peak: {e.message}") from None
    use_acl = config.getoption("memsim_acl")
    if use_acl is None:
        use_acl = config.getini("memsim_acl")
    if use_acl:
        previous = install_acl()
        config.add_cleanup(lambda: uninstall_acl(previous))
    else:
        hint = _AclHint()
        sys.meta_path.append(hint)
        config.add_cleanup(lambda: sys.meta_path.remove(hint) if hint in sys.meta_path
                           else None)


class _AclHint(importlib.abc.MetaPathFinder):
    """Last on ``sys.meta_path``: an ``import acl`` that no other finder answered (no pyacl
    installed, no ``install_acl()``, no ``ASCEND_MEMSIM``) fails with :data:`ACL_HINT`."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        __tracebackhide__ = True        # the failure is the importing line's, not this frame's
        if name != "acl":
            return None
        # Only an import raises: importlib.util.find_spec("acl"), the usual probe for an
        # optional module, must still answer None. An import reaches the finders through
        # importlib._bootstrap's _find_and_load_unlocked; any other caller, or
        # a stack of another shape, gets the plain None.
        try:
            caller = sys._getframe(2).f_code.co_name
        except ValueError:
            return None
        if caller != "_find_and_load_unlocked":
            return None
        raise ModuleNotFoundError(ACL_HINT, name="acl")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # A memsim marker asks for the fixture: a marked test without the argument still gets a
    # fresh runtime and a leak check; an npu_allocator marker asks for its fixture likewise.
    for item in items:
        names = getattr(item, "fixturenames", None)
        if names is None:
            continue
        for name in ("memsim", "npu_allocator"):
            if name not in names and item.get_closest_marker(name):
                names.append(name)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    report = yield
    if report.when == "call":
        item.stash[_call_failed] = report.failed
    return report


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    """After the test body: its leaks, sanitizer findings and peak fail it, as its own call."""
    state = item.stash.get(_state_key, None)
    if state is not None:
        state.before_call = {id(b) for b in state.runtime.blocks()}
        state.before_call.update(id(h) for h in _live_handles(state.runtime))
        state.reset_mark = len(state.at_reset)
    try:
        result = yield
    finally:
        if state is not None:
            item.user_properties.append(("memsim_peak", state.peak.peak))
    # reached only when the test body passed
    if state is not None:
        checks = item.stash.get(CALL_CHECKS, [])
        problems = state.call_problems(item.nodeid, checks)
        if problems:
            pytest.fail("\n\n".join(problems), pytrace=False)
    return result


class _PeakSummary:
    """Collects each memsim test's device peak (in the controller under xdist too: the peak
    travels in the report's user_properties) and lists the highest ones with ``-v``."""

    def __init__(self) -> None:
        self.peaks: list[tuple[int, str]] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "call":
            return
        for key, value in report.user_properties:
            if key == "memsim_peak" and isinstance(value, int):
                self.peaks.append((value, report.nodeid))

    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int,
                                config: pytest.Config) -> None:
        if config.getoption("verbose") <= 0 or not self.peaks:
            return
        terminalreporter.section("memsim: highest device peaks")
        for peak, nodeid in sorted(self.peaks, key=lambda p: (-p[0], p[1]))[:TOP_TESTS]:
            terminalreporter.write_line(f"{format_bytes(peak):>24}  {nodeid}")


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
class _State:
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
    for key, value in kwargs.items():
        if key not in MARKER_KEYS:
            close = difflib.get_close_matches(key, MARKER_KEYS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise _BadSettings(f"{where}: unknown keyword {key!r}{hint}; known: "
                               f"{list(MARKER_KEYS)}")
        settings[key] = value


def _settings(request: pytest.FixtureRequest) -> dict:
    """The merged settings of one test: defaults, option, npu_allocator markers (product,
    capacity), memsim markers (far to near), param."""
    settings: dict[str, Any] = {"product": _product_option(request.config) or DEFAULT_PRODUCT}
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
    dict turns them on."""
    return sanitizer_setting(spec, leaks=False)


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


@pytest.fixture
def memsim(request: pytest.FixtureRequest) -> Iterator[Runtime]:
    """A fresh, active simulated runtime with device 0 set; leaks fail the test."""
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
        if device is not None:
            runtime.set_device(device)
        # last: the kernels are registered (process-wide) once nothing else can fail
        kernels = ExitStack()
        if ops:
            kernels.enter_context(registered_ops(ops))
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
    request.node.stash[_faults_key] = faults
    sanitizer = getattr(runtime, "sanitizer", None)
    state = _State(runtime, leak_check, fail_on, max_peak, _Peak(runtime),
                   report_mark=len(sanitizer.reports) if sanitizer is not None else 0)
    at_reset = state.at_reset

    def on_reset(event: str, device: object, info: dict) -> None:
        # reset_device discards the blocks still live on the device: leaks too.
        at_reset.extend(info["blocks"])

    if leak_check:
        runtime.add_observer(on_reset, events=("reset",))
    runtime.add_observer(state.peak, events=("malloc", "free", "reset"))
    request.node.stash[_state_key] = state
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
    for key in (_state_key, _faults_key):
        if key in stash:
            del stash[key]
    if (leak_check and (leaked or discarded or handles)
            and not request.node.stash.get(_call_failed, False)):
        pytest.fail(_leak_report(request.node.nodeid, leaked, discarded, handles),
                    pytrace=False)


@pytest.fixture
def memsim_faults(request: pytest.FixtureRequest, memsim: Runtime) -> list[Fault]:
    """The faults the memsim marker installed in this test's runtime (counters readable)."""
    return request.node.stash.get(_faults_key, [])

