"""The documentation site's build hook: pages made from the code, so that they cannot drift.

mkdocs runs :func:`on_page_markdown` for every page (``hooks:`` in ``mkdocs.yml``). Two markers
are replaced there:

- ``<!-- cli-reference -->`` (docs/reference/cli.md): the help of ``ascend-memsim`` and of
  every subcommand, rendered from the argument parser the command line itself uses
  (:func:`cli_reference`);
- ``<!-- decisions -->`` (docs/internals/decisions.md): every ``DECISION`` written in the
  package's code, with its file and line (:func:`decisions`).

tests/test_docs.py builds the site and checks that the built pages hold every subcommand,
every option and every DECISION.
"""

from __future__ import annotations

import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "ascend_memsim")

#: the width argparse wraps the help at on the page (it reads COLUMNS)
HELP_WIDTH = 96


def subcommands() -> dict[str, object]:
    """``{name: parser}`` for every subcommand of ``ascend-memsim``, in the parser's order."""
    import argparse

    from ascend_memsim.cli import _parser

    parser = _parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _help(parser) -> str:
    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(HELP_WIDTH)
    try:
        return parser.format_help()
    finally:
        if saved is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = saved


def cli_reference() -> str:
    """Markdown: the help of ``ascend-memsim`` and of each subcommand, as ``--help`` prints it.

    >>> "## ascend-memsim replay" in cli_reference()
    True
    """
    from ascend_memsim.cli import _parser

    parts = ["## ascend-memsim", "", "```text", _help(_parser()).rstrip(), "```", ""]
    for name, parser in subcommands().items():
        parts += [f"## ascend-memsim {name}", "", "```text", _help(parser).rstrip(), "```", ""]
    return "\n".join(parts)


_WORD = re.compile(r"\bDECISION(?:s)?\b")


def _paragraph(lines: list[str], index: int) -> tuple[str, int]:
    """The comment block or docstring paragraph around ``lines[index]`` as one line of text,
    and where ``lines[index]``'s DECISION is in it."""
    line = lines[index]
    word = _WORD.search(line).start()
    hash_at = line.find("#")
    if 0 <= hash_at < word:
        # a comment: the comment lines around it (a trailing comment is a block of its own)
        def part(text: str) -> bool:
            return text.lstrip().startswith("#") and text.strip() != "#"
        first = last = index
        if line.lstrip().startswith("#"):
            while first > 0 and part(lines[first - 1]):
                first -= 1
        while last + 1 < len(lines) and part(lines[last + 1]):
            last += 1
        texts = [line[hash_at:] if number == index else lines[number]
                 for number in range(first, last + 1)]
        clean = [text.strip().lstrip("#").lstrip(":").strip() for text in texts]
    else:
        # a docstring: its non-blank lines around it, not past the quotes
        def opens(text: str) -> bool:
            body = text.strip()
            return body.startswith(('"""', 'r"""')) and body != '"""'

        def closes(text: str) -> bool:
            body = text.strip()
            return '"""' in (body[3:] if opens(text) else body)

        first = last = index
        while first > 0 and not opens(lines[first]) and lines[first - 1].strip() \
                and not closes(lines[first - 1]):
            first -= 1
        while last + 1 < len(lines) and not closes(lines[last]) and lines[last + 1].strip() \
                and not opens(lines[last + 1]):
            last += 1
        clean = [text.strip().replace('r"""', "").replace('"""', "").strip()
                 for text in lines[first:last + 1]]
    before = " ".join(clean[:index - first])
    own = clean[index - first]
    at = len(before) + (1 if before else 0) + own.find(_WORD.search(own).group())
    return " ".join(clean), at


def _sentence(text: str, at: int) -> str:
    """The sentence around the DECISION at ``text[at]`` (at most ~600 characters)."""
    starts = [m.end() for m in re.finditer(r"[.;:]\s+(?=[A-Z`(*])", text[:at])]
    start = starts[-1] if starts else 0
    if at - start > 240:     # a long sentence before the word: start at the word itself
        start = at
    match = re.search(r"[.;](?=\s+[A-Z`(*]|\s*$)", text[at + 9:])
    end = at + 9 + match.end() if match else len(text)
    sentence = text[start:end].strip()
    if len(sentence) > 600:
        sentence = sentence[:597].rsplit(" ", 1)[0] + " ..."
    return sentence


def decision_list() -> list[tuple[str, int, str]]:
    """``(path, line, text)`` of every DECISION in the package's Python files, in path order.

    >>> any(path.endswith("memory/rules.py") for path, _, _ in decision_list())
    True
    """
    found = []
    for folder, dirs, files in os.walk(PACKAGE):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            path = os.path.join(folder, name)
            with open(path, encoding="utf-8") as f:
                lines = f.read().splitlines()
            for number, line in enumerate(lines):
                if _WORD.search(line):
                    text = _sentence(*_paragraph(lines, number))
                    found.append((os.path.relpath(path, ROOT), number + 1, text))
    return found


def _escape(text: str) -> str:
    # keep the text as written: no markup from it (a `*` or `_` of a comment is not emphasis)
    return re.sub(r"([\\*_<>\[\]|])", r"\\\1", text)


def decisions() -> str:
    """Markdown: every DECISION of the code, grouped by module, each with its file and line."""
    parts, module = [], None
    entries = decision_list()
    parts.append(f"{len(entries)} decisions in "
                 f"{len({path for path, _, _ in entries})} modules.\n")
    for path, line, text in entries:
        if path != module:
            module = path
            parts += ["", f"## `{path}`", ""]
        parts.append(f"- line {line}: {_escape(text)}")
    return "\n".join(parts) + "\n"


MARKERS = {"<!-- cli-reference -->": cli_reference, "<!-- decisions -->": decisions}


def on_page_markdown(markdown: str, page=None, config=None, files=None) -> str:
    """mkdocs' hook: replace each marker with the text made from the code."""
    for marker, make in MARKERS.items():
        if marker in markdown:
            markdown = markdown.replace(marker, make())
    return markdown


# -- docstrings: the package writes them for Sphinx and doctest; the site reads Markdown --------

_ROLE = re.compile(r":(?:func|class|meth|attr|data|mod|exc|obj|const|ref):`(~?[^`]+)`")
_TABLE_RULE = re.compile(r"^\s*=+(?:\s+=+)+\s*$")


def _code(role: re.Match) -> str:
    name = role.group(1)
    return f"`{name[1:].rsplit('.', 1)[-1]}`" if name.startswith("~") else f"`{name}`"


def markdown_docstring(text: str) -> str:
    """A docstring written for Sphinx and doctest, as Markdown: doctest examples, ``::``
    literal blocks and ``====`` tables fenced as code, roles (``:func:`name```) as code.

    >>> markdown_docstring("See :func:`~ascend_memsim.observe.replay.replay`.")
    'See `replay`.'
    >>> markdown_docstring(">>> 1 + 1\\n2").splitlines()
    ['```pycon', '>>> 1 + 1', '2', '```']
    """
    lines = text.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.lstrip()
        indent = line[:len(line) - len(stripped)]
        if stripped.startswith(">>>"):
            block = []
            while i < len(lines) and lines[i].strip():
                block.append(lines[i])
                i += 1
            out += [indent + "```pycon", *block, indent + "```"]
            continue
        if _TABLE_RULE.match(line):
            block, rules = [], 0
            while i < len(lines) and rules < 3:
                rules += bool(_TABLE_RULE.match(lines[i]))
                block.append(lines[i])
                i += 1
            out += [indent + "```text", *block, indent + "```"]
            continue
        if stripped.endswith("::") and not stripped.startswith(".."):
            # an RST literal block: the indented lines after the blank one
            out.append(line[:-1] if stripped != "::" else "")
            i += 1
            block = []
            while i < len(lines) and (not lines[i].strip() or
                                      len(lines[i]) - len(lines[i].lstrip()) > len(indent)):
                block.append(lines[i])
                i += 1
            while block and not block[-1].strip():
                block.pop()
            body = [b for b in block if b.strip()]
            cut = min((len(b) - len(b.lstrip()) for b in body), default=0)
            out += ["", indent + "```text", *(indent + b[cut:] for b in block),
                    indent + "```", ""]
            continue
        out.append(_ROLE.sub(_code, line))
        i += 1
    return "\n".join(out)


try:
    import griffe
except ImportError:  # the hooks' doctests run without the docs' packages too
    griffe = None
else:
    class SphinxDocstrings(griffe.Extension):
        """Griffe extension (``extensions:`` in mkdocs.yml): every docstring through
        :func:`markdown_docstring` before mkdocstrings renders it."""

        def on_instance(self, *, obj, **kwargs) -> None:
            if obj.docstring is not None:
                obj.docstring.value = markdown_docstring(obj.docstring.value)
