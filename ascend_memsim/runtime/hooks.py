"""The hook interface through which checks attach to the runtime.

The runtime, the data plane and the streams call a *checker* (the sanitizer) at fixed points:
before a free, at every access to memory, when a device is reset. The checker lives in a
higher layer (:mod:`ascend_memsim.checks`), so the runtime never imports it: that layer
registers a factory here with :func:`register_checker` when it is imported (importing
``ascend_memsim`` does), and :class:`~ascend_memsim.runtime.runtime.Runtime` asks
:func:`make_checker` for one. Observers (statistics, traces) attach the same way, through
``Runtime.add_observer``; fault injection through ``Runtime.add_interceptor``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["Checker", "register_checker", "make_checker"]


class Checker(Protocol):
    """What the runtime and its planes call on their checker (see ``checks.sanitizer``).

    ``on`` is read on every free and access; the checks must still refuse what the runtime
    refuses (with its error) when ``on`` is false.
    """

    on: bool
    record_sites: bool
    initcheck: bool
    leak_check: bool
    #: ``leak_sink(call, leaked)``: given everything live at each reset / finalize, or None
    leak_sink: Callable[[str, list[Any]], None] | None

    def attach(self, runtime: Any) -> None: ...
    def detach(self, runtime: Any) -> None: ...
    def capture(self) -> Any: ...
    def free(self, device: Any, ptr: int, call: str, block: Any = False,
             skip: int = 0) -> None: ...
    def free_host(self, host: Any, ptr: int) -> None: ...
    def forget_device(self, device: Any) -> None: ...
    def unmapped(self, mapping: Any) -> None: ...
    def leaks(self, call: str, blocks: list[Any]) -> None: ...
    def bad_address(self, call: str, addr: int, count: int, write: bool) -> None: ...
    def out_of_bounds(self, call: str, addr: int, count: int, write: bool,
                      region: Any) -> None: ...
    def padding_access(self, call: str, addr: int, count: int, write: bool,
                       region: Any) -> None: ...
    def readonly_write(self, call: str, addr: int, count: int, region: Any) -> None: ...
    def uninitialized_read(self, call: str, addr: int, count: int, region: Any,
                           gap: Any) -> None: ...
    def wrong_memory(self, call: str, addr: int, count: int, write: bool, region: Any,
                     why: str) -> None: ...
    def media_overflow(self, call: str, addr: int, count: int, write: bool, region: Any,
                       why: str) -> None: ...
    def kernel_error(self, call: str, where: str) -> None: ...
    def ipc_close_order(self, call: str, addr: int, size: int, where: str, *,
                        fail: bool = True) -> None: ...
    def unchecked_host(self, call: str, addr: int, count: int, write: bool) -> None: ...


_factory: Callable[[Any], Checker] | None = None


def register_checker(factory: Callable[[Any], Checker]) -> None:
    """Make ``factory(spec)`` the maker of every new runtime's checker."""
    global _factory
    _factory = factory


def make_checker(spec: Any) -> Checker:
    """A checker from ``spec`` (a mode, a dict of options or a checker), by the registered
    factory."""
    if _factory is None:
        raise RuntimeError("no checker is registered: import ascend_memsim.checks (any name "
                           "imported from ascend_memsim does) first")
    return _factory(spec)
