"""The simulated runtime of one process: the composition root that holds the planes.

>>> from ascend_memsim import Runtime, MiB
>>> with Runtime("A2", hbm_bytes=64 * MiB) as rt:
...     _ = rt.set_device(0)
...     ptr = rt.malloc(100)
...     rt.block(ptr).footprint, rt.get_mem_info(1)
...     rt.free(ptr)
(192, (67108672, 67108864))

A :class:`Runtime` holds the devices (:mod:`.devices`, with the current device per thread),
host memory and byte moves (:mod:`ascend_memsim.data`), the streams and contexts
(:mod:`.streams`) and a checker (the sanitizer, made through :mod:`.hooks`), and routes each
aclrt call to the plane that does it. Used as a context manager it becomes the *active* one:
the pyacl face talks to it (:mod:`.active`: ``acl.init`` / ``acl.finalize``). Activations nest.

Size: over 600 lines, on purpose: Runtime is the one place each aclrt call is routed from
(some fifty calls with their vendor citations, a few lines each); the logic lives in the
planes it routes to (DeviceTable, Device, DataPlane, HostMemory, Streams, Events, Callbacks,
the checker) and the aclInit handling in config.py. Splitting the routing would scatter
"what does aclrtX do" over files. What is left beside the routing is the composition itself:
making the planes, the observer and interceptor lists every device shares, and telling each
plane when a device goes (``_drop_device``, one place for aclrtResetDevice and aclFinalize);
each needs the planes the runtime holds, so none has a seam of its own.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, ClassVar

from ..data.host import HostMemory
from ..data.plane import DataPlane
from ..memory.args import (
    SIZE_MAX,
    as_ptr,
    as_size,
    parse_malloc_config,
    parse_mem_type_query,
)
from ..memory.constants import MODULE_APP, MallocAttrType, MemType, RunMode
from ..memory.device import Block, Device
from ..memory.errors import AclError, InvalidPointer, InvalidRuntimeParam
from ..memory.profiles import DEFAULT_PRODUCT, Profile, get_profile
from ..memory.rules import DEFAULT_POLICY, DEVICE_SPAN, Api, device_of
from .callbacks import Callbacks
from .cmo import cache_ops
from .config import parse_config, parse_run_mode, plan_adoption
from .custom_alloc import CustomAllocators
from .devices import DeviceTable
from .events import Events
from .hooks import Checker, make_checker
from .managed import ManagedMemory
from .pools import MemPools
from .process import Machine, as_current
from .streams import Streams
from .vmm import VirtualMemory

__all__ = ["Runtime", "UsageInfo"]


@dataclass(frozen=True, slots=True)
class UsageInfo:
    """One row of aclrtGetMemUsageInfo (aclrtMemUsageInfo): a component's bytes."""

    name: str
    cur_mem_size: int
    mem_peak_size: int


class Runtime:
    """A fresh simulated runtime: one product, its devices, reference-counted contexts.

    Keyword arguments override the product's profile for this simulation only
    (``hbm_bytes``, ``ddr_bytes``, ``device_count``, ``huge1g``, ...).
    ``default_device`` makes that device current for threads that never set one
    (aclInit's ``defaultDevice`` config). ``interceptors`` are added as by
    :meth:`add_interceptor` (the ``faults`` config key uses it). ``sanitizer`` is a mode
    (``"report"``, the default, ``"strict"``, ``"off"``), a dict of options or a
    :class:`~ascend_memsim.checks.sanitizer.Sanitizer`. ``machine``: the simulated machine
    this process joins (see :mod:`.process`; :meth:`spawn_process` passes its own); by
    default a new machine with this one process.
    """

    #: The active runtimes, innermost last: process-global, as the real runtime is.
    active: ClassVar[list[Runtime]] = []
    active_lock: ClassVar[threading.RLock] = threading.RLock()
    #: thread id -> the runtime that thread's face calls go to instead (process.acting_as:
    #: an owner's thread serving a worker process); empty unless one serves
    acting: ClassVar[dict[int, Runtime]] = {}

    def __init__(self, product: str | Profile = DEFAULT_PRODUCT, *,
                 default_device: int | None = None, interceptors: Iterable[Callable[..., Any]] = (),
                 sanitizer: Any = "report", run_mode: Any = "host",
                 machine: Machine | None = None, **overrides: Any) -> None:
        profile = get_profile(product).with_overrides(**overrides)
        #: the simulated machine this process runs on, and its pid there (see process.py)
        self.machine = Machine() if machine is None else machine
        self.pid = self.machine.join(self)
        self._table = DeviceTable(profile, budget=self.machine.budget, pid=self.pid)
        #: where the program runs (aclrtGetRunMode); see parse_run_mode
        self.run_mode = parse_run_mode(run_mode)
        #: each thread's current device and context
        self.threads = self._table.threads
        #: set by acl.init / cleared by acl.finalize; owned: acl.init made this runtime
        self.acl_initialized = False
        self.owned_by_acl = False
        #: what the last aclInit on this (adopted) runtime added: (interceptors, default
        #: device it holds, the default device before), taken back by release_adoption
        self._adopted: tuple[tuple[Any, ...], int | None, int | None] = ((), None, None)
        for interceptor in interceptors:
            self.add_interceptor(interceptor)
        #: host memory, byte moves, streams and contexts (data.host, data.plane, streams)
        self.host = HostMemory()
        self.host_limit = DEVICE_SPAN
        self.data = DataPlane(self)
        self.streams = Streams(self)
        self.events = Events(self)
        self.callbacks = Callbacks(self)
        #: reservations, physical handles and mappings (11-04): the face routes to it
        self.vmm = VirtualMemory(self)
        #: stream-ordered memory pools (11-10), on reservations of the address space
        self.pools = MemPools(self)
        #: custom allocators (11-08): descriptors and their registrations on streams
        self.custom_allocators = CustomAllocators(self)
        #: managed (unified) memory and aclrtMemP2PMap (11-05)
        self.managed = ManagedMemory(self)
        self.sanitizer: Checker = make_checker(sanitizer)
        self.sanitizer.attach(self)
        #: planes made on demand by higher layers (the compute plane), by name; see extension
        self._extensions: dict[str, Any] = {}
        if default_device is not None:
            self.threads.default_device = self._table.check_id(default_device)
            self._table.acquire(default_device, thread=False)

    def __repr__(self) -> str:
        return f"Runtime({self.profile.name!r}, devices={self.device_count}, pid={self.pid})"

    # -- processes (process.py): several runtimes on one machine ------------------------------

    def spawn_process(self, **options: Any) -> Runtime:
        """Another process on this runtime's machine: same product and capacities, its own
        threads, contexts, streams, host memory and pid. ``options`` as for ``Runtime``
        (``sanitizer``, ``default_device``, ...)."""
        return Runtime(self.profile, machine=self.machine, **options)

    def as_current(self) -> AbstractContextManager[Any]:
        """``with rt.as_current():`` makes this process the one the pyacl face talks to,
        without ending it when the block ends (see :func:`.process.as_current`)."""
        return as_current(self)

    def device_get_bare_tgid(self) -> int:
        """aclrtDeviceGetBareTgid: the process's pid on the simulated machine (no context
        needed: api_impl.cc DeviceGetBareTgid asks the driver directly)."""
        return self.pid

    @property
    def profile(self) -> Profile:
        """The product profile (with this simulation's overrides)."""
        return self._table.profile

    @profile.setter
    def profile(self, profile: Profile) -> None:
        self._table.profile = profile

    @property
    def default_device(self) -> int | None:
        return self.threads.default_device

    # -- activation (the face talks to the active runtime) -----------------------------------

    def __enter__(self) -> Runtime:
        with Runtime.active_lock:
            Runtime.active.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        active = Runtime.active
        with Runtime.active_lock:
            for i in range(len(active) - 1, -1, -1):
                if active[i] is self:
                    del active[i]
                    break
            still_active = any(r is self for r in active)
        if not still_active:
            self.close()

    def close(self) -> list[Block]:
        """Reset every device (as aclFinalize does); the blocks that were still live."""
        leaked: list[Block] = []
        physical: list[Any] = []  # physical memory handles never freed
        for device in self.devices():
            self._finish_work(device.device_id)
        with self._table.lock:
            devices = self._table.clear()
            for device in devices:
                physical.extend(self._drop_device(device))
                leaked.extend(device.reset())
            self._table.leave(devices)
            host_leaked = self.host.clear()
            with Runtime.active_lock:
                extensions, self._extensions = list(self._extensions.values()), {}
        handles = [h for ext in extensions for h in ext.close()]
        handles += self.custom_allocators.close()
        self.sanitizer.leaks("aclFinalize", [*leaked, *physical, *host_leaked, *handles])
        return leaked

    def extension(self, name: str, factory: Callable[[Runtime], Any] | None = None) -> Any:
        """The plane ``name``, made by ``factory(self)`` on first use (without a factory:
        the plane if it was made, else None; nothing is made).

        Higher layers attach here without the runtime knowing them (the compute plane of
        tensor descriptors, operators and models). At :meth:`close` each plane's ``close()``
        returns the handles still live, which the checker reports as leaks.
        """
        plane = self._extensions.get(name)
        if plane is None and factory is not None:
            with Runtime.active_lock:
                plane = self._extensions.get(name)
                if plane is None:
                    plane = self._extensions[name] = factory(self)
        return plane

    # -- hooks: observers (stats, traces), interceptors (faults), allocation sites -----------

    @property
    def observers(self) -> list[Callable[..., Any]]:
        return self._table.observers

    @property
    def interceptors(self) -> list[Callable[..., Any]]:
        return self._table.interceptors

    @property
    def reclaim_listeners(self) -> list[Callable[..., Any]]:
        return self._table.reclaim_listeners

    @property
    def record_sites(self) -> bool:
        return self._table.record_sites

    def set_record_sites(self, on: bool = True) -> None:
        """Make every device (now and later) keep each block's allocation site."""
        self._table.set_record_sites(on)

    def add_observer(self, observer: Callable[..., Any],
                     events: Iterable[str] | None = None) -> None:
        """Call ``observer(event, device, info)`` for every event of every device, now and
        later, and for the runtime's own events (``set_device``, ``reset_device``).

        Device events: ``malloc`` (block, request), ``malloc_failed`` (request, error),
        ``free`` (block), ``reset`` (blocks still live); the data plane's ``memcpy``,
        ``memset``. Given ``events``, the observer sees only those, and the others cost it
        nothing (an observer of every event costs each malloc and free a call).
        """
        if events is None:
            self._table.hook("observers", observer, add=True)
        else:
            self._table.subscribe(observer, frozenset(events), add=True)

    def remove_observer(self, observer: Callable[..., Any],
                        events: Iterable[str] | None = None) -> None:
        """Stop calling ``observer`` (added with the same ``events``)."""
        if events is None:
            self._table.hook("observers", observer, add=False)
        else:
            self._table.subscribe(observer, frozenset(events), add=False)

    def add_interceptor(self, interceptor: Callable[..., Any]) -> None:
        """Call ``interceptor(request)`` before every allocation on every device (see
        :attr:`Device.interceptors`): raise an AclError to fail it, or return pages to refuse.
        """
        self._table.hook("interceptors", interceptor, add=True)

    def remove_interceptor(self, interceptor: Callable[..., Any]) -> None:
        """Stop calling ``interceptor``."""
        self._table.hook("interceptors", interceptor, add=False)

    def add_reclaim_listener(self, listener: Callable[..., Any]) -> None:
        """Call ``listener(device, blocks)`` when a malloc on any device takes back the
        footprints of held blocks (see :meth:`Device.hold`)."""
        self._table.hook("reclaim_listeners", listener, add=True)

    def remove_reclaim_listener(self, listener: Callable[..., Any]) -> None:
        """Stop calling ``listener``."""
        self._table.hook("reclaim_listeners", listener, add=False)

    def _emit(self, event: str, device: Device) -> None:
        for observer in self._table.observers_of(event):
            observer(event, device, {})

    # -- devices (see DeviceTable) --------------------------------------------------------------

    @property
    def device_count(self) -> int:
        return self.profile.device_count

    def device(self, device_id: object) -> Device:
        """The simulated device ``device_id`` (made on first use). Raises InvalidDevice."""
        return self._table.get(device_id)

    def devices(self) -> list[Device]:
        """The devices made so far, by id."""
        return self._table.all()

    def set_device(self, device_id: object) -> Device:
        """Make ``device_id`` the calling thread's current device (aclrtSetDevice).

        Reference counted: each call needs one :meth:`reset_device`.
        """
        device = self._table.acquire(device_id)
        if self._table.wants("set_device"):
            self._emit("set_device", device)
        return device

    def reset_device(self, device_id: object) -> None:
        """Drop one reference (aclrtResetDevice); the last one discards the device's blocks.

        Resetting a device that holds no reference does nothing (DECISION).
        """
        number = self._table.check_id(device_id)
        if self._table.refs(number) == 1:
            # The last reference: its queued work runs first, outside the table's lock.
            self._finish_work(number)
        with self._table.lock:
            device = self._table.release(number)
            if device is not None:
                handles = self._drop_device(device)
                self.sanitizer.leaks("aclrtResetDevice", [*device.reset(), *handles])
        made = self._table.made(number)
        if made is not None and self._table.wants("reset_device"):
            self._emit("reset_device", made)

    #: planes made by extension() that keep state per device, told when a device is reset
    #: (before its blocks go: device variables free theirs, 11-11)
    _DEVICE_PLANES = ("peer", "cache_ops", "symbols")

    def _drop_device(self, device: Device) -> list[Any]:
        """Everything but the blocks of a device being reset or finalized (call under the
        table's lock, the device already out of it): the work queued meanwhile runs, its
        streams and events go, and each plane forgets it. The handles of its pools, virtual
        and managed memory still open (leaks to report)."""
        number = device.device_id
        self._finish_work(number)  # what another thread queued meanwhile
        self.streams.drop_device(number)
        self.events.drop_device(number)
        self.sanitizer.forget_device(device)
        handles = [*self.pools.forget_device(device), *self.vmm.forget_device(device),
                   *self.managed.forget_device(device)]
        for name in self._DEVICE_PLANES:
            plane = self._extensions.get(name)
            if plane is not None:
                plane.forget_device(number)
        return handles

    def _finish_work(self, device_id: int) -> None:
        """Run the device's queued work before its streams go: aclrtResetDevice (and so
        aclFinalize) waits for unfinished tasks before releasing (vendor api_ref,
        aclrtResetDevice: "若默认Context或默认Stream下的任务还未完成, 系统会等待任务完成后再释放").
        DECISION: work that fails is reported as whenever queued work fails (the sanitizer
        names it) and does not fail the reset."""
        if self.streams.pending:
            try:
                self.streams.synchronize_device(device_id)
            except AclError:
                pass

    def get_device(self) -> int:
        """The calling thread's current device id (aclrtGetDevice). Raises DeviceNotSet."""
        return self._table.current().device_id

    def current_device(self) -> Device:
        """The calling thread's current :class:`Device`. Raises DeviceNotSet."""
        return self._table.current()

    def current_device_or_none(self) -> Device | None:
        """The calling thread's current :class:`Device`, or None when it has none."""
        return self._table.current_or_none()

    def device_holding(self, addr: object) -> Device | None:
        """The device whose window holds ``addr`` (any integer type), or None."""
        return self._table.holding(addr)

    def block(self, ptr: object) -> Block | None:
        """The live block starting at ``ptr`` on any device, or None."""
        return self._table.block(ptr)

    def block_at(self, addr: object) -> Block | None:
        """The live block whose footprint holds ``addr`` on any device, or None."""
        return self._table.block_at(addr)

    def blocks(self) -> list[Block]:
        """Every live block of every device, by device then address."""
        return [b for d in self.devices() for b in d.blocks()]

    # -- allocation ----------------------------------------------------------------------------

    def malloc(self, size: object, policy: object = DEFAULT_POLICY) -> int:
        """aclrtMalloc on the current device: the block's address. See :meth:`Device.malloc`."""
        # Device.allocate, not Device.malloc: one frame less for each allocation-site capture
        return self._table.current().allocate(size, policy, api=Api.MALLOC, site_skip=1).ptr

    def malloc_align32(self, size: object, policy: object = DEFAULT_POLICY) -> int:
        """aclrtMallocAlign32: size rounded to 32 bytes only, on every product."""
        return self.current_device().malloc(size, policy, api=Api.MALLOC_ALIGN32)

    def malloc_cached(self, size: object, policy: object = DEFAULT_POLICY) -> int:
        """aclrtMallocCached: as aclrtMalloc; a policy other than HUGE_FIRST, HUGE_ONLY,
        NORMAL_ONLY and HUGE1G_ONLY is the default hint (memory.cpp, see rules.parse_policy)."""
        return self.current_device().malloc(size, policy, api=Api.MALLOC_CACHED)

    def malloc_with_cfg(self, size: object, policy: object = DEFAULT_POLICY,
                        cfg: object = None) -> int:
        """aclrtMallocWithCfg: ``cfg`` may name the module id and the device id.

        The size is rounded to 32 bytes only, with no +32 (see :func:`rule_size`).
        """
        return self._malloc_cfg(size, policy, cfg, Api.MALLOC_WITH_CFG)

    def malloc_for_task_scheduler(self, size: object,
                                  policy: object = DEFAULT_POLICY,
                                  cfg: object = None) -> int:
        """aclrtMallocForTaskScheduler: as aclrtMallocWithCfg, rounding included (memory.cpp:
        both call aclrtMallocInnerWithCfg; the runtime adds only RT_MEMORY_TS, memory within
        4 GB, which the simulator does not model)."""
        return self._malloc_cfg(size, policy, cfg, Api.MALLOC_FOR_TASK_SCHEDULER)

    def _malloc_cfg(self, size: object, policy: object, cfg: object, api: Api) -> int:
        attrs = parse_malloc_config(cfg)
        device = self.current_device()
        if MallocAttrType.DEVICE_ID in attrs:
            named = self._table.check_id(attrs[MallocAttrType.DEVICE_ID])
            if named != device.device_id:
                # memory.cpp: a config device other than the current one is refused.
                raise InvalidRuntimeParam(f"cfg DEVICE_ID {named} is not the current device "
                                          f"{device.device_id}")
        module = attrs.get(MallocAttrType.MODULE_ID, MODULE_APP)
        return device.malloc(size, policy, api=api, module=module)

    def free(self, ptr: object) -> None:
        """aclrtFree: release at once, no synchronisation. See :meth:`Device.free`; managed
        memory (aclrtMemAllocManaged, 11-05) is released by :meth:`ManagedMemory.free`.

        Raises:
            InvalidArgument, InvalidArgumentType: NULL or not an int (the ACL layer's check,
            before the current device's). InvalidPointer: not a live block's start, or a DVPP
            block (DECISION, see :meth:`Device.releasable`).
        """
        if ptr.__class__ is not int or not 0 < ptr <= SIZE_MAX:
            ptr = as_ptr(ptr)
        self._release(self._owner(ptr), ptr, "aclrtFree")

    def free_with_dev_sync(self, ptr: object) -> None:
        """aclrtFreeWithDevSync: synchronise the device, then free.

        A pointer that is not a live block's start is refused before the device is
        synchronised, so the failed call leaves the queued work queued.
        """
        ptr = as_ptr(ptr)
        device = self._owner(ptr)
        call = "aclrtFreeWithDevSync"
        if device.releasable(ptr, call) is not None or self.managed.holds(ptr):
            self.synchronize_device_of(device)
        self._release(device, ptr, call)

    def _release(self, device: Device, ptr: int, call: str) -> None:
        """The one release path of device memory: the DVPP rule (:meth:`Device.releasable`),
        then the sanitizer's checks.

        The block is looked up twice on purpose: here, for the DVPP rule and the sanitizer's
        pending-work check, and again by :meth:`Device.free` under the device lock, which is
        what lets only one of two threads freeing one pointer succeed (~0.1 us a free).
        """
        block = device.releasable(ptr, call)
        if self.sanitizer.on:
            if block is None and self.managed.holds(ptr):
                self.managed.free(ptr, call)
                return
            self.sanitizer.free(device, ptr, call, block, skip=2)  # _release and its caller
        else:
            try:
                device.free(ptr)
            except InvalidPointer:
                # managed memory (11-05: freed by aclrtFree), looked up only when the
                # device has no such block, so a device free pays nothing for it
                if not self.managed.holds(ptr):
                    raise
                self.managed.free(ptr, call)

    def synchronize_device_of(self, device: Device) -> None:
        """Run the device's queued work (see :meth:`Streams.synchronize_device`)."""
        self.streams.synchronize_device(device.device_id)

    # -- memory contents, host memory, streams (plane.py, host.py, streams.py) --------------

    def memcpy(self, dst: object, dest_max: object, src: object, count: object,
               kind: object) -> None:
        """aclrtMemcpy. See :meth:`DataPlane.memcpy`."""
        self.current_device()
        self.data.memcpy(dst, dest_max, src, count, kind)

    def memset(self, ptr: object, max_count: object, value: object, count: object) -> None:
        """aclrtMemset. See :meth:`DataPlane.memset`."""
        self.current_device()
        self.data.memset(ptr, max_count, value, count)

    def memcpy_async(self, dst: object, dest_max: object, src: object, count: object,
                     kind: object, stream: object = 0) -> None:
        """aclrtMemcpyAsync: checked now, run at synchronisation. See :mod:`.streams`."""
        self.current_device()
        self.streams.memcpy_async(dst, dest_max, src, count, kind, stream)

    def memset_async(self, ptr: object, max_count: object, value: object, count: object,
                     stream: object = 0) -> None:
        """aclrtMemsetAsync: checked now, run at synchronisation."""
        self.current_device()
        self.streams.memset_async(ptr, max_count, value, count, stream)

    def cmo_async(self, src: object, size: object, cmo_type: object, stream: object) -> None:
        """aclrtCmoAsync (11-06): checked now and when the stream runs; no data effect."""
        self.current_device()
        cache_ops(self).cmo_async(src, size, cmo_type, stream)

    def value_write(self, dev_addr: object, value: object, flag: object,
                    stream: object = 0) -> None:
        """aclrtValueWrite (11-09): checked now, written at synchronisation."""
        self.current_device()
        self.streams.value_write(dev_addr, value, flag, stream)

    def value_wait(self, dev_addr: object, value: object, flag: object,
                   stream: object = 0) -> None:
        """aclrtValueWait (11-09): checked now, waited for at synchronisation."""
        self.current_device()
        self.streams.value_wait(dev_addr, value, flag, stream)

    def synchronize_device(self) -> None:
        """aclrtSynchronizeDevice: run the current device's queued work."""
        self.synchronize_device_of(self.current_device())

    def malloc_host(self, size: object) -> int:
        """aclrtMallocHost: 64-byte aligned host memory. See :class:`HostMemory`.

        As every memory call, it needs a current device (a context), else
        ACL_ERROR_RT_CONTEXT_NULL.
        """
        self.current_device()
        return self.host.malloc_host(size).ptr

    def free_host(self, ptr: object) -> None:
        """aclrtFreeHost (needs a current device, as malloc_host)."""
        self.current_device()
        ptr = as_ptr(ptr)
        if self.sanitizer.on:
            self.sanitizer.free_host(self.host, ptr)
        else:
            self.host.free_host(ptr)

    def dvpp_malloc(self, size: object) -> int:
        """acldvppMalloc: device memory of type DVPP (aclrtCheckMemType's ACL_RT_MEM_TYPE_DVPP).

        DECISION: placed and rounded as aclrtMalloc with HUGE_FIRST. On Ascend 950PR/950DT
        there is no separate DVPP memory type (aclrtCheckMemType notes): the block is ordinary
        device memory there (``profile.dvpp_type``).
        """
        kind = MemType.DVPP if self.profile.dvpp_type else MemType.DEV
        return self.current_device().malloc(size, DEFAULT_POLICY, api=Api.MALLOC,
                                            mem_type=kind)

    def dvpp_free(self, ptr: object) -> None:
        """acldvppFree: free a block made by dvpp_malloc.

        Raises:
            InvalidPointer: a live block that is not DVPP memory (DECISION; on 950PR/950DT
                every device block is, see :meth:`Device.releasable`), or as free.
        """
        ptr = as_ptr(ptr)
        self._release(self._owner(ptr), ptr, "acldvppFree")

    def mem_flush(self, ptr: object, size: object) -> None:
        """aclrtMemFlush: write cached data back to device memory (a no-op here).

        acl_rt.h: ``aclError aclrtMemFlush(void *devPtr, size_t size)``. memory.cpp
        (aclrtMemFlushImpl) refuses a NULL devPtr and size 0 with ACL_ERROR_INVALID_PARAM, then
        calls rtFlushCache, which needs a context (RT_ERROR_CONTEXT_NULL) and on the standard
        SoCs returns at once (api_impl_standard_soc.cc, FlushCache); the vendor chapter says
        programs never need it. Like the runtime, it does not check that the range is
        allocated memory.

        Raises:
            InvalidArgument, InvalidArgumentType: NULL, size 0, not ints, or past 64 bits.
            DeviceNotSet: no current device.
        """
        self._cache_maintenance(ptr, size)

    def mem_invalidate(self, ptr: object, size: object) -> None:
        """aclrtMemInvalidate: drop cached data (a no-op here), checked as :meth:`mem_flush`
        (memory.cpp aclrtMemInvalidateImpl, rtInvalidCache).

        Raises:
            InvalidArgument, InvalidArgumentType: NULL, size 0, not ints, or past 64 bits.
            DeviceNotSet: no current device.
        """
        self._cache_maintenance(ptr, size)

    def _cache_maintenance(self, ptr: object, size: object) -> None:
        # memory.cpp order: devPtr, then size (ACL layer), then the context (runtime).
        as_ptr(ptr, "dev_ptr")
        as_size(size)
        self.current_device()

    def get_run_mode(self) -> RunMode:
        """aclrtGetRunMode: ACL_HOST by default (the program runs on a host with the device
        attached), ACL_DEVICE with ``run_mode="device"`` (see :func:`parse_run_mode`)."""
        return self.run_mode

    def _owner(self, ptr: int) -> Device:
        """The device whose window holds ``ptr`` (a checked pointer), else the current one
        (which must exist). O(1).

        A bad pointer is left for the device to refuse, with its own message.
        """
        table = self._table
        current = table.current()
        device = table.made(device_of(ptr))
        return current if device is None else device

    # -- queries -------------------------------------------------------------------------------

    def get_mem_info(self, attr: object) -> tuple[int, int]:
        """aclrtGetMemInfo on the current device: (free, total), the device's figures (other
        processes' memory is not free). See :meth:`Device.mem_info`."""
        return self.current_device().mem_info(attr)

    def get_mem_usage_info(self, device_id: object, input_num: object) -> list[UsageInfo]:
        """aclrtGetMemUsageInfo: components by current bytes, descending, at most input_num.

        As every memory call, it needs a current device on the calling thread; ``device_id``
        may name any device (DECISION). A device never used reports no components. The rows
        are this process's components, not other processes' on the same device (DECISION:
        the driver's halGetMemUsageInfo, ascend_hal_base.h, says only "the memory usage of
        each module").

        Raises:
            DeviceNotSet: no current device. InvalidDevice: bad id.
            FeatureNotSupported: a product without usage info (950PR/DT).
            InvalidArgument: input_num < 1.
        """
        self.current_device()
        return [UsageInfo(*row) for row in self._table.usage(device_id, input_num)]

    def check_mem_type(self, addr_list: object, mem_type: object, reserve: object = 0) -> int:
        """aclrtCheckMemType: 1 when every address lies in a live block of a type in mem_type.

        An address counts when it lies inside a block's footprint (DECISION). On a product
        where DVPP memory is ordinary device memory (Ascend 950PR/950DT: "no separate
        ACL_RT_MEM_TYPE_DVPP, treated as ordinary Device memory", aclrtCheckMemType notes),
        the DVPP bit asks for device memory (DECISION: the docs' "treated as" read for the
        query too).

        Raises:
            InvalidArgument: empty list, a mem_type with unknown or no bits, reserve != 0.
        """
        self.current_device()
        addrs, kinds = parse_mem_type_query(addr_list, mem_type, reserve)
        return int(self._table.all_of_type(addrs, kinds))

    # -- configuration (runtime.config reads the file; runtime.active is aclInit) ------------

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | None) -> Runtime:
        """A runtime from an aclInit JSON config (already parsed); see :func:`parse_config`."""
        return cls(**parse_config(config))

    def adopt_config(self, options: Mapping[str, Any]) -> None:
        """Apply aclInit options (from :func:`parse_config`) to this active runtime.

        Faults and the default device always apply. A product, profile override or sanitizer
        applies only while no device has been made; after that it is refused, because the
        simulation the caller set up (a test fixture, ``ascend-memsim run``) is already in use.
        All is checked before anything changes.

        Raises:
            InvalidArgument: a product, override or sanitizer the runtime can no longer take.
            InvalidDevice: a default device outside the (new) device count.
        """
        with self._table.lock:
            plan = plan_adoption(options, self.profile, in_use=bool(self._table),
                                 leak_check=self.sanitizer.leak_check)
            checker = None if plan.checker is None else make_checker(plan.checker)
            self.profile = plan.profile
            if plan.run_mode is not None:
                self.run_mode = plan.run_mode
            if checker is not None:
                checker.leak_sink = self.sanitizer.leak_sink  # a tool's own leak check stays
                self.sanitizer.detach(self)
                self.sanitizer = checker
                checker.attach(self)
            for interceptor in plan.interceptors:
                self.add_interceptor(interceptor)
            self._adopted = (plan.interceptors, plan.default_device, self.threads.default_device)
            if plan.default_device is not None:
                self.threads.default_device = plan.default_device
                device = self._table.acquire(plan.default_device, thread=False)
                if self._table.wants("set_device"):
                    self._emit("set_device", device)

    def release_adoption(self) -> None:
        """aclFinalize of an adopted runtime: take back what :meth:`adopt_config` added (the
        config's faults, the default device's reference, the default device itself); the
        product, capacities and sanitizer it set before any device existed stay."""
        interceptors, default, previous = self._adopted
        self._adopted = ((), None, None)
        for interceptor in interceptors:
            if interceptor in self._table.interceptors:
                self.remove_interceptor(interceptor)
        if default is not None:
            self.threads.default_device = previous
            self.reset_device(default)
