"""ascend-memsim: the Ascend CANN runtime's device memory, simulated in pure Python.

Layers, arrows pointing down only (docs/internals/architecture.md; import-linter's contract in
pyproject.toml enforces it): the faces ``acl`` (pyacl) and ``aclrt`` (C names), ``cli`` and
the ``testing`` toolkit on top; ``observe`` (stats, traces, replay, pictures),
``allocators`` (torch_npu's caching allocator, a client of the runtime) and ``checks``
(sanitizer, faults), which attach to a runtime through its hooks; ``runtime`` (the composition
root: devices, current device per thread, streams, aclInit); ``data`` (device bytes, host
memory); ``memory`` at the bottom (rules, allocator, device, profiles, constants, errors).
This module only re-exports the public names, each imported on first use (PEP 562), so a
command that needs little (``ascend-memsim --help``) does not pay for the whole package. The
first public name asked for imports the checks too, which register the sanitizer as every new
runtime's checker (see :mod:`ascend_memsim.runtime.hooks`).
"""

from __future__ import annotations

import importlib

#: the version, written here only: pyproject.toml's metadata reads it (``dynamic``), and so
#: does ``ascend-memsim --version``; CHANGELOG.md says what each version changed
__version__ = "0.1.0"

#: public name -> the module it lives in (one import path each, docs/internals/architecture.md)
_HOMES = {
    **dict.fromkeys(("install_acl", "uninstall_acl"), ".acl"),
    **dict.fromkeys(("FailNth", "FailRandomly", "FailWhen", "HugePagesExhausted"),
                    ".checks.faults"),
    "Report": ".checks.reports",
    "Sanitizer": ".checks.sanitizer",
    "Allocator": ".memory.allocator",
    **dict.fromkeys(("ErrorCode", "GiB", "KiB", "MallocPolicy", "MemAttr", "MemcpyKind",
                     "MemType", "MiB"), ".memory.constants"),
    **dict.fromkeys(("Block", "Device"), ".memory.device"),
    **dict.fromkeys(("Explanation", "explain"), ".memory.explain"),
    **dict.fromkeys(("PROFILES", "Profile", "get_profile", "register_profile"),
                    ".memory.profiles"),
    **dict.fromkeys(("Api", "Page"), ".memory.rules"),
    "current_runtime": ".runtime.active",
    **dict.fromkeys(("Runtime", "UsageInfo"), ".runtime.runtime"),
    "exhaustive": ".testing.exhaustive",
    **dict.fromkeys(("serve", "connect"), ".remote"),
    **dict.fromkeys(("register_op", "registered_ops", "unregister_op"), ".compute.ops"),
    **dict.fromkeys(("device_variable", "unregister_variable"), ".compute.symbols"),
    **dict.fromkeys(("register_model", "unregister_model"), ".compute.models"),
}


def _error_names() -> list[str]:
    return list(importlib.import_module(".memory.errors", __name__).__all__)


def __getattr__(name: str) -> object:
    if name == "__all__":
        value: object = [*_HOMES, *_error_names()]
    else:
        home = _HOMES.get(name)
        if home is None:
            if name.startswith("__") or name not in _error_names():
                raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
            home = ".memory.errors"
        # Registers the sanitizer as the runtimes' checker (see the module docstring).
        importlib.import_module(".checks", __name__)
        value = getattr(importlib.import_module(home, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOMES, *_error_names()])
