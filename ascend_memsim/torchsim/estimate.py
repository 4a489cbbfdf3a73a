"""``estimate()``: run a torch_npu training script (or a function) on fake tensors, every NPU
storage through torch_npu's simulated caching allocator, and say whether it fits."""

from __future__ import annotations

import contextlib
import gc
import math
import os
import runpy
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ..allocators.releases import NEWEST
from ..allocators.stats import ALLOCATED_BYTES, RESERVED_BYTES
from ..allocators.stats import format_size as format_bytes
from ..memory.errors import InvalidArgument, InvalidArgumentType
from ..memory.profiles import DEFAULT_PRODUCT, get_profile
from . import process
from .limits import DEFAULT_ITEM_VALUE, EstimateStopped
from .runtime_share import runtime_share as share_of
from .session import CATEGORIES, Session
from .stacks.process_state import forget as forget_process_state
from .standin import install_torch_npu, uninstall_torch_npu
from .workspace_table import WorkspaceTable

__all__ = ["estimate", "EstimateResult", "NOT_COUNTED", "settings_line"]

#: device memory a real job takes that the estimate does not model (said in every summary)
NOT_COUNTED = (
    "HCCL communication buffers",
    "the CANN runtime's context, streams and operator binaries",
)
#: NOT_COUNTED's entry that the runtime's share (runtime_share) counts when it is not 0
_RUNTIME_CONTEXT = NOT_COUNTED[1]


@dataclass
class EstimateResult:
    """What an estimate found; ``str()`` is the one-screen summary, :meth:`as_dict` the
    JSON."""

    source: str
    product: str
    #: the simulated device's memory (aclrtGetMemInfo's total)
    capacity: int
    alloc_conf: str
    #: the script's exit status (1 when it raised)
    status: int = 0
    peak_allocated: int = 0
    peak_reserved: int = 0
    allocated_at_end: int = 0
    reserved_at_end: int = 0
    #: allocated bytes by what they hold, when allocated bytes were at their peak
    at_peak: dict[str, int] = field(default_factory=dict)
    #: the first allocation the device could not serve: message, size, frames
    out_of_memory: dict | None = None
    #: a data-dependent operator stopped the script: the message
    stopped: str | None = None
    #: TASK_QUEUE_ENABLE: where operators' workspaces come from (2: NPUWorkspaceAllocator)
    task_queue: int = 1
    #: the workspace's peak: NPUWorkspaceAllocator's reserved bytes (task_queue 2), or the
    #: largest workspace block taken from the caching allocator (0, 1)
    workspace_peak: int = 0
    #: operator calls that took a workspace, and the largest request
    workspace_calls: int = 0
    workspace_largest_request: int = 0
    #: the peak of the device's bytes: caching allocator reserved + workspace allocator
    device_peak: int = 0
    #: calls of NPU operators outside the workspace table (each counted 0 bytes), by name
    uncovered: dict[str, int] = field(default_factory=dict)
    not_counted: tuple[str, ...] = NOT_COUNTED
    #: what ran otherwise than on the NPU (torch.compile ran eagerly)
    notes: list[str] = field(default_factory=list)
    #: the script's calls that see the device's memory ({"call", "filename", "line",
    #: "name"}): its allocations may depend on the capacity
    device_queries: list[dict] = field(default_factory=list)
    #: what reads of tensor values gave (None: the first stopped the script), how many the
    #: script made, and their first distinct lines ("file:line in name (.item())")
    item_value: float | None = DEFAULT_ITEM_VALUE
    values_read: int = 0
    value_sites: list[str] = field(default_factory=list)
    #: where the allocator settings and TASK_QUEUE_ENABLE came from ({"alloc_conf": ...,
    #: "task_queue": ...}: an option, the environment, the script, or the default)
    sources: dict[str, str] = field(default_factory=dict)
    #: the peak of pinned host memory (pin_memory() copies): the host's, not the device's
    host_pinned_peak: int = 0
    #: the torch_npu release line whose behaviours applied (--torch-npu; the newest known)
    torch_npu: str = NEWEST.version
    #: the runtime's own share of the device, taken before the script ran
    #: (:mod:`.runtime_share`), and where the figure comes from
    runtime_share: int = 0
    runtime_share_source: str = ""
    #: the training stack's settings that shaped the peak (micro-batch, recompute, ZeRO
    #: stage, ...: name -> value), as the stack's adaptation noted them (stacks/)
    stack_settings: dict[str, str] = field(default_factory=dict)
    #: the torch_npu-format snapshot (segments, blocks, device_traces), if asked for
    snapshot: dict | None = field(default=None, repr=False)

    @property
    def fits(self) -> bool:
        return self.out_of_memory is None and self.stopped is None and self.status == 0

    @property
    def margin(self) -> int:
        """The device's memory less the peak of its bytes (reserved + workspace) and the
        runtime's share."""
        return self.capacity - self.device_peak - self.runtime_share

    def not_counted_lines(self) -> list[str]:
        """What the estimate does not count, the operators outside the workspace table
        first (with their calls)."""
        lines = [line for line in self.not_counted
                 if not (self.runtime_share and line == _RUNTIME_CONTEXT)]
        if self.uncovered:
            calls = sorted(self.uncovered.items(), key=lambda kv: (-kv[1], kv[0]))
            names = ", ".join(f"{name} {n}" for name, n in calls[:8])
            more = f", ... {len(calls) - 8} more" if len(calls) > 8 else ""
            lines.insert(0, f"the workspace of operators outside the workspace table "
                            f"(counted 0): {sum(self.uncovered.values())} calls of "
                            f"{len(calls)} operators ({names}{more})")
        return lines

    def as_dict(self) -> dict:
        out = {k: v for k, v in self.__dict__.items() if k != "snapshot"}
        out["not_counted"] = self.not_counted_lines()
        out["fits"], out["margin"] = self.fits, self.margin
        return out

    def _from(self, setting: str) -> str:
        """" (from ...)" for a setting that is not torch_npu's default or the option's."""
        source = self.sources.get(setting, "default")
        return "" if source == "default" or source.startswith("--") else f" (from {source})"

    def __str__(self) -> str:
        def size(n: int) -> str:
            return f"{format_bytes(n):>12}"

        lines = [f"{self.source}: on {self.product} with {format_bytes(self.capacity)}, "
                 f"PYTORCH_NPU_ALLOC_CONF={self.alloc_conf or '(default)'}"
                 + self._from("alloc_conf") + f", torch_npu {self.torch_npu}",
                 f"  peak allocated {size(self.peak_allocated)}   (max_memory_allocated)",
                 f"  peak reserved  {size(self.peak_reserved)}   (max_memory_reserved)",
                 "  at the peak of allocated:"]
        lines += [f"    {name:28} {size(self.at_peak.get(name, 0))}" for name in CATEGORIES]
        if self.at_peak.get("workspace"):      # the peak is at an operator's workspace block
            lines.append(f"    {'workspace (of one operator)':28} "
                         f"{size(self.at_peak['workspace'])}")
        lines.append(f"  at the end: allocated {format_bytes(self.allocated_at_end)}, "
                     f"reserved {format_bytes(self.reserved_at_end)}")
        if self.task_queue == 2:
            lines.append(f"  workspace      {size(self.workspace_peak)}   (NPUWorkspaceAllocator, "
                         f"TASK_QUEUE_ENABLE=2{self._from('task_queue')}; "
                         f"{self.workspace_calls} calls, largest "
                         f"{format_bytes(self.workspace_largest_request)})")
        else:
            lines.append(f"  workspace      {size(self.workspace_peak)}   (largest block, in "
                         f"reserved: TASK_QUEUE_ENABLE={self.task_queue}"
                         f"{self._from('task_queue')}; "
                         f"{self.workspace_calls} calls)")
        lines.append(f"  device peak    {size(self.device_peak)}   (reserved + workspace)")
        if self.runtime_share:
            source = ("ESTIMATE, --runtime-share sets it"
                      if self.runtime_share_source.startswith("ESTIMATE")
                      else self.runtime_share_source)
            lines.append(f"  runtime share  {size(self.runtime_share)}   (the CANN runtime's "
                         f"context, taken before the script: {source})")
        if self.out_of_memory is not None:
            oom = self.out_of_memory
            # an operator's workspace is named, then the script's line that called it
            workspace = [f["name"] for f in oom["frames"] if f["filename"] == "<workspace>"]
            where = next((f for f in oom["frames"] if f["filename"] != "<workspace>"), None)
            lines.append("  verdict: DOES NOT FIT: " + oom["message"].split(" (", 1)[0]
                         + (f" for the {workspace[0]}" if workspace else "")
                         + (f" at {where['filename']}:{where['line']} in {where['name']}"
                            if where else ""))
            lines.append(f"    {oom['message']}")
        elif self.stopped is not None:
            lines.append(f"  verdict: unknown, the script stopped: {self.stopped}")
        elif self.status:
            lines.append(f"  verdict: unknown, the script failed (exit status {self.status})")
        else:
            used = self.device_peak + self.runtime_share
            share = 100.0 * used / self.capacity if self.capacity else 0.0
            lines.append(f"  verdict: fits, {format_bytes(self.margin)} to spare (device "
                         f"peak{' and runtime share' if self.runtime_share else ''} "
                         f"{share:.1f}% of {format_bytes(self.capacity)})")
        if self.host_pinned_peak:
            lines.append(f"  pinned host memory {format_bytes(self.host_pinned_peak)} at its "
                         f"peak (pin_memory(): the host's memory, not the device's)")
        if self.values_read:
            lines.append(f"  values read: {self.values_read} reads of tensors without values "
                         f"gave {self.item_value:g} (--item-value): "
                         + ", ".join(self.value_sites)
                         + (", ..." if self.values_read > len(self.value_sites) else ""))
        if self.stack_settings:
            lines.append("  " + settings_line(self.stack_settings))
        lines.extend(f"  note: {note}" for note in self.notes)
        lines.append("  not counted: " + "; ".join(self.not_counted_lines()))
        return "\n".join(lines)


@contextlib.contextmanager
def _environment() -> Any:
    """ASCEND_MEMSIM_ESTIMATE=1 while the script runs (a script may leave a step out); what
    the script changes in ``os.environ`` ends with it, as it ends with its process (the next
    estimate in this process starts from the caller's environment)."""
    saved = dict(os.environ)
    os.environ["ASCEND_MEMSIM_ESTIMATE"] = "1"
    try:
        yield
    finally:
        if os.environ != saved:
            os.environ.clear()
            os.environ.update(saved)


@contextlib.contextmanager
def _collect_young() -> Any:
    """While the target runs: the objects alive before it are left out of the collector's
    passes, so that the collections which finalize what the target dropped (tensors in
    reference cycles, whose frees the figures count) walk only what it made, not all of
    torch's and the caller's heap (0.18 s a pass after importing torch, about 0.01 s
    without them). ``gc.freeze`` moves the older objects aside and ``gc.unfreeze`` gives them
    back, as they were. A process that froze objects itself keeps its own freeze: nothing
    is changed then."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _run_path(path: str, argv: list[str]) -> int:
    saved = sys.argv, list(sys.path)
    sys.argv = [path, *argv]
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    try:
        runpy.run_path(path, run_name="__main__")
    finally:
        sys.argv, sys.path[:] = saved[0], saved[1]
    return 0


def estimate(target: str | Callable[[], Any], argv: list[str] | tuple = (), *,
             product: str = DEFAULT_PRODUCT, capacity: int | None = None,
             alloc_conf: str | None = None, cann: str | None = None,
             snapshot: bool = False, workspace: Mapping[str, Any] | bool | None = None,
             task_queue: int | None = None, item_value: float | None = DEFAULT_ITEM_VALUE,
             max_entries: int | None = None, torch_npu: str | None = None,
             runtime_share: int | None = None) -> EstimateResult:
    """Run ``target`` (a script's path, run as ``__main__`` with ``argv``, or a function
    called with no arguments, whose return value, if an int, is its exit status) with fake
    tensors on a simulated NPU: ``product`` with
    ``capacity`` bytes (default: the product's own), torch_npu's caching allocator under
    ``alloc_conf`` (``PYTORCH_NPU_ALLOC_CONF``; None: as the script's environment has it at
    its first NPU allocation, see :mod:`.environment`, as ``task_queue``). ``snapshot``
    keeps the torch_npu-format snapshot (with every trace entry) in the result. Each
    operator takes the workspace of :mod:`.workspace_table`, ``workspace`` overriding it
    (operator name -> bytes per call, ``"*"`` for the operators outside the table; False:
    no workspace at all), from the
    caching allocator or, with ``task_queue`` 2 (``TASK_QUEUE_ENABLE``), from torch_npu's
    NPUWorkspaceAllocator. ``item_value``: what ``.item()``, ``float(t)``, ``.tolist()``,
    ``.numpy()`` and the like of a tensor without values give (in the tensor's kind; 0 by
    default, see :mod:`.limits`); None stops the script at the first such read. The result
    counts the reads (``values_read``, ``value_sites``). ``max_entries``: the snapshot
    keeps the last so many trace entries (a ring buffer, as torch's
    ``_record_memory_history(max_entries=...)``; default all, as torch's): each costs about
    300 bytes of host memory, its frames shared with every entry made at the same stack.
    ``torch_npu``: the release whose allocator behaviours apply ("2.6", "2.9.0": the
    settings it knows, what ``set_per_process_memory_fraction(1.0)`` does, whether
    ``PYTORCH_ALLOC_CONF`` is read; see ``ascend_memsim/allocators/releases.py``), the
    newest by default. ``runtime_share``: the bytes the CANN runtime holds on the device
    before the first tensor (its context, streams, operator binaries), taken from the
    device before the script runs, as :func:`~.ranks.estimate_ranks` takes it on each rank
    (default: the product's ESTIMATE, :mod:`.runtime_share`; 0 leaves it out).

    The target sees ``import torch_npu``, ``torch.device("npu")``, ``.npu()`` and
    ``torch_npu.npu.*`` answered by the simulated device; its own ``max_memory_reserved()``
    is the simulated figure. An allocation the device cannot serve raises torch's
    ``OutOfMemoryError`` with torch_npu's message in the target, at the line that asked;
    an operator that needs tensor values stops it with :class:`DataDependentOperation`, ACL
    graph capture with :class:`~.limits.UnsupportedFeature`. Each is recorded in the result
    (``status`` 1), not raised; any other exception of the target is raised. What ran
    otherwise than on the NPU (``torch.compile``, eagerly) is in ``notes``.

    Raises:
        InvalidArgument: an unknown product, a bad capacity, ``item_value`` or
            ``max_entries``.
        AllocatorConfigError: an ``alloc_conf`` torch_npu refuses.
        WorkspaceTableError: ``workspace`` is not operator names and sizes.
        ValueError: ``task_queue`` is not 0, 1 or 2, ``torch_npu`` a release the model
            does not know, or ``runtime_share`` negative.
        RuntimeError: another estimate is running, or the real torch_npu is imported.
    """
    check_item_value(item_value)
    if max_entries is not None and (max_entries.__class__ is not int or max_entries < 1):
        raise InvalidArgument(f"max_entries must be a positive int, not {max_entries!r}")
    table = workspace_table(workspace, product)
    share, share_source = share_of(get_profile(product).name, runtime_share)
    session = Session(product, capacity, alloc_conf, cann=cann, history=snapshot,
                      workspace=table, task_queue=task_queue, item_value=item_value,
                      torch_npu=torch_npu)
    if snapshot and max_entries is not None:
        session.start_history(max_entries)
    table.product = session.product
    name = target if isinstance(target, str) else getattr(target, "__name__", repr(target))
    result = EstimateResult(str(name), session.product, session.capacity, session.alloc_conf)
    result.runtime_share, result.runtime_share_source = share, share_source
    # a run is a process of its own on the machine: no library state from an earlier run
    forget_process_state()
    previous = install_torch_npu()
    try:
        with _environment(), _collect_young(), session:
            try:
                session.take_runtime_share(result.runtime_share)
                result.status = run_target(target, argv)
            except (torch.OutOfMemoryError, EstimateStopped):
                result.status = 1
            gc.collect()
        fill_result(result, session)
        if snapshot:
            result.snapshot = session.snapshot()
    finally:
        uninstall_torch_npu(previous)
        session.close()
    return result


def run_target(target: str | Callable[[], Any], argv: Sequence[str]) -> int:
    """Run ``target``: a script's path as ``__main__`` with ``argv``, or a function called
    with no arguments; its exit status (a function's int return value, else 0; how the
    process ends, ``sys.exit``, ``os._exit`` and ``atexit`` included: :mod:`.process`)."""
    if isinstance(target, str):
        path = target
        return process.run(lambda: _run_path(path, list(argv)))

    def call() -> int:
        status = target()
        return status if type(status) is int else 0

    return process.run(call)


def settings_line(settings: Mapping[str, str]) -> str:
    """The summary's line of a training stack's settings: "settings: name value; ..."."""
    return "settings: " + "; ".join(f"{name} {value}" for name, value in settings.items())


def workspace_table(workspace: Mapping[str, Any] | bool | None,
                    product: str) -> WorkspaceTable:
    """The table of :func:`estimate`'s ``workspace`` argument.

    Raises:
        WorkspaceTableError: ``workspace`` is not operator names and sizes.
    """
    if workspace is False:
        return WorkspaceTable(enabled=False)
    return WorkspaceTable(None if workspace is True else workspace, product=product)


def check_item_value(item_value: object) -> None:
    """``item_value`` is a finite number or None.

    Raises:
        InvalidArgumentType: not a number (a bool is not one).
        InvalidArgument: not finite.
    """
    if item_value is None:
        return
    if isinstance(item_value, bool) or not isinstance(item_value, (int, float)):
        raise InvalidArgumentType(f"item_value must be a number, not "
                                  f"{type(item_value).__name__}")
    if not math.isfinite(item_value):
        raise InvalidArgument(f"item_value must be finite, got {item_value}")


def fill_result(result: EstimateResult, session: Session) -> None:
    """Put the figures of ``session``, whose script has ended, into ``result``."""
    stats = session.allocator.stats
    # the whole run's peaks, which the script's reset_peak_memory_stats does not move
    allocated, reserved = session.peaks_before_reset
    result.peak_allocated = max(allocated, stats.peak(ALLOCATED_BYTES))
    result.peak_reserved = max(reserved, stats.peak(RESERVED_BYTES))
    result.allocated_at_end = stats.current(ALLOCATED_BYTES)
    result.reserved_at_end = stats.current(RESERVED_BYTES)
    result.at_peak = dict(session.at_peak)
    result.out_of_memory = session.failure
    result.stopped = session.stopped
    result.notes = list(session.notes)
    result.device_queries = list(session.device_queries)
    values = session.values
    result.item_value, result.values_read = values.item_value, values.count
    result.value_sites = list(values.sites)
    result.host_pinned_peak = session.pinned.peak
    result.alloc_conf, result.task_queue = session.alloc_conf, session.task_queue
    result.sources = dict(session.startup.sources)
    result.torch_npu = session.release.version
    result.stack_settings = dict(session.stack_settings)
    _workspace_figures(result, session)
    if not session.workspace.enabled:
        result.not_counted = ("operator workspaces (switched off)", *result.not_counted)


def _workspace_figures(result: EstimateResult, session: Session) -> None:
    ws = session.allocator.workspace
    result.workspace_calls = session.workspace_calls
    result.workspace_largest_request = session.workspace_largest
    result.uncovered = dict(session.uncovered)
    if session.task_queue == 2:
        result.workspace_peak = ws.reserved_bytes.peak
        result.device_peak = max(session.device_peak, result.peak_reserved)
    else:
        result.workspace_peak = session.workspace_block
        result.device_peak = result.peak_reserved
