"""The type checker runs clean on the package: mypy, configured in pyproject.toml (strict on the
layers below the faces, the normal level above). CI runs it with the suite.

It runs twice: as the environment is, and as if torch were not installed (torch is an optional
extra; a ``type: ignore`` that only torch's annotations need is an unused one without them, so
such comments carry ``unused-ignore`` too). mypy keeps its caches in ``.mypy_cache`` at the
project root, so a run after a small change re-checks only what changed.
"""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

pytest.importorskip("mypy", reason="mypy comes with the test extra: pip install -e '.[test]'")

#: appended to pyproject.toml's settings: torch's modules are not read, so every name from
#: torch is Any, as where torch is missing (its override says ignore_missing_imports)
_WITHOUT_TORCH = ('\n[[tool.mypy.overrides]]\nmodule = ["torch", "torch.*"]\n'
                  'follow_imports = "skip"\n')


@pytest.mark.parametrize("torch", ["as installed", "absent"])
def test_mypy_is_clean_on_the_package(torch, tmp_path):
    # the files and every setting come from pyproject.toml's [tool.mypy]
    command = [sys.executable, "-m", "mypy"]
    if torch == "absent":
        with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as f:
            config = f.read() + _WITHOUT_TORCH
        (tmp_path / "pyproject.toml").write_text(config, encoding="utf-8")
        command += ["--config-file", str(tmp_path / "pyproject.toml"),
                    "--cache-dir", os.path.join(ROOT, ".mypy_cache", "without-torch")]
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, f"mypy found errors:\n{run.stdout}{run.stderr}"
