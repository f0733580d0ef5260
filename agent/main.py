"""synergy-agent: register, heartbeat, apply the daemon's instructions, supervise the tasks.

The loop sleeps in `select()` on a signal wake-up pipe until the next heartbeat is due, a
stopping task's grace runs out, or a signal arrives (SIGCHLD: a task exited; SIGTERM /
SIGINT: shut down). It never busy-waits. Exit codes: 0 after SIGTERM / SIGINT, 1 for a
refusal that retrying cannot fix (bad token, node id owned by another live agent),
2 for bad flags, 3 when the daemon says this agent was superseded by a newer one.

gRPC's C core writes its own lines to stderr (`I... ssl_transport_security.cc ... Handshake
failed` at every retry against a daemon without TLS), which is the agent's structured log;
the agent names such trouble itself (`agent.daemon_unreachable reason=...`). gRPC reads its
verbosity once, when it is imported, so it is turned off for that import only: the variable
is taken out again at once, because the agent's environment is every job's, and a job keeps
gRPC's messages (a user who sets GRPC_VERBOSITY keeps it, for the agent and its jobs).
"""

# ruff: noqa: E402
from __future__ import annotations

import os

if "GRPC_VERBOSITY" not in os.environ:
    os.environ["GRPC_VERBOSITY"] = "NONE"
    import grpc

    del os.environ["GRPC_VERBOSITY"]

import logging
import select
import signal
import sys
import time
from pathlib import Path
from typing import Sequence

import grpc
import psutil

from synergy.agent import VERSION, logrelay
from synergy.agent.bandwidth import Calibration, Resctrl, calibrate
from synergy.agent.cgroups import Cgroups, CgroupError, detect
from synergy.agent.contention import Policy
from synergy.agent.eliminator import Eliminator
from synergy.agent.client import NodeClient
from synergy.agent.config import AgentConfig, ConfigError, from_args
from synergy.agent.cores import format_cpu_list
from synergy.agent.gpus import GIB, Gpus, GpuTypeError, discover
from synergy.agent.identity import IdentityError, claim
from synergy.agent.metrics import MetricsServer, MetricsSources
from synergy.agent.report import node_telemetry_extras, pct, statuses
from synergy.agent.tasks import Supervisor, TaskKey
from synergy.agent.users import JobUsers, unreadable_by_others
from synergy.agent.workdir import work_dir_problem
from synergy.agent.telemetry import NodeSample, Sampler
from synergy.common.channel import Backoff
from synergy.common.logs import configure, event
from synergy.common.tlsprobe import tls_problem
from synergy.scheduler.statedir import StateDirError, tighten_permissions
from synergy.v1 import common_pb2, node_pb2

LOGGER = "synergy-agent"
EXIT_FATAL = 1
EXIT_SUPERSEDED = 3
#: Heartbeat interval until the daemon tells its own.
DEFAULT_INTERVAL_S = 1.0
_RETRY = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.INTERNAL,
          grpc.StatusCode.UNKNOWN, grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.CANCELLED)


class Fatal(Exception):
    def __init__(self, message: str, code: int = EXIT_FATAL) -> None:
        super().__init__(message)
        self.code = code


class Waker:
    """Signals wake the loop through a pipe (`signal.set_wakeup_fd`), so it can sleep in select()."""

    def __init__(self) -> None:
        self.r, self.w = os.pipe()
        os.set_blocking(self.r, False)
        os.set_blocking(self.w, False)
        self.stop_signal = 0
        signal.set_wakeup_fd(self.w, warn_on_full_buffer=False)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # a Python handler makes SIGCHLD reach the pipe
        signal.signal(signal.SIGTERM, self._stop)
        signal.signal(signal.SIGINT, self._stop)

    def _stop(self, signum: int, _frame: object) -> None:
        self.stop_signal = signum

    def wait(self, timeout_s: float, fds: Sequence[int] = ()) -> None:
        """Sleep until a signal, one of `fds` is readable (a job's start-up socket), or the timeout."""
        if self.stop_signal:
            return
        ready, _, _ = select.select([self.r, *fds], [], [], max(0.0, timeout_s))
        if self.r in ready:
            try:
                while os.read(self.r, 512):
                    pass
            except BlockingIOError:
                pass


class Agent:
    def __init__(self, cfg: AgentConfig, log: logging.Logger) -> None:
        self.cfg = cfg
        self.log = log
        self.identity = claim(cfg.work_dir)  # before re-adopting: the lock holder owns the tasks
        try:  # jobs run as other users: the work dir (state, exit records, logs) is the agent's alone
            for change in tighten_permissions(cfg.work_dir):
                event(log, "agent.work_dir_tightened", level=logging.WARNING, reason=change)
        except StateDirError as exc:
            self.identity.release()
            raise IdentityError(f"--work-dir: {exc}") from None
        try:  # before any cgroup exists: a node with GPUs of two types is refused here
            self.gpus: Gpus = discover(log, cfg.node_id, cfg.fake_gpus, cfg.gpu_type)
        except GpuTypeError:
            self.identity.release()
            raise
        self.instance_id = self.identity.instance_id
        parent = f"{cfg.cgroup_parent}/{cfg.node_id}"
        # Probed only: nothing of the node (its groups, its tasks) is touched until the daemon
        # has accepted this agent as the node's instance (`_take_over`, after RegisterNode).
        self.cgroups = detect(parent, enabled=cfg.use_cgroups, setup=False)
        #: the daemon accepted this agent as the node's instance and it took the node over
        self.taken_over = False
        self.supervisor = Supervisor(
            node_id=cfg.node_id,
            cores=cfg.task_cores,
            gpus=self.gpus.count,
            mem_gb=cfg.mem_gb - cfg.reserve_mem_gb,
            work_dir=cfg.work_dir,
            cgroups=self.cgroups,
            log=log,
            daemon_address=cfg.job_daemon_address,
            tls_ca=cfg.tls_ca,
            pids_max=cfg.task_pids_max,
            log_max_bytes=cfg.task_log_max_bytes,
            log_keep=cfg.task_log_files,
            wind_down_cap_s=cfg.wind_down_cap_s,
            users=JobUsers.for_agent(cfg.node_id, cfg.default_user, cfg.allow_root_jobs, cfg.ignore_job_users),
        )
        self.supervisor.load()  # reported in RegisterNode as recorded; checked by readopt once accepted
        resctrl = Resctrl()
        self.sampler = Sampler(cfg.task_cores, self.cgroups, self.gpus, self._calibrate(), resctrl)
        self.eliminator: Eliminator | None = None
        if cfg.contention_threshold is not None:
            policy = Policy(bw_threshold=cfg.contention_threshold, throughput_drop=cfg.contention_throughput_drop,
                            restore_below=cfg.contention_threshold * 0.8)
            self.eliminator = Eliminator(self.supervisor, log, policy, resctrl, calibration=self.sampler.calibration)
            event(log, "agent.contention_eliminator", threshold=policy.bw_threshold,
                  throughput_drop=policy.throughput_drop, restore_below=round(policy.restore_below, 3),
                  actuator=self.eliminator.actuator)
        event(log, "agent.telemetry", interval_s=cfg.sample_interval_s, membw_source=self.sampler.membw_source)
        self.latest: NodeSample | None = None
        self.metrics = MetricsServer(MetricsSources(
            cfg.node_id, lambda: self.latest, self.supervisor.counts,
            lambda: dict(self.eliminator.counts) if self.eliminator is not None else {}))
        self.client = NodeClient(cfg.daemon, cfg.cluster_token, cfg.tls_ca, cfg.tls_cert, cfg.tls_key)
        self.interval_s = DEFAULT_INTERVAL_S
        self.registered = False
        self.backoff = Backoff()
        #: the daemon's LogRequests from the last heartbeat reply (`synergy logs`)
        self.log_requests: list[node_pb2.LogRequest] = []
        #: why the node takes no new tasks now ("" = it does), as last reported
        self.not_ready = ""
        psutil.cpu_percent(percpu=True)  # primes the counters: the first sample is then meaningful

    def _calibrate(self) -> Calibration | None:
        cfg = self.cfg
        if cfg.bandwidth_calibration_s <= 0:
            return None
        c = calibrate(cfg.task_cores, cfg.bandwidth_calibration_s, cfg.work_dir)
        event(self.log, "agent.bandwidth_calibrated", peak_gb_s=round(c.peak_bytes_per_s / 1e9, 2),
              per_core_gb_s=round(c.per_core_bytes_per_s / 1e9, 2), cores=format_cpu_list(c.cores))
        return c

    def sample(self) -> NodeSample:
        """One telemetry sample of the node and its tasks (kept as `latest`)."""
        self.latest = self.sampler.sample(self.supervisor.tasks.values())
        if self.eliminator is not None and self.taken_over:
            self.eliminator.step(self.latest)
        return self.latest

    # -- messages -------------------------------------------------------------------------------
    def _register_request(self) -> node_pb2.RegisterNodeRequest:
        cfg = self.cfg
        return node_pb2.RegisterNodeRequest(
            node_id=cfg.node_id,
            hostname=cfg.hostname,
            gpu_type=self.gpus.gpu_type,
            capacity=common_pb2.Resources(gpus=self.gpus.count, cpus=len(cfg.cores), mem_gb=round(cfg.mem_gb, 3)),
            reserved=common_pb2.Resources(gpus=0, cpus=cfg.reserve_cpus, mem_gb=round(cfg.reserve_mem_gb, 3)),
            gpus=[
                common_pb2.GpuInfo(index=g.index, uuid=g.uuid, name=g.name, memory_gb=g.memory_gb)
                for g in self.gpus.gpus
            ],
            tasks=self._statuses(),
            agent_version=VERSION,
            instance_id=self.instance_id,
            cgroup_mode=self.cgroups.kind,
            memory_enforced=self.cgroups.enforces_memory,
        )

    def _telemetry(self) -> common_pb2.NodeTelemetry:
        latest = self.latest
        if latest is not None:
            util, mem_gb, at = latest.cpu_util_pct, latest.mem_used_bytes / GIB, latest.at_unix
        else:
            per_cpu = psutil.cpu_percent(percpu=True)
            mine = [per_cpu[c] for c in self.cfg.cores if c < len(per_cpu)]
            util, mem_gb, at = (sum(mine) / len(mine) if mine else 0.0), psutil.virtual_memory().used / GIB, time.time()
        msg = common_pb2.NodeTelemetry(
            collected_at_unix_s=at,
            cpu_util_pct=pct(util),
            mem_used_gb=mem_gb,
            load_avg_1m=os.getloadavg()[0],
            gpus=[
                common_pb2.GpuTelemetry(
                    index=s.index,
                    utilization_pct=pct(s.utilization_pct),
                    memory_used_gb=s.memory_used_gb,
                    temperature_c=s.temperature_c,
                )
                for s in self.gpus.sample()
            ],
        )
        if latest is not None:
            node_telemetry_extras(msg, latest)
        return msg

    def _statuses(self) -> list[node_pb2.TaskStatus]:
        """Every task with its latest usage sample and, while throttled, the eliminator's hold."""
        holds = self.eliminator.holds if self.eliminator is not None else None
        return statuses(self.supervisor.tasks.values(), self.cfg.node_id, self.latest, holds)

    def _progress(self, progress: Sequence[node_pb2.TaskProgress]) -> None:
        """The daemon's throughput vs baseline of the node's training tasks -> the eliminator."""
        if self.eliminator is not None:
            self.eliminator.throughput.progress(
                {str(TaskKey.of(p.ref)): (p.throughput, p.baseline_throughput) for p in progress})

    def _log_path(self, ref: node_pb2.TaskRef) -> Path | None:
        task = self.supervisor.tasks.get(TaskKey.of(ref))
        return task.log_path if task is not None else None

    def _why_unreachable(self, exc: grpc.RpcError) -> str:
        """gRPC words a TLS mismatch like a daemon that is down: a handshake of our own says
        which, in the CLI's words (the probe both use, `synergy.common.tlsprobe`)."""
        if exc.code() == grpc.StatusCode.UNAVAILABLE:
            problem = tls_problem(self.cfg.daemon, self.cfg.tls_ca, 2.0)
            if problem is not None:
                return problem.message
        return exc.details() or ""

    # -- taking the node over -------------------------------------------------------------------
    def _take_over(self) -> bool:
        """Once the daemon accepted this agent as the node's instance: re-adopt (or report lost)
        the tasks of the previous instance, set the cgroups up, move re-adopted tasks into a
        changed slice. False when the cgroups could not be set up and the agent goes on without
        (`--allow-unenforced`): the registration must then say so. Raises Fatal otherwise.
        """
        cfg, cg = self.cfg, self.cgroups
        self.taken_over = True
        self.supervisor.readopt()  # first: the dead instance's groups go before the node group changes
        ok = True
        if cg.kind != "none":
            try:
                cg.setup(cfg.cores)
                self.supervisor.fit_to_slice(cfg.stop_grace_s)
                cg.confine(cfg.cores)
            except CgroupError as exc:
                why = f"cgroup {cg.kind} found but it could not be set up: {exc}"
                event(self.log, "agent.cgroups_unusable", level=logging.ERROR, reason=why,
                      allow_unenforced=cfg.allow_unenforced)
                if not cfg.allow_unenforced:
                    raise Fatal(f"{why}; memory and CPU limits would not be enforced. Fix the cgroup, or start "
                                "with --allow-unenforced (or --no-cgroups) to run without them")
                self.cgroups = Cgroups(f"{why}; running with --allow-unenforced")
                self.supervisor.cgroups = self.sampler.cgroups = self.cgroups
                ok = False
        enforced = self.cgroups.enforces_memory
        event(self.log, "agent.cgroups", level=logging.INFO if enforced else logging.WARNING, kind=self.cgroups.kind,
              memory_enforced=enforced, detail=self.cgroups.describe())
        return ok

    def _not_ready_reason(self) -> str:
        """Why the node must take no new tasks now (its work dir is full), logged when it changes."""
        why = work_dir_problem(self.cfg.work_dir, self.cfg.work_dir_min_free_bytes)
        if why != self.not_ready:
            event(self.log, "agent.not_ready" if why else "agent.ready_again",
                  level=logging.WARNING if why else logging.INFO, reason=why or self.not_ready)
            self.not_ready = why
        return why

    # -- one exchange ---------------------------------------------------------------------------
    def exchange(self) -> None:
        """Register (if needed) or heartbeat once, and apply the reply."""
        if not self.registered:
            try:
                reply = self.client.register(self._register_request())
            except grpc.RpcError as exc:
                code = exc.code()
                if code == grpc.StatusCode.ALREADY_EXISTS:
                    raise Fatal(f"node id {self.cfg.node_id!r} is owned by another live agent: {exc.details()}")
                if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
                    raise Fatal(f"synergyd at {self.cfg.daemon} refused the cluster token: {exc.details()}")
                if code == grpc.StatusCode.INVALID_ARGUMENT:
                    raise Fatal(f"synergyd at {self.cfg.daemon} refused the registration: {exc.details()}")
                raise
            self.registered = True
            self.interval_s = reply.heartbeat_interval_s or self.interval_s
            if not self.taken_over and not self._take_over():
                self.registered = False  # the cgroup mode changed: say so in a new RegisterNode
                return self.exchange()
            event(self.log, "agent.registered", daemon=self.cfg.daemon, daemon_version=reply.daemon_version,
                  node=self.cfg.node_id, state=common_pb2.NodeState.Name(reply.state),
                  heartbeat_interval_s=self.interval_s, tasks=len(self.supervisor.tasks))
            self.apply(reply.instructions, ())
            return
        request = node_pb2.HeartbeatRequest(
            node_id=self.cfg.node_id,
            telemetry=self._telemetry(),
            tasks=self._statuses(),
            instance_id=self.instance_id,
            log_chunks=logrelay.answer(self.log_requests, self._log_path),
            not_ready_reason=self._not_ready_reason(),
        )
        self.log_requests = []
        try:
            reply = self.client.heartbeat(request)
        except grpc.RpcError as exc:
            code = exc.code()
            if code == grpc.StatusCode.NOT_FOUND:
                event(self.log, "agent.reregister", reason=exc.details())
                self.registered = False
                return self.exchange()
            if code == grpc.StatusCode.FAILED_PRECONDITION and "supersede" in (exc.details() or ""):
                raise Fatal(f"superseded by another agent for node {self.cfg.node_id!r}: {exc.details()}",
                            EXIT_SUPERSEDED)
            if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
                raise Fatal(f"synergyd at {self.cfg.daemon} refused the cluster token: {exc.details()}")
            raise
        self.interval_s = reply.heartbeat_interval_s or self.interval_s
        self.log_requests = list(reply.log_requests)  # answered in the next heartbeat (agent/logrelay.py)
        self._progress(reply.progress)
        self.apply(reply.instructions, reply.forget)

    def apply(self, instructions: Sequence[node_pb2.Instruction], forget: Sequence[node_pb2.TaskRef]) -> None:
        sup = self.supervisor
        for ref in forget:
            sup.forget(TaskKey.of(ref))
        for ins in sorted(instructions, key=self._frees_first):
            key = TaskKey.of(ins.ref)
            if ins.kind == node_pb2.INSTRUCTION_KIND_LAUNCH:
                if ins.task.ref.job_id == 0:
                    ins.task.ref.CopyFrom(ins.ref)
                sup.launch(ins.task)
            elif ins.kind == node_pb2.INSTRUCTION_KIND_RESIZE:
                p = ins.placement
                sup.resize(key, int(p.gpus), p.cpus, p.mem_gb)
            elif ins.kind == node_pb2.INSTRUCTION_KIND_STOP:
                sup.stop(key, ins.stop_grace_s, ins.reason)
        sup.poll()

    def _frees_first(self, ins: node_pb2.Instruction) -> int:
        """Apply what frees cores before what takes them: a round that shrinks one job and
        grows or launches another sends both at once, and in the other order the agent would
        refuse the growth (or the launch) as an over-commit until the daemon repeated it."""
        if ins.kind == node_pb2.INSTRUCTION_KIND_RESIZE:
            task = self.supervisor.tasks.get(TaskKey.of(ins.ref))
            return 0 if task is not None and ins.placement.cpus < task.share.cpus else 2
        return 1 if ins.kind == node_pb2.INSTRUCTION_KIND_LAUNCH else 0
    # -- the loop -------------------------------------------------------------------------------
    def run(self, waker: Waker) -> int:
        cfg = self.cfg
        event(self.log, "agent.started", version=VERSION, node=cfg.node_id, daemon=cfg.daemon, pid=os.getpid(),
              cores=format_cpu_list(cfg.cores), task_cores=format_cpu_list(cfg.task_cores),
              mem_gb=round(cfg.mem_gb, 3), gpus=self.gpus.count, fake_gpus=self.gpus.fake, gpu_type=self.gpus.gpu_type,
              work_dir=str(cfg.work_dir))
        users = self.supervisor.users
        event(self.log, "agent.job_users", level=logging.INFO if users.switch else logging.WARNING,
              run_as_users=users.switch, default_user=users.default_user if users.switch else "",
              allow_root_jobs=users.allow_root, detail=users.describe())
        if users.switch and cfg.tls_ca and (why := unreadable_by_others(cfg.tls_ca)):
            event(self.log, "agent.tls_ca_unreadable_by_jobs", level=logging.WARNING, tls_ca=cfg.tls_ca,
                  reason=f"{why}: jobs run as their users and read it (SYNERGY_TLS_CA) to reach synergyd; give "
                  "them a world-readable copy (a CA certificate is public)")
        if cfg.metrics_port is not None:
            try:
                event(self.log, "agent.metrics", address=self.metrics.start(cfg.metrics_host, cfg.metrics_port,
                                                                            cfg.work_dir))
            except OSError as exc:
                sys.stderr.write(f"synergy-agent: --metrics-port: cannot listen on {cfg.metrics_host}:"
                                 f"{cfg.metrics_port}: {exc.strerror}\n")
                return 2
        next_beat = next_sample = time.monotonic()
        code = 0
        stop_tasks = cfg.stop_tasks_on_exit
        try:
            while not waker.stop_signal:
                if self.taken_over:
                    self.supervisor.poll()
                if cfg.sample_interval_s > 0 and time.monotonic() >= next_sample:
                    self.sample()
                    next_sample = max(next_sample + cfg.sample_interval_s, time.monotonic())
                if time.monotonic() >= next_beat:
                    try:
                        self.exchange()
                        self.backoff.reset()
                        next_beat = time.monotonic() + self.interval_s
                    except grpc.RpcError as exc:
                        if exc.code() not in _RETRY:
                            raise Fatal(f"synergyd at {cfg.daemon} answered {exc.code().name}: {exc.details()}")
                        delay = self.backoff.next()
                        if self.backoff.attempt in (1, 5) or self.backoff.attempt % 20 == 0:
                            event(self.log, "agent.daemon_unreachable", level=logging.WARNING, daemon=cfg.daemon,
                                  code=exc.code().name, retry_in_s=round(delay, 2), attempt=self.backoff.attempt,
                                  reason=self._why_unreachable(exc))
                        next_beat = time.monotonic() + delay
                wake = min(next_beat, next_sample) if cfg.sample_interval_s > 0 else next_beat
                deadline = self.supervisor.next_deadline()
                if deadline is not None:
                    wake = min(wake, deadline)
                waker.wait(wake - time.monotonic(), self.supervisor.wake_fds() if self.taken_over else ())
            event(self.log, "agent.stopping", signal=signal.Signals(waker.stop_signal).name)
        except Fatal as exc:
            sys.stderr.write(f"synergy-agent: {exc}\n")
            event(self.log, "agent.fatal", level=logging.ERROR, reason=str(exc))
            code = exc.code
            stop_tasks = stop_tasks or code == EXIT_SUPERSEDED  # a newer agent owns the node now
        finally:
            if self.taken_over:  # an agent the daemon never accepted leaves the node as it found it
                self.supervisor.shutdown(cfg.stop_grace_s, stop_tasks=stop_tasks)
                self.cgroups.teardown()
            self.client.close()
            self.gpus.close()
            self.metrics.close()
            self.identity.release()
        return code


def main(argv: Sequence[str] | None = None) -> int:
    try:
        cfg = from_args(argv)
    except ConfigError as exc:
        sys.stderr.write(f"synergy-agent: {exc}\n")
        return 2
    log = configure(cfg.log_level, cfg.log_format, name=LOGGER)
    waker = Waker()
    try:
        agent = Agent(cfg, log)
    except (IdentityError, GpuTypeError) as exc:
        sys.stderr.write(f"synergy-agent: {exc}\n")
        return 1
    return agent.run(waker)


if __name__ == "__main__":
    sys.exit(main())
