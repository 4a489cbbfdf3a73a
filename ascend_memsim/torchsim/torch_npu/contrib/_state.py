"""What ``torch_npu.contrib`` keeps between calls, for one estimate.

torch_npu's contrib pieces keep state on their classes and module objects for the life of
the process: ``NpuCachedDropout``'s masks made ahead, ``NpuDropPath``'s random tensors,
``roll``'s index tensors, whether ``MultiheadAttention`` runs the fused operator. DECISION:
here that state lives for the estimate that made it and is forgotten when the estimate ends
(:func:`forget_at_exit`): the tensors it holds are that estimate's, on its simulated device,
and the next estimate starts as a fresh process would.
"""

from __future__ import annotations

from collections.abc import Callable

from ..npu import active

__all__ = ["forget_at_exit"]

#: the forgetters registered with the running estimate, by id of what they forget
_registered: dict[int, object] = {}


def forget_at_exit(key: object, forget: Callable[[], None]) -> None:
    """Call ``forget`` when the running estimate ends, once for ``key`` (the state's owner)
    however often asked; nothing outside an estimate. O(1)."""
    session = active()
    if session is None or _registered.get(id(key)) is session:
        return
    _registered[id(key)] = session

    def run() -> None:
        forget()
        _registered.pop(id(key), None)

    session.on_exit(run)
