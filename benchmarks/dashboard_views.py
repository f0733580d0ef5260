"""Cost of the dashboard's JSON views, which run under synergyd's state lock.

Builds the daemon's logic in memory (no gRPC: the views are what matters) with N nodes of 8
GPUs, 24 CPUs, 500 GB, fills them with 1-GPU jobs from the zoo, queues as many again, and
finishes some; then times each view (median of --repeat calls) and the history sample the
daemon takes every round. A page polls /api/cluster, /api/jobs and /api/history every 2 s,
so their sum per open page is lock time taken from RPCs every 2 s.

    python benchmarks/dashboard_views.py [--nodes 8,64] [--repeat 7]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from synergy.scheduler.daemon.app import Logic
from synergy.scheduler.daemon.clock import ManualClock
from synergy.scheduler.daemon.config import DaemonConfig
from synergy.scheduler.daemon.context import DaemonContext
from synergy.scheduler.daemon.profiles import ProfileBook, load_zoo
from synergy.scheduler.daemon.records import JobSpec, JobState, NodeRecord
from synergy.scheduler.daemon.store import MemoryStore
from synergy.scheduler.dashboard import views
from synergy.scheduler.dashboard.history import History
from synergy.scheduler.model import Resources

MODELS = ("resnet18", "resnet50", "gnmt", "lstm", "mobilenet_v2")


def build(nodes: int) -> tuple[Logic, History]:
    config = DaemonConfig(state_dir=Path("unused"), round_s=10, launch_timeout_s=600)
    logic = Logic.build(DaemonContext(config, ManualClock(), MemoryStore(), ProfileBook(load_zoo(None))))
    for i in range(nodes):
        logic.nodes.register(NodeRecord(f"n{i}", f"n{i}", Resources(8, 24, 500), Resources()), [])
    for i in range(nodes * 8 * 2):
        logic.jobs.submit(JobSpec(name=f"j{i}", command=("train",), gpus=1, model=MODELS[i % len(MODELS)],
                                  profiler="none"))
    logic.rounds.apply(logic.rounds.plan())
    history = History()
    for _ in range(50):
        views.sample(logic, history)
    return logic, history


def timed(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", default="8,64")
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    print(f"{'nodes':>5} {'GPUs':>5} {'jobs':>5} {'running':>7} | {'cluster ms':>10} {'jobs ms':>8} "
          f"{'job ms':>7} {'history ms':>10} {'sample ms':>9}")
    for n in (int(x) for x in args.nodes.split(",")):
        logic, history = build(n)
        jobs = logic.ctx.store.jobs()
        running = [j for j in jobs if j.state == JobState.RUNNING]
        one = running[0].id if running else jobs[0].id
        row = [timed(f, args.repeat) for f in (
            lambda: views.cluster(logic), lambda: views.jobs(logic), lambda: views.job(logic, history, one),
            lambda: views.history(logic, history, 3600), lambda: views.sample(logic, history))]
        print(f"{n:>5} {n * 8:>5} {len(jobs):>5} {len(running):>7} | " + " ".join(
            f"{v:>{w}.1f}" for v, w in zip(row, (10, 8, 7, 10, 9))))


if __name__ == "__main__":
    main()
