"""The reconciler: desired tasks (the store) against observed tasks (an agent's heartbeat).

Run on every heartbeat of a node, it records exits, then answers with what moves the node
toward the desired state: STOP for tasks nobody wants any more (a stale attempt, a cancelled
or lost job, a job that ignored its stop request), RESIZE for a task whose CPU / memory
share changed in place, LAUNCH for a wanted task the node does not run yet, but only when
what the node still runs leaves room for it. A packed job's LAUNCH (it shares the GPUs
of its host job: `JobRecord.packed_with`) goes out only once its host's task runs on the
node or is launched earlier in the same reply, and its GPUs are not counted again; a
packed job whose host stopped or moved is asked to stop. Because each reply is computed from full
state rather than from a log of events, a restart of the daemon or the agent needs no
special path: the next heartbeat reconciles.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass

from synergy.scheduler.daemon.context import DaemonContext
from synergy.scheduler.daemon.jobs import JobBook, same_share
from synergy.scheduler.daemon.live import ObservedTask, TaskKey, TaskPhase
from synergy.scheduler.daemon.logs import event
from synergy.scheduler.daemon.records import JobRecord, JobState, placed_on
from synergy.scheduler.model import Placement, Resources

#: A job that reported completion gets this long to exit on its own before it is stopped.
EXIT_GRACE_S = 30.0
#: Seconds between SIGTERM and SIGKILL when the agent stops a task.
STOP_GRACE_S = 30.0


class InstructionKind(str, enum.Enum):
    LAUNCH = "launch"
    RESIZE = "resize"
    STOP = "stop"


@dataclass(frozen=True)
class Instruction:
    kind: InstructionKind
    key: TaskKey
    reason: str
    #: LAUNCH: the job to start (the servicer builds the task spec from it).
    job: JobRecord | None = None
    #: LAUNCH / RESIZE: the task's share on this node.
    placement: Placement | None = None
    master_hostname: str = ""
    stop_grace_s: float = 0.0


class Reconciler:
    def __init__(self, ctx: DaemonContext, jobs: JobBook) -> None:
        self.ctx = ctx
        self.jobs = jobs

    def desired_on(self, node_id: str) -> dict[TaskKey, tuple[JobRecord, Placement]]:
        return {
            TaskKey(j.id, j.attempt, rank): (j, p)
            for j in self.ctx.store.running_on(node_id)
            for rank, p in enumerate(j.placements)
            if p.server_id == node_id
        }

    def reconcile(self, node_id: str) -> tuple[list[Instruction], list[TaskKey]]:
        """Instructions for the node, and exited tasks the agent may forget. Caller holds the lock."""
        ctx = self.ctx
        live_node = ctx.live.nodes[node_id]
        node = ctx.store.node(node_id)
        assert node is not None
        now = ctx.clock.now()
        forget = self._record_exits(node_id, live_node.tasks)
        self._stop_partners_left(node_id)
        desired = self.desired_on(node_id)
        out: list[Instruction] = []
        used = Resources()
        for key, task in live_node.tasks.items():
            if task.phase == TaskPhase.EXITED:
                continue
            want = desired.get(key)
            share = task.placement or (want[1] if want else None)
            if share is not None:
                used = used + self._demand(key, share, live_node.tasks)
            if task.phase == TaskPhase.STOPPING:
                continue
            if want is None:
                stop = self._unwanted(key, now)
                if stop:
                    out.append(Instruction(InstructionKind.STOP, key, stop, stop_grace_s=STOP_GRACE_S))
                continue
            job, placement = want
            if job.stopping and job.spec.cpu_only:
                # A CPU-only job holds no lease: it never hears a stop at a renewal, so its
                # agent stops it now (CODA's CPU array returns borrowed CPUs at the round).
                out.append(Instruction(InstructionKind.STOP, key, job.stop_reason, stop_grace_s=STOP_GRACE_S))
            elif job.stopping and now - job.stop_requested_at > ctx.config.stop_timeout:
                reason = f"{job.stop_reason}; did not exit within {ctx.config.stop_timeout:g} s"
                out.append(Instruction(InstructionKind.STOP, key, reason, stop_grace_s=STOP_GRACE_S))
            elif task.placement is not None and not same_share(task.placement, placement):
                out.append(Instruction(InstructionKind.RESIZE, key, "allocation changed in place", placement=placement))
        allocatable = node.allocatable
        launching: set[TaskKey] = set()
        # Hosts before their partners: a packed LAUNCH needs its host's task on the node.
        for key in sorted(desired.keys() - live_node.tasks.keys(), key=lambda k: (desired[k][0].packed_with != 0, k)):
            job, placement = desired[key]
            if job.stopping:
                continue
            demand = placement.resources
            if job.packed_with:
                waiting = self._host_missing(job, node_id, live_node.tasks, launching)
                if waiting:
                    self._deferred(job, node_id, waiting, now)
                    continue
                demand = Resources(0, demand.cpus, demand.mem_gb)  # the host's GPUs, counted once
            if not (used + demand).fits_in(allocatable):
                self._deferred(job, node_id, "the node still runs tasks that are being stopped", now)
                continue
            used = used + demand
            launching.add(key)
            master = ctx.store.node(job.placements[0].server_id)
            out.append(
                Instruction(
                    InstructionKind.LAUNCH,
                    key,
                    f"placed in round {job.round_index}",
                    job=job,
                    placement=placement,
                    master_hostname=master.hostname if master else "",
                )
            )
            ctx.live.job(job.id, job.attempt, now).launched.add(key.rank)
        for ins in out:
            event(
                ctx.log,
                f"node.{ins.kind.value}",
                node=node_id,
                job=ins.key.job_id,
                attempt=ins.key.attempt,
                rank=ins.key.rank,
                reason=ins.reason,
            )
        return out, forget

    def _demand(self, key: TaskKey, share: Placement, tasks: dict[TaskKey, ObservedTask]) -> Resources:
        """What a task the node runs takes from it: a packed task's GPUs are its host's while
        the host's task is there (counted with it), its own otherwise."""
        r = share.resources
        job = self.ctx.store.job(key.job_id)
        if job is None or job.attempt != key.attempt or not job.packed_with:
            return r
        host_there = any(t.key.job_id == job.packed_with and t.phase != TaskPhase.EXITED for t in tasks.values())
        return Resources(0, r.cpus, r.mem_gb) if host_there else r

    def _host_missing(
        self, job: JobRecord, node_id: str, tasks: dict[TaskKey, ObservedTask], launching: set[TaskKey]
    ) -> str:
        """Why a packed job's LAUNCH must wait for its host's task on the node ("" = it need not)."""
        host = self.ctx.store.job(job.packed_with)
        why = self.jobs.partner_left(job, host)
        if why or host is None:
            return why or f"job {job.packed_with} is unknown"
        ranks = [r for r, p in enumerate(host.placements) if p.server_id == node_id]
        for rank in ranks:
            key = TaskKey(host.id, host.attempt, rank)
            seen = tasks.get(key)
            if key in launching or (seen is not None and seen.phase in (TaskPhase.STARTING, TaskPhase.RUNNING)):
                return ""
        return f"job {host.id}, whose GPUs it shares, has no running task on the node yet"

    def _deferred(self, job: JobRecord, node_id: str, reason: str, now: float) -> None:
        live_job = self.ctx.live.job(job.id, job.attempt, now)
        if not live_job.launch_deferred:
            live_job.launch_deferred = True
            event(self.ctx.log, "job.launch_deferred", job=job.id, node=node_id, reason=reason)

    def _stop_partners_left(self, node_id: str) -> None:
        """Packed jobs on the node whose host stopped or moved since (cancelled, failed, its node
        lost): asked to stop, so they never run on GPUs that are no longer their host's."""
        changes = []
        for job in self.ctx.store.running_on(node_id):
            why = self.jobs.partner_left(job, self.ctx.store.job(job.packed_with)) if job.packed_with else ""
            if why:
                changes.append((job, self.jobs.request_stop(job, why)))
        if changes:
            self.ctx.save_jobs(changes)

    def _record_exits(self, node_id: str, tasks: dict[TaskKey, ObservedTask]) -> list[TaskKey]:
        """Apply every reported exit to its job (committed before the agent may forget it).

        An exited task of an attempt that is still RUNNING is not forgotten: while the agent
        keeps reporting it, the rank is not launched again, even by a restarted daemon.
        """
        ctx = self.ctx
        exited = [t for t in tasks.values() if t.phase == TaskPhase.EXITED]
        changes: dict[int, tuple[JobRecord, JobRecord]] = {}
        foreign: set[TaskKey] = set()
        for t in exited:
            first = ctx.store.job(t.key.job_id)
            if first is None:
                continue
            current = changes[first.id][1] if first.id in changes else first
            if t.key.attempt != current.attempt:
                continue
            if current.placed and not placed_on(current, t.key.rank, node_id):
                foreign.add(t.key)
                self._foreign_report(node_id, current, t)
                continue
            new = self.jobs.task_exited(current, t.key.rank, t.exit_code, node_id, t.message, t.oom_killed)
            if new is not None and new != current:
                changes[first.id] = (first, new)
                event(
                    ctx.log,
                    "task.exited",
                    node=node_id,
                    job=t.key.job_id,
                    attempt=t.key.attempt,
                    rank=t.key.rank,
                    exit_code=t.exit_code,
                    oom_killed=t.oom_killed,
                    job_state=new.state.value,
                )
        if changes:
            ctx.save_jobs(changes.values())
        forget = []
        for t in exited:
            job = ctx.store.job(t.key.job_id)
            if job is None or not job.placed or job.attempt != t.key.attempt or t.key in foreign:
                forget.append(t.key)
        return forget

    def _foreign_report(self, node_id: str, job: JobRecord, t: ObservedTask) -> None:
        """A node reported the exit of a rank placed elsewhere: ignored (it would end
        another node's job), told to forget it, logged and counted."""
        placed = job.placements[t.key.rank].server_id if t.key.rank < len(job.placements) else "nowhere"
        self.ctx.metrics.foreign_task_reports.inc()
        event(
            self.ctx.log,
            "task.foreign_report",
            logging.WARNING,
            node=node_id,
            job=t.key.job_id,
            attempt=t.key.attempt,
            rank=t.key.rank,
            placed_on=placed,
            exit_code=t.exit_code,
        )

    def _unwanted(self, key: TaskKey, now: float) -> str:
        """Why a running task must stop ("" = leave it alone for now)."""
        job = self.ctx.store.job(key.job_id)
        if job is None:
            return f"job {key.job_id} is unknown to this daemon"
        if key.attempt != job.attempt:
            return f"attempt {key.attempt} is stale (job is at attempt {job.attempt})"
        if job.state in (JobState.SUCCEEDED, JobState.FAILED) and now - job.finished_at < EXIT_GRACE_S:
            return ""
        if job.state.terminal:
            return f"job {job.state.value}: {job.reason}"
        return f"job is {job.state.value}: {job.reason}"
