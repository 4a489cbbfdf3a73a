"""The same allocation trace on Atlas A2 and on Ascend 950PR.

Record a workload once, then replay it: on A2 the +32 rule makes every 2 MiB or 4 MiB
tensor take one more huge page, on 950PR it does not. Bisection finds the smallest device
each product needs for the whole trace.
Run: python examples/same_trace_a2_950pr.py
"""

from ascend_memsim import MiB, Runtime
from ascend_memsim.observe.replay import replay, smallest_capacity
from ascend_memsim.observe.trace import Recorder

with Runtime("A2", hbm_bytes=1024 * MiB) as rt, Recorder(rt) as recorder:
    rt.set_device(0)
    weights = [rt.malloc(4 * MiB) for _ in range(8)]
    for _ in range(4):
        activations = [rt.malloc(2 * MiB) for _ in range(6)]
        scratch = rt.malloc(512 * 1024)
        for ptr in activations + [scratch]:
            rt.free(ptr)
    for ptr in weights:
        rt.free(ptr)
trace = recorder.trace

needed = {}
for product in ("A2", "950PR"):
    result = replay(trace, product, capacity=1024 * MiB)
    bisection = smallest_capacity(trace, product)
    needed[product] = bisection.capacity
    print(f"{product:6} peak footprint {result.peak_bytes // MiB:3} MiB; smallest device that "
          f"fits: {bisection.capacity // MiB} MiB")
print(f"A2 needs {needed['A2'] / needed['950PR']:.2f}x the memory of 950PR for this trace")
assert needed["A2"] > needed["950PR"]
