"""docs/guide/studies.md runs as written: its blocks in order in one folder, each command's
output as the page shows it (seconds aside)."""

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join(ROOT, "docs", "guide", "studies.md")
#: a block: its language, the rest of its info string, its text
BLOCK = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```", re.S | re.M)


def _blocks() -> list[tuple[str, str, str]]:
    with open(PAGE, encoding="utf-8") as f:
        return BLOCK.findall(f.read())


def _seconds(text: str) -> str:
    return re.sub(r"\d+\.\d\d s\b", "N s", text)


def test_the_page_runs_as_written(tmp_path):
    pytest.importorskip("distributed", reason="the page runs a study on Dask: pip install "
                                              "'ascend-memsim[study]'")
    # the page's `ascend-memsim` is this checkout's, run by this Python
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ascend-memsim").write_text(
        f'#!/bin/sh\nexec "{sys.executable}" -m ascend_memsim "$@"\n')
    (bin_dir / "ascend-memsim").chmod(0o755)
    env = dict(os.environ, PYTHONPATH=ROOT, XDG_CACHE_HOME=str(tmp_path / "xdg"),
               PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    blocks = _blocks()
    assert [b[0] for b in blocks].count("bash") >= 5
    printed = None        # what the last block run printed, until a text block shows it
    for language, _, text in blocks:
        if language == "text":
            assert printed is not None, "a text block shows the output of the block above"
            assert _seconds(printed) == _seconds(text)
            printed = None
            continue
        assert not printed, f"a block printed what the page does not show: {printed}"
        assert language in ("python", "bash"), language
        if language == "python":
            (tmp_path / "example.py").write_text(text)
            command = [sys.executable, "example.py"]
        else:
            command = ["bash", "-c", text]
        done = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True,
                              timeout=120)
        assert "Traceback" not in done.stderr, done.stderr
        assert done.returncode == 0, (text, done.stderr)
        printed = done.stdout
    assert not printed
