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

__all__ = ["face", "get_recent_err_msg", "remember_error", "compute"]

_last = threading.local()


def face(*defaults: Any, bare: bool = False) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Wrap a core call in pyacl's return convention.

    With no ``defaults`` the wrapped call returns just the code. With one, ``(value, code)``;
    with several, the call's tuple then the code. On an AclError the defaults stand in for
    the out-values and the error's code is returned; its message is kept for
    :func:`get_recent_err_msg`. ``bare``: the C function returns a value (or void), not an
    aclError, so pyacl returns just the value: the call's result, or ``defaults[0]`` on an
    error (``acl.create_tensor_desc`` gives 0, ``destroy_tensor_desc`` None).
    """

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                out = fn(*args, **kwargs)
            except AclError as error:
                remember_error(error)
                if bare:
                    return defaults[0]
                return (*defaults, int(error.code)) if defaults else int(error.code)
            if bare:
                return out
            if not defaults:
                return 0
            return (*out, 0) if len(defaults) > 1 else (out, 0)

        #: True when the call returns no code (tests read it)
        call.bare = bare
        return call

    return wrap


def remember_error(error: AclError) -> None:
    """Keep ``error``'s message for :func:`get_recent_err_msg` (this thread)."""
    _last.message = str(error)


def get_recent_err_msg() -> str:
    """The message of the last error a face call on this thread returned ('' if none)."""
    return getattr(_last, "message", "")


def compute() -> ComputePlane:
    """The compute plane (buffers, descriptors, operators, models) of the active runtime."""
    return compute_plane(current_runtime())
