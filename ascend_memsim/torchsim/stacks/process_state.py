"""What a library keeps for the life of its process, forgotten between the ranks of an
estimate: the ranks of ``estimate --world-size N`` run one after another in this process,
where on the machine each rank is a process of its own, so a library's process-wide state
(a singleton made at its first use, a cached device choice) must not pass from one rank to
the next.

Each entry names a module and how to forget its state; it is applied only when that module
was imported (nothing here imports a stack). :func:`forget` runs before each rank's run
(:mod:`..ranks.run`). A stack's module adds its own entry with :func:`register`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

__all__ = ["register", "forget"]

#: module name -> what forgets its process-wide state (given the module)
_RESETS: dict[str, Callable[[Any], None]] = {}


def register(module: str, reset: Callable[[Any], None]) -> None:
    """Forget ``module``'s process-wide state with ``reset(module)`` before each rank."""
    _RESETS[module] = reset


def forget() -> None:
    """Forget the process-wide state of every registered module imported so far."""
    for name, reset in _RESETS.items():
        module = sys.modules.get(name)
        if module is not None:
            reset(module)


def _accelerate(state: Any) -> None:
    # accelerate/state.py: PartialState, AcceleratorState and GradientState are singletons
    # (a shared __dict__); a rank made on the last rank's process group would skip
    # init_process_group. _reset_state is accelerate's own reset, which its tests use
    state.AcceleratorState._reset_state(reset_partial_state=True)
    state.GradientState._reset_state()


register("accelerate.state", _accelerate)


def _dtensor(tensor: Any) -> None:
    # torch/distributed/tensor/_sharding_prop.py: DTensor's sharding propagation is cached
    # (in Python and in its C++ fast path) by the operator's schema, whose device mesh
    # compares equal to the next rank's: the output's spec would name the last rank's mesh
    # object (FSDP2 on a named mesh refuses a parameter whose mesh is not its own).
    # _clear_sharding_prop_cache is torch's own reset (torch/distributed/tensor/debug)
    from torch.distributed.tensor.debug import _clear_sharding_prop_cache

    _clear_sharding_prop_cache()


register("torch.distributed.tensor", _dtensor)
