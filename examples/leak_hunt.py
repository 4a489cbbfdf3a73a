"""A leak hunt: which allocation was never freed, and where was it made?

The sanitizer (on by default) keeps each block's allocation site; when a device is reset
(aclrtResetDevice) or the runtime finalized, it reports every block still live, with the
stack that allocated it. `ascend-memsim run script.py` does the same for an unmodified pyacl
program and exits non-zero on a leak, like compute-sanitizer's --leak-check full.
Run: python examples/leak_hunt.py
"""

import sys

from ascend_memsim import MiB, Runtime, Sanitizer


def load_weights(rt):
    return rt.malloc(4 * MiB)


def step(rt):
    workspace = rt.malloc(1 * MiB)
    activations = rt.malloc(2 * MiB)
    rt.free(workspace)
    return activations            # forgotten by the caller: the leak


with Runtime("A2", hbm_bytes=64 * MiB, sanitizer=Sanitizer(output=sys.stdout)) as rt:
    rt.set_device(0)
    weights = load_weights(rt)
    for _ in range(3):
        step(rt)
    rt.free(weights)
    rt.reset_device(0)            # the sanitizer reports each block still live

leaks = [r for r in rt.sanitizer.reports if r.kind == "leak"]
print(rt.sanitizer.summary())
assert len(leaks) == 3 and all(r.size == 2 * MiB for r in leaks)
