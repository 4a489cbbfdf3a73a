"""Device variables (hicann/runtime ``docs/zh/api_ref/11-11_device_variable_memory_operation.md``):
``__gm__`` globals of kernels, which a program finds, reads and writes through their symbol.

In Ascend C a device variable is a global ``__gm__`` variable of a kernel binary; the program
names it by the address of its host shadow (``aclrtGetSymbolAddress(&var, &devPtr)``), which
the compiler's registration (``SymbolTable::Register``, ``src/runtime/core/src/kernel/
symbol_table.cc``) maps to the variable's place in the binary and its size. The simulator's
kernels are Python functions, so a program declares a variable with :func:`device_variable`
(name, size, initial bytes) and hands it to the kernels that use it,
``register_op("MyOp", fn, variables=[var])`` (DECISION, the simulator's stand-in for the
binary's registration). The variable's ``symbol`` is an int that stands for the host shadow's
address: what ``acl.rt.get_symbol_address(symbol)`` and the copies take. A kernel registered
with variables is called ``fn(inputs, attrs, outputs, variables)``: ``variables[name]`` is a
writable numpy uint8 array holding the variable's bytes on the launching device, stored back
when the kernel returns (change it in place, e.g. through ``.view(numpy.int64)``).

Memory. ``SymbolTable::GetDeviceAddress`` loads the binary to the device on first use
(``ElfProgram::Load2Device``): each variable gets device memory on a device the first time it
is needed there (aclrtGetSymbolAddress, a copy to or from it, a kernel that uses it), as an
aclrtMalloc block of the RUNTIME component (module 7), so it shows in aclrtGetMemInfo,
aclrtGetMemUsageInfo, statistics and memory maps; it holds the initial bytes, zeros past them
(a C global is zero-initialised). DECISIONs: one block per variable (a copy past the variable
is then caught); the memory is freed when the device is reset (its last aclrtResetDevice, or
aclFinalize): 11-11 is silent, and a loaded binary stays until its device goes. The program
may free the block with aclrtFree (nothing stops it on hardware either); the variable is then
loaded again, with its initial bytes, the next time it is needed.

Codes (``src/acl/aclrt_impl/memory.cpp``, aclrtGetSymbolAddressImpl to
aclrtMemcpyToSymbolAsyncImpl): a copy of count 0 succeeds before anything is checked; a NULL
symbol, destination or source, a count past dstMax, a kind the call does not take (from a
symbol: DEVICE_TO_HOST or DEFAULT; to one: HOST_TO_DEVICE or DEFAULT) and ``offset + count``
past the variable are ACL_ERROR_INVALID_PARAM; no current device is ACL_ERROR_RT_CONTEXT_NULL
(``ApiImpl::SymbolLookup``); a symbol no kernel registered is ACL_ERROR_RT_INVALID_SYMBOL
107043 (``SymbolTable::Lookup``); the copy itself is aclrtMemcpy's (or aclrtMemcpyAsync's)
with the direction the ACL layer fixes, so its rules apply. A failed call changes nothing:
memory loaded for it is given back.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field
from typing import Any, cast

from ..memory.args import SIZE_MAX, as_int, as_str
from ..memory.constants import MallocPolicy, MemcpyKind
from ..memory.device import Device
from ..memory.errors import InvalidArgument, InvalidArgumentType, UnknownSymbol
from ..memory.rules import Api
from ..runtime.sharing import emit

__all__ = ["DeviceVariable", "device_variable", "unregister_variable", "Symbols", "symbols",
           "SYMBOL_BASE", "MODULE_RUNTIME"]

#: Symbols are ints from here, 64 apart: never a memory address or another handle.
SYMBOL_BASE = 0x6_0000_0000
#: The log module the variables' memory is charged to (log_types.h: RUNTIME 7).
MODULE_RUNTIME = 7
#: The largest variable (SymbolEntry::deviceSymbolSize is a uint32_t).
_MAX_SIZE = (1 << 32) - 1

_lock = threading.Lock()
_numbers = itertools.count()
_registry: dict[int, DeviceVariable] = {}


@dataclass(frozen=True, eq=False)
class DeviceVariable:
    """A ``__gm__`` device variable: its name, size in bytes, initial bytes and symbol."""

    name: str
    size: int
    initial: bytes = field(repr=False)
    symbol: int


def device_variable(name: str, size: int, initial: bytes = b"") -> DeviceVariable:
    """Declare a device variable of ``size`` bytes for the whole process; its ``symbol`` is
    what the 11-11 calls take. ``initial`` (at most ``size`` bytes) is what it holds when
    it is loaded on a device, zeros after it.

    Raises:
        InvalidArgumentType: a name that is not a str, initial bytes that are not bytes.
        InvalidArgument: an empty name, a size outside [1, 2**32 - 1], more initial bytes
            than the size.
    """
    name = as_str(name, "name")
    size = as_int(size, "size", 1, _MAX_SIZE)
    if not isinstance(initial, (bytes, bytearray, memoryview)):
        raise InvalidArgumentType(f"initial must be bytes, got {type(initial).__name__}")
    initial = bytes(initial)
    if len(initial) > size:
        raise InvalidArgument(f"{len(initial)} initial bytes do not fit the {size}-byte "
                              f"variable {name!r}")
    with _lock:
        variable = DeviceVariable(name, size, initial, SYMBOL_BASE + 64 * next(_numbers))
        _registry[variable.symbol] = variable
    return variable


def unregister_variable(variable: DeviceVariable) -> None:
    """Forget a variable: its symbol is then unknown (107043). Memory a runtime loaded for it
    stays until that device is reset."""
    with _lock:
        symbol = getattr(variable, "symbol", None)
        if symbol is not None:
            _registry.pop(symbol, None)


def lookup(symbol: int) -> DeviceVariable:
    """The variable of ``symbol``. Raises UnknownSymbol."""
    variable = _registry.get(symbol)
    if variable is None:
        raise UnknownSymbol(f"symbol {symbol:#x} is no registered device variable "
                            f"(ascend_memsim.compute.symbols.device_variable)")
    return variable


class Symbols:
    """The device variables loaded by one runtime, per device (``Runtime.extension
    ("symbols")``). Thread-safe: one lock around loading and unloading."""

    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime
        self.lock = threading.RLock()
        #: (symbol, device id) -> (device, block)
        self._loaded: dict[tuple[int, int], tuple[Any, ...]] = {}

    def close(self) -> list[Any]:
        """aclFinalize: the variables were unloaded with their devices."""
        return []

    def forget_device(self, device_id: int) -> None:
        """The device is being reset: free its variables' memory (DECISION, see the module)."""
        with self.lock:
            gone = [(key, entry) for key, entry in self._loaded.items() if key[1] == device_id]
            for key, (device, block) in gone:
                del self._loaded[key]
                if device.block(block.ptr) is block:
                    device.free(block.ptr)
                    emit(self.runtime, "symbol_unload", device,
                         {"symbol": key[0], "name": _name(key[0]), "ptr": block.ptr})

    def loaded(self, variable: DeviceVariable, device: Any) -> tuple[int, bool]:
        """The variable's address on ``device``, loading it there first if need be; and
        whether this call loaded it. O(1) once loaded.

        Raises:
            OutOfDeviceMemory: no room for it.
        """
        key = (variable.symbol, device.device_id)
        with self.lock:
            entry = self._loaded.get(key)
            if entry is not None and device.block(entry[1].ptr) is entry[1]:
                return entry[1].ptr, False
            ptr = device.malloc(variable.size, MallocPolicy.HUGE_FIRST, api=Api.MALLOC,
                                module=MODULE_RUNTIME)
            self.runtime.data.write_bytes("aclrtGetSymbolAddress", ptr,
                                          variable.initial.ljust(variable.size, b"\0"))
            block = device.block(ptr)
            if block.extra is None:
                block.extra = {}  # the slot the block's bytes are kept in, too
            block.extra["owned_by_runtime"] = f"device variable {variable.name!r}"
            self._loaded[key] = (device, block)
            emit(self.runtime, "symbol_load", device,
                 {"symbol": variable.symbol, "name": variable.name, "ptr": ptr,
                  "size": variable.size})
            return ptr, True

    def unload(self, variable: DeviceVariable, device: Any) -> None:
        """Give back the memory a failed call loaded (a failed call changes nothing)."""
        with self.lock:
            entry = self._loaded.pop((variable.symbol, device.device_id), None)
            if entry is not None and device.block(entry[1].ptr) is entry[1]:
                device.free(entry[1].ptr)

    # -- the 11-11 calls ----------------------------------------------------------------------

    def _variable(self, symbol: object) -> tuple[DeviceVariable, Device]:
        """(variable, current device) of a symbol (memory.cpp: NULL is 100000;
        ApiImpl::SymbolLookup: no context 107002; SymbolTable::Lookup: unknown 107043)."""
        number = as_int(symbol, "symbol")
        if number == 0:
            raise InvalidArgument("symbol is NULL")
        device = self.runtime.current_device()
        return lookup(number), device

    def address(self, symbol: object) -> int:
        """aclrtGetSymbolAddress: the variable's device address on the current device (valid
        on this device only: 11-11, 切换Device后需重新获取地址)."""
        variable, device = self._variable(symbol)
        return self.loaded(variable, device)[0]

    def size(self, symbol: object) -> int:
        """aclrtGetSymbolSize: the variable's bytes (``SymbolTable::GetSize``; the ACL layer's
        rtSymbolLookup loads it on the device too)."""
        variable, device = self._variable(symbol)
        self.loaded(variable, device)
        return variable.size

    def copy_from(self, dst: object, dst_max: object, symbol: object, count: object,
                  offset: object, kind: object, stream: object = None) -> None:
        """aclrtMemcpyFromSymbol(Async): ``count`` bytes from ``offset`` in the variable to
        host memory at ``dst`` (DEVICE_TO_HOST; queued on ``stream`` unless None).

        Raises:
            InvalidArgument: a NULL pointer, ``count`` over ``dstMax``, a kind other than
                DEVICE_TO_HOST or DEFAULT, or a span past the variable.
            UnknownSymbol: ``symbol`` is no registered variable.
            DeviceNotSet: no device is current on this thread.
        """
        call = "aclrtMemcpyFromSymbol" + ("" if stream is None else "Async")
        dst, dst_max = as_int(dst, "dst"), as_int(dst_max, "dstMax")
        checked = self._checked(call, symbol, dst, "dst", count, offset, kind,
                                MemcpyKind.DEVICE_TO_HOST, dst_max)
        if checked is not None:
            variable, device, count, offset = checked
            self._copy(call, variable, device, offset, count, stream,
                       lambda src: (dst, dst_max, src, count, int(MemcpyKind.DEVICE_TO_HOST)))

    def copy_to(self, symbol: object, src: object, count: object, offset: object,
                kind: object, stream: object = None) -> None:
        """aclrtMemcpyToSymbol(Async): ``count`` bytes from host memory at ``src`` to
        ``offset`` in the variable (HOST_TO_DEVICE; queued on ``stream`` unless None).

        Raises:
            InvalidArgument: a NULL pointer, a kind other than HOST_TO_DEVICE or DEFAULT, or
                a span past the variable.
            UnknownSymbol: ``symbol`` is no registered variable.
            DeviceNotSet: no device is current on this thread.
        """
        call = "aclrtMemcpyToSymbol" + ("" if stream is None else "Async")
        src = as_int(src, "src")
        checked = self._checked(call, symbol, src, "src", count, offset, kind,
                                MemcpyKind.HOST_TO_DEVICE)
        if checked is not None:
            variable, device, count, offset = checked
            # memory.cpp: rtMemcpy(symbolAddr + offset, symbolSize - offset, src, count, H2D)
            self._copy(call, variable, device, offset, count, stream,
                       lambda base: (base, variable.size - offset, src, count,
                                     int(MemcpyKind.HOST_TO_DEVICE)))

    def _checked(self, call: str, symbol: object, host: int, host_name: str, count: object,
                 offset: object, kind: object, direction: MemcpyKind,
                 dst_max: int | None = None) -> tuple[DeviceVariable, Device, int, int] | None:
        """The checks of a copy from or to a symbol, in memory.cpp's order: (variable,
        device, count, offset); None when ``count`` is 0 (it succeeds before any check)."""
        count, offset = as_int(count, "count"), as_int(offset, "offset")
        kind = as_int(kind, "kind", -(1 << 31), (1 << 31) - 1)
        if count == 0:
            return None
        if as_int(symbol, "symbol") == 0 or host == 0:
            raise InvalidArgument(f"{call}: {host_name if host == 0 else 'symbol'} is NULL")
        if dst_max is not None and count > dst_max:
            raise InvalidArgument(f"{call}: count {count} is more than dstMax {dst_max}")
        if kind not in (direction, MemcpyKind.DEFAULT):
            raise InvalidArgument(f"{call}: kind {kind} is not ACL_MEMCPY_{direction.name} "
                                  f"({int(direction)}) or ACL_MEMCPY_DEFAULT (4)")
        variable, device = self._variable(symbol)
        _check_span(call, variable, offset, count)
        return variable, device, count, offset

    def _copy(self, call: str, variable: DeviceVariable, device: Any, offset: int, count: int,
              stream: object, arguments: Any) -> None:
        """Load the variable if need be and run aclrtMemcpy(Async) with ``arguments(address
        in the variable)``; memory loaded for a copy that fails is given back."""
        peak = device.peak_of(MODULE_RUNTIME)
        ptr, fresh = self.loaded(variable, device)
        runtime = self.runtime
        try:
            if stream is None:
                runtime.memcpy(*arguments(ptr + offset))
            else:
                runtime.memcpy_async(*arguments(ptr + offset), stream)
        except BaseException:
            if fresh:
                self.unload(variable, device)
                device.restore_peak(MODULE_RUNTIME, peak)
            raise
        # (the stream handle the copy above checked is an int)
        emit(runtime, "symbol_copy", device,
             {"call": call, "symbol": variable.symbol, "name": variable.name, "offset": offset,
              "count": count,
              "stream": None if stream is None else int(stream)})  # type: ignore[call-overload]


def _check_span(call: str, variable: DeviceVariable, offset: int, count: int) -> None:
    """memory.cpp GetSymbolInfo: offset + count (no overflow) within the variable."""
    if offset + count > min(variable.size, SIZE_MAX):
        raise InvalidArgument(f"{call}: offset {offset} + count {count} is past the "
                              f"{variable.size}-byte variable {variable.name!r}")


def _name(symbol: int) -> str:
    variable = _registry.get(symbol)
    return "" if variable is None else variable.name


def symbols(runtime: Any) -> Symbols:
    """The runtime's :class:`Symbols`, made on first use (``Runtime.extension``)."""
    return cast("Symbols", runtime.extension("symbols", Symbols))
