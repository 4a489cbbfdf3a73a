"""Per-thread state: the calling thread's current device and context.

aclrtSetDevice and aclrtSetCurrentContext act on the calling thread only; a thread that never
set a device uses the default device of the aclInit config, if any.
"""

from __future__ import annotations

import threading

__all__ = ["ThreadState"]


class ThreadState:
    """The current device id and context handle of each thread, and the default device."""

    def __init__(self) -> None:
        #: ``device`` and ``context`` per thread (read directly by DeviceTable.current)
        self.local = threading.local()
        #: the device of threads that set none (aclInit's defaultDevice), or None
        self.default_device: int | None = None

    def device_id(self) -> int | None:
        """The calling thread's device id, else the default device, else None."""
        number = getattr(self.local, "device", None)
        return self.default_device if number is None else number

    def own_device_id(self) -> int | None:
        """The device id the calling thread set itself (not the default), or None."""
        return getattr(self.local, "device", None)

    def set_device_id(self, device_id: int | None) -> None:
        self.local.device = device_id

    def context(self) -> int | None:
        """The calling thread's context handle, or None."""
        return getattr(self.local, "context", None)

    def set_context(self, handle: int | None, device_id: int | None = None) -> None:
        """Make ``handle`` the calling thread's context and, given ``device_id``, that device
        current too."""
        self.local.context = handle
        if device_id is not None:
            self.local.device = device_id

    def clear(self) -> None:
        """Forget every thread's device and context (the default device stays)."""
        self.local = threading.local()
