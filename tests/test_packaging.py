"""The package as a user gets it: the sdist carries the project (docs, tests, examples, the
license, the changelog), and the wheel installs into a fresh virtual environment where
``ascend-memsim demo`` runs the wheel's own code.

Both are built from a copy of the checkout, so the build leaves nothing in it, by the build
backend itself (setuptools, which the test extra installs: no download). The fresh
environment sees the test environment's packages for the dependencies (the wheel goes in
with ``--no-deps``), but not its ascend_memsim: only the wheel's code can answer.
"""

import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import venv
import zipfile

import pytest

import ascend_memsim

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IGNORED = shutil.ignore_patterns(".git", ".venv", "__pycache__", "*.egg-info", "build", "dist",
                                 "site", ".hypothesis", ".pytest_cache", ".ruff_cache",
                                 ".grimp_cache", ".benchmarks", "*.pyc")


def _backend(source, hook: str, out) -> str:
    """Call setuptools' PEP 517 hook ``hook`` in ``source``; the file it wrote."""
    setuptools = pytest.importorskip("setuptools", reason="building needs setuptools (the "
                                                          "test extra installs it)")
    major = int(setuptools.__version__.split(".")[0])
    if major < 77:
        pytest.skip(f"setuptools {setuptools.__version__} cannot build the package: the SPDX "
                    f"license needs 77 or later (the test extra installs it)")
    done = subprocess.run(
        [sys.executable, "-c", f"import sys; from setuptools import build_meta; "
                               f"print(build_meta.{hook}(sys.argv[1]))", str(out)],
        cwd=source, capture_output=True, text=True, timeout=300,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert done.returncode == 0, done.stdout + done.stderr
    return os.path.join(out, done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    src = tmp_path_factory.mktemp("checkout") / "ascend-memsim"
    shutil.copytree(ROOT, src, ignore=IGNORED)
    return src


def test_the_sdist_carries_the_project(source, tmp_path):
    sdist = _backend(source, "build_sdist", tmp_path)
    with tarfile.open(sdist) as tar:
        names = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    for path in ("LICENSE", "CHANGELOG.md", "README.md", "mkdocs.yml", "conftest.py",
                 "docs/index.md", "docs/hooks.py", "docs/guide/testing.md",
                 "tests/test_docs.py", "tests/conftest.py", "examples/quickstart.py",
                 "ascend_memsim.pth", "ascend_memsim/observe/trace.schema.json"):
        assert path in names, path
    assert not any("__pycache__" in name for name in names)


def test_the_wheel_installs_in_a_fresh_venv_and_runs_the_demo(source, tmp_path):
    wheel = _backend(source, "build_wheel", tmp_path / "dist")
    with zipfile.ZipFile(wheel) as whl:
        names = whl.namelist()
        metadata = whl.read(next(n for n in names if n.endswith(".dist-info/METADATA")))
    assert "ascend_memsim.pth" in names and "_ascend_memsim_startup.py" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert f"\nVersion: {ascend_memsim.__version__}\n".encode() in metadata
    assert b"\nLicense-Expression: Apache-2.0\n" in metadata

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)
    python = str(env_dir / "bin" / "python")
    # the dependencies from the test environment: its site directories as plain path entries,
    # after the venv's own (a .pth in them, such as an editable install's, is not run)
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    ours = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
    with open(os.path.join(site, "test-environment.pth"), "w") as f:
        f.write("\n".join(sorted(ours)) + "\n")
    done = subprocess.run([sys.executable, "-m", "pip", "--python", python, "install",
                           "--no-deps", "--no-index", "--quiet", wheel],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr

    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "ASCEND_MEMSIM", "PYTHONHOME")}
    run = dict(capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
    where = subprocess.run([python, "-c", "import ascend_memsim; print(ascend_memsim.__file__)"],
                           **run)
    assert where.stdout.strip().startswith(site), where.stdout + where.stderr
    demo = subprocess.run([str(env_dir / "bin" / "ascend-memsim"), "demo"], **run)
    assert demo.returncode == 0, demo.stderr
    assert "The +32 rule" in demo.stdout
    version = subprocess.run([str(env_dir / "bin" / "ascend-memsim"), "--version"], **run)
    assert version.stdout.strip() == f"ascend-memsim {ascend_memsim.__version__}"
    # the startup hook came with the wheel: ASCEND_MEMSIM=1 makes `import acl` the simulator
    hook = subprocess.run([python, "-c", "import acl; print(acl.__spec__.origin)"],
                          **{**run, "env": dict(env, ASCEND_MEMSIM="1")})
    assert hook.stdout.strip().startswith(site), hook.stdout + hook.stderr
