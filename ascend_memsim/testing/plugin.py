"""The pytest plugin: a fresh simulated runtime per test, leak checks, faults, ``import acl``.

Registered through the ``pytest11`` entry point, so installing the package enables it.

Fixture ``memsim``: a fresh, active :class:`~ascend_memsim.Runtime` with device 0 set on the
test's thread; the pyacl face (``ascend_memsim.acl``, or ``import acl`` with ``--memsim-acl``)
talks to it. At teardown every block still live, and every block that a ``reset_device`` (or
finalize) inside the test discarded, fails the test, listed with its allocation site. Fixture
``memsim_faults``: the faults the marker installed (to read their counters).

Settings, closest first: an indirect parameter (``@pytest.mark.parametrize("memsim",
["A2", "950PR"], indirect=True)``, a product name or a dict of marker keywords), the marker
(``@pytest.mark.memsim(product="950PR", hbm_bytes=64 * MiB, leak_check=False,
faults=[{"nth": 2, "api": "malloc"}])``; a marker alone also requests the fixture), the
``--memsim-product`` option, the ``memsim_product`` ini setting, then the default product.
``sanitizer="strict"`` (or ``"report"``, the default, ``"off"``, or a dict of
:class:`~ascend_memsim.checks.sanitizer.Sanitizer` options) sets the sanitizer's mode; it never
reports leaks unless the dict says ``"leaks": True``, since the fixture lists them itself.

Option ``--memsim-acl`` (ini ``memsim_acl = true``) makes ``import acl`` resolve to the
simulator for the whole run, collection included. Each test gets its own runtime and every
piece of state lives in it, so ``pytest -n 2`` (pytest-xdist) needs nothing special.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from collections.abc import Iterator
from typing import Any

import _pytest
import pluggy
import pytest

from ..acl import install_acl, uninstall_acl
from ..checks.faults import Fault, parse_faults
from ..memory.errors import AclError
from ..memory.profiles import DEFAULT_PRODUCT, PROFILES, Profile, get_profile
from ..memory.sites import Site, format_site
from ..runtime.runtime import Runtime

__all__ = ["memsim", "memsim_faults", "MARKER_KEYS"]

#: Profile fields a marker (or an indirect parameter dict) may override.
PROFILE_KEYS = tuple(f.name for f in dataclasses.fields(Profile)
                     if f.name not in ("name", "description", "aliases", "sources"))
#: Every keyword the ``memsim`` marker takes.
MARKER_KEYS = ("product", "leak_check", "faults", "device", "record_sites", "sanitizer",
               *PROFILE_KEYS)

_MARKER_DOC = ("memsim(product=None, *, leak_check=True, faults=None, device=0, "
               "record_sites=None, sanitizer='report', hbm_bytes=None, ddr_bytes=None, "
               "device_count=None, ...): "
               "settings of the simulated Ascend runtime the `memsim` fixture yields "
               "(ascend-memsim)")

_call_failed = pytest.StashKey[bool]()
_faults_key = pytest.StashKey[list]()


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


def _product_option(config: pytest.Config) -> str | None:
    return config.getoption("memsim_product") or config.getini("memsim_product") or None


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", _MARKER_DOC)
    product = _product_option(config)
    if product is not None:
        try:
            get_profile(product)
        except AclError:
            raise pytest.UsageError(f"--memsim-product/memsim_product {product!r} is not a "
                                    f"product; write one of {sorted(PROFILES)}") from None
    use_acl = config.getoption("memsim_acl")
    if use_acl is None:
        use_acl = config.getini("memsim_acl")
    if use_acl:
        previous = install_acl()
        config.add_cleanup(lambda: uninstall_acl(previous))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # A memsim marker asks for the fixture: a marked test without the argument still gets a
    # fresh runtime and a leak check.
    for item in items:
        names = getattr(item, "fixturenames", None)
        if names is not None and "memsim" not in names and item.get_closest_marker("memsim"):
            names.append("memsim")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    report = yield
    if report.when == "call":
        item.stash[_call_failed] = report.failed
    return report


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
    """The merged settings of one test: defaults, option, markers (far to near), param."""
    settings: dict[str, Any] = {"product": _product_option(request.config) or DEFAULT_PRODUCT}
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
    for key in ("leak_check",):
        if not isinstance(settings.get(key, True), bool):
            raise _BadSettings(f"memsim {key}={settings[key]!r}: write True or False")
    if settings.get("record_sites") not in (None, True, False):
        raise _BadSettings(f"memsim record_sites={settings['record_sites']!r}: write True, "
                           f"False or leave it out")
    return settings


def _fresh_faults(specs: object) -> list[Fault]:
    # A Fault object in a marker may be shared by several tests (a module-level pytestmark):
    # each test gets its own copy with fresh counters, so no state passes between tests.
    return [fault.fresh() for fault in parse_faults(specs)]


_RUNNER_DIRS = tuple(os.path.dirname(m.__file__) + os.sep for m in (_pytest, pluggy))


def _test_frames(site: Site | None) -> Site | None:
    """The site without pytest's own frames: from the test function inwards."""
    if not site:
        return site
    runner = [i for i, f in enumerate(site) if f.filename.startswith(_RUNNER_DIRS)]
    return site[runner[-1] + 1:] if runner else site


def _sanitizer(spec: object) -> object:
    """The sanitizer setting with leak reports off (the fixture lists leaks itself), unless a
    dict turns them on."""
    if spec is None or isinstance(spec, bool):
        spec = "off" if spec is False else "report"
    if isinstance(spec, str):
        return {"mode": spec, "leaks": False}
    if isinstance(spec, dict):
        return {"leaks": False, **spec}
    return spec


def _leak_report(nodeid: str, leaked: list, at_reset: list) -> str:
    lines = [f"memsim: {nodeid} leaked {len(leaked) + len(at_reset)} device block(s); free "
             f"them, or write @pytest.mark.memsim(leak_check=False) if the test means to:"]
    for block in at_reset + leaked:
        when = " (discarded while live, by reset_device or finalize)" if block in at_reset else ""
        lines.append(f"  device {block.device_id}: {block.describe()}{when}")
        site = format_site(_test_frames((block.extra or {}).get("site")), "      ")
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
        faults = _fresh_faults(settings.pop("faults", None))
        # The fixture lists leaks itself, as a test failure; the sanitizer reports the rest.
        settings["sanitizer"] = _sanitizer(settings.get("sanitizer", "report"))
        runtime = Runtime(product, **settings)
        if device is not None:
            runtime.set_device(device)
    except (_BadSettings, AclError) as e:
        pytest.fail(f"memsim settings of {request.node.nodeid}: {e}", pytrace=False)
    runtime.set_record_sites(leak_check if record_sites is None else record_sites)
    for fault in faults:
        fault.install(runtime)
    request.node.stash[_faults_key] = faults
    at_reset: list = []

    def on_reset(event: str, device: object, info: dict) -> None:
        # reset_device discards the blocks still live on the device: leaks too.
        if event == "reset":
            at_reset.extend(info["blocks"])

    if leak_check:
        runtime.add_observer(on_reset)
    with runtime:
        yield runtime
        leaked = runtime.blocks()
        discarded = list(at_reset)  # before closing the runtime resets the devices
    if (leak_check and (leaked or discarded)
            and not request.node.stash.get(_call_failed, False)):
        pytest.fail(_leak_report(request.node.nodeid, leaked, discarded), pytrace=False)


@pytest.fixture
def memsim_faults(request: pytest.FixtureRequest, memsim: Runtime) -> list[Fault]:
    """The faults the memsim marker installed in this test's runtime (counters readable)."""
    return request.node.stash.get(_faults_key, [])

