"""ASCEND_MEMSIM=1 (or a product name): `import acl` is the simulator in any Python process.

Run in subprocesses of this environment, where the package is installed with its startup
hook (site-packages/ascend_memsim.pth).
"""

import os
import pathlib
import site
import subprocess
import sys
import textwrap

import pytest

HOOK = "ascend_memsim.pth"
_SITE_DIRS = [*site.getsitepackages(), site.getusersitepackages()]
pytestmark = pytest.mark.skipif(
    not any((pathlib.Path(d) / HOOK).exists() for d in _SITE_DIRS),
    reason="the package is not installed here with its startup hook (pip install -e .)")

UNCHANGED_PROGRAM = """
    import sys
    import acl                                      # a program written for the hardware
    assert acl.init() == 0 and acl.rt.set_device(0) == 0
    ptr, ret = acl.rt.malloc(100, 0)
    from ascend_memsim import current_runtime
    rt = current_runtime()
    print(acl.__name__, rt.profile.name, rt.block(ptr).rule_size)
    acl.rt.free(ptr)
    acl.rt.reset_device(0)
    acl.finalize()
"""


def python(code, value):
    env = {k: v for k, v in os.environ.items() if k != "ASCEND_MEMSIM"}
    if value is not None:
        env["ASCEND_MEMSIM"] = value
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, cwd=os.path.dirname(__file__))


@pytest.mark.parametrize(("value", "product", "rule_size"), [("1", "A2", 160),
                                                             ("950PR", "950PR", 128)])
def test_the_variable_makes_import_acl_the_simulator(value, product, rule_size):
    done = python(UNCHANGED_PROGRAM, value)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["ascend_memsim.acl", product, str(rule_size)]


@pytest.mark.parametrize("value", [None, "0", "off"])
def test_unset_or_off_the_hook_imports_nothing(value):
    done = python("""
        import sys
        assert "ascend_memsim" not in sys.modules, "imported at startup"
        assert "_ascend_memsim_startup" not in sys.modules, "hook module imported"
        try:
            import acl
        except ModuleNotFoundError:
            print("no acl")
        else:
            print(acl.__name__)
    """, value)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() != "ascend_memsim.acl"


def test_an_unknown_product_is_an_error_code_not_a_crash():
    done = python("""
        import acl
        print(acl.init())
        print(acl.get_recent_err_msg())
    """, "H100")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "100000" and "H100" in "\n".join(lines[1:])


def test_the_hook_line_and_the_runtime_know_the_same_off_words():
    """``ascend_memsim.pth`` spells the off words inline (so an unset variable imports
    nothing); they must be the package's own (``memory/switch.py``), which ``env_product``
    reads too."""
    import ast

    from ascend_memsim.memory import switch

    line = (pathlib.Path(__file__).parent.parent / HOOK).read_text(encoding="utf-8")
    inline = next(node for node in ast.walk(ast.parse(line))
                  if isinstance(node, ast.Tuple))
    assert ast.literal_eval(inline) == switch.OFF_WORDS
    assert f'"{switch.VARIABLE}"' in line


def test_the_hook_and_the_package_import_neither_each_other():
    """Issue 16 (8): the runtime took its words from the hook module, which imports the
    face: a loop. Now the package never imports the hook, and the hook imports no part of
    the package until ``import acl``; ``memory/switch.py`` imports nothing."""
    done = python("""
        import sys
        import ascend_memsim.acl  # the face, the runtime and env_product
        assert "_ascend_memsim_startup" not in sys.modules, "the package imports the hook"
        import _ascend_memsim_startup
        for name in [m for m in sys.modules if m.startswith("ascend_memsim")]:
            del sys.modules[name]
        import importlib
        importlib.reload(_ascend_memsim_startup)
        assert not any(m.startswith("ascend_memsim") for m in sys.modules), "hook imports"
        print("ok")
    """, None)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["ok"]
    source = (pathlib.Path(__file__).parent.parent / "ascend_memsim" / "memory"
              / "switch.py").read_text(encoding="utf-8")
    import ast
    assert not [node for node in ast.walk(ast.parse(source))
                if isinstance(node, (ast.Import, ast.ImportFrom))]
