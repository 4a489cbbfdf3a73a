"""The study command: every snapshot x product x capacity x setting answered in one table."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
import warnings
from collections.abc import Iterator
from typing import Any, TextIO

from ..plan.grid import Grid, read_grid
from ..plan.study import CacheWarning, StudyProgress, study
from .common import print_json

__all__ = ["cmd_study", "default_cache", "progress_printer", "cache_warnings_printed"]


def default_cache() -> str:
    """DECISION: answers are kept where other tools keep theirs, so that running a study
    again resumes it: ``$XDG_CACHE_HOME/ascend-memsim/study``, else
    ``~/.cache/ascend-memsim/study`` (``--cache DIR`` elsewhere, ``--no-cache`` not at all)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "ascend-memsim", "study")


def progress_printer(stream: Any = None) -> StudyProgress:
    """Progress on ``stream`` (stderr): a bar redrawn in place on a terminal, else one
    plain line per task."""
    stream = stream or sys.stderr
    tty = getattr(stream, "isatty", lambda: False)()
    started = time.monotonic()

    def show(done: int, total: int, what: str) -> None:
        if tty:
            width = 30
            filled = width * done // total if total else width
            spent = int(time.monotonic() - started)
            stream.write(f"\rstudy [{'#' * filled}{'.' * (width - filled)}] {done}/{total} "
                         f"cells {spent // 60}:{spent % 60:02d}")
            if done >= total:
                stream.write("\n")
        elif what == "cache":
            if done:
                stream.write(f"study: {done} of {total} cells from the cache\n")
        else:
            stream.write(f"study: {done}/{total} cells: {what}\n")
        stream.flush()

    return show


@contextlib.contextmanager
def cache_warnings_printed(stream: Any = None, command: str = "study") -> Iterator[None]:
    """While in the block, each :class:`CacheWarning` is printed on ``stream`` (stderr) as it
    comes, ``ascend-memsim COMMAND: warning: ...``, every one of them (Python's filters would
    show a message once); other warnings are shown as Python shows them."""
    stream = stream or sys.stderr
    with warnings.catch_warnings():
        warnings.simplefilter("always", CacheWarning)
        shown = warnings.showwarning

        def show(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                 file: TextIO | None = None, line: str | None = None) -> None:
            if issubclass(category, CacheWarning):
                print(f"ascend-memsim {command}: warning: {message}", file=stream)
            else:
                shown(message, category, filename, lineno, file, line)

        warnings.showwarning = show
        yield


def cmd_study(args: argparse.Namespace, out: TextIO) -> int:
    grid = read_grid(args.grid) if args.grid else Grid(snapshots=[])
    if args.snapshots:
        grid.snapshots = args.snapshots
    if not grid.snapshots:
        print("ascend-memsim study: error: no snapshots: give --snapshots A.pickle ... or a "
              "grid file naming them", file=sys.stderr)
        return 2
    for option, name in (("products", "products"), ("capacities", "capacities"),
                         ("settings", "settings"), ("cann", "cann"), ("step", "step"),
                         ("window", "window")):
        value = getattr(args, option)
        if value is not None:
            if option == "capacities":
                value = [v for v in value.split(",") if v.strip()]
            setattr(grid, name, value)
    cache = None if args.no_cache else (args.cache or default_cache())
    shown = None if args.quiet else progress_printer()
    try:
        with cache_warnings_printed():
            found = study(grid, jobs=args.jobs, executor=args.executor,
                          scheduler=args.scheduler, cache=cache, progress=shown)
    except KeyboardInterrupt:
        where = (f"the answers so far are kept in {cache}: run the same command again to "
                 f"resume" if cache else "nothing was kept (--no-cache)")
        print(f"\nascend-memsim study: interrupted; {where}", file=sys.stderr)
        return 130
    if args.json:
        print_json(found.as_dict(), out)
    elif args.csv:
        out.write(found.to_csv())
    else:
        print(found, file=out)
    return 0 if found.fits else 1
