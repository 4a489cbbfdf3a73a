"""One cell of a job's plan, as a worker runs it: one estimate of the script at one assignment
of its knobs, ``python -m ascend_memsim estimate --json ...``, in a process of its own, and
its answer (fits, does not fit, failed) as a few plain numbers.

The cell is plain data (strings, bytes, tuples), so this process, a local thread or a Dask
worker runs it alike; the estimate is named by the module the worker's interpreter runs, so
nothing of torch is imported here (``plan/`` stays below ``torchsim/``). What it checks
before running: its folder is there and every file the plan hashed still has that hash on
this worker (a script edited mid-plan, or another copy on a cluster's node, would give an
answer under the wrong key).

The process: a child forked from a warm-start server (:mod:`.job_server`) that imported
torch and the estimate once, so a cell costs its estimate, not 2 to 3 seconds of the
interpreter's start and torch's import (measured on the machine this was built on: 0.13 s a
cell of a small script warm, 3.0 s cold). Each child starts from the imports and nothing
else, in its own session, folder and environment. DECISION: a cell starts cold, a new
interpreter, when its environment differs from the server's in a variable that something
imported before the fork may have read (:data:`COLD_PREFIXES`); ``PYTORCH_NPU_ALLOC_CONF``
and ``HCCL_BUFFSIZE`` are read in the child, at the allocator's first use and at the
communicators' making. A Dask worker is a daemon process: it may start the server (a
subprocess) though it may not fork multiprocessing's children. Idle servers are kept for the
next cell and the next plan of this process, and end with it.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..memory.constants import MiB
from .knobs import file_sha256

__all__ = ["JobCell", "Copy", "run_cell", "Runner", "answer_of", "ANSWER_FIELDS",
           "VERDICTS", "MAX_OUTPUT_BYTES", "COLD_PREFIXES", "WARM_NAMES"]

#: the fields of a cell's answer (and of its cache entry) -> the types their values take
ANSWER_FIELDS: dict[str, tuple[type, ...]] = {
    "verdict": (str,), "capacity": (int,), "peak_reserved": (int,), "total": (int,),
    "margin": (int,), "first_rank": (int, type(None)), "tightest_rank": (int, type(None)),
    "oom": (bool,), "why": (str,), "seconds": (float,),
}
#: fits: no rank ran out of memory and the script ended well; over: a rank ran out of
#: memory or its card's total is over its capacity; failed: the script failed otherwise
#: (its exit status, a stopped read of a value); error: no estimate came back
VERDICTS = ("fits", "over", "failed", "error")
#: DECISION: an estimate's JSON is tens of kilobytes (hundreds with many rank classes); a
#: larger output is not an estimate's and is not read whole
MAX_OUTPUT_BYTES = 32 * MiB
#: the end of the estimate's stderr kept for a message (its last lines say why it failed)
_TAIL_BYTES = 4096
#: DECISION: a cell starts cold (a new interpreter) when its environment differs from the
#: warm-start server's in a variable that torch, its dynamo, the interpreter or the C
#: libraries under them may read when imported or loaded: these prefixes, but for
#: :data:`WARM_NAMES`, which torch_npu's allocator reads at its first use (in the child)
COLD_PREFIXES = ("TORCH", "PYTORCH", "OMP_", "MKL_", "KMP_", "GOMP_", "OPENBLAS", "LD_",
                 "PYTHON", "MALLOC", "CUDA", "ASCEND_MEMSIM")
WARM_NAMES = frozenset({"PYTORCH_NPU_ALLOC_CONF", "PYTORCH_ALLOC_CONF"})
#: the most seconds a warm-start server may take to import torch and the estimate
_STARTUP_SECONDS = 600.0


@dataclass(frozen=True)
class Copy:
    """A config file's copy with the cell's values: written as ``name`` in the cell's
    folder; ``uses`` are the command's words that name the file, as ``(index, prefix)``
    (the word becomes the prefix and the copy's path: ``--deepspeed=`` or ``""``)."""

    name: str
    data: bytes
    uses: tuple[tuple[int, str], ...]


@dataclass(frozen=True)
class JobCell:
    """One estimate: ``estimate [options] --json -- words`` run in ``cwd`` with ``env`` set
    over the worker's environment (a None value: unset), after checking the files
    ``hashes`` ((absolute path, SHA-256) pairs) and writing the ``copies``; killed past
    ``timeout`` seconds. ``key`` is its cache key, ``label`` what it is for a person."""

    key: str
    label: str
    options: tuple[str, ...]
    words: tuple[str, ...]
    env: tuple[tuple[str, str | None], ...]
    cwd: str
    hashes: tuple[tuple[str, str], ...] = ()
    copies: tuple[Copy, ...] = ()
    timeout: float = 3600.0
    #: forked from a warm-start server when it may be (:data:`COLD_PREFIXES`)
    warm: bool = True


def _error(why: str, seconds: float = 0.0) -> dict[str, Any]:
    return {"verdict": "error", "capacity": 0, "peak_reserved": 0, "total": 0, "margin": 0,
            "first_rank": None, "tightest_rank": None, "oom": False, "why": why,
            "seconds": float(seconds)}


def _int(doc: dict[str, Any], name: str) -> int:
    value = doc.get(name)
    if type(value) is not int:
        raise ValueError(f"{name} is not a whole number")
    return value


def answer_of(doc: object) -> dict[str, Any]:
    """A cell's answer from an estimate's JSON (one card's, or ``--world-size``'s with its
    rank classes): the verdict, the card's capacity, the largest peak reserved and device
    total (reserved + workspace + HCCL + the runtime's share) of any rank, the smallest
    margin (capacity - total) and the lowest rank of its class, whether a rank ran out of
    memory (its figures then stop at the allocation that failed), the first rank that does
    not fit and why. Time O(rank classes).

    Raises:
        ValueError: ``doc`` is not an estimate's JSON (the message says what is wrong).
    """
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")
    capacity = _int(doc, "capacity")
    fits = doc.get("fits")
    if type(fits) is not bool or capacity <= 0:
        raise ValueError("no verdict and capacity")
    classes = doc.get("classes")
    first: int | None = None
    tightest: int | None = None
    why = ""
    if classes is None:
        reserved = _int(doc, "peak_reserved")
        margin = _int(doc, "margin")
        found = doc.get("out_of_memory")
        oom = found is not None
        if isinstance(found, dict):
            why = str(found.get("message") or "out of memory").split(" (", 1)[0]
        elif oom:
            why = "out of memory"
        elif not fits:
            stopped = doc.get("stopped")
            why = (f"the script stopped: {stopped}" if stopped else
                   f"the script failed (exit status {doc.get('status')})")
    else:
        if not isinstance(classes, list) or not classes or not all(
                isinstance(c, dict) for c in classes):
            raise ValueError("its rank classes are not a list of objects")
        reserved = max(_int(c, "peak_reserved") for c in classes)
        margin = min(_int(c, "margin") for c in classes)
        oom = any(c.get("out_of_memory") is not None for c in classes)
        ranks = [c.get("ranks") for c in classes if _int(c, "margin") == margin]
        lowest = [min(r) for r in ranks if isinstance(r, list) and r
                  and all(type(x) is int for x in r)]
        tightest = min(lowest) if lowest else None
        failure = doc.get("first_failure")
        if not fits:
            if not isinstance(failure, dict) or type(failure.get("rank")) is not int:
                raise ValueError("it does not fit, yet names no first rank that fails")
            first, why = failure["rank"], str(failure.get("why") or "")
    over = oom or margin < 0
    verdict = "fits" if fits and not over else "over" if over else "failed"
    return {"verdict": verdict, "capacity": capacity, "peak_reserved": reserved,
            "total": capacity - margin, "margin": margin, "first_rank": first,
            "tightest_rank": tightest, "oom": oom, "why": why[:500], "seconds": 0.0}


def _kill_group(pid: int) -> None:
    """End the process ``pid`` and what it started (its own session on POSIX)."""
    try:
        if hasattr(os, "killpg"):
            os.killpg(pid, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGTERM)
    except OSError:
        pass      # it had ended


def _read_tail(path: str, limit: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - limit))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _warm_safe(env: Mapping[str, str], base: Mapping[str, str]) -> bool:
    """Whether a child forked from a server started in ``base`` may run a cell whose
    environment is ``env``: no variable that the preloaded modules may read at their import
    differs (see :data:`COLD_PREFIXES`). Time O(size of the environments)."""
    for name in set(env) | set(base):
        if env.get(name) != base.get(name) and name.startswith(COLD_PREFIXES) \
                and name not in WARM_NAMES:
            return False
    return True


class _Server:
    """One warm-start server (:mod:`.job_server`) and the pipes to it."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = dict(env)
        self.ready = False
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ascend_memsim.plan.job_server"], env=self.env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            start_new_session=True)
        self._buffer = b""

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(message) + "\n").encode())
        self.proc.stdin.flush()

    def line(self, deadline: float) -> dict[str, Any]:
        """The server's next message.

        Raises:
            TimeoutError: none before ``deadline`` (``time.monotonic()``).
            EOFError: the server ended, or said something that is not its protocol.
        """
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buffer:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise TimeoutError
            part = os.read(fd, 1 << 16)
            if not part:
                raise EOFError
            self._buffer += part
        text, self._buffer = self._buffer.split(b"\n", 1)
        try:
            message = json.loads(text)
        except ValueError:
            raise EOFError from None
        if not isinstance(message, dict):
            raise EOFError
        return message

    def close(self) -> None:
        try:
            self.proc.kill()
        except OSError:
            pass
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                try:
                    pipe.close()
                except OSError:
                    pass


#: idle warm-start servers of this process, kept between plans (each ends with this process:
#: its input's end)
_IDLE: list[_Server] = []
_IDLE_LOCK = threading.Lock()
#: the idle servers kept at most
_KEEP_IDLE = 8


def _take_server(env: Mapping[str, str]) -> _Server | None:
    """An idle server whose children may run a cell of ``env``, or a new one (None when a
    cell of ``env`` must start cold: no fork here, or a variable read at import differs
    from this process's environment)."""
    if not hasattr(os, "fork"):
        return None
    with _IDLE_LOCK:
        for i, server in enumerate(_IDLE):
            if server.proc.poll() is None and _warm_safe(env, server.env):
                return _IDLE.pop(i)
    if not _warm_safe(env, os.environ):
        return None
    return _Server(os.environ)


@atexit.register
def _close_idle() -> None:
    """End the idle servers with this process (they would end at their input's end)."""
    with _IDLE_LOCK:
        idle = list(_IDLE)
        _IDLE.clear()
    for server in idle:
        server.close()


def _give_back(server: _Server) -> None:
    with _IDLE_LOCK:
        if server.proc.poll() is None and len(_IDLE) < _KEEP_IDLE:
            _IDLE.append(server)
            return
    server.close()


class Runner:
    """Runs cells, each in a process of its own (forked from an idle warm-start server when
    it may be, else a new interpreter), and ends them all on :meth:`stop` (an interrupted
    plan); the local executor's threads share one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._live: set[int] = set()
        self._stopped = False

    def stop(self) -> None:
        """End every cell running now, and refuse to start another."""
        with self._lock:
            self._stopped = True
            live = list(self._live)
        for pid in live:
            _kill_group(pid)

    def run(self, cell: JobCell) -> dict[str, Any]:
        """The answer of ``cell`` (see :func:`run_cell`)."""
        started = time.monotonic()
        if not os.path.isdir(cell.cwd):
            return _error(f"the folder {cell.cwd} is not on this machine")
        for path, sha in cell.hashes:
            try:
                now = file_sha256(path)
            except OSError as e:
                return _error(f"cannot read {path}: {e.strerror or e}")
            if now != sha:
                return _error(f"{path} is not the file the plan began with (its SHA-256 "
                              f"differs): edited since, or another copy on this machine")
        folder = tempfile.mkdtemp(prefix="ascend-memsim-plan-")
        try:
            return self._run(cell, folder, started)
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def _run(self, cell: JobCell, folder: str, started: float) -> dict[str, Any]:
        words = list(cell.words)
        for i, c in enumerate(cell.copies):
            own = os.path.join(folder, str(i))
            os.mkdir(own)
            path = os.path.join(own, os.path.basename(c.name))
            with open(path, "wb") as f:
                f.write(c.data)
            for index, prefix in c.uses:
                words[index] = prefix + path
        env = dict(os.environ)
        for name, value in cell.env:
            if value is None:
                env.pop(name, None)
            else:
                env[name] = value
        out_path, err_path = os.path.join(folder, "out.json"), os.path.join(folder, "err.txt")
        argv = ["estimate", *cell.options, "--json", "--", *words]
        server = _take_server(env) if cell.warm else None
        code: int | str | None = None
        if server is not None:
            code = self._warm(server, cell, argv, env, out_path, err_path, started)
        if code is None:
            code = self._cold(cell, argv, env, out_path, err_path, started)
        seconds = time.monotonic() - started
        if isinstance(code, str):
            return _error(code, seconds)
        tail = _read_tail(err_path, _TAIL_BYTES).strip()
        last = tail.splitlines()[-1] if tail else ""
        if code not in (0, 1):
            why = (f"killed by signal {-code}" if code < 0 else f"exit status {code}")
            return _error(f"the estimate ended without an answer ({why})"
                          + (f": {last[:300]}" if last else ""), seconds)
        if os.path.getsize(out_path) > MAX_OUTPUT_BYTES:
            return _error(f"the estimate printed more than {MAX_OUTPUT_BYTES // MiB} MiB: "
                          f"not its JSON", seconds)
        with open(out_path, "rb") as f:
            data = f.read(MAX_OUTPUT_BYTES + 1)
        try:
            answer = answer_of(json.loads(data, parse_constant=_refuse))
        except (ValueError, RecursionError) as e:
            return _error(f"the estimate's output is not its JSON ({str(e)[:100]})"
                          + (f": {last[:300]}" if last else ""), seconds)
        answer["seconds"] = float(seconds) if math.isfinite(seconds) else 0.0
        return answer

    def _warm(self, server: _Server, cell: JobCell, argv: list[str], env: dict[str, str],
              out: str, err: str, started: float) -> int | str | None:
        """The exit status of the cell's child forked from ``server``; a message when it
        was stopped or timed out; None when the server failed before the child began (the
        cell then starts cold)."""
        healthy = False
        try:
            if not server.ready:
                server.line(time.monotonic() + min(cell.timeout, _STARTUP_SECONDS))
                server.ready = True
            with self._lock:
                if self._stopped:
                    healthy = True
                    return "the plan was stopped"
            server.send({"argv": argv, "cwd": cell.cwd, "env": env, "out": out, "err": err})
            pid = int(server.line(time.monotonic() + _STARTUP_SECONDS)["pid"])
        except (TimeoutError, EOFError, OSError, KeyError, ValueError, TypeError):
            server.close()
            return None
        with self._lock:
            self._live.add(pid)
            stopped = self._stopped
        if stopped:
            _kill_group(pid)
        try:
            try:
                code = server.line(started + cell.timeout)["code"]
            except TimeoutError:
                _kill_group(pid)
                server.line(time.monotonic() + _STARTUP_SECONDS)
                healthy = True
                return f"no answer within {cell.timeout:g} s (--timeout): killed"
            healthy = True
            return int(code)
        except (TimeoutError, EOFError, OSError, KeyError, ValueError):
            _kill_group(pid)
            return "the warm-start server ended while the estimate ran"
        except BaseException:
            _kill_group(pid)
            raise
        finally:
            with self._lock:
                self._live.discard(pid)
            if healthy:
                _give_back(server)
            else:
                server.close()

    def _cold(self, cell: JobCell, argv: list[str], env: dict[str, str], out_path: str,
              err_path: str, started: float) -> int | str:
        """The exit status of the cell run in a new interpreter; a message when it was
        stopped or timed out."""
        command = [sys.executable, "-m", "ascend_memsim", *argv]
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            with self._lock:
                if self._stopped:
                    return "the plan was stopped"
                proc = subprocess.Popen(command, cwd=cell.cwd, env=env,
                                        stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                        start_new_session=hasattr(os, "killpg"))
                self._live.add(proc.pid)
            try:
                left = max(0.0, started + cell.timeout - time.monotonic())
                return proc.wait(timeout=left)
            except subprocess.TimeoutExpired:
                _kill_group(proc.pid)
                proc.wait()
                return f"no answer within {cell.timeout:g} s (--timeout): killed"
            except BaseException:
                _kill_group(proc.pid)
                proc.wait()
                raise
            finally:
                with self._lock:
                    self._live.discard(proc.pid)


def _refuse(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON holds")


def run_cell(cell: JobCell) -> dict[str, Any]:
    """The answer of ``cell``: its fields are :data:`ANSWER_FIELDS`; ``verdict`` is one of
    :data:`VERDICTS` (``error`` with ``why`` when no estimate came back: a changed file, a
    missing folder, the estimate's usage error, a timeout). The worker function every
    executor runs (a Dask worker by this name); its warm-start servers stay for the next."""
    return Runner().run(cell)
