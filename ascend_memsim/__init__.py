"""ascend-memsim: the Ascend CANN runtime's device memory, simulated in pure Python.

Layers, arrows pointing down only (README "Architecture"; import-linter's contract in
pyproject.toml enforces it): the faces ``acl`` (pyacl) and ``aclrt`` (C names), ``cli`` and
the ``testing`` toolkit on top; ``observe`` (stats, traces, replay, pictures) and ``checks``
(sanitizer, faults), which attach to a runtime through its hooks; ``runtime`` (the composition
root: devices, current device per thread, streams, aclInit); ``data`` (device bytes, host
memory); ``memory`` at the bottom (rules, allocator, device, profiles, constants, errors).
This module only re-exports the public names.
"""

from .acl import install_acl, uninstall_acl
from .checks.faults import FailNth, FailRandomly, FailWhen, HugePagesExhausted
from .checks.reports import Report
from .checks.sanitizer import Sanitizer
from .compute.models import register_model, unregister_model
from .compute.ops import register_op, registered_ops, unregister_op
from .memory.allocator import Allocator
from .memory.constants import ErrorCode, GiB, KiB, MallocPolicy, MemAttr, MemcpyKind, MemType, MiB
from .memory.device import Block, Device
from .memory.errors import *  # noqa: F403  (every exception class, listed in errors.__all__)
from .memory.errors import __all__ as _error_names
from .memory.explain import Explanation, explain
from .memory.profiles import PROFILES, Profile, get_profile, register_profile
from .memory.rules import Api, Page
from .runtime.active import current_runtime
from .runtime.runtime import Runtime, UsageInfo
from .testing.exhaustive import exhaustive

__version__ = "0.1.0"

__all__ = [
    "install_acl", "uninstall_acl", "Allocator", "KiB", "MiB", "GiB", "MallocPolicy",
    "MemAttr", "MemcpyKind", "MemType", "ErrorCode", "Api", "Block", "Device", "Page",
    "Explanation", "explain", "PROFILES", "Profile", "get_profile", "register_profile",
    "Runtime", "UsageInfo", "current_runtime", "Report", "Sanitizer", *_error_names,
    "FailNth", "FailRandomly", "FailWhen", "HugePagesExhausted", "exhaustive",
    "register_op", "registered_ops", "unregister_op", "register_model", "unregister_model",
]
