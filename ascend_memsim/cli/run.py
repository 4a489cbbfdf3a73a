"""``ascend-memsim run``: an unmodified pyacl script on the simulator, compute-sanitizer style."""

from __future__ import annotations

import argparse
import contextlib
import functools
import itertools
import os
import shlex
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any, TextIO

from ..checks.reports import KINDS, holds_memory
from ..data.host import HostBlock
from ..memory.sites import format_site, site_of
from ..memory.units import format_bytes, plural
from ..observe.replay import _capacity_key
from ..observe.trace import Recorder
from ..runtime.runtime import Runtime
from .common import USAGE_ERROR, print_json
from .script import run_script

__all__ = ["cmd_run", "sanitizer_report_count"]


def sanitizer_report_count(runtime: Runtime) -> int:
    """The number of reports the runtime's sanitizer made (0 when it has none).

    The single place ``run`` counts sanitizer findings: a runtime with a ``sanitizer``
    attribute is asked for ``reports`` (a sized collection) or ``report_count``.
    """
    sanitizer = getattr(runtime, "sanitizer", None)
    if sanitizer is None:
        return 0
    reports = getattr(sanitizer, "reports", None)
    if reports is not None:
        return len(reports() if callable(reports) else reports)
    count = getattr(sanitizer, "report_count", 0)
    return int(count() if callable(count) else count)


_BAR = "========="


def _footprint(leak: Any) -> int:
    """What a leaked thing holds: a block's footprint; a compute handle holds none."""
    return getattr(leak, "footprint", 0)


def _api(leak: Any) -> str:
    """The call that made a leaked thing (a block's API, aclrtMallocHost, a handle's maker)."""
    api = getattr(leak, "api", None)
    if api is not None:
        return getattr(api, "value", str(api))
    if isinstance(leak, HostBlock):
        return "aclrtMallocHost"
    return getattr(leak, "made_by", type(leak).__name__)


def _site_lines(leak: Any) -> list[str]:
    """Where a leaked thing was made, one ``file:line in function`` per frame."""
    return [f"{f.filename}:{f.lineno} in {f.name}" for f in (site_of(leak) or ())]


def _leak_summary(leaks: list, handles: list) -> str:
    """compute-sanitizer's leak line: requested bytes, allocations (and footprint) of the
    memory leaked, then the handles never destroyed, by kind. A handle's bytes are not
    counted: they are the memory it describes, freed or counted as a leak of its own."""
    requested = sum(b.size for b in leaks)
    footprint = sum(_footprint(b) for b in leaks)
    text = (f"{_BAR} LEAK SUMMARY: {plural(requested, 'byte')} leaked in "
            f"{plural(len(leaks), 'allocation')}")
    text += f" ({format_bytes(footprint)} of footprint)" if leaks else ""
    if handles:
        kinds = Counter(h.kind for h in handles)
        text += (f"; {plural(len(handles), 'handle')} never destroyed ("
                 + ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items())) + ")")
    return text


def _print_leak(leak: Any, report_to: TextIO) -> None:
    """One leak, with where it was made: memory with its bytes, a handle without."""
    memory = holds_memory(leak)
    if memory:
        device = getattr(leak, "device_id", None)
        where = "" if device is None or isinstance(leak, HostBlock) else f" on device {device}"
        head = (f"Leaked {plural(leak.size, 'byte')} at {leak.ptr:#x}: {leak.describe()}"
                f"{where} was never freed")
    else:
        head = f"Leaked {leak.describe()}: never destroyed"
    print(f"{_BAR} ERROR: {head} [leak]", file=report_to)
    print(f"{_BAR}     {'allocated' if memory else 'created'} at:", file=report_to)
    print(format_site(site_of(leak), indent=f"{_BAR}         ")
          or f"{_BAR}         (no Python stack recorded)", file=report_to)
    print(_BAR, file=report_to)


def _error_summary(counts: Counter) -> str:
    """compute-sanitizer's error line: errors (leaks count as errors), warnings, by kind."""
    errors = sum(n for k, n in counts.items() if KINDS.get(k, "error") == "error")
    warnings = sum(counts.values()) - errors
    detail = ", ".join(f"{k}: {n}" for k, n in sorted(counts.items()))
    text = f"{_BAR} ERROR SUMMARY: {plural(errors, 'error')}, {plural(warnings, 'warning')}"
    return f"{text} ({detail})" if detail else text


#: acl.mdl calls whose failure run reports: a model with no stand-in fails here, and the
#: message (acl.get_recent_err_msg) says how to write one
_MODEL_CALLS = ("load_from_file", "load_from_file_with_mem", "load_from_mem",
                "load_from_mem_with_mem", "query_size", "query_size_from_mem")


@contextlib.contextmanager
def _reporting_model_failures(report: Callable[[dict], None]) -> Iterator[None]:
    """While the script runs, each acl.mdl load or query that fails is passed to ``report``
    as {"call", "code", "message"}, the message being what acl.get_recent_err_msg gives
    (once per distinct message). The script sees the same results."""
    from ..acl import get_recent_err_msg, mdl

    seen: set[str] = set()
    lock = threading.Lock()

    def watched(name: str, call: Callable) -> Callable:
        @functools.wraps(call)
        def watching(*args: Any, **kwargs: Any) -> Any:
            result = call(*args, **kwargs)
            code = result[-1] if isinstance(result, tuple) else result
            if code:
                message = get_recent_err_msg()
                with lock:
                    new = message not in seen
                    seen.add(message)
                if new:
                    report({"call": f"acl.mdl.{name}", "code": int(code), "message": message})
            return result

        return watching

    saved = {name: getattr(mdl, name) for name in _MODEL_CALLS}
    for name, call in saved.items():
        setattr(mdl, name, watched(name, call))
    try:
        yield
    finally:
        for name, call in saved.items():
            setattr(mdl, name, call)


def script_refusal(args: argparse.Namespace, command: str) -> str:
    """Why ``command`` (run, estimate) cannot run ``args.script`` as given: no such file, or
    the command's own options written after it; '' when it can."""
    if not os.path.isfile(args.script):
        return f"ascend-memsim {command}: no such script: {args.script}"
    return misplaced_options(args)


def misplaced_options(args: argparse.Namespace) -> str:
    """The refusal of run's own options written after the script ('' when there are none).

    DECISION: an option of run's after SCRIPT.py is refused (exit 2), neither taken nor
    passed on: the script may have an option of the same name, so either guess could be
    wrong without a word. The message gives the command with the options moved, and how to
    pass them to the script on purpose (after ``--``).
    """
    options = getattr(args, "run_options", {})
    mine: list[str] = []
    theirs: list[str] = []
    found: list[str] = []
    words = iter(args.script_args)
    for word in words:
        name = word.split("=", 1)[0]
        if name not in options:
            theirs.append(word)
            continue
        found.append(name)
        mine.append(word)
        if options[name] and "=" not in word:
            mine.extend(itertools.islice(words, 1))
    if not found:
        return ""
    unchecked = getattr(args, "unchecked_args", [])
    command = getattr(args, "command", None) or "run"
    fixed = shlex.join(["ascend-memsim", command, *mine, args.script, *theirs, *unchecked])
    passed = shlex.join(["ascend-memsim", command, args.script, "--", *args.script_args,
                         *unchecked])
    return (f"ascend-memsim {command}: error: {', '.join(dict.fromkeys(found))} after the "
            f"script would go to the script; {command}'s own options go before it:\n    {fixed}\n"
            f"(to give them to the script itself, put them after --:\n    {passed})")


def cmd_run(args: argparse.Namespace, out: TextIO) -> int:
    """Run an unmodified pyacl script under the simulator; report leaks (and sanitizer).

    The script's own output is its own; what run finds (sanitizer reports, leaks, the two
    summary lines) is a diagnostic: stderr, or ``--log-file``. ``--json`` prints the result
    as one JSON document on stdout after the script has run.
    """
    from ..acl import install_acl, uninstall_acl

    script = args.script
    if args.print_limit < 0:
        print(f"ascend-memsim run: --print-limit must be 0 or more, got {args.print_limit}",
              file=sys.stderr)
        return USAGE_ERROR
    refusal = script_refusal(args, "run")
    if refusal:
        print(refusal, file=sys.stderr)
        return USAGE_ERROR
    overrides = {}
    if args.capacity is not None:
        overrides[_capacity_key(args.product)] = args.capacity
    if args.device_count is not None:
        overrides["device_count"] = args.device_count
    # Everything live at each reset_device and at the end (device and host blocks, physical
    # and compute handles), as the sanitizer's own leak check would report it.
    leaks: list = []

    def on_leaks(call: str, leaked: list) -> None:
        leaks.extend(leaked)

    log = open(args.log_file, "w", encoding="utf-8") if args.log_file else None
    report_to = log if log is not None else sys.stderr
    model_failures: list[dict] = []

    def on_model_failure(failure: dict) -> None:
        # the model the script asked for cannot be loaded: say why, and how to describe it
        model_failures.append(failure)
        print(f"ascend-memsim run: {failure['call']} returned {failure['code']}: "
              f"{failure['message']}", file=report_to, flush=True)
    status = 0
    try:
        # `run` lists leaks itself (with their sites); the sanitizer reports everything else.
        # No device is made here: until the script makes one, its acl.init config may still
        # choose the product, capacities and default device of this runtime. Observers go
        # through add_observer, which gives them to the devices made later.
        with Runtime(args.product, sanitizer={"mode": args.sanitizer, "leaks": False,
                                              "print_limit": args.print_limit,
                                              "output": report_to},
                     run_mode=args.run_mode, **overrides) as rt:
            rt.set_record_sites(True)
            recorder = Recorder(rt, stacks=args.stacks) if args.trace else None
            if recorder is not None:
                recorder.start()
            if not args.no_leak_check:
                rt.sanitizer.leak_sink = on_leaks
            # installed once the runtime exists, so a failure above leaves sys.modules alone
            previous = install_acl()
            try:
                # the script's exit too (atexit handlers, its objects' __del__) happens here,
                # before the runtime is finalized, as in the script's own process
                with _reporting_model_failures(on_model_failure):
                    status = run_script(script, [script, *args.script_args,
                                                 *getattr(args, "unchecked_args", [])])
            finally:
                uninstall_acl(previous)
            if recorder is not None:
                recorder.stop()
        # the runtime is finalized: what it still held went to on_leaks
        sanitizer = getattr(rt, "sanitizer", None)
        counts = Counter(r.kind for r in sanitizer.reports) if sanitizer else Counter()
        if recorder is not None:
            recorder.trace.save(args.trace)
            print(f"ascend-memsim: trace of {plural(len(recorder.trace), 'event')} written to "
                  f"{args.trace}", file=sys.stderr)
        shown = leaks[:args.print_limit]
        for leak in shown:
            _print_leak(leak, report_to)
        if len(leaks) > len(shown):
            print(f"{_BAR} print limit reached: "
                  f"{plural(len(leaks) - len(shown), 'more leak')}", file=report_to)
        counts["leak"] += len(leaks)
        counts = +counts
        memory = [leak for leak in leaks if holds_memory(leak)]
        handles = [leak for leak in leaks if not holds_memory(leak)]
        if args.sanitizer != "off" or leaks:
            print(_leak_summary(memory, handles), file=report_to)
            print(_error_summary(counts), file=report_to)
    finally:
        if log is not None:
            log.close()
    result = status or (args.error_exitcode if (leaks or counts) else 0)
    if args.json:
        print_json({
            "script": script, "status": result, "script_status": status,
            "leaks": [{"device": getattr(b, "device_id", None), "ptr": b.ptr, "size": b.size,
                       "footprint": _footprint(b), "api": _api(b), "site": _site_lines(b)}
                      for b in memory],
            "leaked_bytes": sum(b.size for b in memory),
            "leaked_handles": [{"kind": h.kind, "handle": h.ptr, "api": _api(h),
                                "site": _site_lines(h)} for h in handles],
            "findings": dict(counts), "model_failures": model_failures,
            "trace": args.trace}, out)
    return result

