"""The stand-in ``torch_npu.npu.random`` (``torch_npu/npu/random.py``): each card's default
generator, its state 16 bytes as torch_npu's Philox (seed, offset): see :mod:`._generators`;
and the seeds. ``torch_npu.npu`` exports these names (``from .random import *``); Hugging
Face's Trainer saves and restores the NPU's state through this module
(``torch.npu.random.get_rng_state()`` in ``Trainer._save_rng_state``)."""

from __future__ import annotations

from typing import Any

import torch

from .._missing import not_modelled
from ._generators import default_generators
from ._state import _index, _own, _session, active

__all__ = ["get_rng_state", "set_rng_state", "get_rng_state_all", "set_rng_state_all",
           "manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed"]

__getattr__ = not_modelled("torch_npu.npu.random")


def get_rng_state(device: Any = "npu") -> torch.Tensor:
    _session()
    return default_generators[_index(device)].get_state()


def set_rng_state(new_state: torch.Tensor, device: Any = "npu") -> None:
    _session()
    default_generators[_index(device)].set_state(new_state)


def get_rng_state_all() -> list:
    session = active()
    return [get_rng_state(i) for i in range(max(0 if session is None else session.device_count,
                                                 1))]


def set_rng_state_all(new_states: Any) -> None:
    for index, state in enumerate(new_states):
        set_rng_state(state, index)


def manual_seed(seed: int) -> None:
    """The current card's seed (nothing outside an estimate, as torch_npu without a card)."""
    if active() is not None:
        default_generators[_own()].manual_seed(seed)


def manual_seed_all(seed: int) -> None:
    for generator in default_generators:
        generator.manual_seed(seed)


def seed() -> None:
    if active() is not None:
        default_generators[_own()].seed()


def seed_all() -> None:
    for generator in default_generators:
        generator.seed()


def initial_seed() -> int:
    _session()
    return default_generators[_own()].initial_seed()
