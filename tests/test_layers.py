"""The layering is kept: import-linter's contract (pyproject.toml) and no import cycles."""

import pathlib
import subprocess
import sys

import grimp

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_the_layers_contract_is_kept():
    # In a process of its own: import-linter configures logging (dictConfig), which would
    # disable the loggers of the tests that run after it in this one (acl.app's, say).
    done = subprocess.run(
        [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports; "
         "sys.exit(lint_imports(config_filename='pyproject.toml'))"],
        cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0 and "0 broken" in done.stdout, done.stdout + done.stderr


def test_no_module_imports_itself_back():
    graph = grimp.build_graph("ascend_memsim")
    # The package's __init__ re-exports the public names: it imports everything, by design.
    modules = sorted(m for m in graph.modules if m != "ascend_memsim")
    edges = {m: {t for t in graph.find_modules_directly_imported_by(m) if t in modules}
             for m in modules}
    # Tarjan's strongly connected components: any with two modules or more is a cycle.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in modules:
        if module not in index:
            visit(module)
    assert cycles == []
