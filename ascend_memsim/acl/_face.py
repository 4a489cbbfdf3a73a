"""The one place the pyacl face turns the core's exceptions into aclError codes.

Every face function is wrapped by :func:`face`: out-values first, the code last; on an
:class:`~ascend_memsim.memory.errors.AclError` the defaults stand in for the out-values and
the error's code is returned (its message kept for ``acl.get_recent_err_msg``). A bug in the
simulator (any other exception) still raises.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

from ..compute.plane import ComputePlane, compute_plane
from ..memory.errors import AclError
from ..runtime.active import current_runtime
from ..runtime.runtime import Runtime

__all__ = ["face", "get_recent_err_msg", "remember_error", "forget_error", "compute",
           "face_dir"]

_last = threading.local()


def face(*defaults: Any, bare: bool = False, route: str | None = None,
         ok: Any = 0) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Wrap a core call in pyacl's return convention.

    With no ``defaults`` the wrapped call returns just the code. With one, ``(value, code)``;
    with several, the call's tuple then the code. On an AclError the defaults stand in for
    the out-values and the error's code is returned; its message is kept for
    :func:`get_recent_err_msg`. ``bare``: the C function returns a value (or void), not an
    aclError, so pyacl returns just the value: the call's result, or ``defaults[0]`` on an
    error (``acl.create_tensor_desc`` gives 0, ``destroy_tensor_desc`` None).

    ``route``: the wrapped function is ``current_runtime().<route>(<its arguments>)`` and
    nothing else; the wrapper makes that call itself (the hot calls, malloc and free: one
    Python frame less per call, and per stack capture).

    ``ok``: what a call with no ``defaults`` returns on success (0, the code; ``None`` for a
    call that pyacl makes return nothing unless it fails, as ``acl.app_log``).

    The wrapped call takes its arguments by position only: pyacl's functions are METH_VARARGS
    (``python/pyACL/*/py*_methods.cpp``), so a keyword argument is a TypeError there, and it
    is one here (Python's own, raised before the call).
    """

    if route is not None and (bare or len(defaults) > 1):
        raise ValueError("route is for calls returning a code, or one value and a code")

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        # One closure per return convention, so a successful call does no more than it must.
        if route is not None:
            call = _routed(route, defaults)
        elif bare:
            def call(*args: Any) -> Any:
                try:
                    return fn(*args)
                except AclError as error:
                    remember_error(error)
                    return defaults[0]
        elif not defaults:
            def call(*args: Any) -> Any:
                try:
                    fn(*args)
                except AclError as error:
                    remember_error(error)
                    return int(error.code)
                return ok
        elif len(defaults) == 1 and isinstance(defaults[0], (list, dict)):
            # a fresh empty list or dict per failed call, as pyacl builds one: a shared
            # default would carry what one caller put in it to the next
            fresh = type(defaults[0])

            def call(*args: Any) -> Any:
                try:
                    return fn(*args), 0
                except AclError as error:
                    remember_error(error)
                    return fresh(), int(error.code)
        elif len(defaults) == 1:
            def call(*args: Any) -> Any:
                try:
                    return fn(*args), 0
                except AclError as error:
                    remember_error(error)
                    return defaults[0], int(error.code)
        else:
            def call(*args: Any) -> Any:
                try:
                    out = fn(*args)
                except AclError as error:
                    remember_error(error)
                    return (*defaults, int(error.code))
                return (*out, 0)

        wrapped: Any = functools.wraps(fn)(call)
        #: True when the call returns no code (tests read it)
        wrapped.bare = bare
        #: the return convention, for a caller that answers for the call without making it
        #: (an owner refusing a worker's call, ascend_memsim.remote)
        wrapped.defaults, wrapped.ok = defaults, ok
        #: the call that looks the runtime up through current_runtime (a routed one's hot
        #: path reads only the active list, which an acting thread must not use)
        wrapped.unrouted = wrapped if route is None else face(*defaults, ok=ok)(fn)
        return wrapped

    return wrap


def _routed(name: str, defaults: tuple) -> Callable[..., Any]:
    """The face of ``current_runtime().<name>(...)``, the runtime and its method looked up
    inside the call (a runtime may be entered or left between calls)."""
    active = Runtime.active
    if defaults:
        default = defaults[0]

        def call(*args: Any) -> Any:
            try:
                return getattr(_active_runtime(active), name)(*args), 0
            except AclError as error:
                remember_error(error)
                return default, int(error.code)
    else:
        def call(*args: Any) -> Any:
            try:
                getattr(_active_runtime(active), name)(*args)
            except AclError as error:
                remember_error(error)
                return int(error.code)
            return 0
    return call


def remember_error(error: AclError) -> None:
    """Keep ``error``'s message for :func:`get_recent_err_msg` (this thread)."""
    _last.message = str(error)


def forget_error() -> None:
    """Clear this thread's last error message."""
    _last.message = ""


def get_recent_err_msg() -> str:
    """The message of the last error a face call on this thread returned ('' if none)."""
    return getattr(_last, "message", "")


def _active_runtime(active: list) -> Runtime:
    """The innermost active runtime: ``active[-1]``, read in one step (another thread may
    finalize the last one at any moment), else :func:`current_runtime`'s NotInitialized."""
    try:
        return active[-1]
    except IndexError:
        return current_runtime()


def compute() -> ComputePlane:
    """The compute plane (buffers, descriptors, operators, models) of the active runtime."""
    return compute_plane(current_runtime())


#: what ``dir()`` of pyacl's modules (C extensions) shows beside their functions
_MODULE_DUNDERS = ("__doc__", "__file__", "__loader__", "__name__", "__package__", "__path__",
                   "__spec__")


def face_dir(namespace: dict) -> Callable[[], list[str]]:
    """A face module's ``__dir__`` (PEP 562): its ``__all__`` (read at each call: a module
    may extend it after defining ``__dir__``) and a module's own dunders, not the helpers it
    imports (``Any``, ``current_runtime``, ...), so ``dir(acl.util)`` and tab completion show
    pyacl's names and the simulator's documented extras only."""

    def __dir__() -> list[str]:
        return sorted({*namespace["__all__"], *(n for n in _MODULE_DUNDERS if n in namespace)})

    return __dir__
