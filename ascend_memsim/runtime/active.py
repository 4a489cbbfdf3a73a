"""The active runtime (the one the pyacl face talks to), aclInit and aclFinalize.

Process-global, as the real runtime is: ``with Runtime(...)`` pushes a runtime, ``acl.init``
makes one (or adopts the innermost active one) and ``acl.finalize`` discards what it made.
"""

from __future__ import annotations

import os
import threading

from ..memory.errors import AlreadyFinalized, AlreadyInitialized, NotInitialized
from ..memory.switch import OFF_WORDS, ON_WORDS, VARIABLE
from .config import load_config, parse_config
from .runtime import Runtime

__all__ = ["current_runtime", "acl_init", "acl_finalize", "env_product", "ENV_SWITCH"]

#: ``ASCEND_MEMSIM=1`` makes ``import acl`` the simulator in every Python process of an
#: environment the package is installed in (the startup hook ``ascend_memsim.pth``);
#: ``ASCEND_MEMSIM=950PR`` also names the product.
ENV_SWITCH = VARIABLE


def env_product() -> str | None:
    """The product ``ASCEND_MEMSIM`` names (None when unset, off or just "on").

    DECISION: a product named there is the one acl.init simulates when its config names
    none, so ``ASCEND_MEMSIM=950PR python train.py`` runs an unchanged program on a 950PR.
    """
    value = os.environ.get(ENV_SWITCH, "").strip()
    if value.lower() in OFF_WORDS or value.lower() in ON_WORDS:
        return None
    return value


#: Runtime.acting, bound once (an empty dict's truth is the whole cost for every other thread)
_acting = Runtime.acting


def current_runtime() -> Runtime:
    """The active runtime (innermost ``with Runtime()`` or the one acl.init made), or the
    one this thread acts as (:func:`.process.acting_as`).

    Raises:
        NotInitialized: none is active.
    """
    if _acting:
        runtime = _acting.get(threading.get_ident())
        if runtime is not None:
            return runtime
    try:
        return Runtime.active[-1]
    except IndexError:
        raise NotInitialized("no simulated runtime: call acl.init() or enter "
                             "`with ascend_memsim.Runtime(...)`") from None


def acl_init(config_path: object = None) -> Runtime:
    """aclInit: make (or adopt) the active runtime from the JSON config at ``config_path``.

    Inside ``with Runtime(...)`` the active runtime is adopted and the config applied to it
    (see :meth:`Runtime.adopt_config`).

    Raises:
        AlreadyInitialized: aclInit twice without aclFinalize.
        InvalidArgument: an unreadable or invalid config, or one the adopted runtime refuses.
    """
    active = Runtime.active
    with Runtime.active_lock:
        if active and active[-1].acl_initialized:
            raise AlreadyInitialized("acl.init was already called; call acl.finalize first")
        options = parse_config(load_config(config_path))
        if active:
            runtime = active[-1]
            runtime.adopt_config(options)
        else:
            if "product" not in options and env_product() is not None:
                options["product"] = env_product()
            runtime = Runtime(**options)
            runtime.owned_by_acl = True
            active.append(runtime)
        runtime.acl_initialized = True
        return runtime


def acl_finalize() -> None:
    """aclFinalize: discard the runtime acl.init made (or release an adopted one's hold).

    Raises:
        AlreadyFinalized: no acl.init is in force.
    """
    with Runtime.active_lock:
        # The innermost runtime that acl.init made or adopted, though a `with` may sit inside.
        runtime = next((r for r in reversed(Runtime.active) if r.acl_initialized), None)
        if runtime is None:
            raise AlreadyFinalized("acl.finalize without a matching acl.init")
        runtime.acl_initialized = False
        if runtime.owned_by_acl:
            Runtime.active.remove(runtime)
            runtime.close()
        else:
            runtime.release_adoption()


