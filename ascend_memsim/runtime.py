"""The simulated runtime of one process: devices, the current device per thread, init/config.

>>> from ascend_memsim import Runtime, MiB
>>> with Runtime("A2", hbm_bytes=64 * MiB) as rt:
...     _ = rt.set_device(0)
...     ptr = rt.malloc(100)
...     rt.block(ptr).footprint, rt.get_mem_info(1)
...     rt.free(ptr)
(192, (67108672, 67108864))

A :class:`Runtime` used as a context manager becomes the *active* one: the pyacl face
(:mod:`ascend_memsim.acl`) talks to it. ``acl.init`` creates and activates one from its JSON
config; ``acl.finalize`` discards it. Activations nest.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ._checks import SIZE_MAX, UINT32_MAX, as_int, as_ptr, int_or_none
from .constants import MODULE_APP, MallocAttrType, MallocPolicy, MemType, RunMode
from .contents import DataPlane
from .device import DEVICE_SPAN, Api, Block, Device, device_of
from .errors import (
    AlreadyFinalized,
    AlreadyInitialized,
    DeviceNotSet,
    FeatureNotSupported,
    InvalidArgument,
    InvalidArgumentType,
    InvalidDevice,
    InvalidPointer,
    InvalidRuntimeParam,
    NotInitialized,
)
from .host import HostMemory
from .profiles import DEFAULT_PRODUCT, Profile, get_profile
from .streams import Streams

__all__ = [
    "Runtime", "UsageInfo", "current_runtime", "acl_init", "acl_finalize", "CONFIG_KEYS",
    "parse_malloc_config",
]


@dataclass(frozen=True, slots=True)
class UsageInfo:
    """One row of aclrtGetMemUsageInfo (aclrtMemUsageInfo): a component's bytes."""

    name: str
    cur_mem_size: int
    mem_peak_size: int


_ALL_MEM_TYPES = int(MemType.DEV | MemType.DVPP | MemType.RSVD)

#: Keys a ``"memsim"`` config object may hold, each with the function that applies it to the
#: keyword arguments of :class:`Runtime`. Later layers (sanitizer, faults) add their own.
CONFIG_KEYS: dict[str, Callable[[dict, Any], None]] = {
    "product": lambda kw, v: kw.__setitem__("product", v),
    "device_count": lambda kw, v: kw.__setitem__("device_count", v),
    "hbm_bytes": lambda kw, v: kw.__setitem__("hbm_bytes", v),
    "ddr_bytes": lambda kw, v: kw.__setitem__("ddr_bytes", v),
}


def parse_malloc_config(cfg: object) -> dict[int, int]:
    """An aclrtMallocConfig given as ``{attr_type: value}`` or ``[(attr_type, value), ...]``.

    Raises:
        InvalidArgument, InvalidArgumentType: an unknown attribute type or a bad value.
    """
    if cfg is None:
        return {}
    if isinstance(cfg, Mapping):
        pairs: Iterable = cfg.items()
    elif isinstance(cfg, (list, tuple)):
        pairs = cfg
    else:
        raise InvalidArgumentType(
            f"cfg must be a dict {{attr_type: value}} or a list of pairs, got {type(cfg).__name__}")
    attrs: dict[int, int] = {}
    for pair in pairs:
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise InvalidArgumentType(f"cfg entry {pair!r} is not an (attr_type, value) pair")
        kind = as_int(pair[0], "cfg attr_type", 0, SIZE_MAX)
        if kind not in MallocAttrType._value2member_map_:
            # memory.cpp: an unknown attribute type is ACL_ERROR_RT_PARAM_INVALID.
            raise InvalidRuntimeParam(f"cfg attr_type {kind} is not an aclrtMallocAttrType "
                                  f"({', '.join(f'{m.name}={m.value}' for m in MallocAttrType)})")
        attrs[kind] = as_int(pair[1], f"cfg {MallocAttrType(kind).name}", 0, SIZE_MAX)
    return attrs


class Runtime:
    """A fresh simulated runtime: one product, its devices, reference-counted contexts.

    Keyword arguments override the product's profile for this simulation only
    (``hbm_bytes``, ``ddr_bytes``, ``device_count``, ``huge1g``, ...).
    ``default_device`` makes that device current for threads that never set one
    (aclInit's ``defaultDevice`` config). ``interceptors`` are added as by
    :meth:`add_interceptor` (the ``faults`` config key uses it). ``sanitizer`` is a mode
    (``"report"``, the default, ``"strict"``, ``"off"``), a dict of options or a
    :class:`~ascend_memsim.sanitizer.Sanitizer`.
    """

    def __init__(self, product: str | Profile = DEFAULT_PRODUCT, *,
                 default_device: int | None = None, interceptors: Iterable[Callable] = (),
                 sanitizer: Any = "report",
                 **overrides: Any) -> None:
        self.profile = get_profile(product).with_overrides(**overrides)
        self._lock = threading.RLock()
        self._local = threading.local()
        self._devices: dict[int, Device] = {}
        self._refs: dict[int, int] = {}
        #: set by acl.init / cleared by acl.finalize
        self.acl_initialized = False
        self._owned_by_acl = False
        self.default_device: int | None = None
        #: observers given to every device this runtime creates (see Device.observers)
        self.observers: list = []
        self.interceptors: list = list(interceptors)
        #: passed to every device: keep each block's allocation site (see ascend_memsim.sites)
        self.record_sites = False
        #: host memory, byte moves, streams and contexts (host.py, contents.py, streams.py)
        self.host = HostMemory()
        self.host_limit = DEVICE_SPAN
        self.data = DataPlane(self)
        self.streams = Streams(self)
        self.sanitizer = self._make_sanitizer(sanitizer)
        self.sanitizer.attach(self)
        if default_device is not None:
            self.default_device = self._check_id(default_device)
            self.set_device(self.default_device, _thread=False)

    def __repr__(self) -> str:
        return f"Runtime({self.profile.name!r}, devices={self.device_count})"

    @staticmethod
    def _make_sanitizer(spec: Any):
        # Imported here: the sanitizer module registers its config key in CONFIG_KEYS.
        from .sanitizer import Sanitizer

        return Sanitizer.make(spec)

    # -- activation (the face talks to the active runtime) -----------------------------------

    def __enter__(self) -> Runtime:
        with _active_lock:
            _active.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        with _active_lock:
            for i in range(len(_active) - 1, -1, -1):
                if _active[i] is self:
                    del _active[i]
                    break
            still_active = any(r is self for r in _active)
        if not still_active:
            self.close()

    def close(self) -> list[Block]:
        """Reset every device (as aclFinalize does); the blocks that were still live."""
        leaked: list[Block] = []
        with self._lock:
            for device_id in sorted(self._devices):
                self.streams.drop_device(device_id)
                self.sanitizer.forget_device(self._devices[device_id])
                leaked.extend(self._devices[device_id].reset())
            self._refs.clear()
            self._local = threading.local()
            host_leaked = self.host.clear()
        self.sanitizer.leaks("aclFinalize", [*leaked, *host_leaked])
        return leaked

    # -- devices and contexts ------------------------------------------------------------------

    @property
    def device_count(self) -> int:
        return self.profile.device_count

    def _check_id(self, device_id: object) -> int:
        number = as_int(device_id, "device id", None, None)
        if not 0 <= number < self.profile.device_count:
            raise InvalidDevice(f"device id {number} is outside [0, {self.profile.device_count})"
                                f" on {self.profile.description}")
        return number

    def device(self, device_id: object) -> Device:
        """The simulated device ``device_id`` (made on first use).

        Raises:
            InvalidDevice: an id outside ``[0, device_count)``.
        """
        number = self._check_id(device_id)
        device = self._devices.get(number)
        if device is None:
            with self._lock:
                device = self._devices.get(number)
                if device is None:
                    device = Device(self.profile, number)
                    device.observers.extend(self.observers)
                    device.interceptors.extend(self.interceptors)
                    device.record_sites = self.record_sites
                    self._devices[number] = device
        return device

    def set_record_sites(self, on: bool = True) -> None:
        """Make every device (now and later) keep each block's allocation site."""
        with self._lock:
            self.record_sites = on
            for device in self._devices.values():
                device.record_sites = on

    def add_observer(self, observer: Callable) -> None:
        """Call ``observer(event, device, info)`` for every event of every device, now and
        later, and for the runtime's own events (``set_device``, ``reset_device``).

        Device events: ``malloc`` (block, request), ``malloc_failed`` (request, error),
        ``free`` (block), ``reset`` (blocks still live).
        """
        self._hook("observers", observer, add=True)

    def remove_observer(self, observer: Callable) -> None:
        """Stop calling ``observer``."""
        self._hook("observers", observer, add=False)

    def add_interceptor(self, interceptor: Callable) -> None:
        """Call ``interceptor(request)`` before every allocation on every device (see
        :attr:`Device.interceptors`): raise an AclError to fail it, or return pages to refuse.
        """
        self._hook("interceptors", interceptor, add=True)

    def remove_interceptor(self, interceptor: Callable) -> None:
        """Stop calling ``interceptor``."""
        self._hook("interceptors", interceptor, add=False)

    def _hook(self, table: str, fn: Callable, *, add: bool) -> None:
        """Add ``fn`` to (or remove it from) this runtime's and every device's ``table``."""
        with self._lock:
            for owner in (self, *self._devices.values()):
                hooks = getattr(owner, table)
                if add:
                    hooks.append(fn)
                else:
                    hooks.remove(fn)

    def _emit(self, event: str, device: Device, **info: object) -> None:
        for observer in list(self.observers):
            observer(event, device, info)

    def devices(self) -> list[Device]:
        """The devices made so far, by id."""
        with self._lock:
            return [self._devices[i] for i in sorted(self._devices)]

    def set_device(self, device_id: object, *, _thread: bool = True) -> Device:
        """Make ``device_id`` the calling thread's current device (aclrtSetDevice).

        Reference counted: each call needs one :meth:`reset_device`.
        """
        device = self.device(device_id)
        with self._lock:
            self._refs[device.device_id] = self._refs.get(device.device_id, 0) + 1
        if _thread:
            self._local.device = device.device_id
        if self.observers:
            self._emit("set_device", device)
        return device

    def reset_device(self, device_id: object) -> None:
        """Drop one reference (aclrtResetDevice); the last one discards the device's blocks.

        Resetting a device that holds no reference does nothing (DECISION).
        """
        number = self._check_id(device_id)
        with self._lock:
            refs = self._refs.get(number, 0)
            if refs == 0:
                return
            if refs == 1:
                del self._refs[number]
                device = self._devices[number]
                self.streams.drop_device(number)
                self.sanitizer.forget_device(device)
                self.sanitizer.leaks("aclrtResetDevice", device.reset())
            else:
                self._refs[number] = refs - 1
        if getattr(self._local, "device", None) == number and number not in self._refs:
            self._local.device = None
        if self.observers:
            self._emit("reset_device", self._devices[number])

    def get_device(self) -> int:
        """The calling thread's current device id (aclrtGetDevice).

        Raises:
            DeviceNotSet: none set.
        """
        return self.current_device().device_id

    def thread_context(self) -> int | None:
        """The context handle current on this thread (aclrtSetCurrentContext), or None."""
        return getattr(self._local, "context", None)

    def set_thread_context(self, handle: int | None, device_id: int | None = None) -> None:
        """Make ``handle`` this thread's context and, given ``device_id``, that device
        current too (the context holds a reference to it: see Streams.create_context)."""
        self._local.context = handle
        if device_id is not None:
            self._local.device = device_id

    def current_device(self) -> Device:
        """The calling thread's current :class:`Device`.

        Raises:
            DeviceNotSet: no set_device on this thread (and no default device).
        """
        number = getattr(self._local, "device", None)
        if number is None:
            number = self.default_device
        if number is None or number not in self._refs:
            raise DeviceNotSet("no current device on this thread: call set_device(device_id) "
                               "first")
        return self._devices[number]

    def current_device_or_none(self) -> Device | None:
        """The calling thread's current :class:`Device`, or None when it has none."""
        number = getattr(self._local, "device", None)
        if number is None:
            number = self.default_device
        if number is None or number not in self._refs:
            return None
        return self._devices[number]

    # -- allocation ----------------------------------------------------------------------------

    def malloc(self, size: object, policy: object = MallocPolicy.HUGE_FIRST) -> int:
        """aclrtMalloc on the current device: the block's address. See :meth:`Device.malloc`."""
        return self.current_device().malloc(size, policy, api=Api.MALLOC)

    def malloc_align32(self, size: object, policy: object = MallocPolicy.HUGE_FIRST) -> int:
        """aclrtMallocAlign32: size rounded to 32 bytes only, on every product."""
        return self.current_device().malloc(size, policy, api=Api.MALLOC_ALIGN32)

    def malloc_cached(self, size: object, policy: object = MallocPolicy.HUGE_FIRST) -> int:
        """aclrtMallocCached: as aclrtMalloc, four policies only."""
        return self.current_device().malloc(size, policy, api=Api.MALLOC_CACHED)

    def malloc_with_cfg(self, size: object, policy: object = MallocPolicy.HUGE_FIRST,
                        cfg: object = None) -> int:
        """aclrtMallocWithCfg: ``cfg`` may name the module id and the device id."""
        return self._malloc_cfg(size, policy, cfg, Api.MALLOC_WITH_CFG)

    def malloc_for_task_scheduler(self, size: object,
                                  policy: object = MallocPolicy.HUGE_FIRST,
                                  cfg: object = None) -> int:
        """aclrtMallocForTaskScheduler: as aclrtMallocWithCfg (DECISION: same rounding)."""
        return self._malloc_cfg(size, policy, cfg, Api.MALLOC_FOR_TASK_SCHEDULER)

    def _malloc_cfg(self, size: object, policy: object, cfg: object, api: Api) -> int:
        attrs = parse_malloc_config(cfg)
        device = self.current_device()
        if MallocAttrType.DEVICE_ID in attrs:
            named = self._check_id(attrs[MallocAttrType.DEVICE_ID])
            if named != device.device_id:
                # memory.cpp: a config device other than the current one is refused.
                raise InvalidRuntimeParam(f"cfg DEVICE_ID {named} is not the current device "
                                          f"{device.device_id}")
        module = attrs.get(MallocAttrType.MODULE_ID, MODULE_APP)
        return device.malloc(size, policy, api=api, module=module)

    def free(self, ptr: object) -> None:
        """aclrtFree: release at once, no synchronisation. See :meth:`Device.free`.

        Raises:
            InvalidArgument, InvalidArgumentType: NULL or not an int (the ACL layer's check,
            before the current device's). InvalidPointer: not a live block's start, or a DVPP
            block (DECISION, see :meth:`_release`).
        """
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
        if self._freeable(device, ptr, call):
            self.synchronize_device_of(device)
        self._release(device, ptr, call)

    @staticmethod
    def _freeable(device: Device, ptr: int, call: str) -> bool:
        """True when a live block of the kind ``call`` frees starts at ``ptr``.

        DECISION: aclrtFree and aclrtFreeWithDevSync free only aclrtMalloc / Cached / Align32
        memory (vendor docs), and acldvppFree only DVPP memory: each refuses the other's
        blocks with ACL_ERROR_RT_PARAM_INVALID.

        Raises:
            InvalidPointer: a live block of the other kind.
        """
        block = device.block(ptr)
        if block is None:
            return False
        if (block.mem_type == MemType.DVPP) != (call == "acldvppFree"):
            if call == "acldvppFree":
                raise InvalidPointer(f"acldvppFree of the {block.describe()}, which is not "
                                     f"DVPP memory (use acl.rt.free)")
            raise InvalidPointer(f"{call} of the {block.describe()}, which is DVPP memory "
                                 f"(use acl.media.dvpp_free)")
        return True

    def _release(self, device: Device, ptr: int, call: str) -> None:
        """The one release path of device memory: the DVPP rule (:meth:`_freeable`), then the
        sanitizer's checks."""
        self._freeable(device, ptr, call)
        if self.sanitizer.on:
            self.sanitizer.free(device, ptr, call)
        else:
            device.free(ptr)

    def synchronize_device_of(self, device: Device) -> None:
        """Run the device's queued work (see :meth:`Streams.synchronize_device`)."""
        self.streams.synchronize_device(device.device_id)

    # -- memory contents, host memory, streams (contents.py, host.py, streams.py) -----------

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

    def synchronize_device(self) -> None:
        """aclrtSynchronizeDevice: run the current device's queued work."""
        self.synchronize_device_of(self.current_device())

    def malloc_host(self, size: object) -> int:
        """aclrtMallocHost: 64-byte aligned host memory. See :class:`HostMemory`.

        As every memory call, it needs a current device (SPEC 4).
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

        DECISION: placed and rounded as aclrtMalloc with HUGE_FIRST.
        """
        return self.current_device().malloc(size, MallocPolicy.HUGE_FIRST, api=Api.MALLOC,
                                            mem_type=MemType.DVPP)

    def dvpp_free(self, ptr: object) -> None:
        """acldvppFree: free a block made by dvpp_malloc.

        Raises:
            InvalidPointer: a live block that is not DVPP memory (DECISION), or as free.
        """
        ptr = as_ptr(ptr)
        self._release(self._owner(ptr), ptr, "acldvppFree")

    def get_run_mode(self) -> RunMode:
        """aclrtGetRunMode: DECISION: ACL_HOST, the program runs on a host with the device
        attached (the simulator has no on-device mode)."""
        return RunMode.HOST

    def _owner(self, ptr: object) -> Device:
        """The device whose window holds ``ptr``, else the current one (which must exist).

        A bad pointer is left for the device to refuse, with its own message.
        """
        current = self.current_device()
        device = self.device_holding(ptr)
        return current if device is None else device

    def device_holding(self, addr: object) -> Device | None:
        """The device whose window holds ``addr`` (any integer type), or None."""
        addr = int_or_none(addr)
        return self._devices.get(device_of(addr)) if addr is not None and addr > 0 else None

    def block(self, ptr: object) -> Block | None:
        """The live block starting at ``ptr`` on any device, or None."""
        device = self.device_holding(ptr)
        return None if device is None else device.block(ptr)

    def block_at(self, addr: object) -> Block | None:
        """The live block whose footprint holds ``addr`` on any device, or None."""
        device = self.device_holding(addr)
        return None if device is None else device.block_at(addr)

    def blocks(self) -> list[Block]:
        """Every live block of every device, by device then address."""
        return [b for d in self.devices() for b in d.blocks()]

    # -- queries -------------------------------------------------------------------------------

    def get_mem_info(self, attr: object) -> tuple[int, int]:
        """aclrtGetMemInfo on the current device: (free, total). See :meth:`Device.mem_info`."""
        return self.current_device().mem_info(attr)

    def get_mem_usage_info(self, device_id: object, input_num: object) -> list[UsageInfo]:
        """aclrtGetMemUsageInfo: components by current bytes, descending, at most input_num.

        As every memory call, it needs a current device on the calling thread; ``device_id``
        may name any device (DECISION). A device never used reports no components.

        Raises:
            DeviceNotSet: no current device. InvalidDevice: bad id.
            FeatureNotSupported: a product without usage info (950PR/DT).
            InvalidArgument: input_num < 1.
        """
        self.current_device()
        number = self._check_id(device_id)
        if not self.profile.usage_info:
            raise FeatureNotSupported(
                f"aclrtGetMemUsageInfo is not supported on {self.profile.description}")
        count = as_int(input_num, "input_num", 1, SIZE_MAX)
        device = self._devices.get(number)
        return [] if device is None else [UsageInfo(*row) for row in device.usage()[:count]]

    def check_mem_type(self, addr_list: object, mem_type: object, reserve: object = 0) -> int:
        """aclrtCheckMemType: 1 when every address lies in a live block of a type in mem_type.

        An address counts when it lies inside a block's footprint (DECISION).

        Raises:
            InvalidArgument: empty list, a mem_type with unknown or no bits, reserve != 0.
        """
        self.current_device()
        if not isinstance(addr_list, (list, tuple)):
            raise InvalidArgumentType(f"addr_list must be a list of ints, got "
                                      f"{type(addr_list).__name__}")
        if not addr_list:
            raise InvalidArgument("addr_list is empty")
        addrs = [as_int(a, f"addr_list[{i}]") for i, a in enumerate(addr_list)]
        kinds = as_int(mem_type, "mem_type", 0, UINT32_MAX)
        if not kinds or kinds & ~_ALL_MEM_TYPES:
            raise InvalidArgument(f"mem_type={kinds:#x} must be a non-empty OR of "
                                  f"ACL_RT_MEM_TYPE_DEV/DVPP/RSVD (0x2, 0x8, 0x10)")
        if as_int(reserve, "reserve", 0, UINT32_MAX) != 0:
            raise InvalidArgument("reserve must be 0")
        for addr in addrs:
            block = self.block_at(addr)
            if block is None or not block.mem_type & kinds:
                return 0
        return 1

    # -- configuration -------------------------------------------------------------------------

    @staticmethod
    def config_options(config: Mapping[str, Any] | None) -> dict[str, Any]:
        """The :class:`Runtime` keyword arguments an aclInit JSON config (parsed) asks for.

        ``{"memsim": {"product": "A2", "device_count": 2, "hbm_bytes": 67108864}}`` picks the
        product and overrides; ``{"defaultDevice": {"default_device": "0"}}`` sets a default
        device. Other top-level keys belong to the real runtime and are ignored.

        Raises:
            InvalidArgument: not a JSON object, an unknown memsim key, a bad value.
        """
        # The layers that own config keys register them on import; make sure they have.
        from . import faults, sanitizer  # noqa: F401
        if config is None:
            return {}
        if not isinstance(config, Mapping):
            raise InvalidArgument("the aclInit config must be a JSON object")
        section = config.get("memsim", {})
        if not isinstance(section, Mapping):
            raise InvalidArgument('"memsim" in the aclInit config must be a JSON object')
        options: dict[str, Any] = {}
        for key, value in section.items():
            apply = CONFIG_KEYS.get(key)
            if apply is None:
                raise InvalidArgument(f'unknown "memsim" config key {key!r}; known: '
                                      f"{sorted(CONFIG_KEYS)}")
            apply(options, value)
        default = config.get("defaultDevice")
        if default is not None:
            if not isinstance(default, Mapping):
                raise InvalidArgument('"defaultDevice" in the aclInit config must be a JSON '
                                      'object such as {"default_device": "0"}')
            if "default_device" in default:
                text = default["default_device"]
                # The vendor writes the id as a string of digits ("0"); a plain int is taken too.
                if isinstance(text, str) and text.strip().isdigit():
                    text = int(text)
                options["default_device"] = as_int(text, "defaultDevice.default_device", None,
                                                   None)
        return options

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | None) -> Runtime:
        """A runtime from an aclInit JSON config (already parsed); see :meth:`config_options`."""
        return cls(**cls.config_options(config))

    def adopt_config(self, options: Mapping[str, Any]) -> None:
        """Apply aclInit options (from :meth:`config_options`) to this active runtime.

        Faults and the default device always apply. A product, profile override or sanitizer
        applies only while no device has been made; after that it is refused, because the
        simulation the caller set up (a test fixture, ``ascend-memsim run``) is already in use.
        All is checked before anything changes.

        Raises:
            InvalidArgument: a product, override or sanitizer the runtime can no longer take.
            InvalidDevice: a default device outside the (new) device count.
        """
        options = dict(options)
        default = options.pop("default_device", None)
        interceptors = list(options.pop("interceptors", ()))
        sanitizer = options.pop("sanitizer", None)
        product = options.pop("product", None)
        with self._lock:
            profile, new_sanitizer = self.profile, None
            if product is not None or options or sanitizer is not None:
                if self._devices:
                    asked = ", ".join(f"{k}={v!r}" for k, v in
                                      [("product", product), *options.items(),
                                       ("sanitizer", sanitizer)] if v is not None)
                    raise InvalidArgument(
                        f"acl.init config asks for {asked}, but the active simulation "
                        f"({self.profile.name}) already has devices in use; configure the "
                        f"simulation where it is made (Runtime(...), the memsim marker, or "
                        f"ascend-memsim run --product)")
                base = self.profile if product is None else get_profile(product)
                profile = base.with_overrides(**options)
                if sanitizer is not None:
                    # Whoever set up this runtime chose who lists leaks (the pytest fixture
                    # and `run` list them themselves); a config that does not say keeps that.
                    if isinstance(sanitizer, str):
                        sanitizer = {"mode": sanitizer}
                    if isinstance(sanitizer, Mapping) and "leaks" not in sanitizer:
                        sanitizer = {**sanitizer, "leaks": self.sanitizer.leak_check}
                    new_sanitizer = self._make_sanitizer(sanitizer)
            if default is not None and not 0 <= default < profile.device_count:
                raise InvalidDevice(f"defaultDevice {default} is outside "
                                    f"[0, {profile.device_count})")
            self.profile = profile
            if new_sanitizer is not None:
                old = self.sanitizer
                old.detach(self)
                self.sanitizer = new_sanitizer
                new_sanitizer.attach(self)
            for interceptor in interceptors:
                self.add_interceptor(interceptor)
            if default is not None:
                self.default_device = default
                self.set_device(default, _thread=False)


# The active runtimes, innermost last. Process-global, as the real runtime is.
_active: list[Runtime] = []
_active_lock = threading.RLock()


def current_runtime() -> Runtime:
    """The active runtime (innermost ``with Runtime()`` or the one acl.init made).

    Raises:
        NotInitialized: none is active.
    """
    try:
        return _active[-1]
    except IndexError:
        raise NotInitialized("no simulated runtime: call acl.init() or enter "
                             "`with ascend_memsim.Runtime(...)`") from None


def _load_config(config_path: object) -> dict:
    if config_path is None or config_path == "":
        return {}
    if not isinstance(config_path, (str, os.PathLike)):
        raise InvalidArgumentType(f"config_path must be a str path, got "
                                  f"{type(config_path).__name__}")
    try:
        with open(config_path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise InvalidArgument(f"cannot read aclInit config {config_path!r}: {e.strerror}") from None
    except (UnicodeDecodeError, ValueError) as e:  # not UTF-8; a NUL in the path
        raise InvalidArgument(f"cannot read aclInit config {config_path!r}: {e}") from None
    if not text.strip():
        return {}
    try:
        config = json.loads(text)
    except (ValueError, RecursionError) as e:  # JSONDecodeError, too many digits, deep nesting
        raise InvalidArgument(f"aclInit config {config_path!r} is not valid JSON: "
                              f"{str(e)[:200]}") from None
    if not isinstance(config, dict):
        raise InvalidArgument(f"aclInit config {config_path!r} must hold a JSON object, "
                              f"not {type(config).__name__}")
    return config


def acl_init(config_path: object = None) -> Runtime:
    """aclInit: make (or adopt) the active runtime from the JSON config at ``config_path``.

    Inside ``with Runtime(...)`` the active runtime is adopted and the config applied to it
    (see :meth:`Runtime.adopt_config`).

    Raises:
        AlreadyInitialized: aclInit twice without aclFinalize.
        InvalidArgument: an unreadable or invalid config, or one the adopted runtime refuses.
    """
    with _active_lock:
        if _active and _active[-1].acl_initialized:
            raise AlreadyInitialized("acl.init was already called; call acl.finalize first")
        options = Runtime.config_options(_load_config(config_path))
        if _active:
            runtime = _active[-1]
            runtime.adopt_config(options)
        else:
            runtime = Runtime(**options)
            runtime._owned_by_acl = True
            _active.append(runtime)
        runtime.acl_initialized = True
        return runtime


def acl_finalize() -> None:
    """aclFinalize: discard the runtime acl.init made (or release an adopted one's hold).

    Raises:
        AlreadyFinalized: no acl.init is in force.
    """
    with _active_lock:
        # The innermost runtime that acl.init made or adopted, though a `with` may sit inside.
        runtime = next((r for r in reversed(_active) if r.acl_initialized), None)
        if runtime is None:
            raise AlreadyFinalized("acl.finalize without a matching acl.init")
        runtime.acl_initialized = False
        if runtime._owned_by_acl:
            _active.remove(runtime)
            runtime.close()
