"""acl.rt: devices, device memory, copies, streams, contexts, events and host callbacks.

Signatures and return shapes follow hicann/runtime python/pyACL/rt/ (the method table in
pyrt_methods.cpp, the argument parsing in rt_*.cpp); docs/reference/c-api.md lists where they
differ.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..runtime.active import current_runtime
from . import _allocator, _cmo, _ipc, _managed, _pools, _rt_memory, _symbols, _vmm
from ._allocator import *  # noqa: F403
from ._cmo import *  # noqa: F403
from ._face import face as _face
from ._face import face_dir as _face_dir
from ._ipc import *  # noqa: F403
from ._managed import *  # noqa: F403
from ._pools import *  # noqa: F403
from ._pyacl import malloc_config as _malloc_config
from ._rt_memory import *  # noqa: F403
from ._symbols import *  # noqa: F403
from ._vmm import *  # noqa: F403

#: The functions of acl.rt that pyacl does not bind (its method table,
#: python/pyACL/rt/pyrt_methods.cpp, has no entry for them): kept for teaching the C API,
#: marked "not in pyacl" in their docstrings and in docs/reference/c-api.md. A program that
#: calls one meets an AttributeError on hardware.
NOT_IN_PYACL: tuple[str, ...] = ("free_with_dev_sync", "get_mem_usage_info", "check_mem_type")


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


@_face(0, route="malloc")
def malloc(size: int, policy: int) -> int:
    return current_runtime().malloc(size, policy)


@_face(0)
def malloc_align32(size: int, policy: int) -> int:
    return current_runtime().malloc_align32(size, policy)


@_face(0)
def malloc_cached(size: int, policy: int) -> int:
    return current_runtime().malloc_cached(size, policy)


@_face(0)
def malloc_with_cfg(size: int, policy: int, cfg: dict) -> int:
    """aclrtMallocWithCfg: ``cfg`` as pyacl takes it: ``{}``, or ``{"numAttrs": n, "attrs":
    [{"attr": ACL_RT_MEM_ATTR_MODULE_ID, "value": {"moduleId": 3}}, ...]}``."""
    return current_runtime().malloc_with_cfg(size, policy, _malloc_config(cfg))


@_face(0)
def malloc_for_task_scheduler(size: int, policy: int, cfg: dict) -> int:
    """aclrtMallocForTaskScheduler: ``cfg`` as for :func:`malloc_with_cfg`."""
    return current_runtime().malloc_for_task_scheduler(size, policy, _malloc_config(cfg))


@_face(route="free")
def free(dev_ptr: int) -> None:
    current_runtime().free(dev_ptr)


@_face()
def free_with_dev_sync(dev_ptr: int) -> None:
    """aclrtFreeWithDevSync (not in pyacl: kept for teaching the C API; see NOT_IN_PYACL)."""
    current_runtime().free_with_dev_sync(dev_ptr)


@_face(0, 0)
def get_mem_info(attr: int) -> tuple[int, int]:
    return current_runtime().get_mem_info(attr)


@_face([])
def get_mem_usage_info(device_id: int, input_num: int) -> list:
    """aclrtGetMemUsageInfo (not in pyacl: kept for teaching the C API; see NOT_IN_PYACL)."""
    return current_runtime().get_mem_usage_info(device_id, input_num)


@_face(0)
def check_mem_type(addr_list: list, mem_type: int, reserve: int = 0) -> int:
    """aclrtCheckMemType (not in pyacl: kept for teaching the C API; see NOT_IN_PYACL)."""
    return current_runtime().check_mem_type(addr_list, mem_type, reserve)


@_face()
def memcpy(dst: int, dest_max: int, src: int, count: int, kind: int) -> None:
    current_runtime().memcpy(dst, dest_max, src, count, kind)


@_face()
def memset(dev_ptr: int, max_count: int, value: int, count: int) -> None:
    current_runtime().memset(dev_ptr, max_count, value, count)


@_face()
def memcpy_async(dst: int, dest_max: int, src: int, count: int, kind: int,
                 stream: int) -> None:
    """aclrtMemcpyAsync: ``stream`` is required, as in pyacl ("kkkkik"); 0 is the default
    stream."""
    current_runtime().memcpy_async(dst, dest_max, src, count, kind, stream)


@_face()
def memset_async(dev_ptr: int, max_count: int, value: int, count: int, stream: int) -> None:
    """aclrtMemsetAsync: ``stream`` is required, as in pyacl ("kkikk")."""
    current_runtime().memset_async(dev_ptr, max_count, value, count, stream)


@_face()
def cmo_async(src: int, size: int, cmo_type: int, stream: int) -> None:
    """aclrtCmoAsync (11-06): ``ret``; only ACL_RT_CMO_TYPE_PREFETCH (0); no data effect (the
    simulator models no cache), the range is checked as an access."""
    current_runtime().cmo_async(src, size, cmo_type, stream)


@_face()
def value_write(dev_addr: int, value: int, flag: int, stream: int) -> None:
    """aclrtValueWrite (11-09): ``ret``; ``flag`` reserved, 0."""
    current_runtime().value_write(dev_addr, value, flag, stream)


@_face()
def value_wait(dev_addr: int, value: int, flag: int, stream: int) -> None:
    """aclrtValueWait (11-09): ``ret``; ``flag`` ACL_STREAM_WAIT_VALUE_GEQ 0, EQ 1, AND 2,
    NOR 3."""
    current_runtime().value_wait(dev_addr, value, flag, stream)


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
    current_runtime().events.synchronize(event, timeout)


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


_EXPORTS = (
    set_device, reset_device, get_device, get_device_count, malloc, malloc_align32,
    malloc_cached, malloc_with_cfg, malloc_for_task_scheduler, free, free_with_dev_sync,
    get_mem_info, get_mem_usage_info, check_mem_type, memcpy, memset, memcpy_async,
    memset_async, cmo_async, value_write, value_wait, malloc_host, free_host, create_stream,
    destroy_stream, synchronize_stream,
    synchronize_device, create_context, destroy_context, set_context, get_context,
    get_run_mode, create_stream_with_config, create_event, create_event_with_flag,
    create_event_ex_with_flag, record_event, reset_event, synchronize_event,
    synchronize_event_with_timeout, query_event_status, query_event, query_event_wait_status,
    stream_wait_event, event_elapsed_time, event_get_timestamp, destroy_event,
    subscribe_report, unsubscribe_report, process_report, launch_callback, mem_flush,
    mem_invalidate,
)
__all__ = [fn.__name__ for fn in _EXPORTS]

# The rest of the memory chapter: host registration, copies, peer access (_rt_memory.py);
# virtual memory (11-04) and pointer_get_attributes (11-05) (_vmm.py).
# stream-ordered memory pools (11-10) (_pools.py); IPC and shareable handles (_ipc.py);
# managed memory and aclrtMemP2PMap (11-05) (_managed.py).
# The other cache operations (11-06) (_cmo.py); device variables (11-11) (_symbols.py);
# custom allocators (11-08) (_allocator.py).
__all__ += [*_rt_memory.__all__, *_vmm.__all__, *_ipc.__all__, *_pools.__all__,
            *_managed.__all__, *_cmo.__all__, *_symbols.__all__, *_allocator.__all__]
NOT_IN_PYACL += (_rt_memory.NOT_IN_PYACL + _vmm.NOT_IN_PYACL + _ipc.NOT_IN_PYACL
                 + _pools.NOT_IN_PYACL + _managed.NOT_IN_PYACL + _cmo.NOT_IN_PYACL
                 + _symbols.NOT_IN_PYACL + _allocator.NOT_IN_PYACL)

__dir__ = _face_dir(globals())
