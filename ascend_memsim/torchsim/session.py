"""One estimate's state: the simulated device and its caching allocator, the fake tensors,
and the tracker that turns every NPU storage into an allocation of the allocator.

Every operator the script runs goes through :class:`_Tracker` (a ``TorchDispatchMode``
above torch's ``FakeTensorMode``): each output on the ``npu`` device whose storage the tracker
has not seen is allocated through :meth:`NpuCachingAllocator.malloc` (size: the storage's
bytes, on the current stream); views and in-place results share a storage and cost nothing;
a weak reference on the storage frees the block when the storage dies, as torch frees it
when its last tensor goes (the approach of torch's
``torch.distributed._tools.mem_tracker.MemTracker``, which weakly references storages).
Then the operator takes its workspace (:meth:`Session.operator_workspace`, sizes from
:mod:`.workspace_table`) and gives it back, as torch_npu's ``EXEC_NPU_CMD`` does.

DECISION: torch's ``FakeTensorMode`` gives the tensors (shapes, dtypes, strides, autograd,
optimizers, no storage, no arithmetic), on the NPU and for the CPU tensors that are not
small (:mod:`.host`: small CPU tensors are real), so a model far larger than the host's
memory costs nothing when it is built on the CPU and moved; meta tensors behind a subclass
would have to reimplement the device propagation FakeTensorMode already does.
The changes to it are in :mod:`.fake` (:class:`~.fake.FakeMode`).

Size: past 600 lines because of :class:`Session` (see its own Size note); the tracker and the
session's few helpers are what is left beside it.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import weakref
from typing import Any

import torch
from torch._subclasses.fake_tensor import (
    DataDependentOutputException,
    DynamicOutputShapeException,
    unset_fake_temporarily,
)
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from .. import checks as _checks  # noqa: F401  (registers the checker and config keys)
from ..allocators import NpuCachingAllocator, NpuOutOfMemoryError
from ..allocators.releases import NEWEST, release
from ..allocators.stats import ALLOCATED_BYTES, RESERVED_BYTES
from ..memory.constants import MemAttr
from ..memory.errors import AclError
from ..memory.profiles import get_profile
from ..runtime.runtime import Runtime
from . import limits as _limits
from . import process as _process
from .backend import ensure_npu_backend
from .categories import ACTS, CATEGORIES, OPTIM, StorageCategories, wrapped
from .checkpoint import install as _install_checkpoints
from .environment import Startup
from .fake import FakeMode
from .fused import scaled_dot_product_attention as _npu_sdpa
from .host import PinnedMemory, runs_on_host
from .host import install as _install_host
from .limits import DataDependentOperation, EstimateStopped
from .runtime_share import take_runtime_share
from .stacks.deepspeed import install as _install_deepspeed
from .stacks.hf import install as _install_hf
from .stacks.megatron import install as _install_megatron
from .stacks.torchtitan import install as _install_torchtitan
from .storages import cuda_refusal
from .storages import install as _install_storages
from .torch_npu import npu as _npu
from .workspace_table import WorkspaceTable

__all__ = ["Session", "DataDependentOperation", "CATEGORIES", "user_frames"]


_SKIP = (os.path.dirname(torch.__file__) + os.sep,
         os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep, "<frozen ")
_MAX_FRAMES = 32

def user_frames(frame: Any, stop: Any = None, limit: int = _MAX_FRAMES) -> list[dict]:
    """The Python frames from ``frame`` outwards, up to (not including) ``stop``, that are
    outside torch and ascend_memsim, innermost first, as torch's snapshots write them
    ({"filename", "line", "name"}). O(stack depth)."""
    frames: list[dict[str, Any]] = []
    f = frame
    while f is not None and f is not stop and len(frames) < limit:
        name = f.f_code.co_filename
        if not name.startswith(_SKIP):
            frames.append({"filename": name, "line": f.f_lineno, "name": f.f_code.co_name})
        f = f.f_back
    return frames


class _Storage:
    """A tracked NPU storage: its block and what it holds."""

    __slots__ = ("ptr", "nbytes", "size", "category", "ref")

    def __init__(self, ptr: int, nbytes: int, size: int, category: str) -> None:
        self.ptr, self.nbytes, self.size, self.category = ptr, nbytes, size, category
        self.ref: weakref.ref | None = None


_SDPA = torch.ops.aten.scaled_dot_product_attention.default
_HEALTHY_KEPT = _limits.HEALTHY_KEPT


class _Tracker(TorchDispatchMode):
    """Runs each operator (on fake tensors) and allocates the new NPU storages it made.

    One operator at a time, whichever thread runs it (the script's threads, autograd's,
    a DataLoader's pinning thread): torch's FakeTensorMode keeps per-call state on itself
    (``in_kernel_invocation``), so two threads in it at once would corrupt it."""

    def __init__(self, session: Session) -> None:
        super().__init__()
        self.session = session
        self.lock = threading.RLock()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        with self.lock:
            return self._dispatch(func, args, kwargs)

    def _dispatch(self, func: Any, args: Any, kwargs: Any) -> Any:
        if runs_on_host(func, args, kwargs or {}):
            # a real CPU operator: the host side runs as on the machine (see host.py)
            with unset_fake_temporarily():
                return func(*args, **(kwargs or {}))
        if func is _SDPA and args and args[0].device.type == "npu":
            # torch.inference_mode skips autograd's key, where fused.py installs torch_npu's
            # override, and the operator arrives here whole: torch_npu's kernel serves it
            # there as well, so it runs here, its operators tracked as any others
            with self:
                return _npu_sdpa(*args, **(kwargs or {}))
        try:
            out = func(*args, **(kwargs or {}))
        except (DataDependentOutputException, DynamicOutputShapeException) as e:
            if func is torch.ops.aten._local_scalar_dense.default:
                return self.session.values.read(self.session, args[0], ".item()")
            raise _limits.data_dependent(self.session, str(func.__name__),
                                         type(e).__name__) from None
        values = self.session.values
        values.follow(func, args, kwargs or {}, out)
        track = self.session.track
        if (values.healthy and func in _HEALTHY_KEPT and isinstance(out, torch.Tensor)
                and args and args[0] in values.healthy):
            values.healthy[out] = True
        if isinstance(out, torch.Tensor):
            track(out)
        elif isinstance(out, (tuple, list)):
            for t in tree_leaves(out):
                if isinstance(t, torch.Tensor):
                    track(t)
        self.session.operator_workspace(func, args, out)
        return out


class Session(StorageCategories):
    """A simulated ``product`` with ``capacity`` bytes, torch_npu's caching allocator on its
    NPU ``device`` of ``device_count`` (``alloc_conf`` as ``PYTORCH_NPU_ALLOC_CONF``), and
    the fake tensors' tracker.

    Use as a context manager (one at a time): inside, NPU storages are allocated and freed
    through :attr:`allocator` as the script makes and drops them, and each operator takes
    the workspace ``workspace`` (a :class:`WorkspaceTable`) gives it: from the caching
    allocator with ``task_queue`` 0 or 1 (``TASK_QUEUE_ENABLE``, torch_npu's default 1),
    from its ``NPUWorkspaceAllocator`` with 2. ``alloc_conf`` and ``task_queue`` left None
    are read from the environment at the first allocation (:mod:`.environment`).

    Size: past 350 lines because it is where the tracker, the allocator and the hooks meet
    (one estimate's state); what has a seam of its own is a module apart: the categories,
    the limits and value reads, the host side, checkpoints, the process, the environment.
    """

    def __init__(self, product: str, capacity: int | None = None,
                 alloc_conf: str | None = None, *, cann: str | None = None,
                 history: bool = False, device: int = 0, device_count: int | None = None,
                 workspace: WorkspaceTable | None = None, task_queue: int | None = None,
                 item_value: float | None = _limits.DEFAULT_ITEM_VALUE,
                 torch_npu: str | None = None) -> None:
        #: the torch_npu release whose behaviours apply (allocators/releases.py)
        self.release = NEWEST if torch_npu is None else release(torch_npu)
        if task_queue is not None and (task_queue.__class__ is not int
                                       or task_queue not in (0, 1, 2)):
            raise ValueError(f"TASK_QUEUE_ENABLE should be 0, 1 or 2, not {task_queue!r}")
        #: the allocator settings and TASK_QUEUE_ENABLE: given, or read at the first
        #: allocation (environment.py)
        self.startup = Startup(alloc_conf, task_queue, self.release)
        profile = get_profile(product)
        settings: dict[str, Any] = {"sanitizer": "off"}
        if capacity is not None:
            settings["hbm_bytes" if profile.hbm_bytes else "ddr_bytes"] = capacity
        if device_count is not None and device_count != profile.device_count:
            settings["device_count"] = device_count
        self.runtime = Runtime(profile, **settings)
        #: the NPU the script's tensors are on (a rank's LOCAL_RANK) and the NPUs it sees
        self.device, self.device_count = device, device_count or 1
        try:
            extra: dict[str, Any] = {"cann": cann} if cann else {}
            self.allocator = NpuCachingAllocator(self.runtime, device, alloc_conf or "",
                                                 torch_npu=self.release, **extra)
        except BaseException:
            self.runtime.close()
            raise
        self.product, self.alloc_conf = self.runtime.profile.name, alloc_conf or ""
        self.workspace = workspace or WorkspaceTable(product=self.product)
        self.task_queue = 1 if task_queue is None else task_queue
        #: operator calls given a workspace; the largest request; calls outside the table
        self.workspace_calls = self.workspace_largest = self.workspace_block = 0
        self.uncovered: dict[str, int] = {}
        #: the peak of the device's bytes: reserved + the workspace allocator's
        self.device_peak = 0
        self._in_workspace: str | None = None
        #: operator -> (its name, whether it runs a kernel)
        self._names: dict[Any, tuple[str, bool]] = {}
        self.capacity = self.runtime.profile.total(self.runtime.profile.main_memory)
        #: the current stream's handle (0: the default stream)
        self.stream = 0
        self._stats = self.allocator.stats
        self._storages: dict[int, _Storage] = {}
        self._frames: dict[int, list] = {}
        #: each distinct stack's frames, once (see frames)
        self._stacks: dict[tuple, list] = {}
        self.totals = dict.fromkeys(CATEGORIES, 0)
        #: the categories' bytes when allocated bytes were at their highest
        self.at_peak = dict(self.totals)
        self._peak = 0
        #: the allocator's (allocated, reserved) peaks before the script's last
        #: reset_peak_memory_stats: the estimate's peaks are the whole run's
        self.peaks_before_reset = (0, 0)
        self.in_optimizer = False
        #: the first allocation that failed: message, size, frames
        self.failure: dict | None = None
        self.history = history
        #: the estimate itself wants the snapshot: the script cannot turn the history off
        self.keep_history = history
        #: the message of a data-dependent operator that stopped the script
        self.stopped: str | None = None
        #: the reads of tensors' values: what they give (None: the first stops the script),
        #: how many, where (see limits)
        self.values = _limits.ValueReads(item_value)
        #: pinned host memory (pin_memory() copies), counted apart from the device
        self.pinned = PinnedMemory()
        #: what ran otherwise than on the NPU (torch.compile ran eagerly), for the summary
        self.notes: list[str] = []
        #: the script's calls that see the device's memory (mem_get_info, ...), each once
        #: per line: its allocations may depend on the capacity
        self.device_queries: list[dict] = []
        if history:
            self.start_history()
        self._fake = FakeMode()
        self._tracker = _Tracker(self)
        self._hooks: list = []
        self._token = object()
        self._open = False
        self._base: Any = None
        self._thread = 0
        #: the script's own threads (process.py): an out-of-memory is raised in them
        self.script_threads: set[int] = set()
        #: torch_npu's raw allocations (caching_allocator_alloc), by address
        self.raw_blocks: dict[int, _Storage] = {}
        self.backward_ran = False
        self._deferred: tuple[str, int] | None = None
        #: the settings of the training stack that shaped the peak (name -> value), which
        #: a stack's adaptation notes (stacks/): the summary's settings line
        self.stack_settings: dict[str, str] = {}
        #: what the new storages hold while a stack's own code makes them (its adaptation
        #: sets it around that code: DeepSpeed's gradient buckets), else activations and
        #: temporaries; an optimizer's step makes optimizer state whatever it says
        self.new_category: str | None = None

    def frames(self) -> list[dict]:
        """The script's frames at this moment (see :func:`user_frames`); while an operator
        takes its workspace, a first frame names it (``<workspace>``)."""
        frames = user_frames(sys._getframe(1), self._base)
        if self._in_workspace is not None:
            frames.insert(0, {"filename": "<workspace>", "line": 0, "name": self._in_workspace})
        # one list per distinct stack, shared by every trace entry and block made there: the
        # history costs an entry's dict per entry, however deep the stack; read-only
        key = tuple((f["filename"], f["line"], f["name"]) for f in frames)
        return self._stacks.setdefault(key, frames)

    # -- life ------------------------------------------------------------------------------

    def __enter__(self) -> Session:
        if _npu.active() is not None:
            raise RuntimeError("an estimate is already running in this process")
        from torch.nn.modules.module import register_module_forward_pre_hook
        from torch.optim.optimizer import (
            register_optimizer_step_post_hook,
            register_optimizer_step_pre_hook,
        )

        ensure_npu_backend()
        # the caller's frame: the frames recorded stop there, so the same script gives the
        # same snapshot whoever runs it
        self._base = sys._getframe(1)
        # every change made for the run is undone by this stack, last first, whatever fails
        # (an install half-way here, or one undo among them at the end)
        undo = self._undo = contextlib.ExitStack()
        try:
            self._hooks = [register_module_forward_pre_hook(self._forward_pre_hook),
                           register_optimizer_step_pre_hook(self._optimizer_pre_hook),
                           register_optimizer_step_post_hook(self._optimizer_post_hook)]
            undo.callback(lambda: [hook.remove() for hook in self._hooks])
            # patched for the run (a method the checker takes as fixed)
            undo.callback(setattr, torch.Tensor, "record_stream", torch.Tensor.record_stream)
            torch.Tensor.record_stream = _record_stream  # type: ignore[method-assign,assignment,unused-ignore]
            self._thread = threading.get_ident()
            self._engine_run_backward = torch.autograd._engine_run_backward
            undo.callback(setattr, torch.autograd, "_engine_run_backward",
                          self._engine_run_backward)
            torch.autograd._engine_run_backward = self._backward
            _npu.reset()
            _npu.set_active(self)
            undo.callback(_npu.set_active, None)
            # what the run patches in torch: limits, the host side, checkpoints, threads,
            # storages; DeepSpeed's, Hugging Face's, Megatron-core's and torchtitan's
            # adaptations, which take effect if the script imports them
            for install in (lambda: _limits.install(self), lambda: _install_host(self.pinned),
                            _install_checkpoints, lambda: _process.install_threads(self),
                            lambda: _install_storages(self), lambda: _install_deepspeed(self),
                            lambda: _install_hf(self), lambda: _install_megatron(self),
                            lambda: _install_torchtitan(self)):
                undo.callback(install())
            self._open = True
            self._fake.__enter__()
            undo.callback(self._fake.__exit__, None, None, None)
            self._tracker.__enter__()
        except BaseException:
            undo.close()
            self._base = None
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            self._tracker.__exit__(*exc)
        finally:
            self._base = None
            self._undo.close()

    def on_exit(self, undo: Any) -> None:
        """Call ``undo`` when the run ends, before what the session itself patched is put
        back (last in, first out: a script's patches over the session's)."""
        self._undo.callback(undo)

    def close(self) -> None:
        """Stop tracking (storages that die later free nothing) and close the device; with
        autograd's NPU thread drained (see process.drain_autograd)."""
        if self.backward_ran:
            _process.drain_autograd(self._fake)
        self._open = False
        self._storages.clear()
        self.runtime.close()

    # -- storages --------------------------------------------------------------------------

    def track(self, t: torch.Tensor) -> None:
        """Allocate ``t``'s storage if it is a new NPU storage (or grew: ``resize_``); for
        a tensor that wraps others, theirs (:func:`~.categories.wrapped`).

        Raises:
            EstimateStopped: ``t`` is on a CUDA device, which an Ascend machine has not.
        """
        kind = t.device.type
        if kind != "npu":
            if kind == "cuda":
                raise self.stop(cuda_refusal(self))
            return
        inner = wrapped(t)
        if inner is not None:
            for x in inner:
                self.track(x)
            return
        self.track_storage(t.untyped_storage())

    def track_storage(self, st: Any) -> None:
        """Allocate the NPU storage ``st`` if it is new, or again if its size changed
        (``resize_``: the source's resize, a new block, then the old one goes; 0 bytes
        gives the block back)."""
        key = id(st)
        rec = self._storages.get(key)
        nbytes = st.nbytes()
        if rec is not None:
            if rec.nbytes == nbytes:
                return
            self._storages.pop(key)
            new = self._allocate(nbytes, rec.category)
            new.ref = rec.ref
            self._storages[key] = new
            self._release(rec)
            return
        rec = self._allocate(nbytes, OPTIM if self.in_optimizer else self.new_category or ACTS)
        # (the checker infers no type for a lambda with a default argument)
        rec.ref = weakref.ref(st, lambda _, key=key: self._died(key))  # type: ignore[misc,unused-ignore]
        self._storages[key] = rec

    def _allocate(self, nbytes: int, category: str) -> _Storage:
        if self.startup.pending:
            self._start()
        try:
            ptr = self.allocator.malloc(nbytes, self.stream)
        except NpuOutOfMemoryError as e:
            self._refused(e, nbytes)
            return _Storage(0, nbytes, 0, category)
        size = self.allocator.block_size(ptr) if ptr else 0
        rec = _Storage(ptr, nbytes, size, category)
        totals = self.totals
        totals[category] += size
        allocated = self._stats.current(ALLOCATED_BYTES)
        if allocated > self._peak:
            self._peak = allocated
            self.at_peak = dict(totals)
        if self.history and ptr:
            self._frames[ptr] = self.frames()
        if self.task_queue == 2:
            self._note_device()
        return rec

    def allocate_raw(self, nbytes: int) -> int:
        """A block for torch_npu's raw allocation (``caching_allocator_alloc``): counted as
        a temporary until :meth:`free_raw`; its address."""
        with self._tracker.lock:
            rec = self._allocate(nbytes, ACTS)
            self.raw_blocks[rec.ptr] = rec
            return rec.ptr

    def free_raw(self, ptr: int) -> None:
        with self._tracker.lock:
            rec = self.raw_blocks.pop(ptr, None)
            if rec is not None:
                self._release(rec)

    @contextlib.contextmanager
    def on_stream(self, stream: int) -> Any:
        """Allocate on ``stream`` in the block."""
        previous, self.stream = self.stream, stream
        try:
            yield
        finally:
            self.stream = previous

    def _start(self) -> None:
        """The first allocation: torch_npu's settings as the script left the environment."""
        startup = self.startup
        startup.read()
        if startup.alloc_conf != self.alloc_conf:
            self.allocator.configure(startup.alloc_conf)
            self._stats = self.allocator.stats
            self.alloc_conf = startup.alloc_conf or ""
        self.task_queue = startup.task_queue if startup.task_queue is not None else 1

    def _refused(self, error: NpuOutOfMemoryError, nbytes: int) -> None:
        """An allocation failed: raise torch's OutOfMemoryError, or, on an autograd worker
        thread, keep it for the backward call and return."""
        if threading.get_ident() != self._thread and \
                threading.get_ident() not in self.script_threads:
            # torch aborts the process when an error leaves an operator there under a device
            # written in Python, so the error waits for the backward call to return (see
            # _backward); nothing is allocated
            if self._deferred is None:
                self._deferred = (str(error), nbytes)
            return
        self.out_of_memory(str(error), nbytes, self.frames())

    def _note_device(self) -> None:
        device = self._stats.current(RESERVED_BYTES) + \
            self.allocator.workspace.reserved_bytes.current
        if device > self.device_peak:
            self.device_peak = device

    # -- workspaces ------------------------------------------------------------------------

    def operator_workspace(self, func: Any, args: tuple, out: Any) -> None:
        """The workspace operator ``func`` takes for one call, from the table, and gives back
        when the call is queued (torch_npu's EXEC_NPU_CMD): a block of the caching allocator
        (``task_queue`` 0, 1) or of the stream's NPUWorkspaceAllocator block (2). Calls of
        operators outside the table are counted in :attr:`uncovered`."""
        if not self.workspace.enabled:
            return
        known = self._names.get(func)
        if known is None:
            name = getattr(func, "_opname", None) or str(func)
            known = self._names[func] = (name, _kernel(func, name))
        name, kernel = known
        if not kernel or not _on_npu(out, args):
            return
        size = self.workspace.size(name, args, out)
        if size is None:
            self.uncovered[name] = self.uncovered.get(name, 0) + 1
            return
        if not size:
            return
        self.workspace_calls += 1
        self.workspace_largest = max(self.workspace_largest, size)
        self._in_workspace = f"workspace of {name}"
        try:
            if self.task_queue == 2:
                ws = self.allocator.workspace
                ptr = ws.malloc(size, self.stream)
                ws.free(ptr)
                self._note_device()
            else:
                ptr = self.allocator.malloc(size, self.stream)
                block = self.allocator.block_size(ptr)
                self.workspace_block = max(self.workspace_block, block)
                allocated = self._stats.current(ALLOCATED_BYTES)
                if allocated > self._peak:     # the peak is at this operator's workspace
                    self._peak = allocated
                    self.at_peak = dict(self.totals, workspace=block)
                self.allocator.free(ptr)
        except NpuOutOfMemoryError as e:
            self._refused(e, size)
        finally:
            self._in_workspace = None

    def take_runtime_share(self, share: int) -> None:
        """Take the runtime's own share of the device (:mod:`.runtime_share`) before the
        script runs; an out-of-memory verdict when the device cannot hold it."""
        try:
            take_runtime_share(self.runtime, share)
        except AclError as e:
            self.out_of_memory(f"the runtime's share of {share} bytes does not fit on the "
                               f"device: {e}", share, [])

    def out_of_memory(self, message: str, nbytes: int, frames: list) -> None:
        """Raise torch's OutOfMemoryError with torch_npu's message (the first is kept)."""
        if self.failure is None:
            self.failure = {"message": message, "size": nbytes, "frames": frames}
        error = torch.OutOfMemoryError(message)
        # the script's error at its own line: a traceback need not show the estimate's frames
        error._ascend_memsim_user_error = True  # type: ignore[attr-defined,unused-ignore]
        raise error from None

    def _backward(self, *args: Any, **kwargs: Any) -> Any:
        """torch.autograd's _engine_run_backward, then the out-of-memory error of an
        allocation made on an autograd worker thread, raised at the script's backward."""
        self._deferred = None
        self.backward_ran = True
        try:
            return self._engine_run_backward(*args, **kwargs)
        finally:
            deferred, self._deferred = self._deferred, None
            if deferred is not None:
                self.out_of_memory(*deferred, self.frames())

    def _died(self, key: int) -> None:
        # on whichever thread let the storage go: one change of the books at a time
        with self._tracker.lock:
            rec = self._storages.pop(key, None)
            if rec is not None and self._open:
                self._release(rec)

    def _release(self, rec: _Storage) -> None:
        self.totals[rec.category] -= rec.size
        if rec.ptr:
            self._frames.pop(rec.ptr, None)
            self.allocator.free(rec.ptr)

    def storage_of(self, t: torch.Tensor) -> _Storage | None:
        if not isinstance(t, torch.Tensor) or t.device.type != "npu":
            return None
        return self._storages.get(id(t.untyped_storage()))

    def record_stream(self, t: torch.Tensor, stream: int) -> None:
        rec = self.storage_of(t)
        if rec is not None and rec.ptr:
            self.allocator.record_stream(rec.ptr, stream)

    # -- failures --------------------------------------------------------------------------

    def stop(self, error: EstimateStopped) -> EstimateStopped:
        """Record ``error`` as what stopped the script (the first is kept); the error."""
        if self.stopped is None:
            self.stopped = str(error)
        return error

    def asked(self, call: str) -> None:
        """The script called ``call``, which sees the device's memory (once per line)."""
        frames = self.frames()
        where = frames[0] if frames else {}
        query = {"call": call, **where}
        if query not in self.device_queries:
            self.device_queries.append(query)

    # -- history ---------------------------------------------------------------------------

    def start_history(self, max_entries: int = sys.maxsize) -> None:
        """Keep the trace entries, with the user's frames, for :meth:`snapshot`."""
        self.history = True
        self.allocator.trace_frames = self.frames
        self.allocator.record_history(True, max_entries=min(max_entries, 1 << 40))

    def stop_history(self) -> None:
        self.history = False
        self.allocator.trace_frames = None
        self.allocator.record_history(False)

    def snapshot(self, pool_id: tuple[int, int] | None = None) -> dict:
        """torch_npu.npu.memory._snapshot(): segments (a memory pool's only, with
        ``pool_id``), blocks (with the frames of the allocation that made each live block)
        and device_traces."""
        snap = self.allocator.memory_snapshot(pool_id)
        frames = self._frames
        for seg in snap["segments"]:
            for block in seg["blocks"]:
                if block["state"] == "active_allocated":
                    block["frames"] = list(frames.get(block["address"], ()))
        return snap

    def mem_get_info(self) -> tuple[int, int]:
        return self.runtime.get_mem_info(MemAttr.HBM_MEM)


#: aten operators that launch no kernel on the NPU (no workspace to miss)
_NO_KERNEL = frozenset(("empty", "empty_strided", "empty_like", "new_empty", "new_empty_strided",
                        "_local_scalar_dense", "lift_fresh", "set_", "resize_"))


def _kernel(func: Any, name: str) -> bool:
    """Whether an operator runs a kernel: an aten operator, not a view, not a bare
    allocation (prim.device, views and empty tensors take no workspace)."""
    return (getattr(func, "namespace", "aten") in ("aten", "npu")
            and not getattr(func, "is_view", False) and name not in _NO_KERNEL)


def _on_npu(out: Any, args: tuple) -> bool:
    """Whether an operator's output, or else one of its arguments, is an NPU tensor."""
    for value in (out, args):
        for t in tree_leaves(value):
            if isinstance(t, torch.Tensor):
                return t.device.type == "npu"
    return False


def _record_stream(self: torch.Tensor, stream: Any) -> None:
    """Tensor.record_stream during an estimate: a stand-in stream is told to the allocator."""
    session = _npu.active()
    handle = getattr(stream, "npu_stream", None)
    if session is not None and handle is not None:
        session.record_stream(self, handle)
        return
    if session is not None:
        session._record_stream(self, stream)
