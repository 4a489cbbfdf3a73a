"""Custom memory allocators (the vendor chapter 11-08): allocator descriptors and their
registration on a stream.

``Runtime.custom_allocators`` is one :class:`CustomAllocators`. Sources: ``hicann/runtime``
``docs/zh/api_ref/11-08_custom_memory_allocator.md``, the header
``include/external/acl/acl_rt_allocator.h`` and the ACL layer
``src/acl/aclrt_impl/allocator.cpp``; how the graph engine uses a registered allocator:
``hicann/ge`` ``acl_resource_manager.cpp`` (``AclResourceManager::GetAllocators``,
``UpdateExternalAllocators``) and ``external_allocator.cc`` (``ExternalAllocator::Malloc``,
``MallocAdvise``, ``Free``).

The model:

* A descriptor (aclrtAllocatorCreateDesc) holds an allocator object and four callbacks, C
  semantics: ``alloc(obj, size) -> block``, ``free(obj, block)``, ``alloc_advise(obj, size,
  addr) -> block`` (optional) and ``get_addr(block) -> device address``; ``None`` (or 0) is
  NULL. The set calls refuse a NULL descriptor, object or function (allocator.cpp:
  ACL_REQUIRES_NOT_NULL, ACL_ERROR_INVALID_PARAM 100000). DECISION: a destroyed or unknown
  descriptor is ACL_ERROR_RT_INVALID_HANDLE 107017, as for streams (the C runtime reads
  freed memory).
* aclrtAllocatorRegister keeps a *copy* of the descriptor's fields under the stream
  (``g_AllocatorDesMap[stream]``): later set calls on the descriptor, or destroying it, do not
  change what is registered; registering again replaces it (11-08: "以最后一次注册为准").
  The stream is a key, not looked at: any non-NULL value registers (a destroyed stream too);
  NULL stream or descriptor, or a descriptor without object, alloc, free or get_addr, is
  100000 (alloc_advise may be NULL). DECISION: the runtime's default-initialised descriptor
  leaves the functions indeterminate; here an unset one is NULL.
* aclrtAllocatorGetByStream: NULL stream, or a stream with nothing registered, is 100000.
  aclrtAllocatorUnregister: NULL stream is 100000; a stream with nothing registered succeeds
  (11-08: the call "does nothing and returns success").
* A registration outlives its stream (aclrtDestroyStream does not touch the runtime's map;
  only the graph engine's cache of it is cleared). DECISION: a descriptor never destroyed and
  a registration never unregistered are reported as leaks at aclFinalize (11-08 asks the
  program to unregister before it destroys its allocator).
* Operators and models ask the registered allocator for their workspace through
  :meth:`CustomAllocators.alloc` and give it back with :meth:`CustomAllocators.free` (the
  compute plane decides when: :mod:`ascend_memsim.compute.launch`). A block handed out and
  one given back each emit an event, ``allocator_alloc`` / ``allocator_free``; register and
  unregister emit ``allocator_register`` / ``allocator_unregister``. A failed call emits
  nothing and changes nothing.

pyacl's binding (``python/pyACL/rt/rt_allocator.cpp``) is not the C API: its C trampolines
call the Python function and return NULL whatever it returned, its Python functions are held
in process-global variables (one per kind, whichever descriptor they were set on), the size
goes to Python as ``unsigned int``, and the object is the address of a local variable.
:class:`PyaclCallbacks` reproduces that for the ``acl.rt`` face; the methods here, called
directly, honour what the callbacks return.

Thread-safe: one lock for the tables; the callbacks are called without it (they may call
the runtime).
"""

from __future__ import annotations

import itertools
import logging
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..memory.args import SIZE_MAX, as_int
from ..memory.errors import (
    InvalidArgument,
    InvalidArgumentType,
    InvalidHandle,
    OutOfDeviceMemory,
)
from ..memory.sites import capture_site

__all__ = ["CustomAllocators", "AllocatorDesc", "Registration", "WorkspaceBlock",
           "PyaclCallbacks", "FUNC_KINDS", "DESC_BASE", "PYACL_OBJ"]

#: Descriptor handles are ints from here, 64 apart (streams 0x1_..., contexts 0x2_...,
#: compute handles 0x3_..., events 0x4_..., pools 0x5_...); none is a memory address.
DESC_BASE = 0x6_0000_0000

#: The callbacks of a descriptor, by the name of their C setter
#: (aclrtAllocatorSet<...>FuncToDesc).
FUNC_KINDS = {"alloc": "Alloc", "free": "Free", "alloc_advise": "AllocAdvise",
              "get_addr": "GetAddrFromBlock"}

#: The object pyacl's callbacks receive: WrapAclRtAllocatorSetObjToDesc passes the address of
#: its local ``aclrtAllocator allocator`` (``&allocator``), not the value given to
#: ``allocator_set_obj_to_desc``; the simulator stands in a fixed host stack address.
PYACL_OBJ = 0x7FFD_0000_1000

_UINT32 = (1 << 32) - 1
_log = logging.getLogger("acl.app")


def _is_null(value: object) -> bool:
    """C's NULL for a pointer-like Python value: None or the int 0 (not False)."""
    return value is None or (value.__class__ is int and value == 0)


@dataclass(eq=False)
class AllocatorDesc:
    """One aclrtAllocatorDesc: an object and four callbacks (None: not set)."""

    handle: int
    obj: Any = None
    alloc: Callable[..., Any] | None = None
    free: Callable[..., Any] | None = None
    alloc_advise: Callable[..., Any] | None = None
    get_addr: Callable[..., Any] | None = None
    alloc_site: Any = None

    # What the sanitizer's leak report reads (as of a block); it holds no memory.
    ptr = property(lambda self: self.handle)
    size = 0
    kind = "allocator descriptor"
    holds_memory = False

    def describe(self) -> str:
        return (f"allocator descriptor {self.handle:#x} (aclrtAllocatorCreateDesc; destroy it "
                f"with aclrtAllocatorDestroyDesc)")


@dataclass(frozen=True, eq=False)
class Registration:
    """What aclrtAllocatorRegister keeps for a stream: a copy of the descriptor's fields."""

    stream: int
    desc: int
    obj: Any
    alloc: Callable[..., Any]
    free: Callable[..., Any]
    alloc_advise: Callable[..., Any] | None
    get_addr: Callable[..., Any]
    alloc_site: Any = None

    ptr = property(lambda self: self.stream)
    size = 0
    kind = "allocator registration"
    holds_memory = False

    def describe(self) -> str:
        return (f"allocator registered on stream {self.stream:#x} (descriptor {self.desc:#x}; "
                f"aclrtAllocatorRegister, never aclrtAllocatorUnregister)")

    @property
    def via_pyacl(self) -> bool:
        """True when the callbacks are pyacl's trampolines (they always give NULL)."""
        return isinstance(self.alloc, _Trampoline)


@dataclass(slots=True)
class WorkspaceBlock:
    """A block a registered allocator handed out: its block value, device address, size."""

    block: Any
    ptr: int
    size: int


class CustomAllocators:
    """The 11-08 calls of one runtime (see the module docstring)."""

    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime
        self.lock = threading.RLock()
        self._descs: dict[int, AllocatorDesc] = {}
        #: stream handle -> what is registered on it (read without the lock: one dict get)
        self.registered: dict[int, Registration] = {}
        self._numbers = itertools.count()
        #: pyacl's process-global Python callbacks (rt_allocator.cpp g_allocFunc, ...)
        self.pyacl = PyaclCallbacks()

    # -- descriptors ---------------------------------------------------------------------------

    def create_desc(self) -> int:
        """aclrtAllocatorCreateDesc: a new, empty descriptor; its handle."""
        sites = self.runtime.record_sites
        with self.lock:
            handle = DESC_BASE + 64 * next(self._numbers)
            self._descs[handle] = AllocatorDesc(
                handle, alloc_site=capture_site(skip=1) if sites else None)
        return handle

    def desc(self, handle: object, call: str) -> AllocatorDesc:
        """The live descriptor ``handle``.

        Raises:
            InvalidArgumentType: not an int. InvalidArgument: NULL (allocator.cpp).
            InvalidHandle: unknown or destroyed (DECISION).
        """
        number = as_int(handle, "allocatorDesc")
        if number == 0:
            raise InvalidArgument(f"{call}: allocatorDesc is NULL")
        desc = self._descs.get(number)
        if desc is None:
            raise InvalidHandle(f"{call}: {number:#x} is not an allocator descriptor, or was "
                                f"destroyed")
        return desc

    def destroy_desc(self, handle: object) -> None:
        """aclrtAllocatorDestroyDesc: the descriptor goes; a registration made from it stays
        (the runtime registered a copy)."""
        with self.lock:
            desc = self.desc(handle, "aclrtAllocatorDestroyDesc")
            del self._descs[desc.handle]

    def set_obj(self, handle: object, obj: object) -> None:
        """aclrtAllocatorSetObjToDesc: the allocator object the callbacks receive.

        Raises:
            InvalidArgument: NULL descriptor or object (None or 0). InvalidHandle: see
            :meth:`desc`.
        """
        with self.lock:
            desc = self.desc(handle, "aclrtAllocatorSetObjToDesc")
            if _is_null(obj):
                raise InvalidArgument("aclrtAllocatorSetObjToDesc: allocator is NULL")
            desc.obj = obj

    def set_func(self, handle: object, kind: str, fn: object) -> None:
        """aclrtAllocatorSet<kind>FuncToDesc (``kind`` a key of :data:`FUNC_KINDS`).

        Raises:
            InvalidArgument: NULL descriptor or function. InvalidArgumentType: not callable.
            InvalidHandle: see :meth:`desc`.
        """
        call = f"aclrtAllocatorSet{FUNC_KINDS[kind]}FuncToDesc"
        with self.lock:
            desc = self.desc(handle, call)
            if _is_null(fn):
                raise InvalidArgument(f"{call}: func is NULL")
            if not callable(fn):
                raise InvalidArgumentType(f"{call}: func must be callable, got "
                                          f"{type(fn).__name__}")
            setattr(desc, kind, fn)

    def set_pyacl_obj(self, handle: object, allocator: object) -> None:
        """pyacl's ``allocator_set_obj_to_desc(desc, allocator)``: ``allocator`` is parsed
        (``"k"``) but the C call gets ``&allocator``, never NULL, so the callbacks receive
        :data:`PYACL_OBJ`, not ``allocator`` (rt_allocator.cpp WrapAclRtAllocatorSetObjToDesc).

        Raises:
            InvalidArgumentType: ``allocator`` not an int. As :meth:`set_obj` otherwise.
        """
        as_int(allocator, "allocator")
        self.set_obj(handle, PYACL_OBJ)

    def set_pyacl_func(self, handle: object, kind: str, fn: object) -> None:
        """pyacl's ``allocator_set_<kind>_func_to_desc(desc, fn)``: the descriptor gets the C
        trampoline of ``kind``; on success ``fn`` (any object, ``"O"``) becomes the process's
        Python function of that kind, for every descriptor (rt_allocator.cpp).

        Raises:
            As :meth:`set_func` for the descriptor.
        """
        with self.lock:
            table = self.pyacl
            self.set_func(handle, kind, table.trampolines[kind])
            table.funcs[kind] = fn

    # -- registration --------------------------------------------------------------------------

    def register(self, stream: object, handle: object) -> None:
        """aclrtAllocatorRegister: a copy of the descriptor, under ``stream``.

        Raises:
            InvalidArgument: NULL stream or descriptor; the descriptor has no object, alloc,
                free or get_addr function (allocator.cpp). InvalidHandle: see :meth:`desc`.
        """
        call = "aclrtAllocatorRegister"
        number = _stream(stream, call)
        with self.lock:
            desc = self.desc(handle, call)
            for field, name in (("obj", "obj"), ("alloc", "allocFunc"), ("free", "freeFunc"),
                                ("get_addr", "getAddrFromBlockFunc")):
                if getattr(desc, field) is None:
                    raise InvalidArgument(f"{call}: allocatorDesc->{name} is NULL (set it "
                                          f"with the aclrtAllocatorSet...ToDesc calls first)")
            site = capture_site(skip=1) if self.runtime.record_sites else None
            # alloc, free and get_addr were checked not None just above
            self.registered[number] = Registration(
                number, desc.handle, desc.obj, desc.alloc, desc.free,  # type: ignore[arg-type]
                desc.alloc_advise, desc.get_addr, site)  # type: ignore[arg-type]
        self._emit("allocator_register", number, {"desc": desc.handle})

    def get_by_stream(self, stream: object) -> tuple[object, ...]:
        """aclrtAllocatorGetByStream: ``(desc, obj, alloc, free, alloc_advise, get_addr)``
        registered on ``stream``.

        Raises:
            InvalidArgument: NULL stream, or nothing registered on it (allocator.cpp).
        """
        call = "aclrtAllocatorGetByStream"
        number = _stream(stream, call)
        reg = self.registered.get(number)
        if reg is None:
            raise InvalidArgument(f"{call}: the stream {number:#x} is not registered with any "
                                  f"allocator")
        return reg.desc, reg.obj, reg.alloc, reg.free, reg.alloc_advise, reg.get_addr

    def unregister(self, stream: object) -> None:
        """aclrtAllocatorUnregister (nothing registered: success, nothing done).

        Raises:
            InvalidArgument: NULL stream.
        """
        number = _stream(stream, "aclrtAllocatorUnregister")
        with self.lock:
            reg = self.registered.pop(number, None)
        if reg is not None:
            self._emit("allocator_unregister", number, {"desc": reg.desc})

    # -- use by operators and models (the graph engine's ExternalAllocator) ---------------------

    def alloc(self, reg: Registration, size: int, call: str, advise: int | None = None
              ) -> WorkspaceBlock:
        """A block of ``size`` bytes from the allocator ``reg`` and its device address
        (external_allocator.cc ``Malloc``: alloc_func, then get_addr_from_block_func;
        ``MallocAdvise`` when ``advise`` is given: alloc_advise_func with that address, or
        ``Malloc`` when the descriptor has none).

        The address is not checked here (the graph engine does not) and nothing is told to
        the observers yet: the caller checks the address, then calls :meth:`handed` (or
        gives a refused block back with :meth:`give_back`).

        Raises:
            OutOfDeviceMemory: the callback gave NULL (or raised: the error is chained).
        """
        alloc_advise = reg.alloc_advise if advise is not None else None
        what = "alloc_advise" if alloc_advise is not None else "alloc"
        try:
            block = (alloc_advise(reg.obj, size, advise) if alloc_advise is not None
                     else reg.alloc(reg.obj, size))
        except Exception as error:
            raise OutOfDeviceMemory(
                f"{call}: the allocator registered on stream {reg.stream:#x} raised "
                f"{type(error).__name__} in its {what} function for {size} bytes: "
                f"{error}") from error
        if _is_null(block):
            raise OutOfDeviceMemory(self._null_message(reg, call, what, size))
        try:
            ptr = reg.get_addr(block)
            ptr = 0 if _is_null(ptr) else as_int(ptr, "the get_addr function's address",
                                                 0, SIZE_MAX)
        except Exception as error:
            self._free(reg, block)
            if isinstance(error, (InvalidArgument, InvalidArgumentType)):
                raise InvalidArgument(f"{call}: the allocator registered on stream "
                                      f"{reg.stream:#x}: {error}") from None
            raise OutOfDeviceMemory(f"{call}: the allocator registered on stream "
                                    f"{reg.stream:#x} raised {type(error).__name__} in its "
                                    f"get_addr function: {error}") from error
        return WorkspaceBlock(block, ptr, size)

    def handed(self, reg: Registration, blk: WorkspaceBlock, call: str) -> None:
        """``blk`` was accepted for ``call``: the ``allocator_alloc`` event."""
        self._emit("allocator_alloc", reg.stream, {"call": call, "ptr": blk.ptr,
                                                   "size": blk.size})

    def free(self, reg: Registration, blk: WorkspaceBlock, call: str) -> None:
        """Give a handed block back to its allocator (external_allocator.cc ``Free``): the
        ``allocator_free`` event. An exception in the free function is logged, not raised
        (the C callback returns nothing)."""
        self._free(reg, blk.block)
        self._emit("allocator_free", reg.stream, {"call": call, "ptr": blk.ptr,
                                                  "size": blk.size})

    def give_back(self, reg: Registration, blk: WorkspaceBlock) -> None:
        """Give back a block the caller refused (no event: the call failed)."""
        self._free(reg, blk.block)

    @staticmethod
    def _free(reg: Registration, block: Any) -> None:
        try:
            reg.free(reg.obj, block)
        except Exception as error:  # the C free callback cannot report an error
            _log.error("the free function of the allocator registered on stream %#x raised "
                       "%s: %s", reg.stream, type(error).__name__, error)

    @staticmethod
    def _null_message(reg: Registration, call: str, what: str, size: int) -> str:
        text = (f"{call}: the allocator registered on stream {reg.stream:#x} gave no block "
                f"(NULL) for a {size}-byte workspace")
        if reg.via_pyacl:
            text += (". Through pyacl it always does: hicann/runtime "
                     "python/pyACL/rt/rt_allocator.cpp AllocatorAllocFunc (and "
                     "AllocatorAllocAdviseFunc, AllocatorSetGetAddrFromBlockFunc) calls the "
                     "Python function, discards what it returns and returns nullptr, so no "
                     "Python allocator can give the runtime memory; register the allocator "
                     "from C, or leave the stream without one")
        return text

    # -- lifetime ------------------------------------------------------------------------------

    def close(self) -> list[object]:
        """Forget everything (aclFinalize); the descriptors never destroyed and the
        registrations never unregistered (DECISION: leaks)."""
        with self.lock:
            left = [*self._descs.values(), *self.registered.values()]
            self._descs.clear()
            self.registered = {}
            self.pyacl = PyaclCallbacks()
        return left

    def _emit(self, event: str, stream: int, info: dict[str, Any]) -> None:
        """Tell the observers of the stream's device (else the current device's) about
        ``event``; nothing when no device is known or no observer sees it."""
        runtime = self.runtime
        table = runtime._table
        if not table.wants(event):
            return
        found = runtime.streams._streams.get(stream)
        device = (table.made(found.device_id) if found is not None
                  else runtime.current_device_or_none())
        if device is not None:
            info = {"stream": stream, **info}
            for observer in table.observers_of(event):
                observer(event, device, info)


def _stream(stream: object, call: str) -> int:
    """A stream argument as the runtime's map key (pyacl's ``"k"``).

    Raises:
        InvalidArgumentType: not an int. InvalidArgument: NULL.
    """
    number = as_int(stream, "stream")
    if number == 0:
        raise InvalidArgument(f"{call}: stream is NULL (the default stream cannot have an "
                              f"allocator)")
    return number


class _Trampoline:
    """One of pyacl's C callbacks (rt_allocator.cpp): calls the process's current Python
    function of its kind with the arguments as Py_BuildValue builds them, and returns NULL."""

    __slots__ = ("kind", "table")

    def __init__(self, kind: str, table: PyaclCallbacks) -> None:
        self.kind, self.table = kind, table

    def __repr__(self) -> str:
        return f"<pyacl {_CPP_NAMES[self.kind]} trampoline>"

    def __call__(self, *args: Any) -> None:
        kind = self.kind
        # any object pyacl took ("O"): calling one that is not callable fails as any error does
        fn: Any = self.table.funcs.get(kind)
        if kind in ("alloc", "alloc_advise"):
            # Py_BuildValue("kI..."): size as unsigned int, cut to its low 32 bits
            args = (args[0], args[1] & _UINT32, *args[2:])
        try:
            result = fn(*args)
        except Exception as error:
            # DECISION: pyacl leaves the Python exception set (PyObject_CallObject returned
            # NULL), so on hardware it surfaces later as a SystemError; here it is logged.
            _log.error("%s wrong out: %s: %s", _CPP_NAMES[kind], type(error).__name__, error)
            return None
        if result is not None and kind != "free":
            warnings.warn(
                f"pyacl discards what the allocator's {kind} function returned ({result!r}): "
                f"hicann/runtime python/pyACL/rt/rt_allocator.cpp {_CPP_NAMES[kind]} returns "
                f"nullptr to the runtime whatever the Python function returns",
                RuntimeWarning, stacklevel=2)
        return None


_CPP_NAMES = {"alloc": "AllocatorAllocFunc", "free": "AllocatorFreeFunc",
              "alloc_advise": "AllocatorAllocAdviseFunc",
              "get_addr": "AllocatorSetGetAddrFromBlockFunc"}


class PyaclCallbacks:
    """pyacl's allocator callbacks of one process: ``g_allocFunc``, ``g_freeFunc``,
    ``g_allocAdviseFunc``, ``g_setGetAddrFunc`` (rt_allocator.cpp), and the C trampolines
    that every descriptor set through pyacl points at."""

    def __init__(self) -> None:
        #: kind -> the Python object last set (on whichever descriptor)
        self.funcs: dict[str, Any] = {}
        self.trampolines = {kind: _Trampoline(kind, self) for kind in FUNC_KINDS}
