"""A warm start for a plan's cells: a process that imports torch and the estimate once
(``python -m ascend_memsim.plan.job_server``), then forks a fresh child for each cell, which
runs ``python -m ascend_memsim estimate ...`` as a new interpreter would and exits.

The modules are named by strings (:data:`PRELOAD`) that this process resolves, so ``plan/``
imports nothing of ``torchsim/``. A child starts from the state the imports left and nothing
else: each cell's process is its own, as the issue of a cold start wants, without the two to
three seconds of the interpreter's start and torch's import. The child sets its own session,
folder, environment, arguments and standard streams before the estimate runs; its exit
status is the estimate's.

The protocol, one JSON object a line: this process says ``{"ready": true}`` once its imports
are done; for each request (``{"argv", "cwd", "env", "out", "err"}``) it says ``{"pid"}``
when the child has started and ``{"code"}`` when it has ended (a negative code: the signal
that ended it). It ends at the end of its input.

POSIX only (``os.fork``); elsewhere each cell starts cold (:mod:`.job_cells`).
"""

from __future__ import annotations

import importlib
import json
import os
import runpy
import sys
import traceback
from collections.abc import Sequence
from typing import Any

__all__ = ["PRELOAD", "serve"]

#: what a cell's estimate imports before the script runs (torch's own import, its dynamo
#: that fake tensors import, the estimate, its launchers), resolved here by name
PRELOAD = ("torch", "torch._dynamo", "ascend_memsim.checks", "ascend_memsim.cli",
           "ascend_memsim.cli.estimate", "ascend_memsim.torchsim",
           "ascend_memsim.torchsim.stacks.launchers")


def _say(fd: int, message: dict[str, Any]) -> None:
    data = (json.dumps(message) + "\n").encode()
    while data:
        data = data[os.write(fd, data):]


def _child(request: dict[str, Any], own: Sequence[int]) -> None:
    """Run the estimate of ``request`` in this (forked) process, the server's descriptors
    ``own`` closed; never returns."""
    code = 1
    try:
        for fd in own:
            os.close(fd)
        os.setsid()
        for fd, path, flags in ((0, os.devnull, os.O_RDONLY),
                                (1, request["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                                (2, request["err"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
            opened = os.open(path, flags, 0o600)
            os.dup2(opened, fd)
            os.close(opened)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        # as ``python -m`` starts: the folder it runs in first on the path
        sys.path[0] = request["cwd"]
        sys.argv = ["ascend_memsim", *request["argv"]]
        try:
            runpy.run_module("ascend_memsim", run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
        except BaseException:
            traceback.print_exc()
            code = 1
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                code = code or 1
    finally:
        os._exit(code & 0xFF if code >= 0 else 1)


def serve(preload: Sequence[str] = PRELOAD, inp: int = 0, out: int = 1) -> None:
    """Import ``preload``, say ready on ``out``, then fork a child per request line read
    from ``inp`` until its end."""
    # the protocol's own descriptors, kept away from 0 and 1, which each child replaces
    inp, out = os.dup(inp), os.dup(out)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    for name in preload:
        try:
            importlib.import_module(name)
        except Exception:
            pass    # the child's own import says why (the estimate needs torch)
    _say(out, {"ready": True})
    reader = os.fdopen(inp, "rb", buffering=0)
    buffered = b""
    while True:
        while b"\n" not in buffered:
            part = reader.read(1 << 16)
            if not part:
                return
            buffered += part
        line, buffered = buffered.split(b"\n", 1)
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(request, (inp, out))
        _say(out, {"pid": pid})
        _, status = os.waitpid(pid, 0)
        _say(out, {"code": os.waitstatus_to_exitcode(status)})


if __name__ == "__main__":
    serve()
