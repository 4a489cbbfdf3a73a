"""The ``ascend-memsim`` command line: a guided demo, explain, profiles, run, estimate,
replay, plot, study.

Every subcommand is a function ``cmd_<name>(args, out) -> exit code``; :func:`main` parses
``argv`` and dispatches, so tests call ``main([...])`` directly.

One convention everywhere: results go to ``out`` (stdout), diagnostics (warnings about a
trace, progress, what ``run`` found in the script, errors) to stderr. ``--json`` replaces
a command's result text with one JSON document.

Size: past 600 lines because it is the argument parser of every subcommand (each option with
its help text), kept in this one module so that ``--help`` imports nothing of the package;
each command's work is in a module of its own.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from concurrent.futures import BrokenExecutor
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:  # imported by _load(), once a command runs (--help needs none of them)
    from ..memory.args import UINT32_MAX
    from ..memory.constants import MallocPolicy
    from ..memory.errors import AclError, InvalidArgument
    from ..memory.explain import explain
    from ..memory.profiles import PROFILES
    from ..memory.units import format_bytes, parse_size
    from .common import print_json, to_json

#: exit status for bad usage or unreadable input (argparse uses 2 as well); the same as
#: common.USAGE_ERROR, named here so that --help imports nothing of the package
USAGE_ERROR = 2
#: memory.profiles.DEFAULT_PRODUCT, named here for the same reason (tests/test_cli.py checks
#: the two agree)
HELP_DEFAULT_PRODUCT = "A2"
#: plan.fit.DEFAULT_WINDOW, named here for the same reason (tests/test_fit.py checks it)
HELP_DEFAULT_WINDOW = 16
_MiB = 1 << 20
#: what every size option takes (memory.units.parse_size)
_SIZES = "units are binary: K/KB/KiB = 1024, M/MB/MiB = 2**20, G/GB/GiB = 2**30"


def _load() -> None:
    """Import what the commands use (about a tenth of a second), once."""
    if "explain" in globals():
        return
    from .. import checks  # noqa: F401  (registers the sanitizer and the config keys)
    from ..memory import args, constants, errors, explain, profiles, units
    from . import common

    globals().update(
        UINT32_MAX=args.UINT32_MAX, MallocPolicy=constants.MallocPolicy,
        AclError=errors.AclError, InvalidArgument=errors.InvalidArgument,
        explain=explain.explain, PROFILES=profiles.PROFILES, format_bytes=units.format_bytes,
        parse_size=units.parse_size, print_json=common.print_json,
        to_json=common.to_json)


def _command(module: str, name: str) -> Any:
    """The command ``name`` of submodule ``module``, imported when it first runs."""
    def run(args: argparse.Namespace, out: TextIO) -> int:
        _load()
        return getattr(importlib.import_module(module, __name__), name)(args, out)

    run.__name__ = name
    return run


cmd_demo = _command(".demo", "cmd_demo")
cmd_run = _command(".run", "cmd_run")
cmd_estimate = _command(".estimate", "cmd_estimate")
cmd_study = _command(".study", "cmd_study")
cmd_export, cmd_map, cmd_plot, cmd_replay, cmd_stats = (
    _command(".traces", n) for n in ("cmd_export", "cmd_map", "cmd_plot", "cmd_replay",
                                      "cmd_stats"))


def sanitizer_report_count(runtime: Any) -> int:
    """See :func:`ascend_memsim.cli.run.sanitizer_report_count`."""
    from .run import sanitizer_report_count as count

    return count(runtime)


class _Version(argparse.Action):
    """--version, importing the package's version only when asked."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS,
                 default: str = argparse.SUPPRESS, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=default,
                         help=help or "show the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> None:
        from .common import version

        print(f"ascend-memsim {version()}", file=sys.stdout)  # as argparse's version action
        parser.exit()

__all__ = ["main", "parse_policy_arg", "sanitizer_report_count", "USAGE_ERROR"]


def parse_policy_arg(text: str) -> int:
    """A policy from a name (``HUGE_ONLY``, ``huge-only``, ``ACL_MEM_MALLOC_HUGE_ONLY``) or a
    number (``1``, ``0x1``).

    >>> [parse_policy_arg(p) for p in ("huge-only", "ACL_MEM_MALLOC_NORMAL_ONLY", "0x3")]
    [1, 2, 3]

    Raises:
        InvalidArgument: neither a policy name nor a number.
    """
    _load()
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
    _load()
    try:
        return parse_size(text)
    except InvalidArgument as e:
        raise argparse.ArgumentTypeError(e.message) from None


def _int_in(lo: int, hi: int | None = None) -> Any:
    """An argparse type: an int in ``lo..hi`` (no upper bound when ``hi`` is None)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < lo or (hi is not None and value > hi):
            bounds = f"in {lo}..{hi}" if hi is not None else f"{lo} or more"
            raise argparse.ArgumentTypeError(f"must be {bounds}, got {value}")
        return value

    parse.__name__ = "int"
    return parse


def _item_value(text: str) -> float | None:
    """``--item-value``: a finite number written in ASCII, or ``stop`` (None)."""
    if text == "stop":
        return None
    try:
        if not text.isascii():
            raise ValueError
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither a number nor 'stop'") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"must be finite, got {text!r}")
    return value


def _policy_arg(text: str) -> int:
    _load()
    try:
        return parse_policy_arg(text)
    except InvalidArgument as e:
        raise argparse.ArgumentTypeError(e.message) from None


# -- explain, profiles -----------------------------------------------------------------------

def cmd_explain(args: argparse.Namespace, out: TextIO) -> int:
    explanation = explain(args.size, args.policy, product=args.product, api=args.api)
    if args.json:
        print_json(explanation, out)
    else:
        print(explanation, file=out)
    return 0


def cmd_profiles(args: argparse.Namespace, out: TextIO) -> int:
    if args.json:
        # page_bytes, a property, with the fields: the start alignments per page kind
        print_json([{**to_json(p), "page_bytes": p.page_bytes} for p in PROFILES.values()], out)
        return 0
    header = (f"{'name':7} {'memory':14} {'reserved':14} {'aclrtMalloc rounding':32} "
              f"{'1G pages':9} {'usage info':11} {'devices':7}  description")
    print(header, file=out)
    print("-" * len(header), file=out)
    for profile in PROFILES.values():
        main = profile.main_memory
        memory = f"{main.value} {format_bytes(profile.capacity(main))}"
        # get_mem_info's total leaves the system-reserved memory out (Profile.total)
        reserved = format_bytes(profile.reserved_bytes)
        rule = ("ALIGN_UP(size, 32)" if profile.size_rule.value == "align32"
                else "ALIGN_UP(size, 32) + 32")
        print(f"{profile.name:7} {memory:14} {reserved:14} {rule:32} "
              f"{'yes' if profile.huge1g else 'no':9} "
              f"{'yes' if profile.usage_info else 'no':11} {profile.device_count:<7}  "
              f"{profile.description}", file=out)
    print("\nsources:", file=out)
    for profile in PROFILES.values():
        for key, source in profile.sources.items():
            print(f"  {profile.name:7} {key:12} {source}", file=out)
    return 0


# -- parser ----------------------------------------------------------------------------------

def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ascend-memsim",
        description="A simulator of the Ascend CANN runtime's device memory.")
    parser.add_argument("--version", action=_Version)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def own_options(p: argparse.ArgumentParser) -> dict[str, int]:
        # a script command's own long options and how many values each takes: one of them
        # among the script's arguments is refused (see run's _misplaced_options)
        return {s: 0 if a.nargs == 0 else 1 for a in p._actions for s in a.option_strings
                if s.startswith("--") and s != "--help"}

    def json_option(p: argparse.ArgumentParser) -> None:
        p.add_argument("--json", action="store_true",
                       help="print the result as one JSON document")

    p = sub.add_parser("demo", help="a guided tour of the allocation rules (start here)")
    p.add_argument("--product", default=HELP_DEFAULT_PRODUCT,
                   help=f"the product whose rules the tour shows (default "
                        f"{HELP_DEFAULT_PRODUCT}; see the profiles command)")
    p.add_argument("--capacity", type=_size_arg, default=64 * _MiB,
                   help=f"device memory for the tour (default 64MiB; {_SIZES})")
    p.add_argument("--html", metavar="OUT.html", help="also write the memory map picture")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("explain", help="how SIZE becomes a footprint, step by step")
    p.add_argument("size", type=_size_arg, metavar="SIZE",
                   help=f"bytes: 123, 64KiB, 2MiB, 1GiB ({_SIZES})")
    p.add_argument("--policy", type=_policy_arg, default=0,
                   help="HUGE_FIRST (default), HUGE_ONLY, NORMAL_ONLY, ... or a number")
    p.add_argument("--product", default=HELP_DEFAULT_PRODUCT,
                   help=f"the product whose rules apply (default {HELP_DEFAULT_PRODUCT}; see "
                        f"the profiles command)")
    p.add_argument("--api", default="aclrtMalloc",
                   help="aclrtMalloc (default), aclrtMallocAlign32, malloc_cached, ...")
    json_option(p)
    p.set_defaults(func=cmd_explain)

    p = sub.add_parser("profiles", help="the simulated products, their rules and sources")
    json_option(p)
    p.set_defaults(func=cmd_profiles)

    p = sub.add_parser(
        "run", help="run a pyacl script on the simulator, report leaks",
        usage="ascend-memsim run [options] SCRIPT.py [ARGS ...] [-- ARGS ...]",
        description="Run an unmodified pyacl script on the simulator; report leaks and "
                    "sanitizer findings. --product, --capacity and --device-count are "
                    "defaults: the script's own acl.init config (\"memsim\": {\"product\": "
                    "...}, \"defaultDevice\") overrides them. run's options go before "
                    "SCRIPT.py; one of them after it is refused (exit 2) unless it follows "
                    "--, after which every argument goes to the script as it is.")
    p.add_argument("script", metavar="SCRIPT.py", nargs="?", help="the pyacl program to run")
    p.add_argument("script_args", nargs=argparse.REMAINDER, metavar="ARGS",
                   help="the script's arguments")
    p.add_argument("--product", default=HELP_DEFAULT_PRODUCT,
                   help=f"the product to simulate (default {HELP_DEFAULT_PRODUCT}) unless the "
                        f"script's acl.init config names one")
    p.add_argument("--capacity", type=_size_arg,
                   help=f"override the device memory size, e.g. 16GiB ({_SIZES}; the "
                        f"acl.init config may say too)")
    p.add_argument("--device-count", type=_int_in(1), metavar="N",
                   help="devices the product has (default: the product's own, 1 on A2); the "
                        "acl.init config's memsim.device_count may say too")
    # an exit status is one byte: 256 would be seen as 0 (success) by the shell; 0 means
    # "findings do not change the exit status", as valgrind and compute-sanitizer read it
    p.add_argument("--error-exitcode", type=_int_in(0, 255), default=1, metavar="0..255",
                   help="exit status when leaks or sanitizer reports are found (default 1; "
                        "0: findings are reported but do not change the exit status)")
    p.add_argument("--no-leak-check", action="store_true",
                   help="do not report blocks still live at reset or exit")
    p.add_argument("--run-mode", choices=("host", "device"), default="host",
                   help="host (default) or device: the program runs on the device's CPU "
                        "(ACL_DEVICE), so operators take host memory and ptr_to_bytes reads "
                        "device memory (the acl.init config's memsim.run_mode may say too)")
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
    p.set_defaults(func=cmd_run, run_options=own_options(p))

    def ranks_options(p: argparse.ArgumentParser) -> None:
        g = p.add_argument_group("a distributed job (each rank on its own card)")
        g.add_argument("--world-size", type=int, metavar="N",
                       help="run the script as each of N ranks (RANK, WORLD_SIZE, "
                            "LOCAL_RANK set as torchrun does; torch.distributed on a fake "
                            "process group); every rank up to 8, one per class above")
        g.add_argument("--cards-per-node", type=int, default=8, metavar="N",
                       help="cards a node (default 8): LOCAL_RANK is RANK mod N")
        g.add_argument("--hccl-buffsize", type=int, metavar="MB",
                       help="HCCL_BUFFSIZE for the run (default: the environment's, else 200)")
        g.add_argument("--p2p-buffsize", type=int, metavar="MB",
                       help="P2P_HCCL_BUFFSIZE for the run (default: the environment's, "
                            "else 20; 0: send/recv use the group's communicator)")
        g.add_argument("--runtime-share", type=_size_arg, metavar="SIZE",
                       help="what CANN and torch_npu hold on a card before the first tensor, "
                            "on one card as on each rank (default: the product's ESTIMATE, "
                            "512MiB on A2; 0 leaves it out)")
        g.add_argument("--trace-all", action="store_true",
                       help="trace every rank, not one per class of alike ranks")
        g.add_argument("--sweep-hccl", metavar="MB,MB,...",
                       help="with --world-size: the HCCL_BUFFSIZE values --sweep tries "
                            "(default 200,100,50,25); implies --sweep")
        g.add_argument("--sweep-products", metavar="P,P,...",
                       help="with --world-size: the products --sweep tries (default "
                            "--product); implies --sweep")
        g.add_argument("--sweep-world-sizes", metavar="N,N,...",
                       help="with --world-size: the card counts --sweep tries (default "
                            "--world-size); implies --sweep")
        g.add_argument("--quiet", action="store_true",
                       help="--bisect, --sweep: no progress line (drawn on a terminal "
                            "only: never when piped or with --json)")
        g.add_argument("--plot", metavar="OUT",
                       help="with --world-size: draw each rank class's card stacked by kind "
                            "against the capacity, OUT.png or OUT.svg (the plot extra); "
                            "with --sweep the best setting's run, with --bisect each "
                            "class's smallest card marked")

    p = sub.add_parser(
        "estimate", help="will a torch_npu training script fit? run it on fake tensors",
        usage="ascend-memsim estimate [options] (SCRIPT.py | -m MODULE | LAUNCHER ...) "
              "[ARGS ...] [-- ARGS ...]",
        description="Run an unchanged torch_npu script on the CPU with fake tensors (shapes, "
                    "no values, no memory), every NPU storage allocated and freed through "
                    "torch_npu's caching allocator on a simulated device; print the peaks, "
                    "what they hold and whether the job fits. Needs torch. estimate's "
                    "options go before SCRIPT.py; after -- every argument goes to the "
                    "script. The command may be a launcher as typed (torchrun, deepspeed, "
                    "accelerate launch, llamafactory-cli, a console script): its ranks are "
                    "taken from its own arguments. Exit status 1 when the script runs out "
                    "of memory or fails.")
    p.add_argument("script", metavar="SCRIPT.py", nargs="?",
                   help="the torch_npu script, or a launcher (torchrun, deepspeed, "
                        "accelerate launch, llamafactory-cli) or console script")
    p.add_argument("-m", dest="module", metavar="MODULE",
                   help="run MODULE as python -m does (its arguments after it)")
    p.add_argument("script_args", nargs=argparse.REMAINDER, metavar="ARGS",
                   help="the script's arguments")
    p.add_argument("--product", default=HELP_DEFAULT_PRODUCT,
                   help=f"the product to simulate (default {HELP_DEFAULT_PRODUCT})")
    p.add_argument("--capacity", type=_size_arg,
                   help=f"the device memory, e.g. 32GiB (default: the product's; {_SIZES})")
    p.add_argument("--alloc-conf", default=None,
                   help="PYTORCH_NPU_ALLOC_CONF, e.g. expandable_segments:True (default: as "
                        "the script's environment has it at its first NPU allocation)")
    p.add_argument("--cann", help="CANN version of the allocator's rules (default 9.1.0)")
    p.add_argument("--torch-npu", metavar="VERSION",
                   help="the torch_npu release whose allocator behaviours apply (2.1 .. 2.15: "
                        "the settings it knows, set_per_process_memory_fraction(1.0), "
                        "PYTORCH_ALLOC_CONF); default the newest")
    p.add_argument("--snapshot", metavar="OUT.pickle",
                   help="write the torch_npu memory snapshot (segments, blocks, "
                        "device_traces with frames), for replay --allocator torch-npu and "
                        "memory_viz")
    p.add_argument("--task-queue", type=int, choices=(0, 1, 2), default=None,
                   help="TASK_QUEUE_ENABLE: operators' workspaces come from the caching "
                        "allocator (0, 1: torch_npu's default) or NPUWorkspaceAllocator (2) "
                        "(default: as the script's environment has it)")
    p.add_argument("--workspace-table", metavar="FILE.json",
                   help="override the workspace table: a JSON object of operator names "
                        "(mm, _foreach_add_; * for the rest) and bytes per call")
    p.add_argument("--workspace", action="append", default=[], metavar="OP=SIZE",
                   help="one operator's workspace per call, e.g. mm=24MiB (repeatable; "
                        "after --workspace-table)")
    p.add_argument("--no-workspace", action="store_true",
                   help="no operator takes a workspace (to compare)")
    p.add_argument("--max-entries", type=int, metavar="N",
                   help="--snapshot keeps the last N trace entries, as torch's "
                        "_record_memory_history(max_entries=N) (default: all)")
    p.add_argument("--item-value", type=_item_value, default=0.0, metavar="X|stop",
                   help=".item(), float(t), int(t), bool(t), .tolist() and .numpy() of a "
                        "tensor without values give X in the tensor's kind (default 0: a "
                        "logged loss of 0, no inf found); 'stop' stops the script at the "
                        "first such read; the summary counts the reads")
    p.add_argument("--bisect", action="store_true",
                   help="run the script once, then find by replays of its snapshot the "
                        "smallest capacity that fits and the one from which every larger "
                        "fits (--capacity: the top of the search); with --world-size, per "
                        "rank class, HCCL and the runtime's share included")
    p.add_argument("--sweep", action="store_true",
                   help="as --bisect, for several allocator settings, ranked; with "
                        "--world-size, every setting x HCCL_BUFFSIZE (x product x card "
                        "count) on the card, ranked by the worst rank's margin")
    p.add_argument("--sweep-conf", metavar="'A;B;...'",
                   help="the settings --sweep tries, separated by ';'; implies --sweep")
    p.add_argument("--step", type=_size_arg, default=2 * _MiB,
                   help="--bisect / --sweep step: 2MiB (default, a huge page) or 64 (bytes)")
    p.add_argument("--window", type=int, default=HELP_DEFAULT_WINDOW, metavar="N",
                   help="--bisect / --sweep: steps replayed below and above the bisection's "
                        f"answer (default {HELP_DEFAULT_WINDOW})")
    ranks_options(p)
    json_option(p)
    p.set_defaults(func=cmd_estimate, run_options=own_options(p))

    def trace_options(p: argparse.ArgumentParser) -> None:
        p.add_argument("trace", metavar="TRACE", help="JSON Lines trace, RMM CSV log or "
                       "PyTorch/torch_npu memory snapshot (.pickle or .json)")
        p.add_argument("--product", help="default: the product the trace was recorded on")
        p.add_argument("--capacity", type=_size_arg,
                       help=f"device memory, e.g. 16GiB ({_SIZES}); default: the "
                            f"capacity the trace records (on any product), else the product's")
        p.add_argument("--policy", type=_policy_arg, help="replace every recorded policy")
        p.add_argument("--quiet", action="store_true", help="no progress display")

    p = sub.add_parser("replay", help="replay a trace; first failure; smallest capacity")
    trace_options(p)
    p.add_argument("--api", help="replace every recorded allocation API")
    p.add_argument("--bisect", action="store_true",
                   help="find the smallest capacity on which the whole trace fits; through "
                        "the caching allocator also the one from which every larger one "
                        "fits (--capacity: the top of the search)")
    p.add_argument("--step", type=_size_arg, default=2 * _MiB,
                   help="bisection step: 2MiB (default, a huge page) or 64 (bytes)")
    p.add_argument("--allocator", choices=["torch-npu", "none"],
                   help="torch-npu: each tensor allocation through torch_npu's caching "
                        "allocator (the default for a torch snapshot with tensor-level "
                        "entries); none: the recorded device calls (the default otherwise)")
    p.add_argument("--continue-after-oom", action="store_true",
                   help="replay on after an out-of-memory error of a torch snapshot (torch "
                        "ends the job there: peaks after it are not the job's)")
    p.add_argument("--alloc-conf",
                   help="PYTORCH_NPU_ALLOC_CONF for --allocator, e.g. expandable_segments:True "
                        "(default: PYTORCH_NPU_ALLOC_CONF or PYTORCH_ALLOC_CONF from the "
                        "environment, as torch_npu reads them)")
    p.add_argument("--cann", help="CANN version for --allocator (default 9.1.0)")
    p.add_argument("--sweep", action="store_true",
                   help="with --allocator: try several allocator settings and rank them by "
                        "the capacity each needs")
    p.add_argument("--sweep-conf", metavar="'A;B;...'",
                   help="the settings --sweep tries, separated by ';' (an empty one is the "
                        "default conf); implies --sweep")
    p.add_argument("--window", type=int, default=HELP_DEFAULT_WINDOW, metavar="N",
                   help="with --allocator: steps replayed below and above the bisection's "
                        f"answer (default {HELP_DEFAULT_WINDOW})")
    p.add_argument("--jobs", type=int, metavar="N",
                   help="with --bisect or --sweep through the allocator: worker processes "
                        "that replay side by side (default: one per core; 1: none)")
    p.add_argument("--plot", metavar="OUT",
                   help="with --allocator: draw the allocated, pending free, inactive split "
                        "and cached bytes over the trace and the segments at the peak of "
                        "reserved bytes and at the first out-of-memory error (OUT.html, "
                        "OUT.svg or OUT.png)")
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
        if name == "map":
            p.add_argument("--cell", type=_size_arg, metavar="SIZE",
                           help="the bytes a character stands for, a power of two from 64 "
                                "(e.g. 2MiB, a huge page; default: chosen from the span the "
                                "blocks use, about 8 lines; the legend says it)")
        if name == "plot":
            p.add_argument("-o", "--output", metavar="OUT",
                           help="OUT.html (default), OUT.svg or OUT.png (needs the plot extra)")
            p.add_argument("--what", choices=("both", "map", "timeline"), default="both",
                           help="what to draw: both (default), the memory map or the "
                                "timeline")
            p.add_argument("--color-by", choices=("page", "component"), default="page",
                           help="colour blocks by page kind, normal, huge or 1 GiB (page, "
                                "default), or by the component that allocated them "
                                "(component: APP, ...)")
            p.add_argument("--zoom", type=int, metavar="EVENT",
                           help="also draw the block event EVENT allocated close up: its "
                                "requested bytes, the size rule's padding (the +32) and the "
                                "page rounding, whole and magnified, with the rules")
            p.add_argument("--player", action="store_true",
                           help="write the interactive trace player (OUT.html): map, "
                                "timeline and a slider over events, on --product and on "
                                "950PR (A2 when --product is 950PR) side by side")
        p.set_defaults(func=func)

    p = sub.add_parser(
        "study", help="many snapshots x products x capacities x settings: one table",
        usage="ascend-memsim study [GRID] [--snapshots SNAPSHOT ...] [options]",
        description="Answer, for every snapshot on every product at every capacity with "
                    "every allocator setting, what replay --allocator torch-npu --bisect "
                    "answers: the smallest capacity that fits and the one from which every "
                    "larger one fits. In this process, in local worker processes, or on a "
                    "Dask cluster (the study extra); every answer is kept in a cache, so a "
                    "study run again resumes where it stopped. Exit status 1 when a cell "
                    "does not fit at its capacity.")
    p.add_argument("grid", metavar="GRID", nargs="?",
                   help="a grid file (.json, or .toml on Python 3.11+): an object of "
                        "snapshots, products, capacities, settings, cann, step, window; the "
                        "options below override it")
    p.add_argument("--snapshots", nargs="+", metavar="SNAPSHOT",
                   help="torch_npu memory snapshots (.pickle or .json)")
    p.add_argument("--products", help=f"comma-separated, e.g. A2,A3,950PR (default "
                                      f"{HELP_DEFAULT_PRODUCT})")
    p.add_argument("--capacities", metavar="SIZE,...",
                   help=f"the cards' memory, the top of each search, e.g. 32GiB,64GiB "
                        f"(default: each product's own; {_SIZES})")
    p.add_argument("--settings", metavar="default|'A;B;...'",
                   help="allocator settings: default (each product's --sweep candidates, "
                        "the default) or PYTORCH_NPU_ALLOC_CONF strings separated by ';' (an "
                        "empty one is the default conf)")
    p.add_argument("--cann", help="CANN version of the allocator's rules (default 9.1.0)")
    p.add_argument("--step", type=_size_arg, help="capacity step (default 2MiB)")
    p.add_argument("--window", type=int, metavar="N",
                   help=f"steps replayed below and above each bisection's answer (default "
                        f"{HELP_DEFAULT_WINDOW})")
    p.add_argument("--jobs", type=_int_in(1, 1024), metavar="N",
                   help="worker processes (default: one per core)")
    p.add_argument("--executor", choices=("inline", "processes", "dask"),
                   help="inline: this process; processes: --jobs local worker processes; "
                        "dask: a Dask cluster (--scheduler, else a local one of --jobs "
                        "workers). Default: dask with --scheduler, else processes (inline "
                        "for --jobs 1)")
    p.add_argument("--scheduler", metavar="tcp://HOST:PORT",
                   help="a Dask scheduler's address: run the study on that cluster")
    p.add_argument("--cache", metavar="DIR",
                   help="where answers are kept (default $XDG_CACHE_HOME/ascend-memsim/study, "
                        "else ~/.cache/ascend-memsim/study)")
    p.add_argument("--no-cache", action="store_true",
                   help="keep no answers and read none")
    p.add_argument("--quiet", action="store_true", help="no progress display")
    shape = p.add_mutually_exclusive_group()
    shape.add_argument("--json", action="store_true", help="print the table as JSON")
    shape.add_argument("--csv", action="store_true", help="print the table as CSV")
    p.set_defaults(func=cmd_study)

    p = sub.add_parser(
        "plan", help="the largest micro-batch that fits, and the layout: estimates of a script",
        usage="ascend-memsim plan [options] -- COMMAND [ARGS with {NAME} ...]",
        description="Search a script's knobs for what fits: the largest value of one that "
                    "memory grows with (--vary NAME=LO..HI, by bisection: ceil(log2(range)) "
                    "+ 2 estimates at most), on each point of a grid of others (--grid, "
                    "--env, --set, --product, --capacity, --world-size, --alloc-conf, "
                    "--hccl-buffsize). {NAME} in the command, an --env or a --set value "
                    "stands for an axis's value. Each cell is one estimate in a process of "
                    "its own, in local processes or on a Dask cluster (the study extra); "
                    "every answer is kept in a cache, so a plan run again resumes. Prints a "
                    "row per grid point and the configuration to run. Exit status 1 when "
                    "nothing fits with the margin.")
    p.add_argument("job", nargs=argparse.REMAINDER, metavar="COMMAND",
                   help="after --: the script (or launcher, as estimate takes it) and its "
                        "arguments, e.g. -- train.py --micro-batch {micro_batch}")
    g = p.add_argument_group("the axes")
    g.add_argument("--vary", metavar="NAME=LO..HI",
                   help="the knob memory grows with, searched for its largest value that "
                        "fits (whole numbers, e.g. micro_batch=1..256)")
    g.add_argument("--grid", action="append", metavar="NAME=a,b,c",
                   help="a grid axis of the script's own (repeatable; values separated by "
                        "',', or by ';' when one holds a comma)")
    g.add_argument("--env", action="append", metavar="NAME[=VALUES]",
                   help="an environment variable of every cell: NAME=a,b an axis, "
                        "NAME=VALUE fixed ({NAME} allowed), NAME alone its value here; each "
                        "is in the cache key (repeatable)")
    g.add_argument("--set", action="append", nargs=2, metavar=("FILE", "KEY.PATH=VALUES"),
                   help="a config file's key (JSON, YAML with PyYAML, TOML), set in a copy "
                        "the command is pointed at: KEY.PATH=a,b an axis, =VALUE or "
                        "={NAME} fixed or from an axis (repeatable)")
    g.add_argument("--product", metavar="P[,P...]",
                   help=f"the product(s) to simulate (default {HELP_DEFAULT_PRODUCT})")
    g.add_argument("--capacity", metavar="SIZE[,SIZE...]",
                   help=f"the card's memory, e.g. 32GiB,64GiB (default: the product's; "
                        f"{_SIZES})")
    g.add_argument("--world-size", metavar="N[,N...]",
                   help="run each cell as N ranks (estimate --world-size), a list an axis")
    g.add_argument("--alloc-conf", metavar="'A;B;...'",
                   help="PYTORCH_NPU_ALLOC_CONF values separated by ';' (an empty one is "
                        "the default conf)")
    g.add_argument("--hccl-buffsize", metavar="MB[,MB...]",
                   help="HCCL_BUFFSIZE values (with --world-size)")
    g.add_argument("--estimate-args", metavar="'ARGS'",
                   help="more of estimate's own options for every cell, e.g. "
                        "'--runtime-share 0 --cann 8.2.0' (one option alone: "
                        "--estimate-args=--no-workspace)")
    g.add_argument("--input", action="append", metavar="FILE",
                   help="a file the job reads that its command does not name: its content "
                        "is in the cache key (repeatable)")
    g = p.add_argument_group("the answer")
    g.add_argument("--margin", default="5", metavar="PERCENT",
                   help="the part of the card that must stay free for a value to fit "
                        "(default 5)")
    g.add_argument("--batch", metavar="EXPR",
                   help="with --seq: the batch, an axis or a number (or a product of "
                        "them, a*b); tokens per step per card = batch x seq / cards rank "
                        "the configurations")
    g.add_argument("--seq", metavar="EXPR", help="the sequence length (an axis or a number)")
    g.add_argument("--cards", metavar="EXPR",
                   help="the cards one --batch is spread over (default 1: a per-card "
                        "micro-batch; e.g. tp*pp, or world_size for a global batch)")
    g.add_argument("--plot", metavar="OUT.png",
                   help="draw each grid point's device total against the searched value, "
                        "with the card's capacity (.png or .svg; the plot extra)")
    json_option(p)
    p.add_argument("--quiet", action="store_true",
                   help="no progress line (drawn on a terminal only: never when piped or "
                        "with --json)")
    g = p.add_argument_group("where the cells run")
    g.add_argument("--jobs", type=_int_in(1, 1024), metavar="N",
                   help="cells at a time (default: one per core)")
    g.add_argument("--executor", choices=("inline", "processes", "dask"),
                   help="inline: one cell at a time; processes: --jobs at a time here; "
                        "dask: a Dask cluster (--scheduler, else a local one of --jobs "
                        "workers). Default: dask with --scheduler, else processes (inline "
                        "for --jobs 1)")
    g.add_argument("--scheduler", metavar="tcp://HOST:PORT",
                   help="a Dask scheduler's address (its workers see the script and its "
                        "files at the same paths)")
    g.add_argument("--cache", metavar="DIR",
                   help="where answers are kept (default $XDG_CACHE_HOME/ascend-memsim/plan, "
                        "else ~/.cache/ascend-memsim/plan)")
    g.add_argument("--no-cache", action="store_true", help="keep no answers and read none")
    g.add_argument("--timeout", type=float, default=3600.0, metavar="SECONDS",
                   help="the most one cell may take; past it the cell is killed and its "
                        "grid point says so (default 3600)")
    g.add_argument("--cold-start", action="store_true",
                   help="start every cell as a new interpreter, not a fork of one that has "
                        "imported torch (the same answers, 2 to 3 s slower a cell)")
    p.set_defaults(func=_command(".plan", "cmd_plan"))

    p = sub.add_parser(
        "export", help="write a trace for other tools: memory_viz snapshot, RMM CSV log",
        description="Write TRACE as a PyTorch memory snapshot that memory_viz "
                    "(pytorch.org/memory_viz) opens, or as RMM's logging_resource_adaptor CSV.")
    p.add_argument("trace", metavar="TRACE",
                   help="JSON Lines trace, RMM CSV log or PyTorch/torch_npu snapshot")
    p.add_argument("--format", choices=("memory-viz", "rmm-csv"), required=True,
                   help="memory-viz: a PyTorch memory snapshot (pickle); rmm-csv: an RMM "
                        "logging_resource_adaptor CSV log")
    p.add_argument("-o", "--output", metavar="OUT",
                   help="output file (default: TRACE's name with .pickle or .csv)")
    p.add_argument("--device", type=int,
                   help="rmm-csv: the device to write (an RMM log holds one device)")
    p.add_argument("--max-entries", type=int, metavar="N",
                   help="memory-viz: keep the last N trace entries per device, as torch's "
                        "_record_memory_history(max_entries=N) does (default: all)")
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
    argv = list(sys.argv[1:] if argv is None else argv)
    after = None
    if argv[:1] in (["run"], ["estimate"]) and "--" in argv:
        # `run [options] SCRIPT.py [ARGS] -- ARGS` (and estimate): what follows the first --
        # goes to the script as it is (argparse's own handling of -- differs between Python
        # versions)
        after = argv[argv.index("--") + 1:]
        argv = argv[:argv.index("--")]
    if argv[:1] == ["estimate"] and "-m" in argv[:-1]:
        # `estimate [options] -m MODULE ARGS`: as with python -m, what follows the module is
        # the module's
        at = argv.index("-m") + 2
        after, argv = argv[at:] + (after or []), argv[:at]
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else USAGE_ERROR
    if args.command in ("run", "estimate"):
        if args.script is None and after and not getattr(args, "module", None):
            args.script, after = after[0], after[1:]
        if args.script is None and not getattr(args, "module", None):
            print(f"ascend-memsim {args.command}: error: the script to run is missing "
                  f"(ascend-memsim {args.command} [options] SCRIPT.py [ARGS ...])",
                  file=sys.stderr)
            return USAGE_ERROR
        args.unchecked_args = after or []
    if not getattr(args, "func", None):
        parser.print_help(out)
        return 0
    _load()
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
    except BrokenExecutor as e:
        # a worker of --jobs died (killed, out of host memory): nothing was decided
        print(f"ascend-memsim {args.command}: error: a worker process ended before its work "
              f"was done ({type(e).__name__}); no answer is given from part of a search: run "
              f"it again, or with --jobs 1", file=sys.stderr)
        return USAGE_ERROR
