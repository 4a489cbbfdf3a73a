"""docs/guide/ddp.md runs as written: each python block in a fresh folder by a fresh
interpreter, what it prints (stdout and stderr) as the ``Output`` block under it shows it
(``...`` matches anything, as in a doctest)."""

import doctest
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join(ROOT, "docs", "guide", "ddp.md")
#: a block: its language, the rest of its info string, its text
BLOCK = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```", re.S | re.M)


def test_the_page_runs_as_written(tmp_path):
    pytest.importorskip("torch", reason="the page estimates a torch script: install the "
                                        "torch extra")
    env = {name: value for name, value in os.environ.items()
           if name not in ("HCCL_BUFFSIZE", "P2P_HCCL_BUFFSIZE", "PYTORCH_NPU_ALLOC_CONF")}
    env["PYTHONPATH"] = ROOT
    with open(PAGE, encoding="utf-8") as f:
        blocks = BLOCK.findall(f.read())
    assert [(b[0], b[1].strip()) for b in blocks] == [("python", ""),
                                                      ("text", 'title="Output"')]
    (tmp_path / "example.py").write_text(blocks[0][2])
    done = subprocess.run([sys.executable, "example.py"], env=env, cwd=tmp_path,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=300)
    assert done.returncode == 0 and "Traceback" not in done.stdout, done.stdout
    checker = doctest.OutputChecker()
    assert checker.check_output(blocks[1][2], done.stdout, doctest.ELLIPSIS), done.stdout
