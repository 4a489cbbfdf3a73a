"""What the interop paths cost, as ratios in one run.

    python benchmarks/bench_interop.py

1. Reading a torch snapshot pickle against reading the same events as a JSON Lines trace.
2. Interpreter start with the ASCEND_MEMSIM startup hook: variable unset, set (the finder
   only), and set with `import acl` (which imports the simulator).
"""

import os
import subprocess
import sys
import tempfile
import time
import timeit

from ascend_memsim.observe.snapshot import memory_viz_bytes
from ascend_memsim.observe.trace import Trace, load

N = 50_000   # malloc/free pairs


def _events():
    events = []
    for i in range(N):
        ptr = 0x7F0000000000 + (i % 512) * (4 << 20)
        stack = [f"train.py:{10 + i % 7} in step", "model.py:42 in forward"]
        events.append({"event": "malloc", "api": "aclrtMalloc", "policy": 0, "size": 1 << 20,
                       "ptr": ptr, "device": 0, "stream": None, "thread": 0, "stack": stack})
        events.append({"event": "free", "ptr": ptr, "size": 1 << 20, "device": 0,
                       "stream": None, "thread": 0})
    for seq, event in enumerate(events):
        event["seq"] = seq
    return events


def _best(fn, repeat=3):
    return min(timeit.repeat(fn, number=1, repeat=repeat))


def _start(env_value, code):
    env = {k: v for k, v in os.environ.items() if k != "ASCEND_MEMSIM"}
    if env_value is not None:
        env["ASCEND_MEMSIM"] = env_value
    best = float("inf")
    for _ in range(7):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], env=env, check=True)
        best = min(best, time.perf_counter() - t)
    return best


def main():
    events = _events()
    with tempfile.TemporaryDirectory() as tmp:
        jsonl, snap = os.path.join(tmp, "t.jsonl"), os.path.join(tmp, "s.pickle")
        Trace(events=events, header={"product": "A2"}).save(jsonl)
        with open(snap, "wb") as f:
            f.write(memory_viz_bytes(events, {"product": "A2"}))
        assert len(load(snap).events) == len(load(jsonl).events) == 2 * N
        t_jsonl, t_snap = _best(lambda: load(jsonl)), _best(lambda: load(snap))
        size = os.path.getsize(snap)
        print(f"| reading {2 * N:,} events | seconds | ratio |")
        print("|---|---|---|")
        print(f"| JSON Lines trace | {t_jsonl:.2f} | 1.00 |")
        print(f"| torch snapshot pickle ({size / 2**20:.1f} MiB, restricted unpickler) | "
              f"{t_snap:.2f} | {t_snap / t_jsonl:.2f} |")
    print()
    base = _start(None, "pass")
    rows = [("ASCEND_MEMSIM unset", base), ("ASCEND_MEMSIM=1", _start("1", "pass")),
            ("ASCEND_MEMSIM=1 and `import acl`", _start("1", "import acl"))]
    print("| interpreter start | ms (best of 7) | ratio |")
    print("|---|---|---|")
    for name, seconds in rows:
        print(f"| {name} | {seconds * 1000:.0f} | {seconds / base:.2f} |")


if __name__ == "__main__":
    main()
