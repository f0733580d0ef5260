"""What a long-lived synergyd pays for the jobs that have finished: memory, and the calls that
read every job.

A cluster finishing a few thousand jobs a day has a hundred thousand finished records within
months. Whatever synergyd does per finished job on a hot path (a /metrics scrape, a status
call, a dashboard poll, all under the state lock that RPCs wait for) grows with that history
even though the running cluster does not.

Builds the daemon's logic in-process on a real SQLite state store in a temporary state dir
(no gRPC: what matters is what runs under the lock), 8 nodes of 8 GPUs. Then it ends jobs
in batches of 64 a minute: each job, with the sensitivity profile its user gave, is
submitted, placed by a round and ended while it runs (every other one as its process exits
0, the rest cancelled), so that its record carries a placement and a history as an ended
job's does. After each --step ended jobs it prints the process's RSS (after a full collection) and the median
time of:

  metrics   the /metrics refresh (events.refresh_gauges; run on every Prometheus scrape)
  list 20   the jobs behind `synergy jobs --limit 20` (JobService.list)
  dashboard /api/cluster + /api/jobs, what one open page polls every 2 s ...
  history   ... with /api/history over the last hour
  reopen    opening the state dir again and recovering (synergyd's start-up), once per row

    python benchmarks/daemon_history.py [--finished 20000] [--step 5000] [--repeat 5] [--in-memory N]

--in-memory is synergyd's --finished-jobs-in-memory: the records of ended jobs its store keeps
in memory (those that ended last; the rest are read from the database when asked for).
"""

from __future__ import annotations

import argparse
import gc
import tempfile
import time
from pathlib import Path

import psutil
from dashboard_views import MODELS, timed  # the dashboard benchmark's zoo models; median ms of calls

from synergy.scheduler.daemon import events
from synergy.scheduler.daemon.app import Logic
from synergy.scheduler.daemon.clock import ManualClock
from synergy.scheduler.daemon.config import DaemonConfig
from synergy.scheduler.daemon.context import DaemonContext
from synergy.scheduler.daemon.profiles import ProfileBook, load_zoo
from synergy.scheduler.daemon.records import JobSpec, JobState, NodeRecord
from synergy.scheduler.daemon.store import open_store
from synergy.scheduler.dashboard import views
from synergy.scheduler.dashboard.history import History
from synergy.scheduler.model import Resources

NODES, GPUS = 8, 8
#: Seconds between two batches: 64 jobs a minute, 3,840 of them in the dashboard's hour.
BATCH_GAP_S = 60.0


def build(state_dir: Path, clock: ManualClock, in_memory: int) -> Logic:
    config = DaemonConfig(state_dir=state_dir, round_s=10, launch_timeout_s=600, finished_jobs_in_memory=in_memory)
    store = open_store(state_dir, None, config.finished_jobs_in_memory)
    ctx = DaemonContext(config, clock, store, ProfileBook(load_zoo(None)))
    logic = Logic.build(ctx)
    logic.recover()
    return logic


def finish_batch(logic: Logic, clock: ManualClock, first: int) -> int:
    """One job per GPU, each with the profile its user gave: submitted, placed, then every
    other one ends as its process exits 0 and the rest are cancelled while running; how
    many ran."""
    clock.advance(BATCH_GAP_S)
    for i in range(NODES):
        logic.nodes.heartbeat(f"n{i}", {}, [])  # a node not heard from would be lost
    zoo = logic.ctx.profiles.zoo
    jobs = [logic.jobs.submit(JobSpec(name=f"j{first + i}", command=("train",), gpus=1,
                                      profile=zoo[MODELS[(first + i) % len(MODELS)]].to_dict()))
            for i in range(NODES * GPUS)]
    logic.rounds.apply(logic.rounds.plan())
    ran = sum(logic.jobs.get(job.id).state == JobState.RUNNING for job in jobs)
    ctx = logic.ctx
    for k, job in enumerate(jobs):
        if k % 2:
            logic.jobs.cancel(job.id, "cancelled by the benchmark")
            continue
        with ctx.lock:
            job = logic.jobs.get(job.id)
            done = logic.jobs.task_exited(job, 0, 0, job.placements[0].server_id, "") if job.placed else None
            if done is not None:
                ctx.save_jobs([(job, done)])
    return ran


def rss_mib() -> float:
    gc.collect()
    return psutil.Process().memory_info().rss / 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--finished", type=int, default=20_000, help="finished jobs at the end (default 20000)")
    ap.add_argument("--step", type=int, default=5_000, help="print a row every this many (default 5000)")
    ap.add_argument("--repeat", type=int, default=5, help="timed calls per cell, median (default 5)")
    ap.add_argument("--in-memory", type=int, default=DaemonConfig.finished_jobs_in_memory,
                    help="synergyd's --finished-jobs-in-memory (default: synergyd's, "
                         f"{DaemonConfig.finished_jobs_in_memory})")
    args = ap.parse_args()
    if args.finished < 0 or args.step <= 0:
        ap.error("--finished must be >= 0 and --step > 0")
    state_dir = Path(tempfile.mkdtemp(prefix="synergy-history-")) / "state"
    state_dir.mkdir()
    clock = ManualClock()
    logic = build(state_dir, clock, args.in_memory)
    for i in range(NODES):
        logic.nodes.register(NodeRecord(f"n{i}", f"n{i}", Resources(GPUS, 24, 500), Resources()), [])
    history = History()
    base = rss_mib()
    print(f"synergyd's logic on SQLite ({state_dir}), {NODES} nodes x {GPUS} GPUs; jobs finished "
          f"{NODES * GPUS} at a time (submitted, placed, half exit 0, half cancelled while running); "
          f"--finished-jobs-in-memory {args.in_memory}")
    print(f"{'finished':>8} {'RSS MiB':>8} {'MiB/1k':>7} | {'metrics ms':>10} {'list 20 ms':>10} "
          f"{'dashboard ms':>12} {'history ms':>10} {'reopen s':>8}")
    done = ran = 0
    while True:
        rss = rss_mib()
        per_k = (rss - base) / done * 1000 if done else 0.0
        cells = [timed(f, args.repeat) for f in (
            lambda: events.refresh_gauges(logic),
            lambda: logic.jobs.list(limit=20),
            lambda: (views.cluster(logic), views.jobs(logic)),
            lambda: views.history(logic, history, 3600))]
        t0 = time.perf_counter()
        again = build(state_dir, clock, args.in_memory)
        reopen = time.perf_counter() - t0
        again.ctx.store.close()
        del again
        print(f"{done:>8} {rss:>8.1f} {per_k:>7.2f} | {cells[0]:>10.2f} {cells[1]:>10.2f} {cells[2]:>12.2f} "
              f"{cells[3]:>10.2f} {reopen:>8.2f}", flush=True)
        if done >= args.finished:
            break
        target = min(args.finished, done + args.step)
        while done < target:
            ran += finish_batch(logic, clock, done)
            done += NODES * GPUS
    print(f"{ran} of the {done} finished jobs ran before they ended")
    logic.ctx.store.close()


if __name__ == "__main__":
    main()
