"""The type checker runs clean on the package: mypy, configured in pyproject.toml (strict on the
layers below the faces, the normal level above). CI runs it with the suite.

mypy keeps its cache in ``.mypy_cache`` at the project root, so a run after a small change
re-checks only what changed.
"""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

pytest.importorskip("mypy", reason="mypy comes with the test extra: pip install -e '.[test]'")


def test_mypy_is_clean_on_the_package():
    # the files and every setting come from pyproject.toml's [tool.mypy]
    run = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True,
                         text=True, timeout=900)
    assert run.returncode == 0, f"mypy found errors:\n{run.stdout}{run.stderr}"
