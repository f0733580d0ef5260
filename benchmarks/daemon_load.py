"""Load on a real synergyd: N job clients renewing leases, M agents heartbeating, over loopback.

Starts `synergyd` on 127.0.0.1 (port 0, a temporary state dir, real SQLite), registers M
simulated agents (fake GPUs, sized so that every job fits), submits N single-GPU jobs, lets
the daemon schedule them, and runs every launched task as a simulated job process that
registers and renews its lease at the interval the daemon asks for, exactly like the
iterator. Once all N jobs run, it measures every RenewLease and Heartbeat for --duration
seconds and prints throughput and latency per RPC kind (client-side wall time: the figures
include gRPC, the network stack and the load generator, as a job would see them).

The load generator is one asyncio process beside the daemon; both share this machine's
cores, so the figures are an upper bound on what the daemon alone costs. Bounded in count
and in time (--setup-timeout + --duration); it stops the daemon and exits by itself.

    python benchmarks/daemon_load.py [--jobs 1000] [--agents 64] [--round-s 10] [--duration 20]

With --round-s 10 jobs renew every 1 s and agents heartbeat every 1 s (the daemon derives
both from the round: round/10, between 0.1 s and 30 s / 10 s), i.e. about 1,060 RPC/s;
with the default production round of 300 s the same cluster sends about 40 RPC/s.
Target on a 2-core machine: p99 <= 20 ms at 1000 jobs + 64 agents. Printed, not asserted.
"""
from __future__ import annotations

import argparse
import asyncio
import math
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import psutil

from synergy.scheduler.statedir import ADDRESS_FILE, ADMIN_TOKEN_FILE, CLUSTER_TOKEN_FILE
from synergy.scheduler.profiles.zoo import default_profiles
from synergy.v1 import admin_pb2, admin_pb2_grpc, common_pb2, job_pb2, job_pb2_grpc, node_pb2, node_pb2_grpc

MAX_JOBS = 20_000
MAX_AGENTS = 2_048
RPC_TIMEOUT_S = 10.0
TARGET_P99_MS = 20.0


@dataclass(frozen=True)
class Settings:
    jobs: int
    agents: int
    round_s: float
    duration_s: float
    setup_timeout_s: float
    job_channels: int
    policy: str
    mechanism: str
    seed: int
    timeline: bool = False


@dataclass
class Stats:
    """Latencies (ms) per RPC kind; only recorded while `measuring`."""

    measuring: bool = False
    latencies: dict[str, list[float]] = field(default_factory=dict)
    #: (completion time, latency ms) of every measured call, for --timeline.
    samples: list[tuple[float, float]] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    setup: dict[str, list[float]] = field(default_factory=dict)

    def record(self, kind: str, seconds: float, ok: bool) -> None:
        if not ok:
            if self.measuring:
                self.errors[kind] = self.errors.get(kind, 0) + 1
            return
        target = self.latencies if self.measuring else self.setup
        target.setdefault(kind, []).append(seconds * 1e3)
        if self.measuring:
            self.samples.append((time.monotonic(), seconds * 1e3))


def md(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


async def timed(stats: Stats, kind: str, call, request, token: str):
    """One RPC, timed; returns the reply or the RpcError."""
    t0 = time.perf_counter()
    try:
        reply = await call(request, metadata=md(token), timeout=RPC_TIMEOUT_S)
    except grpc.RpcError as exc:
        stats.record(kind, time.perf_counter() - t0, ok=False)
        return exc
    stats.record(kind, time.perf_counter() - t0, ok=True)
    return reply


# -- simulated jobs and agents ----------------------------------------------------------------------
@dataclass
class SimJob:
    """A task's training process: register, then renew at the daemon's interval."""

    spec: node_pb2.TaskSpec
    stub: job_pb2_grpc.JobServiceStub
    stats: Stats
    exit_code: int | None = None
    registered: bool = False

    async def run(self, node_id: str) -> None:
        ref, token = self.spec.ref, self.spec.job_token
        reg = await timed(self.stats, "RegisterJobProcess", self.stub.RegisterJobProcess,
                          job_pb2.RegisterJobProcessRequest(
                              job_id=ref.job_id, attempt=ref.attempt, rank=ref.rank,
                              world_size=self.spec.world_size, node_id=node_id, hostname=node_id, pid=1),
                          token)
        if isinstance(reg, grpc.RpcError):
            self.exit_code = 1
            return
        self.registered = True
        interval = reg.renew_interval_s
        step, steps_per_s = reg.resume_step, 10.0
        # Real jobs start at arbitrary moments: spread the first renewal over one interval.
        await asyncio.sleep(random.uniform(0, interval))
        next_at = time.monotonic()
        while True:
            step += max(1, int(interval * steps_per_s))
            r = await timed(self.stats, "RenewLease", self.stub.RenewLease, job_pb2.RenewLeaseRequest(
                job_id=ref.job_id, attempt=ref.attempt, rank=ref.rank, step=step,
                samples_per_s=steps_per_s * 32, steps_per_s=steps_per_s), token)
            if not isinstance(r, grpc.RpcError):
                if r.action == job_pb2.LEASE_ACTION_STOP:
                    self.exit_code = 75  # checkpointed at the agreed step: "restart me later"
                    return
                if r.action == job_pb2.LEASE_ACTION_TERMINATE:
                    self.exit_code = 143
                    return
                interval = r.renew_interval_s or interval
            next_at = max(next_at + interval, time.monotonic())  # no catch-up bursts
            await asyncio.sleep(next_at - time.monotonic())


@dataclass
class SimAgent:
    node_id: str
    gpus: int
    channel: grpc.aio.Channel
    job_stubs: list[job_pb2_grpc.JobServiceStub]
    token: str
    stats: Stats
    jobs: dict[tuple[int, int, int], SimJob] = field(default_factory=dict)
    placements: dict[tuple[int, int, int], common_pb2.Placement] = field(default_factory=dict)
    tasks: set[asyncio.Task] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.stub = node_pb2_grpc.NodeServiceStub(self.channel)

    def statuses(self) -> list[node_pb2.TaskStatus]:
        out = []
        for key, job in self.jobs.items():
            exited = job.exit_code is not None
            out.append(node_pb2.TaskStatus(
                ref=node_pb2.TaskRef(job_id=key[0], attempt=key[1], rank=key[2]),
                state=node_pb2.TASK_STATE_EXITED if exited else node_pb2.TASK_STATE_RUNNING,
                exit_code=job.exit_code or 0, pid=1000 + key[0], placement=self.placements[key]))
        return out

    def apply(self, instructions, forget=()) -> None:
        for ref in forget:
            key = (ref.job_id, ref.attempt, ref.rank)
            self.jobs.pop(key, None)
            self.placements.pop(key, None)
        for ins in instructions:
            key = (ins.ref.job_id, ins.ref.attempt, ins.ref.rank)
            if ins.kind == node_pb2.INSTRUCTION_KIND_LAUNCH and key not in self.jobs:
                stub = self.job_stubs[ins.ref.job_id % len(self.job_stubs)]
                job = SimJob(ins.task, stub, self.stats)
                self.jobs[key], self.placements[key] = job, ins.task.placement
                task = asyncio.create_task(job.run(self.node_id))
                self.tasks.add(task)
                task.add_done_callback(self.tasks.discard)
            elif ins.kind == node_pb2.INSTRUCTION_KIND_STOP and key in self.jobs:
                if self.jobs[key].exit_code is None:
                    self.jobs[key].exit_code = -15
            elif ins.kind == node_pb2.INSTRUCTION_KIND_RESIZE and key in self.placements:
                self.placements[key] = ins.placement

    async def run(self) -> None:
        capacity = common_pb2.Resources(gpus=self.gpus, cpus=3 * self.gpus, mem_gb=62.5 * self.gpus)
        while True:
            r = await timed(self.stats, "RegisterNode", self.stub.RegisterNode, node_pb2.RegisterNodeRequest(
                node_id=self.node_id, hostname=self.node_id, capacity=capacity,
                gpus=[common_pb2.GpuInfo(index=i, uuid=f"GPU-{self.node_id}-{i}", name="SimGPU", memory_gb=80)
                      for i in range(self.gpus)],
                tasks=self.statuses(), agent_version="bench"), self.token)
            if not isinstance(r, grpc.RpcError):
                break
            await asyncio.sleep(0.5)
        interval = r.heartbeat_interval_s
        self.apply(r.instructions)
        await asyncio.sleep(random.uniform(0, interval))
        next_at = time.monotonic()
        while True:
            hb = await timed(self.stats, "Heartbeat", self.stub.Heartbeat, node_pb2.HeartbeatRequest(
                node_id=self.node_id, tasks=self.statuses(),
                telemetry=common_pb2.NodeTelemetry(
                    collected_at_unix_s=time.time(), cpu_util_pct=50.0, mem_used_gb=10.0, load_avg_1m=1.0,
                    gpus=[common_pb2.GpuTelemetry(index=i, utilization_pct=90.0, memory_used_gb=30.0,
                                                  temperature_c=60.0) for i in range(self.gpus)])),
                self.token)
            if not isinstance(hb, grpc.RpcError):
                interval = hb.heartbeat_interval_s or interval
                self.apply(hb.instructions, hb.forget)
            next_at = max(next_at + interval, time.monotonic())
            await asyncio.sleep(next_at - time.monotonic())


# -- the daemon ------------------------------------------------------------------------------------
def start_daemon(state_dir: Path, s: Settings) -> subprocess.Popen:
    log = open(state_dir.parent / "synergyd.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "synergy.scheduler.daemon.main", "--state-dir", str(state_dir),
         "--host", "127.0.0.1", "--port", "0", "--round-s", str(s.round_s), "--policy", s.policy,
         "--mechanism", s.mechanism, "--log-level", "warning",
         "--max-job-gpus", "1", "--launch-timeout-s", str(max(120.0, s.setup_timeout_s))],
        stdout=log, stderr=subprocess.STDOUT)
    log.close()
    deadline = time.monotonic() + 60
    while not (state_dir / ADDRESS_FILE).exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            tail = (state_dir.parent / "synergyd.log").read_text(errors="replace")[-2000:]
            raise SystemExit(f"daemon_load: synergyd did not start:\n{tail}")
        time.sleep(0.05)
    return proc


def stop_daemon(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# -- the run ---------------------------------------------------------------------------------------
async def drive(s: Settings, state_dir: Path, daemon: psutil.Process) -> tuple[Stats, dict[str, float]]:
    address = (state_dir / ADDRESS_FILE).read_text().strip()
    admin_token = (state_dir / ADMIN_TOKEN_FILE).read_text().strip()
    cluster_token = (state_dir / CLUSTER_TOKEN_FILE).read_text().strip()
    stats = Stats()
    timings: dict[str, float] = {}
    # One connection per agent (as in production); jobs share a pool of connections, since a
    # thousand sockets from one process would measure this process rather than the daemon.
    agent_channels = [grpc.aio.insecure_channel(address) for _ in range(s.agents)]
    job_channels = [grpc.aio.insecure_channel(address) for _ in range(s.job_channels)]
    admin_channel = grpc.aio.insecure_channel(address)
    job_stubs = [job_pb2_grpc.JobServiceStub(c) for c in job_channels]
    per_node = math.ceil(s.jobs / s.agents)
    agents = [SimAgent(f"node-{i:04d}", per_node, agent_channels[i], job_stubs, cluster_token, stats)
              for i in range(s.agents)]
    runners = [asyncio.create_task(a.run()) for a in agents]
    try:
        t0 = time.monotonic()
        admin = admin_pb2_grpc.AdminServiceStub(admin_channel)
        models = list(default_profiles())
        gate = asyncio.Semaphore(16)

        async def submit(i: int) -> None:
            spec = admin_pb2.JobSpec(name=f"load-{i:05d}", command=["python", "train.py"], gpus=1,
                                     model=models[i % len(models)], iterations=10_000_000)
            async with gate:
                r = await timed(stats, "SubmitJob", admin.SubmitJob, admin_pb2.SubmitJobRequest(spec=spec),
                                admin_token)
            if isinstance(r, grpc.RpcError):
                raise SystemExit(f"daemon_load: SubmitJob failed: {r.code().name}: {r.details()}")

        await asyncio.gather(*(submit(i) for i in range(s.jobs)))
        timings["submit_s"] = time.monotonic() - t0
        deadline = t0 + s.setup_timeout_s
        while True:
            running = sum(1 for a in agents for j in a.jobs.values() if j.registered and j.exit_code is None)
            if running >= s.jobs:
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"daemon_load: only {running} of {s.jobs} jobs running after "
                                 f"{s.setup_timeout_s:g} s (see --setup-timeout)")
            await asyncio.sleep(0.2)
        timings["all_running_s"] = time.monotonic() - t0
        # Let the first renewals spread over one interval before measuring.
        await asyncio.sleep(max(1.0, s.round_s / 10))
        me = psutil.Process()
        daemon.cpu_percent(None)
        me.cpu_percent(None)
        stats.measuring = True
        w0 = time.monotonic()
        timings["window_start"] = w0
        await asyncio.sleep(s.duration_s)
        stats.measuring = False
        timings["window_s"] = time.monotonic() - w0
        timings["daemon_cpu_pct"] = daemon.cpu_percent(None)
        timings["generator_cpu_pct"] = me.cpu_percent(None)
        timings["running_at_end"] = sum(1 for a in agents for j in a.jobs.values() if j.exit_code is None)
    finally:
        for t in runners:
            t.cancel()
        for a in agents:
            for t in list(a.tasks):
                t.cancel()
        await asyncio.gather(*runners, *(t for a in agents for t in a.tasks), return_exceptions=True)
        for c in (*agent_channels, *job_channels, admin_channel):
            await c.close()
    return stats, timings


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    k = min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values)) - 1))
    return sorted_values[k]


def report(s: Settings, stats: Stats, t: dict[str, float]) -> None:
    renew = min(30.0, max(0.1, s.round_s / 10))
    beat = min(10.0, max(0.1, s.round_s / 10))
    print(f"synergyd under load: {s.jobs} jobs renewing every {renew:g} s, {s.agents} agents heartbeating "
          f"every {beat:g} s (round {s.round_s:g} s, {s.policy}/{s.mechanism}), {os.cpu_count()} CPUs")
    sub = sorted(stats.setup.get("SubmitJob", []))
    print(f"setup: {s.jobs} jobs submitted in {t['submit_s']:.1f} s (SubmitJob p50 {percentile(sub, .5):.1f} ms, "
          f"p99 {percentile(sub, .99):.1f} ms); all running after {t['all_running_s']:.1f} s")
    window = t["window_s"]
    print(f"measured window: {window:.1f} s; daemon CPU {t['daemon_cpu_pct']:.0f}% of one core, "
          f"load generator CPU {t['generator_cpu_pct']:.0f}%; jobs still running at the end: "
          f"{int(t['running_at_end'])}")
    print()
    print(f"{'RPC':<14}{'calls':>8}{'RPC/s':>9}{'p50 ms':>9}{'p90 ms':>9}{'p99 ms':>9}{'max ms':>9}{'errors':>8}")
    everything: list[float] = []
    kinds = sorted(set(stats.latencies) | set(stats.errors))
    for kind in kinds:
        values = sorted(stats.latencies.get(kind, []))
        everything += values
        print(f"{kind:<14}{len(values):>8}{len(values) / window:>9.0f}{percentile(values, .5):>9.2f}"
              f"{percentile(values, .9):>9.2f}{percentile(values, .99):>9.2f}"
              f"{(values[-1] if values else float('nan')):>9.2f}{stats.errors.get(kind, 0):>8}")
    everything.sort()
    errors = sum(stats.errors.values())
    print(f"{'all':<14}{len(everything):>8}{len(everything) / window:>9.0f}{percentile(everything, .5):>9.2f}"
          f"{percentile(everything, .9):>9.2f}{percentile(everything, .99):>9.2f}"
          f"{(everything[-1] if everything else float('nan')):>9.2f}{errors:>8}")
    p99 = percentile(everything, .99)
    verdict = "met" if p99 <= TARGET_P99_MS else "NOT met"
    print(f"\ntarget p99 <= {TARGET_P99_MS:g} ms: {verdict} (p99 {p99:.2f} ms)")
    if s.timeline:
        print("\nper second of the window (all RPCs):")
        print(f"{'second':>6}{'calls':>7}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}")
        buckets: dict[int, list[float]] = {}
        for at, ms in stats.samples:
            buckets.setdefault(int(at - t["window_start"]), []).append(ms)
        for sec in sorted(buckets):
            v = sorted(buckets[sec])
            print(f"{sec:>6}{len(v):>7}{percentile(v, .5):>9.2f}{percentile(v, .99):>9.2f}{v[-1]:>9.2f}")


def parse_args(argv: list[str] | None = None) -> Settings:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=1000, help=f"simulated jobs, 1..{MAX_JOBS} (default 1000)")
    ap.add_argument("--agents", type=int, default=64, help=f"simulated agents, 1..{MAX_AGENTS} (default 64)")
    ap.add_argument("--round-s", type=float, default=10.0,
                    help="daemon round length; renew and heartbeat intervals are round/10 (default 10)")
    ap.add_argument("--duration", type=float, default=20.0, help="measured window in seconds (default 20)")
    ap.add_argument("--setup-timeout", type=float, default=120.0,
                    help="give up when the jobs are not all running after this long (default 120)")
    ap.add_argument("--job-channels", type=int, default=16, help="connections shared by the job clients")
    ap.add_argument("--policy", default="fifo")
    ap.add_argument("--mechanism", default="tune")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeline", action="store_true", help="also print latency per second of the window")
    a = ap.parse_args(argv)
    for name, value, hi in (("--jobs", a.jobs, MAX_JOBS), ("--agents", a.agents, MAX_AGENTS),
                            ("--job-channels", a.job_channels, 1024)):
        if not 1 <= value <= hi:
            ap.error(f"{name} must be between 1 and {hi}, got {value}")
    for name, value in (("--round-s", a.round_s), ("--duration", a.duration), ("--setup-timeout", a.setup_timeout)):
        if not (math.isfinite(value) and 0 < value <= 3600):
            ap.error(f"{name} must be a positive number of seconds up to 3600, got {value}")
    return Settings(a.jobs, a.agents, a.round_s, a.duration, a.setup_timeout, a.job_channels,
                    a.policy, a.mechanism, a.seed, a.timeline)


def main(argv: list[str] | None = None) -> int:
    s = parse_args(argv)
    random.seed(s.seed)
    with tempfile.TemporaryDirectory(prefix="synergy-load-") as tmp:
        state_dir = Path(tmp) / "state"
        proc = start_daemon(state_dir, s)
        try:
            stats, timings = asyncio.run(
                asyncio.wait_for(drive(s, state_dir, psutil.Process(proc.pid)),
                                 timeout=s.setup_timeout_s + s.duration_s + 60))
        finally:
            stop_daemon(proc)
    report(s, stats, timings)
    return 0


if __name__ == "__main__":
    sys.exit(main())
