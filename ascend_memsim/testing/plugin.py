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

Installing the package enables the plugin in every pytest run of the environment, so this
module imports nothing of the simulator but the product table: the fixtures' machinery
(:mod:`._memsim`, :mod:`.npu_allocator`) is imported when a test first asks for a fixture,
and the pyacl face when ``--memsim-acl`` asks for it (benchmarks/bench_plugin.py measures
what a run that uses none of it pays).
"""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from ..memory.profiles import DEFAULT_PRODUCT, PROFILES, get_profile
from ._findings import FAIL_ON
from ._keys import CALL_CHECKS, CALL_FAILED, FAULTS, MARKER_KEYS, STATE, product_option

__all__ = ["memsim", "memsim_faults", "npu_allocator", "MARKER_KEYS", "ACL_HINT"]

#: Tests listed in the -v summary of the highest device peaks.
TOP_TESTS = 10

_MARKER_DOC = ("memsim(product=None, *, leak_check=True, faults=None, device=0, "
               "record_sites=None, sanitizer='report', fail_on='error', max_peak=None, "
               "ops=None, hbm_bytes=None, ddr_bytes=None, "
               "device_count=None, ...): "
               "settings of the simulated Ascend runtime the `memsim` fixture yields "
               "(ascend-memsim)")
_ALLOCATOR_MARKER_DOC = (
    "npu_allocator(*, product=None, capacity=None, conf='', cann='9.1.0', device=0, "
    "max_allocated=None, max_reserved=None, leak_check=True): torch_npu's caching "
    "allocator the `npu_allocator` fixture yields, with budgets on its allocated "
    "and reserved peaks (ascend-memsim)")

#: The message of an ``import acl`` that fails in a run without ``--memsim-acl``.
ACL_HINT = ("No module named 'acl': pyacl (the Ascend runtime's Python module) is not installed "
            "here. To run `import acl` against the simulator, add --memsim-acl to the pytest "
            "command line, or `memsim_acl = true` to the [pytest] ini section (pyproject.toml: "
            "[tool.pytest.ini_options]), or call ascend_memsim.install_acl() before the "
            "import; or write `from ascend_memsim import acl`.")


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


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", _MARKER_DOC)
    config.addinivalue_line("markers", _ALLOCATOR_MARKER_DOC)
    product = product_option(config)
    if product is not None and product not in PROFILES:
        from ..memory.errors import AclError
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
        from ..memory.errors import AclError
        from ..memory.units import parse_size
        try:
            parse_size(config.getini("memsim_max_peak"))
        except AclError as e:
            raise pytest.UsageError(f"memsim_max_peak: {e.message}") from None
    use_acl = config.getoption("memsim_acl")
    if use_acl is None:
        use_acl = config.getini("memsim_acl")
    if use_acl:
        from ..acl import install_acl, uninstall_acl
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
        item.stash[CALL_FAILED] = report.failed
    return report


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    """After the test body: its leaks, sanitizer findings and peak fail it, as its own call."""
    state = item.stash.get(STATE, None)
    if state is not None:
        state.mark_call()
    try:
        result = yield
    except BaseException:
        if state is not None:
            state.print_findings()      # the body's failure is the story; its findings too
        raise
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
        from ..memory.units import format_bytes
        terminalreporter.section("memsim: highest device peaks")
        for peak, nodeid in sorted(self.peaks, key=lambda p: (-p[0], p[1]))[:TOP_TESTS]:
            terminalreporter.write_line(f"{format_bytes(peak):>24}  {nodeid}")


@pytest.fixture
def memsim(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A fresh, active simulated runtime with device 0 set; leaks fail the test."""
    from ._memsim import memsim_runtime
    yield from memsim_runtime(request)


@pytest.fixture
def memsim_faults(request: pytest.FixtureRequest, memsim: Any) -> list:
    """The faults the memsim marker installed in this test's runtime (counters readable)."""
    return request.node.stash.get(FAULTS, [])


@pytest.fixture
def npu_allocator(request: pytest.FixtureRequest, memsim: Any) -> Iterator[Any]:
    """torch_npu's caching allocator on the ``memsim`` runtime; budgets and leaks fail the
    test (see :mod:`ascend_memsim.testing.npu_allocator`)."""
    from .npu_allocator import budgeted_allocator
    yield from budgeted_allocator(request, memsim)
