"""The stand-in ``torch_npu.npu.graphs`` (``torch_npu/npu/graphs.py``): ACL graph capture,
refused during an estimate (:func:`~ascend_memsim.torchsim.limits.graph_refusal`), and the
calls that only mean something inside a capture.

- ``NPUGraph``, ``graph``, ``make_graphed_callables``, ``graph_pool_handle``: refused, the
  verdict unknown, with the script's line (:mod:`...limits` says why: a captured graph's
  tensors live in a private pool the estimate does not model).
  ``is_current_stream_capturing()`` is False.
- ``graph_task_group_begin`` / ``_end`` mark the tasks of a capture that a later update
  replaces. The runtime refuses them on a stream that is not capturing
  (``hicann/runtime``'s ``rtsStreamBeginTaskGrp`` / ``rtsStreamEndTaskGrp`` give
  ``ACL_ERROR_RT_STREAM_NOT_CAPTURED``, 107029, in its tests ``task_group_no_captured`` and
  ``capture_api_36``; ``docs/03_api_ref/15_模型运行实例管理.md``: "此处的Stream必须是在捕获状态的
  Stream"), and torch_npu raises it (``NPU_CHECK_ERROR`` in ``NPUGraph.cpp``
  ``graph_task_group_begin``). DECISION: no capture is ever under way in an estimate (the
  capture itself is refused), so these raise that error, as the machine does outside a
  capture; a script that calls them inside a capture stopped at the capture first.
- ``graph_task_update_begin(stream, handle)`` takes the handle ``graph_task_group_end``
  returned, which no estimate can have: any other object is refused (TypeError, as
  torch_npu's binding refuses an argument of another type); ``graph_task_update_end``
  without a begun update is ``ACL_ERROR_STREAM_TASK_GROUP_STATUS`` (107033, the runtime's
  ``capture_api_36``).
- ``super_kernel_scope_begin`` / ``_end`` put a scope's marker kernels on the current stream
  (``aclskScopeBegin`` / ``aclskScopeEnd``, which launch two small kernels and hold no device
  memory); the CANN reference's product table for ``aclskScopeBegin`` lists Atlas A3 only
  (A2 and the 950 "不支持"). DECISION: accepted on A3, refused (RuntimeError) on every other
  product, without claiming an error number the sources do not give.
- ``NpuGraphOpHandler`` and ``register_npu_graph_handler``
  (``torch_npu/npu/_npugraph_handlers/npugraph_handler.py``): the registry a capture consults
  for an operator's updatable arguments; registering works and is kept (class objects, by
  operator name), and nothing consults it, since no capture runs.
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

from ...limits import graph_refusal
from .._missing import not_modelled
from ._state import _session

__all__ = ["NPUGraph", "graph", "graph_pool_handle", "make_graphed_callables",
           "is_current_stream_capturing", "graph_task_group_begin", "graph_task_group_end",
           "graph_task_update_begin", "graph_task_update_end", "super_kernel_scope_begin",
           "super_kernel_scope_end", "NpuGraphOpHandler", "register_npu_graph_handler"]

__getattr__ = not_modelled("torch_npu.npu.graphs")

#: rt_error_codes.h: "stream is not in capture status", "task group status error"
ACL_ERROR_RT_STREAM_NOT_CAPTURED = 107029
ACL_ERROR_STREAM_TASK_GROUP_STATUS = 107033

_log = logging.getLogger("torch_npu.npu.graphs")


# -- capture: refused ------------------------------------------------------------------------

def _refuse_graph(name: str) -> None:
    session = _session()
    raise session.stop(graph_refusal(session, name))


class NPUGraph:
    """torch_npu.npu.NPUGraph during an estimate: refused."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        _refuse_graph("torch_npu.npu.NPUGraph")


class graph:
    """torch_npu.npu.graph (a capture context) during an estimate: refused."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        _refuse_graph("torch_npu.npu.graph")


def make_graphed_callables(*args: Any, **kwargs: Any) -> Any:
    _refuse_graph("torch_npu.npu.make_graphed_callables")


def graph_pool_handle() -> Any:
    _refuse_graph("torch_npu.npu.graph_pool_handle")


def is_current_stream_capturing() -> bool:
    """False: no capture is ever under way in an estimate."""
    return False


# -- task groups: only inside a capture ------------------------------------------------------

def _stream_handle(stream: Any, call: str) -> int:
    from .streams import Stream

    if not isinstance(stream, Stream):
        raise TypeError(f"{call}: stream must be a torch_npu.npu.Stream, not "
                        f"{type(stream).__name__}")
    handle: Any = stream.npu_stream
    return int(handle)


def _not_capturing(call: str, acl: str) -> RuntimeError:
    return RuntimeError(
        f"{call}: the stream is not capturing ({acl} returned "
        f"ACL_ERROR_RT_STREAM_NOT_CAPTURED, {ACL_ERROR_RT_STREAM_NOT_CAPTURED}); task groups "
        f"are marked inside an ACL graph capture (torch_npu.npu.graph), which the estimate "
        f"does not run")


def graph_task_group_begin(stream: Any) -> None:
    """Mark the start of a task group on a capturing ``stream``.

    Raises:
        TypeError: ``stream`` is not a Stream.
        RuntimeError: the stream is not capturing (always, in an estimate).
    """
    _stream_handle(stream, "graph_task_group_begin")
    _session()
    raise _not_capturing("graph_task_group_begin", "aclmdlRICaptureTaskGrpBegin")


def graph_task_group_end(stream: Any) -> Any:
    """Mark the end of a task group and return its handle.

    Raises:
        TypeError: ``stream`` is not a Stream.
        RuntimeError: the stream is not capturing (always, in an estimate).
    """
    _stream_handle(stream, "graph_task_group_end")
    _session()
    raise _not_capturing("graph_task_group_end", "aclmdlRICaptureTaskGrpEnd")


def graph_task_update_begin(stream: Any, handle: Any) -> None:
    """Start replacing the tasks of the group ``handle`` (from ``graph_task_group_end``).

    Raises:
        TypeError: ``stream`` is not a Stream, or ``handle`` is not a task group's handle
            (none exists in an estimate).
    """
    _stream_handle(stream, "graph_task_update_begin")
    _session()
    raise TypeError(f"graph_task_update_begin: handle must be the task group handle "
                    f"graph_task_group_end returned, not {type(handle).__name__} (task "
                    f"groups are made inside an ACL graph capture, which the estimate does "
                    f"not run)")


def graph_task_update_end(stream: Any) -> None:
    """End the update begun by ``graph_task_update_begin``.

    Raises:
        TypeError: ``stream`` is not a Stream.
        RuntimeError: no update was begun on the stream (always, in an estimate).
    """
    _stream_handle(stream, "graph_task_update_end")
    _session()
    raise RuntimeError(
        f"graph_task_update_end: no task update was begun on the stream "
        f"(aclmdlRICaptureTaskUpdateEnd returned ACL_ERROR_STREAM_TASK_GROUP_STATUS, "
        f"{ACL_ERROR_STREAM_TASK_GROUP_STATUS})")


# -- super kernel scopes ---------------------------------------------------------------------

def _super_kernel_scope(scope_name: Any, call: str) -> None:
    if scope_name is not None and (not isinstance(scope_name, str) or not scope_name.strip()):
        # graphs.py _super_kernel_scope_begin_impl
        raise RuntimeError("scope_name should be None or a non-empty string.")
    profile = _session().runtime.profile
    if not (profile.name == "A3" or profile.soc_name.startswith("Ascend910_93")):
        raise RuntimeError(
            f"{call}: super kernel scopes are not supported on {profile.name} "
            f"(aclskScopeBegin's product table: Atlas A3 only)")


def super_kernel_scope_begin(scope_name: str | None = None) -> None:
    """Open a super kernel scope on the current stream (marker kernels, no memory).

    Raises:
        RuntimeError: ``scope_name`` is neither None nor a non-empty string; a product other
            than Atlas A3.
    """
    _super_kernel_scope(scope_name, "super_kernel_scope_begin")


def super_kernel_scope_end(scope_name: str | None = None) -> None:
    """Close a super kernel scope on the current stream (as :func:`super_kernel_scope_begin`)."""
    _super_kernel_scope(scope_name, "super_kernel_scope_end")


# -- operator handlers -----------------------------------------------------------------------

class NpuGraphOpHandler:
    """Base class of an operator's capture and update hooks (every hook a classmethod; the
    registry keeps the class). The defaults leave the call as it is."""

    #: op name -> [("arg" | "kwarg", index or name, update key)]
    UPDATE_SPECS: ClassVar[dict] = {}

    @classmethod
    def prepare_capture(cls, func: Any, args: Any, kwargs: Any) -> tuple:
        """The call to record: ``(func, args, kwargs)`` unchanged."""
        return func, args, kwargs

    @classmethod
    def postprocess_result(cls, result: Any, kwargs: Any) -> Any:
        """What the caller gets from the recorded call: ``result``."""
        return result

    @classmethod
    def get_update_specs(cls, op_name: str) -> list:
        """The update specs of ``op_name`` (empty when it has none)."""
        return cls.UPDATE_SPECS.get(op_name, [])

    @classmethod
    def update_args(cls, dispatch_record: Any, update_input: dict) -> None:
        """Write ``update_input``'s values into the recorded call where the op's specs say.
        O(specs)."""
        entry = getattr(dispatch_record, "op_cache_entry", None)
        for loc, where, key in cls.get_update_specs(getattr(entry, "__name__", "")):
            if key not in update_input:
                continue
            if loc == "arg" and len(dispatch_record.args) > where:
                dispatch_record.args[where] = update_input[key]
            elif loc == "kwarg":
                dispatch_record.kwargs[where] = update_input[key]

    @classmethod
    def record_wrap_kwarg(cls, key: str, value: Any, tensor_param_names: Any) -> Any:
        """How a keyword argument is kept in a recorded call: the value (no capture records
        one in an estimate)."""
        return value


#: op name -> handler class (what register_npu_graph_handler registered)
_HANDLERS: dict[str, type] = {}


def reset() -> None:
    """No handler registered, as in a new process (an estimate's start)."""
    _HANDLERS.clear()


def register_npu_graph_handler(op_names: Any) -> Any:
    """A class decorator registering the handler for ``op_names`` (a name or a list of
    them); a name registered again is overridden, with a warning in torch_npu's log."""
    names = list(op_names) if isinstance(op_names, (list, tuple)) else [op_names]
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"op names must be str, not {type(name).__name__}")

    def decorator(cls: type) -> type:
        for name in names:
            if name in _HANDLERS:
                _log.warning("NpuGraphOpHandler for '%s' is being overridden: %s -> %s",
                             name, _HANDLERS[name].__name__, cls.__name__)
            _HANDLERS[name] = cls
        return cls

    return decorator
