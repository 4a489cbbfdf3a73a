"""The NPUs' default random generators: ``torch_npu.npu.default_generators``, one per card,
which ``torch_npu.npu.random``'s ``get_rng_state`` / ``set_rng_state`` / ``manual_seed`` read
and write (``torch_npu/npu/random.py``: ``get_default_generator(idx).get_state()``), and
which ``transfer_to_npu`` gives ``torch.cuda`` (``_update_cuda_default_generators``).
Megatron-core's RNG tracker sets a card's state through them
(``megatron/core/tensor_parallel/random.py``, ``_set_cuda_rng_state``:
``torch.cuda.default_generators[idx].set_state(state)``).

A generator's state is 16 bytes, as torch_npu's Philox generator keeps it: the seed and the
offset, 8 bytes each, little-endian. Fake tensors draw no numbers, so the offset stays where
it was set: a state read back is the state set.

DECISION: ``default_generators`` is a sequence sized by the running estimate's cards
(``device_count()``; empty outside one), not a tuple made once at the device's start as
torch_npu's is: the stand-in's device starts with each estimate, and a script that took the
sequence (``transfer_to_npu`` does) sees the cards of the run it is in.
"""

from __future__ import annotations

import random as _random
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor, unset_fake_temporarily

from ._state import active

__all__ = ["NPUGenerator", "default_generators", "reset"]

_MASK = (1 << 64) - 1
#: the bytes of a state: the seed, then the offset (torch_npu's Philox state)
STATE_BYTES = 16


class NPUGenerator:
    """A card's default generator: the methods of ``torch.Generator`` that read and set its
    state (``get_state``, ``set_state``, ``manual_seed``, ``initial_seed``, ``seed``, and the
    graph-safe ones, ``clone_state``, ``graphsafe_get_state``, ``graphsafe_set_state``)."""

    __slots__ = ("device", "_seed", "_offset")

    def __init__(self, index: int) -> None:
        self.device = torch.device("npu", index)
        self._seed = 0
        self._offset = 0

    def get_state(self) -> torch.Tensor:
        """The state as a real CPU ``uint8`` tensor of 16 bytes."""
        data = self._seed.to_bytes(8, "little") + self._offset.to_bytes(8, "little")
        with unset_fake_temporarily():
            return torch.tensor(list(data), dtype=torch.uint8)

    def set_state(self, new_state: torch.Tensor) -> NPUGenerator:
        """Take the state ``new_state`` (a ``get_state()``). DECISION: a state without
        values (a fake tensor: one that went to the device and back) leaves the generator as
        it is; fake tensors draw no numbers, so no figure depends on it.

        Raises:
            TypeError: not a ``uint8`` tensor.
            RuntimeError: not 16 bytes.
        """
        if not isinstance(new_state, torch.Tensor) or new_state.dtype != torch.uint8:
            raise TypeError("RNG state must be a torch.ByteTensor")
        if new_state.numel() != STATE_BYTES:
            raise RuntimeError(f"RNG state is wrong size: {new_state.numel()} bytes, "
                               f"expected {STATE_BYTES}")
        if isinstance(new_state, FakeTensor):
            return self
        with unset_fake_temporarily():
            data = bytes(new_state.cpu().tolist())
        self._seed = int.from_bytes(data[:8], "little")
        self._offset = int.from_bytes(data[8:], "little")
        return self

    def manual_seed(self, seed: int) -> NPUGenerator:
        self._seed, self._offset = int(seed) & _MASK, 0
        return self

    def initial_seed(self) -> int:
        return self._seed

    def seed(self) -> int:
        """A nondeterministic seed, taken and returned (as ``torch.Generator.seed``)."""
        self.manual_seed(_random.getrandbits(64))
        return self._seed

    def clone_state(self) -> NPUGenerator:
        twin = NPUGenerator(self.device.index or 0)
        twin._seed, twin._offset = self._seed, self._offset
        return twin

    def graphsafe_get_state(self) -> NPUGenerator:
        return self.clone_state()

    def graphsafe_set_state(self, state: NPUGenerator) -> NPUGenerator:
        if not isinstance(state, NPUGenerator):
            raise TypeError(f"expected an NPU generator, got {type(state).__name__}")
        self._seed, self._offset = state._seed, state._offset
        return self

    def __repr__(self) -> str:
        return f"<NPUGenerator {self.device}, seed {self._seed}>"


class _DefaultGenerators(Sequence):
    """One :class:`NPUGenerator` per card of the running estimate (see the module's
    DECISION). O(1) an index."""

    def __init__(self) -> None:
        self._made: dict[int, NPUGenerator] = {}

    def __len__(self) -> int:
        session = active()
        return 0 if session is None else int(session.device_count)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return tuple(self[i] for i in range(len(self))[index])
        count = len(self)
        if not isinstance(index, int) or isinstance(index, bool):
            raise TypeError(f"tuple indices must be integers or slices, not "
                            f"{type(index).__name__}")
        if index < 0:
            index += count
        if not 0 <= index < count:
            raise IndexError("tuple index out of range")
        made = self._made.get(index)
        if made is None:
            made = self._made[index] = NPUGenerator(index)
        return made

    def __iter__(self) -> Iterator[NPUGenerator]:
        return (self[i] for i in range(len(self)))

    def reset(self) -> None:
        self._made.clear()


#: torch_npu.npu.default_generators
default_generators = _DefaultGenerators()


def reset() -> None:
    """Every card's generator as a new process has it (seed 0, offset 0)."""
    default_generators.reset()
