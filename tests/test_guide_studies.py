"""docs/guide/studies.md runs as written: its blocks in order in one folder, each command's
output as the page shows it (seconds aside)."""

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join(ROOT, "docs", "guide", "studies.md")
#: a block: its language, its info string's rest (a title="FILE" writes FILE), its text
BLOCK = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```", re.S | re.M)


def _blocks() -> list[tuple[str, str, str]]:
    with open(PAGE, encoding="utf-8") as f:
        return BLOCK.findall(f.read())


def _seconds(text: str) -> str:
    return re.sub(r"\d+\.\d\d s\b", "N s", text)


def _commands(console: str) -> list[tuple[str, str]]:
    """(command, the output shown under it) for each ``$ `` line (``\\`` continues it)."""
    out: list[tuple[str, str]] = []
    lines = console.splitlines()
    i = 0
    while i < len(lines):
        assert lines[i].startswith("$ "), lines[i]
        command = lines[i][2:]
        while command.endswith("\\"):
            i += 1
            command = command[:-1] + " " + lines[i].strip()
        i += 1
        shown = []
        while i < len(lines) and not lines[i].startswith("$ "):
            shown.append(lines[i])
            i += 1
        out.append((command, "\n".join(shown)))
    return out


def test_the_page_runs_as_written(tmp_path):
    pytest.importorskip("distributed", reason="the page runs a study on Dask: pip install "
                                              "'ascend-memsim[study]'")
    env = dict(os.environ, PYTHONPATH=ROOT, XDG_CACHE_HOME=str(tmp_path / "xdg"))
    blocks = _blocks()
    assert [b[0] for b in blocks].count("console") >= 4
    expected_print = None
    for language, info, text in blocks:
        title = re.search(r'title="([^"]+)"', info)
        if title:
            (tmp_path / title.group(1)).write_text(text)
        elif language == "python":
            (tmp_path / "example.py").write_text(text)
            done = subprocess.run([sys.executable, "example.py"], env=env, cwd=tmp_path,
                                  capture_output=True, text=True, timeout=120)
            assert done.returncode == 0, done.stderr
            expected_print = done.stdout
        elif language == "text":
            assert expected_print is not None, "a text block shows the python block's output"
            assert expected_print == text
            expected_print = None
        elif language == "console":
            for command, shown in _commands(text):
                assert command.startswith("ascend-memsim ")
                line = f"{sys.executable} -m ascend_memsim {command[len('ascend-memsim '):]}"
                done = subprocess.run(["bash", "-c", line], env=env, cwd=tmp_path,
                                      capture_output=True, text=True, timeout=120)
                assert "Traceback" not in done.stderr, done.stderr
                assert _seconds(done.stdout.rstrip("\n")) == _seconds(shown), command
