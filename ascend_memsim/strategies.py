"""Hypothesis strategies that know where the allocation rules bite.

>>> from hypothesis import given
>>> from ascend_memsim import strategies as ms
>>> @given(ms.sizes(max_size=64 * 2**20), ms.policies())
... def test_malloc_never_corrupts(size, policy): ...

The strategies (keyword arguments only; each returns a Hypothesis strategy):

=============================================================  ================================
``sizes(*, min_size=1, max_size=2 GiB + 64)``                   ints in range, clustered at the
                                                                rule edges (:data:`EDGES`)
``bad_sizes()``                                                 what every malloc refuses
``policies(*, flags=True, out_of_range=True)``                  aclrtMemMallocPolicy words
``products()``                                                  product names
``apis(*, names=False)``                                        :class:`Api` members (or names)
``mem_attrs(*, out_of_range=False)``                            aclrtMemAttr values
``programs(*, max_steps=30, max_size=8 MiB, size_strategy=None,  lists of :class:`Malloc` and
policy_strategy=None, api_strategy=None, free_all=False)``      :class:`Free` steps
=============================================================  ================================

and :func:`boundary_sizes` (a plain list) and :func:`run_program` (runs a program's steps on
a runtime: per step the pointer, None or the AclError) are the helpers around them.

A program, as :func:`programs` draws it, for example::

    [Malloc(size=2097153, policy=0, api=Api.MALLOC),      # step 0
     Malloc(size=31, policy=2, api=Api.MALLOC_ALIGN32),   # step 1
     Free(index=0),                                       # frees step 0's block
     Malloc(size=1048576, policy=1, api=Api.MALLOC)]      # step 3

``Free.index`` is the position in the list of the Malloc whose block it frees, and
:func:`run_program`'s results line up with the steps, so ``results[step.index]`` is that
block's pointer.
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
    """Every ``edge + offset`` within ``[min_size, max_size]``, sorted: each of :data:`EDGES`
    and the sizes 1, 31, 32, 33 and 64 bytes either side of it (a plain list, to
    parametrize a test or feed ``st.sampled_from``)."""
    return sorted({e + o for e in EDGES for o in _OFFSETS if min_size <= e + o <= max_size})


def sizes(*, min_size: int = 1, max_size: int = 2 * GiB + 64) -> st.SearchStrategy[int]:
    """Valid byte counts in ``[min_size, max_size]`` that cluster at the rule edges: each
    draw is any size in range, one of :func:`boundary_sizes`, or a multiple of 32 +- 1.
    Shrinks towards ``min_size``.

    Raises:
        ValueError: not ``1 <= min_size <= max_size``.
    """
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
    """Sizes every malloc must refuse (``st.SearchStrategy[object]``): 0, negative ints, ints
    past SIZE_MAX, bools, floats, short strings and None."""
    return st.one_of(
        st.just(0), st.integers(max_value=-1), st.integers(min_value=SIZE_MAX + 1),
        st.booleans(), st.floats(), st.text(max_size=4), st.none())


_BASE = tuple(int(p) for p in MallocPolicy)
_FLAGS = tuple(int(f) for f in MallocFlag)


def policies(*, flags: bool = True, out_of_range: bool = True) -> st.SearchStrategy[int]:
    """aclrtMemMallocPolicy words (ints): each enum value (0..7, HUGE_FIRST to HUGE1G_ONLY_P2P);
    with ``flags``, also one OR'd with 1 to 3 of the bandwidth/readonly flag bits; with
    ``out_of_range``, also values outside the enum (8..255 and any uint32: a hint, not an
    error, as memory.cpp takes them). Shrinks towards 0 (HUGE_FIRST)."""
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
    """The names of the registered products (``"950PR"``, ``"A2"``, ...), for
    ``Runtime(product)``."""
    return st.sampled_from(sorted(PROFILES))


def apis(*, names: bool = False) -> st.SearchStrategy:
    """The allocation APIs (:class:`~ascend_memsim.memory.rules.Api`: MALLOC,
    MALLOC_ALIGN32, MALLOC_CACHED, ...), or with ``names`` their pyacl names
    (``"malloc"``, ...)."""
    members = list(Api)
    return st.sampled_from([a.pyacl_name for a in members] if names else members)


def mem_attrs(*, out_of_range: bool = False) -> st.SearchStrategy[int]:
    """aclrtMemAttr values (ints, for ``get_mem_info``), and with ``out_of_range`` ints up to
    2**32 that are not one (get_mem_info refuses them)."""
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
    """A program: a list of up to ``max_steps`` :class:`Malloc` and :class:`Free` steps.

    Each step is a Free half the time when a block is live (of a live block picked at
    random: ``Free(index)`` names the position of an earlier Malloc not yet freed), else a
    Malloc whose size comes from ``size_strategy`` (default ``sizes(max_size=max_size)``),
    policy from ``policy_strategy`` (default: the enum values, no flags) and API from
    ``api_strategy`` (default: ``Api.MALLOC`` or ``Api.MALLOC_ALIGN32``). ``free_all`` ends
    the program with a Free of every block still live (in allocation order), so a correct
    run leaves the device empty. Shrinks towards fewer steps and smaller sizes. Run it with
    :func:`run_program`.
    """
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
    """Run the steps on ``runtime``'s current device (a device must be set); a list as long
    as ``program``: per step the pointer (Malloc), None (Free) or the AclError the Malloc
    raised (an out-of-memory is a result, not a failure). A Free of a Malloc that failed is
    skipped (its result is that error, repeated). Other exceptions propagate."""
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
