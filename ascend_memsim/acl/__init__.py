"""The pyacl face: ``import acl`` for programs written for Ascend hardware.

Functions return pyacl's shapes: out-values first, the aclError code last
(``ptr, ret = acl.rt.malloc(size, policy)``; ``ret = acl.rt.free(ptr)``). They never raise
for a bad argument: ``_face.face`` turns the core's exceptions into codes, in one place. A bug
in the simulator (any exception that is not an :class:`~ascend_memsim.memory.errors.AclError`)
still raises.

The vendor constants are exported flat (``ACL_MEM_MALLOC_HUGE_FIRST``, ``ACL_HBM_MEM``,
``ACL_ERROR_RT_MEMORY_ALLOCATION``, ...), which the real module does not do.
"""

from __future__ import annotations

import logging
import sys
import types

from .. import checks as _checks  # noqa: F401  (registers the checker and config keys)
from ..compute.plane import ComputePlane
from ..memory.args import as_int
from ..memory.constants import FLAT_NAMES
from ..runtime.active import acl_finalize, acl_init, current_runtime
from . import mdl, media, op, rt, util
from ._face import compute as _compute
from ._face import face as _face
from ._face import face_dir as _face_dir
from ._face import get_recent_err_msg
from ._pyacl import _NO_PATH, config_path, log_message

__all__ = ["init", "finalize", "rt", "util", "media", "op", "mdl", "app_log", "get_recent_err_msg",
           "create_data_buffer", "destroy_data_buffer", "get_data_buffer_addr",
           "get_data_buffer_size", "get_data_buffer_size_v2", "update_data_buffer",
           "data_type_size", "create_tensor_desc", "destroy_tensor_desc",
           "get_tensor_desc_type", "get_tensor_desc_format", "get_tensor_desc_size",
           "get_tensor_desc_element_count", "get_tensor_desc_num_dims", "get_tensor_desc_dim",
           "get_tensor_desc_dim_v2", "get_tensor_desc_name", "set_tensor_desc_name",
           "set_tensor_shape", "set_tensor_format", "set_tensor_const", "get_soc_name",
           *FLAT_NAMES]

globals().update(FLAT_NAMES)


@_face()
def init(path: str = _NO_PATH) -> None:  # type: ignore[assignment]
    """aclInit: start a simulated runtime from the JSON config (see Runtime.from_config).

    ``acl.init()`` or ``acl.init(path)``: as pyacl (``"|s"``), None is not a path."""
    acl_init(config_path(path))


@_face()
def finalize() -> None:
    """aclFinalize: discard the simulated runtime."""
    acl_finalize()



# -- data buffers and tensor descriptors (top-level acl; hicann/runtime
# python/pyACL/py_init_acl.cpp: the C functions that return a pointer or value return just
# it, void ones None) ---------------------------------------------------------------------------

@_face(0, bare=True)
def create_data_buffer(data: int, size: int) -> int:
    """aclCreateDataBuffer: the buffer handle (0 on an error)."""
    return _compute().create_data_buffer(data, size)


@_face()
def destroy_data_buffer(data_buffer: int) -> None:
    _compute().destroy_data_buffer(data_buffer)


@_face(0, bare=True)
def get_data_buffer_addr(data_buffer: int) -> int:
    return _compute().data_buffer(data_buffer).addr


@_face(0, bare=True)
def get_data_buffer_size(data_buffer: int) -> int:
    """aclGetDataBufferSize (deprecated; uint32_t in C, so a size is truncated to 32 bits)."""
    return _compute().data_buffer(data_buffer).nbytes & 0xFFFF_FFFF


@_face(0, bare=True)
def get_data_buffer_size_v2(data_buffer: int) -> int:
    return _compute().data_buffer(data_buffer).nbytes


@_face()
def update_data_buffer(data_buffer: int, data: int, size: int) -> None:
    _compute().update_data_buffer(data_buffer, data, size)


@_face(0, bare=True)
def data_type_size(data_type: int) -> int:
    return ComputePlane.data_type_size(data_type)


@_face(0, bare=True)
def create_tensor_desc(data_type: int, dims: list, format: int) -> int:
    """aclCreateTensorDesc: dims is a list ([] a scalar); the handle (0 on an error)."""
    return _compute().create_tensor_desc(data_type, dims, format)


@_face(None, bare=True)
def destroy_tensor_desc(desc: int) -> None:
    _compute().destroy_tensor_desc(desc)


@_face(-1, bare=True)
def get_tensor_desc_type(desc: int) -> int:
    return int(_compute().tensor_desc(desc).dtype)


@_face(-1, bare=True)
def get_tensor_desc_format(desc: int) -> int:
    return int(_compute().tensor_desc(desc).format)


@_face(0, bare=True)
def get_tensor_desc_size(desc: int) -> int:
    return _compute().tensor_desc(desc).byte_size()


@_face(0, bare=True)
def get_tensor_desc_element_count(desc: int) -> int:
    return _compute().tensor_desc(desc).element_count()


@_face(0, bare=True)
def get_tensor_desc_num_dims(desc: int) -> int:
    return _compute().num_dims(desc)


@_face(-1, bare=True)
def get_tensor_desc_dim(desc: int, index: int) -> int:
    """aclGetTensorDescDim (deprecated): -1 on a bad desc or index."""
    return _compute().dim(desc, index)


@_face(-1)
def get_tensor_desc_dim_v2(desc: int, index: int) -> int:
    """aclGetTensorDescDimV2: ``dim_size, ret``."""
    return _compute().dim(desc, index)


@_face("", bare=True)
def get_tensor_desc_name(desc: int) -> str:
    return _compute().tensor_desc(desc).name


@_face(None, bare=True)
def set_tensor_desc_name(desc: int, name: str) -> None:
    _compute().set_tensor_desc_name(desc, name)


@_face()
def set_tensor_shape(desc: int, dims: list) -> None:
    _compute().set_tensor_shape(desc, dims)


@_face()
def set_tensor_format(desc: int, format: int) -> None:
    _compute().set_tensor_format(desc, format)


@_face()
def set_tensor_const(desc: int, data: int, size: int) -> None:
    """aclSetTensorConst: ``ret`` (py_init_acl.cpp ``WrapAclSetTensorConst``, "kkk")."""
    _compute().set_tensor_const(desc, data, size)


@_face(None, bare=True)
def get_soc_name() -> str:
    """aclrtGetSocName: the SoC the product profile simulates (None on an error)."""
    return current_runtime().profile.soc_name




_app_logger = logging.getLogger("acl.app")
_APP_LEVELS = {0: logging.DEBUG, 1: logging.INFO, 2: logging.WARNING, 3: logging.ERROR}


@_face(ok=None)
def app_log(level: int, message: str) -> int | None:
    """ACL_APP_LOG: log ``message`` at level 0 DEBUG, 1 INFO, 2 WARNING, 3 ERROR (returns
    nothing, as pyacl) to the Python logger ``acl.app``. DECISION: other int levels log as
    ERROR; a level that is not an int32 or a message that is not a str logs nothing and
    returns ACL_ERROR_INVALID_PARAM (pyacl: "is")."""
    number = as_int(level, "level", -(1 << 31), (1 << 31) - 1)
    _app_logger.log(_APP_LEVELS.get(number, logging.ERROR), "%s", log_message(message))
    return None  # (the face returns the code of a failure)


_NAMESPACES = {"rt": rt, "util": util, "media": media, "op": op, "mdl": mdl}


def install_acl() -> types.ModuleType | None:
    """Make ``import acl`` (and ``acl.rt``, ``acl.util``) resolve to this module.

    Returns the module that ``acl`` named before, or None; pass it to
    :func:`uninstall_acl` to restore.
    """
    previous = sys.modules.get("acl")
    sys.modules["acl"] = sys.modules[__name__]
    for name, module in _NAMESPACES.items():
        sys.modules[f"acl.{name}"] = module
    return previous


def uninstall_acl(previous: types.ModuleType | None = None) -> None:
    """Undo :func:`install_acl`, restoring ``previous`` as ``acl`` if given."""
    for name in _NAMESPACES:
        sys.modules.pop(f"acl.{name}", None)
    if previous is None:
        sys.modules.pop("acl", None)
    else:
        sys.modules["acl"] = previous

__dir__ = _face_dir(globals())
