"""``torch_npu.erase_stream`` (a module of its own: it needs :class:`~.Stream`, and
:mod:`torch_npu.npu <..npu>` does not import it, so the two import one way)."""

from __future__ import annotations

from typing import Any

import torch

from ._state import active
from .streams import Stream

__all__ = ["_erase_stream"]


def _erase_stream(tensor: torch.Tensor, stream: Any) -> None:
    """torch_npu.erase_stream: undo ``tensor.record_stream(stream)``, so the block goes back to
    the pool when the tensor is freed, without waiting for ``stream``'s work.

    As ``NPUCachingAllocator::eraseStream`` (``Ascend/pytorch``
    ``torch_npu/csrc/core/npu/NPUCachingAllocator.cpp``): a tensor the caching allocator did
    not make (a CPU tensor) is skipped; a block allocated on a stream other than its device's
    current one keeps its uses (the work on the current stream may not be done with it);
    otherwise ``stream`` leaves the block's stream uses. O(1).

    Raises:
        TypeError: ``tensor`` is not a tensor, or ``stream`` not a ``torch_npu.npu.Stream``.
    """
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"tensor should be torch.Tensor, could not be {type(tensor)}")
    if not isinstance(stream, Stream):
        raise TypeError(f"stream should be torch_npu.npu.Stream, could not be {type(stream)}")
    session = active()
    rec = None if session is None else session.storage_of(tensor)
    if rec is None or not rec.ptr:
        return
    handle: Any = stream.npu_stream
    session.allocator.erase_stream(rec.ptr, int(handle), current=session.stream)
