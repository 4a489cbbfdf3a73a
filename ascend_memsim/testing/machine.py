"""A Hypothesis state machine to subclass when testing an allocator built on ``acl.rt``.

Each example gets a fresh, active :class:`~ascend_memsim.Runtime` (``product``, ``overrides``)
with ``device`` set, so code calling ``acl.rt`` (or ``import acl`` after ``install_acl``) talks
to it. The simulator's invariants are checked after every step:

- :meth:`Device.check_invariants` on every device (allocator sound, blocks agree);
- accounting: for ``get_mem_info(ACL_HBM_MEM)``, free + the footprints of the live blocks
  == total (the HBM figure is the main memory on DDR-only parts);
- every extent the user's allocator says it handed out (:meth:`user_extents`) lies inside one
  live device block: memory handed out is still backed by the device;
- the sanitizer found nothing that fails a test under :attr:`AllocatorMachine.fail_on`, as
  the pytest fixture's ``fail_on`` (``"error"``, the default: a double free, a use after free,
  ...; ``"warning"``: a padding access too; ``"never"``). Findings are kept quiet while
  Hypothesis explores and shrinks: the failure of the final, shrunk example lists them, and the
  findings that did not fail are shown as notes of a failing example. A rule that means to
  cause a finding says so with ``with self.expect_findings("double-free"):``.

Subclass, build your allocator in :meth:`setup`, release it in :meth:`cleanup`, add rules::

    class CacheMachine(AllocatorMachine):
        def setup(self):
            self.cache = MyCache()

        @rule(size=strategies.sizes(max_size=4 * MiB))
        def alloc(self, size): ...

    TestCache = CacheMachine.TestCase
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterable, Iterator
from typing import Any, ClassVar

from hypothesis import note
from hypothesis.stateful import RuleBasedStateMachine, invariant

from .. import checks as _checks  # noqa: F401  (registers the checker and config keys)
from ..memory.constants import MemAttr, MiB
from ..runtime.runtime import Runtime
from ._findings import check_fail_on, failing_findings, findings_text, sanitizer_setting

__all__ = ["AllocatorMachine"]


class AllocatorMachine(RuleBasedStateMachine):
    """Base state machine: a fresh simulated runtime per example, simulator invariants."""

    #: The product simulated, its profile overrides, and the device set on the thread.
    product: str = "A2"
    overrides: ClassVar[dict[str, Any]] = {"hbm_bytes": 64 * MiB}
    device: int | None = 0
    #: Keep allocation sites (slower; helps read a failing example's blocks).
    record_sites: bool = False
    #: Which sanitizer findings fail the example: "error" (default), "warning" or "never".
    fail_on: str = "error"

    def __init__(self) -> None:
        super().__init__()
        check_fail_on(self.fail_on, f"{type(self).__name__}.fail_on")
        overrides = dict(self.overrides)
        # quiet: Hypothesis runs hundreds of examples; the failing one lists its findings
        overrides["sanitizer"] = sanitizer_setting(overrides.get("sanitizer"), output=None,
                                                   leaks=False)
        self.runtime = Runtime(self.product, **overrides)
        #: how many of the sanitizer's reports were looked at; ids of the expected ones
        self._findings_seen = 0
        self._expected: set[int] = set()
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
            if not failing:
                self.sanitizer_found_nothing_to_fail()
        except Exception:
            if not failing:
                raise
        finally:
            self.runtime.__exit__(None, None, None)

    @contextlib.contextmanager
    def expect_findings(self, *kinds: str) -> Iterator[None]:
        """Findings of ``kinds`` (``"double-free"``, ``"invalid-free"``, ...) made inside the
        block do not fail the example: the rule means to cause them."""
        sanitizer = getattr(self.runtime, "sanitizer", None)
        start = len(sanitizer.reports) if sanitizer is not None else 0
        try:
            yield
        finally:
            if sanitizer is not None:
                self._expected.update(id(r) for r in sanitizer.reports[start:]
                                      if r.kind in kinds)

    @invariant()
    def sanitizer_found_nothing_to_fail(self) -> None:
        sanitizer = getattr(self.runtime, "sanitizer", None)
        if sanitizer is None:
            return
        reports = sanitizer.reports
        if len(reports) < self._findings_seen:     # the rules cleared the sanitizer
            self._findings_seen = 0
        new = [r for r in reports[self._findings_seen:] if id(r) not in self._expected]
        self._findings_seen = len(reports)
        failing = failing_findings(new, self.fail_on)
        failed = {id(r) for r in failing}
        for report in new:
            if id(report) not in failed and report.kind != "leak":
                note(report.format())
        if failing:
            raise AssertionError(findings_text(
                type(self).__name__, failing,
                "wrap the call in `with self.expect_findings(...)` if the rule means to cause "
                "them, or set fail_on = 'never' on the class"))

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
