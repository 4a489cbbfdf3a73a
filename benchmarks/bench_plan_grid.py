"""The layout grid a DeepSpeed user asks for, on a Dask cluster: 3 ZeRO stages x recompute on
and off x 8 world sizes, each of the 48 cells a bisection of the micro-batch.

The job is a DeepSpeed script written here (a language model of 176M parameters: vocabulary
8,192, width 2,048, 4 MLP blocks of 4 x width, AdamW in bf16 through DeepSpeed's engine,
two steps of sequence 1,024; ``--recompute 1`` checkpoints each block with
``torch.utils.checkpoint``), its ZeRO stage a key of its DeepSpeed config (``--set ds.json
zero_optimization.stage=1,2,3``), its micro-batch and recomputation its arguments, on an
8 GiB card of A2 at world sizes 1, 16, 24, 32, 48, 64, 96 and 128 (from 16 ranks on, ranks
alike are traced once; up to 8 every rank is). The plan asks the largest micro-batch in
1..64 that fits with 5% free, each grid point ranked by tokens per step per card.

- the grid on a Dask ``LocalCluster`` of 1 worker and of 2 (each started before the clock,
  its workers' warm-start servers warmed by a first small plan), no cache: the seconds and
  their ratio, beside what two processes gain on a plain Python loop at that moment
  (``ceiling``: the machine may be shared);
- the 2-worker run writes a cache folder; the grid is then planned again over it: its time
  against the first's.

The tables are checked identical on both clusters and over the cache, and the answers
checked by what ZeRO's arithmetic orders: at every world size and recompute setting, ZeRO-2's
largest micro-batch is at least ZeRO-1's (the same buffers, the gradients partitioned too),
and recomputation never lowers it. ZeRO-3 is not ordered against them: with the tutorial's
``reduce_bucket_size`` of 5e8 its gradient bucket alone is 1 GB of bf16
(``deepspeed/runtime/zero/stage3.py``, ``_setup_for_real_optimizer``: each IPG bucket's
``buffer``, ``reduce_bucket_size`` elements with ``contiguous_gradients``), more
than this model's partitioned states save on 16 ranks, which is why DeepSpeed's docs size it
to the model (``"auto"``: hidden x hidden in the HF integration).

Run: ``python benchmarks/bench_plan_grid.py`` (needs torch, the stacks extra for DeepSpeed and
the study extra; about 20 minutes on 2 cores).
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
import time

# Use the checkout this file lives in, not an installed copy.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench_plan import _answers, ceiling

from ascend_memsim.plan.job import most_runs, plan_job

JOB = '''\
import argparse
import json

import deepspeed
import torch
import torch_npu  # noqa: F401
from torch.utils.checkpoint import checkpoint

VOCAB, WIDTH, BLOCKS = 8192, 2048, 4

p = argparse.ArgumentParser()
p.add_argument("--local_rank", type=int, default=-1)
p.add_argument("--micro-batch", type=int, default=1)
p.add_argument("--seq", type=int, default=1024)
p.add_argument("--recompute", type=int, default=0)
p = deepspeed.add_config_arguments(p)
a = p.parse_args()


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(WIDTH)
        self.up = torch.nn.Linear(WIDTH, 4 * WIDTH)
        self.down = torch.nn.Linear(4 * WIDTH, WIDTH)

    def forward(self, x):
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


class LM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, WIDTH)
        self.blocks = torch.nn.ModuleList(Block() for _ in range(BLOCKS))
        self.head = torch.nn.Linear(WIDTH, VOCAB, bias=False)

    def forward(self, ids):
        x = self.embed(ids)
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if a.recompute else block(x)
        logits = self.head(x)
        return torch.nn.functional.cross_entropy(logits.view(-1, VOCAB).float(), ids.view(-1))


deepspeed.init_distributed()
with open(a.deepspeed_config) as f:
    config = json.load(f)
config["train_micro_batch_size_per_gpu"] = a.micro_batch
with deepspeed.zero.Init(config_dict_or_path=config,
                         enabled=config["zero_optimization"]["stage"] == 3):
    model = LM()
engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                       config=config)
for _ in range(2):
    ids = torch.randint(0, VOCAB, (a.micro_batch, a.seq), device=engine.device)
    engine.backward(engine(ids))
    engine.step()
'''
#: DeepSpeed's ZeRO tutorial's blocks (docs/_tutorials/zero.md), the stage set by the plan
CONFIG = '''\
{"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
 "bf16": {"enabled": true},
 "zero_optimization": {"stage": 2, "contiguous_gradients": true, "overlap_comm": true,
                       "reduce_bucket_size": 5e8, "allgather_bucket_size": 5e8}}
'''
COMMAND = ["train.py", "--deepspeed_config", "ds.json", "--micro-batch", "{micro_batch}",
           "--recompute", "{recompute}"]
WORLD_SIZES = "1,16,24,32,48,64,96,128"
GRID = dict(vary="micro_batch=1..64", grid=["recompute=0,1"],
            keys=[("ds.json", "zero_optimization.stage=1,2,3")], world_size=WORLD_SIZES,
            product="A2", capacity="8GiB", batch="micro_batch", seq="1024")


def _timed(folder: str, **kw):
    start = time.perf_counter()
    plan = plan_job(COMMAND, cwd=folder, **{**GRID, **kw})
    return plan, time.perf_counter() - start


def _check_zero(plan) -> None:
    """ZeRO-2 >= ZeRO-1 and recompute >= none, at every other value alike."""
    largest = {}
    for p in plan.points:
        values = p.values
        key = tuple(sorted((k, v) for k, v in values.items()
                           if k not in ("zero_optimization.stage", "recompute")))
        stage = int(values["zero_optimization.stage"])
        largest[key, stage, int(values["recompute"])] = p.largest or 0
    for (key, stage, recompute), value in largest.items():
        if stage == 2 and value < largest[key, 1, recompute]:
            raise SystemExit(f"ZeRO-{stage} fits less than ZeRO-{stage - 1} at {key}")
        if recompute and value < largest[key, stage, 0]:
            raise SystemExit(f"recompute fits less at {key}, ZeRO-{stage}")


def main() -> None:
    from distributed import LocalCluster

    folder = tempfile.mkdtemp(prefix="bench-plan-grid-")
    cache = tempfile.mkdtemp(prefix="bench-plan-grid-cache-")
    for name, text in (("train.py", JOB), ("ds.json", CONFIG)):
        with open(os.path.join(folder, name), "w") as f:
            f.write(text)
    loads = [os.getloadavg()[0]]
    rows = []
    seconds = {}
    answers = None
    plans = []
    clusters = {n: LocalCluster(n_workers=n, threads_per_worker=1, host="127.0.0.1",
                                dashboard_address=":0", silence_logs=logging.CRITICAL)
                for n in (1, 2)}
    try:
        ratio_ceiling = ceiling()
        for n, cluster in clusters.items():
            # the workers' warm-start servers started, not timed
            plan_job(COMMAND, cwd=folder, grid=["micro_batch=1,2", "recompute=0"],
                     capacity="8GiB", scheduler=cluster.scheduler_address)
            plan, t = _timed(folder, scheduler=cluster.scheduler_address,
                             cache=cache if n == 2 else None)
            seconds[n] = t
            plans.append(plan)
            loads.append(os.getloadavg()[0])
        again, t_again = _timed(folder, scheduler=clusters[2].scheduler_address, cache=cache)
        if again.runs:
            raise SystemExit(f"the rerun ran {again.runs} estimates: the cache missed")
        plans.append(again)
        loads.append(os.getloadavg()[0])
    finally:
        for cluster in clusters.values():
            cluster.close()
        shutil.rmtree(folder)
        shutil.rmtree(cache)
    for plan in plans:
        got = _answers(plan)
        if answers is None:
            answers = got
        elif got != answers:
            raise SystemExit("the tables differ between runs")
    first = plans[0]
    if len(first.points) != 48:
        raise SystemExit(f"{len(first.points)} grid points, not 48")
    most = max(p.runs for p in first.points)
    _check_zero(first)
    fitting = [p for p in first.points if p.largest]
    rows.append(("job", "DeepSpeed, 176M parameters, sequence 1,024, 2 steps, 8 GiB of A2"))
    rows.append(("grid", f"3 ZeRO stages x recompute 0,1 x world sizes {WORLD_SIZES}: "
                         f"{len(first.points)} cells, micro-batch 1..64 bisected in each "
                         f"(at most {most_runs(1, 64)} estimates a cell)"))
    rows.append(("estimates", f"{first.runs} in all ({first.runs / 48:.1f} a cell, at most "
                              f"{most})"))
    rows.append(("answers", f"{len(fitting)} of 48 cells fit at micro-batch 1 or more; "
                            f"recommended: {first.why}"))
    rows.append(("none fits", "; ".join(", ".join(f"{k}={v}" for k, v in p.values.items())
                                        for p in first.points if not p.largest) or "-"))
    rows.append(("on Dask, 1 worker", f"{seconds[1]:7.1f} s"))
    rows.append(("on Dask, 2 workers", f"{seconds[2]:7.1f} s (writing the cache)"))
    rows.append(("2 workers against 1", f"{seconds[1] / seconds[2]:.2f}x (a plain loop gains "
                                        f"{ratio_ceiling:.2f}x in 2 processes)"))
    rows.append(("again over the cache", f"{t_again:7.2f} s, {t_again / seconds[2]:.5f} of the "
                                         f"first run's time, 0 estimates"))
    rows.append(("tables", "identical on 1 worker, 2 workers and over the cache; ZeRO-2 >= "
                           "ZeRO-1 and recompute >= none in every cell"))
    rows.append(("load average (1 min)", f"{min(loads):.2f} to {max(loads):.2f} on "
                                         f"{os.cpu_count()} cores"))
    width = max(len(r[0]) for r in rows)
    for what, figure in rows:
        print(f"{what.ljust(width)}  {figure}", flush=True)


if __name__ == "__main__":
    main()
