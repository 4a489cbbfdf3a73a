"""A seeded random allocation workload, shared by the placement test and the script that
recorded its addresses (``python tests/placement_workload.py > tests/data/placement.json``).

Each product gets its own program: mallocs of sizes from 1 byte to tens of MiB through the
four malloc calls and every policy, frees in random order (LIFO-ish and not), device resets
and a second device. The recorded file holds, per product, the address (or the error code)
of every malloc in order.
"""

from __future__ import annotations

import json
import random
import sys

from memory_sizes import capacity

PRODUCTS = ("A2", "A3", "310P", "950PR", "950DT")
STEPS = 1500
_SIZES = (1, 7, 32, 33, 64, 100, 512, 1000, 4096, 65536, 1 << 20, 2 << 20, 3 << 20, 5 << 20,
          (2 << 20) - 1, 40 << 20)


def program(product: str, steps: int = STEPS) -> list[tuple]:
    """The calls of the workload for ``product``: ("malloc", api, size, policy, device),
    ("free", index of the malloc, device) and ("reset", device)."""
    rng = random.Random(f"placement-{product}")
    calls: list[tuple] = []
    live: list[list[int]] = [[], []]
    count = 0
    for _ in range(steps):
        device = 0 if rng.random() < 0.85 else 1
        r = rng.random()
        if r < 0.55 or not live[device]:
            size = rng.choice(_SIZES) if rng.random() < 0.5 else rng.randint(1, 3 << 20)
            api = rng.choice(("malloc", "malloc", "malloc_align32", "malloc_cached"))
            policy = rng.choice((0, 0, 0, 1, 2, 3, 4, 5, 6))
            calls.append(("malloc", api, size, policy, device))
            live[device].append(count)
            count += 1
        elif r < 0.995:
            pool = live[device]
            i = len(pool) - 1 - min(len(pool) - 1, int(rng.expovariate(0.3))) \
                if rng.random() < 0.6 else rng.randrange(len(pool))
            calls.append(("free", pool.pop(i), device))
        else:
            calls.append(("reset", device))
            live[device] = []
    return calls


def run(product: str, steps: int = STEPS) -> list[int]:
    """Run the workload through ``acl.rt``; each malloc's address, or -code when it fails."""
    from ascend_memsim import Runtime, acl

    out: list[int] = []
    ptrs: dict[int, int] = {}
    refs = [0, 0]

    def use(device: int) -> None:
        acl.rt.set_device(device)
        refs[device] += 1

    with Runtime(product, **capacity(product, 256 << 20, ddr=256 << 20), device_count=2,
                 sanitizer={"output": None}):
        for call in program(product, steps):
            if call[0] == "malloc":
                _, api, size, policy, device = call
                use(device)
                ptr, ret = getattr(acl.rt, api)(size, policy)
                out.append(ptr if ret == 0 else -ret)
                ptrs[len(out) - 1] = ptr
            elif call[0] == "free":
                _, index, device = call
                use(device)
                if ptrs.get(index):
                    acl.rt.free(ptrs[index])
            else:
                for _ in range(refs[call[1]]):
                    acl.rt.reset_device(call[1])
                refs[call[1]] = 0
                ptrs = {k: v for k, v in ptrs.items() if not _on(v, call[1])}
    return out


def run_allocator(steps: int = 20000) -> list[int]:
    """A fragmenting churn straight on :class:`Allocator` (sizes from 64 bytes to 8 MiB,
    alignments 64 bytes to 2 MiB); each allocation's address, or -1 when none fits."""
    from ascend_memsim import Allocator

    rng = random.Random("placement-allocator")
    alloc = Allocator(1 << 30, base=1 << 40)
    out: list[int] = []
    live: list[int] = []
    for _ in range(steps):
        if rng.random() < 0.52 or not live:
            size = 64 * (rng.randint(1, 64) if rng.random() < 0.7 else rng.randint(1, 1 << 17))
            align = rng.choice((64, 64, 64, 512, 4096, 2 << 20))
            ptr = alloc.allocate(size, align)
            out.append(-1 if ptr is None else ptr)
            if ptr is not None:
                live.append(ptr)
        else:
            i = rng.randrange(len(live)) if rng.random() < 0.5 else len(live) - 1
            live[i], live[-1] = live[-1], live[i]
            alloc.release(live.pop())
    return out


def _on(ptr: int, device: int) -> bool:
    from ascend_memsim.memory.rules import device_of
    return device_of(ptr) == device


if __name__ == "__main__":
    recorded = {p: run(p) for p in PRODUCTS}
    recorded["allocator"] = run_allocator()
    json.dump(recorded, sys.stdout, separators=(",", ":"))
