"""Where a job plan's cells run: the study's executors (:mod:`.executors`: this process, local
workers, a Dask cluster reached within its deadline, the workers' version checked), given a
way to take cells one at a time, as a bisection asks for them, and to say which finished.

Each cell is a process of its own (:mod:`.job_cells`), so the local executor keeps no pool of
worker processes: ``jobs`` threads, each waiting on one cell's process, and every running
cell ended when the plan is (an interruption included). On Dask, a cell runs on a worker as
:func:`~ascend_memsim.plan.job_cells.run_cell`; a cell already running there when the plan
stops runs to its end.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

from .executors import DaskCluster, Inline, Processes
from .job_cells import JobCell, Runner, run_cell

__all__ = ["CellExecutor", "InlineCells", "LocalCells", "DaskCells", "make_cell_executor"]


class CellExecutor(ABC):
    """Takes cells (:meth:`submit`) and gives back those finished (:meth:`finished`)."""

    @abstractmethod
    def submit(self, cell: JobCell) -> None:
        """Start ``cell`` (or queue it until a worker is free)."""

    @abstractmethod
    def finished(self) -> list[tuple[JobCell, dict[str, Any]]]:
        """Wait for one cell or more to finish; their answers (empty when none is
        submitted and unfinished)."""

    @property
    @abstractmethod
    def running(self) -> int:
        """Cells submitted and not yet given back."""

    @abstractmethod
    def close(self) -> None:
        """End every running cell (on Dask: cancel those not started) and the workers."""

    @abstractmethod
    def describe(self) -> str:
        """Where the cells run, for a person."""


class InlineCells(Inline, CellExecutor):
    """Each cell in turn, waited for in this thread."""

    def __init__(self) -> None:
        self._queue: list[JobCell] = []
        self._runner = Runner()

    def submit(self, cell: JobCell) -> None:
        self._queue.append(cell)

    def finished(self) -> list[tuple[JobCell, dict[str, Any]]]:
        if not self._queue:
            return []
        cell = self._queue.pop(0)
        return [(cell, self._runner.run(cell))]

    @property
    def running(self) -> int:
        return min(len(self._queue), 1)

    def close(self) -> None:
        self._runner.stop()

    def describe(self) -> str:
        return "one cell at a time"


class LocalCells(Processes, CellExecutor):
    """``jobs`` cells at a time on this machine."""

    def __init__(self, jobs: int) -> None:
        super().__init__(jobs)
        self._runner = Runner()
        self._threads: ThreadPoolExecutor | None = None
        self._futures: dict[Future[dict[str, Any]], JobCell] = {}

    def submit(self, cell: JobCell) -> None:
        if self._threads is None:
            self._threads = ThreadPoolExecutor(self.workers,
                                               thread_name_prefix="ascend-memsim-plan")
        self._futures[self._threads.submit(self._runner.run, cell)] = cell

    def finished(self) -> list[tuple[JobCell, dict[str, Any]]]:
        if not self._futures:
            return []
        done, _ = wait(list(self._futures), return_when=FIRST_COMPLETED)
        return [(self._futures.pop(f), f.result()) for f in done]

    @property
    def running(self) -> int:
        return min(len(self._futures), self.workers)

    def describe(self) -> str:
        return f"{self.workers} cells at a time on this machine"

    def close(self) -> None:
        self._runner.stop()
        if self._threads is not None:
            self._threads.shutdown(wait=True, cancel_futures=True)
            self._threads = None
        self._futures.clear()


class DaskCells(DaskCluster, CellExecutor):
    """Cells on a Dask cluster, each a task of its own (never merged: ``pure=False``)."""

    def __init__(self, jobs: int, address: str | None = None) -> None:
        self._futures: dict[Any, JobCell] = {}
        super().__init__(jobs, address)

    def submit(self, cell: JobCell) -> None:
        self._futures[self._client.submit(run_cell, cell, pure=False)] = cell

    def finished(self) -> list[tuple[JobCell, dict[str, Any]]]:
        if not self._futures:
            return []
        import distributed

        # distributed has no annotations: its wait, called through the module (Any)
        waiter: Any = distributed
        done = waiter.wait(list(self._futures), return_when="FIRST_COMPLETED").done
        return [(self._futures.pop(f), f.result()) for f in done]

    @property
    def running(self) -> int:
        return min(len(self._futures), self.workers)

    def close(self) -> None:
        futures, self._futures = list(getattr(self, "_futures", {})), {}
        client = getattr(self, "_client", None)
        if futures and client is not None:
            client.cancel(futures)
        super().close()


def make_cell_executor(kind: str, jobs: int, scheduler: str | None) -> CellExecutor:
    """The cell executor of :func:`~ascend_memsim.plan.executors.executor_kind` ``kind``; a
    Dask one connects (or starts its local cluster of ``jobs`` workers) here."""
    if kind == "dask":
        return DaskCells(jobs, scheduler)
    return LocalCells(jobs) if kind == "processes" else InlineCells()

