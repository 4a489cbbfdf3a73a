"""``ascend-memsim estimate``: a torch_npu training script on fake tensors through the
simulated caching allocator; will it fit?"""

from __future__ import annotations

import argparse
import contextlib
import os
import pickle
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from .common import USAGE_ERROR, print_json
from .run import misplaced_options
from .script import run_entry, run_module, run_script

__all__ = ["cmd_estimate", "search_progress"]


def _snapshot_path_problem(path: str | None) -> str:
    """Why ``--snapshot PATH`` could not be written, checked before the script runs ('' when
    it can, or when there is none)."""
    if not path:
        return ""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        return f"--snapshot {path}: the folder {folder} does not exist"
    if os.path.isdir(path):
        return f"--snapshot {path} is a folder: give a file name"
    if not os.access(folder, os.W_OK):
        return f"--snapshot {path}: the folder {folder} is not writable"
    return ""


def _launched_ranks(args: argparse.Namespace, program: Any) -> str:
    """Take the launcher's ranks as ``--world-size`` (and its processes a node as
    ``--cards-per-node``); why not, when ``--world-size`` says otherwise, or ""."""
    if program.world_size is None:
        return ""
    if args.world_size is not None and args.world_size != program.world_size:
        return (f"--world-size {args.world_size}, but {program.launcher} starts "
                f"{program.world_size} ranks: give one of the two")
    args.world_size = program.world_size
    args.cards_per_node = program.cards_per_node or args.cards_per_node
    return ""


def _target(program: Any, json: bool) -> Any:
    """What each rank's process runs (:class:`~ascend_memsim.torchsim.stacks.launchers.
    Program`) as an estimate's target: the launcher's environment set for the run (it ends
    with it), the rank's arguments (DeepSpeed's ``--local_rank=N``), the script, module or
    console script run as its process would run it. With ``--json`` what it prints goes to
    stderr, so that stdout is the JSON alone."""
    def target() -> int:
        os.environ.update(program.env)
        local = os.environ.get("LOCAL_RANK")
        argv = program.rank_argv(int(local) if program.world_size and local else None)
        run = {"script": run_script, "module": run_module, "entry": run_entry}[program.kind]
        if not json:
            return int(run(program.target, argv))
        with contextlib.redirect_stdout(sys.stderr):
            return int(run(program.target, argv))

    target.__name__ = f"{program.target} ({program.launcher})" if program.launcher \
        else program.target
    return target


def _torch_npu_problem(args: argparse.Namespace) -> str:
    """Why ``--torch-npu`` cannot be taken (checked before the script runs), or ""."""
    if args.torch_npu is None:
        return ""
    from ..allocators.releases import release

    try:
        release(args.torch_npu)
    except ValueError as e:
        return f"--torch-npu: {e}"
    # DECISION: the searches replay the traced run with the newest release's allocator;
    # until they take a release, --torch-npu is for a run and its figures
    from .estimate_ranks import sweeping

    if args.bisect or sweeping(args):
        return ("--torch-npu is for a run's figures (one card or --world-size); the searches "
                "(--bisect, --sweep...) replay with the newest release's allocator")
    return ""


def cmd_estimate(args: argparse.Namespace, out: TextIO) -> int:
    """Run the script under :func:`ascend_memsim.torchsim.estimate`; print the summary (or
    ``--json``); exit 1 when it ran out of memory or failed, else 0.

    The script runs as ``run`` runs one (its exit, atexit handlers and module teardown
    inside the estimate, so the storages its globals hold are freed as in its process). The
    command may be ``-m MODULE`` or a launcher as typed
    (:mod:`ascend_memsim.torchsim.stacks.launchers`): then each rank runs what the launcher
    would start, and the launcher's own arguments give the ranks."""
    refusal = misplaced_options(args) if args.script is not None else ""
    if refusal:
        print(refusal, file=sys.stderr)
        return USAGE_ERROR
    try:
        from ..torchsim import estimate
        from ..torchsim.stacks.launchers import LaunchError, resolve
    except ImportError as e:
        print(f"ascend-memsim estimate: error: estimate needs torch ({e}); install it, e.g. "
              f"pip install 'ascend-memsim[torch]'", file=sys.stderr)
        return USAGE_ERROR
    overrides = _workspace_overrides(args)
    if isinstance(overrides, str):
        print(f"ascend-memsim estimate: error: {overrides}", file=sys.stderr)
        return USAGE_ERROR
    words = [*(["-m", args.module] if args.module else []),
             *([args.script] if args.script is not None else []), *args.script_args,
             *getattr(args, "unchecked_args", [])]
    try:
        program = resolve(words, args.cards_per_node)
    except LaunchError as e:
        print(f"ascend-memsim estimate: error: {e}", file=sys.stderr)
        return USAGE_ERROR
    problem = (_snapshot_path_problem(args.snapshot) or _torch_npu_problem(args)
               or _launched_ranks(args, program))
    if problem:
        print(f"ascend-memsim estimate: error: {problem}", file=sys.stderr)
        return USAGE_ERROR
    target = _target(program, args.json)
    if args.world_size is not None:
        return _estimate_ranks(args, target, overrides, out)
    if args.plot or args.sweep_hccl or args.sweep_products or args.sweep_world_sizes:
        print("ascend-memsim estimate: --plot, --sweep-hccl, --sweep-products and "
              "--sweep-world-sizes are for every rank's card: give --world-size N (a one-card "
              "job: --world-size 1)", file=sys.stderr)
        return USAGE_ERROR
    workspace = False if args.no_workspace else overrides
    if args.bisect or args.sweep or args.sweep_conf is not None:
        if args.max_entries is not None:
            print("ascend-memsim estimate: --bisect and --sweep replay every trace entry: "
                  "--max-entries is for --snapshot alone", file=sys.stderr)
            return USAGE_ERROR
        return _search(args, out, target, workspace)
    result = estimate(target, product=args.product, capacity=args.capacity,
                      alloc_conf=args.alloc_conf, cann=args.cann,
                      snapshot=bool(args.snapshot), workspace=workspace,
                      task_queue=args.task_queue, item_value=args.item_value,
                      max_entries=args.max_entries, torch_npu=args.torch_npu,
                      runtime_share=args.runtime_share)
    if args.snapshot:
        with open(args.snapshot, "wb") as f:
            pickle.dump(result.snapshot, f)
        print(f"ascend-memsim: snapshot written to {args.snapshot}", file=sys.stderr)
    if args.json:
        print_json(result.as_dict(), out)
    else:
        print(result, file=out)
    return 0 if result.fits else 1


def _workspace_overrides(args: argparse.Namespace) -> dict | str:
    """--workspace-table's file, then each --workspace OP=SIZE; the message when one is
    refused."""
    from ..torchsim.workspace_table import WorkspaceTableError, check_overrides, load_overrides

    try:
        table = load_overrides(args.workspace_table) if args.workspace_table else {}
        for item in args.workspace:
            name, sep, size = item.partition("=")
            if not sep:
                return f"--workspace {item!r}: expected OP=SIZE, e.g. mm=24MiB"
            table.update(check_overrides({name.strip(): size.strip()}, "--workspace"))
    except WorkspaceTableError as e:
        return str(e)
    except OSError as e:
        return f"--workspace-table: {e.strerror or e}: {args.workspace_table}"
    return table


def _estimate_ranks(args: argparse.Namespace, target, overrides: dict,
                    out: TextIO) -> int:
    """``--world-size N``: every rank's card (:func:`ascend_memsim.torchsim.estimate_ranks`)."""
    from ..torchsim import estimate_ranks
    from .estimate_ranks import plot, plot_problem, search_ranks, sweeping

    if args.snapshot:
        print("ascend-memsim estimate: --snapshot is for one card; leave out --world-size",
              file=sys.stderr)
        return USAGE_ERROR
    problem = plot_problem(args.plot) if args.plot else None
    if problem is not None:
        print(f"ascend-memsim estimate: {problem}", file=sys.stderr)
        return USAGE_ERROR
    options = dict(cann=args.cann, cards_per_node=args.cards_per_node,
                   p2p_buffsize=args.p2p_buffsize, runtime_share=args.runtime_share,
                   trace_all=args.trace_all,
                   workspace=False if args.no_workspace else overrides,
                   task_queue=args.task_queue, item_value=args.item_value,
                   torch_npu=args.torch_npu)
    if args.bisect or sweeping(args):
        return search_ranks(args, target, options, out)
    try:
        result = estimate_ranks(
            target, world_size=args.world_size, product=args.product, capacity=args.capacity,
            alloc_conf=args.alloc_conf, hccl_buffsize=args.hccl_buffsize, **options)
    except ValueError as e:
        print(f"ascend-memsim estimate: error: {e}", file=sys.stderr)
        return USAGE_ERROR
    if args.json:
        print_json(result.as_dict(), out)
    else:
        print(result, file=out)
    if args.plot:
        plot(args.plot, result)
    return 0 if result.fits else 1


def search_progress(args: argparse.Namespace, stream: Any = None) -> Any:
    """A progress line redrawn on ``stream`` (stderr) while ``--bisect`` or ``--sweep``
    runs (:data:`ascend_memsim.torchsim.search.Progress`): the phase (the script's run with
    its trace entries so far, reading the trace, each replay of about as many as the
    bisection of the range takes, the runs that check the answer) and the time spent. None
    (silent) when the stream is not a terminal, or with ``--quiet`` or ``--json``."""
    stream = stream or sys.stderr
    if args.quiet or args.json or not getattr(stream, "isatty", lambda: False)():
        return None
    started = time.monotonic()
    what = "sweep" if args.sweep or args.sweep_conf is not None else "bisect"

    def show(phase: str, done: int, total: int) -> None:
        if phase == "traced":
            text = "running the script once" if done < total else "the script ran"
        elif phase == "entries":
            text = f"running the script once: {done:,} trace entries"
        elif phase == "replays":
            text = (f"reading the trace for about {total} replays" if not done else
                    f"replay {done} of about {total}" if done <= total else
                    f"replay {done}, around the answer")
        else:
            text = f"checking the answer by running the script: {done}/{total}"
        spent = int(time.monotonic() - started)
        stream.write(f"\r\x1b[K{what}: {text}, {spent // 60}:{spent % 60:02d}")
        stream.flush()
    return show


def _search(args: argparse.Namespace, out: TextIO, target: Callable[[], int],
            workspace: dict | bool) -> int:
    """estimate --bisect / --sweep: the script run once at --capacity (the top of the
    search), its snapshot searched; exit 0 when it fits (--sweep: with some setting)."""
    from ..torchsim.search import fit_script, sweep_script

    sweep = args.sweep or args.sweep_conf is not None
    if sweep and args.alloc_conf:
        print("ascend-memsim estimate: --sweep tries its own settings; give yours with "
              "--sweep-conf 'A;B;...', not --alloc-conf", file=sys.stderr)
        return USAGE_ERROR
    progress = search_progress(args)
    common = dict(product=args.product, cann=args.cann, step=args.step, top=args.capacity,
                  window=args.window, item_value=args.item_value, workspace=workspace,
                  runtime_share=args.runtime_share,
                  task_queue=args.task_queue, progress=progress)
    try:
        if sweep:
            candidates = None if args.sweep_conf is None else args.sweep_conf.split(";")
            found = sweep_script(target, candidates=candidates, **common)
        else:
            found = fit_script(target, alloc_conf=args.alloc_conf, **common)
    finally:
        if progress is not None:     # the line goes before the answer is printed
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()
    if args.snapshot and found.traced.snapshot is not None:
        with open(args.snapshot, "wb") as f:
            pickle.dump(found.traced.snapshot, f)
        print(f"ascend-memsim: snapshot written to {args.snapshot}", file=sys.stderr)
    print_json(found.as_dict(), out) if args.json else print(found, file=out)
    return 0 if found.fits else 1
