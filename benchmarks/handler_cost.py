"""CPU of synergyd's two hot handlers, without gRPC: a lease renewal and a node heartbeat.

Why: `daemon_load.py` measures the whole daemon per RPC (gRPC, the event loop, the handlers,
periodic work), and its figure moves with the host by 20-30% from one hour to the next. The
handlers' own Python is the part this code controls; here it is timed alone, in one process,
on the same objects the servicers build (`Logic`, `JobServicer`, `NodeServicer`), with
messages shaped as in daemon_load.py and as a real agent sends them (per-task usage), so a
change to a handler can be measured before and after in seconds, with little noise.

    python benchmarks/handler_cost.py [--nodes 64] [--per-node 16] [--repeat 5]

Prints microseconds of CPU (`time.thread_time`) per renewal and per heartbeat, best of
--repeat passes, for a heartbeat as daemon_load.py's agents send it and one with each
task's usage and the node's usage as synergy-agent sends them.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from synergy.scheduler.daemon.app import Logic
from synergy.scheduler.daemon.clock import ManualClock
from synergy.scheduler.daemon.config import DaemonConfig
from synergy.scheduler.daemon.context import DaemonContext
from synergy.scheduler.daemon.profiles import ProfileBook
from synergy.scheduler.daemon.records import JobSpec, NodeRecord
from synergy.scheduler.daemon.servicers.job_servicer import JobServicer
from synergy.scheduler.daemon.servicers.node_servicer import NodeServicer
from synergy.scheduler.daemon.store import MemoryStore
from synergy.scheduler.model import Resources
from synergy.v1 import common_pb2, job_pb2, node_pb2


def build(nodes: int, per_node: int) -> tuple[Logic, list[str]]:
    """A daemon's logic with `nodes` nodes of `per_node` GPUs, each GPU running a job."""
    config = DaemonConfig(state_dir=Path("unused"), round_s=10, lease_grace_s=30, node_timeout_s=60)
    logic = Logic.build(DaemonContext(config, ManualClock(), MemoryStore(), ProfileBook({})))
    ids = [f"node-{i:04d}" for i in range(nodes)]
    for node_id in ids:
        logic.nodes.register(NodeRecord(node_id, node_id, Resources(per_node, 3 * per_node, 62.5 * per_node),
                                        Resources()), [])
    for i in range(nodes * per_node):
        logic.jobs.submit(JobSpec(name=f"j{i}", command=("train",), gpus=1, profiler="none"))
    logic.rounds.apply(logic.rounds.plan())
    placed = sum(len(logic.ctx.store.running_on(n)) for n in ids)
    if placed != nodes * per_node:  # a heartbeat of fewer tasks would time something else
        raise SystemExit(f"handler_cost: the round placed {placed} of {nodes * per_node} jobs")
    return logic, ids


def statuses(logic: Logic, node_id: str, usage: bool) -> list[node_pb2.TaskStatus]:
    out = []
    for job in logic.ctx.store.running_on(node_id):
        p = job.placements[0]
        t = node_pb2.TaskStatus(
            ref=node_pb2.TaskRef(job_id=job.id, attempt=job.attempt, rank=0),
            state=node_pb2.TASK_STATE_RUNNING, pid=1000 + job.id,
            placement=common_pb2.Placement(node_id=node_id, gpus=p.gpus, cpus=p.cpus, mem_gb=p.mem_gb))
        if usage:
            t.usage.CopyFrom(_usage())
            t.cores.extend([1, 2, 3])
        out.append(t)
    return out


def _usage() -> common_pb2.ResourceUsage:
    u = common_pb2.ResourceUsage(cpu_cores=2.5, rss_bytes=12 << 30)
    u.mem_bandwidth.gb_per_s, u.mem_bandwidth.source = 3.2, "estimate"
    return u


def heartbeat(node_id: str, tasks: list[node_pb2.TaskStatus], gpus: int, usage: bool) -> node_pb2.HeartbeatRequest:
    t = common_pb2.NodeTelemetry(
        collected_at_unix_s=time.time(), cpu_util_pct=50.0, mem_used_gb=10.0, load_avg_1m=1.0,
        gpus=[common_pb2.GpuTelemetry(index=i, utilization_pct=90.0, memory_used_gb=30.0, temperature_c=60.0)
              for i in range(gpus)])
    if usage:
        t.usage.CopyFrom(_usage())
        t.peak_mem_bandwidth.gb_per_s, t.peak_mem_bandwidth.source = 40.0, "estimate"
    return node_pb2.HeartbeatRequest(node_id=node_id, tasks=tasks, telemetry=t)


def per_call_us(fn, calls: list, repeat: int) -> float:  # type: ignore[no-untyped-def]
    best = float("inf")
    for _ in range(repeat):
        t0 = time.thread_time()
        for args in calls:
            fn(*args)
        best = min(best, (time.thread_time() - t0) / len(calls))
    return best * 1e6


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--per-node", type=int, default=16, help="GPUs per node, one job on each")
    ap.add_argument("--repeat", type=int, default=5, help="passes over every node and job; the best is printed")
    a = ap.parse_args(argv)
    if a.nodes < 1 or a.per_node < 1 or a.repeat < 1:
        print("handler_cost: --nodes, --per-node and --repeat must be at least 1", file=sys.stderr)
        return 2
    logic, ids = build(a.nodes, a.per_node)
    nodes, jobs = NodeServicer(logic.ctx, logic.nodes), JobServicer(logic.ctx, logic.leases)
    beat = NodeServicer.Heartbeat.__wrapped__  # the handler's body, without the async wrapper
    print(f"{a.nodes} nodes x {a.per_node} jobs; CPU per call (time.thread_time), best of {a.repeat} passes")
    for usage in (False, True):
        calls = [(nodes, heartbeat(n, statuses(logic, n, usage), a.per_node, usage), None) for n in ids]
        what = "with usage (as synergy-agent)" if usage else "as daemon_load.py's agents"
        print(f"  heartbeat, {a.per_node} tasks, {what}: {per_call_us(beat, calls, a.repeat):7.1f} us")
    running = [j for n in ids for j in logic.ctx.store.running_on(n)]
    renewals = [(j.id, job_pb2.RenewLeaseRequest(job_id=j.id, attempt=j.attempt, rank=0, step=100,
                                                 samples_per_s=500.0, steps_per_s=2.0), False) for j in running]
    print(f"  renewal (continue):                        {per_call_us(jobs._renew, renewals, a.repeat):7.1f} us")
    quiet = [(job_id, request, False, True) for job_id, request, _ in renewals]  # a stream's `answer_every`
    if any(jobs._renew(*args) is not None for args in quiet):  # the figure must time the unanswered path
        print("handler_cost: a quiet renewal that changes nothing was answered", file=sys.stderr)
        return 1
    print(f"  renewal left unanswered (quiet, unchanged):{per_call_us(jobs._renew, quiet, a.repeat):7.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
