"""A Hypothesis state machine to subclass when testing an allocator built on ``acl.rt``.

Each example gets a fresh, active :class:`~ascend_memsim.Runtime` with ``device`` set, so
code calling ``acl.rt`` (or ``import acl`` after ``install_acl``) talks to it. Choose what it
simulates with class attributes, as the rest of a Hypothesis machine is (its ``Bundle``
objects, its ``TestCase.settings``): ``product`` (default ``"A2"``), ``capacity`` (the main
memory's size, an int or ``"64MiB"``: HBM, or DDR on a part without HBM; default 64 MiB),
``overrides`` (other profile fields, e.g. ``{"device_count": 2}``), ``device``,
``record_sites`` and ``fail_on``.

The hooks, in the order Hypothesis meets them:

- :meth:`setup`: build the allocator under test; ``self.runtime`` is already made, active,
  and has ``device`` set. Called once per example, before the first rule.
- the rules (yours); ``self.runtime`` is the simulated runtime (``self.runtime.malloc``,
  ``self.runtime.get_mem_info``, ...), :meth:`live_blocks` its live device blocks.
- :meth:`user_extents`: ``(ptr, size)`` of each piece your allocator has handed out and not
  taken back, read by an invariant after every step.
- :meth:`cleanup`: release the allocator (free what it cached) before the runtime goes, once
  per example, also after a failing step (a cleanup that trips over the broken state then
  does not hide the step's failure).

The simulator's invariants are checked after every step:

- :meth:`Device.check_invariants` on every device (allocator sound, blocks agree);
- accounting: for ``get_mem_info(ACL_HBM_MEM)``, free + the footprints of the live blocks
  == total (the HBM figure is the main memory on DDR-only parts);
- every extent of :meth:`user_extents` lies inside one live device block: memory handed out
  is still backed by the device;
- the sanitizer found nothing that fails a test under :attr:`AllocatorMachine.fail_on`, as
  the pytest fixture's ``fail_on`` (``"error"``, the default: a double free, a use after free,
  ...; ``"warning"``: a padding access too; ``"never"``). Findings are kept quiet while
  Hypothesis explores and shrinks: the failure of the final, shrunk example lists them, and the
  findings that did not fail are shown as notes of a failing example. A rule that means to
  cause a finding says so with ``with self.expect_findings("double-free"):``.

Subclass, build your allocator in :meth:`setup`, release it in :meth:`cleanup`, add rules::

    class CacheMachine(AllocatorMachine):
        product = "950PR"
        capacity = "256MiB"

        def setup(self):
            self.cache = MyCache()

        @rule(size=strategies.sizes(max_size=4 * MiB))
        def alloc(self, size): ...

        def user_extents(self):
            return self.cache.handed_out()      # [(ptr, size), ...]

        def cleanup(self):
            self.cache.empty()

    TestCache = CacheMachine.TestCase

DECISION: class attributes, not a factory: Hypothesis machines are configured on the class
(``TestCase.settings``), and the same machine on another product is a two-line subclass
(``class CacheOn310P(CacheMachine): product = "310P"``).
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
from ..memory.device import Block
from ..memory.errors import AclError
from ..memory.profiles import PROFILES, get_profile
from ..memory.units import parse_size
from ..runtime.runtime import Runtime
from ._findings import check_fail_on, failing_findings, findings_text, sanitizer_setting

__all__ = ["AllocatorMachine"]


class AllocatorMachine(RuleBasedStateMachine):
    """Base state machine: a fresh simulated runtime per example, simulator invariants."""

    #: The product simulated (a name of :data:`~ascend_memsim.memory.profiles.PROFILES`).
    product: str = "A2"
    #: The size of its main memory (HBM, or DDR on a part without HBM): bytes or ``"64MiB"``;
    #: None keeps the product's own. A ``hbm_bytes``/``ddr_bytes`` in ``overrides`` wins.
    capacity: int | str | None = 64 * MiB
    #: Other profile fields (``{"device_count": 2, "huge1g": True}``, ...).
    overrides: ClassVar[dict[str, Any]] = {}
    #: The device set on the thread before :meth:`setup` (None: none).
    device: int | None = 0
    #: Keep allocation sites (slower; helps read a failing example's blocks).
    record_sites: bool = False
    #: Which sanitizer findings fail the example: "error" (default), "warning" or "never".
    fail_on: str = "error"

    def __init__(self) -> None:
        super().__init__()
        check_fail_on(self.fail_on, f"{type(self).__name__}.fail_on")
        overrides = self._profile_overrides()
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

    def _profile_overrides(self) -> dict[str, Any]:
        """``overrides`` with ``capacity`` as the main memory's size of ``product``.

        Raises:
            ValueError: a bad ``product`` or ``capacity`` (the message names the attribute).
        """
        name = type(self).__name__
        try:
            profile = get_profile(self.product)
        except AclError:
            raise ValueError(f"{name}.product={self.product!r} is not a product; write one of "
                             f"{sorted(PROFILES)}") from None
        overrides = dict(self.overrides)
        if self.capacity is not None:
            try:
                capacity = parse_size(self.capacity)
            except AclError as e:
                raise ValueError(f"{name}.capacity={self.capacity!r}: {e.message}") from None
            overrides.setdefault("hbm_bytes" if profile.hbm_bytes else "ddr_bytes", capacity)
        return overrides

    def setup(self) -> None:
        """Build the allocator under test. ``self.runtime`` is made, active and has
        ``device`` set; called once per example before the first rule. Default: nothing."""

    def cleanup(self) -> None:
        """Release the allocator under test (give back what it cached) before the runtime
        goes; called once per example, also after a failing step. Default: nothing."""

    def user_extents(self) -> Iterable[tuple[int, int]]:
        """(ptr, size) of each piece of memory the user's allocator has handed out and not
        taken back; each must lie inside a live device block (checked after every step).
        Default: none."""
        return ()

    def live_blocks(self, device: int | None = None) -> list[Block]:
        """The live device blocks of ``self.runtime`` (a snapshot, by device then address):
        of every device, or of ``device`` only (none for a device never used). Each has
        ``ptr``, ``size``, ``footprint``, ``end``, ``page``, ``device_id``."""
        blocks = self.runtime.blocks()
        return blocks if device is None else [b for b in blocks if b.device_id == device]

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
