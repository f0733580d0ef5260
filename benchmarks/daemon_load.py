"""Load on a real synergyd: N job clients renewing leases, M agents heartbeating, over loopback.

Starts `synergyd` on 127.0.0.1 (port 0, a temporary state dir, real SQLite), registers M
simulated agents (fake GPUs, sized so that every job fits), submits N single-GPU jobs, lets
the daemon schedule them, and runs every launched task as a simulated job process that
registers and renews its lease at the interval the daemon asks for, exactly like the
iterator: each renewal a message on the job's own RenewLeaseStream, RenewLease when that
stream broke (`--renewals unary`: RenewLease calls only, as older iterators; the before/after
figure of issue 17), asking for an answer every few messages or on a change as the iterator
does (every 10th at a 1 s cadence; `--answer-every 1`: every message answered, as before
2026-11-28). Once all N jobs run, it measures every renewal and Heartbeat for --duration
seconds and prints throughput and latency per kind (client-side wall time: the figures include gRPC, the network stack and the
load generator, as a job would see them; a renewal left unanswered has no latency, is counted
apart, and counts as an RPC in the daemon's CPU per RPC: it was processed).

The load generator is one asyncio process beside the daemon; both share this machine's
cores, so the figures are an upper bound on what the daemon alone costs. Bounded in count
and in time (--setup-timeout + --duration); it stops the daemon and exits by itself.

    python benchmarks/daemon_load.py [--jobs 1000] [--agents 64] [--round-s 10] [--duration 20]
    python benchmarks/daemon_load.py --attribute     # also: what the slowest 1% of RPCs overlapped
    python benchmarks/daemon_load.py --compare 2     # inline vs worker-process decisions, alternating
    python benchmarks/daemon_load.py --burst-only    # only the submit-burst figure

With --round-s 10 jobs renew every 1 s and agents heartbeat every 1 s (the daemon derives
both from the round: round/10, between 0.1 s and 30 s / 10 s), i.e. about 1,060 RPC/s;
with the default production round of 300 s the same cluster sends about 40 RPC/s.
Targets on a 2-core machine, printed next to the figures, not asserted: p99 <= 20 ms; the
daemon's CPU (its process and its decider worker, user + system time from psutil, not wall
time) <= 0.25 ms per measured RPC at 1000 jobs + 64 agents and 1 s cadence; and its RSS.
The larger cluster (issue 17), at the production cadence and as a 1 s stress figure:

    python benchmarks/daemon_load.py --jobs 10000 --agents 256 --round-s 300 --duration 60 \
        --setup-timeout 600 --burst 0     # renew every 30 s, heartbeat every 10 s (first round at 300 s)
    python benchmarks/daemon_load.py --jobs 10000 --agents 256 --round-s 10 --duration 15 \
        --setup-timeout 400 --burst 0     # renew and heartbeat every 1 s: beyond 2 cores, a stress figure

The CPU figure is also split by thread (Linux): the gRPC event loop with the handlers on it,
the other Python threads, and gRPC's C-core threads, in ms per RPC.

--py-spy out.svg (py-spy installed in the venv) records where synergyd's CPU goes during the
window (a flame graph; any other suffix: collapsed stacks, one per line, to sort).

A second figure, the submit burst: a fresh daemon, --burst submits (default 2000) from
--burst-clients concurrent clients (default 8, one connection each, one call in flight per
client), as a CI pipeline submitting a sweep would; printed as submits per second and latency.

--decider inline|process chooses where synergyd decides rounds (SYNERGYD_DECIDER; see
scheduler/daemon/decider.py); --compare N runs the load figure N times per decider,
alternating, so both see the same machine load. --attribute runs the daemon with debug logs
and lines every measured RPC up with the daemon's periodic events and round decisions: for
the slowest 1% of calls it prints what they overlapped, next to how often any call did.
"""
from __future__ import annotations

import argparse
import asyncio
import json
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
from typing import Any

import grpc
import psutil
import uvloop

from synergy.common.channel import StreamBroken, StreamRefused, stream_answer
from synergy.scheduler.daemon import collector
from synergy.iterator.lease import answer_every_for
from synergy.scheduler.statedir import ADDRESS_FILE, ADMIN_TOKEN_FILE, CLUSTER_TOKEN_FILE
from synergy.scheduler.profiles.zoo import default_profiles
from synergy.v1 import admin_pb2, admin_pb2_grpc, common_pb2, job_pb2, job_pb2_grpc, node_pb2, node_pb2_grpc

MAX_JOBS = 20_000
MAX_AGENTS = 2_048
RPC_TIMEOUT_S = 10.0
#: Codes a client asks again after (the iterator's `_RETRY`): the daemon was down or too busy to answer.
RETRY_CODES = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
TARGET_P99_MS = 20.0
#: Daemon CPU (its own process and its decider worker, user + system) per measured RPC.
TARGET_CPU_MS_PER_RPC = 0.25


def daemon_cpu_s(daemon: psutil.Process) -> dict[int, float]:
    """CPU seconds so far of the daemon and its children (the decider worker), by pid."""
    out = {}
    for p in (daemon, *daemon.children(recursive=True)):
        try:
            t = p.cpu_times()
        except psutil.Error:
            continue
        out[p.pid] = t.user + t.system
    return out


def daemon_thread_cpu_s(daemon: psutil.Process) -> dict[int, tuple[str, float]]:
    """CPU seconds so far of each of the daemon process's threads, with the thread's OS name
    (Linux: gRPC's C-core threads name themselves, e.g. "event_engine"; Python's keep the
    process name); {} where the platform does not say."""
    out = {}
    try:
        threads = daemon.threads()
    except psutil.Error:
        return out
    for t in threads:
        try:
            name = Path(f"/proc/{daemon.pid}/task/{t.id}/comm").read_text().strip()
        except OSError:
            name = "?"
        out[t.id] = (name, t.user_time + t.system_time)
    return out


def thread_split(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]) -> dict[str, float]:
    """The window's CPU seconds by kind of thread: the busiest Python thread (the gRPC event
    loop, under this load), the other Python threads (grpc.aio's completion-queue poller,
    which is one, the periodic events, the lock-waiting executor, main), and gRPC's C-core
    threads (sockets, HTTP/2)."""
    used = {tid: (name, cpu - before.get(tid, (name, 0.0))[1]) for tid, (name, cpu) in after.items()}
    python = sorted((cpu for name, cpu in used.values() if name.startswith("python")), reverse=True)
    return {"loop": python[0] if python else 0.0, "python": sum(python[1:]),
            "grpc": sum(cpu for name, cpu in used.values() if not name.startswith("python"))}


def py_spy_path() -> str:
    return str(Path(sys.executable).with_name("py-spy"))


def daemon_rss_mb(daemon: psutil.Process) -> float:
    total = 0
    for p in (daemon, *daemon.children(recursive=True)):
        try:
            total += p.memory_info().rss
        except psutil.Error:
            continue
    return total / 2**20


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
    decider: str = "process"
    attribute: bool = False
    compare: int = 0
    burst: int = 2000
    burst_clients: int = 8
    load: bool = True
    py_spy: str = ""
    renewals: str = "stream"
    #: Ask for an answer at least every N-th renewal on a stream (0: as the iterator, from the interval).
    answer_every: int = 0
    #: synergyd's --max-rpc-rate (None: its default; 0: no cap, the cadence never stretched).
    max_rpc_rate: float | None = None


@dataclass
class Stats:
    """Latencies (ms) per RPC kind; only recorded while `measuring`."""

    measuring: bool = False
    latencies: dict[str, list[float]] = field(default_factory=dict)
    #: (completion time, latency ms, completion wall time) of every measured call, for
    #: --timeline and --attribute (the daemon's log has wall-clock timestamps).
    samples: list[tuple[float, float, float]] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    #: Renewal messages sent on a stream without waiting (`answer_every`), and those answered:
    #: the rest the daemon processed and left unanswered (no latency).
    quiet_sent: int = 0
    quiet_answered: int = 0
    #: (RPC, status code) -> (count, the first message): what failed, printed under the table.
    why: dict[tuple[str, str], tuple[int, str]] = field(default_factory=dict)
    setup: dict[str, list[float]] = field(default_factory=dict)
    #: SubmitJob calls of the set-up asked again after their deadline (or UNAVAILABLE).
    submit_retries: int = 0

    @property
    def unanswered(self) -> int:
        return max(0, self.quiet_sent - self.quiet_answered)

    def record(self, kind: str, seconds: float, ok: bool, error: BaseException | None = None) -> None:
        if not ok:
            if self.measuring:
                self.errors[kind] = self.errors.get(kind, 0) + 1
                code, message = _error(error)
                n, first = self.why.get((kind, code), (0, message))
                self.why[(kind, code)] = (n + 1, first)
            return
        target = self.latencies if self.measuring else self.setup
        target.setdefault(kind, []).append(seconds * 1e3)
        if self.measuring:
            self.samples.append((time.monotonic(), seconds * 1e3, time.time()))


def _error(exc: BaseException | None) -> tuple[str, str]:
    """A failed call's status code (or exception type) and message, for the error summary."""
    if isinstance(exc, grpc.RpcError):
        code = exc.code()
        return (code.name if code is not None else "UNKNOWN"), " ".join(str(exc.details() or "").split())[:160]
    if exc is None:
        return "UNKNOWN", ""
    return type(exc).__name__, " ".join(str(exc).split())[:160]


def md(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


async def timed(stats: Stats, kind: str, call, request, token: str):
    """One RPC, timed; returns the reply or the RpcError."""
    t0 = time.perf_counter()
    try:
        reply = await call(request, metadata=md(token), timeout=RPC_TIMEOUT_S)
    except grpc.RpcError as exc:
        stats.record(kind, time.perf_counter() - t0, ok=False, error=exc)
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
    streamed: bool = True
    #: After a stream's first message, ask for an answer this often (0: as the iterator).
    answer_every: int = 0
    exit_code: int | None = None
    registered: bool = False
    interval: float = 1.0
    stream: Any = None
    #: Takes the open stream's answers after its first (`_read`).
    reader: asyncio.Task | None = None
    #: When the stream's last unanswered message went (perf_counter; None: all answered).
    sent_at: float | None = None
    unanswered: job_pb2.RenewLeaseRequest | None = None

    async def renew(self, request: job_pb2.RenewLeaseRequest, token: str):
        """As the iterator's LeaseKeeper.renew: a stream's first message waits for its answer;
        later ones are only sent (answers come to `_read`); RenewLease when the stream is off
        or broke (the next renewal opens a new one). Returns the reply, the RpcError, or None
        (sent on the open stream)."""
        if not self.streamed:
            return await timed(self.stats, "RenewLease", self.stub.RenewLease, request, token)
        t0 = time.perf_counter()
        try:
            if self.stream is not None:
                request.answer_every = self.answer_every or answer_every_for(self.interval)
                self.stats.quiet_sent += self.stats.measuring
                self.sent_at, self.unanswered = t0, request
                await self.stream.write(request)
                return None
            self.stream = self.stub.RenewLeaseStream(metadata=md(token))
            await self.stream.write(request)
            answer = await asyncio.wait_for(self.stream.read(), RPC_TIMEOUT_S)
            if answer is grpc.aio.EOF:
                raise StreamBroken("the daemon ended the stream")
            self.sent_at = None
            self.reader = asyncio.create_task(self._read(self.stream, token))
            reply = stream_answer(answer)
        except StreamRefused as exc:  # this message refused; the stream goes on
            self.stats.record("RenewLeaseStream", time.perf_counter() - t0, ok=False, error=exc)
            return exc
        except (grpc.RpcError, StreamBroken, asyncio.TimeoutError) as exc:
            self.stats.record("RenewLeaseStream", time.perf_counter() - t0, ok=False, error=exc)
            self._drop_stream()
            return await timed(self.stats, "RenewLease", self.stub.RenewLease, request, token)
        self.stats.record("RenewLeaseStream", time.perf_counter() - t0, ok=True)
        return reply

    async def _read(self, stream: Any, token: str) -> None:
        """The stream's answers as they come, each timed from the message it answers (the last
        one sent) and taken at once; when the stream breaks, its unanswered renewal goes by
        RenewLease, as the iterator's."""
        try:
            while (answer := await stream.read()) is not grpc.aio.EOF:  # read(), as for the first answer
                seconds = None if self.sent_at is None else time.perf_counter() - self.sent_at
                self.sent_at = self.unanswered = None
                if seconds is not None:
                    self.stats.quiet_answered += self.stats.measuring
                try:
                    reply = stream_answer(answer)
                except StreamRefused as exc:
                    if seconds is not None:
                        self.stats.record("RenewLeaseStream", seconds, ok=False, error=exc)
                    continue
                if seconds is not None:
                    self.stats.record("RenewLeaseStream", seconds, ok=True)
                self.take(reply)
            broken: BaseException = StreamBroken("the daemon ended the stream")
        except grpc.RpcError as exc:
            broken = exc
        if self.stream is not stream:
            return
        self.stats.record("RenewLeaseStream", 0.0, ok=False, error=broken)
        request = self.unanswered
        self.reader = None  # this task: ends by itself
        self._drop_stream()
        if request is not None:
            r = await timed(self.stats, "RenewLease", self.stub.RenewLease, request, token)
            if not isinstance(r, grpc.RpcError):
                self.take(r)

    def _drop_stream(self) -> None:
        stream, self.stream, self.sent_at, self.unanswered = self.stream, None, None, None
        if stream is not None:
            stream.cancel()
        reader, self.reader = self.reader, None
        if reader is not None:
            reader.cancel()

    def take(self, r: job_pb2.RenewLeaseResponse) -> None:
        """An answer: STOP and TERMINATE end the job (at its next tick), an interval is kept."""
        if r.action == job_pb2.LEASE_ACTION_STOP:
            self.exit_code = 75  # checkpointed at the agreed step: "restart me later"
        elif r.action == job_pb2.LEASE_ACTION_TERMINATE:
            self.exit_code = 143
        self.interval = r.renew_interval_s or self.interval

    async def run(self, node_id: str) -> None:
        ref, token = self.spec.ref, self.spec.job_token
        request = job_pb2.RegisterJobProcessRequest(job_id=ref.job_id, attempt=ref.attempt, rank=ref.rank,
                                                    world_size=self.spec.world_size, node_id=node_id,
                                                    hostname=node_id, pid=1)
        wait = 0.1
        # As the iterator's LeaseKeeper.call: a daemon too busy to answer in time is asked again.
        while isinstance(reg := await timed(self.stats, "RegisterJobProcess", self.stub.RegisterJobProcess,
                                            request, token), grpc.RpcError) and reg.code() in RETRY_CODES:
            await asyncio.sleep(wait)
            wait = min(2.0, 2 * wait)
        if isinstance(reg, grpc.RpcError):
            self.exit_code = 1
            return
        self.registered = True
        self.interval = reg.renew_interval_s
        step, steps_per_s = reg.resume_step, 10.0
        # Real jobs start at arbitrary moments: spread the first renewal over one interval.
        await asyncio.sleep(random.uniform(0, self.interval))
        next_at = time.monotonic()
        try:
            while self.exit_code is None:
                step += max(1, int(self.interval * steps_per_s))
                r = await self.renew(job_pb2.RenewLeaseRequest(
                    job_id=ref.job_id, attempt=ref.attempt, rank=ref.rank, step=step,
                    samples_per_s=steps_per_s * 32, steps_per_s=steps_per_s), token)
                if r is not None and not isinstance(r, grpc.RpcError):
                    self.take(r)
                    if self.exit_code is not None:
                        break
                next_at = max(next_at + self.interval, time.monotonic())  # no catch-up bursts
                await asyncio.sleep(next_at - time.monotonic())
        finally:
            if self.stream is not None:
                await self.stream.done_writing()
            if self.reader is not None:
                self.reader.cancel()


@dataclass
class SimAgent:
    node_id: str
    gpus: int
    channel: grpc.aio.Channel
    job_stubs: list[job_pb2_grpc.JobServiceStub]
    token: str
    stats: Stats
    streamed: bool = True
    answer_every: int = 0
    jobs: dict[tuple[int, int, int], SimJob] = field(default_factory=dict)
    #: The heartbeat interval the daemon asked for last.
    interval: float = 0.0
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
                job = SimJob(ins.task, stub, self.stats, self.streamed, self.answer_every)
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
        self.interval = r.heartbeat_interval_s
        self.apply(r.instructions)
        await asyncio.sleep(random.uniform(0, self.interval))
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
                self.interval = hb.heartbeat_interval_s or self.interval
                self.apply(hb.instructions, hb.forget)
            next_at = max(next_at + self.interval, time.monotonic())
            await asyncio.sleep(next_at - time.monotonic())


# -- the daemon ------------------------------------------------------------------------------------
def start_daemon(state_dir: Path, s: Settings, decider: str) -> subprocess.Popen:
    log = open(state_dir.parent / "synergyd.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "synergy.scheduler.daemon.main", "--state-dir", str(state_dir),
         "--host", "127.0.0.1", "--port", "0", "--round-s", str(s.round_s), "--policy", s.policy,
         "--mechanism", s.mechanism, "--log-level", "debug" if s.attribute else "warning",
         "--max-job-gpus", "1", "--launch-timeout-s", str(max(120.0, s.setup_timeout_s)),
         *(["--max-rpc-rate", f"{s.max_rpc_rate:g}"] if s.max_rpc_rate is not None else [])],
        stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "SYNERGYD_DECIDER": decider})
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
    agents = [SimAgent(f"node-{i:04d}", per_node, agent_channels[i], job_stubs, cluster_token, stats,
                       s.renewals == "stream", s.answer_every) for i in range(s.agents)]
    runners = [asyncio.create_task(a.run()) for a in agents]
    try:
        t0 = time.monotonic()
        admin = admin_pb2_grpc.AdminServiceStub(admin_channel)
        models = list(default_profiles())
        gate = asyncio.Semaphore(16)

        async def submit(i: int) -> None:
            spec = admin_pb2.JobSpec(name=f"load-{i:05d}", command=["python", "train.py"], gpus=1,
                                     model=models[i % len(models)], iterations=10_000_000)
            for attempt in range(5):  # a CI pipeline would ask again; the name makes it safe
                async with gate:
                    r = await timed(stats, "SubmitJob", admin.SubmitJob, admin_pb2.SubmitJobRequest(spec=spec),
                                    admin_token)
                if not isinstance(r, grpc.RpcError) or r.code() not in RETRY_CODES:
                    break
                stats.submit_retries += 1
            if isinstance(r, grpc.RpcError) and not (attempt and r.code() == grpc.StatusCode.ALREADY_EXISTS):
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
        me.cpu_percent(None)
        spy = None
        if s.py_spy:  # where the daemon's CPU goes during the window (a flame graph, SVG)
            spy = subprocess.Popen([py_spy_path(), "record", "--pid",
                                    str(daemon.pid), "--duration", str(int(s.duration_s)), "--rate", "200",
                                    "--output", s.py_spy, "--nonblocking",
                                    "--format", "flamegraph" if s.py_spy.endswith(".svg") else "raw"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        cpu0, threads0 = daemon_cpu_s(daemon), daemon_thread_cpu_s(daemon)
        stats.measuring = True
        w0 = time.monotonic()
        timings["window_start"] = w0
        await asyncio.sleep(s.duration_s)
        stats.measuring = False
        timings["window_s"] = time.monotonic() - w0
        cpu1 = daemon_cpu_s(daemon)
        for kind, cpu in thread_split(threads0, daemon_thread_cpu_s(daemon)).items():
            timings[f"{kind}_cpu_s"] = cpu
        timings["daemon_cpu_s"] = sum(v - cpu0.get(pid, 0.0) for pid, v in cpu1.items())
        timings["worker_cpu_s"] = sum(v - cpu0.get(pid, 0.0) for pid, v in cpu1.items() if pid != daemon.pid)
        timings["daemon_cpu_pct"] = 100 * timings["daemon_cpu_s"] / timings["window_s"]
        timings["daemon_rss_mb"] = daemon_rss_mb(daemon)
        timings["generator_cpu_pct"] = me.cpu_percent(None)
        if spy is not None:
            spy.wait(timeout=s.duration_s + 30)
        timings["running_at_end"] = sum(1 for a in agents for j in a.jobs.values() if j.exit_code is None)
        # What the clients were last told (the daemon stretches both past --max-rpc-rate).
        told = [j.interval for a in agents for j in a.jobs.values() if j.exit_code is None and j.registered]
        timings["renew_told_s"] = max(told, default=0.0)
        timings["renew_told_min_s"] = min(told, default=0.0)
        timings["beat_told_s"] = max((a.interval for a in agents), default=0.0)
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
    every = s.answer_every or answer_every_for(renew)
    how = (f"on a RenewLeaseStream each, answered at least every {every}" if s.renewals == "stream"
           else "with RenewLease calls")
    print(f"synergyd under load: {s.jobs} jobs renewing every {renew:g} s ({how}), {s.agents} agents "
          f"heartbeating every {beat:g} s (round {s.round_s:g} s, {s.policy}/{s.mechanism}), {os.cpu_count()} CPUs")
    sub = sorted(stats.setup.get("SubmitJob", []))
    print(f"setup: {s.jobs} jobs submitted in {t['submit_s']:.1f} s (SubmitJob p50 {percentile(sub, .5):.1f} ms, "
          f"p99 {percentile(sub, .99):.1f} ms{f', {stats.submit_retries} asked again' if stats.submit_retries else ''}); "
          f"all running after {t['all_running_s']:.1f} s")
    if t["renew_told_s"] > renew or t["beat_told_s"] > beat:
        low = t["renew_told_min_s"]
        told = f"{low:g}-{t['renew_told_s']:g}" if low != t["renew_told_s"] else f"{low:g}"
        cap = "its default" if s.max_rpc_rate is None else f"{s.max_rpc_rate:g}"
        print(f"cadence stretched by synergyd (--max-rpc-rate: {cap}): at the end, renewals every {told} s and "
              f"heartbeats every {t['beat_told_s']:g} s, against {renew:g} s and {beat:g} s asked by the round")
    window = t["window_s"]
    print(f"measured window: {window:.1f} s; daemon CPU {t['daemon_cpu_pct']:.0f}% of one core, "
          f"load generator CPU {t['generator_cpu_pct']:.0f}%; jobs still running at the end: "
          f"{int(t['running_at_end'])}")
    print()
    print(f"{'RPC':<18}{'calls':>8}{'RPC/s':>9}{'p50 ms':>9}{'p90 ms':>9}{'p99 ms':>9}{'max ms':>9}{'errors':>8}")
    everything: list[float] = []
    kinds = sorted(set(stats.latencies) | set(stats.errors))
    for kind in kinds:
        values = sorted(stats.latencies.get(kind, []))
        everything += values
        print(f"{kind:<18}{len(values):>8}{len(values) / window:>9.0f}{percentile(values, .5):>9.2f}"
              f"{percentile(values, .9):>9.2f}{percentile(values, .99):>9.2f}"
              f"{(values[-1] if values else float('nan')):>9.2f}{stats.errors.get(kind, 0):>8}")
    everything.sort()
    errors = sum(stats.errors.values())
    print(f"{'all':<18}{len(everything):>8}{len(everything) / window:>9.0f}{percentile(everything, .5):>9.2f}"
          f"{percentile(everything, .9):>9.2f}{percentile(everything, .99):>9.2f}"
          f"{(everything[-1] if everything else float('nan')):>9.2f}{errors:>8}")
    for (kind, code), (n, first) in sorted(stats.why.items()):
        print(f"  errors: {kind} {code} x{n}" + (f" (first: {first})" if first else ""))
    p99 = percentile(everything, .99)
    verdict = "met" if p99 <= TARGET_P99_MS else "NOT met"
    print(f"\ntarget p99 <= {TARGET_P99_MS:g} ms: {verdict} (p99 {p99:.2f} ms)")
    per_rpc = cpu_ms_per_rpc(stats, t)
    verdict = "met" if per_rpc <= TARGET_CPU_MS_PER_RPC else "NOT met"
    print(f"target daemon CPU <= {TARGET_CPU_MS_PER_RPC:g} ms per renewal or heartbeat: {verdict} ({per_rpc:.3f} ms: "
          f"{t['daemon_cpu_s']:.2f} CPU s of synergyd and its worker for {rpc_count(stats)} renewals "
          f"and heartbeats, {stats.unanswered} of them renewals left unanswered; "
          f"the worker's share {t['worker_cpu_s']:.2f} s)")
    calls = rpc_count(stats)
    if calls and "loop_cpu_s" in t:
        print("  by thread, ms per RPC: " + ", ".join(f"{what} {1e3 * t[key] / calls:.3f}" for what, key in (
            ("gRPC event loop (handlers included)", "loop_cpu_s"), ("other Python threads", "python_cpu_s"),
            ("gRPC C-core threads", "grpc_cpu_s"), ("decider worker", "worker_cpu_s"))))
    print(f"synergyd memory at the end of the window: RSS {t['daemon_rss_mb']:.0f} MiB (with its worker)")
    if stats.samples:
        calm, n_calm, n_seconds = calm_samples(stats)
        c = sorted(ms for _, ms, _ in calm)
        print(f"calm seconds (median call <= {CALM_P50_MS:g} ms, i.e. other processes left the CPUs alone): "
              f"{n_calm} of {n_seconds}; their p99 {percentile(c, .99):.2f} ms")
    if s.timeline:
        print("\nper second of the window (all RPCs):")
        print(f"{'second':>6}{'calls':>7}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}")
        buckets: dict[int, list[float]] = {}
        for at, ms, _ in stats.samples:
            buckets.setdefault(int(at - t["window_start"]), []).append(ms)
        for sec in sorted(buckets):
            v = sorted(buckets[sec])
            print(f"{sec:>6}{len(v):>7}{percentile(v, .5):>9.2f}{percentile(v, .99):>9.2f}{v[-1]:>9.2f}")


# -- where the slowest calls waited (--attribute) ---------------------------------------------------
@dataclass(frozen=True)
class Span:
    """Something the daemon did, from its debug log: a periodic event or a round decision."""

    what: str
    start: float  # wall clock, like the log's timestamps
    end: float


def daemon_spans(log_text: str) -> list[Span]:
    spans = []
    for line in log_text.splitlines():
        if not line.startswith("{"):
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        what = rec.get("event")
        if what in ("event.ran", "event.slow"):
            took, name = rec["took_ms"] / 1e3, str(rec["name"])
        elif what == "round.decided":
            took, name = rec["ms"] / 1e3, f"round decision ({rec['where']})"
        else:
            continue
        spans.append(Span(name, rec["ts"] - took, rec["ts"]))
    return spans


def covered(start: float, end: float, spans: list[Span]) -> dict[str, float]:
    """Seconds of [start, end] during which the daemon did each kind of work, and under
    "nothing" the seconds when it ran no periodic event (only RPCs, or other processes)."""
    out: dict[str, float] = {}
    pieces = []
    for sp in spans:
        lo, hi = max(start, sp.start), min(end, sp.end)
        if hi > lo:
            out[sp.what] = out.get(sp.what, 0.0) + hi - lo
            pieces.append((lo, hi))
    busy, reach = 0.0, start
    for lo, hi in sorted(pieces):
        if hi > reach:
            busy += hi - max(lo, reach)
            reach = hi
    out["nothing (RPCs, other processes)"] = max(0.0, end - start - busy)
    return out


#: A second of the window whose median call took longer than this was one in which other
#: processes had the CPUs (the median call costs about 1-2 ms on an idle 2-core machine).
CALM_P50_MS = 5.0


def calm_samples(stats: Stats) -> tuple[list[tuple[float, float, float]], int, int]:
    """The calls of the window's calm seconds (median under CALM_P50_MS), and how many of
    how many seconds were calm. On a shared machine, the tail of the busy seconds is other
    processes' doing; the calm seconds show what the daemon itself does to the tail."""
    start = min(at for at, _, _ in stats.samples)
    by_second: dict[int, list[tuple[float, float, float]]] = {}
    for sample in stats.samples:
        by_second.setdefault(int(sample[0] - start), []).append(sample)
    calm = [s for group in by_second.values()
            if percentile(sorted(ms for _, ms, _ in group), .5) <= CALM_P50_MS for s in group]
    n_calm = sum(1 for g in by_second.values() if percentile(sorted(ms for _, ms, _ in g), .5) <= CALM_P50_MS)
    return calm, n_calm, len(by_second)


def report_attribution(stats: Stats, spans: list[Span]) -> None:
    """For the slowest 1% of calls: what share of the time they took the daemon spent on
    each kind of periodic work (a round decision lies inside the round event's span), next
    to the same for all calls; once for the whole window, once for its calm seconds."""
    if not stats.samples:
        return
    calm, n_calm, n_seconds = calm_samples(stats)
    _attribute("the whole window", stats.samples, spans)
    if calm:
        p99 = percentile(sorted(ms for _, ms, _ in calm), .99)
        _attribute(f"the {n_calm} calm seconds of {n_seconds} (median call <= {CALM_P50_MS:g} ms; "
                   f"their p99 {p99:.2f} ms)", calm, spans)
    busiest: dict[str, list[float]] = {}
    for sp in spans:
        busiest.setdefault(sp.what, []).append((sp.end - sp.start) * 1e3)
    print("daemon work in the run: " + "; ".join(
        f"{what} x{len(ms)} (max {max(ms):.1f} ms, total {sum(ms):.0f} ms)"
        for what, ms in sorted(busiest.items(), key=lambda kv: -sum(kv[1]))))


def _attribute(title: str, samples: list[tuple[float, float, float]], spans: list[Span]) -> None:
    lo = min(w - ms / 1e3 for _, ms, w in samples) - 1
    hi = max(w for _, _, w in samples) + 1
    spans = sorted((sp for sp in spans if sp.end > lo and sp.start < hi), key=lambda sp: sp.start)
    cut = percentile(sorted(ms for _, ms, _ in samples), .99)
    totals: dict[bool, dict[str, float]] = {True: {}, False: {}}
    waited = {True: 0.0, False: 0.0}
    n_slow = 0
    for _, ms, wall in samples:
        slow = ms >= cut
        n_slow += slow
        for what, sec in covered(wall - ms / 1e3, wall, spans).items():
            for group in {slow, False}:  # False: all calls
                totals[group][what] = totals[group].get(what, 0.0) + sec
        for group in {slow, False}:
            waited[group] += ms / 1e3
    print(f"\n{title}: while the slowest 1% of calls ({n_slow}, >= {cut:.2f} ms) were in flight, the daemon "
          f"was running (share of their time; all {len(samples)} calls for comparison):")
    print(f"{'daemon work':<34}{'slowest 1%':>11}{'all calls':>11}")
    for what in sorted(totals[False], key=lambda k: -totals[True].get(k, 0.0)):
        print(f"{what:<34}{100 * totals[True].get(what, 0.0) / max(waited[True], 1e-9):>10.0f}%"
              f"{100 * totals[False][what] / max(waited[False], 1e-9):>10.1f}%")


# -- the submit burst ------------------------------------------------------------------------------
@dataclass
class Burst:
    latencies_ms: list[float]
    elapsed_s: float
    errors: int


async def submit_burst(s: Settings, state_dir: Path) -> Burst:
    """--burst submits from --burst-clients clients, each with one call in flight."""
    address = (state_dir / ADDRESS_FILE).read_text().strip()
    token = (state_dir / ADMIN_TOKEN_FILE).read_text().strip()
    channels = [grpc.aio.insecure_channel(address) for _ in range(s.burst_clients)]
    models = list(default_profiles())
    latencies: list[float] = []
    errors = 0

    async def client(k: int, count: int) -> None:
        nonlocal errors
        stub = admin_pb2_grpc.AdminServiceStub(channels[k])
        for i in range(count):
            spec = admin_pb2.JobSpec(name=f"burst-{k}-{i:05d}", command=["python", "train.py"], gpus=1,
                                     model=models[(k + i) % len(models)], iterations=1000)
            t0 = time.perf_counter()
            try:
                await stub.SubmitJob(admin_pb2.SubmitJobRequest(spec=spec), metadata=md(token),
                                     timeout=RPC_TIMEOUT_S)
            except grpc.RpcError:
                errors += 1
                continue
            latencies.append((time.perf_counter() - t0) * 1e3)

    try:
        for c in channels:  # connect first: the figure is about submits, not TCP handshakes
            await asyncio.wait_for(c.channel_ready(), timeout=30)
        share = [s.burst // s.burst_clients + (k < s.burst % s.burst_clients) for k in range(s.burst_clients)]
        t0 = time.monotonic()
        await asyncio.gather(*(client(k, n) for k, n in enumerate(share)))
        elapsed = time.monotonic() - t0
    finally:
        for c in channels:
            await c.close()
    return Burst(sorted(latencies), elapsed, errors)


def burst_line(b: Burst) -> str:
    v = b.latencies_ms
    return (f"{len(v) / b.elapsed_s:>8.0f}/s  p50 {percentile(v, .5):6.2f} ms  p90 {percentile(v, .9):6.2f} ms  "
            f"p99 {percentile(v, .99):6.2f} ms  max {(v[-1] if v else float('nan')):7.2f} ms  errors {b.errors}")


def cpu_ms_per_rpc(stats: Stats, t: dict[str, float]) -> float:
    """The daemon's own CPU time (psutil, not wall time) over the window, per measured RPC
    (a renewal the daemon took and left unanswered counts: it was processed)."""
    calls = rpc_count(stats)
    return 1e3 * t["daemon_cpu_s"] / calls if calls else float("nan")


def rpc_count(stats: Stats) -> int:
    return sum(len(v) for v in stats.latencies.values()) + sum(stats.errors.values()) + stats.unanswered


def load_line(stats: Stats, t: dict[str, float]) -> str:
    v = sorted(x for values in stats.latencies.values() for x in values)
    calm, n_calm, n_seconds = calm_samples(stats) if stats.samples else ([], 0, 0)
    c = sorted(ms for _, ms, _ in calm)
    return (f"{len(v) / t['window_s']:>6.0f} RPC/s  p50 {percentile(v, .5):6.2f} ms  "
            f"p99 {percentile(v, .99):7.2f} ms  max {(v[-1] if v else float('nan')):8.2f} ms  "
            f"errors {sum(stats.errors.values())}; calm {n_calm}/{n_seconds} s: p99 {percentile(c, .99):6.2f} ms; "
            f"daemon CPU {cpu_ms_per_rpc(stats, t):.3f} ms/RPC, RSS {t['daemon_rss_mb']:.0f} MiB")


# -- runs ------------------------------------------------------------------------------------------
def run_async(coro):
    """The load generator on uvloop, as synergyd: it shares the machine's two cores with the
    daemon, so every bit of CPU it saves is CPU the daemon's figures do not lose to it.

    It collects its garbage as synergyd does (scheduler/daemon/collector.py). At 10,000 jobs
    its own full collections took 0.5-0.9 s (a probe, docs/daemon.md), during which no
    renewal or heartbeat left it and the ones due went out together afterwards: a burst
    the daemon's figures would carry, not a load a cluster sends."""
    collector.freeze_after_full_collections()
    try:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(_collecting_young(coro))
    finally:
        collector.stop_freezing()


async def _collecting_young(coro):
    async def young() -> None:
        while True:
            await asyncio.sleep(collector.YOUNG_S)
            collector.collect_young()

    task = asyncio.create_task(young())
    try:
        return await coro
    finally:
        task.cancel()
        # Free what was frozen while this loop still runs: gRPC channels that became cyclic
        # garbage would otherwise be finalised after it closed, each finaliser a traceback
        # ("Event loop is closed") on a closed loop.
        collector.stop_freezing()
        collector.sweep()


def run_load(s: Settings, decider: str) -> tuple[Stats, dict[str, float], list[Span]]:
    with tempfile.TemporaryDirectory(prefix="synergy-load-") as tmp:
        state_dir = Path(tmp) / "state"
        proc = start_daemon(state_dir, s, decider)
        try:
            stats, timings = run_async(
                asyncio.wait_for(drive(s, state_dir, psutil.Process(proc.pid)),
                                 timeout=s.setup_timeout_s + s.duration_s + 60))
        finally:
            stop_daemon(proc)
        spans = daemon_spans((Path(tmp) / "synergyd.log").read_text(errors="replace")) if s.attribute else []
    return stats, timings, spans


def run_burst(s: Settings, decider: str) -> Burst:
    with tempfile.TemporaryDirectory(prefix="synergy-burst-") as tmp:
        state_dir = Path(tmp) / "state"
        proc = start_daemon(state_dir, s, decider)
        try:
            return run_async(asyncio.wait_for(submit_burst(s, state_dir), timeout=s.setup_timeout_s))
        finally:
            stop_daemon(proc)


def machine_load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (1 min), {five:.2f} (5 min) on {os.cpu_count()} CPUs"


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
    ap.add_argument("--decider", choices=("process", "inline"), default="process",
                    help="where synergyd decides rounds (default process: a worker for large rounds)")
    ap.add_argument("--attribute", action="store_true",
                    help="line the slowest calls up with what the daemon was doing (debug logs)")
    ap.add_argument("--compare", type=int, default=0, metavar="N",
                    help="run each figure N times per decider, alternating inline / process")
    ap.add_argument("--burst", type=int, default=2000, help="submits in the burst figure (0: skip it)")
    ap.add_argument("--burst-clients", type=int, default=8, help="concurrent submitting clients (default 8)")
    ap.add_argument("--burst-only", action="store_true", help="only the submit-burst figure")
    ap.add_argument("--renewals", choices=("stream", "unary"), default="stream",
                    help="how the simulated jobs renew: on a RenewLeaseStream each (the iterator's "
                         "default), or with RenewLease calls (older iterators; for before/after figures)")
    ap.add_argument("--answer-every", type=int, default=0, metavar="N",
                    help="on a stream, ask for an answer at least every N-th renewal, the others "
                         "answered only when their answer changes (default 0: as the iterator, from "
                         "the renewal interval, every 10th at a 1 s cadence; 1: every renewal "
                         "answered, as before)")
    ap.add_argument("--max-rpc-rate", type=float, default=None, metavar="N",
                    help="synergyd's --max-rpc-rate: past it the daemon stretches the renewal and heartbeat "
                         "intervals (default: synergyd's default; 0: no cap, as before 2026-11-28)")
    ap.add_argument("--py-spy", default="", metavar="SVG",
                    help="record where synergyd's CPU goes during the window with py-spy (pip install "
                         "py-spy into this venv): a flame graph for .svg, else collapsed stacks")
    a = ap.parse_args(argv)
    for name, value, lo, hi in (("--jobs", a.jobs, 1, MAX_JOBS), ("--agents", a.agents, 1, MAX_AGENTS),
                                ("--job-channels", a.job_channels, 1, 1024), ("--compare", a.compare, 0, 20),
                                ("--burst", a.burst, 0, MAX_JOBS), ("--burst-clients", a.burst_clients, 1, 256),
                                ("--answer-every", a.answer_every, 0, 100)):
        if not lo <= value <= hi:
            ap.error(f"{name} must be between {lo} and {hi}, got {value}")
    for name, value in (("--round-s", a.round_s), ("--duration", a.duration), ("--setup-timeout", a.setup_timeout)):
        if not (math.isfinite(value) and 0 < value <= 3600):
            ap.error(f"{name} must be a positive number of seconds up to 3600, got {value}")
    if a.max_rpc_rate is not None and not (math.isfinite(a.max_rpc_rate) and a.max_rpc_rate >= 0):
        ap.error(f"--max-rpc-rate must be a number >= 0, got {a.max_rpc_rate}")
    if a.py_spy and not Path(py_spy_path()).exists():
        ap.error(f"--py-spy needs py-spy beside this Python ({py_spy_path()}): pip install py-spy")
    if a.burst_only and not a.burst:
        ap.error("--burst-only needs --burst > 0")
    return Settings(a.jobs, a.agents, a.round_s, a.duration, a.setup_timeout, a.job_channels,
                    a.policy, a.mechanism, a.seed, a.timeline, a.decider, a.attribute, a.compare,
                    a.burst, a.burst_clients, not a.burst_only, a.py_spy, a.renewals,
                    a.answer_every, a.max_rpc_rate)


def main(argv: list[str] | None = None) -> int:
    s = parse_args(argv)
    random.seed(s.seed)
    print(f"machine: {machine_load()}")
    if s.compare:
        return compare(s)
    if s.load:
        stats, timings, spans = run_load(s, s.decider)
        print(f"decider: {s.decider}")
        report(s, stats, timings)
        if s.attribute:
            report_attribution(stats, spans)
    if s.burst:
        b = run_burst(s, s.decider)
        print(f"\nsubmit burst: {s.burst} submits from {s.burst_clients} concurrent clients "
              f"(one call in flight each), decider {s.decider}, in {b.elapsed_s:.2f} s")
        print(f"  {burst_line(b)}")
    print(f"\nmachine after: {machine_load()}")
    return 0


def compare(s: Settings) -> int:
    """Both deciders, alternating, so that they see the same (shared, noisy) machine."""
    deciders = ("inline", "process")
    if s.load:
        print(f"load: {s.jobs} jobs + {s.agents} agents, {s.duration_s:g} s windows, round {s.round_s:g} s "
              f"(target p99 <= {TARGET_P99_MS:g} ms)")
        for k in range(s.compare):
            for d in deciders:
                stats, timings, spans = run_load(s, d)
                print(f"  run {k + 1} {d:<8}{load_line(stats, timings)}  [{machine_load()}]", flush=True)
                if s.attribute:
                    report_attribution(stats, spans)
    if s.burst:
        print(f"submit burst: {s.burst} submits from {s.burst_clients} concurrent clients")
        for k in range(s.compare):
            for d in deciders:
                print(f"  run {k + 1} {d:<8}{burst_line(run_burst(s, d))}  [{machine_load()}]", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
