"""What planning a job costs: the largest micro-batch of a small decoder, a grid on a Dask
cluster of one worker and of two, and a plan run again over its cache.

Run: ``python benchmarks/bench_plan.py [--rounds N]`` (needs torch and the ``study`` extra;
default 1 round, about five minutes on a shared 2-core machine). The job is a decoder-only
language model written here (8,192 tokens of vocabulary, 512 wide, 4 blocks of attention and
MLP, AdamW, two training steps), its micro-batch and sequence length its arguments:

- the largest micro-batch from 1 to 256 that fits on a 16 GiB card (no runtime share) with
  5% of it free, one cell at a time: the estimates run (at most ceil(log2(256)) + 2 = 10),
  the seconds, warm (each cell forked from a process that imported torch once) and cold
  (each cell a new interpreter); the answer checked by two plain ``ascend-memsim estimate``
  runs, at it (5% or more of the card left) and one above (less);
- a grid of 2 sequence lengths x 2 allocator settings, each point bisected over 1..256 on
  an 8 GiB card, on a Dask ``LocalCluster`` of 1 worker and of 2 (each started before the
  clock, its workers' warm-start servers warmed by a first small plan): the seconds and
  their ratio, beside the most two processes gained on a plain Python loop at that moment
  (``ceiling``: the machine may be shared);
- that grid in 2 local processes with a cache folder, then again over the cache: the
  second run's time against the first's.

Prints one table; the answers are checked identical on every executor and every round.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor

# Use the checkout this file lives in, not an installed copy.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from ascend_memsim.plan.job import most_runs, plan_job

DECODER = '''\
import argparse

import torch
import torch_npu  # noqa: F401

p = argparse.ArgumentParser()
p.add_argument("--micro-batch", type=int, default=1)
p.add_argument("--seq", type=int, default=256)
p.add_argument("--layers", type=int, default=4)
p.add_argument("--width", type=int, default=512)
a = p.parse_args()
vocab = 8192


class Block(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.norm1 = torch.nn.LayerNorm(width)
        self.attn = torch.nn.MultiheadAttention(width, 8, batch_first=True)
        self.norm2 = torch.nn.LayerNorm(width)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(),
                                       torch.nn.Linear(4 * width, width))

    def forward(self, x, mask):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class Decoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, a.width)
        self.blocks = torch.nn.ModuleList(Block(a.width) for _ in range(a.layers))
        self.head = torch.nn.Linear(a.width, vocab)

    def forward(self, tokens):
        mask = torch.triu(torch.full((a.seq, a.seq), float("-inf"), device=tokens.device), 1)
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(x)


model = Decoder().npu()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
tokens = torch.randint(0, vocab, (a.micro_batch, a.seq + 1)).npu()
for _ in range(2):
    logits = model(tokens[:, :-1])
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab),
                                             tokens[:, 1:].reshape(-1))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
'''
COMMAND = ["decoder.py", "--micro-batch", "{micro_batch}", "--seq", "{seq}"]
LARGEST = dict(vary="micro_batch=1..256", grid=["seq=256"], capacity="16GiB",
               estimate_args="--runtime-share 0")
GRID = dict(vary="micro_batch=1..256", grid=["seq=256,512"],
            alloc_conf=";expandable_segments:True", capacity="8GiB",
            estimate_args="--runtime-share 0", batch="micro_batch", seq="seq")


def _burn(n: int = 10_000_000) -> int:
    total = 0
    for i in range(n):
        total += i
    return total


def ceiling() -> float:
    """Two plain loops one after the other in this process, over the two side by side in
    two processes: what two cores give a CPU-bound Python job now."""
    start = time.perf_counter()
    _burn()
    _burn()
    one = time.perf_counter() - start
    with ProcessPoolExecutor(2) as pool:
        list(pool.map(int, [0, 0]))
        start = time.perf_counter()
        list(pool.map(_burn, [10_000_000] * 2))
        two = time.perf_counter() - start
    return one / two


def plain_margin(folder: str, micro_batch: int) -> float:
    """The part of the card a plain ``estimate`` of the largest-batch job leaves free at
    ``micro_batch``."""
    command = [sys.executable, "-m", "ascend_memsim", "estimate", "--capacity",
               LARGEST["capacity"], *LARGEST["estimate_args"].split(), "--json",
               *[a.format(micro_batch=micro_batch, seq=256) for a in COMMAND]]
    out = subprocess.run(command, cwd=folder, capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path[:1])})
    result = json.loads(out.stdout)
    return result["margin"] / result["capacity"]


def _answers(plan) -> list:
    return [(p.values, p.largest, p.peak_reserved, p.margin, p.first_over, p.why, p.error)
            for p in plan.points]


def _timed(folder: str, **kw):
    start = time.perf_counter()
    plan = plan_job(COMMAND, cwd=folder, **kw)
    return plan, time.perf_counter() - start


def main() -> None:
    from distributed import LocalCluster

    rounds = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 1
    folder = tempfile.mkdtemp(prefix="bench-plan-")
    with open(os.path.join(folder, "decoder.py"), "w") as f:
        f.write(DECODER)
    seconds: dict[str, list[float]] = {}
    answers: dict[str, list] = {}
    loads = [os.getloadavg()[0]]

    def note(what: str, plan, t: float) -> None:
        seconds.setdefault(what, []).append(t)
        got = _answers(plan)
        kind = "grid" if len(plan.points) > 1 else "largest"
        if answers.setdefault(kind, got) != got:
            raise SystemExit(f"{what}: answers differ from the first run's")
        loads.append(os.getloadavg()[0])

    clusters = {n: LocalCluster(n_workers=n, threads_per_worker=1, host="127.0.0.1",
                                dashboard_address=":0", silence_logs=logging.CRITICAL)
                for n in (1, 2)}
    largest = runs = grid_runs = 0
    at = above = 0.0
    for _ in range(rounds):
        seconds.setdefault("ceiling", []).append(ceiling())
        plan, t = _timed(folder, **LARGEST)
        largest, runs = plan.points[0].largest, plan.runs
        if runs > most_runs(1, 256):
            raise SystemExit(f"{runs} estimates, more than {most_runs(1, 256)}")
        note("largest micro-batch, warm", plan, t)
        at, above = plain_margin(folder, largest), plain_margin(folder, largest + 1)
        if not at >= 0.05 > above:
            raise SystemExit(f"plain runs leave {at:.2%} at {largest} and {above:.2%} at "
                             f"{largest + 1}: the answer is not the largest that fits")
        plan, t = _timed(folder, cold=True, **LARGEST)
        note("largest micro-batch, cold", plan, t)
        for n, cluster in clusters.items():
            # the workers' warm-start servers started, not timed
            plan_job(COMMAND, cwd=folder, grid=["micro_batch=1,2,3,4", "seq=64"],
                     capacity="8GiB", scheduler=cluster.scheduler_address)
            plan, t = _timed(folder, scheduler=cluster.scheduler_address, **GRID)
            grid_runs = plan.runs
            note(f"grid on Dask, {n} worker{'s' * (n > 1)}", plan, t)
        cache = tempfile.mkdtemp(prefix="bench-plan-cache-")
        plan, t = _timed(folder, jobs=2, cache=cache, **GRID)
        note("grid in 2 local processes, a new cache", plan, t)
        plan, t = _timed(folder, jobs=2, cache=cache, **GRID)
        if plan.runs:
            raise SystemExit("the rerun ran estimates: the cache missed")
        note("the same, run again over the cache", plan, t)
        shutil.rmtree(cache)
    for cluster in clusters.values():
        cluster.close()
    shutil.rmtree(folder)

    def med(what: str) -> float:
        return statistics.median(seconds[what])

    def runs_of(what: str) -> str:
        return ", ".join(f"{t:.1f}" for t in seconds[what])

    rows = [("job", "a decoder (vocabulary 8,192, width 512, 4 blocks, AdamW), 2 steps"),
            ("largest micro-batch in 1..256", f"{largest} on 16 GiB with 5% free: {runs} "
                                               f"estimates (at most {most_runs(1, 256)})"),
            ("checked by plain runs", f"{at:.2%} of the card free at {largest}, "
                                      f"{above:.2%} at {largest + 1}")]
    for what in ("largest micro-batch, warm", "largest micro-batch, cold"):
        rows.append((what, f"{med(what):6.2f} s  (rounds: {runs_of(what)} s)"))
    rows.append(("grid", f"seq 256,512 x 2 allocator settings, micro-batch 1..256 on 8 GiB: "
                         f"{grid_runs} estimates"))
    for what in ("grid on Dask, 1 worker", "grid on Dask, 2 workers"):
        rows.append((what, f"{med(what):6.2f} s  (rounds: {runs_of(what)} s)"))
    ratios = [a / b for a, b in zip(seconds["grid on Dask, 1 worker"],
                                    seconds["grid on Dask, 2 workers"])]
    rows.append(("2 workers against 1", f"{statistics.median(ratios):.2f}x (rounds: "
                                        f"{', '.join(f'{r:.2f}' for r in ratios)})"))
    rows.append(("ceiling (a plain loop)", f"{med('ceiling'):.2f}x in 2 processes (rounds: "
                                           f"{', '.join(f'{r:.2f}' for r in seconds['ceiling'])}"
                                           f")"))
    first, again = "grid in 2 local processes, a new cache", "the same, run again over the cache"
    for what in (first, again):
        rows.append((what, f"{med(what):6.2f} s  (rounds: {runs_of(what)} s)"))
    rows.append(("rerun against the first", f"{med(again) / med(first):.5f} of its time"))
    rows.append(("answers", f"identical on every executor ({rounds} rounds)"))
    rows.append(("load average (1 min)", f"{min(loads):.2f} to {max(loads):.2f} on "
                                         f"{os.cpu_count()} cores"))
    width = max(len(r[0]) for r in rows)
    for what, figure in rows:
        print(f"{what.ljust(width)}  {figure}", flush=True)


if __name__ == "__main__":
    main()
