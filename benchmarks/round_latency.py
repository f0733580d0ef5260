"""Decision time of one scheduling round per mechanism and cluster size.

Prints a table: for 128, 512 and 4096 GPUs (8-GPU servers, 24 CPUs, 500 GB) with a queue of
2x the GPU count (the paper's Fig. 9 job mix, 20% image / 70% language / 10% speech), the
median and max wall time of `Scheduler.schedule` over several rounds, each a fresh
scheduler deciding from scratch; and "next round ms", the round after a decided one on the
same scheduler, with one job finished and one arrived (what synergyd pays round to round).

Targets on a 2-core machine (issue 17, printed next to the figures): TUNE <= 5 ms at 512 GPUs /
1k jobs and <= 50 ms at 4096 GPUs / 8k jobs (were 10 and 100); OPT <= 1 s at 128 GPUs / 256 jobs.
This table's times are CPU time of this process (`time.process_time`), so that other work on a
shared machine does not count; on a quiet machine they equal wall time. Each cell first runs
`--warmup` untimed rounds (default 10, at most 2 s of them): the interpreter specialises a
function after it has run a few times, and a daemon's rounds run the specialised code.
`--instructions` counts instead of timing (valgrind; `benchmarks/instructions.py`): the
instructions per round of each cell, which a noisy host does not move; run it with an older
version's source tree first on PYTHONPATH to compare the two versions' rounds.

`--elastic` times Lyra's elastic round instead (scheduler/elastic/): half the jobs elastic
(1-8 GPUs, up to 4x their minimum), TUNE placing them; "mckp ms" is the two phases alone
(sizes decided, nothing placed, the policy's order given); "fixed ms" is the same round with
every job at its fixed size, for comparison. Target: <= 20 ms per round at 512 GPUs / 1k jobs. A second
row per size has a light queue (a quarter of the GPU count in jobs), so that phase two has
free GPUs to hand out.

    python benchmarks/round_latency.py [--repeat 5] [--mechanisms proportional,greedy,tune,opt]

Then, Tesserae's scale points (§7; it reports under 1.6 s at 256 GPUs / 2048 jobs): the whole
TUNE round with migration matching (placement/migration.py) against last round's plan, with
1-8 GPU jobs, where a tenth of the jobs are new and the policy order changed. Target <= 100 ms
at 256 GPUs / 2048 jobs; 4096 GPUs / 8192 jobs is printed. `--migration-only` skips the table above.
The same rows time the whole round with packing too (Tesserae §4.2, placement/packing.py:
policy + TUNE + packing matching + migration matching, pairs from the task-class rule of
profiles/pairs.py), with the packing matching's own share and the jobs it packed.
    python benchmarks/round_latency.py --elastic [--gpus 128,512,4096]
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from dataclasses import replace

import instructions  # benchmarks/instructions.py, beside this script
from synergy.scheduler.elastic.two_phase import decide_sizes
from synergy.scheduler.model import Cluster, Job, JobKind, RoundInput
from synergy.scheduler.placement.migration import count_migrations
from synergy.scheduler.placement.packing import pack
from synergy.scheduler.profiles.pairs import from_class_rule
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


def make_elastic_jobs(n: int, rng: random.Random) -> list[Job]:
    """The multi-GPU mix with every other job elastic: min 1-8 GPUs, max 1-4x the min."""
    jobs = make_jobs(n, True, rng)
    for k in range(0, n, 2):
        lo = jobs[k].gpus
        hi = lo * rng.choice([1, 2, 4])
        jobs[k] = replace(jobs[k], kind=JobKind.ELASTIC, gpus=hi, min_gpus=lo, max_gpus=hi,
                          done_iterations=float(rng.randrange(0, 900_000)))
    return jobs


def elastic_rows(sizes: list[int], repeat: int) -> None:
    print(f"{'GPUs':>6} {'jobs':>6} {'elastic':>8} {'mckp ms':>9} {'round ms':>9} {'max ms':>8} {'fixed ms':>9}")
    for gpus in sizes:
        cluster = Cluster.homogeneous(gpus // 8, gpus=8, cpus=24, mem_gb=500)
        for n in (2 * gpus, gpus // 4):
            jobs = make_elastic_jobs(n, random.Random(gpus + n))
            sched = build_scheduler("srtf", "tune")
            fixed = [replace(j, kind=JobKind.TRAINING, min_gpus=None, max_gpus=None) for j in jobs]
            mckp, rounds, baseline = [], [], []
            for r in range(repeat):
                ordered = sched.policy.order(jobs, float(r), cluster)
                t0 = time.perf_counter()
                decide_sizes(ordered, cluster, cluster.total.gpus)
                mckp.append((time.perf_counter() - t0) * 1e3)
                t0 = time.perf_counter()
                sched.schedule(RoundInput(float(r), cluster, jobs))
                rounds.append((time.perf_counter() - t0) * 1e3)
                t0 = time.perf_counter()
                sched.schedule(RoundInput(float(r), cluster, fixed))
                baseline.append((time.perf_counter() - t0) * 1e3)
            print(f"{gpus:>6} {n:>6} {sum(j.kind == JobKind.ELASTIC for j in jobs):>8} "
                  f"{statistics.median(mckp):>9.2f} {statistics.median(rounds):>9.2f} {max(rounds):>8.2f} "
                  f"{statistics.median(baseline):>9.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5, help="rounds timed per cell (default 5)")
    ap.add_argument("--warmup", type=int, default=WARMUP_ROUNDS,
                    help=f"untimed rounds before each cell of the mechanism table (default {WARMUP_ROUNDS}; "
                         "0 times a cold interpreter)")
    ap.add_argument("--mechanisms", default="proportional,greedy,tune,opt")
    ap.add_argument("--gpus", default="128,512,4096", help="cluster sizes in GPUs")
    ap.add_argument("--multi-gpu", action="store_true", help="mix 1-8 GPU jobs instead of single-GPU jobs")
    ap.add_argument("--migration-only", action="store_true",
                    help="only the migration-matching (and packing) scale points")
    ap.add_argument("--elastic", action="store_true", help="time Lyra's elastic round (half the jobs elastic)")
    ap.add_argument("--instructions", action="store_true",
                    help="count CPU instructions per round of the mechanism table under valgrind instead of "
                         "timing (steadier than time on a noisy host; --repeat rounds counted after 5 warm-up rounds)")
    ap.add_argument("--rounds", type=int, default=None, help=argparse.SUPPRESS)  # the counted child
    args = ap.parse_args()
    if args.rounds is not None:
        decide_rounds(args)
        return
    if args.instructions:
        if not instructions.available():
            ap.error("--instructions needs valgrind (apt install valgrind)")
        instruction_table(args)
        return
    if args.elastic:
        elastic_rows([int(g) for g in args.gpus.split(",")], args.repeat)
        return
    if not args.migration_only:
        mechanism_table(args)
    migration_table(args.repeat)


#: (GPUs, jobs) of the migration-matching scale points.
MIGRATION_POINTS = ((256, 2048), (4096, 8192))


def migration_table(repeat: int) -> None:
    """A round decided against last round's plan, with and without relabelling, and the
    whole round with packing as well."""
    print(f"\n{'GPUs':>6} {'jobs':>6} {'TUNE + matching ms':>19} {'TUNE alone ms':>14} {'moved (off -> on)':>18} "
          f"{'+ packing ms':>13} {'packing alone ms':>17} {'packed':>7}")
    pairs = from_class_rule(default_profiles())
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
        sched = build_scheduler("fifo", "tune", pairs=pairs)
        whole, alone = [], []
        for _ in range(repeat):
            t0 = time.perf_counter()
            out = sched.schedule(inp)
            whole.append((time.perf_counter() - t0) * 1e3)
        # The packing pass alone, on the mechanism's plan of this round (what the core packs).
        plain = build_scheduler("fifo", "tune", migration_matching=False).schedule(inp).allocations
        ordered = sched.policy.order(jobs, inp.now_s, cluster)
        for _ in range(repeat):
            t0 = time.perf_counter()
            pack(plain, ordered, cluster, pairs)
            alone.append((time.perf_counter() - t0) * 1e3)
        n_packed = sum(a.packed_with is not None for a in out.allocations.values())
        print(f"{gpus:>6} {n:>6} {on_ms:>19.2f} {off_ms:>14.2f} {f'{off_moved} -> {on_moved}':>18} "
              f"{statistics.median(whole):>13.2f} {statistics.median(alone):>17.2f} {n_packed:>7}")


#: Untimed rounds before each cell of the mechanism table. Python 3.11 specialises a
#: function's bytecode only after it has run about eight times, and most of a round's
#: functions run once per round: the first rounds of a process take 2x as long (TUNE at 512
#: GPUs: 7.5-9 ms, then 3.5 ms from the seventh round on). A daemon deciding rounds all day
#: runs the specialised code, which is what the targets are about.
WARMUP_ROUNDS = 10
#: ... or fewer, once this many seconds have gone into them.
WARMUP_MAX_S = 2.0

#: (mechanism, GPUs) -> target median ms of one round with 2x the GPUs in queued jobs.
TARGETS_MS = {("tune", 512): 5.0, ("tune", 4096): 50.0, ("opt", 128): 1000.0}


#: Rounds decided before counting starts, in both counted runs (`--instructions`).
COUNT_WARMUP = 5


def decide_rounds(args: argparse.Namespace) -> None:
    """The counted child of `--instructions`: warm-up rounds, then `--rounds` more, each with
    a fresh scheduler as the timed table does."""
    gpus, mech = int(args.gpus), args.mechanisms
    cluster = Cluster.homogeneous(gpus // 8, gpus=8, cpus=24, mem_gb=500)
    jobs = make_jobs(2 * gpus, args.multi_gpu, random.Random(gpus))
    for r in range(COUNT_WARMUP + args.rounds):
        build_scheduler("fifo", mech).schedule(RoundInput(float(r), cluster, jobs))


def instruction_table(args: argparse.Namespace) -> None:
    """The mechanism table's rounds in instructions (benchmarks/instructions.py): what judges a
    change to the core on a host whose speed moves, and compares with an earlier version's
    count (run this script with that version's source tree first on PYTHONPATH)."""
    print(f"{'GPUs':>6} {'jobs':>6} {'mechanism':>13} {'M instructions per round':>25}")
    for gpus in (int(g) for g in args.gpus.split(",")):
        for mech in args.mechanisms.split(","):
            if mech == "opt" and gpus > OPT_MAX_GPUS:
                continue
            per_round = instructions.per_unit(
                lambda n: [sys.executable, __file__, "--gpus", str(gpus), "--mechanisms", mech, "--rounds", str(n)]
                + (["--multi-gpu"] if args.multi_gpu else []), max(1, args.repeat))
            print(f"{gpus:>6} {2 * gpus:>6} {mech:>13} {per_round / 1e6:>25.1f}")


def next_round_ms(mech: str, cluster: Cluster, jobs: list[Job], repeat: int) -> float:
    """Median CPU ms of the round after a decided one, on the same scheduler, with one job
    finished (the oldest running) and one arrived: what synergyd pays from round to round,
    where a mechanism may reuse what it kept from the round before (TUNE resumes its
    packing, mechanisms/pack_trace.py) and the core keeps running jobs in place."""
    times = []
    for r in range(repeat):
        sched = build_scheduler("fifo", mech)
        first = sched.schedule(RoundInput(0.0, cluster, jobs))
        gone = min(first.allocations)
        arrival = replace(jobs[-1], id=max(j.id for j in jobs) + 1 + r, arrival_s=jobs[-1].arrival_s + 1)
        after = [j for j in jobs if j.id != gone] + [arrival]
        previous = {jid: a for jid, a in first.allocations.items() if jid != gone}
        t0 = time.process_time()
        sched.schedule(RoundInput(60.0, cluster, after, previous))
        times.append((time.process_time() - t0) * 1e3)
    return statistics.median(times)


def mechanism_table(args: argparse.Namespace) -> None:
    print(f"{'GPUs':>6} {'jobs':>6} {'mechanism':>13} {'median ms':>10} {'max ms':>9} {'target ms':>10}"
          f" {'next round ms':>14}")
    for gpus in (int(g) for g in args.gpus.split(",")):
        cluster = Cluster.homogeneous(gpus // 8, gpus=8, cpus=24, mem_gb=500)
        jobs = make_jobs(2 * gpus, args.multi_gpu, random.Random(gpus))
        for mech in args.mechanisms.split(","):
            if mech == "opt" and gpus > OPT_MAX_GPUS:
                print(f"{gpus:>6} {len(jobs):>6} {mech:>13} {'skipped (offline upper bound)':>20}")
                continue
            times: list[float] = []
            warm_s = 0.0
            for r in range(-args.warmup, args.repeat):
                if r < 0 and warm_s > WARMUP_MAX_S:
                    continue  # slow mechanisms (OPT) warm up in fewer rounds
                # A fresh scheduler per round: OPT memoises decisions per instance, and a
                # repeated input would otherwise time a memo hit, not a decision.
                sched = build_scheduler("fifo", mech)
                inp = RoundInput(float(r), cluster, jobs)
                t0 = time.process_time()
                sched.schedule(inp)
                spent = time.process_time() - t0
                if r >= 0:  # rounds below 0 warm up (--warmup)
                    times.append(spent * 1e3)
                else:
                    warm_s += spent
            median = statistics.median(times)
            target = TARGETS_MS.get((mech, gpus))
            verdict = f"{'':>10}" if target is None else f"{target:>10g} {'met' if median <= target else 'NOT met':>7}"
            nxt = next_round_ms(mech, cluster, jobs, max(1, min(args.repeat, 5)))
            print(f"{gpus:>6} {len(jobs):>6} {mech:>13} {median:>10.2f} {max(times):>9.2f} {verdict} {nxt:>14.2f}")


if __name__ == "__main__":
    main()
