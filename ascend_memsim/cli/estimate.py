"""``ascend-memsim estimate``: a torch_npu training script on fake tensors through the
simulated caching allocator; will it fit?"""

from __future__ import annotations

import argparse
import os
import pickle
import sys
from typing import TextIO

from .common import USAGE_ERROR, print_json
from .run import _misplaced_options
from .script import run_script

__all__ = ["cmd_estimate"]


def cmd_estimate(args: argparse.Namespace, out: TextIO) -> int:
    """Run the script under :func:`ascend_memsim.torchsim.estimate`; print the summary (or
    ``--json``); exit 1 when it ran out of memory or failed, else 0.

    The script runs as ``run`` runs one (its exit, atexit handlers and module teardown
    inside the estimate, so the storages its globals hold are freed as in its process)."""
    script = args.script
    if not os.path.isfile(script):
        print(f"ascend-memsim estimate: no such script: {script}", file=sys.stderr)
        return USAGE_ERROR
    misplaced = _misplaced_options(args)
    if misplaced:
        print(misplaced, file=sys.stderr)
        return USAGE_ERROR
    try:
        from ..torchsim import estimate
    except ImportError as e:
        print(f"ascend-memsim estimate: error: estimate needs torch ({e}); install it, e.g. "
              f"pip install 'ascend-memsim[torch]'", file=sys.stderr)
        return USAGE_ERROR
    overrides = _workspace_overrides(args)
    if isinstance(overrides, str):
        print(f"ascend-memsim estimate: error: {overrides}", file=sys.stderr)
        return USAGE_ERROR
    argv = [script, *args.script_args, *getattr(args, "unchecked_args", [])]

    def target() -> int:
        return run_script(script, argv)

    target.__name__ = script
    if args.world_size is not None:
        return _estimate_ranks(args, target, overrides, out)
    from .estimate_ranks import sweeping

    if args.bisect or args.plot or sweeping(args):
        print("ascend-memsim estimate: --bisect, --sweep and --plot need --world-size N here "
              "(a one-card job: --world-size 1)", file=sys.stderr)
        return USAGE_ERROR
    result = estimate(target, product=args.product, capacity=args.capacity,
                      alloc_conf=args.alloc_conf, cann=args.cann,
                      snapshot=bool(args.snapshot),
                      workspace=False if args.no_workspace else overrides,
                      task_queue=args.task_queue)
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
                   task_queue=args.task_queue)
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
