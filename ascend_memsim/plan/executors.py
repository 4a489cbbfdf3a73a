"""Where a study's tasks run: in this process, in local worker processes, or on a Dask
cluster (a local one, or a scheduler's address). Each gets every snapshot once per worker and
gives each task's answers back as it finishes; the answers are those of
:func:`~ascend_memsim.plan.cells.run_task`, wherever it ran.

DECISION: Dask distributed is the distributed engine, not Ray. Both are engines users run;
measured on the 2-core machine this was built on (Python 3.11, ``pip install`` into one
environment): ``dask[distributed]`` added 38 MiB in 5 s, pure-Python wheels, and a
``LocalCluster`` of 2 worker processes started in 0.7-0.9 s and closed in 0.3 s; ``ray``
added 247 MiB in 8 s (a platform wheel with its own servers), and ``ray.init`` started in
2.8-3.8 s and shut down in 1.4-1.6 s, leaving session folders under the temporary directory.
A local cluster that starts in under a second keeps the tests that run one small, and the
same ``Client(address)`` call reaches a real cluster.

Processes (``jobs`` > 1 on one machine): by ``fork`` where the platform has it, the
snapshots' bytes shared copy-on-write (nothing sent); elsewhere pickled once to each worker.
Dask: the bytes scattered to every worker once (``Client.scatter(broadcast=True)``); tasks
take them by reference.

A scheduler's address is checked before anything is sent (a scheme distributed can connect
over, a port where the scheme has one), and the connection to it has a deadline, Dask's own
connect timeout (:func:`connect_timeout`): ``Client(address, timeout=...)`` bounds the TCP
connect and the client's registration, not the handshake between them
(``distributed.comm.core.connect`` awaits the peer's handshake with no timeout), so a server
that accepts and then says nothing would hold the study for ever. Whatever goes wrong there,
a silence, bytes that are no Dask message (one announcing a 1 TiB frame makes numpy's
allocation fail), a transport distributed no longer has, a scheduler with no workers, ends in
:class:`ClusterUnavailable` naming the address and what happened.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import multiprocessing
from abc import ABC, abstractmethod
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any

from .. import __version__
from ..memory.errors import InvalidArgument
from .cells import CellTask, forget, run_task
from .grid import Snapshot

__all__ = ["Executor", "Inline", "Processes", "DaskCluster", "executor_kind", "make_executor",
           "EXECUTORS", "ClusterUnavailable", "connect_timeout"]

EXECUTORS = ("inline", "processes", "dask")


class ClusterUnavailable(ConnectionError):
    """The Dask scheduler at an address cannot run a study: no answer in time, an answer
    that is no Dask scheduler's, no worker joining; the message names the address and why
    (the error distributed raised is its ``__cause__``)."""


class Executor(ABC):
    """Runs a study's tasks: :meth:`run` yields ``(task index, answers)`` as each finishes;
    :meth:`close` (or leaving a ``with`` block) ends its workers, also on an interruption."""

    name = ""
    #: worker processes (1 for this process)
    workers = 1

    @abstractmethod
    def run(self, snapshots: dict[str, Snapshot],
            tasks: list[CellTask]) -> Iterator[tuple[int, list[dict[str, Any]]]]:
        """Each task's ``(index, answers)``, in the order they finish."""

    def close(self) -> None:  # noqa: B027 (an executor without workers has nothing to end)
        """End the executor's workers (none here)."""

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def describe(self) -> str:
        return self.name


class Inline(Executor):
    """Every task in this process, one after another."""

    name = "inline"

    def run(self, snapshots: dict[str, Snapshot],
            tasks: list[CellTask]) -> Iterator[tuple[int, list[dict[str, Any]]]]:
        for i, task in enumerate(tasks):
            yield i, run_task(task, snapshots[task.sha256].data)

    def close(self) -> None:
        forget()     # the compiled snapshots are not kept past the study

    def describe(self) -> str:
        return "this process"


#: the snapshots' bytes by SHA-256, in a local worker process (its pool's initializer)
_BYTES: dict[str, bytes] = {}


def _install(data: dict[str, bytes]) -> None:
    _BYTES.update(data)


def _pool_task(task: CellTask) -> list[dict[str, Any]]:
    return run_task(task, _BYTES[task.sha256])


class Processes(Executor):
    """``jobs`` worker processes on this machine (the search's own ``--jobs`` pool)."""

    name = "processes"

    def __init__(self, jobs: int) -> None:
        self.workers = jobs
        self._pool: ProcessPoolExecutor | None = None

    def run(self, snapshots: dict[str, Snapshot],
            tasks: list[CellTask]) -> Iterator[tuple[int, list[dict[str, Any]]]]:
        methods = multiprocessing.get_all_start_methods()
        context = multiprocessing.get_context("fork" if "fork" in methods else None)
        self._pool = ProcessPoolExecutor(
            self.workers, mp_context=context, initializer=_install,
            initargs=({sha: s.data for sha, s in snapshots.items()},))
        futures = {self._pool.submit(_pool_task, t): i for i, t in enumerate(tasks)}
        for f in as_completed(futures):
            yield futures[f], f.result()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def describe(self) -> str:
        return f"{self.workers} local processes"


def _worker_version() -> str:
    from .. import __version__ as version

    return version


class DaskCluster(Executor):
    """A Dask cluster: the scheduler at ``address``, or a ``LocalCluster`` of ``jobs``
    single-threaded worker processes on the loopback (its HTTP server on a free port, not
    8787, which another cluster may hold), started here and closed after."""

    name = "dask"

    def __init__(self, jobs: int, address: str | None = None) -> None:
        try:
            from distributed import Client, LocalCluster
        except ImportError:
            raise ImportError("the dask executor needs Dask distributed: pip install "
                              "'ascend-memsim[study]'") from None
        self.address = address
        self._cluster: Any = None
        self._client: Any = None
        if address is None:
            # DECISION: the cluster's own logs only at CRITICAL: a task's error reaches the
            # study as its exception, and what the workers log at ERROR on a clean close is
            # a race ("Failed to communicate with scheduler during heartbeat", a traceback,
            # seen on a loaded machine) that reads as a crash
            self._cluster = LocalCluster(
                n_workers=jobs, threads_per_worker=1, processes=True, host="127.0.0.1",
                dashboard_address=":0", silence_logs=logging.CRITICAL)
            try:
                self._client = Client(self._cluster)
                running = self._client.run(_worker_version)
            except BaseException:
                self.close()
                raise
        else:
            running = self._connect(address)
        if not all(isinstance(v, str) for v in running.values()):
            self.close()
            raise ClusterUnavailable(f"the workers of {address or 'a local Dask cluster'} "
                                     f"did not say which ascend-memsim they run")
        versions = set(running.values())
        if versions - {__version__}:
            self.close()
            raise InvalidArgument(f"the cluster's workers run ascend-memsim "
                                  f"{', '.join(sorted(versions))}, this process "
                                  f"{__version__}: the answers (and the cache) need one version")
        self.workers = len(running)

    def _connect(self, address: str) -> dict[str, Any]:
        """Connect to the scheduler at ``address`` within :func:`connect_timeout`, wait as
        long for a worker, and ask each worker its ascend-memsim version.

        Raises:
            InvalidArgument: an address distributed cannot connect to.
            ClusterUnavailable: the connection failed, timed out, or met no Dask scheduler;
                no worker joined in time.
        """
        _check_address(address)
        timeout = connect_timeout()
        where = f"the Dask scheduler at {address}"
        try:
            # half the deadline for the TCP connect and its retries (its own error, e.g.
            # "connection refused", arrives before the deadline), the whole for the rest
            self._client = _deadline_client()(address, timeout=timeout / 2)
        except Exception as e:
            raise ClusterUnavailable(f"cannot use {where}: {_why(e, timeout)}") from e
        try:
            try:
                self._client.wait_for_workers(1, timeout=timeout)
            except TimeoutError as e:
                raise ClusterUnavailable(f"{where} has no workers: none joined within "
                                         f"{timeout:g} s (start one: dask worker "
                                         f"{address})") from e
            running: dict[str, Any] = self._client.run(_worker_version)
        except ClusterUnavailable:
            self.close()
            raise
        except Exception as e:
            self.close()
            raise ClusterUnavailable(f"cannot use {where}: {_why(e, timeout)}") from e
        except BaseException:
            self.close()
            raise
        return running

    def run(self, snapshots: dict[str, Snapshot],
            tasks: list[CellTask]) -> Iterator[tuple[int, list[dict[str, Any]]]]:
        from distributed import as_completed as finished

        client = self._client
        sent = client.scatter({f"ascend-memsim-snapshot-{sha}": s.data
                               for sha, s in snapshots.items()}, broadcast=True)
        futures = {}
        for i, t in enumerate(tasks):
            f = client.submit(run_task, t, sent[f"ascend-memsim-snapshot-{t.sha256}"],
                              pure=False)
            futures[f] = i
        try:
            for f in finished(futures):
                yield futures[f], f.result()
        finally:
            client.cancel(list(futures))

    def close(self) -> None:
        client, self._client = getattr(self, "_client", None), None
        if client is not None:
            client.close()
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None

    def describe(self) -> str:
        where = self.address or "a local cluster"
        return f"Dask ({where}, {self.workers} workers)"


def connect_timeout() -> float:
    """The deadline of a connection to a scheduler, in seconds: Dask's own
    ``distributed.comm.timeouts.connect`` (30 s unless the user's Dask configuration, e.g.
    ``DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT=60s``, says otherwise), applied to the whole
    connection: the TCP connect, the handshake and the client's registration."""
    import dask
    from dask.utils import parse_timedelta

    seconds = parse_timedelta(dask.config.get("distributed.comm.timeouts.connect"), "s")
    if seconds is None or not seconds > 0:
        raise InvalidArgument("Dask's distributed.comm.timeouts.connect must be a positive "
                              "time for a study to reach a scheduler")
    return float(seconds)


def _check_address(address: str) -> None:
    """Raise InvalidArgument for an address distributed cannot connect to (an unknown
    scheme, a transport it no longer has, a missing port), before any connection."""
    from distributed import __version__ as version
    from distributed.comm import parse_address
    from distributed.comm.registry import get_backend

    try:
        scheme, loc = parse_address(address)
        backend = get_backend(scheme)
    except ValueError as e:
        raise InvalidArgument(f"the scheduler address {address!r}: {e}") from None
    try:
        # ucx:// in distributed 2025.x and later: a connector that cannot be made
        backend.get_connector()
    except Exception as e:
        raise InvalidArgument(f"the scheduler address {address!r}: Dask distributed "
                              f"{version} cannot connect over {scheme}:// "
                              f"({type(e).__name__}: {e})") from None
    try:
        backend.get_address_host_port(loc)
    except NotImplementedError:
        pass      # a transport of no hosts and ports (inproc://, within this process)
    except ValueError as e:
        raise InvalidArgument(f"the scheduler address {address!r}: {e} (e.g. "
                              f"tcp://10.0.0.1:8786)") from None


@functools.cache
def _deadline_client() -> type:
    """distributed's ``Client`` whose start, the whole connection, ends within twice its
    ``timeout`` (``distributed.utils.sync``'s ``callback_timeout``, which ``Client.start``
    passes on), and which closes itself when it does not start."""
    from distributed import Client

    class DeadlineClient(Client):
        def start(self, **kwargs: Any) -> None:
            try:
                super().start(callback_timeout=2 * self._timeout, **kwargs)
            except BaseException:
                with contextlib.suppress(Exception):
                    self.close(timeout=self._timeout)
                raise

    return DeadlineClient


def _why(e: Exception, timeout: float) -> str:
    """What went wrong connecting to a scheduler, for a person."""
    if isinstance(e, TimeoutError):
        return (f"no answer as a Dask scheduler within {timeout:g} s (Dask's "
                f"distributed.comm.timeouts.connect); is something else listening there?")
    cause = e.__cause__
    detail = f"{e}" + (f" ({type(cause).__name__}: {cause})" if str(cause or "") else "")
    if isinstance(e, OSError):
        return f"cannot connect: {detail}"
    return (f"what came back is no Dask scheduler's answer ({type(e).__name__}: "
            f"{detail[:300]})")


def executor_kind(executor: str | None, jobs: int, scheduler: str | None) -> str:
    """The executor named, checked (None: ``dask`` with a scheduler address, ``processes``
    for ``jobs`` > 1, else ``inline``)."""
    if executor is None:
        executor = "dask" if scheduler else ("processes" if jobs > 1 else "inline")
    if executor not in EXECUTORS:
        raise InvalidArgument(f"executor must be one of {', '.join(EXECUTORS)}, got "
                              f"{str(executor)[:40]!r}")
    if scheduler is not None and executor != "dask":
        raise InvalidArgument("a scheduler address is for the dask executor")
    if scheduler is not None and not isinstance(scheduler, str):
        raise InvalidArgument("the scheduler address must be a string, e.g. "
                              "tcp://10.0.0.1:8786")
    return executor


def make_executor(kind: str, jobs: int, scheduler: str | None) -> Executor:
    """The executor of :func:`executor_kind` ``kind``; a Dask one connects (or starts its
    local cluster) here."""
    if kind == "dask":
        return DaskCluster(jobs, scheduler)
    return Processes(jobs) if kind == "processes" else Inline()
