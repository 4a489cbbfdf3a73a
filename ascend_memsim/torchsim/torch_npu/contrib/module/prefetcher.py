"""The stand-in ``torch_npu.contrib.module.prefetcher``: a data prefetcher that copies the
next batch to the NPU on its own stream while the current one is used
(``torch_npu/contrib/module/prefetcher.py``).

Over a DataLoader (or any iterator of (input, target) pairs) of CPU tensors, as on the
machine: the loader's batches are real or fake as the host side makes them
(:mod:`ascend_memsim.torchsim.host`), and each pair's copies are made on the prefetcher's
stream, so they come from that stream's pool of the caching allocator. Between calls the
prefetcher holds the next pair on the device, so a step holds two batches: the one it uses
and the one prefetched.
"""

from __future__ import annotations

from typing import Any

from ...npu import Stream, current_stream
from ...npu import stream as on_stream

__all__ = ["Prefetcher"]


class Prefetcher:
    """``next()`` gives the pair prefetched and prefetches the one after; (None, None) once
    the loader is done.

    Raises:
        ValueError: the loader gives something other than pairs (Python's unpacking).
    """

    def __init__(self, loader: Any, stream: Any = None) -> None:
        self.loader = iter(loader)
        self.stream = stream if stream is not None else Stream()
        self.preload()

    def preload(self) -> None:
        """Take the loader's next pair and copy it to the NPU on the prefetcher's stream."""
        try:
            self.next_input, self.next_target = next(self.loader)
        except StopIteration:
            self.next_input = None
            self.next_target = None
            return
        with on_stream(self.stream):
            self.next_input = self.next_input.npu(non_blocking=True)
            self.next_target = self.next_target.npu(non_blocking=True)

    def next(self) -> tuple:
        current_stream().wait_stream(self.stream)
        next_input, next_target = self.next_input, self.next_target
        if next_target is not None:
            self.preload()
        return next_input, next_target
