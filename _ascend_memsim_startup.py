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
