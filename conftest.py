"""pytest at the repository's root: the documentation's code blocks as tests, and what not to
collect.

Every fenced code block of README.md and docs/ is an example that Sybil collects (pytest's
``testpaths`` name both). How a block is run is said by its language and by directives in
HTML comments just above it, which neither GitHub nor the site shows
(docs/internals/contributing.md, "Examples in the documentation"):

- ```` ```python ````: a script, run in a fresh directory by a fresh interpreter (as a user
  runs it: nothing it registers or installs reaches other tests); a failure or a traceback
  fails it. A ```` ```text title="Output" ```` block right after it is what it prints
  (stdout and stderr, as a terminal shows them), compared as doctest compares (``...``
  matches anything);
- ```` ```console ````: a shell session; each ``$ ascend-memsim ...`` command is run (a
  usage error, status 2, or a traceback fails it) and compared with the lines under it;
- ```` ```json ````: must parse;
- ``<!-- pytest: ARGS -->``: the python block is a test file (named by its
  ``title="test_x.py"``), run by pytest with ARGS; it must pass, unless an output block
  follows, which is then what pytest prints;
- ``<!-- continued -->``: the block runs after the one before, in its directory (a script
  that writes files, then the commands that read them);
- ``<!-- needs: torch, matplotlib -->``: skipped, saying why, where a module is missing;
- ``<!-- not-run: REASON -->``: not run (a shell session on an NPU, a picture of output);
  any other block without it fails, so nothing is left unrun by accident.

Without torch, the doctests of the torch front end (``ascend_memsim/torchsim``, which
imports torch) are not collected; its tests say why they skip (tests/test_torchsim.py).
"""

from __future__ import annotations

import doctest
import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from importlib.metadata import entry_points

import pytest

ROOT = os.path.dirname(os.path.abspath(__file__))

collect_ignore_glob = [] if importlib.util.find_spec("torch") else ["ascend_memsim/torchsim/*"]
# the scripts that remake the documentation's pictures are run by hand; the site's hook has
# its tests in tests/test_docs.py
collect_ignore_glob += ["docs/*.py"]

#: seconds one block may take (the estimate examples run a script on torch's fake tensors)
TIMEOUT = 300
_OUTPUT = re.compile(r'^text\s+title="Output"\s*$')
_CHECKER = doctest.OutputChecker()
#: the conftest.py of a test-file example: Hypothesis tries 10 examples of at most 20 steps,
#: not its default 100 of 50 (the suite runs every example; a reader's run keeps Hypothesis's
#: own settings)
_QUICK_HYPOTHESIS = """from hypothesis import settings
settings.register_profile("doc-example", max_examples=10, stateful_step_count=20,
                          deadline=None)
settings.load_profile("doc-example")
"""


@dataclass
class Block:
    """One fenced code block and the directives above it."""
    language: str
    info: str
    source: str
    line: int
    directives: dict[str, str] = field(default_factory=dict)


@dataclass
class Example:
    """Blocks that run together: a script and its output, or blocks joined by continued."""
    blocks: list[Block]

    def needs(self) -> list[str]:
        return [name.strip() for block in self.blocks
                for name in block.directives.get("needs", "").split(",") if name.strip()]


def _ascend_memsim_command(folder: str) -> None:
    """An ``ascend-memsim`` on PATH that runs this checkout's command line."""
    path = os.path.join(folder, "ascend-memsim")
    with open(path, "w") as f:
        f.write(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -m ascend_memsim \"$@\"\n")
    os.chmod(path, 0o755)


def _environment(folder: str) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=ROOT, PYTHONUNBUFFERED="1", COLUMNS="100",
               PATH=folder + os.pathsep + os.environ.get("PATH", ""))
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_CURRENT_TEST", "ASCEND_MEMSIM"):
        env.pop(name, None)
    return env


def _compare(want: str, got: str, what: str) -> str | None:
    want = "\n".join(line.rstrip() for line in want.strip("\n").splitlines()) + "\n"
    got = "\n".join(line.rstrip() for line in got.strip("\n").splitlines()) + "\n"
    if _CHECKER.check_output(want, got, doctest.ELLIPSIS):
        return None
    return f"{what} printed\n{got}\nwhere the documentation shows\n{want}"


def _run(command: list[str], folder: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """Run ``command``; its stdout and stderr in one text, in the order printed."""
    return subprocess.run(command, cwd=folder, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=TIMEOUT,
                          stdin=subprocess.DEVNULL)


def _python(block: Block, output: Block | None, folder: str, env: dict[str, str]) -> str | None:
    if "pytest" in block.directives:
        title = re.search(r'title="(test_\w+\.py)"', block.info)
        name = title.group(1) if title else "test_example.py"
        with open(os.path.join(folder, name), "w") as f:
            f.write(block.source)
        with open(os.path.join(folder, "conftest.py"), "w") as f:
            f.write(_QUICK_HYPOTHESIS)
        plugin = [] if any(ep.value == "ascend_memsim.testing.plugin"
                           for ep in entry_points(group="pytest11")) \
            else ["-p", "ascend_memsim.testing.plugin"]
        done = _run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                     "-p", "no:randomly", *plugin, *shlex.split(block.directives["pytest"]),
                     name], folder, env)
        if output is not None:   # the run shown, a failing test's report too
            return _compare(output.source, done.stdout, "pytest")
        if done.returncode != 0:
            return f"pytest failed on the example (status {done.returncode}):\n{done.stdout}"
        return None
    script = os.path.join(folder, f"example_{block.line}.py")
    with open(script, "w") as f:
        f.write(block.source)
    done = _run([sys.executable, script], folder, env)
    printed = done.stdout
    if done.returncode != 0 or "Traceback (most recent call last)" in printed:
        return f"the example failed (status {done.returncode}):\n{printed}"
    if output is not None:
        return _compare(output.source, printed, "the example")
    return None


def _console(block: Block, folder: str, env: dict[str, str]) -> str | None:
    """Run each ``$ ascend-memsim ...`` of a shell session; compare what it printed."""
    sessions: list[tuple[str, list[str]]] = []
    lines = block.source.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("$ "):
            command = lines[i][2:]
            while command.rstrip().endswith("\\") and i + 1 < len(lines):
                i += 1
                command = command.rstrip()[:-1] + " " + lines[i].strip()
            sessions.append((command, []))
        elif sessions:
            sessions[-1][1].append(lines[i])
        i += 1
    for command, want in sessions:
        command = command.split(" #", 1)[0]
        if not command.startswith("ascend-memsim "):
            return f"the session runs {command!r}: only ascend-memsim commands are run"
        done = _run(["sh", "-c", command], folder, env)
        if done.returncode >= 2 or "Traceback (most recent call last)" in done.stdout:
            return f"$ {command} failed (status {done.returncode}):\n{done.stdout}"
        if any(line.strip() for line in want):
            failed = _compare("\n".join(want), done.stdout, f"$ {command}")
            if failed:
                return failed
    return None


def evaluate(example) -> str | None:
    """Sybil's evaluator: run an :class:`Example`; a message when it fails."""
    parsed: Example = example.parsed
    missing = [name for name in parsed.needs() if importlib.util.find_spec(name) is None]
    if missing:
        pytest.skip(f"the example needs {', '.join(missing)}, which is not installed "
                    f"(the test extra has all but torch; CI installs the torch extra)")
    with tempfile.TemporaryDirectory(prefix="doc-example-") as folder:
        _ascend_memsim_command(folder)
        env = _environment(folder)
        blocks = parsed.blocks
        for index, block in enumerate(blocks):
            if block.language == "python":
                following = blocks[index + 1] if index + 1 < len(blocks) else None
                output = following if following and _OUTPUT.match(following.info) else None
                failed = _python(block, output, folder, env)
            elif block.language == "console":
                failed = _console(block, folder, env)
            elif block.language == "json":
                try:
                    json.loads(block.source)
                    failed = None
                except ValueError as e:
                    failed = f"the JSON does not parse: {e}"
            elif block.language == "not-run":
                failed = f"the block at line {block.line} says not-run: say why"
            elif _OUTPUT.match(block.info) and index:
                failed = None   # compared with the script above
            else:
                failed = (f"a ```{block.info} block at line {block.line} runs nowhere: mark it "
                          f"<!-- not-run: why --> or make it python, console or json")
            if failed:
                return failed
    return None


_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>[^\n`]*)$", re.M)
_DIRECTIVE = re.compile(r"<!--\s*(?P<name>pytest|continued|needs|not-run)\s*:?\s*"
                        r"(?P<args>.*?)\s*-->", re.S)


class DocExamples:
    """The Sybil parser of the documentation's code blocks (see the module docstring)."""

    def __call__(self, document):
        from sybil import Region

        text = document.text
        blocks: list[tuple[int, int, Block]] = []
        position = 0
        while True:
            opening = _FENCE.search(text, position)
            if opening is None:
                break
            fence, indent = opening.group("fence"), opening.group("indent")
            closing = re.compile(rf"^{re.escape(indent)}{fence[0]}{{{len(fence)},}}[ \t]*$", re.M)
            end = closing.search(text, opening.end())
            if end is None:
                break
            source = text[opening.end() + 1:end.start()]
            source = "\n".join(line[len(indent):] if line.startswith(indent) else line.lstrip()
                               for line in source.splitlines()) + "\n"
            info = opening.group("info").strip()
            start = opening.start()
            directives: dict[str, str] = {}
            # the directives just above the block (only blank space between them)
            above = text[:start]
            while True:
                stripped = above.rstrip()
                match = None
                if stripped.endswith("-->"):
                    begin = stripped.rfind("<!--")
                    match = _DIRECTIVE.fullmatch(stripped[begin:])
                if not match:
                    break
                directives[match.group("name")] = match.group("args")
                above = stripped[:begin]
                start = begin
            block = Block(info.split()[0] if info else "", info, source,
                          text.count("\n", 0, opening.start()) + 1, directives)
            blocks.append((start, end.end(), block))
            position = end.end()
        groups: list[tuple[int, int, list[Block]]] = []
        for start, end, block in blocks:
            if "not-run" in block.directives:
                if not block.directives["not-run"]:
                    groups.append((start, end, [Block("not-run", "", "", block.line)]))
                continue
            joins = groups and ("continued" in block.directives or (
                _OUTPUT.match(block.info) and groups[-1][2][-1].language == "python"))
            if joins:
                first, _, members = groups.pop()
                groups.append((first, end, [*members, block]))
            else:
                groups.append((start, end, [block]))
        for start, end, members in groups:
            yield Region(start, end, Example(members), evaluate)


def _sybil():
    try:
        from sybil import Sybil
    except ImportError:
        return None
    return Sybil(parsers=[DocExamples()], patterns=["*.md"], excludes=["CHANGELOG.md"])


_documentation = _sybil()
if _documentation is not None:
    pytest_collect_file = _documentation.pytest()
