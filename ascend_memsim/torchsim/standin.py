"""``import torch_npu`` during an estimate: the stand-in package, served under the real names.

As :func:`ascend_memsim.acl.install_acl` serves pyacl programs, :func:`install_torch_npu`
puts a finder first on ``sys.meta_path`` that answers ``torch_npu`` and every
``torch_npu.X`` with the module of the same place in the stand-in tree
(:mod:`ascend_memsim.torchsim.torch_npu`), the way numba's CUDA simulator swaps in under
the real names. A finder, not bare entries in ``sys.modules``, so the probes libraries make
before they import work as with the real package: ``importlib.util.find_spec("torch_npu")``
(transformers, accelerate, peft, DeepSpeed's accelerator choice) finds a spec, and
``importlib.metadata.version("torch_npu")`` (or ``"torch-npu"``) finds a distribution of the
stand-in's version. :func:`uninstall_torch_npu` takes the finder away, undoes what modules
such as ``transfer_to_npu`` changed in torch, and puts back the ``sys.modules`` entries as
they were.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.metadata
import importlib.util
import re
import sys
import types
from collections.abc import Iterator
from typing import Any

__all__ = ["install_torch_npu", "uninstall_torch_npu", "finder", "TREE"]

#: the stand-in package that ``torch_npu`` names
TREE = "ascend_memsim.torchsim.torch_npu"


def _tree_name(name: str) -> str:
    return TREE + name[len("torch_npu"):]


class _Loader(importlib.abc.Loader):
    """Gives the stand-in tree's module for a ``torch_npu`` name."""

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = importlib.import_module(_tree_name(spec.name))
        self._spec = module.__spec__
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        # already executed under its own name: keep that spec (importlib set the alias's)
        module.__spec__ = self._spec


class _Distribution(importlib.metadata.Distribution):
    """The stand-in's package metadata: its name and version."""

    def read_text(self, filename: str) -> str | None:
        if filename != "METADATA":
            return None
        version = importlib.import_module(TREE).__version__
        return (f"Metadata-Version: 2.1\nName: torch_npu\nVersion: {version}\n"
                f"Summary: ascend-memsim's stand-in for torch_npu (fake tensors on a "
                f"simulated NPU)\n")

    def locate_file(self, path: Any) -> Any:
        return path


class _Finder(importlib.abc.MetaPathFinder):
    """First on ``sys.meta_path`` while an estimate runs: the ``torch_npu`` names."""

    def find_spec(self, name: str, path: Any = None,
                  target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name != "torch_npu" and not name.startswith("torch_npu."):
            return None
        tree = importlib.util.find_spec(_tree_name(name))
        if tree is None:
            return None
        return importlib.util.spec_from_loader(
            name, _Loader(), is_package=tree.submodule_search_locations is not None)

    def find_distributions(self, context: Any = None
                           ) -> Iterator[importlib.metadata.Distribution]:
        name = getattr(context, "name", None)
        if name is None or re.sub(r"[-_.]+", "_", name).lower() == "torch_npu":
            yield _Distribution()


def finder() -> importlib.abc.MetaPathFinder:
    """A finder of the stand-in under the real names (for the startup hook of a process an
    estimate's script started)."""
    return _Finder()


def install_torch_npu() -> dict:
    """Make ``import torch_npu`` (and ``torch_npu.X``) give the stand-in; what was there."""
    previous = {name: module for name, module in sys.modules.items()
                if name == "torch_npu" or name.startswith("torch_npu.")}
    for name in previous:
        del sys.modules[name]
    sys.meta_path.insert(0, _Finder())
    return previous


def uninstall_torch_npu(previous: dict) -> None:
    """Undo :func:`install_torch_npu` (and what the stand-in's modules changed in torch)."""
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _Finder)]
    transfer = sys.modules.pop(TREE + ".contrib.transfer_to_npu", None)
    if transfer is not None:
        # undone, and forgotten: the next estimate's import runs the module again
        transfer.undo()
        vars(sys.modules[TREE + ".contrib"]).pop("transfer_to_npu", None)
    for name in [n for n in sys.modules if n == "torch_npu" or n.startswith("torch_npu.")]:
        del sys.modules[name]
    sys.modules.update(previous)
