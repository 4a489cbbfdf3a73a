"""The entries of a snapshot's trace as a replay through the caching allocator reads them:
which are acted on, which only counted, and the 64-bit bounds every field must keep; one walk
(:func:`tensor_events`) for :func:`~.tensor_replay.replay_tensors` and for the compiled
columns of ``ascend_memsim.plan``, so the two replay paths cannot read a file differently.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, TypeGuard

from .plain import WideInt, brief

__all__ = ["ALLOC", "FREE", "OOM", "tensor_events"]

#: the allocator's own segment calls: re-derived by the replay's allocator, counted
_DERIVED = ("segment_alloc", "segment_free", "segment_map", "segment_unmap")

#: the integers of a snapshot are 64-bit (``snapshot._wide_field``); a pointer, size or stream
#: outside them (or not an integer) is not replayed: as a dict key an unbounded integer lets
#: a file choose colliding hashes
_LOW, _END = -(1 << 63), 1 << 64


def _bad_field(e: dict[str, Any], keys: tuple[str, ...]) -> str | None:
    """The first of ``keys`` whose value in entry ``e`` is present but not a 64-bit integer
    (a size: not a non-negative one), described; None when all are good."""
    for key in keys:
        value = e.get(key, 0)
        kind = value.__class__
        if kind is int and (0 if key == "size" else _LOW) <= value < _END:
            continue
        if kind is int and _LOW <= value < 0:
            return f"field {key!r} is negative ({value})"
        if kind is int or kind is WideInt:
            return f"field {key!r} is {brief(value)}; every integer of a snapshot fits in 64 bits"
        return f"field {key!r} is {brief(value)}, not an integer"
    return None


def _int64(value: Any) -> TypeGuard[int]:
    return value.__class__ is int and _LOW <= value < _END


#: the kinds of event :func:`tensor_events` yields
ALLOC, FREE, OOM = 0, 1, 2


def tensor_events(entries: list[Any], workspace: set[int] | frozenset[int], name: str,
                  count: Callable[[str, str], None],
                  problems: list[str]) -> Iterator[tuple[int, int, Any, int, Any, dict[str, Any]]]:
    """The entries of a snapshot's trace that a replay through the caching allocator acts on,
    checked once for every replay path (:func:`replay_tensors` and the compiled columns of
    ``ascend_memsim.plan``): ``(kind, index, addr, size, stream, entry)`` for each ``alloc``
    (:data:`ALLOC`), completed free (:data:`FREE`) and ``oom`` with a size (:data:`OOM`) whose
    fields are in range. Every entry is counted (``count(outcome, action)``, after the caller
    has acted on it, so an entry that ended the replay is not) and every bad one named in
    ``problems``. O(entries).

    DECISION: a block goes back when torch_npu completed its free (``free_completed``, after
    the events of record_stream), so the delayed reuse is the recorded one. DECISION: a
    request that failed in the recording (``oom``) is tried again (it carries no address:
    NPUCachingAllocator.cpp malloc records the OOM with device_free); if it fits it is freed
    at once, as the recorded program never got the tensor; if it fails again the replay goes
    on, as the recorded job did (it caught the error).
    """
    # an entry's fields, as the file gave them (checked here before they are yielded)
    addr: Any
    size: Any
    stream: Any
    low, end = _LOW, _END
    for index, e in enumerate(entries):
        if not isinstance(e, dict):
            count("skipped", "not an entry")
            continue
        action = e.get("action")
        if index in workspace:
            count("workspace", str(action))
            continue
        if action == "alloc":
            addr, size, stream = e.get("addr"), e.get("size"), e.get("stream", 0)
            if not (addr.__class__ is int and size.__class__ is int and stream.__class__ is int
                    and low <= addr < end and 0 <= size < end and low <= stream < end):
                problems.append(f"{name}: entry {index}: "
                                f"{_bad_field(e, ('addr', 'size', 'stream'))}; ignored")
                count("skipped", "alloc")
                continue
            yield ALLOC, index, addr, size, stream, e
            count("replayed", action)
        elif action == "free_completed" or action == "free":
            addr = e.get("addr")
            if not (addr.__class__ is int and low <= addr < end):
                problems.append(f"{name}: entry {index}: {_bad_field(e, ('addr',))}; ignored")
                count("skipped", action)
                continue
            yield FREE, index, addr, 0, None, e
            count("replayed", action)
        elif action == "free_requested":
            count("replayed", action)
        elif action in _DERIVED:
            count("rederived", action)
        elif action == "oom":
            size, stream = e.get("size"), e.get("stream", 0)
            bad = _bad_field(e, ("size", "stream"))
            if bad is not None:
                problems.append(f"{name}: entry {index}: {bad}; ignored")
                count("skipped", action)
                continue
            if size > 0:
                yield OOM, index, None, size, stream, e
            count("replayed", action)
        elif action == "snapshot" or action == "annotate":
            count("counted", action)
        else:
            count("skipped", str(action))
