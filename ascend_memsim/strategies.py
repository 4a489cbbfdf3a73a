"""Hypothesis strategies that know where the allocation rules bite.

>>> from hypothesis import given
>>> from ascend_memsim import strategies as ms
>>> @given(ms.sizes(max_size=64 * 2**20), ms.policies())
... def test_malloc_never_corrupts(size, policy): ...

``sizes`` clusters at the rounding and page edges (multiples of 32 +- 1, 1 MiB, 2 MiB,
1 GiB), ``policies`` adds flag bits and values outside the enum, ``programs`` draws whole
alloc/free programs that :func:`run_program` executes against a runtime.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hypothesis import strategies as st

from .memory.args import SIZE_MAX, UINT32_MAX
from .memory.constants import GiB, KiB, MallocFlag, MallocPolicy, MemAttr, MiB
from .memory.errors import AclError
from .memory.profiles import PROFILES
from .memory.rules import Api
from .runtime.runtime import Runtime

__all__ = [
    "EDGES", "boundary_sizes", "sizes", "bad_sizes", "policies", "products", "apis",
    "mem_attrs", "Malloc", "Free", "programs", "run_program",
]

#: Sizes where a rule changes: the 32-byte rounding, the 64-byte placement, the 512-byte
#: rounding of caching allocators, the HUGE_FIRST threshold (1 MiB), huge pages (2 MiB), the
#: 20 MiB segments of torch-style caches, 1 GB pages.
EDGES = (32, 64, 512, 1 * KiB, 4 * KiB, 1 * MiB, 2 * MiB, 4 * MiB, 20 * MiB, 1 * GiB, 2 * GiB)
#: Offsets around each edge: either side of the +32 padding and the 32-byte alignment.
_OFFSETS = (-64, -33, -32, -31, -1, 0, 1, 31, 32, 33, 64)


def boundary_sizes(min_size: int = 1, max_size: int = 2 * GiB + 64) -> list[int]:
    """Every ``edge + offset`` within ``[min_size, max_size]``, sorted."""
    return sorted({e + o for e in EDGES for o in _OFFSETS if min_size <= e + o <= max_size})


def sizes(*, min_size: int = 1, max_size: int = 2 * GiB + 64) -> st.SearchStrategy[int]:
    """Valid byte counts that cluster at the rule edges: an edge +- a little, a multiple of 32
    +- 1, or any size in range. Shrinks towards ``min_size``."""
    if not 1 <= min_size <= max_size:
        raise ValueError(f"need 1 <= min_size <= max_size, got {min_size}, {max_size}")
    near = boundary_sizes(min_size, max_size)
    multiples = st.builds(lambda k, d: 32 * k + d,
                          st.integers(max(1, min_size // 32), max(1, max_size // 32)),
                          st.sampled_from((0, -1, 1))
                          ).filter(lambda n: min_size <= n <= max_size)
    parts = [st.integers(min_size, max_size), multiples]
    if near:
        parts.insert(1, st.sampled_from(near))
    return st.one_of(*parts)


def bad_sizes() -> st.SearchStrategy[object]:
    """Sizes every malloc must refuse: 0, negatives, past SIZE_MAX, bool, float, str, None."""
    return st.one_of(
        st.just(0), st.integers(max_value=-1), st.integers(min_value=SIZE_MAX + 1),
        st.booleans(), st.floats(), st.text(max_size=4), st.none())


_BASE = tuple(int(p) for p in MallocPolicy)
_FLAGS = tuple(int(f) for f in MallocFlag)


def policies(*, flags: bool = True, out_of_range: bool = True) -> st.SearchStrategy[int]:
    """Policy words: each enum value, with ``flags`` OR'd bandwidth/readonly bits, and with
    ``out_of_range`` values outside the enum (a hint, not an error, as memory.cpp takes them)."""
    base = st.sampled_from(_BASE)
    parts = [base]
    if flags:
        parts.append(st.builds(lambda b, fs: b | sum(set(fs)), base,
                               st.lists(st.sampled_from(_FLAGS), min_size=1, max_size=3)))
    if out_of_range:
        parts.append(st.integers(len(_BASE), 0xFF))
        parts.append(st.integers(0, UINT32_MAX))
    return st.one_of(*parts)


def products() -> st.SearchStrategy[str]:
    """The names of the registered products."""
    return st.sampled_from(sorted(PROFILES))


def apis(*, names: bool = False) -> st.SearchStrategy:
    """The allocation APIs (:class:`~ascend_memsim.memory.rules.Api`), or their pyacl names."""
    members = list(Api)
    return st.sampled_from([a.pyacl_name for a in members] if names else members)


def mem_attrs(*, out_of_range: bool = False) -> st.SearchStrategy[int]:
    """aclrtMemAttr values, and with ``out_of_range`` some that are not."""
    attrs = st.sampled_from([int(a) for a in MemAttr])
    return st.one_of(attrs, st.integers(len(MemAttr), 1 << 32)) if out_of_range else attrs


@dataclass(frozen=True)
class Malloc:
    """Allocate ``size`` bytes with ``policy`` through ``api``."""

    size: int
    policy: int = 0
    api: Api = Api.MALLOC


@dataclass(frozen=True)
class Free:
    """Free the block the ``index``-th step of the program allocated."""

    index: int


@st.composite
def programs(draw, *, max_steps: int = 30, max_size: int = 8 * MiB,
             size_strategy: st.SearchStrategy[int] | None = None,
             policy_strategy: st.SearchStrategy[int] | None = None,
             api_strategy: st.SearchStrategy | None = None,
             free_all: bool = False) -> list:
    """A list of :class:`Malloc` and :class:`Free` steps; each Free names an earlier Malloc
    not yet freed. ``free_all`` ends with a Free for every block still live."""
    sizes_ = sizes(max_size=max_size) if size_strategy is None else size_strategy
    policies_ = (policies(flags=False, out_of_range=False) if policy_strategy is None
                 else policy_strategy)
    apis_ = (st.sampled_from([Api.MALLOC, Api.MALLOC_ALIGN32]) if api_strategy is None
             else api_strategy)
    steps: list = []
    live: list[int] = []
    for _ in range(draw(st.integers(0, max_steps))):
        if live and draw(st.booleans()):
            steps.append(Free(live.pop(draw(st.integers(0, len(live) - 1)))))
        else:
            live.append(len(steps))
            api = draw(apis_)
            policy = draw(policies_)
            steps.append(Malloc(draw(sizes_), policy, api))
    if free_all:
        steps.extend(Free(i) for i in live)
    return steps


_CALLS = {
    Api.MALLOC: Runtime.malloc, Api.MALLOC_ALIGN32: Runtime.malloc_align32,
    Api.MALLOC_CACHED: Runtime.malloc_cached, Api.MALLOC_WITH_CFG: Runtime.malloc_with_cfg,
    Api.MALLOC_FOR_TASK_SCHEDULER: Runtime.malloc_for_task_scheduler,
}


def run_program(runtime: Runtime, program: Sequence) -> list:
    """Run the steps on ``runtime``'s current device; per step the pointer (Malloc), None
    (Free) or the AclError raised. A Free of a Malloc that failed is skipped (its result is
    that error, repeated)."""
    results: list = []
    for step in program:
        if isinstance(step, Malloc):
            try:
                results.append(_CALLS[step.api](runtime, step.size, step.policy))
            except AclError as e:
                results.append(e)
        else:
            ptr = results[step.index]
            if isinstance(ptr, AclError):
                results.append(ptr)
                continue
            runtime.free(ptr)
            results.append(None)
    return results
