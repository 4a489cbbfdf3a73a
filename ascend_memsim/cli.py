"""The ``ascend-memsim`` command line: a guided demo, explain, profiles, run, replay, plot.

Every subcommand is a function ``cmd_<name>(args, out) -> exit code``; :func:`main` parses
``argv`` and dispatches, so tests call ``main([...])`` directly.

One convention everywhere: results go to ``out`` (stdout), diagnostics (warnings about a
trace, progress, what ``run`` found in the script, errors) to stderr. ``--json`` replaces
a command's result text with one JSON document.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import runpy
import sys
import traceback
from collections import Counter
from collections.abc import Mapping
from enum import Enum
from typing import Any, TextIO

from .memory.args import UINT32_MAX
from .memory.constants import MallocPolicy, MemAttr, MiB
from .memory.errors import AclError, InvalidArgument
from .memory.explain import explain
from .memory.profiles import DEFAULT_PRODUCT, PROFILES, SizeRule
from .memory.sites import format_site
from .memory.units import format_bytes
from .observe.pictures import save_picture
from .observe.replay import _capacity_key, parse_size, replay, smallest_capacity, tty_progress
from .observe.snapshot import memory_viz_bytes
from .observe.stats import MemoryStats
from .observe.trace import Recorder, dumps_rmm_csv, load
from .observe.viz import MapSnapshot, text_map
from .runtime.runtime import Runtime

__all__ = ["main", "parse_policy_arg", "sanitizer_report_count"]

#: exit status for bad usage or unreadable input (argparse uses 2 as well)
USAGE_ERROR = 2

#: result fields too big or not meant for --json (a live runtime, per-event timelines)
_NOT_JSON = ("runtime", "timeline")


def to_json(value: Any) -> Any:
    """A JSON value for a result: dataclasses as objects, enums by value, mappings with
    string keys (the default stream, None, as ``"default"``), other objects as text.

    >>> to_json({None: 1, 2: (3, 4)})
    {'default': 1, '2': [3, 4]}
    """
    if isinstance(value, Enum):
        return value.value
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json(getattr(value, f.name)) for f in dataclasses.fields(value)
                if f.name not in _NOT_JSON}
    if isinstance(value, Mapping):
        return {("default" if k is None else str(k)): to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [to_json(v) for v in value]
    return str(value)


def _print_json(data: Any, out: TextIO) -> None:
    print(json.dumps(to_json(data), indent=2, sort_keys=True), file=out)


def _version() -> str:
    try:
        from importlib.metadata import version
        return version("ascend-memsim")
    except Exception:  # not installed (a source checkout on sys.path)
        return "unknown (not installed)"


def parse_policy_arg(text: str) -> int:
    """A policy from a name (``HUGE_ONLY``, ``huge-only``, ``ACL_MEM_MALLOC_HUGE_ONLY``) or a
    number (``1``, ``0x1``).

    >>> [parse_policy_arg(p) for p in ("huge-only", "ACL_MEM_MALLOC_NORMAL_ONLY", "0x3")]
    [1, 2, 3]

    Raises:
        InvalidArgument: neither a policy name nor a number.
    """
    name = text.strip().upper().replace("-", "_")
    name = name.removeprefix("ACL_MEM_MALLOC_")
    if name in MallocPolicy.__members__:
        return int(MallocPolicy[name])
    try:
        value = int(text, 0)
    except ValueError:
        raise InvalidArgument(f"policy {text!r} is neither a number nor one of "
                              f"{', '.join(MallocPolicy.__members__)}") from None
    if not 0 <= value <= UINT32_MAX:
        raise InvalidArgument(f"policy {value} is outside 0..0xFFFFFFFF")
    return value


def _size_arg(text: str) -> int:
    try:
        return parse_size(text)
    except InvalidArgument as e:
        raise argparse.ArgumentTypeError(e.message) from None


def _policy_arg(text: str) -> int:
    try:
        return parse_policy_arg(text)
    except InvalidArgument as e:
        raise argparse.ArgumentTypeError(e.message) from None


# -- demo ------------------------------------------------------------------------------------

def cmd_demo(args: argparse.Namespace, out: TextIO) -> int:
    """A guided tour of the rules on the default product, through the pyacl face."""
    from . import acl

    HUGE_FIRST, HUGE_ONLY, NORMAL_ONLY = (int(MallocPolicy.HUGE_FIRST),
                                          int(MallocPolicy.HUGE_ONLY),
                                          int(MallocPolicy.NORMAL_ONLY))
    capacity = args.capacity

    def say(text: str = "") -> None:
        print(text, file=out)

    # The tour leaves blocks live on purpose: the sanitizer's leak reports would drown it.
    with Runtime(args.product, sanitizer={"mode": "report", "leaks": False},
                 **{_capacity_key(args.product): capacity}) as rt:
        profile = rt.profile
        plus32 = profile.size_rule is SizeRule.ALIGN32_PLUS32
        memory = profile.main_memory.value
        all_attr, huge_attr = ((MemAttr.HBM_MEM, MemAttr.HBM_MEM_HUGE) if memory == "HBM"
                               else (MemAttr.DDR_MEM, MemAttr.DDR_MEM_HUGE))
        say(f"ascend-memsim demo: device memory rules at work on {profile.description}")
        say(f"(a {format_bytes(capacity)} device, to keep the numbers small; the rules are "
            f"those of the real part)")
        say()
        assert acl.rt.set_device(0) == 0

        def show(call: str, ptr: int, ret: int, note: str = "") -> None:
            if ret:
                say(f"  {call:44} -> ret {ret}")
                return
            b = rt.block(ptr)
            say(f"  {call:44} -> {b.page.value} pages, rule size {b.rule_size}, footprint "
                f"{b.footprint} ({format_bytes(b.footprint)}){note}")

        if plus32:
            say(f"1. The +32 rule: on {profile.name} aclrtMalloc rounds the size up to 32 "
                f"bytes, then adds 32;")
            say("   aclrtMallocAlign32 only rounds. Blocks start on 64 bytes.")
        else:
            say(f"1. No +32 rule on {profile.name}: aclrtMalloc rounds the size up to 32 bytes "
                f"and adds nothing,")
            say("   as aclrtMallocAlign32 does (Atlas A2/A3 add 32). Blocks start on 64 bytes.")
        ptr, ret = acl.rt.malloc(100, HUGE_FIRST)
        show("acl.rt.malloc(100, HUGE_FIRST)", ptr, ret)
        ptr, ret = acl.rt.malloc_align32(100, HUGE_FIRST)
        show("acl.rt.malloc_align32(100, HUGE_FIRST)", ptr, ret)
        say()
        if plus32:
            say("2. So a 2 MiB request costs 4 MiB of huge pages: 2 MiB + 32 B needs two "
                "pages.")
        else:
            say("2. A 2 MiB request takes one 2 MiB huge page: the +32 does not apply here "
                "(on A2/A3 it costs 4 MiB).")
        ptr, ret = acl.rt.malloc(2 * MiB, HUGE_FIRST)
        show("acl.rt.malloc(2 MiB, HUGE_FIRST)", ptr, ret, "  <- +32 rule" if plus32 else "")
        ptr, ret = acl.rt.malloc_align32(2 * MiB, HUGE_FIRST)
        show("acl.rt.malloc_align32(2 MiB, HUGE_FIRST)", ptr, ret)
        say()
        say("3. HUGE_FIRST gives normal pages up to 1 MiB, huge pages above:")
        ptr, ret = acl.rt.malloc(1 * MiB, HUGE_FIRST)
        show("acl.rt.malloc(1 MiB, HUGE_FIRST)", ptr, ret)
        ptr, ret = acl.rt.malloc(1 * MiB + 1, HUGE_FIRST)
        show("acl.rt.malloc(1 MiB + 1, HUGE_FIRST)", ptr, ret)
        say()
        say("4. aclrtGetMemInfo agrees with the blocks: free + live footprints == total.")
        free, total, _ = acl.rt.get_mem_info(all_attr)
        huge_free, _, _ = acl.rt.get_mem_info(huge_attr)
        live = sum(b.footprint for b in rt.blocks())
        say(f"  {f'get_mem_info(ACL_{memory}_MEM)':30} -> free {free}, total {total}")
        say(f"  {f'get_mem_info(ACL_{memory}_MEM_HUGE)':30} -> free {huge_free} "
            f"(whole free 2 MiB pages)")
        say(f"  {free} + {live} (live footprints) == {total}: {free + live == total}")
        say()
        say("5. Fragmentation: fill the device with 1 MiB NORMAL_ONLY blocks, free every other.")
        fillers = []
        while True:
            ptr, ret = acl.rt.malloc(1 * MiB, NORMAL_ONLY)
            if ret:
                break
            fillers.append(ptr)
        for ptr in fillers[::2]:
            acl.rt.free(ptr)
        free, _, _ = acl.rt.get_mem_info(all_attr)
        huge_free, _, _ = acl.rt.get_mem_info(huge_attr)
        say(f"  {len(fillers)} blocks made, {len(fillers[::2])} freed: {memory} free "
            f"{format_bytes(free)}, but whole free 2 MiB pages: {huge_free}")
        ptr, ret = acl.rt.malloc(1 * MiB + 1, HUGE_FIRST)
        block = rt.block(ptr) if not ret else None
        show("acl.rt.malloc(1 MiB + 1, HUGE_FIRST)", ptr, ret,
             "  <- huge-page fallback" if block is not None and block.fallback else "")
        ptr, ret = acl.rt.malloc(1 * MiB + 1, HUGE_ONLY)
        say(f"  {'acl.rt.malloc(1 MiB + 1, HUGE_ONLY)':44} -> ret {ret} "
            f"(ACL_ERROR_RT_MEMORY_ALLOCATION); acl.get_recent_err_msg() explains:")
        for line in acl.get_recent_err_msg().splitlines():
            say(f"      {line}")
        say()
        say("6. The device now, one character per 2 MiB:")
        for line in text_map(MapSnapshot.of(rt.device(0))).splitlines():
            say(f"  {line}")
        if args.html:
            save_picture(args.html, snapshot=MapSnapshot.of(rt.device(0)),
                         title="ascend-memsim demo")
            say(f"\n  picture written to {args.html}")
        assert acl.rt.reset_device(0) == 0
    say()
    say("Next: ascend-memsim explain 2MiB --policy HUGE_FIRST   (how a size becomes a footprint)")
    say("      ascend-memsim profiles                            (the products and their rules)")
    say("      ascend-memsim run your_script.py --trace t.jsonl   (run a pyacl program here)")
    say("      ascend-memsim replay t.jsonl --product 950PR --bisect; ascend-memsim plot t.jsonl")
    return 0


# -- explain, profiles -----------------------------------------------------------------------

def cmd_explain(args: argparse.Namespace, out: TextIO) -> int:
    explanation = explain(args.size, args.policy, product=args.product, api=args.api)
    if args.json:
        _print_json(explanation, out)
    else:
        print(explanation, file=out)
    return 0


def cmd_profiles(args: argparse.Namespace, out: TextIO) -> int:
    if args.json:
        _print_json(list(PROFILES.values()), out)
        return 0
    header = (f"{'name':7} {'memory':14} {'aclrtMalloc rounding':32} {'1G pages':9} "
              f"{'usage info':11} {'devices':7}  description")
    print(header, file=out)
    print("-" * len(header), file=out)
    for profile in PROFILES.values():
        main = profile.main_memory
        memory = f"{main.value} {format_bytes(profile.capacity(main))}"
        rule = ("ALIGN_UP(size, 32)" if profile.size_rule.value == "align32"
                else "ALIGN_UP(size, 32) + 32")
        print(f"{profile.name:7} {memory:14} {rule:32} {'yes' if profile.huge1g else 'no':9} "
              f"{'yes' if profile.usage_info else 'no':11} {profile.device_count:<7}  "
              f"{profile.description}", file=out)
    print("\nsources:", file=out)
    for profile in PROFILES.values():
        for key, source in profile.sources.items():
            print(f"  {profile.name:7} {key:12} {source}", file=out)
    return 0


# -- run -------------------------------------------------------------------------------------

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


#: run's own options, which a user may wrongly write after the script name
_RUN_OPTIONS = ("--product", "--capacity", "--error-exitcode", "--no-leak-check", "--trace",
                "--stacks", "--sanitizer", "--print-limit", "--log-file", "--json")

_BAR = "========="


def _leak_summary(leaks: list) -> str:
    """compute-sanitizer's leak line: requested bytes, allocations (and footprint)."""
    requested = sum(b.size for b in leaks)
    footprint = sum(b.footprint for b in leaks)
    text = (f"{_BAR} LEAK SUMMARY: {requested} bytes leaked in {len(leaks)} allocation"
            f"{'s' * (len(leaks) != 1)}")
    return text + (f" ({format_bytes(footprint)} of footprint)" if leaks else "")


def _error_summary(counts: Counter) -> str:
    """compute-sanitizer's error line: errors (leaks count as errors), warnings, by kind."""
    from .checks.reports import KINDS

    errors = sum(n for k, n in counts.items() if KINDS.get(k, "error") == "error")
    warnings = sum(counts.values()) - errors
    detail = ", ".join(f"{k}: {n}" for k, n in sorted(counts.items()))
    text = (f"{_BAR} ERROR SUMMARY: {errors} error{'s' * (errors != 1)}, {warnings} "
            f"warning{'s' * (warnings != 1)}")
    return f"{text} ({detail})" if detail else text


def cmd_run(args: argparse.Namespace, out: TextIO) -> int:
    """Run an unmodified pyacl script under the simulator; report leaks (and sanitizer).

    The script's own output is its own; what run finds (sanitizer reports, leaks, the two
    summary lines) is a diagnostic: stderr, or ``--log-file``. ``--json`` prints the result
    as one JSON document on stdout after the script has run.
    """
    from .acl import install_acl, uninstall_acl

    script = args.script
    if not os.path.isfile(script):
        print(f"ascend-memsim run: no such script: {script}", file=sys.stderr)
        return USAGE_ERROR
    own = sorted({a.split("=")[0] for a in args.script_args} & set(_RUN_OPTIONS))
    if own:
        print(f"ascend-memsim run: note: {', '.join(own)} after SCRIPT.py go to the script; "
              f"put run's own options before the script: ascend-memsim run {own[0]} ... "
              f"{script}", file=sys.stderr)
    overrides = {}
    if args.capacity is not None:
        overrides[_capacity_key(args.product)] = args.capacity
    leaked_at_reset: list = []

    def on_reset(event: str, device: object, info: dict) -> None:
        if event == "reset":
            leaked_at_reset.extend(info["blocks"])

    log = open(args.log_file, "w", encoding="utf-8") if args.log_file else None
    report_to = log if log is not None else sys.stderr
    saved_argv, saved_path = sys.argv, list(sys.path)
    status = 0
    try:
        # `run` lists leaks itself (with their sites); the sanitizer reports everything else.
        # No device is made here: until the script makes one, its acl.init config may still
        # choose the product, capacities and default device of this runtime. Observers go
        # through add_observer, which gives them to the devices made later.
        with Runtime(args.product, sanitizer={"mode": args.sanitizer, "leaks": False,
                                              "print_limit": args.print_limit,
                                              "output": report_to},
                     **overrides) as rt:
            rt.set_record_sites(True)
            recorder = Recorder(rt, stacks=args.stacks) if args.trace else None
            if recorder is not None:
                recorder.start()
            if not args.no_leak_check:
                rt.add_observer(on_reset)
            # installed once the runtime exists, so a failure above leaves sys.modules alone
            previous = install_acl()
            sys.argv = [script, *args.script_args]
            sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
            try:
                runpy.run_path(script, run_name="__main__")
            except SystemExit as e:
                code = e.code
                status = code if isinstance(code, int) else (0 if code is None else 1)
                if not isinstance(code, int) and code is not None:
                    print(code, file=sys.stderr)
            except BaseException:
                traceback.print_exc()
                status = 1
            finally:
                sys.argv, sys.path[:] = saved_argv, saved_path
                uninstall_acl(previous)
            leaks = [] if args.no_leak_check else leaked_at_reset + rt.blocks()
            sanitizer = getattr(rt, "sanitizer", None)
            counts = Counter(r.kind for r in sanitizer.reports) if sanitizer else Counter()
            if recorder is not None:
                recorder.stop()
        if recorder is not None:
            recorder.trace.save(args.trace)
            print(f"ascend-memsim: trace of {len(recorder.trace)} events written to "
                  f"{args.trace}", file=sys.stderr)
        shown = leaks[:args.print_limit]
        for block in shown:
            print(f"{_BAR} ERROR: Leaked {block.size} bytes at {block.ptr:#x}: "
                  f"{block.describe()} on device {block.device_id} was never freed [leak]",
                  file=report_to)
            site = (block.extra or {}).get("site")
            print(f"{_BAR}     allocated at:", file=report_to)
            print(format_site(site, indent=f"{_BAR}         ")
                  or f"{_BAR}         (no Python stack recorded)", file=report_to)
            print(_BAR, file=report_to)
        if len(leaks) > len(shown):
            print(f"{_BAR} print limit reached: {len(leaks) - len(shown)} more leaked blocks",
                  file=report_to)
        counts["leak"] += len(leaks)
        counts = +counts
        if args.sanitizer != "off" or leaks:
            print(_leak_summary(leaks), file=report_to)
            print(_error_summary(counts), file=report_to)
    finally:
        if log is not None:
            log.close()
    result = status or (args.error_exitcode if (leaks or counts) else 0)
    if args.json:
        _print_json({
            "script": script, "status": result, "script_status": status,
            "leaks": [{"device": b.device_id, "ptr": b.ptr, "size": b.size,
                       "footprint": b.footprint, "api": b.api.value,
                       "site": [f"{f.filename}:{f.lineno} in {f.name}"
                                for f in ((b.extra or {}).get("site") or ())]}
                      for b in leaks],
            "leaked_bytes": sum(b.size for b in leaks),
            "findings": dict(counts), "trace": args.trace}, out)
    return result


# -- replay, plot, stats, map ----------------------------------------------------------------

def _load_trace(path: str, out: TextIO):
    """The trace at ``path``; its problems are warnings on stderr (at most 20 lines)."""
    trace = load(path)
    for problem in trace.problems[:20]:
        print(f"warning: {problem}", file=sys.stderr)
    if len(trace.problems) > 20:
        print(f"warning: ... and {len(trace.problems) - 20} more problems", file=sys.stderr)
    return trace


def cmd_replay(args: argparse.Namespace, out: TextIO) -> int:
    trace = _load_trace(args.trace, out)
    progress = None if args.quiet else tty_progress()
    if args.bisect:
        step = args.step
        result = smallest_capacity(trace, args.product, step=step, policy=args.policy,
                                   progress=progress)
        if progress is not None:
            sys.stderr.write("\n")
        _print_json(result, out) if args.json else print(result, file=out)
        return 0 if result.capacity is not None else 1
    result = replay(trace, args.product, capacity=args.capacity, policy=args.policy,
                    api=args.api, progress=progress)
    _print_json(result, out) if args.json else print(result, file=out)
    return 0 if result.fits else 1


def _moment(trace, args: argparse.Namespace, first_pass) -> tuple[int, str]:
    """The event index to draw the map at, and its description."""
    at = args.at
    if at == "failure":
        if first_pass.first_failure is None:
            at = "peak"
        else:
            return first_pass.first_failure.index, f"at the first failure (event " \
                                                   f"{first_pass.first_failure.index})"
    if at == "peak":
        return first_pass.peak_index, f"at the peak (event {first_pass.peak_index})"
    if at == "end":
        return len(trace.events) - 1, "at the end"
    try:
        index = int(at)
    except ValueError:
        raise InvalidArgument(f"--at must be failure, peak, end or an event number, "
                              f"got {at!r}") from None
    if not 0 <= index < len(trace.events):
        raise InvalidArgument(f"--at {index} is not an event number of {trace.name}: it has "
                              f"{len(trace.events)} events (0 to {len(trace.events) - 1})")
    return index, f"after event {index}"


def _replay_for_picture(args: argparse.Namespace, out: TextIO):
    trace = _load_trace(args.trace, out)
    first = replay(trace, args.product, capacity=args.capacity, policy=args.policy,
                   timeline=True, progress=None if args.quiet else tty_progress())
    index, moment = _moment(trace, args, first)
    device_id = trace.events[index].get("device", 0) if 0 <= index < len(trace.events) else 0
    second = replay(trace, args.product, capacity=args.capacity, policy=args.policy,
                    stop_after=index, keep_runtime=True)
    try:
        snapshot = MapSnapshot.of(second.runtime.device(device_id),
                                  f"{second.product} device {device_id}, {moment}")
    finally:
        second.runtime.close()
    return trace, first, snapshot


def cmd_plot(args: argparse.Namespace, out: TextIO) -> int:
    _, result, snapshot = _replay_for_picture(args, out)
    path = args.output or os.path.splitext(os.path.basename(args.trace))[0] + ".html"
    title = f"{os.path.basename(args.trace)} on {result.product}"
    save_picture(path, snapshot=None if args.what == "timeline" else snapshot,
                 timeline=None if args.what == "map" else result.timeline, title=title,
                 text=str(result), color_by=args.color_by)
    print(f"{path} written ({'fits' if result.fits else 'a malloc failed'}; "
          f"peak {format_bytes(result.peak_bytes)})", file=out)
    return 0


def cmd_map(args: argparse.Namespace, out: TextIO) -> int:
    _, _, snapshot = _replay_for_picture(args, out)
    print(text_map(snapshot), file=out)
    return 0


def cmd_stats(args: argparse.Namespace, out: TextIO) -> int:
    trace = _load_trace(args.trace, out)
    stats = MemoryStats()
    result = replay(trace, args.product, capacity=args.capacity, policy=args.policy,
                    observers=[stats], keep_runtime=True)
    # the figures at the end of the trace, before closing the runtime resets the devices
    devices = stats.device_ids() or [0]
    if args.json:
        _print_json({"devices": {d: stats.snapshot(d) for d in devices}, "replay": result},
                    out)
    else:
        for device_id in devices:
            print(stats.summary(device_id), file=out)
        print(file=out)
        print(result, file=out)
        if result.peak_sites:
            print(f"\ntop allocation sites at the peak (event {result.peak_index}, "
                  f"{format_bytes(result.peak_bytes)}):", file=out)
            for site, footprint, count in result.peak_sites[:10]:
                print(f"  {format_bytes(footprint):>22} in {count} block"
                      f"{'s' * (count != 1)}: {site}", file=out)
    result.runtime.close()
    result.runtime = None
    return 0


def cmd_export(args: argparse.Namespace, out: TextIO) -> int:
    """Write a trace as a memory_viz snapshot pickle or an RMM CSV log."""
    trace = _load_trace(args.trace, out)
    if args.format == "memory-viz":
        data = memory_viz_bytes(trace.events, trace.header)
        path = args.output or os.path.splitext(os.path.basename(args.trace))[0] + ".pickle"
        with open(path, "wb") as f:
            f.write(data)
    else:
        text = dumps_rmm_csv(trace, args.device)
        path = args.output or os.path.splitext(os.path.basename(args.trace))[0] + ".csv"
        with open(path, "w", encoding="utf-8", newline="") as f:
            f.write(text)
    print(f"{path} written ({args.format}, {len(trace)} events)", file=out)
    return 0


# -- parser ----------------------------------------------------------------------------------

def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ascend-memsim",
        description="A simulator of the Ascend CANN runtime's device memory.")
    parser.add_argument("--version", action="version",
                        version=f"ascend-memsim {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def json_option(p: argparse.ArgumentParser) -> None:
        p.add_argument("--json", action="store_true",
                       help="print the result as one JSON document")

    p = sub.add_parser("demo", help="a guided tour of the allocation rules (start here)")
    p.add_argument("--product", default=DEFAULT_PRODUCT)
    p.add_argument("--capacity", type=_size_arg, default=64 * MiB,
                   help="device memory for the tour (default 64MiB)")
    p.add_argument("--html", metavar="OUT.html", help="also write the memory map picture")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("explain", help="how SIZE becomes a footprint, step by step")
    p.add_argument("size", type=_size_arg, metavar="SIZE", help="bytes: 123, 64KiB, 2MiB, 1GiB")
    p.add_argument("--policy", type=_policy_arg, default=0,
                   help="HUGE_FIRST (default), HUGE_ONLY, NORMAL_ONLY, ... or a number")
    p.add_argument("--product", default=DEFAULT_PRODUCT)
    p.add_argument("--api", default="aclrtMalloc",
                   help="aclrtMalloc (default), aclrtMallocAlign32, malloc_cached, ...")
    json_option(p)
    p.set_defaults(func=cmd_explain)

    p = sub.add_parser("profiles", help="the simulated products, their rules and sources")
    json_option(p)
    p.set_defaults(func=cmd_profiles)

    p = sub.add_parser(
        "run", help="run a pyacl script on the simulator, report leaks",
        description="Run an unmodified pyacl script on the simulator; report leaks and "
                    "sanitizer findings. --product and --capacity are defaults: the script's "
                    "own acl.init config (\"memsim\": {\"product\": ...}, "
                    "\"defaultDevice\") overrides them.")
    p.add_argument("script", metavar="SCRIPT.py")
    p.add_argument("script_args", nargs=argparse.REMAINDER, metavar="ARGS")
    p.add_argument("--product", default=DEFAULT_PRODUCT,
                   help=f"the product to simulate (default {DEFAULT_PRODUCT}) unless the "
                        f"script's acl.init config names one")
    p.add_argument("--capacity", type=_size_arg,
                   help="override the device memory size (the acl.init config may too)")
    p.add_argument("--error-exitcode", type=int, default=1,
                   help="exit status when leaks or sanitizer reports are found (default 1)")
    p.add_argument("--no-leak-check", action="store_true",
                   help="do not report blocks still live at reset or exit")
    p.add_argument("--trace", metavar="OUT.jsonl", help="record every event to this file")
    p.add_argument("--stacks", action="store_true", help="record the Python stack per event")
    p.add_argument("--sanitizer", choices=("off", "report", "strict"), default="report",
                   help="report (default): report findings, calls behave as on hardware; "
                        "strict: a call with an error finding fails (107000); off")
    p.add_argument("--print-limit", type=int, default=100, metavar="N",
                   help="print at most N sanitizer reports and N leaks (default 100)")
    p.add_argument("--log-file", metavar="F",
                   help="write sanitizer reports, leaks and the summaries to F, not stderr")
    json_option(p)
    p.set_defaults(func=cmd_run)

    def trace_options(p: argparse.ArgumentParser) -> None:
        p.add_argument("trace", metavar="TRACE", help="JSON Lines trace, RMM CSV log or "
                       "PyTorch/torch_npu memory snapshot (.pickle or .json)")
        p.add_argument("--product", help="default: the product the trace was recorded on")
        p.add_argument("--capacity", type=_size_arg, help="device memory (e.g. 16GiB)")
        p.add_argument("--policy", type=_policy_arg, help="replace every recorded policy")
        p.add_argument("--quiet", action="store_true", help="no progress display")

    p = sub.add_parser("replay", help="replay a trace; first failure; smallest capacity")
    trace_options(p)
    p.add_argument("--api", help="replace every recorded allocation API")
    p.add_argument("--bisect", action="store_true",
                   help="find the smallest capacity on which the whole trace fits")
    p.add_argument("--step", type=_size_arg, default=2 * MiB,
                   help="bisection step: 2MiB (default, a huge page) or 64 (bytes)")
    json_option(p)
    p.set_defaults(func=cmd_replay)

    for name, func, help_text in (
            ("plot", cmd_plot, "draw a trace: timeline and memory map (.html, .svg, .png)"),
            ("map", cmd_map, "a text memory map of a trace at its peak or first failure")):
        p = sub.add_parser(name, help=help_text)
        trace_options(p)
        p.add_argument("--at", default="failure",
                       help="when to draw the map: failure (default, else peak), peak, end, "
                            "or an event number")
        if name == "plot":
            p.add_argument("-o", "--output", metavar="OUT",
                           help="OUT.html (default), OUT.svg or OUT.png (needs the plot extra)")
            p.add_argument("--what", choices=("both", "map", "timeline"), default="both")
            p.add_argument("--color-by", choices=("page", "component"), default="page")
        p.set_defaults(func=func)

    p = sub.add_parser(
        "export", help="write a trace for other tools: memory_viz snapshot, RMM CSV log",
        description="Write TRACE as a PyTorch memory snapshot that memory_viz "
                    "(pytorch.org/memory_viz) opens, or as RMM's logging_resource_adaptor CSV.")
    p.add_argument("trace", metavar="TRACE",
                   help="JSON Lines trace, RMM CSV log or PyTorch/torch_npu snapshot")
    p.add_argument("--format", choices=("memory-viz", "rmm-csv"), required=True)
    p.add_argument("-o", "--output", metavar="OUT",
                   help="output file (default: TRACE's name with .pickle or .csv)")
    p.add_argument("--device", type=int,
                   help="rmm-csv: the device to write (an RMM log holds one device)")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("stats", help="memory statistics of a trace replay")
    trace_options(p)
    json_option(p)
    p.set_defaults(func=cmd_stats)
    return parser


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    """Run the command line with ``argv`` (default sys.argv[1:]); the exit status."""
    out = out or sys.stdout
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else USAGE_ERROR
    if not getattr(args, "func", None):
        parser.print_help(out)
        return 0
    try:
        return args.func(args, out)
    except BrokenPipeError:
        # The reader went away (`ascend-memsim demo | head`): stop quietly, as Unix tools do;
        # point stdout at devnull so the interpreter's last flush does not fail again.
        if out is sys.stdout:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (AclError, ValueError, ImportError, OSError) as e:
        message = e.message if isinstance(e, AclError) else str(e)
        print(f"ascend-memsim {args.command}: error: {message}", file=sys.stderr)
        return USAGE_ERROR
