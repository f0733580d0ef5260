"""Synergy-OPT per round: decision time, and how close TUNE and OPT come to the upper bound.

For each seed, one round on a homogeneous cluster (8-GPU servers, 24 CPUs, 500 GB) with a
queue of 2x the GPU count drawn from the zoo (the Fig. 9 mix of round_latency.py). Every
round uses a fresh `Opt`, so no memo helps (the profiles' speed caches are warm, as in
the simulator). Columns: cold decision time of OPT (default
program-2 limit, and with program 2 off), then sums of per-job speedups over the
proportional share: the LP upper bound, program 1's ideal (grid cells, super-machine), the
deployed OPT and TUNE (proportional = the number of running jobs).

    python benchmarks/opt_gap.py [--gpus 128] [--seeds 5] [--multi-gpu]
"""
from __future__ import annotations

import argparse
import random
import time

from round_latency import make_jobs

from synergy.scheduler.mechanisms.leftover import hand_out
from synergy.scheduler.mechanisms.opt import Opt
from synergy.scheduler.mechanisms.tune import Tune
from synergy.scheduler.model import Cluster, Job, RoundInput, RoundOutput
from synergy.scheduler.policies.fifo import Fifo
from synergy.scheduler.throughput import proportional_speed, speed


def total_speedup(out: RoundOutput, jobs: list[Job], cluster: Cluster) -> float:
    """As deployed: with the leftovers the core hands out after the mechanism."""
    by_id = {j.id: j for j in jobs}
    allocations = hand_out(out.allocations, by_id, cluster)
    return sum(speed(by_id[i], a) / proportional_speed(by_id[i], cluster) for i, a in allocations.items())


def timed(opt: Opt, ordered: list[Job], inp: RoundInput) -> tuple[RoundOutput, float]:
    t0 = time.perf_counter()
    out = opt.allocate(ordered, inp)
    return out, (time.perf_counter() - t0) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", type=int, default=128)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--multi-gpu", action="store_true", help="mix 1-8 GPU jobs instead of single-GPU jobs")
    args = ap.parse_args()
    cluster = Cluster.homogeneous(args.gpus // 8, gpus=8, cpus=24, mem_gb=500)
    print(f"{'seed':>4} {'opt ms':>7} {'p2 off ms':>9} {'LP bound':>9} {'ideal':>8} {'OPT':>8} "
          f"{'TUNE':>8} {'jobs':>5} {'TUNE/bound':>10}")
    for seed in range(args.seeds):
        jobs = make_jobs(2 * args.gpus, args.multi_gpu, random.Random(seed))
        ordered = Fifo().order(jobs, 0.0, cluster)
        inp = RoundInput(0.0, cluster, ordered)
        tune = Tune().allocate(ordered, inp)  # also warms the profiles' speed caches
        opt = Opt()
        out, ms = timed(opt, ordered, inp)
        _, ms_off = timed(Opt(placement_limit=0.0), ordered, inp)
        ideal = opt.ideal_solution(ordered, inp)
        o, t = total_speedup(out, jobs, cluster), total_speedup(tune, jobs, cluster)
        print(f"{seed:>4} {ms:>7.1f} {ms_off:>9.1f} {ideal.upper_bound:>9.2f} {ideal.objective:>8.2f} "
              f"{o:>8.2f} {t:>8.2f} {len(out.allocations):>5} {t / ideal.upper_bound:>10.3f}")


if __name__ == "__main__":
    main()
