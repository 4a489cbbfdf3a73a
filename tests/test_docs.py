"""The documentation: the site builds with --strict, its generated pages hold every command,
option and decision, the layer picture is the import contract, and README.md stays a short
front door whose links lead into the site. (The code blocks themselves run as tests through
Sybil: conftest.py at the root.)"""

import argparse
import importlib.util
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")


def _hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", os.path.join(DOCS, "hooks.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _read(*parts: str) -> str:
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as f:
        return f.read()


def _options() -> dict[str, list[str]]:
    """Every subcommand of ``ascend-memsim`` and its option strings (``--help`` aside)."""
    options = {}
    for name, parser in _hooks().subcommands().items():
        options[name] = [s for action in parser._actions if not isinstance(
            action, argparse._HelpAction) for s in action.option_strings]
    return options


# -- the site ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site, built as CI builds it: ``mkdocs build --strict`` (a warning fails it)."""
    for module in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python"):
        pytest.importorskip(module, reason="the documentation's build needs mkdocs, "
                                           "mkdocs-material and mkdocstrings[python] (the test "
                                           "extra installs them)")
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet",
                           "-f", os.path.join(ROOT, "mkdocs.yml"), "-d", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=ROOT, NO_MKDOCS_2_WARNING="1"))
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def _page(site, *parts: str) -> str:
    import html

    with open(os.path.join(site, *parts, "index.html"), encoding="utf-8") as f:
        return html.unescape(f.read())


def test_the_site_builds_strict_and_every_page_is_in_the_navigation(site):
    # mkdocs.yml's validation turns a page missing from the nav, a broken link or anchor into
    # a warning, which --strict makes an error: the build passing is the check
    pages = {os.path.relpath(os.path.join(folder, name), DOCS)
             for folder, _, names in os.walk(DOCS) for name in names if name.endswith(".md")}
    for page in pages:
        assert os.path.exists(os.path.join(site, page[:-3], "index.html")) or \
            page == "index.md", page


def test_the_cli_reference_has_every_subcommand_and_option(site):
    page = _page(site, "reference", "cli")
    for name, options in _options().items():
        section = page[page.index(f'<h2 id="ascend-memsim-{name}"'):]
        section = section[:section.find("<h2 ", 10)]
        assert f"usage: ascend-memsim {name}" in section, name
        for option in options:
            assert option in section, f"ascend-memsim {name} {option} is not on the page"


def test_the_decisions_page_lists_every_decision_of_the_code(site):
    page = _page(site, "internals", "decisions")
    decisions = _hooks().decision_list()
    assert len(decisions) > 200
    assert f"{len(decisions)} decisions in" in page
    for path, line, _ in decisions:
        section = page[page.index(f"<code>{path}</code>"):]
        assert f"line {line}: " in section[:section.find("<h2 ", 10)], (path, line)


def test_the_python_api_pages_are_made_from_the_docstrings(site):
    page = _page(site, "reference", "api", "testing")
    assert 'id="ascend_memsim.testing.machine.AllocatorMachine.user_extents"' in page
    from ascend_memsim.testing.machine import AllocatorMachine

    first = AllocatorMachine.user_extents.__doc__.split()[:6]
    assert " ".join(first) in " ".join(re.sub(r"<[^>]+>", " ", page).split())


# -- generated parts, without the site's packages -------------------------------------------------

def test_the_cli_page_is_generated_from_the_parsers():
    assert "<!-- cli-reference -->" in _read("docs", "reference", "cli.md")
    text = _hooks().cli_reference()
    for name, options in _options().items():
        assert f"## ascend-memsim {name}\n" in text
        for option in options:
            assert option in text, (name, option)
    assert set(_options()) >= {"demo", "explain", "run", "estimate", "replay", "plot", "stats"}


def test_each_decision_is_found_with_its_own_sentence():
    decisions = _hooks().decision_list()
    assert all("DECISION" in text for _, _, text in decisions)
    found = {(path, line) for path, line, _ in decisions}
    for folder, _, names in os.walk(os.path.join(ROOT, "ascend_memsim")):
        for name in names:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as f:
                    for number, line in enumerate(f, 1):
                        if re.search(r"\bDECISIONs?\b", line):
                            assert (os.path.relpath(path, ROOT), number) in found


def test_the_layer_picture_is_the_import_contract():
    """docs/internals/architecture.md draws the layers import-linter enforces: the same rooms,
    top to bottom, rooms of one floor on one line."""
    # the contract's list, read as text (tomllib is Python 3.11+; the package runs on 3.10)
    pyproject = _read("pyproject.toml")
    contract = pyproject[pyproject.index('type = "layers"'):]
    layers = re.findall(r'"(ascend_memsim[^"]*)"', contract[:contract.index("]")])
    floors = [[name.strip().removeprefix("ascend_memsim.") for name in layer.split(":")]
              for layer in layers]
    page = _read("docs", "internals", "architecture.md")
    picture = page[page.index("```text\n") + 8:]
    picture = picture[:picture.index("```")]
    drawn = []
    for line in picture.splitlines():
        # a floor starts in column 2 with its rooms (``name/`` or ``name.py``) before the notes
        match = re.match(r"^  (\S+(?: +\S+\.py| +\S+/)*)", line)
        if match and re.match(r"^[a-z_]+(/|\.py)$", match.group(1).split()[0]):
            rooms = [room.rstrip("/").removesuffix(".py") for room in match.group(1).split()
                     if re.match(r"^[a-z_]+(/|\.py)$", room)]
            drawn.append(rooms)
    assert drawn == floors


# -- README.md: the front door ------------------------------------------------------------------

def test_the_readme_is_short_and_starts_with_the_two_commands():
    readme = _read("README.md").splitlines()
    assert len(readme) <= 260
    top = "\n".join(readme[:20])
    assert ("    python3 -m venv .venv && . .venv/bin/activate && pip install . && "
            "ascend-memsim demo") in top
    test_command = ("    python3 -m venv .venv && . .venv/bin/activate && "
                    "pip install -e '.[test,torch,stacks]' && python -m pytest -q")
    assert test_command in top


def test_the_readme_test_command_is_the_one_ci_runs():
    # a newcomer's run is CI's: the same extras installed, the same pytest command
    readme = _read("README.md")
    ci = _read(".ci/run")
    extras = re.findall(r"pip install[^\n&;]*-e '\.\[([^\]]*)\]'", readme)
    ci_extras = re.findall(r"pip install[^\n&;]*-e '\.\[([^\]]*)\]'", ci)
    assert extras and extras[0] == ci_extras[0], (extras, ci_extras)
    command = next(line for line in readme.splitlines() if "pip install -e" in line)
    assert command.endswith("python -m pytest -q") and ci.rstrip().endswith("python -m pytest -q")


def test_the_readme_links_lead_into_the_docs():
    readme = _read("README.md")
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme)
    local = [link for link in links if "://" not in link]
    assert sum(link.startswith("docs/") for link in local) >= 8
    for link in local:
        assert os.path.exists(os.path.join(ROOT, link)), link


def test_the_readme_shows_each_of_the_four_users_a_working_example():
    readme = _read("README.md")
    paths = readme[readme.index("## Pick your path"):]
    sections = re.split(r"\n### ", paths)[1:]
    assert len(sections) == 4
    for section in sections:
        assert "```python" in section or "```console" in section, section[:40]
        assert "](docs/" in section, section[:40]
