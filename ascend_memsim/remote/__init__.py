"""Simulated processes across real Python processes: one owner holds the machine.

``owner = ascend_memsim.serve(rt)`` in the process that holds the runtime; in each worker it
starts (``multiprocessing``, spawn or fork), ``ascend_memsim.connect()``, then ``import acl``
as usual. See :mod:`.owner` (the server, host buffers) and :mod:`.worker` (the face).
"""

from __future__ import annotations

from .owner import ENV_ADDRESS, ENV_KEY, Owner, serve
from .worker import OwnerLost, Worker, connect

__all__ = ["serve", "connect", "Owner", "Worker", "OwnerLost", "ENV_ADDRESS", "ENV_KEY"]
