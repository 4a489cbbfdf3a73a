"""The startup hook of ascend-memsim: with ``ASCEND_MEMSIM`` set, ``import acl`` is the simulator.

``ascend_memsim.pth``, installed next to this module in site-packages, runs one line at every
interpreter start: it reads the environment variable and, only when it is set to something
other than ``0``/``false``/``no``/``off``, calls :func:`install`. So the hook costs one
environment lookup when the variable is unset. :func:`install` adds a finder to
``sys.meta_path`` and imports nothing: ``ascend_memsim`` is imported at the first
``import acl``, as numba's ``NUMBA_ENABLE_CUDASIM`` switches ``numba.cuda``.

The switch's words live in ``ascend_memsim/memory/switch.py``, the package's lowest layer; the
``.pth`` line spells the off words inline and this module needs none, so nothing here imports
the package before ``import acl`` (and the package never imports this module).

With ``ASCEND_MEMSIM_ESTIMATE`` set (an estimate sets it while the script runs, so the
processes the script starts inherit it), :func:`install_torch_npu` makes ``import torch_npu``
the estimate's stand-in in that interpreter too: a worker started by spawn or forkserver (a
DataLoader's, a ``multiprocessing.Pool``'s) imports the script's modules again, and they
import torch_npu.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys


class _Loader(importlib.abc.Loader):
    def create_module(self, spec):
        from ascend_memsim.acl import install_acl

        install_acl()
        module = sys.modules["acl"]
        self._spec = module.__spec__
        return module

    def exec_module(self, module):
        # already executed as ascend_memsim.acl: keep the spec it was imported with
        module.__spec__ = self._spec


class _Finder(importlib.abc.MetaPathFinder):
    """Answers ``import acl`` (before the real pyacl) with the simulator's module."""

    def find_spec(self, name, path=None, target=None):
        if name != "acl":
            return None
        return importlib.util.spec_from_loader("acl", _Loader())


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (once)."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


class _TorchNpuFinder(importlib.abc.MetaPathFinder):
    """Answers ``import torch_npu`` (and its submodules) with the estimate's stand-in, in a
    process an estimate's script started; the package is imported at that import."""

    def _finder(self):
        from ascend_memsim.torchsim.standin import finder

        return finder()

    def find_spec(self, name, path=None, target=None):
        if name != "torch_npu" and not name.startswith("torch_npu."):
            return None
        return self._finder().find_spec(name, path, target)

    def find_distributions(self, context=None):
        name = getattr(context, "name", None)
        if name is None or name.replace("-", "_").lower() == "torch_npu":
            return self._finder().find_distributions(context)
        return iter(())


def install_torch_npu() -> None:
    """Put the torch_npu finder on ``sys.meta_path`` (once)."""
    if not any(isinstance(f, _TorchNpuFinder) for f in sys.meta_path):
        sys.meta_path.append(_TorchNpuFinder())
