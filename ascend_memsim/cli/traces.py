"""The commands that read a trace: replay, plot, map, stats, export."""

from __future__ import annotations

import argparse
import os
import pickle
import sys
from typing import TextIO

from ..allocators.conf import alloc_conf_from_env
from ..memory.errors import InvalidArgument
from ..memory.units import format_bytes
from ..observe.allocmap import AllocatorPictures, allocator_map, read_snapshot_file
from ..observe.closeup import closeup_of
from ..observe.pictures import save_picture
from ..observe.replay import replay, shown_frame, smallest_capacity, tty_progress
from ..observe.sharedmap import SharingView
from ..observe.snapshot import PICKLE_PROTOCOL, to_memory_viz
from ..observe.stats import MemoryStats
from ..observe.stream import open_trace
from ..observe.tensor_replay import replay_tensors
from ..observe.trace import rmm_csv_lines
from ..observe.viz import MapSnapshot, text_map
from .common import print_json

__all__ = ["cmd_replay", "cmd_plot", "cmd_map", "cmd_stats", "cmd_export"]


def _open(path: str):
    """The trace at ``path`` opened as a stream (read again by each replay)."""
    return open_trace(path)


def _warn(trace) -> None:
    """The trace's problems (lines left out) as warnings on stderr, at most 20 lines."""
    for problem in trace.problems[:20]:
        print(f"warning: {problem}", file=sys.stderr)
    if len(trace.problems) > 20:
        print(f"warning: ... and {len(trace.problems) - 20} more problems", file=sys.stderr)


def _progress(args: argparse.Namespace, label: str = "replay"):
    return None if getattr(args, "quiet", False) else tty_progress(label=label)


def cmd_replay(args: argparse.Namespace, out: TextIO) -> int:
    if getattr(args, "allocator", None):
        return _replay_allocator(args, out)
    if args.sweep or args.sweep_conf is not None:
        print("ascend-memsim: --sweep tries settings of torch_npu's caching allocator: give "
              "--allocator torch-npu", file=sys.stderr)
        return 2
    if getattr(args, "plot", None):
        raise InvalidArgument("--plot draws the caching allocator's replay: give --allocator "
                              "torch-npu too (ascend-memsim plot TRACE draws the device's)")
    trace = _open(args.trace)
    progress = _progress(args)
    if args.bisect:
        step = args.step
        result = smallest_capacity(trace, args.product, step=step, policy=args.policy,
                                   progress=progress)
        if progress is not None:
            sys.stderr.write("\n")
        _warn(trace)
        print_json(result, out) if args.json else print(result, file=out)
        return 0 if result.capacity is not None else 1
    result = replay(trace, args.product, capacity=args.capacity, policy=args.policy,
                    api=args.api, progress=progress)
    _warn(trace)
    print_json(result, out) if args.json else print(result, file=out)
    return 0 if result.fits else 1


def _moment(first_pass, args: argparse.Namespace) -> tuple[int, str]:
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
    events = first_pass.total
    if at == "end":
        return events - 1, "at the end"
    index = _event_number(at)
    if not 0 <= index < events:
        raise InvalidArgument(f"--at {index} is not an event number of {first_pass.name}: it "
                              f"has {events} events (0 to {events - 1})")
    return index, f"after event {index}"


def _event_number(at: str) -> int:
    try:
        return int(at)
    except ValueError:
        raise InvalidArgument(f"--at must be failure, peak, end or an event number, "
                              f"got {at!r}") from None


def _replay_allocator(args: argparse.Namespace, out: TextIO) -> int:
    """replay --allocator torch-npu: every tensor through the caching allocator; with
    --bisect the capacity it needs, with --sweep that of each setting. --capacity is the top
    of the search range for both (default: the product's own memory)."""
    from ..observe.fit import fit_capacity, sweep_settings

    extra = {"cann": args.cann} if args.cann else {}
    sweep = args.sweep or args.sweep_conf is not None
    if args.alloc_conf is None:
        args.alloc_conf = "" if sweep else _alloc_conf_from_env()
    if getattr(args, "plot", None) and (sweep or args.bisect):
        raise InvalidArgument("--plot draws one replay: give a --capacity instead of "
                              "--bisect or --sweep")
    if not (sweep or args.bisect):
        return _replay_allocator_once(args, out, extra)
    shown = _progress(args, "search")
    progress = None if shown is None else (lambda runs, _capacity: shown(runs + 1, 0))
    limits = dict(step=args.step, top=args.capacity, window=args.window, progress=progress,
                  **extra)
    if sweep:
        if args.alloc_conf:
            print("ascend-memsim: --sweep tries its own settings; give yours with "
                  "--sweep-conf 'A;B;...', not --alloc-conf", file=sys.stderr)
            return 2
        candidates = None if args.sweep_conf is None else args.sweep_conf.split(";")
        found = sweep_settings(args.trace, args.product, candidates=candidates, **limits)
    else:
        found = fit_capacity(args.trace, args.product, alloc_conf=args.alloc_conf, **limits)
    if shown is not None:
        sys.stderr.write("\n")
    print_json(found.as_dict(), out) if args.json else print(found, file=out)
    fits = found.best is not None if sweep else found.fits
    return 0 if fits else 1


def _alloc_conf_from_env() -> str:
    """No --alloc-conf: the settings torch_npu would take from this environment
    (PYTORCH_NPU_ALLOC_CONF, else PYTORCH_ALLOC_CONF; both set is torch_npu's error), said
    on stderr when there are any."""
    name, text = alloc_conf_from_env()
    if name is not None:
        print(f"ascend-memsim: allocator settings from {name}={text!r}, as torch_npu reads "
              f"them (--alloc-conf overrides)", file=sys.stderr)
    return text


def _replay_allocator_once(args: argparse.Namespace, out: TextIO, extra: dict) -> int:
    """One replay through the caching allocator, drawn with --plot."""
    pictures = None
    if getattr(args, "plot", None):
        _picture_path(args.plot)
        pictures = AllocatorPictures()
    result = replay_tensors(args.trace, args.product, capacity=args.capacity,
                            alloc_conf=args.alloc_conf, observer=pictures, **extra)
    print_json(result.as_dict(), out) if args.json else print(result, file=out)
    if pictures is not None:
        pictures.finish(result.capacity)
        title = (f"{os.path.basename(args.trace)} through torch_npu's caching allocator "
                 f"({result.alloc_conf or 'default conf'}) on {result.product} with "
                 f"{format_bytes(result.capacity)}")
        save_picture(args.plot, timeline=pictures.timeline, maps=pictures.maps(), title=title,
                     text=str(result))
        # on stderr: stdout holds the result (one JSON document with --json)
        print(f"{args.plot} written", file=sys.stderr)
    return 0 if result.fits else 1


def _picture_path(path: str) -> None:
    """A bad picture extension is told before the trace is read."""
    if not path.lower().endswith((".svg", ".html", ".htm", ".png")):
        raise InvalidArgument(f"{path!r}: the picture format comes from the extension: .svg, "
                              f".html or .png")


def _replay_for_picture(args: argparse.Namespace, out: TextIO):
    """Two passes over the trace: the whole replay (with its timeline), then a replay up to
    the moment drawn, kept for the map. Memory O(live blocks + timeline points)."""
    if args.at not in ("failure", "peak", "end"):
        _event_number(args.at)   # a bad --at is told before the trace is read
    trace = _open(args.trace)
    first = replay(trace, args.product, capacity=args.capacity, policy=args.policy,
                   timeline=True, progress=_progress(args, "replay 1 of 2:"))
    _warn(trace)
    index, moment = _moment(first, args)
    sharing = SharingView()   # pools' blocks in their granules, imports
    second = replay(trace, args.product, capacity=args.capacity, policy=args.policy,
                    stop_after=index, keep_runtime=True, observers=[sharing],
                    progress=_progress(args, "replay 2 of 2:"))
    device_id = second.last_device if index >= 0 else 0
    try:
        snapshot = MapSnapshot.of(second.runtime.device(device_id),
                                  f"{second.product} device {device_id}, {moment}",
                                  sharing=sharing)
    finally:
        second.runtime.close()
    return trace, first, snapshot


def cmd_plot(args: argparse.Namespace, out: TextIO) -> int:
    if args.player:
        if args.zoom is not None:
            raise InvalidArgument("--zoom draws a close-up in a picture; the player draws "
                                  "one of the block you click")
        return _player(args, out)
    trace, result, snapshot = _replay_for_picture(args, out)
    closeups = [] if args.zoom is None else [closeup_of(
        _open(args.trace), args.zoom, args.product, capacity=args.capacity,
        policy=args.policy)]
    path = args.output or os.path.splitext(os.path.basename(args.trace))[0] + ".html"
    title = f"{os.path.basename(args.trace)} on {result.product}"
    segments = _snapshot_segments(trace, args.trace) if args.what != "timeline" else None
    maps = [] if segments is None else [segments]
    save_picture(path, snapshot=None if args.what == "timeline" else snapshot,
                 timeline=None if args.what == "map" else result.timeline, title=title,
                 text=str(result), color_by=args.color_by, maps=maps, closeups=closeups)
    timeline = result.timeline
    sampled = (f"; the timeline keeps the highest point of each {timeline.bucket:,} events"
               if timeline is not None and timeline.bucket > 1 and args.what != "map" else "")
    print(f"{path} written ({'fits' if result.fits else 'a malloc failed'}; "
          f"peak {format_bytes(result.peak_bytes)}{sampled})", file=out)
    return 0


def _snapshot_segments(trace, path: str):
    """The caching allocator's segments and their blocks in a snapshot file when it was
    taken, as a map; None for any other trace, or the project's own memory_viz export (one
    segment per device block, no allocator)."""
    if trace.kind != "snapshot":
        return None
    segments = read_snapshot_file(path)
    if segments is None or not segments.get("segments") or "memsim" in segments:
        return None
    return allocator_map(segments, title="caching allocator's segments in the snapshot (when "
                         "it was taken)")


def _player(args: argparse.Namespace, out: TextIO) -> int:
    from ..observe.player import products_for, save_player

    path = args.output or os.path.splitext(os.path.basename(args.trace))[0] + ".html"
    if not path.lower().endswith((".html", ".htm")):
        raise InvalidArgument(f"--player writes an HTML page: give -o NAME.html, not {path!r}")
    trace = _open(args.trace)
    written = save_player(path, trace, products_for(args.product or trace.header.get("product")),
                          capacity=args.capacity, policy=args.policy,
                          allocator=_snapshot_segments(trace, args.trace))
    _warn(trace)
    print(f"{path} written: the trace player, {written['summary']}; open it in a browser",
          file=out)
    return 0


def cmd_map(args: argparse.Namespace, out: TextIO) -> int:
    _, _, snapshot = _replay_for_picture(args, out)
    print(text_map(snapshot), file=out)
    return 0


def cmd_stats(args: argparse.Namespace, out: TextIO) -> int:
    trace = _open(args.trace)
    stats = MemoryStats()
    result = replay(trace, args.product, capacity=args.capacity, policy=args.policy,
                    observers=[stats], keep_runtime=True, progress=_progress(args))
    _warn(trace)
    # the figures at the end of the trace, before closing the runtime resets the devices
    devices = stats.device_ids() or [0]
    if args.json:
        print_json({"devices": {d: stats.snapshot(d) for d in devices}, "replay": result},
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
                      f"{'s' * (count != 1)}: {shown_frame(site)}", file=out)
    result.runtime.close()
    result.runtime = None
    return 0


def cmd_export(args: argparse.Namespace, out: TextIO) -> int:
    """Write a trace as a memory_viz snapshot pickle or an RMM CSV log, reading the trace as
    a stream: the RMM log is written as the trace is read (memory O(1) in its length); the
    snapshot is one pickled object, built whole (memory O(events), or O(live blocks +
    N) with ``--max-entries N``)."""
    trace = _open(args.trace)
    counted = _Counted(trace.records(_progress(args, "reading")))
    suffix = ".pickle" if args.format == "memory-viz" else ".csv"
    path = args.output or os.path.splitext(os.path.basename(args.trace))[0] + suffix
    if args.format == "memory-viz":
        # built before the file is opened: a bad trace leaves no half-written file
        snapshot = to_memory_viz(counted, trace.header,
                                 max_entries=getattr(args, "max_entries", None))
        _warn(trace)
        with open(path, "wb") as f:
            pickle.dump(snapshot, f, protocol=PICKLE_PROTOCOL)
    else:
        lines = rmm_csv_lines(counted, args.device, trace.name)
        with open(path, "w", encoding="utf-8", newline="") as f:
            try:
                f.writelines(lines)
            except BaseException:
                _remove_partial(path)
                raise
        _warn(trace)
    print(f"{path} written ({args.format}, {counted.count} events)", file=out)
    return 0


class _Counted:
    """An iterator that counts what passes through it."""

    def __init__(self, items) -> None:
        self.items = iter(items)
        self.count = 0

    def __iter__(self) -> _Counted:
        return self

    def __next__(self):
        item = next(self.items)
        self.count += 1
        return item


def _remove_partial(path: str) -> None:
    """Remove the half-written regular file ``path`` (never a device such as /dev/null)."""
    try:
        if os.path.isfile(path):
            os.remove(path)
    except OSError:
        pass
