"""Decision time of one scheduling round per mechanism and cluster size.

Prints a table: for 128, 512 and 4096 GPUs (8-GPU servers, 24 CPUs, 500 GB) with a queue of
2x the GPU count (the paper's Fig. 9 job mix, 20% image / 70% language / 10% speech), the
median and max wall time of `Scheduler.schedule` over several rounds.

Targets on a 2-core machine: TUNE <= 10 ms at 512 GPUs / 1k jobs and <= 100 ms at 4096 GPUs /
8k jobs; OPT <= 1 s at 128 GPUs / 256 jobs.

    python benchmarks/round_latency.py [--repeat 5] [--mechanisms proportional,greedy,tune,opt]

Then, Tesserae's scale points (§7; it reports under 1.6 s at 256 GPUs / 2048 jobs): the whole
TUNE round with migration matching (placement/migration.py) against last round's plan, with
1-8 GPU jobs, where a tenth of the jobs are new and the policy order changed. Target <= 100 ms
at 256 GPUs / 2048 jobs; 4096 GPUs / 8192 jobs is printed. `--migration-only` skips the table above.
"""
from __future__ import annotations

import argparse
import random
import statistics
import time
from dataclasses import replace

from synergy.scheduler.model import Cluster, Job, RoundInput
from synergy.scheduler.placement.migration import count_migrations
from synergy.scheduler.profiles.zoo import MODELS_BY_TASK, default_profiles
from synergy.scheduler.registry import build_scheduler

SPLIT = {"image": 20, "language": 70, "speech": 10}
#: OPT is an offline upper bound; beyond this size one round takes minutes, so it is skipped.
OPT_MAX_GPUS = 512


def make_jobs(n: int, multi_gpu: bool, rng: random.Random) -> list[Job]:
    profiles = default_profiles()
    tasks = [t for t, pct in SPLIT.items() for _ in range(pct)]
    jobs = []
    for i in range(n):
        model = rng.choice(MODELS_BY_TASK[rng.choice(tasks)])
        gpus = rng.choice([1, 1, 1, 1, 2, 4, 8]) if multi_gpu else 1
        jobs.append(Job(i, model, gpus, float(i), 1e6, profiles[model]))
    return jobs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5, help="rounds timed per cell (default 5)")
    ap.add_argument("--mechanisms", default="proportional,greedy,tune,opt")
    ap.add_argument("--gpus", default="128,512,4096", help="cluster sizes in GPUs")
    ap.add_argument("--multi-gpu", action="store_true", help="mix 1-8 GPU jobs instead of single-GPU jobs")
    ap.add_argument("--migration-only", action="store_true", help="only the migration-matching scale points")
    args = ap.parse_args()
    if not args.migration_only:
        mechanism_table(args)
    migration_table(args.repeat)


#: (GPUs, jobs) of the migration-matching scale points.
MIGRATION_POINTS = ((256, 2048), (4096, 8192))


def migration_table(repeat: int) -> None:
    """A round decided against last round's plan, with and without relabelling."""
    print(f"\n{'GPUs':>6} {'jobs':>6} {'TUNE + matching ms':>19} {'TUNE alone ms':>14} {'moved (off -> on)':>18}")
    for gpus, n in MIGRATION_POINTS:
        cluster = Cluster.homogeneous(gpus // 8, gpus=8, cpus=24, mem_gb=500)
        jobs = make_jobs(n, True, random.Random(gpus))
        rng = random.Random(n)
        # Last round: nine jobs in ten, in another order (arrival times reshuffled).
        before = [replace(j, arrival_s=rng.random() * n) for j in jobs if rng.random() < 0.9]
        previous = build_scheduler("fifo", "tune").schedule(RoundInput(0.0, cluster, before)).allocations
        inp = RoundInput(300.0, cluster, jobs, previous)
        cells = []
        for matching in (True, False):
            times, out = [], None
            for _ in range(repeat):
                sched = build_scheduler("fifo", "tune", migration_matching=matching)
                t0 = time.perf_counter()
                out = sched.schedule(inp)
                times.append((time.perf_counter() - t0) * 1e3)
            cells.append((statistics.median(times), count_migrations(previous, out.allocations)))
        (on_ms, on_moved), (off_ms, off_moved) = cells
        print(f"{gpus:>6} {n:>6} {on_ms:>19.2f} {off_ms:>14.2f} {f'{off_moved} -> {on_moved}':>18}")


def mechanism_table(args: argparse.Namespace) -> None:
    print(f"{'GPUs':>6} {'jobs':>6} {'mechanism':>13} {'median ms':>10} {'max ms':>9}")
    for gpus in (int(g) for g in args.gpus.split(",")):
        cluster = Cluster.homogeneous(gpus // 8, gpus=8, cpus=24, mem_gb=500)
        jobs = make_jobs(2 * gpus, args.multi_gpu, random.Random(gpus))
        for mech in args.mechanisms.split(","):
            if mech == "opt" and gpus > OPT_MAX_GPUS:
                print(f"{gpus:>6} {len(jobs):>6} {mech:>13} {'skipped (offline upper bound)':>20}")
                continue
            times = []
            for r in range(args.repeat):
                # A fresh scheduler per round: OPT memoises decisions per instance, and a
                # repeated input would otherwise time a memo hit, not a decision.
                sched = build_scheduler("fifo", mech)
                inp = RoundInput(float(r), cluster, jobs)
                t0 = time.perf_counter()
                sched.schedule(inp)
                times.append((time.perf_counter() - t0) * 1e3)
            print(f"{gpus:>6} {len(jobs):>6} {mech:>13} {statistics.median(times):>10.2f} {max(times):>9.2f}")


if __name__ == "__main__":
    main()
