"""Test harness: a real `synergyd` process, real gRPC clients, simulated agents and jobs.

Only the GPUs are fake: `FakeAgent` registers a node and heartbeats like the real agent
(instructions from heartbeat replies, full task list every time), and runs each launched
task as a `FakeJob` thread that behaves like a job using the Synergy iterator (register,
renew, stop at the agreed step, checkpoint, exit 75; complete at the end). Job behaviour is
steered through the job's env (FAKE_STEP_S, FAKE_FAIL_AT, FAKE_SILENT_AT).
"""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import grpc

from synergy.v1 import admin_pb2, admin_pb2_grpc, common_pb2, job_pb2, job_pb2_grpc, node_pb2, node_pb2_grpc

RPC_TIMEOUT = 5.0


def wait_for(predicate: Callable[[], Any], timeout: float = 20.0, interval: float = 0.05, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what or predicate}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: Clients reconnect quickly after a daemon restart, and each has its own connections
#: (gRPC otherwise shares subchannels, and their back-off, across a process).
CHANNEL_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 50),
    ("grpc.min_reconnect_backoff_ms", 50),
    ("grpc.max_reconnect_backoff_ms", 500),
    ("grpc.use_local_subchannel_pool", 1),
]


def channel(address: str, tls_ca: bytes | None = None) -> grpc.Channel:
    """Plaintext, or TLS verified against `tls_ca` (PEM) when given."""
    if tls_ca:
        return grpc.secure_channel(address, grpc.ssl_channel_credentials(root_certificates=tls_ca),
                                   options=CHANNEL_OPTIONS)
    return grpc.insecure_channel(address, options=CHANNEL_OPTIONS)


def md(token: str) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {token}")]


class DaemonProcess:
    """`synergyd` as a subprocess on 127.0.0.1, port 0, a real SQLite file in `state_dir`."""

    def __init__(self, state_dir: Path, *extra: str, round_s: float = 0.5) -> None:
        self.state_dir = Path(state_dir)
        self.extra = list(extra)
        self.round_s = round_s
        self.proc: subprocess.Popen[str] | None = None
        self.address = ""
        #: the CA that verifies a daemon started with --tls-cert (admin() then speaks TLS)
        self.tls_ca: Path | None = None
        self.log_path = self.state_dir.parent / f"{self.state_dir.name}.log"

    def argv(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "synergy.scheduler.daemon.main",
            "--state-dir",
            str(self.state_dir),
            "--port",
            "0",
            "--metrics-port",
            "0",
            "--round-s",
            str(self.round_s),
            *self.extra,
        ]

    def start(self, timeout: float = 20.0) -> DaemonProcess:
        log = open(self.log_path, "a")
        self.proc = subprocess.Popen(self.argv(), stdout=subprocess.PIPE, stderr=log, text=True)
        log.close()
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: lines.put(self.proc.stdout.readline()), daemon=True).start()  # type: ignore[union-attr]
        try:
            line = lines.get(timeout=timeout)
        except queue.Empty:
            self.kill()
            raise AssertionError(f"synergyd did not start; log:\n{self.log_text()}") from None
        if not line.startswith("synergyd listening on "):
            self.kill()
            raise AssertionError(f"unexpected first line {line!r}; log:\n{self.log_text()}")
        self.address = line.split()[-1]
        return self

    def log_text(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""

    @property
    def admin_token(self) -> str:
        return (self.state_dir / "admin.token").read_text().strip()

    @property
    def cluster_token(self) -> str:
        return (self.state_dir / "cluster.token").read_text().strip()

    @property
    def metrics_address(self) -> str:
        return (self.state_dir / "metrics_address").read_text().strip()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """kill -9: no cleanup at all."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def terminate(self, timeout: float = 15.0) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.send_signal(signal.SIGUSR1)  # thread stacks into the log, for the failure report
                time.sleep(0.5)
                self.kill()
                raise AssertionError(f"synergyd ignored SIGTERM; log tail:\n{self.log_text()[-6000:]}") from None
        return self.proc.returncode

    def admin(self) -> Admin:
        return Admin(self.address, self.admin_token, self.tls_ca.read_bytes() if self.tls_ca else None)


class Admin:
    """The CLI's side: AdminService with the admin token."""

    def __init__(self, address: str, token: str, tls_ca: bytes | None = None) -> None:
        self.channel = channel(address, tls_ca)
        self.stub = admin_pb2_grpc.AdminServiceStub(self.channel)
        self.md = md(token)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self.stub, name)
        return lambda request: method(request, metadata=self.md, timeout=RPC_TIMEOUT)

    def submit(
        self, name: str, gpus: int = 1, command: tuple[str, ...] = ("python", "train.py"), **kw: Any
    ) -> admin_pb2.JobInfo:
        env = kw.pop("env", {})
        # Simulated job processes do not profile themselves: unless a test asks for live
        # profiling, a job keeps the stand-in behaviour (queued at once).
        kw.setdefault("profiler", "none")
        spec = admin_pb2.JobSpec(name=name, gpus=gpus, command=list(command), env=env, **kw)
        return self.SubmitJob(admin_pb2.SubmitJobRequest(spec=spec)).job

    def describe(self, job: str | int) -> admin_pb2.JobInfo:
        return self.DescribeJob(admin_pb2.DescribeJobRequest(job=str(job))).job

    def state(self, job: str | int) -> str:
        return common_pb2.JobState.Name(self.describe(job).state).removeprefix("JOB_STATE_").lower()

    def jobs(self) -> list[admin_pb2.JobInfo]:
        return list(self.ListJobs(admin_pb2.ListJobsRequest(all_users=True)).jobs)

    def close(self) -> None:
        self.channel.close()


def history(info: admin_pb2.JobInfo) -> list[str]:
    return [common_pb2.JobState.Name(t.to_state).removeprefix("JOB_STATE_").lower() for t in info.history]


# -- simulated job processes ------------------------------------------------------------------------
@dataclass
class FakeJob:
    """One task (job attempt on one node) behaving like an iterator-driven training process."""

    agent: FakeAgent
    spec: node_pb2.TaskSpec
    step_s: float = 0.02
    exit_code: int | None = None
    killed: threading.Event = field(default_factory=threading.Event)
    placement: common_pb2.Placement = field(default_factory=common_pb2.Placement)

    def __post_init__(self) -> None:
        env = dict(self.spec.env)
        self.step_s = float(env.get("FAKE_STEP_S", self.step_s))
        self.fail_at = int(env.get("FAKE_FAIL_AT", "0"))
        self.silent_at = int(env.get("FAKE_SILENT_AT", "0"))
        self.total = int(env.get("FAKE_STEPS", "0"))
        self.placement.CopyFrom(self.spec.placement)
        self.stub = job_pb2_grpc.JobServiceStub(self.agent.channel)
        self.md = md(self.spec.job_token)
        self.thread = threading.Thread(target=self._run, daemon=True, name=f"job-{self.spec.ref.job_id}")

    @property
    def key(self) -> tuple[int, int, int]:
        r = self.spec.ref
        return (r.job_id, r.attempt, r.rank)

    def _call(self, name: str, request: Any) -> Any:
        """Retry while the daemon is down (a real iterator keeps training meanwhile)."""
        while not self.killed.is_set():
            try:
                return getattr(self.stub, name)(request, metadata=self.md, timeout=RPC_TIMEOUT)
            except grpc.RpcError as exc:
                if exc.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                    raise
                time.sleep(0.1)
        return None

    def _run(self) -> None:
        try:
            self.exit_code = self._train()
        except grpc.RpcError:
            self.exit_code = 1
        except Exception:  # noqa: BLE001
            if self.killed.is_set():  # its agent stopped mid-call and closed the channel: the harness's teardown
                self.exit_code = -9
                return
            self.exit_code = 2
            raise

    def _train(self) -> int:
        ref = self.spec.ref
        reg = self._call(
            "RegisterJobProcess",
            job_pb2.RegisterJobProcessRequest(
                job_id=ref.job_id,
                attempt=ref.attempt,
                rank=ref.rank,
                world_size=self.spec.world_size,
                node_id=self.agent.node_id,
                hostname=self.agent.node_id,
                pid=os.getpid(),
            ),
        )
        if reg is None:
            return -9
        step = reg.resume_step
        interval = reg.renew_interval_s
        next_renew = 0.0
        stop_at = 0
        while not self.killed.is_set():
            if self.silent_at and step >= self.silent_at:
                self.killed.wait()  # hangs without renewing: the daemon must declare it lost
                return -9
            if self.fail_at and step >= self.fail_at:
                return 3
            if self.total and step >= self.total:
                if ref.rank == 0:
                    self._call(
                        "ReportCompletion",
                        job_pb2.ReportCompletionRequest(
                            job_id=ref.job_id,
                            attempt=ref.attempt,
                            step=step,
                            outcome=job_pb2.COMPLETION_OUTCOME_SUCCEEDED,
                        ),
                    )
                return 0
            if stop_at and step >= stop_at:
                self._call(
                    "ReportCheckpoint",
                    job_pb2.ReportCheckpointRequest(
                        job_id=ref.job_id, attempt=ref.attempt, step=step, path=f"/ckpt/{ref.job_id}/{step}"
                    ),
                )
                return 75
            now = time.monotonic()
            if now >= next_renew:
                r = self._call(
                    "RenewLease",
                    job_pb2.RenewLeaseRequest(
                        job_id=ref.job_id,
                        attempt=ref.attempt,
                        rank=ref.rank,
                        step=step,
                        samples_per_s=32 / self.step_s,
                        steps_per_s=1 / self.step_s,
                    ),
                )
                if r is None:
                    return -9
                interval = r.renew_interval_s or interval
                next_renew = now + interval
                if r.action == job_pb2.LEASE_ACTION_STOP:
                    stop_at = max(r.stop_at_step, step)
                elif r.action == job_pb2.LEASE_ACTION_TERMINATE:
                    return 143
            if self.killed.wait(self.step_s):
                break
            step += 1
        return -15


# -- simulated agents -------------------------------------------------------------------------------
class FakeAgent:
    """A node agent with fake GPUs: register, heartbeat, follow instructions."""

    def __init__(
        self,
        address: str,
        token: str,
        node_id: str,
        gpus: int = 4,
        cpus: float = 24,
        mem_gb: float = 256,
        reserved: tuple[float, float, float] = (0, 0, 0),
        instance_id: str | None = None,
    ) -> None:
        self.address = address
        self.node_id = node_id
        #: One per agent lifetime, as the real agent does; pass "" for a legacy agent (none sent).
        self.instance_id = uuid.uuid4().hex if instance_id is None else instance_id
        #: Set when the daemon answered "superseded": the agent stopped its tasks and its loop.
        self.superseded = threading.Event()
        #: Messages of refused registrations (ALREADY_EXISTS), retried like a real agent does.
        self.refusals: list[str] = []
        self.channel = channel(address)
        self.stub = node_pb2_grpc.NodeServiceStub(self.channel)
        self.md = md(token)
        self.capacity = common_pb2.Resources(gpus=gpus, cpus=cpus, mem_gb=mem_gb)
        self.reserved = common_pb2.Resources(gpus=reserved[0], cpus=reserved[1], mem_gb=reserved[2])
        self.tasks: dict[tuple[int, int, int], FakeJob] = {}
        self.lock = threading.Lock()
        self.stop_event = threading.Event()
        self.paused = threading.Event()
        self.interval = 0.1
        self.registered = False
        self.launches: list[tuple[int, int, int]] = []
        self.instructions: list[node_pb2.Instruction] = []
        #: Most tasks of one job ever alive at once on this node (must stay 1).
        self.max_concurrent: dict[int, int] = {}
        self.thread = threading.Thread(target=self._loop, daemon=True, name=f"agent-{node_id}")

    def start(self) -> FakeAgent:
        self.thread.start()
        wait_for(lambda: self.registered, what=f"{self.node_id} to register")
        return self

    def stop(self) -> None:
        self.stop_event.set()
        # Joined first: a heartbeat in flight when the stop came could still launch a task,
        # which then called on the closed channel from its thread (CI's thread warnings).
        self.thread.join(timeout=5)
        with self.lock:
            for t in self.tasks.values():
                t.killed.set()
        self.channel.close()

    def _statuses(self) -> list[node_pb2.TaskStatus]:
        out = []
        with self.lock:
            for key, t in self.tasks.items():
                exited = t.exit_code is not None
                out.append(
                    node_pb2.TaskStatus(
                        ref=node_pb2.TaskRef(job_id=key[0], attempt=key[1], rank=key[2]),
                        state=node_pb2.TASK_STATE_EXITED if exited else node_pb2.TASK_STATE_RUNNING,
                        exit_code=t.exit_code or 0,
                        placement=t.placement,
                    )
                )
        return out

    def _apply(self, instructions: Any, forget: Any = ()) -> None:
        with self.lock:
            for ref in forget:
                self.tasks.pop((ref.job_id, ref.attempt, ref.rank), None)
            for ins in instructions:
                self.instructions.append(ins)
                key = (ins.ref.job_id, ins.ref.attempt, ins.ref.rank)
                if ins.kind == node_pb2.INSTRUCTION_KIND_LAUNCH and key not in self.tasks:
                    job = FakeJob(self, ins.task)
                    self.tasks[key] = job
                    self.launches.append(key)
                    alive = sum(1 for k, t in self.tasks.items() if k[0] == key[0] and t.exit_code is None)
                    self.max_concurrent[key[0]] = max(self.max_concurrent.get(key[0], 0), alive)
                    job.thread.start()
                elif ins.kind == node_pb2.INSTRUCTION_KIND_STOP and key in self.tasks:
                    t = self.tasks[key]
                    t.killed.set()
                    if t.exit_code is None:
                        t.exit_code = -15
                elif ins.kind == node_pb2.INSTRUCTION_KIND_RESIZE and key in self.tasks:
                    self.tasks[key].placement.CopyFrom(ins.placement)

    def _register(self) -> None:
        r = self.stub.RegisterNode(
            node_pb2.RegisterNodeRequest(
                node_id=self.node_id,
                hostname=self.node_id,
                capacity=self.capacity,
                reserved=self.reserved,
                gpus=[
                    common_pb2.GpuInfo(index=i, uuid=f"GPU-{self.node_id}-{i}", name="FakeGPU", memory_gb=80)
                    for i in range(int(self.capacity.gpus))
                ],
                tasks=self._statuses(),
                agent_version="fake-1",
                instance_id=self.instance_id,
            ),
            metadata=self.md,
            timeout=RPC_TIMEOUT,
        )
        self.interval = r.heartbeat_interval_s
        self._apply(r.instructions)
        self.registered = True

    def _loop(self) -> None:
        while not self.stop_event.is_set():
            if self.paused.is_set():
                self.stop_event.wait(0.05)
                continue
            try:
                if not self.registered:
                    self._register()
                else:
                    r = self.stub.Heartbeat(
                        node_pb2.HeartbeatRequest(
                            node_id=self.node_id,
                            tasks=self._statuses(),
                            telemetry=common_pb2.NodeTelemetry(collected_at_unix_s=time.time(), cpu_util_pct=10),
                            instance_id=self.instance_id,
                        ),
                        metadata=self.md,
                        timeout=RPC_TIMEOUT,
                    )
                    self.interval = r.heartbeat_interval_s
                    self._apply(r.instructions, r.forget)
            except grpc.RpcError as exc:
                if exc.code() == grpc.StatusCode.NOT_FOUND:
                    self.registered = False
                elif exc.code() == grpc.StatusCode.ALREADY_EXISTS:
                    self.refusals.append(exc.details() or "")
                elif exc.code() == grpc.StatusCode.FAILED_PRECONDITION and (exc.details() or "").startswith("superseded"):
                    with self.lock:  # another instance owns the node now: stop everything, exit
                        for t in self.tasks.values():
                            t.killed.set()
                    self.superseded.set()
                    return
                elif exc.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                    raise
            self.stop_event.wait(self.interval)

    def running(self) -> list[tuple[int, int, int]]:
        with self.lock:
            return [k for k, t in self.tasks.items() if t.exit_code is None]
