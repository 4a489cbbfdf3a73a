"""Shared test set-up: Hypothesis profiles chosen by HYPOTHESIS_PROFILE (dev, ci, thorough),
and the suite on every core where pytest-xdist is installed.

Without HYPOTHESIS_PROFILE the profile is ``ci`` when the CI variable is set, else ``dev``.
"""

import os
from importlib.metadata import entry_points

import pytest
from hypothesis import HealthCheck, settings

# pytester runs the plugin's own tests. The plugin itself comes in through the package's
# pytest11 entry point; from a checkout that is not installed, load it by name.
pytest_plugins = ["pytester"]
if not any(ep.value == "ascend_memsim.testing.plugin" for ep in entry_points(group="pytest11")):
    pytest_plugins.append("ascend_memsim.testing.plugin")

# too_slow is a property of the machine, not of the code: a loaded machine (two workers of
# pytest-xdist on two cores) must not fail a test that a quiet one passes.
settings.register_profile("dev", max_examples=50, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("ci", max_examples=100, deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", max_examples=2000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI")
                                                              else "dev"))


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """The whole suite (no test paths given) runs on every core by default where
    pytest-xdist is installed, as with ``-n auto``; ``-n N`` picks the count, ``-n 0`` or
    ``-p no:xdist`` runs it in one process (``--pdb`` too). Named files run in one process
    unless ``-n`` says otherwise (starting workers costs more than a file takes). Runs before
    xdist's own hook reads ``-n``."""
    option = config.option
    whole = config.args_source is not pytest.Config.ArgsSource.ARGS
    if (whole and getattr(option, "numprocesses", 0) is None
            and not getattr(option, "usepdb", False)
            and not os.environ.get("PYTEST_XDIST_WORKER") and (os.cpu_count() or 1) > 1):
        option.numprocesses = "auto"


@pytest.fixture
def a2():
    """A fresh, active A2 runtime with a 64 MiB device 0 set on this thread."""
    from ascend_memsim import MiB, Runtime

    with Runtime("A2", hbm_bytes=64 * MiB) as rt:
        rt.set_device(0)
        yield rt


# The fixtures below are what several modules share; a module with a fixture of the same name
# (a runtime set up otherwise) uses its own.

@pytest.fixture
def rt():
    """An active A2 runtime (64 MiB, 2 devices) with device 0 set, through acl."""
    from ascend_memsim import MiB, Runtime, acl

    with Runtime("A2", hbm_bytes=64 * MiB, device_count=2) as runtime:
        acl.rt.set_device(0)
        yield runtime


@pytest.fixture
def stream(rt):
    """A stream of device 0, made through acl."""
    from ascend_memsim import acl

    handle, ret = acl.rt.create_stream()
    assert ret == 0
    return handle


@pytest.fixture
def procs():
    """Processes A (active for the face) and B on one A2 machine (64 MiB, 2 devices), device 0
    set in both; B is closed after the test."""
    from ascend_memsim import MiB, Runtime, acl

    with Runtime("A2", hbm_bytes=64 * MiB, device_count=2, sanitizer={"output": None}) as a:
        b = a.spawn_process(sanitizer={"output": None})
        acl.rt.set_device(0)
        with b.as_current():
            acl.rt.set_device(0)
        yield a, b
        b.close()
