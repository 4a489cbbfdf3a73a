"""The house rule on size (STYLE.md): a class past 350 lines or a module past 600 lines says
why in its docstring ("Size: ... because ...") or gets split, so no file grows unnoticed."""

import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "ascend_memsim")
MAX_CLASS_LINES = 350
MAX_MODULE_LINES = 600


def unexplained(source: str, name: str) -> list[str]:
    """What in ``source`` is over its size without a ``Size:`` in its docstring.

    A module's ``Size:`` also speaks for its class when that class is the only one over
    350 lines in it (the module is that class, and says so once).
    """
    tree = ast.parse(source)
    module_doc = ast.get_docstring(tree) or ""
    found = []
    lines = len(source.splitlines())
    if lines > MAX_MODULE_LINES and "Size:" not in module_doc:
        found.append(f"module {name}: {lines} lines")
    big = [node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)
           and node.end_lineno - node.lineno + 1 > MAX_CLASS_LINES]
    for node in big:
        if "Size:" in (ast.get_docstring(node) or ""):
            continue
        if len(big) == 1 and "Size:" in module_doc:
            continue
        found.append(f"class {name}:{node.lineno} {node.name}: "
                     f"{node.end_lineno - node.lineno + 1} lines")
    return found


def test_big_classes_and_modules_say_why():
    found = []
    for folder, dirs, files in os.walk(PACKAGE):
        dirs.sort()
        for file in sorted(files):
            if file.endswith(".py"):
                path = os.path.join(folder, file)
                with open(path, encoding="utf-8") as f:
                    found += unexplained(f.read(), os.path.relpath(path, ROOT))
    assert not found, (
        f"past {MAX_CLASS_LINES} lines (a class) or {MAX_MODULE_LINES} (a module) without a "
        f"reason: split it where a reader would, or say why in its docstring "
        f"('Size: ... because ...'):\n  " + "\n  ".join(found))


def _class(name: str, body_lines: int, doc: str = "A class.") -> str:
    return (f"class {name}:\n    \"\"\"{doc}\"\"\"\n"
            + "".join(f"    x{i} = {i}\n" for i in range(body_lines)))


def test_the_rule_catches_what_it_should():
    big = _class("Big", MAX_CLASS_LINES)
    assert unexplained(big, "m.py") == ["class m.py:1 Big: 352 lines"]
    assert unexplained(_class("Big", MAX_CLASS_LINES, "Size: big because."), "m.py") == []
    assert unexplained(_class("Small", MAX_CLASS_LINES - 2), "m.py") == []
    # the module's reason speaks for its one big class, not for two
    assert unexplained('"""Size: one class."""\n' + big, "m.py") == []
    two = '"""Size: one class."""\n' + big + _class("Other", MAX_CLASS_LINES)
    assert unexplained(two, "m.py") == ["class m.py:2 Big: 352 lines",
                                        "class m.py:354 Other: 352 lines"]
    long_module = "x = 1\n" * (MAX_MODULE_LINES + 1)
    assert unexplained(long_module, "m.py") == ["module m.py: 601 lines"]
    assert unexplained('"""Size: long because."""\n' + long_module, "m.py") == []
