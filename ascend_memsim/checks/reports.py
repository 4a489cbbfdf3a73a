"""The sanitizer's findings: kinds and severities, and one finding (:class:`Report`) with its
compute-sanitizer-like text.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..memory.sites import Site, format_site
from ..memory.units import plural

__all__ = ["KINDS", "MODES", "Report", "holds_memory", "plural_bytes"]

MODES = ("off", "report", "strict")

#: kind -> severity
KINDS = {
    "invalid-free": "error", "double-free": "error", "use-after-free": "error",
    "invalid-address": "error", "out-of-bounds": "error", "padding-access": "warning",
    "uninitialized-read": "error", "readonly-write": "error",
    "free-with-pending-work": "error", "leak": "error", "wrong-memory": "error",
    "kernel-error": "error", "unchecked-host-memory": "note", "wrong-memcpy-kind": "warning",
    "media-overflow": "error",
    "ipc-close-order": "error",
}

_BAR = "========="


def plural_bytes(n: int) -> str:
    """``1 byte``, ``2 bytes``."""
    return plural(n, "byte")


def holds_memory(leaked: object) -> bool:
    """True for a leaked thing that holds memory (a device, host or pool block, a physical
    handle); False for a handle that only describes memory or holds none (a tensor
    descriptor, a data buffer, a picture description, a model, an allocator descriptor:
    their class says ``holds_memory = False``). A leak report counts the bytes of the first
    kind only, so memory a leaked descriptor points at (freed, or reported as its own leak)
    is never counted twice."""
    return getattr(leaked, "holds_memory", True)


@dataclass(eq=False)
class Report:
    """One finding: what, in which call, where, and the sites of the memory involved."""

    kind: str
    call: str
    address: int
    size: int
    where: str
    write: bool | None = None
    block: str | None = None
    call_site: Site | None = field(default=None, repr=False)
    alloc_site: Site | None = field(default=None, repr=False)
    free_site: Site | None = field(default=None, repr=False)
    #: for queued work that faulted when it ran: where it was queued
    queued_site: Site | None = field(default=None, repr=False)

    @property
    def severity(self) -> str:
        return KINDS[self.kind]

    def format(self) -> str:
        """The compute-sanitizer-like text of the finding."""
        if self.kind == "leak" and not self.size:
            # a handle (see holds_memory): the sanitizer counts no bytes for it (memory is
            # never 0 bytes: a 0-byte allocation is refused)
            head = f"Leaked handle {self.address:#x}, found by {self.call}"
        elif self.kind == "leak":
            head = f"Leaked {plural_bytes(self.size)} at {self.address:#x}, found by {self.call}"
        elif self.kind in ("invalid-free", "double-free"):
            head = f"Invalid free of {self.address:#x} in {self.call}"
        elif self.kind == "kernel-error":
            head = f"Kernel failed in {self.call}"
        elif self.kind == "free-with-pending-work":
            head = f"Free of {self.address:#x} while queued work uses it, in {self.call}"
        elif self.kind == "ipc-close-order":
            head = f"Shared memory at {self.address:#x} let go before its importers, in {self.call}"
        elif self.kind == "wrong-memcpy-kind":
            head = (f"Copy of {plural_bytes(self.size)} to {self.address:#x} with a kind its "
                    f"pointers contradict, in {self.call}")
        else:
            access = "write" if self.write else "read"
            head = (f"Invalid {access} of {plural_bytes(self.size)} at {self.address:#x} in "
                    f"{self.call}")
        lines = [f"{_BAR} {self.severity.upper()}: {head} [{self.kind}]",
                 f"{_BAR}     {self.where}"]
        for title, site in (("at", self.call_site), ("queued at", self.queued_site),
                            ("allocated at", self.alloc_site), ("freed at", self.free_site)):
            if site:
                lines.append(f"{_BAR}     {title}:")
                lines.append(format_site(site, indent=f"{_BAR}         "))
        lines.append(_BAR)
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format()
