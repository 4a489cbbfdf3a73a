"""Host memory the device may reach: aclrtHostRegister / V2, aclrtHostGetDevicePointer,
aclrtHostUnregister, aclrtHostMemMapCapabilities, and the rest of the host chapter
(aclrtMallocHostWithCfg, aclrtFreeHostWithDevSync).

The rules (hicann/runtime):

* ``src/acl/aclrt_impl/memory.cpp``: NULL ``ptr`` and ``size`` 0 are ACL_ERROR_INVALID_PARAM
  (aclrtHostRegisterImpl, aclrtHostRegisterV2Impl, aclrtHostUnregisterImpl); GetDevicePointer's
  ``flag`` is reserved: not 0 is ACL_ERROR_INVALID_PARAM.
* ``src/runtime/api/impl/api_error.cc``: HostRegister's ``type`` may only carry IOMEMORY and
  READONLY bits, else ACL_ERROR_RT_FEATURE_NOT_SUPPORT; HostRegisterV2's ``flag`` must be a
  non-empty OR of MAPPED, IOMEMORY, READONLY and PINNED, else RT_ERROR_INVALID_VALUE
  (ACL_ERROR_RT_PARAM_INVALID).
* ``src/runtime/api/impl/api_impl.cc`` (HostRegisterV2, HostUnregister, HostGetDevicePointer)
  and ``src/runtime/core/src/common/register_memory.cc``: a range that overlaps a registered one
  is ACL_ERROR_HOST_MEMORY_ALREADY_REGISTERED (507910); a MAPPED registration records the
  pair (host base, device address), a PINNED one the range; Unregister takes the base of a
  registration (anything else: ACL_ERROR_HOST_MEMORY_NOT_REGISTERED, 507911) and drops both;
  GetDevicePointer answers for the base of a MAPPED registration only (else 107000). Each
  needs a current context (107002).
* ``docs/zh/api_ref/11-02_host_memory_management.md``: the device address "cannot be used for
  memory operations such as copies"; the host address must be 4 KB aligned; PINNED on memory
  that is already page-locked (aclrtMallocHost) is an error; IOMEMORY and READONLY are
  reserved, "not supported yet"; A2, A3 and 950 support registration, the inference parts do
  not.

DECISIONs (the driver's own checks are not public):

* the host range must be memory the process has: inside one aclrtMallocHost block, or
  mapped process memory (``/proc/self/maps``) outside the storage the simulator keeps for
  host blocks (a freed block's among it), checked as every raw host access is, else 107000;
  it must start on a 4 KiB page or at the start of an aclrtMallocHost block (real
  aclrtMallocHost memory is page-aligned; the simulator's is 64-byte aligned, so its blocks
  are accepted at their start);
* HostRegister (V1) refuses an overlap with 507910 as V2 does; IOMEMORY and READONLY are
  ACL_ERROR_RT_FEATURE_NOT_SUPPORT in both; PINNED on an aclrtMallocHost block is 107000;
* the device address of a mapping is ``MAPPED_BASE + (device << 48) + host address``: an
  address no device block or host region holds, so a copy through it is refused (107000),
  as documented; registration changes no copy (every async copy is queued, pinned or not);
* HostMemMapCapabilities answers SUPPORTED for every accelerator type on a product that
  supports registration, NOT_SUPPORTED elsewhere;
* registrations still live at aclFinalize are dropped without a report;
* freeing a registered aclrtMallocHost block leaves its registration, as the runtime's
  ``ApiImpl::HostFree`` leaves the maps of ``register_memory.cc``: unregister first (a new
  block at the same address cannot be registered until then).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from ..memory.args import SIZE_MAX, as_int, as_ptr, as_size, parse_malloc_config
from ..memory.constants import HacType, HostRegFlag, MallocAttrType
from ..memory.errors import (
    FeatureNotSupported,
    HostMemoryAlreadyRegistered,
    HostMemoryNotRegistered,
    InvalidArgument,
    InvalidPointer,
    InvalidRuntimeParam,
)
from .host import HostBlock

__all__ = ["MAPPED_BASE", "PinnedHost", "Registered", "pinned_host"]

#: Where the device addresses of registered host memory start (see the module docstring).
MAPPED_BASE = 1 << 62
_PAGE = 4096
_V2_FLAGS = int(HostRegFlag.MAPPED | HostRegFlag.IOMEMORY | HostRegFlag.READONLY
                | HostRegFlag.PINNED)
_RESERVED_FLAGS = int(HostRegFlag.IOMEMORY | HostRegFlag.READONLY)


@dataclass(frozen=True, slots=True)
class Registered:
    """One registered host range: ``[ptr, ptr + size)``, its flags, and its device address
    (0 for a PINNED-only registration)."""

    ptr: int
    size: int
    flags: int
    device_ptr: int
    device_id: int


def _check_host_attrs(attrs: dict[int, int]) -> None:
    """Raises InvalidRuntimeParam for an attribute host memory does not take."""
    for kind in attrs:
        if kind not in (MallocAttrType.MODULE_ID, MallocAttrType.VA_FLAG):
            raise InvalidRuntimeParam(f"cfg attr {kind}: host memory takes only MODULE_ID (1) "
                                      f"and VA_FLAG (3)")


class PinnedHost:
    """The registered host ranges of one runtime (a plane made through
    ``Runtime.extension``). Thread-safe. Lookups are O(registrations)."""

    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime
        self.lock = threading.Lock()
        self._ranges: dict[int, Registered] = {}

    # -- aclrtMallocHostWithCfg / aclrtFreeHostWithDevSync ---------------------------------------

    def malloc_host_with_cfg(self, size: object, cfg: object) -> int:
        """aclrtMallocHostWithCfg: aclrtMallocHost with a config (module id, VA flag), given
        as ``{attr_type: value}`` or a list of pairs, as :meth:`Runtime.malloc_with_cfg` takes
        it (the face reads pyacl's dict with :func:`ascend_memsim.acl._pyacl.malloc_config`).

        DECISION: the config changes nothing the simulator shows (host memory is in no usage
        figure); it is checked as the runtime checks it.

        Raises:
            InvalidArgument, InvalidArgumentType, InvalidRuntimeParam: size 0, a bad cfg.
            DeviceNotSet, OutOfHostMemory: as malloc_host.
        """
        attrs = parse_malloc_config(cfg)
        as_size(size)                    # memory.cpp: ACL_REQUIRES_POSITIVE(size)
        # the runtime's ApiImpl::GetMallocHostConfigAttr: "申请内存的接口不支持传入其他类型cfg"
        _check_host_attrs(attrs)
        return int(self.runtime.malloc_host(size))

    def free_host_with_dev_sync(self, ptr: object) -> None:
        """aclrtFreeHostWithDevSync: run the current device's queued work, then free
        (11-02: "本接口内部会执行隐式Device同步"). A pointer that is not the start of a live
        aclrtMallocHost block is refused before anything runs.

        Raises:
            InvalidArgument: NULL. DeviceNotSet: no current device.
            InvalidPointer: not the start of a live aclrtMallocHost block.
        """
        runtime = self.runtime
        ptr = as_ptr(ptr)
        runtime.current_device()
        region = runtime.host.region_at(ptr)
        if not isinstance(region, HostBlock) or region.ptr != ptr:
            raise InvalidPointer(f"{ptr:#x} is not the start of a live aclrtMallocHost block")
        runtime.synchronize_device()
        runtime.free_host(ptr)

    # -- registration ----------------------------------------------------------------------------

    def _supported(self) -> None:
        if not self.runtime.profile.host_register:
            raise FeatureNotSupported(f"host memory registration is not supported on "
                                      f"{self.runtime.profile.description}")

    def _check_range(self, ptr: int, size: int, flags: int) -> None:
        """The range must be host memory of the process, page-aligned (module docstring)."""
        region = self.runtime.host.region_at(ptr)
        if isinstance(region, HostBlock):
            if ptr + size > region.ptr + region.limit:
                raise InvalidPointer(f"{size} bytes at {ptr:#x} run past the end of the "
                                     f"{region.describe()}")
            if ptr != region.ptr and ptr % _PAGE:
                raise InvalidPointer(f"{ptr:#x} is not 4 KB aligned (11-02)")
            if flags & HostRegFlag.PINNED:
                raise InvalidRuntimeParam(f"ACL_HOST_REG_PINNED: {ptr:#x} is aclrtMallocHost "
                                          f"memory, which is already page-locked (11-02)")
            return
        if region is not None:
            raise InvalidPointer(f"{ptr:#x} is a buffer handed in through acl.util, not host "
                                 f"memory a program registers")
        if ptr % _PAGE:
            raise InvalidPointer(f"{ptr:#x} is not 4 KB aligned (11-02)")
        host = self.runtime.host
        # the check every raw host access makes (HostMemory.foreign): mapped readable, and
        # not the storage the simulator keeps for host blocks (a freed one among them)
        if ptr + size > SIZE_MAX or host.foreign(ptr, size, False) is None:
            why = ("runs past the end of the address space" if ptr + size > SIZE_MAX
                   else host.refusal(ptr, size, False))
            raise InvalidPointer(f"{size} bytes at {ptr:#x} are not host memory of the "
                                 f"process: the range {why}")

    def _register(self, ptr: object, size: object, flags: int, call: str) -> Registered:
        ptr = as_ptr(ptr)
        size = as_size(size, "size")
        device = self.runtime.current_device()
        self._supported()
        if flags & _RESERVED_FLAGS:
            raise FeatureNotSupported(f"{call}: IOMEMORY and READONLY are reserved, not "
                                      f"supported yet (11-02)")
        self._check_range(ptr, size, flags)
        device_ptr = 0
        if flags & HostRegFlag.MAPPED:
            device_ptr = MAPPED_BASE + (device.device_id << 48) + ptr
        reg = Registered(ptr, size, flags, device_ptr, device.device_id)
        with self.lock:
            for other in self._ranges.values():
                if other.ptr < ptr + size and ptr < other.ptr + other.size:
                    # register_memory.cc CheckMemoryRangeRegistered
                    raise HostMemoryAlreadyRegistered(
                        f"{call}: {size} bytes at {ptr:#x} overlap the registered range "
                        f"{other.ptr:#x}..{other.ptr + other.size:#x}")
            self._ranges[ptr] = reg
        return reg

    def register(self, ptr: object, size: object, register_type: object) -> int:
        """aclrtHostRegister: map the range for the current device; its device address.

        Raises:
            InvalidArgument: NULL, size 0. FeatureNotSupported: a type other than MAPPED
            (0), or a product without registration. InvalidPointer: see the module docstring.
            HostMemoryAlreadyRegistered: overlaps a registration.
        """
        ptr = as_ptr(ptr)
        size = as_size(size, "size")
        register_type = as_int(register_type, "type", -(1 << 31), (1 << 31) - 1)
        if register_type & ~_RESERVED_FLAGS:
            # api_error.cc ApiErrorDecorator::HostRegister
            raise FeatureNotSupported(f"type={register_type:#x} is not an aclrtHostRegisterType")
        flags = int(HostRegFlag.MAPPED) | register_type
        return self._register(ptr, size, flags, "aclrtHostRegister").device_ptr

    def register_v2(self, ptr: object, size: object, flag: object) -> None:
        """aclrtHostRegisterV2: register the range with ``flag`` (ACL_HOST_REG_*).

        Raises:
            InvalidArgument: NULL, size 0. InvalidRuntimeParam: a flag outside the OR of
            ACL_HOST_REG_*, or 0. FeatureNotSupported, InvalidPointer,
            HostMemoryAlreadyRegistered: as :meth:`register`.
        """
        ptr = as_ptr(ptr)
        size = as_size(size, "size")
        flag = as_int(flag, "flag", 0, (1 << 32) - 1)
        if not flag & _V2_FLAGS or flag & ~_V2_FLAGS:
            # api_error.cc ApiErrorDecorator::HostRegisterV2
            raise InvalidRuntimeParam(f"flag={flag:#x}: the valid flag is an OR of "
                                      f"ACL_HOST_REG_MAPPED, IOMEMORY, READONLY and PINNED")
        self._register(ptr, size, flag, "aclrtHostRegisterV2")

    def unregister(self, ptr: object) -> None:
        """aclrtHostUnregister: drop the registration that starts at ``ptr``.

        Raises:
            InvalidArgument: NULL. DeviceNotSet: no current device.
            HostMemoryNotRegistered: no registration starts at ``ptr``.
        """
        ptr = as_ptr(ptr)
        self.runtime.current_device()
        self._supported()
        with self.lock:
            if self._ranges.pop(ptr, None) is None:
                raise HostMemoryNotRegistered(f"{ptr:#x} starts no registered host range")

    def device_pointer(self, host_ptr: object, flag: object) -> int:
        """aclrtHostGetDevicePointer: the device address of the mapping at ``host_ptr``.

        Raises:
            InvalidArgument: NULL, or ``flag`` not 0. DeviceNotSet: no current device.
            InvalidPointer: ``host_ptr`` is not the base of a MAPPED registration.
        """
        host_ptr = as_ptr(host_ptr, "host_ptr")
        flag = as_int(flag, "flag", 0, (1 << 32) - 1)
        if flag != 0:
            raise InvalidArgument(f"flag={flag}: reserved, must be 0")
        self.runtime.current_device()
        self._supported()
        with self.lock:
            reg = self._ranges.get(host_ptr)
        if reg is None or not reg.device_ptr:
            raise InvalidPointer(f"{host_ptr:#x} has not been registered for device address "
                                 f"mapping")
        return reg.device_ptr

    def map_capabilities(self, device_id: object, hac_type: object) -> int:
        """aclrtHostMemMapCapabilities: 1 (ACL_RT_HOST_MEM_MAP_SUPPORTED) or 0.

        Raises:
            InvalidDevice: a device id outside the range. InvalidRuntimeParam: a HAC type
            outside aclrtHacType. DeviceNotSet: no current device.
        """
        self.runtime._table.check_id(as_int(device_id, "device_id", 0, (1 << 32) - 1))
        hac = as_int(hac_type, "hac_type", -(1 << 31), (1 << 31) - 1)
        if hac not in HacType._value2member_map_:
            raise InvalidRuntimeParam(f"hac_type={hac} is outside [0, {len(HacType)})")
        self.runtime.current_device()
        return int(self.runtime.profile.host_register)

    # -- state -----------------------------------------------------------------------------------

    def holds(self, addr: int) -> bool:
        """True when a registration covers ``addr`` (register_memory.cc IsRegisteredMemory).
        O(registrations)."""
        with self.lock:
            return any(r.ptr <= addr < r.ptr + r.size for r in self._ranges.values())

    def registrations(self) -> list[Registered]:
        """The live registrations, by address."""
        with self.lock:
            return sorted(self._ranges.values(), key=lambda r: r.ptr)

    def snapshot(self) -> list[tuple[int, int, int, int]]:
        return [(r.ptr, r.size, r.flags, r.device_ptr) for r in self.registrations()]

    def close(self) -> list[object]:
        """aclFinalize: forget every registration (DECISION: not reported)."""
        with self.lock:
            self._ranges.clear()
        return []


def pinned_host(runtime: Any) -> PinnedHost:
    """The runtime's :class:`PinnedHost`, made on first use (``Runtime.extension``)."""
    found: PinnedHost = runtime.extension("pinned", PinnedHost)
    return found
