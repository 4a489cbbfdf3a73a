"""One device's physical memory, shared by the processes of a simulated machine.

On hardware a device's memory is one physical resource: every process that sets the device
allocates from it, and aclrtGetMemInfo reports what the driver sees for the whole device
(``hicann/runtime`` ``src/runtime/driver/npu_driver_mem.cc``, NpuDriver::MemGetInfoEx, reads
``halMemGetInfo(deviceId, ...)``'s physical figures; ``docs/zh/api_ref/11-01``: "获取Device上
可用内存的空闲大小和总大小"). Each process's :class:`~ascend_memsim.memory.device.Device` for
that id is a *view*: its own address space and blocks. A :class:`DeviceBudget` joins the views
of one device id and holds its capacity, per memory type (HBM, DDR); what a view holds (its
live blocks' and physical handles' footprints, the usage figures it keeps anyway) is what it
draws. Page kinds are how each view places blocks in its address space (huge pages start on
2 MiB): they need no budget of their own, and the _HUGE figures of aclrtGetMemInfo are
derived (``Device.mem_info``). Blocks the sanitizer's quarantine holds are freed for the
program, so they draw nothing.

Cost: a device with one view never reads the budget (its allocator is the whole capacity).
From the second view on, every allocation on each view takes the budget's lock and sums the
views' holdings: O(views x components) per allocation; frees cost nothing extra. The view of
a process that ended (aclFinalize) leaves (:meth:`DeviceBudget.leave`).

Thread safety: the budget's lock is a leaf (nothing is called while it is held); a view takes
it inside its own device lock. A view's holdings change only under its device lock; readers
sum them without that lock. Growth is done under the budget's lock by views in shared mode; a
view that was alone when it began an allocation and found a second view when it ended checks
the budget afterwards (see ``Device._place``), so no two processes over-commit. Why not one
device lock shared by the views: an exporter's aclrtFree ends importers' mappings under its
device lock (taking their address-space locks, ``runtime/ipc.py``), while an importer's
aclrtMallocPhysical takes its device lock under its address-space lock; with one lock for
both processes' views the two could deadlock.
"""

from __future__ import annotations

import threading
from typing import Any

from .errors import InvalidArgument
from .profiles import Memory, Profile

__all__ = ["DeviceBudget"]


class DeviceBudget:
    """The capacity of device ``device_id`` on one machine, per memory type, and the views
    (one :class:`~ascend_memsim.memory.device.Device` per process) that draw from it."""

    __slots__ = ("device_id", "product", "capacity", "lock", "views")

    def __init__(self, device_id: int, profile: Profile) -> None:
        self.device_id = device_id
        #: the product's name (the processes of a machine share one)
        self.product = profile.name
        #: memory type -> bytes aclrtGetMemInfo calls the total (capacity less reserved)
        self.capacity: dict[Memory, int] = {
            memory: profile.total(memory) for memory in Memory if profile.capacity(memory)}
        self.lock = threading.Lock()
        #: every process's view of the device, in the order they were made
        self.views: list[Any] = []

    def __repr__(self) -> str:
        return f"DeviceBudget({self.device_id}, views={len(self.views)})"

    def join(self, view: Any) -> None:
        """Add ``view`` (a process's new Device for this id); from the second view on, every
        view checks the budget (``view.crowded``).

        Raises:
            InvalidArgument: the view's product or capacities are not the machine's.
        """
        theirs = {memory: view.profile.total(memory) for memory in Memory
                  if view.profile.capacity(memory)}
        if theirs != self.capacity or view.profile.name != self.product:
            # DECISION: the processes of one machine share its devices, so they share one
            # product and capacities (Runtime.spawn_process passes them on).
            mine = ", ".join(f"{n} bytes of {m.value}" for m, n in self.capacity.items())
            raise InvalidArgument(f"device {self.device_id} of this machine is an "
                                  f"{self.product} with {mine}; this process's product "
                                  f"({view.profile.name}) or its capacities differ, and the "
                                  f"processes of one machine share its devices")
        with self.lock:
            if any(each is view for each in self.views):
                return  # a view that never left (join after aclFinalize: see leave)
            self.views.append(view)
            if len(self.views) > 1:
                for each in self.views:
                    each.crowded = True

    def leave(self, view: Any) -> bool:
        """Take ``view`` out (its process ended: aclFinalize) if it holds nothing; True when it
        left. A view that still holds memory (a physical handle another process imported and
        has not let go) stays, so that memory stays counted. Back to one view, that view stops
        checking the budget. Without this, every process that ever used the device would stay
        a view and each allocation would sum them all."""
        with self.lock:
            kept = [each for each in self.views if each is not view]
            if len(kept) == len(self.views):
                return False
            if any(view.drawn_bytes(memory) for memory in self.capacity):
                return False
            self.views[:] = kept
            view.crowded = False
            if len(self.views) == 1:
                self.views[0].crowded = False
            return True

    def used(self, memory: Memory) -> int:
        """Bytes of ``memory`` the views hold. Call with :attr:`lock` held for a figure that
        no allocation in shared mode changes meanwhile."""
        return sum(view.drawn_bytes(memory) for view in self.views)

    def free(self, memory: Memory) -> int:
        """Bytes of ``memory`` no process holds."""
        with self.lock:
            return self.capacity.get(memory, 0) - self.used(memory)

    def fits(self, memory: Memory) -> bool:
        """True when the views hold no more than the capacity (the check after an allocation
        that began before a second view joined)."""
        with self.lock:
            return self.used(memory) <= self.capacity.get(memory, 0)

    def others(self, view: Any, memory: Memory) -> list[tuple[int | None, int]]:
        """(pid, bytes) of ``memory`` held by the other views, those holding any."""
        rows = [(other.pid, other.drawn_bytes(memory)) for other in self.views if other is not view]
        return [row for row in rows if row[1]]
