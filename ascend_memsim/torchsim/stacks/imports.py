"""A post-import hook for the stacks' adaptations: while a run lasts, a module the stack
wants is found by the finders after this one, and handed to the stack once it has executed,
so a stack imported by the script (not yet in ``sys.modules``) is adapted as it arrives.
One implementation for every stack (:mod:`.hf`, :mod:`.deepspeed`, :mod:`.megatron`,
:mod:`.torchtitan`)."""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["AfterImport", "Adaptations"]


class _AfterExec(importlib.abc.Loader):
    """A module's own loader, then ``after(module)``; the module keeps its own loader (this
    one holds the run)."""

    def __init__(self, loader: Any, after: Callable[[Any], None]) -> None:
        self.loader, self.after = loader, after

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        module.__loader__ = self.loader
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        self.after(module)

    def __getattr__(self, name: str) -> Any:
        # get_source, get_resource_reader, is_package...: the module's own loader answers
        return getattr(self.loader, name)


class AfterImport(importlib.abc.MetaPathFinder):
    """First on ``sys.meta_path`` from :meth:`install` to :meth:`remove`: a module whose
    name ``wanted`` accepts is found by the finders after this one, and ``after(module)`` is
    called once it has executed; ``found(name)``, if given, first (before the module runs).
    O(1) for any other module (``wanted`` is a set lookup in every stack)."""

    def __init__(self, wanted: Callable[[str], bool], after: Callable[[Any], None],
                 found: Callable[[str], None] | None = None) -> None:
        self.wanted, self.after, self.found = wanted, after, found

    def install(self) -> AfterImport:
        sys.meta_path.insert(0, self)
        return self

    def remove(self) -> None:
        sys.meta_path[:] = [f for f in sys.meta_path if f is not self]

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if not self.wanted(name):
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(name, path, target)
            if spec is not None:
                if self.found is not None:
                    self.found(name)
                if spec.loader is not None:
                    spec.loader = _AfterExec(spec.loader, self.after)
                return spec
        return None


class Adaptations:
    """One run's adaptations of a stack: ``watch(name, adapt)`` applies ``adapt(module,
    session)`` (which gives its undo) to the module ``name`` now if it is imported, else when
    it is; :meth:`undo` removes the hook and undoes every adaptation applied, last first."""

    def __init__(self, session: Any) -> None:
        self.session = session
        #: module name -> the adaptation to apply when it is imported
        self.pending: dict[str, Callable[[Any, Any], Callable[[], None]]] = {}
        self.undos: list[Callable[[], None]] = []
        self.watcher = AfterImport(self.pending.__contains__, self.imported).install()

    def watch(self, name: str, adapt: Callable[[Any, Any], Callable[[], None]]) -> None:
        module = sys.modules.get(name)
        if module is not None:
            self.undos.append(adapt(module, self.session))
        else:
            self.pending[name] = adapt

    def imported(self, module: Any) -> None:
        adapt = self.pending.pop(module.__name__, None)
        if adapt is not None:
            self.undos.append(adapt(module, self.session))

    def undo(self) -> None:
        self.watcher.remove()
        while self.undos:
            self.undos.pop()()
