"""The README's runnable Python examples run as written (documentation that cannot rot)."""

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def runnable_blocks() -> list[str]:
    """The ```python blocks that stand alone: they make their own runtime, init acl or run
    an estimate (those need torch)."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    return [b for b in blocks
            if "with Runtime(" in b or "acl.init()" in b or "ascend_memsim.torchsim" in b]


def test_the_readme_has_runnable_examples():
    assert len(runnable_blocks()) >= 3


@pytest.mark.parametrize("block", runnable_blocks(), ids=lambda b: b.splitlines()[0][:40])
def test_readme_example_runs(block, tmp_path):
    if "ascend_memsim.torchsim" in block:
        pytest.importorskip("torch", reason="the estimate examples run scripts on torch's "
                                            "fake tensors; install the torch extra")
    script = tmp_path / "example.py"
    script.write_text(block)
    done = subprocess.run([sys.executable, str(script)], env=dict(os.environ, PYTHONPATH=ROOT),
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
