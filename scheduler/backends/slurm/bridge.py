"""The Slurm bridge: plays synergy-agent for every node of a Slurm partition, in synergyd.

Each pass (`sync`, every heartbeat interval, on a thread of its own so Slurm's commands never
hold up rounds or RPCs) reads the partition's nodes (`sinfo --json`) and this synergyd's jobs
(`squeue --json`), then, node by node, does what an agent's heartbeat does: it reports the
node's tasks to the daemon's NodeBook, in process, and carries out the instructions of the
reply: LAUNCH is an `sbatch`, STOP is `scancel --batch --signal=TERM` and, after the grace,
`scancel`. In-process calls rather than loopback gRPC: the bridge is part of synergyd, so it
needs no token, no port and no protobuf round trip, and it calls the very methods
(`NodeBook.register` / `heartbeat`) the NodeService calls for a real agent.

Slurm is the memory of what runs: every task is a Slurm job named for its (job, attempt,
rank), so a restarted synergyd finds them in `squeue` and launches nothing twice. What the
bridge keeps in memory only speeds things up (stop deadlines, keys the daemon said to forget).
"""

from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

from synergy.common import contract
from synergy.agent.logrelay import read_range
from synergy.scheduler.backends.slurm import mapping
from synergy.scheduler.backends.slurm.commands import Slurm, SlurmError
from synergy.scheduler.backends.slurm.mapping import SlurmNode
from synergy.scheduler.daemon.context import DaemonContext
from synergy.scheduler.daemon.errors import DaemonError
from synergy.scheduler.daemon.events import EventLoop, PeriodicEvent
from synergy.scheduler.daemon.live import ObservedTask
from synergy.scheduler.daemon.logs import event
from synergy.scheduler.daemon.nodes import NodeBook, NodeReply
from synergy.scheduler.daemon.reconciler import Instruction, InstructionKind
from synergy.scheduler.daemon.records import AdminState
from synergy.scheduler.daemon.tasklogs import MAX_LOG_CHUNKS, LogChunk, LogRequest
from synergy.scheduler.model import Placement
from synergy.scheduler.tasks import TaskKey, TaskPhase

#: Environment variables never passed from synergyd to a job (Slurm sets its own for the job).
_DROP_PREFIXES = ("SYNERGY_", "SLURM_", "SBATCH_", "SALLOC_", "SRUN_")
#: Lines of a failed task's log put in its exit message (what `synergy describe` shows).
LOG_TAIL_LINES = 5


class SlurmRefused(RuntimeError):
    """synergyd must not start on this Slurm set-up; the message says why in one line."""


@dataclass(frozen=True)
class SlurmSettings:
    partition: str
    #: Where task logs go (`JOB-ATTEMPT-RANK.log`); must be visible to every node (shared FS).
    work_dir: Path
    #: Tag of this synergyd's jobs (from its state dir), so two synergyds never adopt each other's.
    cluster: str
    #: Address jobs use for the JobService ("" until synergyd listens: its own address then).
    daemon_address: str
    #: A launch Slurm keeps pending longer than this is cancelled and requeued with Slurm's reason.
    pending_s: float = 60.0
    tls_ca: str = ""
    #: Start on a partition anyone may submit to (warned about instead of refused).
    allow_open_partition: bool = False


@dataclass
class _Seen:
    """One Slurm job of ours, from the latest squeue."""

    slurm_id: int
    job: Mapping[str, Any]
    share: Placement


@dataclass
class SlurmBridge:
    ctx: DaemonContext
    nodes: NodeBook
    slurm: Slurm
    settings: SlurmSettings
    #: node id -> registered with this daemon process
    registered: set[str] = field(default_factory=set)
    #: task -> (Slurm job id, when to SIGKILL it): stops under way.
    stopping: dict[TaskKey, tuple[int, float]] = field(default_factory=dict)
    #: task -> its sbatch's Slurm job id, until squeue lists it.
    submitted: dict[TaskKey, tuple[str, int, Placement]] = field(default_factory=dict)
    #: task -> what to report instead of Slurm's view (launches Slurm refused or kept pending).
    refused: dict[TaskKey, tuple[str, ObservedTask]] = field(default_factory=dict)
    #: tasks the daemon said it no longer needs to hear about.
    forgotten: set[TaskKey] = field(default_factory=set)
    version: str = ""
    #: Slurm jobs in the partition that are not this synergyd's (warned about once).
    foreign_seen: set[int] = field(default_factory=set)
    #: nodes lost to Slurm (told to the daemon once), and tasks whose NODE_FAIL has been acted on.
    lost_nodes: set[str] = field(default_factory=set)
    node_failed: set[TaskKey] = field(default_factory=set)
    #: node id -> `synergy logs` requests of its last reply (answered from the shared work dir).
    log_requests: dict[str, list[LogRequest]] = field(default_factory=dict)
    #: Slurm job id -> its last new CPU figure from sstat (mapping.usage_sample).
    cpu_seen: dict[int, mapping.CpuSample] = field(default_factory=dict)

    @property
    def instance_id(self) -> str:
        """Stable across restarts: the same synergyd re-registering its partition is no takeover."""
        return f"slurm:{self.settings.cluster}:{self.settings.partition}"

    # -- start ------------------------------------------------------------------------------------
    @classmethod
    def for_config(cls, ctx: DaemonContext, nodes: NodeBook) -> SlurmBridge:
        """The bridge synergyd's config asks for, checked (SlurmRefused says why it cannot run)."""
        bridge = cls(ctx, nodes, Slurm(), settings_for(ctx.config))
        bridge.check()
        return bridge

    def serving(self, address: str) -> EventLoop:
        """Once synergyd listens on `address`: the bridge's own event loop, not started yet."""
        if not self.settings.daemon_address:
            self.settings = replace(self.settings, daemon_address=address)
        return EventLoop([SlurmSyncEvent(self)], self.ctx.clock, self.ctx.log)

    def check(self) -> None:
        """Refuse (SlurmRefused, one line) when Slurm is missing or the partition is not Synergy's alone."""
        missing = self.slurm.missing()
        if missing:
            raise SlurmRefused(f"--backend slurm: {', '.join(missing)} not found on PATH (install Slurm's client "
                               "commands on synergyd's host, with SLURM_CONF pointing at the cluster)")
        try:
            nodes = self._read_nodes()
            jobs = self.slurm.jobs(self.settings.partition)
        except SlurmError as exc:
            raise SlurmRefused(f"--backend slurm: cannot reach Slurm: {exc}") from None
        foreign = [j for j in jobs if not mapping.is_finished(j) and mapping.task_of(j, self.settings.cluster) is None]
        s = self.settings
        problem = mapping.partition_problem(nodes, s.partition, foreign)
        if problem:
            raise SlurmRefused(problem)
        try:
            options = self.slurm.partition(s.partition)
        except SlurmError as exc:
            raise SlurmRefused(f"--slurm-partition {s.partition}: cannot read its settings: {exc}") from None
        problem = mapping.partition_settings_problem(s.partition, options, s.allow_open_partition)
        if problem:
            raise SlurmRefused(problem)
        if mapping.partition_is_open(options):
            event(self.ctx.log, "slurm.open_partition", logging.WARNING, partition=s.partition,
                  action="anyone may submit to it (--slurm-allow-open-partition): foreign jobs are logged "
                  "as slurm.foreign_job and Synergy's launches may wait behind them")
        self.settings.work_dir.mkdir(parents=True, exist_ok=True)
        (self.settings.work_dir / "logs").mkdir(exist_ok=True)
        event(self.ctx.log, "slurm.started", partition=self.settings.partition, slurm=self.version,
              nodes=[n.record.id for n in nodes if self.settings.partition in n.partitions],
              work_dir=str(self.settings.work_dir))

    def _read_nodes(self) -> list[SlurmNode]:
        raw, self.version = self.slurm.nodes()
        return [mapping.node_from_sinfo(n, self.version, self.instance_id) for n in raw]

    # -- one pass ---------------------------------------------------------------------------------
    def sync(self) -> None:
        try:
            nodes = [n for n in self._read_nodes() if self.settings.partition in n.partitions]
            jobs = self.slurm.jobs(self.settings.partition)
        except SlurmError as exc:  # Slurm unreachable: nodes miss heartbeats and are lost in time
            event(self.ctx.log, "slurm.unreachable", logging.WARNING, error=str(exc))
            return
        seen = self._ours(jobs)
        self._warn_foreign(jobs)
        now = self.ctx.clock.now()
        usage = self._usage(seen, now)
        for node in nodes:
            if self._lost(node, seen):
                continue
            reply = self._report(node, self._tasks_on(node.record.id, seen, now, usage))
            if reply is None:
                continue
            self.forgotten.update(reply.forget)
            self.log_requests[node.record.id] = list(reply.log_requests)  # answered next pass, as an agent does
            for key in reply.forget:
                self.refused.pop(key, None)
            for ins in reply.instructions:
                self._carry_out(ins, seen)
        self._escalate_stops(seen, now)

    def _lost(self, node: SlurmNode, seen: dict[TaskKey, _Seen]) -> bool:
        """Whether Slurm has lost the node: down (lost to Synergy once, on the change) or a job
        of ours on it ended NODE_FAIL (squeue may say so before sinfo does). Its jobs are requeued
        at once; the node is back at its next heartbeat, once Slurm has it up again."""
        node_id = node.record.id
        failed = [k for k, s in seen.items() if s.share.server_id == node_id and k not in self.node_failed
                  and str(s.job.get("job_state")) == "NODE_FAIL"]
        if node.status != "lost" and not failed:
            self.lost_nodes.discard(node_id)
            return False
        if failed or node_id not in self.lost_nodes:
            why = node.reason if node.status == "lost" else f"Slurm job {seen[failed[0]].slurm_id} NODE_FAIL"
            self.nodes.lose(node_id, f"node {node_id} lost: {why}")
            self.node_failed.update(failed)
            self.lost_nodes.add(node_id)
            self.registered.discard(node_id)
        return True

    def _warn_foreign(self, jobs: list[Mapping[str, Any]]) -> None:
        """Work someone else put on the partition since the start check: Synergy's decisions may
        now collide with it (its own launches then wait in Slurm's queue). Logged once per job."""
        foreign = {int(j.get("job_id", 0)): j for j in jobs
                   if not mapping.is_finished(j) and mapping.task_of(j, self.settings.cluster) is None}
        for job_id in foreign.keys() - self.foreign_seen:
            j = foreign[job_id]
            event(self.ctx.log, "slurm.foreign_job", logging.WARNING, slurm_job=job_id, name=j.get("name"),
                  user=j.get("user_name"), nodes=j.get("nodes"),
                  action="Synergy's partition must be its own (docs/slurm.md); its placements may wait behind this job")
        self.foreign_seen = set(foreign)

    def _ours(self, jobs: list[Mapping[str, Any]]) -> dict[TaskKey, _Seen]:
        """This synergyd's Slurm jobs by task (the newest Slurm job where a task has two)."""
        out: dict[TaskKey, _Seen] = {}
        for j in sorted(jobs, key=lambda j: int(j.get("job_id", 0))):
            found = mapping.task_of(j, self.settings.cluster)
            if found is not None:
                key, share = found
                out[key] = _Seen(int(j["job_id"]), j, share)
                self.submitted.pop(key, None)
        self.forgotten &= set(out)  # a job squeue no longer lists cannot be reported again
        self.node_failed &= set(out)
        return out

    def _usage(self, seen: dict[TaskKey, _Seen], now: float) -> dict[int, dict[str, Any]]:
        """Slurm's CPU and RSS figures of the running tasks, by Slurm job id (none when sstat fails:
        a step that ended between squeue and sstat, or no jobacct_gather plugin)."""
        running = [s.slurm_id for s in seen.values() if str(s.job.get("job_state")) == "RUNNING"]
        try:
            raw = self.slurm.usage(running)
        except SlurmError:
            return {}
        out, kept = {}, {}
        for i, (cpu_s, rss) in raw.items():
            out[i], kept[i] = mapping.usage_sample(cpu_s, rss, self.cpu_seen.get(i), now)
        self.cpu_seen = kept
        return out

    def _tasks_on(self, node_id: str, seen: dict[TaskKey, _Seen], now: float,
                  usage: Mapping[int, Mapping[str, Any]]) -> list[ObservedTask]:
        tasks: dict[TaskKey, ObservedTask] = {}
        for key, s in seen.items():
            if s.share.server_id != node_id or key in self.forgotten:
                continue
            late = now - float(s.job.get("submit_time") or now) > self.settings.pending_s
            if mapping.is_pending(s.job) and late and key not in self.refused:
                self._refuse_pending(key, s)
            if key in self.refused:
                continue
            tail = self._log_tail(key) if mapping.is_finished(s.job) else ""
            tasks[key] = mapping.observed(s.job, key, s.share, key in self.stopping, tail, usage.get(s.slurm_id))
        for key, (node, _, share) in self.submitted.items():
            if node == node_id:
                tasks.setdefault(key, ObservedTask(key, TaskPhase.STARTING, placement=share))
        for key, (node, task) in self.refused.items():
            if node == node_id:
                tasks[key] = task
        return list(tasks.values())

    def _refuse_pending(self, key: TaskKey, s: _Seen) -> None:
        reason = str(s.job.get("state_reason", "") or "no reason given")
        why = f"Slurm kept job {s.slurm_id} pending for over {self.settings.pending_s:g} s ({reason})"
        try:
            self.slurm.cancel(s.slurm_id)
        except SlurmError as exc:
            event(self.ctx.log, "slurm.cancel_failed", logging.WARNING, slurm_job=s.slurm_id, error=str(exc))
        self.refused[key] = (s.share.server_id, mapping.refused(key, s.share, why))
        event(self.ctx.log, "slurm.pending_too_long", logging.WARNING, job=key.job_id, attempt=key.attempt,
              rank=key.rank, slurm_job=s.slurm_id, reason=reason)

    def _report(self, node: SlurmNode, tasks: list[ObservedTask]) -> NodeReply | None:
        """The node's tasks to the daemon (register the first time, heartbeat after); its reply."""
        node_id = node.record.id
        self._follow_drain(node)
        try:
            if node_id not in self.registered:
                reply = self.nodes.register(node.record, tasks)
                self.registered.add(node_id)
                return reply
            return self.nodes.heartbeat(node_id, node.telemetry, tasks, self.instance_id,
                                        self._log_chunks(self.log_requests.pop(node_id, [])))
        except DaemonError as exc:
            self.registered.discard(node_id)
            event(self.ctx.log, "slurm.node_refused", logging.WARNING, node=node_id, error=str(exc))
            return None

    def _follow_drain(self, node: SlurmNode) -> None:
        """A node drained in Slurm is drained in Synergy (its jobs move); resumed, it is resumed,
        unless a Synergy admin drained it (their reason does not start with "slurm:")."""
        record = self.ctx.store.node(node.record.id)
        if record is None:
            return
        mine = record.admin_reason.startswith("slurm:")
        if node.status == "drained" and record.admin_state != AdminState.DRAINING:
            self.nodes.drain(record.id, node.reason)
        elif node.status == "up" and record.admin_state == AdminState.DRAINING and mine:
            self.nodes.resume(record.id, f"slurm: node {record.id} resumed in Slurm")

    # -- instructions -----------------------------------------------------------------------------
    def _carry_out(self, ins: Instruction, seen: dict[TaskKey, _Seen]) -> None:
        if ins.kind == InstructionKind.LAUNCH:
            self._launch(ins, seen)
        elif ins.kind == InstructionKind.STOP:
            self._stop(ins.key, seen, ins.stop_grace_s, ins.reason)
        else:  # Slurm cannot resize a running job: the daemon stops and relaunches instead (docs/slurm.md)
            self._stop(ins.key, seen, 0.0, "Slurm cannot resize a running job in place")

    def _launch(self, ins: Instruction, seen: dict[TaskKey, _Seen]) -> None:
        key, job, share = ins.key, ins.job, ins.placement
        assert job is not None and share is not None
        if key in seen or key in self.submitted:  # never twice: squeue already has it
            return
        s = self.settings
        request = mapping.batch_request(key, job, share, s.partition, s.cluster, str(self._log_path(key)),
                                        job.spec.working_dir or str(s.work_dir))
        try:
            slurm_id = self.slurm.submit(request.flags, request.script, self._environment(ins))
        except SlurmError as exc:
            self.refused[key] = (share.server_id, mapping.refused(key, share, f"Slurm refused the job: {exc}"))
            event(self.ctx.log, "slurm.submit_failed", logging.WARNING, job=key.job_id, attempt=key.attempt,
                  rank=key.rank, error=str(exc))
            return
        self.submitted[key] = (share.server_id, slurm_id, share)
        event(self.ctx.log, "slurm.submitted", job=key.job_id, attempt=key.attempt, rank=key.rank,
              slurm_job=slurm_id, node=share.server_id, cpus=mapping.slurm_cpus(share.cpus),
              mem_mb=mapping.slurm_mem_mb(share.mem_gb), gpus=share.gpus)

    def _environment(self, ins: Instruction) -> dict[str, str]:
        """sbatch's environment, which the job inherits (--export=ALL): synergyd's minus SYNERGY_*
        and Slurm's own variables, gRPC's fork settings, the job's env, then the contract."""
        job, share = ins.job, ins.placement
        assert job is not None and share is not None
        env = {k: v for k, v in os.environ.items() if not k.startswith(_DROP_PREFIXES)}
        if "SLURM_CONF" in os.environ:
            env["SLURM_CONF"] = os.environ["SLURM_CONF"]
        env.update(contract.GRPC_FORK_ENV)
        env.update(job.spec.env)
        env.update(contract.JobEnv(
            job_id=ins.key.job_id,
            attempt=ins.key.attempt,
            rank=ins.key.rank,
            world_size=len(job.placements),
            daemon_address=self.settings.daemon_address,
            job_token=job.token,
            job_name=job.name,
            master_addr=ins.master_hostname,
            master_port=contract.master_port(ins.key.job_id, ins.key.attempt),
            tls_ca=self.settings.tls_ca,
            node_id=share.server_id,
            alloc_cpus=share.cpus,
            alloc_mem_gb=share.mem_gb,
            alloc_gpus=share.gpus,
            checkpoint_dir=job.spec.checkpoint_dir,
            resume_checkpoint=job.checkpoint_path,
            resume_step=job.checkpoint_step,
        ).to_env())
        env.pop(contract.ALLOC_CORES, None)  # the batch script sets it from the cores Slurm bound
        return env

    def _stop(self, key: TaskKey, seen: dict[TaskKey, _Seen], grace_s: float, reason: str) -> None:
        s = seen.get(key)
        if s is None or key in self.stopping or mapping.is_finished(s.job):
            return
        try:
            if mapping.is_pending(s.job):
                self.slurm.cancel(s.slurm_id)
            else:
                self.slurm.signal(s.slurm_id, "TERM")
        except SlurmError as exc:
            event(self.ctx.log, "slurm.stop_failed", logging.WARNING, slurm_job=s.slurm_id, error=str(exc))
            return
        self.stopping[key] = (s.slurm_id, self.ctx.clock.now() + grace_s)
        event(self.ctx.log, "slurm.stopping", job=key.job_id, attempt=key.attempt, rank=key.rank,
              slurm_job=s.slurm_id, grace_s=grace_s, reason=reason)

    def _escalate_stops(self, seen: dict[TaskKey, _Seen], now: float) -> None:
        for key, (slurm_id, kill_at) in list(self.stopping.items()):
            s = seen.get(key)
            if s is None or (mapping.is_finished(s.job) and key in self.forgotten):
                del self.stopping[key]
            elif now >= kill_at and not mapping.is_finished(s.job):
                try:
                    self.slurm.cancel(slurm_id)
                except SlurmError as exc:
                    event(self.ctx.log, "slurm.cancel_failed", logging.WARNING, slurm_job=slurm_id, error=str(exc))
                    continue
                self.stopping[key] = (slurm_id, float("inf"))
                event(self.ctx.log, "slurm.killed", job=key.job_id, attempt=key.attempt, rank=key.rank,
                      slurm_job=slurm_id)

    def _log_path(self, key: TaskKey) -> Path:
        return self.settings.work_dir / "logs" / f"{key.job_id}-{key.attempt}-{key.rank}.log"

    def _log_chunks(self, requests: list[LogRequest]) -> list[LogChunk]:
        """`synergy logs`: the asked byte ranges of task logs, read as our agent reads them (logrelay)."""
        out = []
        for req in requests[:MAX_LOG_CHUNKS]:
            path = self._log_path(req.key)
            try:
                start, data, eof = read_range(path, req.offset, req.max_bytes, req.tail)
            except FileNotFoundError:
                out.append(LogChunk(req.key, 0, b"", True))  # nothing written yet
                continue
            except OSError as exc:
                out.append(LogChunk(req.key, 0, b"", False, f"cannot read {path}: {exc.strerror or exc}"))
                continue
            out.append(LogChunk(req.key, start, data, eof))
        return out

    def _log_tail(self, key: TaskKey) -> str:
        log = self._log_path(key)
        try:
            with open(log, "rb") as f:
                f.seek(max(0, os.path.getsize(log) - 4096))
                lines = f.read().decode(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-LOG_TAIL_LINES:])


def cluster_tag(state_dir: Path) -> str:
    """The tag of one synergyd's Slurm jobs: a digest of its state dir (stable across restarts)."""
    return hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:8]


def settings_for(cfg: Any) -> SlurmSettings:
    """The bridge's settings from synergyd's config (config.py holds and checks the flags)."""
    return SlurmSettings(
        partition=cfg.slurm_partition,
        work_dir=Path(cfg.slurm_work_dir) if cfg.slurm_work_dir else Path(cfg.state_dir) / "slurm",
        cluster=cluster_tag(Path(cfg.state_dir)),
        daemon_address=cfg.slurm_job_daemon_address,
        pending_s=cfg.slurm_pending_s,
        tls_ca=str(cfg.tls_cert) if cfg.tls_cert is not None else "",
        allow_open_partition=cfg.slurm_allow_open_partition,
    )


class SlurmSyncEvent(PeriodicEvent):
    """One bridge pass per heartbeat interval, on an event loop of its own (app.py)."""

    name = "slurm-sync"
    #: Most of a pass is Slurm's commands, outside the state lock: only a pass this slow is worth a warning.
    slow_s = 5.0

    def __init__(self, bridge: SlurmBridge) -> None:
        self.bridge = bridge
        self.ctx = bridge.ctx

    @property
    def interval_s(self) -> float:
        return self.ctx.config.heartbeat_interval_s

    def run(self) -> None:
        self.bridge.sync()

