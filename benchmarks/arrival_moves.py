"""Running jobs moved by rounds with arrivals: the core alone, over a burst of submissions.

Issue 14's "no churn" at the scale of issue 17's 10,000-job stress (docs/daemon.md): jobs
arrive over several rounds into an empty cluster, then rounds with nothing new follow, and
each round prints how many running jobs it moved (`RoundOutput.moves`: each a stop and a
relaunch on a live cluster), how many it placed and its CPU time. Nothing is asserted.

    .venv/bin/python benchmarks/arrival_moves.py          # 64 nodes x 40 GPUs, 2,371 jobs, 8 rounds
    .venv/bin/python benchmarks/arrival_moves.py --nodes 256 --jobs 10000

Run it with an older version's source tree first on PYTHONPATH (docs/simulator.md, "Speed")
to put the two versions' moves side by side.
"""
from __future__ import annotations

import argparse
import random
import time

from synergy.scheduler.model import Cluster, Job, RoundInput
from synergy.scheduler.profiles.zoo import default_profiles
from synergy.scheduler.registry import build_scheduler


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--gpus", type=int, default=40, help="GPUs per node (3 CPUs, 62.5 GB per GPU)")
    ap.add_argument("--jobs", type=int, default=2371, help="one-GPU zoo jobs in all")
    ap.add_argument("--arrival-rounds", type=int, default=8, help="rounds the jobs arrive over")
    ap.add_argument("--calm-rounds", type=int, default=3, help="rounds with nothing new after them")
    ap.add_argument("--policy", default="fifo")
    ap.add_argument("--mechanism", default="tune")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    cluster = Cluster.homogeneous(a.nodes, gpus=a.gpus, cpus=3 * a.gpus, mem_gb=62.5 * a.gpus)
    profiles = default_profiles()
    models = sorted(profiles)
    rng = random.Random(a.seed)
    jobs = [Job(i, m, 1, float(i), 1e9, profiles[m]) for i, m in enumerate(rng.choice(models) for _ in range(a.jobs))]
    sched = build_scheduler(a.policy, a.mechanism)
    counts = [round(a.jobs * (k + 1) / a.arrival_rounds) for k in range(a.arrival_rounds)] + [a.jobs] * a.calm_rounds
    print(f"{a.nodes} nodes x {a.gpus} GPUs, {a.jobs} jobs over {a.arrival_rounds} rounds, {a.policy} + {a.mechanism}")
    print(f"{'round':>5} {'active':>7} {'placed':>7} {'moved':>6} {'cpu ms':>8}")
    previous: dict = {}
    total = 0
    for r, n in enumerate(counts, start=1):
        t0 = time.process_time()
        out = sched.schedule(RoundInput(10.0 * r, cluster, jobs[:n], previous))
        ms = 1000 * (time.process_time() - t0)
        total += len(out.moves)
        print(f"{r:>5} {n:>7} {len(out.allocations):>7} {len(out.moves):>6} {ms:>8.0f}")
        previous = out.allocations
    print(f"running jobs moved in all: {total}")


if __name__ == "__main__":
    main()
