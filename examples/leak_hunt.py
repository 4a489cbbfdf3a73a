"""A leak hunt: which allocation was never freed, and where was it made?

The runtime keeps each block's allocation site (Runtime.set_record_sites); the blocks still
live when the device is reset (aclrtResetDevice) are the leaks. `ascend-memsim run
script.py` does the same for an unmodified pyacl program and exits non-zero on a leak.
Run: python examples/leak_hunt.py
"""

from ascend_memsim import MiB, Runtime
from ascend_memsim.sites import format_site


def load_weights(rt):
    return rt.malloc(4 * MiB)


def step(rt):
    workspace = rt.malloc(1 * MiB)
    activations = rt.malloc(2 * MiB)
    rt.free(workspace)
    return activations            # forgotten by the caller: the leak


with Runtime("A2", hbm_bytes=64 * MiB) as rt:
    rt.set_record_sites(True)
    leaks = []
    rt.add_observer(lambda event, device, info:
                    leaks.extend(info["blocks"]) if event == "reset" else None)
    rt.set_device(0)
    weights = load_weights(rt)
    for _ in range(3):
        step(rt)
    rt.free(weights)
    rt.reset_device(0)

print(f"{len(leaks)} blocks were still live at reset:")
for block in leaks:
    print(f"  {block.describe()}, allocated at")
    print(format_site(block.extra["site"], indent="      "))
assert len(leaks) == 3 and all(b.size == 2 * MiB for b in leaks)
