"""The reconciler: desired tasks (the store) against observed tasks (an agent's heartbeat).

Run on every heartbeat of a node, it records exits, then answers with what moves the node
toward the desired state: STOP for tasks nobody wants any more (a stale attempt, a cancelled
or lost job, a job that ignored its stop request), RESIZE for a task whose CPU / memory
share changed in place, LAUNCH for a wanted task the node does not run yet, but only when
what the node still runs leaves room for it. Because each reply is computed from full
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
        desired = self.desired_on(node_id)
        out: list[Instruction] = []
        used = Resources()
        for key, task in live_node.tasks.items():
            if task.phase == TaskPhase.EXITED:
                continue
            want = desired.get(key)
            share = task.placement or (want[1] if want else None)
            if share is not None:
                used = used + share.resources
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
        for key in sorted(desired.keys() - live_node.tasks.keys()):
            job, placement = desired[key]
            if job.stopping:
                continue
            if not (used + placement.resources).fits_in(allocatable):
                live_job = ctx.live.job(job.id, job.attempt, now)
                if not live_job.launch_deferred:
                    live_job.launch_deferred = True
                    event(
                        ctx.log,
                        "job.launch_deferred",
                        job=job.id,
                        node=node_id,
                        reason="the node still runs tasks that are being stopped",
                    )
                continue
            used = used + placement.resources
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
