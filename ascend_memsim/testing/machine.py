"""A Hypothesis state machine to subclass when testing an allocator built on ``acl.rt``.

Each example gets a fresh, active :class:`~ascend_memsim.Runtime` (``product``, ``overrides``)
with ``device`` set, so code calling ``acl.rt`` (or ``import acl`` after ``install_acl``) talks
to it. The simulator's invariants are checked after every step:

- :meth:`Device.check_invariants` on every device (allocator sound, blocks agree);
- accounting: for ``get_mem_info(ACL_HBM_MEM)``, free + the footprints of the live blocks
  == total (the HBM figure is the main memory on DDR-only parts);
- every extent the user's allocator says it handed out (:meth:`user_extents`) lies inside one
  live device block: memory handed out is still backed by the device.

Subclass, build your allocator in :meth:`setup`, release it in :meth:`cleanup`, add rules::

    class CacheMachine(AllocatorMachine):
        def setup(self):
            self.cache = MyCache()

        @rule(size=strategies.sizes(max_size=4 * MiB))
        def alloc(self, size): ...

    TestCache = CacheMachine.TestCase
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any, ClassVar

from hypothesis.stateful import RuleBasedStateMachine, invariant

from .. import checks as _checks  # noqa: F401  (registers the checker and config keys)
from ..memory.constants import MemAttr, MiB
from ..runtime.runtime import Runtime

__all__ = ["AllocatorMachine"]


class AllocatorMachine(RuleBasedStateMachine):
    """Base state machine: a fresh simulated runtime per example, simulator invariants."""

    #: The product simulated, its profile overrides, and the device set on the thread.
    product: str = "A2"
    overrides: ClassVar[dict[str, Any]] = {"hbm_bytes": 64 * MiB}
    device: int | None = 0
    #: Keep allocation sites (slower; helps read a failing example's blocks).
    record_sites: bool = False

    def __init__(self) -> None:
        super().__init__()
        self.runtime = Runtime(self.product, **self.overrides)
        self.runtime.set_record_sites(self.record_sites)
        self.runtime.__enter__()
        try:
            if self.device is not None:
                self.runtime.set_device(self.device)
            self.setup()
        except BaseException:
            self.runtime.__exit__(None, None, None)
            raise

    def setup(self) -> None:
        """Build the allocator under test (the runtime is active). Default: nothing."""

    def cleanup(self) -> None:
        """Release the allocator under test before the runtime goes. Default: nothing."""

    def user_extents(self) -> Iterable[tuple[int, int]]:
        """(ptr, size) of each piece of memory the user's allocator has handed out and not
        taken back; each must lie inside a live device block. Default: none."""
        return ()

    def teardown(self) -> None:
        # Hypothesis calls teardown in a `finally`: when a step or invariant has failed, its
        # exception is in flight, and a cleanup tripping over the broken state must not hide it.
        failing = sys.exc_info()[1] is not None
        try:
            self.cleanup()
        except Exception:
            if not failing:
                raise
        finally:
            self.runtime.__exit__(None, None, None)

    @invariant()
    def devices_are_sound(self) -> None:
        for device in self.runtime.devices():
            device.check_invariants()

    @invariant()
    def accounting_identity_holds(self) -> None:
        for device in self.runtime.devices():
            free, total = device.mem_info(MemAttr.HBM_MEM)
            live = sum(b.footprint for b in device.blocks())
            assert free + live == total, (
                f"device {device.device_id}: free {free} + live footprints {live} != total "
                f"{total}")

    @invariant()
    def handed_out_memory_is_backed(self) -> None:
        runtime = self.runtime
        for ptr, size in self.user_extents():
            block = runtime.block_at(ptr)
            assert block is not None, (
                f"the allocator handed out {size} bytes at {ptr:#x}, which no live device "
                f"block holds (freed to the device while still in use?)")
            assert ptr + size <= block.end, (
                f"the allocator handed out [{ptr:#x}, {ptr + size:#x}), which runs past the "
                f"end of the {block.describe()}")
