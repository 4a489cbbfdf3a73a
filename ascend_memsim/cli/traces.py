"""The commands that read a trace: replay, plot, map, stats, export."""

from __future__ import annotations

import argparse
import os
import pickle
import sys
from typing import TYPE_CHECKING, TextIO

from ..allocators.conf import alloc_conf_from_env
from ..memory.errors import InvalidArgument
from ..memory.units import format_bytes
from ..observe.allocmap import AllocatorPictures, allocator_map, read_snapshot_file
from ..observe.closeup import closeup_of
from ..observe.pictures import save_picture
from ..observe.replay import replay, shown_frame, smallest_capacity, tty_progress
from ..observe.sharedmap import SharingView
from ..observe.snapshot import PICKLE_PROTOCOL, tensor_entries, to_memory_viz
from ..observe.stats import MemoryStats
from ..observe.stream import TraceStream, open_trace
from ..observe.tensor_replay import load_source, nothing_replayed, replay_tensors
from ..observe.trace import from_snapshot, rmm_csv_lines
from ..observe.viz import MapSnapshot, check_cell, text_map
from .common import USAGE_ERROR, print_json

if TYPE_CHECKING:
    from ..plan.fit import FitSearch, Sweep

__all__ = ["cmd_replay", "cmd_plot", "cmd_map", "cmd_stats", "cmd_export"]


def _open(path: str):
    """The trace at ``path`` opened as a stream (read again by each replay)."""
    return open_trace(path)


def _warn(trace) -> None:
    """The problems of a trace (lines left out) or of a replay through the caching allocator
    as warnings on stderr, at most 20 lines."""
    for problem in trace.problems[:20]:
        print(f"warning: {problem}", file=sys.stderr)
    if len(trace.problems) > 20:
        print(f"warning: ... and {len(trace.problems) - 20} more problems", file=sys.stderr)


def _progress(args: argparse.Namespace, label: str = "replay"):
    return None if getattr(args, "quiet", False) else tty_progress(label=label)


def cmd_replay(args: argparse.Namespace, out: TextIO) -> int:
    if args.continue_after_oom and (args.bisect or args.sweep or args.sweep_conf is not None):
        raise InvalidArgument("--continue-after-oom replays on after a failure; a capacity "
                              "search counts any failure as not fitting: leave it out")
    if args.allocator == "none" and _allocator_only(args):
        return 2
    through_allocator, loaded, tensors = _replay_source(args)
    if through_allocator:
        return _replay_allocator(args, out, loaded)
    if _allocator_only(args):
        return 2
    trace = _device_source(args, loaded, tensors)
    # DECISION: a torch job ends at an out-of-memory error, so the replay of a snapshot's
    # segment calls does too; a program of this project's traces may go on after a failed
    # aclrtMalloc (its return code), so its trace replays on
    torch_job = trace.kind == "snapshot" and not args.continue_after_oom
    progress = _progress(args)
    if args.bisect:
        step = args.step
        bisection = smallest_capacity(trace, args.product, step=step, policy=args.policy,
                                      progress=progress)
        if progress is not None:
            sys.stderr.write("\n")
        _warn(trace)
        print_json(bisection, out) if args.json else print(bisection, file=out)
        return 0 if bisection.capacity is not None else 1
    result = replay(trace, args.product, capacity=args.capacity, policy=args.policy,
                    api=args.api, progress=progress, stop_at_failure=torch_job)
    _warn(trace)
    print_json(result, out) if args.json else print(result, file=out)
    failure = result.first_failure
    if failure is not None and trace.kind == "snapshot" and not args.json:
        if torch_job:
            print(f"  the replay ended at event {failure.index}, as torch ends a job at an "
                  f"out-of-memory error (--continue-after-oom replays on)", file=out)
        elif result.peak_index > failure.index:
            print(f"  not the job's: the peak (event {result.peak_index}) came after the "
                  f"first failure (event {failure.index}), which ends a torch job", file=out)
    return 0 if result.fits else 1


def _allocator_only(args: argparse.Namespace) -> bool:
    """Refuse (True, told on stderr) the options of a replay through the caching allocator
    in a replay of the device's calls."""
    if args.sweep or args.sweep_conf is not None:
        print("ascend-memsim: --sweep tries settings of torch_npu's caching allocator: give "
              "--allocator torch-npu", file=sys.stderr)
        return True
    if getattr(args, "plot", None):
        raise InvalidArgument("--plot draws the caching allocator's replay: give --allocator "
                              "torch-npu too (ascend-memsim plot TRACE draws the device's)")
    return False


def _replay_source(args: argparse.Namespace) -> tuple[bool, object, int]:
    """Whether the replay goes through the caching allocator, what it reads (the path, a
    snapshot dict or a trace stream: the file is read once) and the tensor allocations of
    a snapshot.

    DECISION: a torch snapshot with tensor-level entries (``alloc``) replays through
    torch_npu's caching allocator unless ``--allocator none``: its tensors are the job's
    requests, the segment calls only what one allocator made of them on one device; it is
    said on stderr. Any other file (a trace of this project, a snapshot of segments only,
    this project's export) replays the device's calls unless ``--allocator torch-npu``.
    """
    if args.allocator == "torch-npu":
        return True, args.trace, 0
    kind, data = load_source(args.trace)
    tensors = tensor_entries(data) if kind == "snapshot" else 0
    if args.allocator is None and tensors:
        print(f"note: {args.trace} holds {_tensors(tensors)}: "
              f"replayed through torch_npu's caching allocator (--allocator torch-npu); "
              f"--allocator none replays its segment calls on the device instead",
              file=sys.stderr)
        return True, data, tensors
    return False, data, tensors


def _tensors(n: int) -> str:
    return f"{n:,} tensor allocation{'s' * (n != 1)} (alloc entr{'ies' if n != 1 else 'y'})"


def _device_source(args: argparse.Namespace, data: object, tensors: int) -> TraceStream:
    """The file ``_replay_source`` read, as a trace of the device's calls; a snapshot with
    none of them is an error naming what it holds and the option that replays it."""
    if isinstance(data, TraceStream):
        return data     # a trace of this project, already open as a stream
    trace = TraceStream(args.trace, "snapshot", {}, whole=from_snapshot(data, args.trace))
    if not trace.events:
        _warn(trace)
        raise InvalidArgument(
            f"{args.trace}: nothing to replay at the device's level: no segment (segment_alloc,"
            f" segment_free, oom entry, or segment live in the snapshot)"
            + (f"; {len(trace.problems)} entries left out (warned about above)"
               if trace.problems else "")
            + (f"; it holds {_tensors(tensors)}: --allocator torch-npu replays them"
               if tensors else ""))
    if tensors:
        print(f"note: {args.trace} also holds {_tensors(tensors)}, which a replay of the "
              f"device's calls counts but does not replay; --allocator "
              f"torch-npu replays them through torch_npu's caching allocator", file=sys.stderr)
    return trace


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


def _replay_allocator(args: argparse.Namespace, out: TextIO, source: object) -> int:
    """replay --allocator torch-npu: every tensor of ``source`` (a path, or the snapshot
    read) through the caching allocator; with --bisect the capacity it needs, with --sweep
    that of each setting. --capacity is the top of the search range for both (default: the
    product's own memory)."""
    from ..plan.fit import fit_capacity, sweep_settings

    extra = {"cann": args.cann} if args.cann else {}
    sweep = args.sweep or args.sweep_conf is not None
    if args.alloc_conf is None:
        args.alloc_conf = "" if sweep else _alloc_conf_from_env()
    if getattr(args, "plot", None) and (sweep or args.bisect):
        raise InvalidArgument("--plot draws one replay: give a --capacity instead of "
                              "--bisect or --sweep")
    if not (sweep or args.bisect):
        return _replay_allocator_once(args, out, extra, source)
    shown = _progress(args, "search")
    progress = None if shown is None else (lambda runs, _capacity: shown(runs + 1, 0))
    limits = dict(step=args.step, top=args.capacity, window=args.window, progress=progress,
                  name=args.trace, jobs=args.jobs, **extra)
    found: Sweep | FitSearch
    if sweep:
        if args.alloc_conf:
            print("ascend-memsim: --sweep tries its own settings; give yours with "
                  "--sweep-conf 'A;B;...', not --alloc-conf", file=sys.stderr)
            return 2
        candidates = None if args.sweep_conf is None else args.sweep_conf.split(";")
        found = sweep_settings(source, args.product, candidates=candidates, **limits)
        fits = found.best is not None
    else:
        found = fit_capacity(source, args.product, alloc_conf=args.alloc_conf, **limits)
        fits = found.fits
    if shown is not None:
        sys.stderr.write("\n")
    print_json(found.as_dict(), out) if args.json else print(found, file=out)
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


def _replay_allocator_once(args: argparse.Namespace, out: TextIO, extra: dict,
                           source: object) -> int:
    """One replay through the caching allocator, drawn with --plot."""
    pictures = None
    if getattr(args, "plot", None):
        _picture_path(args.plot)
        pictures = AllocatorPictures()
    result = replay_tensors(source, args.product, capacity=args.capacity,
                            alloc_conf=args.alloc_conf, observer=pictures, name=args.trace,
                            stop_at_failure=not args.continue_after_oom, **extra)
    empty = nothing_replayed(result)
    if empty is not None:
        _warn(result)
        raise InvalidArgument(empty)
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
    assert second.runtime is not None  # keep_runtime
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
    if args.cell is not None:
        check_cell(args.cell)       # before the replay, which may take long
    _, _, snapshot = _replay_for_picture(args, out)
    print(text_map(snapshot, cell=args.cell), file=out)
    return 0


def cmd_stats(args: argparse.Namespace, out: TextIO) -> int:
    trace = _open(args.trace)
    stats = MemoryStats()
    result = replay(trace, args.product, capacity=args.capacity, policy=args.policy,
                    observers=[stats], keep_runtime=True, progress=_progress(args))
    _warn(trace)
    if result.total == 0 and trace.kind == "snapshot":
        # a snapshot with nothing to replay answers nothing ("the whole trace fits" of 0
        # events): an error, as replay's (_device_source)
        assert result.runtime is not None  # keep_runtime
        result.runtime.close()
        print(f"ascend-memsim stats: error: {args.trace}: nothing to replay: no event the "
              f"device's calls or the caching allocator's could take", file=sys.stderr)
        return USAGE_ERROR
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
    assert result.runtime is not None  # keep_runtime
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
