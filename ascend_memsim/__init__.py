"""ascend-memsim: the Ascend CANN runtime's device memory, simulated in pure Python.

Layering, arrows pointing one way: the faces ``acl`` (pyacl) and ``aclrt`` (C names) call
``runtime`` (devices, current device per thread, init/config), which calls ``device``
(policies, pages, rounding rules, accounting), which calls ``allocator`` (first-fit over a
sorted free list) and reads ``profiles`` and ``constants``. The core never imports a face.
"""

from .acl import install_acl, uninstall_acl
from .checks.faults import FailNth, FailRandomly, FailWhen, HugePagesExhausted
from .checks.reports import Report
from .checks.sanitizer import Sanitizer
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
]
