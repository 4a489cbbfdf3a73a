"""The plan command: the largest micro-batch (or any knob memory grows with) that fits, and
the layout that fits best, from estimates of the script (:func:`~ascend_memsim.plan.job.
plan_job`)."""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any, TextIO

from ..plan.job import JobProgress, plan_job
from ..plan.job_plot import plot_plan, plot_problem
from .common import USAGE_ERROR, print_json
from .study import cache_warnings_printed

__all__ = ["cmd_plan", "default_cache", "plan_progress", "parse_margin"]


def default_cache() -> str:
    """Where a plan keeps its answers unless told: ``$XDG_CACHE_HOME/ascend-memsim/plan``,
    else ``~/.cache/ascend-memsim/plan`` (as the study keeps its own), so that running a
    plan again resumes it."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "ascend-memsim", "plan")


def parse_margin(text: str) -> float:
    """``--margin``: a percentage of the card, ``5`` or ``5%``, as a fraction.

    >>> parse_margin("5"), parse_margin("12.5%")
    (0.05, 0.125)

    Raises:
        ValueError: not a number from 0 to 50.
    """
    number = text.strip().removesuffix("%")
    try:
        if not number.isascii():
            raise ValueError
        value = float(number)
    except ValueError:
        raise ValueError(f"--margin {text[:40]!r}: a percentage of the card, e.g. 5") from None
    if not 0 <= value <= 50:
        raise ValueError(f"--margin {text[:40]!r}: from 0 to 50 (percent of the card)")
    return value / 100


def plan_progress(args: argparse.Namespace, stream: Any = None) -> JobProgress | None:
    """A progress line redrawn on ``stream`` (stderr) while the plan runs: estimates run,
    cells from the cache, cells running, the best configuration seen to fit so far and the
    time spent. None (silent) when the stream is not a terminal, or with ``--quiet`` or
    ``--json``, as ``estimate --bisect`` draws its own."""
    stream = stream or sys.stderr
    if args.quiet or args.json or not getattr(stream, "isatty", lambda: False)():
        return None
    started = time.monotonic()

    def show(runs: int, cached: int, running: int, best: str) -> None:
        spent = int(time.monotonic() - started)
        stream.write(f"\r\x1b[Kplan: {runs} run, {cached} cached, {running} running"
                     + (f"; best so far {best}" if best else "")
                     + f", {spent // 60}:{spent % 60:02d}")
        stream.flush()

    return show


def cmd_plan(args: argparse.Namespace, out: TextIO) -> int:
    """Run the plan; print the table (or ``--json``); exit 0 when a configuration fits
    (one is recommended), 1 when none does, 2 for bad usage, 130 when interrupted (the
    answers so far kept in the cache)."""
    command = list(args.job)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        print("ascend-memsim plan: error: nothing to run: ascend-memsim plan [options] -- "
              "SCRIPT.py --micro-batch {micro_batch} (see --help)", file=sys.stderr)
        return USAGE_ERROR
    if args.plot:
        problem = plot_problem(args.plot, args.vary)
        if problem:
            print(f"ascend-memsim plan: error: {problem}", file=sys.stderr)
            return USAGE_ERROR
    cache = None if args.no_cache else (args.cache or default_cache())
    progress = plan_progress(args)
    try:
        with cache_warnings_printed(command="plan"):
            found = plan_job(
                command, vary=args.vary, grid=args.grid or (), env=args.env or (),
                keys=[tuple(k) for k in args.set or ()], product=args.product,
                capacity=args.capacity, world_size=args.world_size,
                alloc_conf=args.alloc_conf, hccl_buffsize=args.hccl_buffsize,
                estimate_args=args.estimate_args or "", inputs=args.input or (),
                margin=parse_margin(args.margin), batch=args.batch, seq=args.seq,
                cards=args.cards, jobs=args.jobs, executor=args.executor,
                scheduler=args.scheduler, cache=cache, timeout=args.timeout,
                progress=progress, cold=args.cold_start)
    except KeyboardInterrupt:
        where = (f"the answers so far are kept in {cache}: run the same command again to "
                 f"resume" if cache else "nothing was kept (--no-cache)")
        print(f"\nascend-memsim plan: interrupted; {where}", file=sys.stderr)
        return 130
    finally:
        if progress is not None:    # the line goes before the answer is printed
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()
    if args.json:
        print_json(found.as_dict(), out)
    else:
        print(found, file=out)
    if args.plot:
        plot_plan(args.plot, found)
        print(f"ascend-memsim: picture written to {args.plot}", file=sys.stderr)
    return 0 if found.fits else 1
