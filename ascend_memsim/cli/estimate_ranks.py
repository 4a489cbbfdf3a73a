"""``ascend-memsim estimate --world-size N`` with ``--sweep``, ``--bisect`` or ``--plot``:
the settings a distributed job fits with, the smallest card per rank class, the picture."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, TextIO

from .common import USAGE_ERROR, print_json

__all__ = ["search_ranks", "sweeping", "plot_problem", "plot"]


def plot_problem(path: str) -> str | None:
    """Why ``--plot path`` cannot be drawn (checked before the script runs), or None."""
    if not path.lower().endswith((".png", ".svg")):
        return f"--plot {path!r}: the picture is OUT.png or OUT.svg"
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return "--plot needs matplotlib: pip install 'ascend-memsim[plot]'"
    return None


def sweeping(args: argparse.Namespace) -> bool:
    """Whether the command line asks for a sweep (``--sweep`` or any list it sweeps)."""
    return bool(args.sweep or args.sweep_conf is not None or args.sweep_hccl
                or args.sweep_products or args.sweep_world_sizes)


def _numbers(text: str | None, label: str) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ValueError(f"{label} takes whole numbers separated by commas, got "
                         f"{text!r}") from None


def sweep_progress(args: argparse.Namespace, stream: Any = None) -> Any:
    """A progress line redrawn on ``stream`` (stderr) while a sweep runs: the phase, the
    script's runs and the replays done, the time spent. None (silent) when the stream is
    not a terminal, or with ``--quiet`` or ``--json``."""
    stream = stream or sys.stderr
    if args.quiet or args.json or not getattr(stream, "isatty", lambda: False)():
        return None
    started = time.monotonic()
    names = {"traced": "runs of the script", "replays": "replays", "check": "checking the best"}

    def show(phase: str, done: int, total: int) -> None:
        spent = int(time.monotonic() - started)
        counts = f" {done}/{total}" if phase != "check" else ""
        stream.write(f"\r\x1b[Ksweep: {names[phase]}{counts}, {spent // 60}:{spent % 60:02d}")
        stream.flush()
    return show


def search_ranks(args: argparse.Namespace, target: Any, options: dict,
                 out: TextIO) -> int:
    """Run :func:`~ascend_memsim.torchsim.ranks.search.sweep_ranks` or
    :func:`~ascend_memsim.torchsim.ranks.search.bisect_ranks`; print the table (or
    ``--json``), draw ``--plot``. Exit 0 when it fits (a sweep: some setting, checked by a
    run; a bisection: on the product's card), 1 otherwise."""
    from ..torchsim.ranks.search import bisect_ranks, sweep_ranks

    sweep = sweeping(args)
    if sweep and args.bisect:
        print("ascend-memsim estimate: --sweep or --bisect, not both", file=sys.stderr)
        return USAGE_ERROR
    if sweep and (args.alloc_conf or args.hccl_buffsize is not None):
        print("ascend-memsim estimate: --sweep tries its own settings: give yours with "
              "--sweep-conf 'A;B;...' and --sweep-hccl MB,MB, not --alloc-conf or "
              "--hccl-buffsize", file=sys.stderr)
        return USAGE_ERROR
    found: Any
    try:
        if sweep:
            lists: dict[str, Any] = {"candidates": None if args.sweep_conf is None
                     else args.sweep_conf.split(";"),
                     "products": args.sweep_products.split(",") if args.sweep_products
                     else None,
                     "world_sizes": _numbers(args.sweep_world_sizes, "--sweep-world-sizes")}
            hccl = _numbers(args.sweep_hccl, "--sweep-hccl")
            if hccl is not None:
                lists["hccl_buffsizes"] = hccl
            progress = sweep_progress(args)
            try:
                found = sweep_ranks(target, world_size=args.world_size, product=args.product,
                                    capacity=args.capacity, progress=progress,
                                    **lists, **options)
            finally:
                if progress is not None:     # the line goes before the table is printed
                    sys.stderr.write("\r\x1b[K")
        else:
            found = bisect_ranks(target, world_size=args.world_size, product=args.product,
                                 alloc_conf=args.alloc_conf, step=args.step,
                                 window=args.window, top=args.capacity,
                                 hccl_buffsize=args.hccl_buffsize, **options)
    except ValueError as e:
        print(f"ascend-memsim estimate: error: {e}", file=sys.stderr)
        return USAGE_ERROR
    if args.json:
        print_json(found.as_dict(), out)
    else:
        print(found, file=out)
    if args.plot:
        if sweep:
            picture, needs, title = found.checked, None, None
            if picture is None:
                print("ascend-memsim estimate: no setting fits: no picture", file=sys.stderr)
        else:
            picture, needs = _bisect_picture(found)
            title = None
        if picture is not None:
            plot(args.plot, picture, needs, title)
    return 0 if found.fits else 1


def _bisect_picture(found: Any) -> tuple[Any, list]:
    """The traced estimate with the product's card as its capacity, and each class's need."""
    from dataclasses import replace

    traced = found.traced
    classes = []
    for c in traced.classes:
        est = replace(c.figures.estimate, capacity=found.capacity, snapshot=None)
        classes.append(replace(c, figures=replace(c.figures, estimate=est)))
    return (replace(traced, capacity=found.capacity, classes=classes),
            [c.needs for c in found.classes])


def plot(path: str, result: Any, needs: list | None = None, title: str | None = None) -> None:
    """Draw a distributed estimate (:func:`~ascend_memsim.torchsim.ranks.plot.plot_ranks`)."""
    from ..torchsim.ranks.plot import plot_ranks

    plot_ranks(path, result, needs=needs, title=title)
    print(f"{path} written", file=sys.stderr)
