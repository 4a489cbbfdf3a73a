"""Shared test set-up: Hypothesis profiles chosen by HYPOTHESIS_PROFILE (dev, ci, thorough).

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

settings.register_profile("dev", max_examples=50, deadline=None)
settings.register_profile("ci", max_examples=100, deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", max_examples=2000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI")
                                                              else "dev"))


@pytest.fixture
def a2():
    """A fresh, active A2 runtime with a 64 MiB device 0 set on this thread."""
    from ascend_memsim import MiB, Runtime

    with Runtime("A2", hbm_bytes=64 * MiB) as rt:
        rt.set_device(0)
        yield rt
