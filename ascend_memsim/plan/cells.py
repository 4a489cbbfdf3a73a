"""One task of a study, as a worker runs it: one snapshot on one product at one capacity, every
setting of the grid that is not answered yet, searched as :func:`sweep_settings` searches
them (one reading and one compilation of the snapshot, a setting that cannot change any
replay answered by the one it replays alike).

A worker (this process, a local worker process or a Dask worker) keeps the last few
snapshots it compiled, by their SHA-256, so the tasks of one snapshot compile it once per
worker. The task and its answers are plain data (tuples, dicts, strings and numbers), so any
executor can send them.
"""

from __future__ import annotations

import threading
import warnings
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from ..allocators.conf import parse_alloc_conf
from ..memory.errors import AclError
from .columns import same_outcome_key
from .grid import parse_snapshot
from .results import FitSearch
from .search import Source, search

__all__ = ["CellTask", "run_task", "forget", "answer_of", "ANSWER_FIELDS"]

#: the fields of a cell's answer (and of its cache entry) -> the types their values take
ANSWER_FIELDS: dict[str, tuple[type, ...]] = {
    "fits": (bool,), "smallest": (int, type(None)), "smallest_exact": (bool,),
    "all_fit_from": (int, type(None)), "lower_bound": (int,), "peak_allocated": (int,),
    "peak_reserved": (int,), "peak_device": (int,), "retries": (int,), "replays": (int,),
    "seconds": (float,), "same_as": (str, type(None)),
}

#: compiled snapshots a worker keeps (a million-entry snapshot's columns take about 30 MB
#: beside its parsed entries)
KEEP = 4
_SOURCES: OrderedDict[str, Source] = OrderedDict()
_LOCK = threading.Lock()


@dataclass(frozen=True)
class CellTask:
    """Snapshot ``sha256`` (named ``name``) on ``product`` up to ``capacity``: the answers
    for ``missing``, each one of ``settings`` (all of this product's, in the grid's order:
    a setting is answered by the first that replays alike)."""

    sha256: str
    name: str
    product: str
    capacity: int
    settings: tuple[str, ...]
    missing: tuple[str, ...]
    cann: str
    step: int
    window: int


def answer_of(r: FitSearch, same_as: str | None = None) -> dict[str, Any]:
    """A cell's answer from the search of its setting (or of the setting ``same_as``, whose
    search answers it with no replay of its own)."""
    return {"fits": r.fits, "smallest": r.smallest, "smallest_exact": r.smallest_exact,
            "all_fit_from": r.all_fit_from, "lower_bound": r.lower_bound,
            "peak_allocated": r.peak_allocated, "peak_reserved": r.peak_reserved,
            "peak_device": r.peak_device, "retries": r.retries,
            "replays": 0 if same_as is not None else r.replays,
            "seconds": 0.0 if same_as is not None else float(r.seconds), "same_as": same_as}


def _source(sha256: str, data: bytes, name: str) -> Source:
    """The snapshot with these bytes, parsed and compiled once per worker (the last
    :data:`KEEP` kept)."""
    with _LOCK:
        src = _SOURCES.get(sha256)
        if src is not None:
            _SOURCES.move_to_end(sha256)
            return src
        src = Source(parse_snapshot(data), None, name)
        src.columns  # noqa: B018  (compiled here, once, for every product)
        _SOURCES[sha256] = src
        while len(_SOURCES) > KEEP:
            _SOURCES.popitem(last=False)
        return src


def forget() -> None:
    """Drop the compiled snapshots this process keeps (a study in this process ends)."""
    with _LOCK:
        _SOURCES.clear()


def run_task(task: CellTask, data: bytes) -> list[dict[str, Any]]:
    """The answers of ``task`` over the snapshot ``data`` (its bytes), one dict per setting
    of ``task.missing``, in order: ``{"setting", "answer"}``; ``{"setting", "like"}`` when
    it replays alike a setting the task was not asked for (the study has its answer); or
    ``{"setting", "error"}`` when the snapshot cannot be searched (the message says why)."""
    try:
        base = _source(task.sha256, data, task.name)
        src = base if base.profile.name == task.product else base.on(task.product)
        leader: dict[str, str] = {}
        first: dict[str, str] = {}
        for conf in task.settings:
            key = same_outcome_key(parse_alloc_conf(conf), src.columns, src.profile,
                                   task.cann)
            leader[conf] = first.setdefault(key, conf)
        found: dict[str, FitSearch] = {}
        out: list[dict[str, Any]] = []
        for conf in task.missing:
            like = leader[conf]
            if like != conf and like not in task.missing:
                out.append({"setting": conf, "like": like})
                continue
            if like not in found:
                with warnings.catch_warnings():
                    # page_size:1g on a part without 1 GiB pages: torch_npu's fallback
                    # warning, once per worker, is noise in a table (the row says the cost)
                    warnings.filterwarnings("ignore", "The malloc 1G large-page",
                                            UserWarning)
                    found[like] = search(src, like, task.cann, task.step, task.capacity,
                                         task.window)
            out.append({"setting": conf, "answer": answer_of(
                found[like], None if like == conf else like)})
        return out
    except (AclError, ValueError) as e:
        message = e.message if isinstance(e, AclError) else str(e)
        return [{"setting": conf, "error": message} for conf in task.missing]
