"""Several simulated processes on one simulated machine.

A :class:`Machine` is what processes share: the process table (pids), each device's physical
memory (:class:`~ascend_memsim.memory.budget.DeviceBudget`), the IPC key table (11-07,
:mod:`.ipc`) and the shareable-handle table (11-04, :mod:`.shareable`). Each
:class:`~ascend_memsim.runtime.runtime.Runtime` is one process on a machine: its own
``acl.init`` world (threads and their current devices, contexts, streams, events, host
memory, the virtual address space of its reservations and mappings, its sanitizer and
observers) and its pid (``aclrtDeviceGetBareTgid``). ``Runtime(...)`` makes a machine with one
process; ``rt.spawn_process()`` starts another on the same machine.

DECISION, what is per process and what is machine-wide. Per process: everything a process's
``acl.init`` makes, and its devices' *address spaces*: each process sees device ``n`` at the
same addresses (the simulator's address layout is per process, as virtual addresses are on
hardware) and its own blocks. Machine-wide: each device's memory, the pids, the IPC keys and
the shareable handles, so an export in one process is found by an import in another, and the
bytes of shared memory (the importer reads and writes the exporter's bytes). Every process's
view of device ``n`` draws from one budget, the product's capacity: one process's blocks and
physical handles lower the free memory aclrtGetMemInfo reports in every process (the driver's
figure is the device's: ``hicann/runtime`` ``src/runtime/driver/npu_driver_mem.cc``,
NpuDriver::MemGetInfoEx reads ``halMemGetInfo(deviceId, ...)``), and a malloc that does not
fit in what the processes together leave free fails with ACL_ERROR_RT_MEMORY_ALLOCATION (its
message names the processes holding memory); freeing, a reset of the device and aclFinalize
give the memory back. Shared memory is counted once, in the process that allocated it (an
import takes none). aclrtGetMemUsageInfo stays per process: the calling process's
components (the driver's halGetMemUsageInfo is not public; DECISION). Processes of one machine
have one product and its capacities (a process whose product or capacities differ cannot
use the device: ACL_ERROR_INVALID_PARAM). Every simulated process lives in one Python
process; real operating-system processes reach theirs through an owner that serves the
machine (:mod:`ascend_memsim.remote`).

Switching: ``with rt2:`` makes ``rt2`` the process the pyacl face talks to and, as for any
runtime, closes it (aclFinalize: the process ends) when the ``with`` ends;
``with rt2.as_current():`` switches without ending it, so a test can go back and forth.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Iterator
from typing import Any

from ..memory.budget import DeviceBudget
from ..memory.profiles import Profile

__all__ = ["Machine", "FIRST_PID", "as_current", "acting_as"]

#: DECISION: simulated pids start here and count up, one per process, never reused.
FIRST_PID = 4242


class Machine:
    """The processes of one simulated machine and what they share (see the module docstring).

    Thread-safe: one lock guards the tables.
    """

    def __init__(self) -> None:
        self.lock = threading.RLock()
        #: pid -> the process's runtime, in start order
        self.processes: dict[int, Any] = {}
        self._pids = itertools.count(FIRST_PID)
        #: IPC keys (11-07): key -> runtime.ipc's export record
        self.ipc_keys: dict[str, Any] = {}
        #: shareable handles (11-04): value -> runtime.shareable's record
        self.shareable: dict[int | bytes, Any] = {}
        self._serial = itertools.count(1)
        #: device id -> its physical memory, which every process's view of it draws from
        self.budgets: dict[int, DeviceBudget] = {}
        self._budgets_lock = threading.Lock()
        #: the process that made the machine (its first): its product and capacities are the
        #: machine's
        self._first: Any = None

    def __repr__(self) -> str:
        return f"Machine(processes={sorted(self.processes)})"

    def join(self, runtime: Any) -> int:
        """Add ``runtime`` as a new process; its pid."""
        with self.lock:
            pid = next(self._pids)
            self.processes[pid] = runtime
            if self._first is None:
                self._first = runtime
            return pid

    def process(self, pid: int) -> Any:
        """The runtime of process ``pid``.

        Raises:
            KeyError: no such process on this machine.
        """
        with self.lock:
            return self.processes[pid]

    def budget(self, device_id: int, profile: Profile) -> DeviceBudget:
        """The physical memory of device ``device_id`` (its own lock: a leaf, so a process may
        ask while holding any of its own), made on first use with the product and capacities
        of the machine's first process, as they are then (``acl.init`` may change them before
        any device is used; ``profile``, the asking process's, while that one is being made).
        DECISION: the machine's, not the first user's, so that a process with other
        capacities cannot take a device before the machine's own process uses it, and then
        keep it from that process after it ended."""
        with self._budgets_lock:
            budget = self.budgets.get(device_id)
            if budget is None:
                table = getattr(self._first, "_table", None)
                machine_profile = profile if table is None else table.profile
                budget = self.budgets[device_id] = DeviceBudget(device_id, machine_profile)
            return budget

    def serial(self) -> int:
        """A machine-wide serial number (keys and shareable handles are made from it)."""
        with self.lock:
            return next(self._serial)


@contextlib.contextmanager
def as_current(runtime: Any) -> Iterator[Any]:
    """Make ``runtime`` the one the pyacl face talks to for the ``with`` block, without
    closing it at the end (a switch between processes, not the end of one)."""
    active, lock = type(runtime).active, type(runtime).active_lock
    with lock:
        active.append(runtime)
    try:
        yield runtime
    finally:
        with lock:
            for i in range(len(active) - 1, -1, -1):
                if active[i] is runtime:
                    del active[i]
                    break


@contextlib.contextmanager
def acting_as(runtime: Any) -> Iterator[Any]:
    """Make the calling thread's face calls go to ``runtime`` for the ``with`` block, whatever
    runtime is active for the rest of the Python process (an owner's thread serving a worker
    process, :mod:`ascend_memsim.remote`). Does not nest on one thread."""
    acting, ident = type(runtime).acting, threading.get_ident()
    if ident in acting:
        raise RuntimeError("this thread already acts as another process")
    acting[ident] = runtime
    try:
        yield runtime
    finally:
        del acting[ident]
