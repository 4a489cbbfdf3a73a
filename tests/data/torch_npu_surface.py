r"""Inventory the public Python API surface of a real torch_npu wheel.

The wheel is read with ``zipfile`` and its Python files are parsed with
``ast``; nothing from it is imported or run (its C extension needs CANN).
The JSON it prints, kept as tests/data/torch_npu_surface.json, lets a test
measure what share of the real API the stand-in in ascend_memsim/torchsim
provides.  Regenerate it with (stdlib only, Python >= 3.9)::

    python tests/data/torch_npu_surface.py path/to/torch_npu-*.whl \
        > tests/data/torch_npu_surface.json
"""

import ast
import json
import os
import sys
import zipfile

# The modules asked for, then subpackages that user code imports directly.
MODULES = [
    "torch_npu", "torch_npu.npu", "torch_npu.npu.amp", "torch_npu.npu.memory",
    "torch_npu.npu.utils", "torch_npu.contrib", "torch_npu.contrib.transfer_to_npu",
    "torch_npu.optim", "torch_npu.utils", "torch_npu.profiler", "torch_npu.testing",
    "torch_npu.dynamo", "torch_npu.distributed", "torch_npu.onnx",
    "torch_npu.npu.aclnn", "torch_npu.profiler.dynamic_profile",
    "torch_npu.dynamo.torchair", "torch_npu.testing.testcase",
]
RULE = ("A module's public names are its literal __all__ (after literal += / extend / "
        "append), else its module-level functions, classes and variables not starting "
        "with '_' plus names it imports from public (non-underscore) torch_npu modules, "
        "never modules or helpers imported from torch, third parties or the stdlib.")
# torch_npu exports every torch.ops.npu op at import; OPS_VAR lists those it also
# appends to torch_npu.__all__, DOCS_FUNC is called once per documented op.
OPS_FILE, OPS_VAR = "torch_npu/utils/exposed_api.py", "public_npu_functions"
DOCS_FILE, DOCS_FUNC = "torch_npu/_op_plugin_docs.py", "_add_torch_npu_docstr"


def module_file(files, name):
    """Path in the wheel of module `name`, or None when it does not exist."""
    base = name.replace(".", "/")
    return next((p for p in (base + "/__init__.py", base + ".py") if p in files), None)


def assigns(node, name):
    """True if `node` is a (possibly annotated) assignment to `name`."""
    targets = getattr(node, "targets", [getattr(node, "target", None)])
    return isinstance(node, (ast.Assign, ast.AnnAssign)) and any(
        isinstance(t, ast.Name) and t.id == name for t in targets)


def literal_all(tree):
    """Names of a literal __all__ (with += / extend / append), else None."""
    names = None
    for node in tree.body:
        call = node.value if isinstance(node, ast.Expr) else None
        try:
            if assigns(node, "__all__"):
                names = list(ast.literal_eval(node.value))
            elif names is not None and isinstance(node, ast.AugAssign) \
                    and ast.unparse(node.target) == "__all__":
                names += ast.literal_eval(node.value)
            elif names is not None and isinstance(call, ast.Call) \
                    and ast.unparse(call.func) in ("__all__.extend", "__all__.append"):
                arg = ast.literal_eval(call.args[0])
                names += [arg] if isinstance(arg, str) else list(arg)
        except ValueError:  # computed, not literal: use the fallback
            return None
    return names


def top_level(body):
    """Module-level statements, looking inside if / try blocks."""
    for node in body:
        if isinstance(node, (ast.If, ast.Try)):
            yield from top_level(node.body + node.orelse + getattr(node, "finalbody", []))
            for handler in getattr(node, "handlers", []):
                yield from top_level(handler.body)
        else:
            yield node


def defined_names(files, tree, name):
    """The fallback of RULE for a module without a literal __all__."""
    is_package = module_file(files, name).endswith("__init__.py")
    package = (name if is_package else name.rpartition(".")[0]).split(".")
    names = set()
    for node in top_level(tree.body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in getattr(node, "targets", [getattr(node, "target", None)]):
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, ast.ImportFrom):
            parts = package[:len(package) + 1 - node.level] if node.level else []
            parts += node.module.split(".") if node.module else []
            if parts[0] == "torch_npu" and not any(p.startswith("_") for p in parts):
                source = ".".join(parts)
                names.update(a.asname or a.name for a in node.names if a.name != "*"
                             and not module_file(files, f"{source}.{a.name}"))
    return sorted(n for n in names if not n.startswith("_"))


def main(wheel):
    with zipfile.ZipFile(wheel) as zf:
        files = {p: zf.read(p).decode("utf-8") for p in zf.namelist() if p.endswith(".py")}
    trees = {}

    def tree(path):
        return trees.setdefault(path, ast.parse(files[path], path))

    modules, missing, aliases = {}, [], {}
    for name in MODULES:
        path = module_file(files, name)
        if path is None:
            missing.append(name)
            continue
        names = literal_all(tree(path))
        modules[name] = sorted(set(names)) if names is not None \
            else defined_names(files, tree(path), name)
    # torch._register_device_module("npu", torch_npu.npu) makes torch.npu an alias.
    for path in sorted(p for p in files if "_register_device_module(" in files[p]):
        for node in ast.walk(tree(path)):
            if isinstance(node, ast.Call) and len(node.args) == 2 \
                    and ast.unparse(node.func).endswith("_register_device_module") \
                    and isinstance(node.args[0], ast.Constant):
                aliases["torch." + node.args[0].value] = {
                    "target": ast.unparse(node.args[1]), "source": path}
    ops = next(ast.literal_eval(n.value) for n in tree(OPS_FILE).body if assigns(n, OPS_VAR))
    documented = {n.args[0].value for n in ast.walk(tree(DOCS_FILE)) if isinstance(n, ast.Call)
                  and ast.unparse(n.func) == DOCS_FUNC and isinstance(n.args[0], ast.Constant)}
    return {
        "wheel": os.path.basename(wheel),
        "made_by": "tests/data/torch_npu_surface.py",
        "rule": RULE,
        "modules": modules,
        "missing_modules": missing,
        "aliases": aliases,
        "operators": {"source": f"{OPS_FILE} ({OPS_VAR})", "names": sorted(set(ops)),
                      "documented": {"source": f"{DOCS_FILE} ({DOCS_FUNC} calls)",
                                     "names": sorted(documented)}},
    }


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    json.dump(main(sys.argv[1]), sys.stdout, indent=1)
    sys.stdout.write("\n")
