"""The pyacl face: ``import acl`` for programs written for Ascend hardware.

Functions return pyacl's shapes: out-values first, the aclError code last
(``ptr, ret = acl.rt.malloc(size, policy)``; ``ret = acl.rt.free(ptr)``). They never raise
for a bad argument: :func:`_face` turns the core's exceptions into codes, in one place. A bug
in the simulator (any exception that is not an :class:`~ascend_memsim.memory.errors.AclError`)
still raises.

The vendor constants are exported flat (``ACL_MEM_MALLOC_HUGE_FIRST``, ``ACL_HBM_MEM``,
``ACL_ERROR_RT_MEMORY_ALLOCATION``, ...), which the real module does not do.
"""

from __future__ import annotations

import functools
import logging
import sys
import threading
import types
from collections.abc import Callable
from typing import Any

from . import checks as _checks  # noqa: F401  (registers the checker and config keys)
from .compute.models import Dataset, ModelDesc, Models, spec_for_bytes, spec_for_file
from .compute.plane import ComputePlane, compute_plane
from .data import host as _host
from .memory.args import as_int
from .memory.constants import FLAT_NAMES
from .memory.errors import AclError
from .runtime.active import acl_finalize, acl_init, current_runtime

__all__ = ["init", "finalize", "rt", "util", "media", "op", "mdl", "app_log", "get_recent_err_msg",
           "create_data_buffer", "destroy_data_buffer", "get_data_buffer_addr",
           "get_data_buffer_size", "get_data_buffer_size_v2", "update_data_buffer",
           "data_type_size", "create_tensor_desc", "destroy_tensor_desc",
           "get_tensor_desc_type", "get_tensor_desc_format", "get_tensor_desc_size",
           "get_tensor_desc_element_count", "get_tensor_desc_num_dims", "get_tensor_desc_dim",
           "get_tensor_desc_dim_v2", "get_tensor_desc_name", "set_tensor_desc_name",
           "set_tensor_shape", "set_tensor_format", "get_soc_name",
           *FLAT_NAMES]

globals().update(FLAT_NAMES)

_last = threading.local()


# Size: the face is one short function per pyacl call (some 150 of them, most two lines
# under @_face), grouped by namespace; the logic lives in the planes. Splitting the file would
# move _face, which must stay the one place exceptions become codes, or create an import cycle.
def _face(*defaults: Any, bare: bool = False) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
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
                _last.message = str(error)
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


def get_recent_err_msg() -> str:
    """The message of the last error a face call on this thread returned ('' if none)."""
    return getattr(_last, "message", "")


def _namespace(name: str, doc: str, *functions: Callable[..., Any]) -> types.ModuleType:
    module = types.ModuleType(name, doc)
    for fn in functions:
        setattr(module, fn.__name__, fn)
    module.__all__ = [fn.__name__ for fn in functions]
    return module


@_face()
def init(config_path: str | None = None) -> None:
    """aclInit: start a simulated runtime from the JSON config (see Runtime.from_config)."""
    acl_init(config_path)


@_face()
def finalize() -> None:
    """aclFinalize: discard the simulated runtime."""
    acl_finalize()


# -- acl.rt ------------------------------------------------------------------------------------

@_face()
def set_device(device_id: int) -> None:
    current_runtime().set_device(device_id)


@_face()
def reset_device(device_id: int) -> None:
    current_runtime().reset_device(device_id)


@_face(-1)
def get_device() -> int:
    return current_runtime().get_device()


@_face(0)
def get_device_count() -> int:
    return current_runtime().device_count


@_face(0)
def malloc(size: int, policy: int) -> int:
    return current_runtime().malloc(size, policy)


@_face(0)
def malloc_align32(size: int, policy: int) -> int:
    return current_runtime().malloc_align32(size, policy)


@_face(0)
def malloc_cached(size: int, policy: int) -> int:
    return current_runtime().malloc_cached(size, policy)


@_face(0)
def malloc_with_cfg(size: int, policy: int, cfg: Any = None) -> int:
    return current_runtime().malloc_with_cfg(size, policy, cfg)


@_face(0)
def malloc_for_task_scheduler(size: int, policy: int, cfg: Any = None) -> int:
    return current_runtime().malloc_for_task_scheduler(size, policy, cfg)


@_face()
def free(dev_ptr: int) -> None:
    current_runtime().free(dev_ptr)


@_face()
def free_with_dev_sync(dev_ptr: int) -> None:
    current_runtime().free_with_dev_sync(dev_ptr)


@_face(0, 0)
def get_mem_info(attr: int) -> tuple[int, int]:
    return current_runtime().get_mem_info(attr)


@_face([])
def get_mem_usage_info(device_id: int, input_num: int) -> list:
    return current_runtime().get_mem_usage_info(device_id, input_num)


@_face(0)
def check_mem_type(addr_list: list, mem_type: int, reserve: int = 0) -> int:
    return current_runtime().check_mem_type(addr_list, mem_type, reserve)


@_face()
def memcpy(dst: int, dest_max: int, src: int, count: int, kind: int) -> None:
    current_runtime().memcpy(dst, dest_max, src, count, kind)


@_face()
def memset(dev_ptr: int, max_count: int, value: int, count: int) -> None:
    current_runtime().memset(dev_ptr, max_count, value, count)


@_face()
def memcpy_async(dst: int, dest_max: int, src: int, count: int, kind: int,
                 stream: int = 0) -> None:
    current_runtime().memcpy_async(dst, dest_max, src, count, kind, stream)


@_face()
def memset_async(dev_ptr: int, max_count: int, value: int, count: int, stream: int = 0) -> None:
    current_runtime().memset_async(dev_ptr, max_count, value, count, stream)


@_face(0)
def malloc_host(size: int) -> int:
    return current_runtime().malloc_host(size)


@_face()
def free_host(host_ptr: int) -> None:
    current_runtime().free_host(host_ptr)


@_face(0)
def create_stream() -> int:
    return current_runtime().streams.create_stream()


@_face()
def destroy_stream(stream: int) -> None:
    current_runtime().streams.destroy_stream(stream)


@_face()
def synchronize_stream(stream: int) -> None:
    current_runtime().streams.synchronize_stream(stream)


@_face()
def synchronize_device() -> None:
    current_runtime().synchronize_device()


@_face(0)
def create_context(device_id: int) -> int:
    return current_runtime().streams.create_context(device_id)


@_face()
def destroy_context(context: int) -> None:
    current_runtime().streams.destroy_context(context)


@_face()
def set_context(context: int) -> None:
    current_runtime().streams.set_context(context)


@_face(0)
def get_context() -> int:
    return current_runtime().streams.get_context()


@_face()
def mem_flush(dev_ptr: int, size: int) -> None:
    current_runtime().mem_flush(dev_ptr, size)


@_face()
def mem_invalidate(dev_ptr: int, size: int) -> None:
    current_runtime().mem_invalidate(dev_ptr, size)


@_face(1)
def get_run_mode() -> int:
    return int(current_runtime().get_run_mode())


@_face(0)
def create_stream_with_config(priority: int, flag: int) -> int:
    return current_runtime().streams.create_stream_with_config(priority, flag)


# -- events (hicann/runtime python/pyACL/rt/rt_synchronize.cpp) ---------------------------------

@_face(0)
def create_event() -> int:
    return current_runtime().events.create(0)


@_face(0)
def create_event_with_flag(flag: int) -> int:
    return current_runtime().events.create(flag)


@_face(0)
def create_event_ex_with_flag(flag: int) -> int:
    return current_runtime().events.create(flag)


@_face()
def record_event(event: int, stream: int) -> None:
    current_runtime().events.record(event, stream)


@_face()
def reset_event(event: int, stream: int) -> None:
    current_runtime().events.record(event, stream, reset=True)


@_face()
def synchronize_event(event: int) -> None:
    current_runtime().events.synchronize(event)


@_face()
def synchronize_event_with_timeout(event: int, timeout: int) -> None:
    """DECISION: the simulated wait never times out (the work runs now)."""
    as_int(timeout, "timeout", -1, 2**31 - 1)
    current_runtime().events.synchronize(event)


@_face(0)
def query_event_status(event: int) -> int:
    return int(current_runtime().events.recorded_status(event))


@_face(0)
def query_event(event: int) -> int:
    return int(current_runtime().events.status(event))


@_face(0)
def query_event_wait_status(event: int) -> int:
    return int(current_runtime().events.status(event))


@_face()
def stream_wait_event(stream: int, event: int) -> None:
    current_runtime().events.wait(stream, event)


@_face(0.0)
def event_elapsed_time(start: int, end: int) -> float:
    return current_runtime().events.elapsed_ms(start, end)


@_face(0)
def event_get_timestamp(event: int) -> int:
    return int(current_runtime().events.timestamp(event) * 1e6)


@_face()
def destroy_event(event: int) -> None:
    current_runtime().events.destroy(event)


# -- host callbacks (rt_synchronize.cpp) ----------------------------------------------------

@_face()
def subscribe_report(thread_id: int, stream: int) -> None:
    current_runtime().callbacks.subscribe(thread_id, stream)


@_face()
def unsubscribe_report(thread_id: int, stream: int) -> None:
    current_runtime().callbacks.unsubscribe(thread_id, stream)


@_face()
def process_report(timeout: int) -> None:
    current_runtime().callbacks.process(timeout)


@_face()
def launch_callback(fn: Callable[[Any], Any], user_data: Any, block_type: int,
                    stream: int) -> None:
    current_runtime().callbacks.launch(fn, user_data, block_type, stream)


rt = _namespace(
    "acl.rt", "Runtime calls: devices and device memory.",
    set_device, reset_device, get_device, get_device_count, malloc, malloc_align32,
    malloc_cached, malloc_with_cfg, malloc_for_task_scheduler, free, free_with_dev_sync,
    get_mem_info, get_mem_usage_info, check_mem_type,
    memcpy, memset, memcpy_async, memset_async, malloc_host, free_host, create_stream,
    destroy_stream, synchronize_stream, synchronize_device, create_context, destroy_context,
    set_context, get_context, get_run_mode, create_stream_with_config, create_event,
    create_event_with_flag, create_event_ex_with_flag, record_event, reset_event,
    synchronize_event, synchronize_event_with_timeout, query_event_status, query_event,
    query_event_wait_status, stream_wait_event, event_elapsed_time, event_get_timestamp,
    destroy_event, subscribe_report, unsubscribe_report, process_report, launch_callback,
    mem_flush, mem_invalidate,
)


# -- acl.util: plain values, no code (pyacl's shapes); errors raise ----------------------------

def bytes_to_ptr(data: bytes) -> int:
    """The address of a bytes object's buffer (registered; see ascend_memsim.data.host)."""
    return _host.bytes_to_ptr(current_runtime(), data)


def numpy_to_ptr(array: Any) -> int:
    """The address of a numpy array's data."""
    return _host.numpy_to_ptr(current_runtime(), array)


def ptr_to_bytes(ptr: int, size: int) -> bytes:
    """``size`` bytes of host memory at ``ptr``."""
    return _host.ptr_to_bytes(current_runtime(), ptr, size)


def ptr_to_numpy(ptr: int, shape: Any, np_type: Any) -> Any:
    """A numpy array over host memory at ``ptr`` (pyacl type code or dtype)."""
    return _host.ptr_to_numpy(current_runtime(), ptr, shape, np_type)


@_face(0)
def start_thread(fn: Callable[..., Any], args: Any = None) -> int:
    """``thread_id, ret``: a thread running ``fn(args)`` (``fn()`` when args is None)."""
    return current_runtime().callbacks.start_thread(fn, args)


@_face()
def stop_thread(thread_id: int) -> None:
    """Join the thread (``ret``); RuntimeError when its function raised, as pyacl."""
    current_runtime().callbacks.stop_thread(thread_id)


util = _namespace("acl.util", "Conversions between host objects and pointers; threads.",
                  bytes_to_ptr, numpy_to_ptr, ptr_to_bytes, ptr_to_numpy, start_thread,
                  stop_thread)


# -- acl.media: DVPP memory ------------------------------------------------------------------

@_face(0)
def dvpp_malloc(size: int) -> int:
    return current_runtime().dvpp_malloc(size)


@_face()
def dvpp_free(dev_ptr: int) -> None:
    current_runtime().dvpp_free(dev_ptr)


media = _namespace("acl.media", "DVPP (media) memory.", dvpp_malloc, dvpp_free)

# -- data buffers and tensor descriptors (top-level acl; hicann/runtime
# python/pyACL/py_init_acl.cpp: the C functions that return a pointer or value return just
# it, void ones None) ---------------------------------------------------------------------------

def _compute() -> ComputePlane:
    return compute_plane(current_runtime())


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


@_face(None, bare=True)
def get_soc_name() -> str:
    """aclrtGetSocName: the SoC the product profile simulates (None on an error)."""
    return current_runtime().profile.soc_name


# -- acl.op (hicann/runtime python/pyACL/op/op.cpp) ---------------------------------------------

@_face()
def set_model_dir(model_dir: str) -> None:
    _compute().set_model_dir(model_dir)


@_face(0, bare=True)
def create_attr() -> int:
    return _compute().create_attr()


@_face(None, bare=True)
def destroy_attr(attr: int) -> None:
    _compute().destroy_attr(attr)


def _setter(kind: str) -> Callable[..., int]:
    @_face()
    def set_attr(attr: int, attr_name: str, value: Any) -> None:
        _compute().set_attr(attr, kind, attr_name, value)

    set_attr.__name__ = set_attr.__qualname__ = f"set_attr_{kind}"
    set_attr.__doc__ = f"aclopSetAttr{kind.title().replace('_', '')}: ``ret``."
    return set_attr


def _typed_setter(kind: str) -> Callable[..., tuple[int, int]]:
    plain = _setter(kind)

    def set_attr(attr: int, attr_name: str, value: Any) -> tuple[int, int]:
        return attr, plain(attr, attr_name, value)

    set_attr.__name__ = set_attr.__qualname__ = f"set_attr_{kind}"
    set_attr.__doc__ = (f"aclopSetAttr{kind.title().replace('_', '')}: ``attr, ret`` (pyacl "
                        f"returns the attr handle too).")
    return set_attr


_ATTR_SETTERS = [_setter(kind) for kind in (
    "bool", "int", "float", "string", "list_bool", "list_int", "list_float", "list_string",
    "list_list_int")] + [_typed_setter("data_type"), _typed_setter("list_data_type")]


@_face()
def execute_v2(op_type: str, input_desc: list, inputs: list, output_desc: list, outputs: list,
               attr: int, stream: int) -> None:
    """aclopExecuteV2: queued on ``stream``; the kernel runs when the stream is synchronised."""
    _compute().execute(op_type, input_desc, inputs, output_desc, outputs, attr, stream)


@_face()
def _op_execute(op_type: str, input_desc: list, inputs: list, output_desc: list,
                outputs: list, attr: int, stream: int) -> None:
    """aclopExecute (deprecated): as execute_v2."""
    _compute().execute(op_type, input_desc, inputs, output_desc, outputs, attr, stream,
                       call="aclopExecute")


_op_execute.__name__ = "execute"


@_face(0)
def create_handle(op_type: str, input_desc: list, output_desc: list, op_attr: int) -> int:
    return _compute().create_handle(op_type, input_desc, output_desc, op_attr)


@_face()
def execute_with_handle(handle: int, inputs: list, outputs: list, stream: int) -> None:
    _compute().execute_with_handle(handle, inputs, outputs, stream)


@_face(None, bare=True)
def destroy_handle(handle: int) -> None:
    _compute().destroy_handle(handle)


@_face()
def cast(src_desc: int, src_buffer: int, dst_desc: int, dst_buffer: int, truncate: int,
         stream: int) -> None:
    _compute().cast(src_desc, src_buffer, dst_desc, dst_buffer, truncate, stream)


@_face(0)
def create_handle_for_cast(src_desc: int, dst_desc: int, truncate: int) -> int:
    as_int(truncate, "truncate", 0, 255)
    return _compute().create_handle("Cast", [src_desc], [dst_desc], 0)


op = _namespace(
    "acl.op", "Single operators: attributes, execute_v2, handles (kernels: register_op).",
    set_model_dir, create_attr, destroy_attr, *_ATTR_SETTERS, execute_v2, _op_execute,
    create_handle, execute_with_handle, destroy_handle, cast, create_handle_for_cast,
)


# -- acl.mdl (hicann/runtime python/pyACL/mdl/mdl_wrap.cpp) -------------------------------------

def _models() -> Models:
    plane = _compute()
    if plane.models is None:
        with plane.handles.lock:
            if plane.models is None:
                plane.models = Models(plane)
    return plane.models


def _host_bytes(ptr: Any, size: Any) -> bytes:
    return _host.ptr_to_bytes(current_runtime(), ptr, size)


@_face(0)
def load_from_file(model_path: str) -> int:
    return _models().load(spec_for_file(model_path))


@_face(0)
def load_from_mem(model: int, model_size: int) -> int:
    return _models().load(spec_for_bytes(_host_bytes(model, model_size)))


@_face(0)
def load_from_file_with_mem(model_path: str, work_ptr: int, work_size: int, weight_ptr: int,
                            weight_size: int) -> int:
    return _models().load(spec_for_file(model_path),
                          (work_ptr, work_size, weight_ptr, weight_size))


@_face(0)
def load_from_mem_with_mem(model: int, model_size: int, work_ptr: int, work_size: int,
                           weight_ptr: int, weight_size: int) -> int:
    return _models().load(spec_for_bytes(_host_bytes(model, model_size)),
                          (work_ptr, work_size, weight_ptr, weight_size))


@_face(0, 0)
def query_size(file_name: str) -> tuple[int, int]:
    spec = spec_for_file(file_name)
    return spec.work_bytes, spec.weight_bytes


@_face(0, 0)
def query_size_from_mem(model: int, model_size: int) -> tuple[int, int]:
    spec = spec_for_bytes(_host_bytes(model, model_size))
    return spec.work_bytes, spec.weight_bytes


@_face()
def unload(model_id: int) -> None:
    _models().unload(model_id)


@_face(0, bare=True)
def create_desc() -> int:
    return _compute().handles.add(ModelDesc()).handle


@_face()
def get_desc(model_desc: int, model_id: int) -> None:
    _models().get_desc(model_desc, model_id)


@_face()
def destroy_desc(model_desc: int) -> None:
    _compute().handles.remove(model_desc, ModelDesc, "model_desc")


@_face(0, bare=True)
def get_num_inputs(model_desc: int) -> int:
    return len(_models().described(model_desc).inputs)


@_face(0, bare=True)
def get_num_outputs(model_desc: int) -> int:
    return len(_models().described(model_desc).outputs)


def _io(name: str, outputs: bool, what: str, default: Any, read: Callable[[Any], Any],
        bare: bool = True) -> Callable[..., Any]:
    @_face(default, bare=bare)
    def query(model_desc: int, index: int) -> Any:
        return read(_models().tensor(model_desc, index, outputs))

    query.__name__ = query.__qualname__ = name
    query.__doc__ = f"aclmdl{what}."
    return query


_IO_QUERIES = [
    _io(f"get_{side}_{kind}", side == "output", f"Get{side.title()}{label}", default, read,
        bare)
    for side in ("input", "output")
    for kind, label, default, read, bare in (
        ("size_by_index", "SizeByIndex", 0, lambda t: t.nbytes, True),
        ("dims", "Dims", {}, lambda t: t.dims_dict(), False),
        ("data_type", "DataType", -1, lambda t: int(t.dtype), True),
        ("format", "Format", -1, lambda t: t.format, True),
        ("name_by_index", "NameByIndex", "", lambda t: t.name, True),
    )
] + [
    _io("get_input_dims_v2", False, "GetInputDimsV2", {}, lambda t: t.dims_dict(), False),
    _io("get_cur_output_dims", True, "GetCurOutputDims", {}, lambda t: t.dims_dict(), False),
]


@_face(0)
def get_input_index_by_name(model_desc: int, name: str) -> int:
    return _models().index_by_name(model_desc, name, outputs=False)


@_face(0)
def get_output_index_by_name(model_desc: int, name: str) -> int:
    return _models().index_by_name(model_desc, name, outputs=True)


@_face({})
def get_dynamic_batch(model_desc: int) -> dict:
    """Not dynamic: ``batchCount`` 0 (every simulated model has static shapes)."""
    _models().described(model_desc)
    return {"batchCount": 0, "batch": []}


@_face({})
def get_dynamic_hw(model_desc: int, index: int) -> dict:
    _models().described(model_desc)
    return {"hwCount": 0, "hw": []}


@_face(0)
def get_input_dynamic_gear_count(model_desc: int, index: int) -> int:
    _models().described(model_desc)
    return 0


@_face(None)
def get_input_dynamic_dims(model_desc: int, index: int, gear_count: int) -> list:
    _models().described(model_desc)
    as_int(gear_count, "gear_count", 0, 4096)   # mdl_wrap.cpp: more than 4096 is refused
    return []


@_face(0, bare=True)
def create_dataset() -> int:
    return _compute().handles.add(Dataset()).handle


def add_dataset_buffer(dataset: int, data_buffer: int) -> tuple[int, int]:
    """aclmdlAddDatasetBuffer: ``dataset, ret`` (pyacl returns the dataset too)."""
    return dataset, _add_dataset_buffer(dataset, data_buffer)


@_face()
def _add_dataset_buffer(dataset: int, data_buffer: int) -> None:
    _models().add_buffer(dataset, data_buffer)


@_face(0, bare=True)
def get_dataset_num_buffers(dataset: int) -> int:
    return len(_compute().handles.get(dataset, Dataset, "dataset").buffers)


@_face(0, bare=True)
def get_dataset_buffer(dataset: int, index: int) -> int:
    return _models().dataset_buffer(dataset, index)


@_face()
def destroy_dataset(dataset: int) -> None:
    """The dataset only; its data buffers stay (destroy them with destroy_data_buffer)."""
    _compute().handles.remove(dataset, Dataset, "dataset")


@_face()
def execute(model_id: int, input: int, output: int) -> None:
    """aclmdlExecute: synchronous."""
    _models().execute(model_id, input, output)


@_face()
def execute_async(model_id: int, input: int, output: int, stream: int) -> None:
    """aclmdlExecuteAsync: queued on ``stream``, run when it is synchronised."""
    _models().execute(model_id, input, output, stream)


mdl = _namespace(
    "acl.mdl", "Models: stand-in descriptions, loading, datasets, execution.",
    load_from_file, load_from_mem, load_from_file_with_mem, load_from_mem_with_mem,
    query_size, query_size_from_mem, unload, create_desc, get_desc, destroy_desc,
    get_num_inputs, get_num_outputs, *_IO_QUERIES, get_input_index_by_name,
    get_output_index_by_name, get_dynamic_batch, get_dynamic_hw, get_input_dynamic_gear_count,
    get_input_dynamic_dims, create_dataset, add_dataset_buffer, get_dataset_num_buffers,
    get_dataset_buffer, destroy_dataset, execute, execute_async,
)


_app_logger = logging.getLogger("acl.app")
_APP_LEVELS = {0: logging.DEBUG, 1: logging.INFO, 2: logging.WARNING, 3: logging.ERROR}


def app_log(level: int, message: str) -> int | None:
    """ACL_APP_LOG: log ``message`` at level 0 DEBUG, 1 INFO, 2 WARNING, 3 ERROR (returns
    nothing, as pyacl) to the Python logger ``acl.app``. DECISION: other int levels log as
    ERROR; a level that is not an int logs nothing and returns ACL_ERROR_INVALID_PARAM."""
    try:
        number = as_int(level, "level", None, None)
    except AclError as error:
        _last.message = str(error)
        return int(error.code)
    _app_logger.log(_APP_LEVELS.get(number, logging.ERROR), "%s", message)
    return None

# The names above live on acl.rt; keep the module namespace as pyacl's.
for _name in (*rt.__all__, *util.__all__, *media.__all__, *op.__all__, *mdl.__all__,
              "_op_execute"):
    globals().pop(_name, None)
del _name


def install_acl() -> types.ModuleType:
    """Make ``import acl`` (and ``acl.rt``, ``acl.util``) resolve to this module.

    Returns the module that ``acl`` named before, or None; pass it to
    :func:`uninstall_acl` to restore.
    """
    previous = sys.modules.get("acl")
    me = sys.modules[__name__]
    sys.modules["acl"] = me
    sys.modules["acl.rt"] = rt
    sys.modules["acl.util"] = util
    sys.modules["acl.media"] = media
    sys.modules["acl.op"] = op
    sys.modules["acl.mdl"] = mdl
    return previous


def uninstall_acl(previous: types.ModuleType | None = None) -> None:
    """Undo :func:`install_acl`, restoring ``previous`` as ``acl`` if given."""
    for name in ("acl.rt", "acl.util", "acl.media", "acl.op", "acl.mdl"):
        sys.modules.pop(name, None)
    if previous is None:
        sys.modules.pop("acl", None)
    else:
        sys.modules["acl"] = previous
