"""What an estimate cannot follow as the NPU would, and what it does instead: compiled graphs
(``torch.compile``), ACL graph capture (``torch_npu.npu.NPUGraph``) and the values of
tensors (``.item()``).

- ``torch.compile`` (and ``Module.compile``): TorchDynamo compiles nothing while a
  ``TorchDispatchMode`` that is not an infrastructure mode is active
  (``torch/_dynamo/convert_frame.py``: "non-infra torch dispatch mode present, this is not
  supported today in torch.compile"), and the estimate's fake tensors and storage tracker
  are such modes: the compiled callable runs eagerly, operator by operator. DECISION: let it
  run so (traced, as eager mode), with the eager backend (nothing is compiled either way, and
  the default backend's import costs seconds; ``fullgraph=True`` would fail on a frame
  Dynamo skips), and say it in the result: the figures are eager mode's, and a compiled
  graph may hold fewer activations (fused operators, AOT autograd's choice of saved tensors).
- ACL graphs (``torch_npu.npu.NPUGraph``, ``graph``, ``make_graphed_callables``,
  ``graph_pool_handle``; ``Ascend/pytorch`` ``torch_npu/npu/graphs.py``): a captured graph's
  tensors live in a private memory pool for as long as the graph does, which the estimate's
  allocator model has no pool for. DECISION: refused with the line and the way out (run the
  step uncaptured during the estimate), not guessed; ``is_current_stream_capturing()`` is
  False.
- ``.item()``, ``float(t)``, ``int(t)``, ``bool(t)`` need a value fake tensors do not have.
  By default the script stops (:class:`~.session.DataDependentOperation`); with an
  ``item_value`` each such read returns that value in the tensor's kind (bool: not zero), so
  a script that logs its loss runs on. A read of a tensor whose value torch knows (one made
  from a Python number) still gives the true value.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

__all__ = ["EstimateStopped", "UnsupportedFeature", "install", "item", "graph_refusal",
           "where"]

#: what the summary says of a script that used torch.compile
COMPILE_NOTE = ("torch.compile at {where} ran eagerly (TorchDynamo compiles nothing under fake "
                "tensors): the figures are eager mode's; a compiled graph may hold fewer "
                "activations")

# torch warns of the estimate's own global module hook when a compiled module runs
_HOOK_WARNING = r"Using `torch.compile\(module\)` when there are global hooks"
# and when its own code reads a fake tensor's data pointer (FSDP compares storages so)
_DATA_PTR_WARNING = r"Accessing the data pointer of FakeTensor is deprecated"


class EstimateStopped(RuntimeError):
    """The script did something the estimate cannot follow; the message names it, the
    script's line and the way out."""


class UnsupportedFeature(EstimateStopped):
    """A feature the estimate refuses (ACL graph capture): the message says why."""


def where(session: Any) -> str:
    """The script's line that called into the estimate, as ``file:line in name``."""
    frames = session.frames()
    return (f"{frames[0]['filename']}:{frames[0]['line']} in {frames[0]['name']}"
            if frames else "an unknown line")


def install(session: Any) -> Any:
    """Put ``torch.compile`` in the estimate's hands for the session; a callable that undoes
    it."""
    original = torch.compile

    def compile(model: Any = None, **kwargs: Any) -> Any:
        note = COMPILE_NOTE.format(where=where(session))
        if note not in session.notes:
            session.notes.append(note)
        if model is None:
            return lambda fn: original(fn, backend="eager")
        return original(model, backend="eager")

    torch.compile = compile
    # the filters as they were come back when the session ends (the script's own included:
    # its process would end there too)
    kept = warnings.catch_warnings()
    kept.__enter__()
    warnings.filterwarnings("ignore", message=_HOOK_WARNING, category=UserWarning)
    warnings.filterwarnings("ignore", message=_DATA_PTR_WARNING, category=UserWarning)

    def undo() -> None:
        torch.compile = original
        kept.__exit__(None, None, None)

    return undo


def item(session: Any, tensor: torch.Tensor) -> Any:
    """The value a data-dependent read of ``tensor`` gives (``session.item_value`` in the
    tensor's kind)."""
    value = session.item_value
    if tensor.dtype is torch.bool:
        return bool(value)
    if tensor.dtype.is_floating_point or tensor.dtype.is_complex:
        return float(value)
    return int(value)


def graph_refusal(session: Any, name: str) -> UnsupportedFeature:
    """The refusal of ACL graph capture (``name``, called at the script's line)."""
    return UnsupportedFeature(
        f"{name} at {where(session)}: ACL graph capture is not simulated (a captured "
        f"graph's tensors live in a private memory pool the estimate does not model). The "
        f"way out: run the step uncaptured during the estimate (if "
        f"os.environ.get('ASCEND_MEMSIM_ESTIMATE'): call it directly); its peak is the "
        f"memory the graph's pool would hold")
