"""docs/guide/ddp.md runs as written: its blocks in order in one folder, each command's
standard output as the page shows it."""

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
    # the page's `ascend-memsim` is this checkout's, run by this Python
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ascend-memsim").write_text(
        f'#!/bin/sh\nexec "{sys.executable}" -m ascend_memsim "$@"\n')
    (bin_dir / "ascend-memsim").chmod(0o755)
    env = {name: value for name, value in os.environ.items()
           if name not in ("HCCL_BUFFSIZE", "P2P_HCCL_BUFFSIZE", "PYTORCH_NPU_ALLOC_CONF")}
    env.update(PYTHONPATH=ROOT, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    with open(PAGE, encoding="utf-8") as f:
        blocks = BLOCK.findall(f.read())
    assert [b[0] for b in blocks] == ["bash", "text"] * 4
    for (_, _, command), (_, _, shown) in zip(blocks[::2], blocks[1::2]):
        done = subprocess.run(["bash", "-c", command], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=300)
        assert "Traceback" not in done.stderr, done.stderr
        assert done.returncode == 0, (command, done.stderr)
        assert done.stdout == shown
