"""Checks the hardware does not give: the sanitizer (invalid and double frees, use after free,
out of bounds, uninitialised reads, leaks) and fault injection.

They attach to a runtime through the hooks it owns (:mod:`ascend_memsim.runtime.hooks`,
``Runtime.add_interceptor``, config keys registered with
:func:`~ascend_memsim.runtime.config.register_config_key`). They may import the runtime, the
data plane and the memory core; nothing below imports them.
"""

# Importing the layer registers the sanitizer as every runtime's checker and the "sanitizer"
# and "faults" aclInit config keys.
from . import faults, sanitizer  # noqa: F401
