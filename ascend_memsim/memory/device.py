"""One simulated device: its blocks, its memory ranges and their accounting.

A request is checked and turned into page kinds and sizes by the rules in
:mod:`ascend_memsim.memory.rules`, then placed by exact first-fit in the
:class:`~ascend_memsim.memory.allocator.Allocator` of its memory type (HBM, DDR). Every
public method checks its arguments, then takes the device lock; a failed call changes
nothing. Observers (statistics, traces, the sanitizer) see each event after it happened.

Size: the allocation hot path (malloc, free, their bookkeeping) stays in this one class so
its attributes are bound once per call; queries and checks sit beside the tables they read.
What the hot path calls only off its common case (a device other processes use too, the
quarantine's held blocks, physical memory, the message of a failed malloc) is in
:mod:`.placement`, a base class of :class:`Device`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from sortedcontainers import SortedList

from .allocator import Allocator
from .args import SIZE_MAX, UINT32_MAX, as_int, as_ptr
from .budget import DeviceBudget
from .constants import MODULE_APP, MODULE_ID_MAX, MODULE_NAMES, MallocPolicy, MemAttr, MemType
from .errors import (
    AclError,
    InvalidArgument,
    InvalidMemoryType,
    InvalidPointer,
    OutOfDeviceMemory,
)
from .placement import Placement, Step
from .profiles import Memory, Profile
from .rules import (
    DEFAULT_POLICY,
    HUGE_FIRST_THRESHOLD,
    MEMORY_OFFSET,
    OUT_OF_RANGE_HUGE_FROM,
    P2P_POLICIES,
    PAGE_BYTES,
    POLICY_MIN,
    Api,
    Page,
    Request,
    align_up,
    device_base,
    page_order,
    parse_policy,
    rule_size,
)
from .rules import (
    plan as plan_request,
)
from .sites import Site, capture_site

__all__ = ["Block", "Device"]

#: The pointer index takes at least this many changes before it is rebuilt rather than
#: updated (see Device._index).
_DELTA_MIN = 4096
#: Sizes below this need no overflow check (their rounding cannot pass SIZE_MAX).
_SAFE_SIZE = 1 << 62


@dataclass(slots=True, eq=False)
class Block:
    """A live allocation. ``ptr`` is its first byte; ``footprint`` bytes are reserved."""

    ptr: int
    size: int
    rule_size: int
    footprint: int
    page: Page
    memory: Memory
    api: Api
    policy: int
    module: int
    device_id: int
    serial: int
    readonly: bool = False
    p2p: bool = False
    fallback: bool = False
    mem_type: MemType = MemType.DEV
    #: Free-form slot for later layers (contents, the quarantine's mark); None by default.
    extra: dict[str, Any] | None = field(default=None, repr=False)
    #: Where the program allocated it (when the device records sites); shared between
    #: blocks allocated from the same stack.
    alloc_site: Site | None = field(default=None, repr=False)

    @property
    def end(self) -> int:
        """One past the last byte of the footprint."""
        return self.ptr + self.footprint

    @property
    def aligned_size(self) -> int:
        """ALIGN_UP(size, 32)."""
        return align_up(self.size, 32)

    @property
    def padding(self) -> int:
        """Bytes the rounding rule adds beyond the request (hidden from the user)."""
        return self.rule_size - self.size

    @property
    def page_rounding(self) -> int:
        """Bytes page granularity adds beyond the rule size."""
        return self.footprint - self.rule_size

    @property
    def module_name(self) -> str:
        return MODULE_NAMES[self.module]

    def describe(self) -> str:
        """``100-byte block at 0x... (aclrtMalloc, normal pages, footprint 192)``."""
        api = "acldvppMalloc" if self.mem_type == MemType.DVPP else self.api.value
        text = (f"{self.size}-byte block at {self.ptr:#x} ({api}, {self.page.value} "
                f"pages, {self.memory.value}, footprint {self.footprint})")
        keys = self.extra.get("ipc_keys") if self.extra else None
        return f"{text}, exported by IPC key {', '.join(keys)}" if keys else text


#: (memory family, figure) per aclrtMemAttr; family "main" means the part's own memory.
_ATTR_FIGURE: dict[int, tuple[str, str, bool]] = {
    MemAttr.DDR_MEM: ("DDR", "all", False),
    MemAttr.HBM_MEM: ("HBM", "all", False),
    MemAttr.DDR_MEM_HUGE: ("DDR", "huge", False),
    MemAttr.DDR_MEM_NORMAL: ("DDR", "normal", False),
    MemAttr.HBM_MEM_HUGE: ("HBM", "huge", False),
    MemAttr.HBM_MEM_NORMAL: ("HBM", "normal", False),
    MemAttr.DDR_MEM_P2P_HUGE: ("DDR", "huge", True),
    MemAttr.DDR_MEM_P2P_NORMAL: ("DDR", "normal", True),
    MemAttr.HBM_MEM_P2P_HUGE: ("HBM", "huge", True),
    MemAttr.HBM_MEM_P2P_NORMAL: ("HBM", "normal", True),
    MemAttr.HBM_MEM_HUGE1G: ("HBM", "huge1g", False),
    MemAttr.HBM_MEM_P2P_HUGE1G: ("HBM", "huge1g", True),
    MemAttr.MEM_NORMAL: ("main", "normal", False),
    MemAttr.MEM_HUGE: ("main", "huge", False),
    MemAttr.MEM_HUGE1G: ("main", "huge1g", False),
    MemAttr.MEM_P2P_NORMAL: ("main", "normal", True),
    MemAttr.MEM_P2P_HUGE: ("main", "huge", True),
    MemAttr.MEM_P2P_HUGE1G: ("main", "huge1g", True),
}

Observer = Callable[[str, "Device", dict[str, Any]], None]
#: what a malloc does for a (policy, api, size band): see Device._plan
Plan = tuple[MallocPolicy | None, bool, tuple[Page, ...], tuple[Step, ...], bool]


class Device(Placement):
    """A simulated device of a product: memory ranges, live blocks, usage per component.

    Thread-safe: one lock per device guards every change.
    """

    # set by _reset_state, which the constructor calls
    _ptrs: SortedList[int]
    _ptrs_delta: dict[int, bool] | None

    def __init__(self, profile: Profile, device_id: int = 0, *,
                 budget: DeviceBudget | None = None, pid: int | None = None) -> None:
        self.profile = profile
        self.device_id = device_id
        self.lock = threading.RLock()
        #: the process this is a view for (messages name it), on a machine of several
        self.pid = pid
        #: True once another process's view draws from the same budget: every allocation
        #: then checks it (see :mod:`.budget`)
        self.crowded = False
        #: Called as ``observer(event, device, info)`` after each change; see :meth:`_emit`.
        self.observers: list[Observer] = []
        #: event name -> observers of that event only (``Runtime.add_observer(fn, events)``):
        #: an event nobody subscribed to costs one dict lookup.
        self.subscribers: dict[str, list[Observer]] = {}
        #: Called with each :class:`Request` before it is placed; may raise an AclError to
        #: fail it (fault injection) or return page kinds to refuse (e.g. huge pages spent).
        self.interceptors: list[Callable[[Request], Iterable[Page] | None]] = []
        #: When true, each block keeps its allocation site in ``block.alloc_site``.
        self.record_sites = False
        #: (policy, api name, size band) -> what a malloc does (see _plan)
        self._plans: dict[tuple[int, str, int], Plan] = {}
        #: Called as ``listener(device, blocks)`` when a malloc takes back the footprints of
        #: blocks :meth:`hold` kept (the sanitizer's quarantine forgets them).
        self.reclaim_listeners: list[Callable[[Device, list[Block]], None]] = []
        self._reset_state()
        #: the device's physical memory, shared with other processes' views of it
        self.budget = DeviceBudget(device_id, profile) if budget is None else budget
        self.budget.join(self)

    def __repr__(self) -> str:
        return (f"Device({self.device_id}, {self.profile.name}, blocks={len(self._blocks)}, "
                f"free={self._main.free_bytes})")

    def use_main_allocator(self, allocator: Allocator) -> None:
        """Place the main memory with ``allocator`` (e.g. a subclass that watches where each
        placement lands, as the capacity search does) instead of the device's own; only
        while the device holds nothing, over the same range.

        Raises:
            InvalidArgument: the device holds memory, or the range differs.
        """
        old = self._main
        if len(old) or self._blocks or self._held or len(allocator):
            raise InvalidArgument("the main allocator is replaced only on an empty device")
        if (allocator.base, allocator.capacity, allocator.granule) != (
                old.base, old.capacity, old.granule):
            raise InvalidArgument("the new main allocator must cover the same range")
        self._main = self.allocators[self._main_memory] = allocator

    def _reset_state(self) -> None:
        """Start afresh. O(1) when the device holds nothing: allocators with no extent are
        as good as new, so they are kept (and the pointer index, when empty)."""
        if not (getattr(self, "_blocks", True) or self._held
                or any(len(a) for a in self.allocators.values())):
            self._serial = 0
            self._usage = {}
            self._ptrs_delta, self._delta_cap = {}, _DELTA_MIN
            if self._ptrs:
                self._ptrs = SortedList()
            return
        base = device_base(self.device_id)
        self.allocators: dict[Memory, Allocator] = {
            memory: Allocator(self.profile.total(memory), base=base + MEMORY_OFFSET[memory])
            for memory in Memory if self.profile.capacity(memory)
        }
        self._main_memory = self.profile.main_memory
        self._main = self.allocators[self._main_memory]
        self._blocks: dict[int, Block] = {}
        # The sorted pointer index (block_at, neighbours, blocks) is brought up to date only
        # when read: malloc and free note the pointer in _ptrs_delta (True: added, False:
        # removed; a pair on one pointer cancels), O(1) each.
        # More changes than _delta_cap and the delta is dropped (None): the index is rebuilt
        # from the block table at the next read, and malloc and free note nothing until then.
        self._ptrs = SortedList()
        self._ptrs_delta = {}
        self._delta_cap = _DELTA_MIN
        #: Blocks the program freed but the sanitizer's quarantine still holds: no longer live
        #: (not in _blocks, usage or the events), their footprint still reserved in the allocator.
        self._held: dict[int, Block] = {}
        self._serial = 0
        #: module id -> [current footprint bytes, peak footprint bytes]
        self._usage: dict[int, list[int]] = {}
        #: physical memory handles (aclrtMallocPhysical, memory/vmm.py) hold: start -> footprint
        self.physical: dict[int, int] = {}
        #: start -> (bytes asked, page kind) of the same physical memory, for pictures
        self.physical_info: dict[int, tuple[int, Page]] = {}

    # -- allocation ---------------------------------------------------------------------------

    def malloc(self, size: object, policy: object = DEFAULT_POLICY, *,
               api: Api = Api.MALLOC, module: object = MODULE_APP,
               mem_type: MemType = MemType.DEV) -> int:
        """Allocate ``size`` bytes as ``api`` would; the block's device address.

        O(C log n) in the number of free runs (see the allocator).

        Raises:
            InvalidArgument, InvalidArgumentType: a bad size, policy or module id.
            FeatureNotSupported: 1 GB pages on a product without them.
            OutOfDeviceMemory: no free run holds the footprint (the message says why).
        """
        return self.allocate(size, policy, api=api, module=module, mem_type=mem_type).ptr

    def allocate(self, size: object, policy: object = DEFAULT_POLICY, *,
                 api: Api = Api.MALLOC, module: object = MODULE_APP,
                 mem_type: MemType = MemType.DEV, site_skip: int = 0) -> Block:
        """As :meth:`malloc`, but returns the whole :class:`Block` record.

        ``mem_type`` is what aclrtCheckMemType sees (DVPP memory says so). The arguments are
        checked once; what a (policy, API, size band) means on this product (page kinds,
        the rounding rule) is worked out once per device and remembered (:meth:`_plan`).
        ``site_skip``: how many frames above the caller are the simulator's (the allocation
        site's walk jumps over them, see :func:`capture_site`).
        """
        if (size.__class__ is not int or not 0 < size < _SAFE_SIZE
                or policy.__class__ is not int or not POLICY_MIN <= policy <= UINT32_MAX):
            # Anything unusual goes through the one planning function, which explain() uses
            # too, so both refuse the same requests (size 0, overflow, a bad policy word).
            size, policy, *_ = plan_request(self.profile, size, policy, api)
        if module.__class__ is not int or module != MODULE_APP:  # APP is the common case
            module = self._module(module)
        band = 0 if size <= HUGE_FIRST_THRESHOLD else 1 if size < OUT_OF_RANGE_HUGE_FROM else 2
        # keyed by the API's name: hashing an Enum member runs Python code
        plan = self._plans.get((policy, api._value_, band))
        if plan is None:
            plan = self._plan(policy, api, size, band)
        return self._place(size, policy, api, module, plan, mem_type, site_skip)

    def _module(self, module: object) -> int:
        module = as_int(module, "module id", 0, SIZE_MAX)
        if module > MODULE_ID_MAX:
            # api_error.cc: the runtime counts an id above 255 as APP.
            return MODULE_APP
        if module not in MODULE_NAMES:
            # DECISION: an id with no name in log_types.h has nothing to report under.
            raise InvalidArgument(f"module id {module} has no entry in the runtime's module "
                                  f"table (log_types.h); APP is {MODULE_APP}")
        return module

    def _plan(self, policy: int, api: Api, size: int, band: int) -> Plan:
        """(base policy, readonly, page kinds, ((page, granule, rule padding), ...)) for a
        checked policy word and ``api``; ``size`` only picks the band (page_order's
        thresholds). Remembered per (policy, api, band); a refusal is not.

        Raises:
            InvalidArgument: aclrtMallocCached with a policy other than its four.
            FeatureNotSupported: 1 GB pages on a product without them.
        """
        base, readonly = parse_policy(policy, api)
        pages = page_order(self.profile, size, base)
        # rule_size is ALIGN_UP(size, 32) plus a fixed padding per (product, page, api, policy).
        steps = tuple((page, PAGE_BYTES[page], rule_size(self.profile, 32, page, api, policy) - 32)
                      for page in pages)
        plan = (base, readonly, pages, steps, base in P2P_POLICIES)
        if len(self._plans) < 4096:  # policy words are 32-bit: bound what odd callers cost
            self._plans[policy, api._value_, band] = plan
        return plan

    def _place(self, size: int, policy: int, api: Api, module: int, plan: Plan,
               mem_type: MemType, site_skip: int = 0) -> Block:
        _, readonly, pages, steps, p2p = plan
        with self.lock:
            refused: frozenset[Page] = frozenset()
            request = None
            if self.interceptors:
                request = Request(self.device_id, api, size, policy, module, pages)
                try:
                    for intercept in self.interceptors:
                        denied = intercept(request)
                        if denied:
                            refused = refused.union(denied)
                except AclError as error:
                    # An injected failure is a failed malloc like any other, for stats and
                    # traces.
                    if self.observers or self.subscribers:
                        self._emit("malloc_failed", request=request, error=error)
                    raise
            alloc = self._main
            aligned = -(-size // 32) * 32
            room = journal = None
            if self.crowded:
                ptr, page, rule, footprint, room, usage, journal = self._place_shared(
                    aligned, steps, refused, module, None)
            else:
                journal = (self._reclaim(size, api, steps, refused) if self._held else None)
                for page, granule, padding in steps:
                    if refused and page in refused:
                        continue
                    rule = aligned + padding
                    footprint = -(-rule // granule) * granule
                    ptr = alloc.allocate(footprint, granule)
                    if ptr is not None:
                        # the usage figures are what the device's budget counts (budget.py)
                        usage = self._usage.get(module)
                        if usage is None:
                            usage = self._usage[module] = [0, 0]
                        usage[0] += footprint
                        if self.crowded and self._joined_meanwhile(ptr, footprint, module):
                            ptr, page, rule, footprint, room, usage, journal = (
                                self._place_shared(aligned, steps, refused, module, journal))
                        break
                else:
                    ptr = None
            if ptr is None:
                if journal:
                    # A failed malloc changes nothing: the held blocks stay held.
                    alloc.undo_release(journal)
                request = request or Request(self.device_id, api, size, policy, module, pages)
                oom = OutOfDeviceMemory(self._oom_message(request, pages, refused, room))
                if self.observers or self.subscribers:
                    self._emit("malloc_failed", request=request, error=oom)
                raise oom
            if journal:
                self._take_held(journal)
            self._serial += 1
            # the site's walk starts above this frame, allocate's and the caller's own.
            # _place_shared gives a page and usage figures with every ptr it places
            block = Block(ptr, size, rule, footprint, page,  # type: ignore[arg-type]
                          self._main_memory, api, policy,
                          module, self.device_id, self._serial, readonly, p2p,
                          page is not pages[0], mem_type,
                          None, capture_site(10, 2 + site_skip) if self.record_sites else None)
            self._blocks[ptr] = block
            delta = self._ptrs_delta
            if delta is not None and delta.pop(ptr, None) is None:
                delta[ptr] = True
                if len(delta) > self._delta_cap:
                    self._ptrs_delta = None  # cheaper to rebuild the index when next read
            if usage[0] > usage[1]:  # type: ignore[index]  # (see the Block above)
                usage[1] = usage[0]  # type: ignore[index]
            if self.observers or "malloc" in self.subscribers:
                self._emit("malloc", block=block, request=request or
                           Request(self.device_id, api, size, policy, module, pages))
            return block

    # -- release ------------------------------------------------------------------------------

    def free(self, ptr: object) -> Block:
        """Release the block that starts at ``ptr``, at once (aclrtFree); the released block.

        O(log n).

        Raises:
            InvalidArgument: NULL. InvalidArgumentType: not an int.
            InvalidPointer: not the start of a live block (never allocated, interior, freed).
        """
        if ptr.__class__ is not int or not 0 < ptr <= SIZE_MAX:
            ptr = as_ptr(ptr)
        with self.lock:
            block = self._retire(ptr)
            if block.memory is self._main_memory:
                self._main.release(ptr)
            else:
                self.allocators[block.memory].release(ptr)
            if self.observers or "free" in self.subscribers:
                self._emit("free", block=block)
            return block

    def hold(self, ptr: object) -> Block:
        """Free the block at ``ptr`` for the program but keep its footprint reserved.

        The block leaves the live blocks, the usage figures and :meth:`block_at`, and
        observers see ``"free"``, and :meth:`mem_info` counts it as free; its footprint stays
        reserved in the allocator until :meth:`release_held`, so its addresses are not handed
        out again. The sanitizer's quarantine uses this so a stale pointer is not reused.
        A malloc whose first page kind does not fit otherwise takes the held footprints back
        (and tells :attr:`reclaim_listeners`); a malloc that fails even so leaves them held.
        O(log n).

        Raises:
            InvalidArgument, InvalidArgumentType, InvalidPointer: as :meth:`free`.
        """
        ptr = as_ptr(ptr)
        with self.lock:
            block = self._retire(ptr)
            self._held[ptr] = block
            if self.observers or "free" in self.subscribers:
                self._emit("free", block=block)
            return block

    def release_held(self, block: Block) -> bool:
        """Give back the footprint of a block :meth:`hold` kept; False if it is not held
        (the device was reset since). O(log n)."""
        with self.lock:
            if self._held.get(block.ptr) is not block:
                return False
            del self._held[block.ptr]
            self.allocators[block.memory].release(block.ptr)
            return True

    def _retire(self, ptr: int) -> Block:
        """Take the live block at ``ptr`` out of the block table, index and usage."""
        block = self._blocks.pop(ptr, None)
        if block is None:
            raise InvalidPointer(self._not_a_block(ptr))
        delta = self._ptrs_delta
        if delta is not None and delta.pop(ptr, None) is None:
            delta[ptr] = False
            if len(delta) > self._delta_cap:
                self._ptrs_delta = None
        self._usage[block.module][0] -= block.footprint
        return block

    def _not_a_block(self, ptr: int) -> str:
        inside = self.block_at(ptr)
        if inside is not None:
            return (f"{ptr:#x} is {ptr - inside.ptr} bytes inside the {inside.describe()}, "
                    f"not its start")
        if ptr in self._held:
            return f"{ptr:#x} was already freed (the sanitizer's quarantine holds it)"
        return f"{ptr:#x} is not the start of a live block on device {self.device_id}"

    def reset(self) -> list[Block]:
        """Discard every block and start afresh (aclrtResetDevice); the blocks still live."""
        with self.lock:
            leaked = sorted(self._blocks.values(), key=lambda b: b.serial)
            if self.observers or "reset" in self.subscribers:
                self._emit("reset", blocks=leaked)
            self._reset_state()
            return leaked

    # -- queries ------------------------------------------------------------------------------

    def block(self, ptr: object) -> Block | None:
        """The live block that starts at ``ptr``, or None. O(1).

        Raises:
            InvalidArgumentType: not an int.
        """
        if ptr.__class__ is not int:
            ptr = as_int(ptr, "ptr", None, None)
        return self._blocks.get(ptr)

    def releasable(self, ptr: int, call: str) -> Block | None:
        """The live block starting at ``ptr`` if ``call`` may free it; None if there is none.

        DECISION: aclrtFree and aclrtFreeWithDevSync free only aclrtMalloc / Cached / Align32
        memory (vendor docs), and acldvppFree only DVPP memory: each refuses the other's
        blocks with ACL_ERROR_RT_PARAM_INVALID. On a product where DVPP memory is ordinary
        device memory (``profile.dvpp_type`` false: Ascend 950PR/950DT, aclrtCheckMemType
        notes) there is one kind, and each frees either.

        Raises:
            InvalidPointer: a live block of the other kind, or one the runtime owns.
        """
        block = self._blocks.get(ptr)
        if block is not None and block.extra is not None and "owned_by_runtime" in block.extra:
            # DECISION: memory the runtime took for itself (a device variable's, 11-11) is
            # not the program's to free; the device's reset gives it back
            raise InvalidPointer(f"{call} of the memory of {block.extra['owned_by_runtime']} at "
                                 f"{ptr:#x}: the runtime owns it and frees it at the device's "
                                 f"reset")
        if block is None or not self.profile.dvpp_type:
            return block
        if (block.mem_type == MemType.DVPP) != (call == "acldvppFree"):
            if call == "acldvppFree":
                raise InvalidPointer(f"acldvppFree of the {block.describe()}, which is not "
                                     f"DVPP memory (use acl.rt.free)")
            raise InvalidPointer(f"{call} of the {block.describe()}, which is DVPP memory "
                                 f"(use acl.media.dvpp_free)")
        return block

    def block_at(self, addr: object) -> Block | None:
        """The live block whose footprint holds ``addr``, or None. O(log n).

        The pointer index is kept current on every malloc and free (O(log n) each), so this
        answers at once between them.

        Raises:
            InvalidArgumentType: not an int.
        """
        if addr.__class__ is not int:
            addr = as_int(addr, "addr", None, None)
        with self.lock:
            ptrs = self._index()
            i = ptrs.bisect_right(addr)
            if not i:
                return None
            block = self._blocks[ptrs[i - 1]]
            return block if addr < block.end else None

    def _index(self) -> SortedList[int]:
        """The sorted pointer index, brought up to date (call with the lock held).

        O(d log n) for d pointers changed since the last read; a rebuild, O(n log n), when
        more than a quarter of the index (and at least 4096) changed: amortised O(log n) per
        malloc and free.
        """
        delta = self._ptrs_delta
        if delta is None:
            self._ptrs = SortedList(self._blocks)
            self._ptrs_delta = {}
            self._delta_cap = max(_DELTA_MIN, len(self._blocks) // 4)
        elif delta:
            ptrs = self._ptrs
            for ptr, added in delta.items():
                if added:
                    ptrs.add(ptr)
                else:
                    ptrs.remove(ptr)
            delta.clear()
            self._delta_cap = max(_DELTA_MIN, len(ptrs) // 4)
        return self._ptrs

    def held(self) -> list[Block]:
        """The blocks :meth:`hold` keeps (freed for the program, addresses not yet reusable)."""
        with self.lock:
            return list(self._held.values())

    def largest_free_run(self) -> int:
        """Bytes in the longest free run of the memory malloc draws from."""
        with self.lock:
            return self._main.largest_free_run()

    def neighbours(self, addr: int) -> list[Block]:
        """The live blocks on either side of ``addr`` (the one holding it counts as before).

        O(log n).
        """
        with self.lock:
            ptrs = self._index()
            i = ptrs.bisect_right(addr)
            return [self._blocks[ptrs[j]] for j in (i - 1, i) if 0 <= j < len(ptrs)]

    def blocks(self) -> Iterator[Block]:
        """The live blocks in address order (a snapshot)."""
        with self.lock:
            return iter([self._blocks[p] for p in self._index()])

    def __len__(self) -> int:
        return len(self._blocks)

    def mem_info(self, attr: object) -> tuple[int, int]:
        """(free, total) bytes for an aclrtMemAttr, as aclrtGetMemInfo reports them.

        HBM attributes on a part without HBM are answered from DDR (aclrtGetMemInfo docs);
        any other memory the part lacks gives (0, 0). _HUGE figures count whole free 2 MiB
        pages and _HUGE1G whole free 1 GiB pages (O(free runs)); the others are O(1).
        Blocks :meth:`hold` keeps (the sanitizer's quarantine) count as free: the program
        freed them, and an allocation that needs their memory gets it. The figures are the
        device's, as the driver's are (:mod:`.budget`): on a device other processes use too,
        free is what none of them holds (the _HUGE figures: this process's whole free pages,
        at most that many bytes); total is the device's either way.

        Raises:
            InvalidMemoryType: an int attr outside 0..17.
            InvalidArgumentType: not an int.
        """
        attr = as_int(attr, "attr", None, None)
        figure = _ATTR_FIGURE.get(attr)
        if figure is None:
            raise InvalidMemoryType(f"attr={attr} is not an aclrtMemAttr (0..{len(MemAttr) - 1})")
        family, kind, p2p = figure
        profile = self.profile
        if family == "main":
            memory = profile.main_memory
        elif family == "HBM" and not profile.hbm_bytes:
            memory = Memory.DDR
        else:
            memory = Memory(family)
        alloc = self.allocators.get(memory)
        if alloc is None or (p2p and not profile.p2p) or (kind == "huge1g" and not profile.huge1g):
            return 0, 0
        with self.lock:
            held = [(b.ptr, b.end) for b in self._held.values() if b.memory is memory]
            # The driver's figure is the device's (budget.py): with other processes on the
            # device, what they hold is not free either.
            shared = self.budget.free(memory) if self.crowded else None
            if kind in ("all", "normal"):
                if shared is not None:
                    return shared, alloc.capacity
                return alloc.free_bytes + sum(end - ptr for ptr, end in held), alloc.capacity
            page = PAGE_BYTES[Page.HUGE if kind == "huge" else Page.HUGE1G]
            pages = alloc.free_aligned_pages(page, held)
            if shared is not None:
                pages = min(pages, shared // page)
            return pages * page, alloc.capacity // page * page

    def peak_of(self, module: int) -> int | None:
        """``module``'s peak bytes on this device, None while it never held any."""
        with self.lock:
            figures = self._usage.get(module)
            return None if figures is None else figures[1]

    def restore_peak(self, module: int, peak: int | None) -> None:
        """Put ``module``'s peak back to ``peak`` (from :meth:`peak_of`) after a call that
        failed and gave back what it took: a failed call changes nothing, peaks included.
        What other threads took meanwhile still counts (never below the current bytes)."""
        with self.lock:
            figures = self._usage.get(module)
            if figures is None:
                return
            if peak is None and not figures[0]:
                del self._usage[module]
            else:
                figures[1] = max(peak or 0, figures[0])

    def usage(self) -> list[tuple[str, int, int]]:
        """(component name, current bytes, peak bytes), current descending, then by name."""
        with self.lock:
            rows = [(MODULE_NAMES[m], cur, peak) for m, (cur, peak) in self._usage.items()]
        rows.sort(key=lambda r: (-r[1], r[0]))
        return rows

    def check_invariants(self) -> None:
        """Assert the allocators are sound and the blocks agree with them (for tests)."""
        with self.lock:
            assert not self._held.keys() & self._blocks.keys(), "a held block is live"
            for memory, alloc in self.allocators.items():
                alloc.check_invariants()
                # Free + live footprints + held (quarantined) footprints == capacity.
                mine = [b for b in (*self._blocks.values(), *self._held.values())
                        if b.memory is memory]
                physical = self.physical if alloc is self._main else {}
                assert len(mine) + len(physical) == len(alloc), "blocks and allocator disagree"
                for start, footprint in physical.items():
                    assert alloc.extent(start) == start + footprint, "physical extent wrong"
                for b in mine:
                    assert alloc.extent(b.ptr) == b.end, f"block {b.ptr:#x} extent wrong"
                    assert b.ptr % 64 == 0 and b.ptr % PAGE_BYTES[b.page] == 0
                    assert b.footprint % PAGE_BYTES[b.page] == 0 and b.footprint >= b.rule_size
            assert list(self._index()) == sorted(self._blocks), "pointer index out of step"
            by_module: dict[int, int] = {MODULE_APP: sum(self.physical.values())}
            for b in self._blocks.values():
                by_module[b.module] = by_module.get(b.module, 0) + b.footprint
            for module, (cur, peak) in self._usage.items():
                assert cur == by_module.get(module, 0) and peak >= cur, "usage figures wrong"
            assert not self.physical or MODULE_APP in self._usage

    def _emit(self, event: str, **info: object) -> None:
        for observer in [*self.observers, *self.subscribers.get(event, ())]:
            observer(event, self, info)
