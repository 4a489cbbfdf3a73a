"""How a :class:`~ascend_memsim.memory.device.Device` places memory beyond its own first-fit.

``Device._place`` is the malloc hot path: the device's allocator, the rounding rules, the
block record. What it calls only when the plain
first-fit is not the whole story lives here, as the methods of :class:`Placement`, a base of
``Device``:

- a device other processes use too (``Device.crowded``): each allocation is drawn from the
  device's :class:`~ascend_memsim.memory.budget.DeviceBudget` under its lock
  (:meth:`Placement._draw`), and an allocation that began alone and ended shared is checked
  afterwards (:meth:`Placement._joined_meanwhile`);
- blocks the sanitizer's quarantine holds (``Device.hold``): released tentatively when a
  malloc does not fit without them, taken for good or given back;
- physical memory (aclrtMallocPhysical, :mod:`.vmm` keeps the handles), placed by the same
  first-fit and drawn from the same budget;
- the message of a malloc that failed, which says why for each page kind.

No method here runs on a malloc or free that fits on a device one process uses.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from .constants import MODULE_APP
from .errors import OutOfDeviceMemory
from .profiles import Memory
from .rules import PAGE_BYTES, Api, Page, Request, align_up, fallback_note, policy_name, rule_size
from .units import plural

if TYPE_CHECKING:
    from .allocator import Allocator
    from .budget import DeviceBudget
    from .profiles import Profile

__all__ = ["Placement"]

#: a tentative release's record (:meth:`Allocator.release_tentatively`)
Journal = list[tuple[int, int, int, int]]
#: a page kind a malloc may try: (page, its granule, the size rule's padding)
Step = tuple[Page, int, int]


class Placement:
    """The placement methods of a :class:`~ascend_memsim.memory.device.Device` that its
    plain first-fit does not need (module docstring). Every method runs under the device
    lock, as the device's own do."""

    # what these methods read of the device (Device sets them)
    profile: Profile
    device_id: int
    pid: int | None
    crowded: bool
    budget: DeviceBudget
    allocators: dict[Memory, Allocator]
    lock: threading.RLock
    interceptors: list[Callable[[Request], Iterable[Page] | None]]
    reclaim_listeners: list[Callable[[Any, list[Any]], None]]
    physical: dict[int, int]
    physical_info: dict[int, tuple[int, Page]]
    _main: Allocator
    _main_memory: Memory
    # Block records (memory/device.py, which imports this module)
    _blocks: dict[int, Any]
    _held: dict[int, Any]
    _usage: dict[int, list[int]]

    def _place_shared(self, aligned: int, steps: tuple[Step, ...], refused: frozenset[Page],
                      module: int, journal: Journal | None) -> tuple[
                          int | None, Page | None, int, int, int | None, list[int] | None,
                          Journal | None]:
        """:meth:`_place`'s placement on a device other processes use too (see
        :meth:`_draw`): (ptr, page, rule size, footprint, bytes free on the device, the
        module's usage figures, journal); ptr None when nothing fits."""
        tried = [(page, aligned + padding, -(-(aligned + padding) // granule) * granule,
                  granule) for page, granule, padding in steps
                 if not (refused and page in refused)]
        i, ptr, room, journal = self._draw([(f, g) for *_, f, g in tried], module, journal)
        if i is None or ptr is None:  # both or neither
            return None, None, 0, 0, room, None, journal
        page, rule, footprint, _ = tried[i]
        return ptr, page, rule, footprint, room, self._usage[module], journal

    def _draw(self, candidates: list[tuple[int, int]], module: int, journal: Journal | None, *,
              crowded: bool = True) -> tuple[int | None, int | None, int | None, Journal | None]:
        """Place the first of ``candidates`` ((footprint, alignment), ...) that fits and
        count it as ``module``'s usage: (its index, ptr, bytes free on the device or None,
        journal); ptr None when none fits.

        ``crowded``: other processes use the device, so a candidate is tried only when it
        fits in what they together leave free, and the check and the usage update happen
        under the budget's lock (a leaf: nothing else is called under it), so two processes
        never both take the last bytes. The held blocks (``journal``: released tentatively
        already) are released when the first candidate tried does not fit without them, as
        :meth:`_reclaim` does; the caller takes them (:meth:`_take_held`) or gives them back
        (``undo_release``). O(views + C log n)."""
        budget, alloc, memory = self.budget, self._main, self._main_memory
        with budget.lock if crowded else contextlib.nullcontext():
            room = budget.capacity[memory] - budget.used(memory) if crowded else None
            for i, (footprint, align) in enumerate(candidates):
                if room is not None and footprint > room:
                    continue
                ptr = alloc.allocate(footprint, align)
                if ptr is None and journal is None and self._held:
                    journal = self._release_held()
                    ptr = alloc.allocate(footprint, align)
                if ptr is not None:
                    usage = self._usage.get(module)
                    if usage is None:
                        usage = self._usage[module] = [0, 0]
                    usage[0] += footprint
                    return i, ptr, room, journal
            return None, None, room, journal

    def _joined_meanwhile(self, ptr: int, footprint: int, module: int) -> bool:
        """True when another process's view joined while an allocation ran alone and together
        they now hold more than the device has; then the allocation at ``ptr`` is undone
        (usage and allocator) so the caller places it again, checked (see :mod:`.budget`)."""
        if not self.crowded or self.budget.fits(self._main_memory):
            return False
        usage = self._usage[module]
        usage[0] -= footprint
        if not usage[1]:
            del self._usage[module]  # made by this allocation
        self._main.release(ptr)
        return True

    def _reclaim(self, size: int, api: Api, steps: tuple[Step, ...],
                 refused: frozenset[Page]) -> Journal | None:
        """Release the held blocks tentatively when the first page kind the request may use
        does not fit without them (with their memory free, as the program believes it is,
        it might; then no fallback or failure differs from a run without holding). The
        journal, for :meth:`Allocator.undo_release` if the malloc still fails; else None."""
        step = next((st for st in steps if st[0] not in refused), None)
        if step is None:
            return None
        _, granule, padding = step
        footprint = align_up(align_up(size, 32) + padding, granule)
        if self._main.find(footprint, granule) is not None:
            return None
        return self._release_held()

    def _release_held(self) -> Journal:
        """Release the held blocks of the main heap tentatively: the allocator's journal."""
        alloc = self._main
        return alloc.release_tentatively(
            [b.ptr for b in self._held.values() if self.allocators[b.memory] is alloc])

    def _take_held(self, journal: Journal) -> None:
        """The held blocks a tentative release freed are gone for good: tell the listeners
        (the sanitizer's quarantine)."""
        taken = [self._held.pop(start) for start, *_ in journal]
        for listener in list(self.reclaim_listeners):
            listener(self, taken)

    def _oom_message(self, request: Request, pages: tuple[Page, ...],
                     refused: frozenset[Page], room: int | None = None) -> str:
        """Why a malloc failed; ``room``: the bytes the device had free when other processes
        use it too (its page kinds were tried only where their footprints fit)."""
        alloc = self._main
        memory = self.profile.main_memory.value
        lines = [f"out of {memory} memory on device {self.device_id}: {request.api.value}"
                 f"(size={request.size}, policy={policy_name(request.policy, request.api)})"]
        smallest = None
        for page in pages:
            rule = rule_size(self.profile, request.size, page, request.api, request.policy)
            footprint = align_up(rule, PAGE_BYTES[page])
            if page not in refused:
                smallest = footprint if smallest is None else min(smallest, footprint)
            why = ("refused by fault injection" if page in refused else
                   f"only {room} bytes of the device are free"
                   if room is not None and footprint > room else
                   f"no free run holds {footprint} bytes aligned to {PAGE_BYTES[page]}")
            lines.append(f"  {page.value} pages: footprint {footprint} bytes: {why}")
        lines.append("  " + fallback_note(request, pages))
        held = f", {len(self._held)} more held by the sanitizer's quarantine" if self._held else ""
        free = alloc.free_bytes
        if self.crowded:
            free = min(free, self.budget.free(self._main_memory))
        lines.append(f"  free {free} of {alloc.capacity} bytes; "
                     f"largest free run {alloc.largest_free_run()} bytes; "
                     f"{plural(len(self._blocks), 'live block')}{held}")
        others = self.budget.others(self, self._main_memory) if self.crowded else []
        if others:
            lines.append(f"  other processes hold {sum(n for _, n in others)} bytes of this "
                         f"device: " + ", ".join(f"pid {pid}: {n} bytes" for pid, n in others))
        if smallest is not None and free >= smallest:
            lines.append(f"  fragmentation: {free} bytes are free, but no single "
                         f"suitably aligned run holds {smallest}")
        return "\n".join(lines)

    # -- physical memory (aclrtMallocPhysical; memory/vmm.py keeps the handles) ---------------

    def take_physical(self, footprint: int, align: int, what: str,
                      request: Request | None = None, *, size: int | None = None) -> int:
        """Place ``footprint`` bytes of physical memory by the same first-fit as the blocks, at
        ``align``; its address. Counted as APP's usage; the quarantine's held blocks are taken
        back when it does not fit otherwise (as for a malloc). O(C log n).

        ``size`` (default: the request's, else the footprint) is kept for pictures
        (:attr:`physical_info`). ``request`` (api aclrtMallocPhysical, the page kind in
        ``pages``) goes to the
        :attr:`interceptors` first, as a malloc's does: one may raise (the call fails with its
        error) or refuse the page kind (the call fails with ACL_ERROR_RT_MEMORY_ALLOCATION:
        physical memory has no fallback page kind).

        Raises:
            OutOfDeviceMemory: no free run holds it, or its page kind was refused.
            AclError: what an interceptor raised.
        """
        with self.lock:
            if request is not None and self.interceptors:
                refused: frozenset[Page] = frozenset()
                for intercept in self.interceptors:
                    denied = intercept(request)
                    if denied:
                        refused = refused.union(denied)
                if not refused.isdisjoint(request.pages):
                    raise OutOfDeviceMemory(
                        f"out of {self._main_memory.value} memory on device {self.device_id}: "
                        f"{what}: its {request.pages[0].value} pages were refused by fault "
                        f"injection")
            alloc, memory = self._main, self._main_memory
            candidates = [(footprint, align)]
            crowded = self.crowded
            _, ptr, room, journal = self._draw(candidates, MODULE_APP, None, crowded=crowded)
            if (ptr is not None and not crowded
                    and self._joined_meanwhile(ptr, footprint, MODULE_APP)):
                _, ptr, room, journal = self._draw(candidates, MODULE_APP, journal)
            if ptr is None:
                if journal:
                    alloc.undo_release(journal)
                others = self.budget.others(self, memory) if self.crowded else []
                holders = ("; other processes hold " + ", ".join(
                    f"pid {pid}: {n} bytes" for pid, n in others) if others else "")
                free = alloc.free_bytes if room is None else min(alloc.free_bytes, room)
                raise OutOfDeviceMemory(
                    f"out of {memory.value} memory on device {self.device_id}: {what} "
                    f"needs {footprint} bytes aligned to {align}; free {free}, "
                    f"largest free run {alloc.largest_free_run()} bytes{holders}")
            if journal:
                self._take_held(journal)  # tells the listeners, outside the budget's lock
            usage = self._usage[MODULE_APP]
            usage[1] = max(usage[1], usage[0])
            self.physical[ptr] = footprint
            asked = size if size is not None else request.size if request else footprint
            self.physical_info[ptr] = (asked, Page.HUGE1G if align >= PAGE_BYTES[Page.HUGE1G]
                                       else Page.HUGE)
            return ptr

    def give_physical(self, ptr: int) -> None:
        """Give back the physical memory :meth:`take_physical` placed at ``ptr``."""
        with self.lock:
            footprint = self.physical.pop(ptr)
            del self.physical_info[ptr]
            self._main.release(ptr)
            self._usage[MODULE_APP][0] -= footprint

    def drawn_bytes(self, memory: Memory) -> int:
        """Bytes of ``memory`` this view takes from the device (its budget's share): the
        footprints of its live blocks and physical handles, which its usage figures count
        (blocks the sanitizer's quarantine holds are freed for the program, so not counted).
        O(components); safe without the device lock (each figure is read once)."""
        if memory is not self._main_memory:
            return 0
        return sum([figures[0] for figures in list(self._usage.values())])
