"""Nodes: registration, heartbeats, liveness, and the admin's cordon / drain / resume.

The admin state (ready, cordoned, draining) is persisted and survives restarts of both the
daemon and the agent; liveness is observed (a node is lost when it misses heartbeats for
`--node-timeout-s`) and rebuilt from heartbeats after a daemon restart.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

from synergy.scheduler.daemon.context import DaemonContext
from synergy.scheduler.daemon.errors import AlreadyExists, FailedPrecondition, NotFound
from synergy.scheduler.daemon.jobs import JobBook
from synergy.scheduler.daemon.loaning import LoanBook
from synergy.scheduler.daemon.live import NodeLive, ObservedTask, TaskKey, TaskPhase
from synergy.scheduler.daemon.logs import event
from synergy.scheduler.daemon.progress import TaskProgress
from synergy.scheduler.daemon.tasklogs import LogChunk, LogRequest
from synergy.scheduler.daemon.reconciler import Instruction, Reconciler
from synergy.scheduler.daemon.records import AdminState, JobRecord, JobState, NodeRecord
from synergy.scheduler.model import Resources


@dataclass(frozen=True)
class NodeView:
    """A node with what the daemon observes and has allocated on it (for ListNodes)."""

    record: NodeRecord
    state: str  # "ready" | "cordoned" | "draining" | "lost"
    reason: str
    allocated: Resources
    job_ids: tuple[int, ...]
    last_heartbeat: float
    telemetry: Mapping[str, Any]
    #: tasks the node's contention eliminator throttles now (live)
    throttled_tasks: int = 0
    #: "JOB=BACKEND_JOB" of its live tasks run by a backend's jobs (Slurm), live
    backend_jobs: tuple[str, ...] = ()


@dataclass(frozen=True)
class NodeReply:
    #: The node's state and why (`NodeBook.state`): all an agent is told of itself. A full
    #: `NodeView` (its jobs, allocation, telemetry) was built for every heartbeat and not sent.
    state: str
    reason: str
    instructions: list[Instruction]
    forget: list[TaskKey]
    #: Log bytes wanted from the node (`synergy logs`), and its tasks' throughput vs baseline.
    log_requests: list[LogRequest] = field(default_factory=list)
    progress: list[TaskProgress] = field(default_factory=list)


class NodeBook:
    def __init__(self, ctx: DaemonContext, jobs: JobBook, reconciler: Reconciler) -> None:
        self.ctx = ctx
        self.jobs = jobs
        self.reconciler = reconciler
        #: `synergy nodes loan / reclaim` (Lyra's capacity loaning).
        self.loans = LoanBook(ctx, jobs)

    # -- agent calls ----------------------------------------------------------------------------
    def register(self, incoming: NodeRecord, tasks: Sequence[ObservedTask]) -> NodeReply:
        ctx = self.ctx
        with ctx.lock:
            now = ctx.clock.now()
            old = ctx.store.node(incoming.id)
            node = incoming
            if old is not None:  # a cordon or drain outlives agent restarts
                self._check_takeover(old, incoming, now)
                node = replace(
                    incoming,
                    admin_state=old.admin_state,
                    admin_reason=old.admin_reason,
                    registered_at=old.registered_at,
                    pool=old.pool,
                    reclaim_deadline=old.reclaim_deadline,
                )
            else:
                node = replace(incoming, registered_at=now)
            if old is not None and old.gpu_type != node.gpu_type:
                # The machine's GPUs were swapped (or --gpu-type changed): jobs restricted to a
                # type see the new one from the next round on.
                event(ctx.log, "node.gpu_type_changed", level=logging.WARNING, node=node.id,
                      old=old.gpu_type, new=node.gpu_type)
            if node != old:
                ctx.store.save_nodes([node])
            was = ctx.live.nodes.get(node.id)
            ctx.live.nodes[node.id] = NodeLive(
                last_heartbeat=now, telemetry=was.telemetry if was else {}, tasks={t.key: t for t in tasks}
            )
            event(
                ctx.log,
                "node.registered",
                node=node.id,
                gpus=node.capacity.gpus,
                gpu_type=node.gpu_type,
                cpus=node.capacity.cpus,
                mem_gb=node.capacity.mem_gb,
                tasks=len(tasks),
                known=old is not None,
            )
            instructions, forget = self.reconciler.reconcile(node.id)
            return NodeReply(*self.state(node), instructions, forget)

    def _check_takeover(self, old: NodeRecord, incoming: NodeRecord, now: float) -> None:
        """Refuse a node id that another live agent instance holds; when that instance has
        timed out, treat its node as lost first (its tasks are unknown, so its jobs are
        requeued rather than launched a second time by the newcomer).

        A legacy record (no instance id) gives no protection, as the protocol says.
        """
        if not old.instance_id or incoming.instance_id == old.instance_id:
            return
        ctx = self.ctx
        live = ctx.live.nodes.get(old.id)
        # Not heard from since this daemon started: the persisted instance gets a full timeout.
        silent = now - (live.last_heartbeat if live is not None else ctx.started_at)
        timeout = ctx.node_timeout(now)
        if not (live is not None and live.lost) and silent <= timeout:
            event(ctx.log, "node.duplicate_refused", node=old.id, hostname=incoming.hostname, silent_s=round(silent, 1))
            raise AlreadyExists(
                f"node_id: node {old.id!r} is registered by another agent instance (host {old.hostname!r}) "
                f"that is alive, last heard {silent:.1f} s ago; stop that agent, or wait for it to miss "
                f"heartbeats for {timeout:g} s"
            )
        if live is None or not live.lost:
            self._lose(old.id, f"node {old.id} lost: its agent was replaced after {silent:.1f} s of silence")
        event(ctx.log, "node.taken_over", node=old.id, hostname=incoming.hostname)

    def heartbeat(
        self,
        node_id: str,
        telemetry: Mapping[str, Any],
        tasks: Sequence[ObservedTask],
        instance_id: str = "",
        log_chunks: Sequence[LogChunk] = (),
        not_ready: str = "",
    ) -> NodeReply:
        ctx = self.ctx
        with ctx.lock:
            node = ctx.store.node(node_id)
            if node is not None and instance_id != node.instance_id:
                event(ctx.log, "node.superseded", node=node_id)
                raise FailedPrecondition(
                    f"superseded: node {node_id!r} is now registered by another agent instance "
                    f"(host {node.hostname!r}); stop this agent's tasks and exit"
                )
            live = ctx.live.nodes.get(node_id)
            if node is None or live is None:
                raise NotFound(f"node_id: node {node_id!r} is not registered (call RegisterNode)")
            now = ctx.clock.now()
            if live.lost:
                event(ctx.log, "node.back", node=node_id)
            live.last_heartbeat, live.lost = now, False
            if not_ready != live.not_ready:
                event(ctx.log, "node.not_ready" if not_ready else "node.ready_again",
                      level=logging.WARNING if not_ready else logging.INFO, node=node_id, reason=not_ready)
                live.not_ready = not_ready
            live.telemetry = dict(telemetry)
            live.tasks = {t.key: t for t in tasks}
            self._gauges(node_id, live.telemetry, tasks)
            instructions, forget = self.reconciler.reconcile(node_id)
            logs = ctx.task_logs
            logs.receive(node_id, list(log_chunks))
            forget = [k for k in forget if not logs.holds_back(k, now)]
            exited = frozenset(t.key for t in tasks if t.phase == TaskPhase.EXITED)
            jobs = {t.key.job_id: ctx.store.job(t.key.job_id) for t in tasks}
            progress = ctx.progress.for_node(list(tasks), jobs, ctx.live.jobs)
            return NodeReply(*self.state(node), instructions, forget, logs.requests(node_id, now, exited), progress)

    def _gauges(self, node_id: str, telemetry: Mapping[str, Any], tasks: Sequence[ObservedTask]) -> None:
        """The node's /metrics gauges from its latest telemetry (absent figures are not set)."""
        m = self.ctx.metrics
        usage = telemetry.get("usage", {})
        m.node_tasks.labels(node_id).set(len(tasks))
        m.node_throttled_tasks.labels(node_id).set(sum(1 for t in tasks if t.throttle))
        m.node_cpu_cores.labels(node_id).set(float(usage.get("cpu_cores", 0.0)))
        m.node_rss_bytes.labels(node_id).set(float(usage.get("rss_bytes", 0)))
        for gauge, bw in ((m.node_mem_bandwidth, usage.get("mem_bandwidth")),
                          (m.node_mem_bandwidth_peak, telemetry.get("peak_mem_bandwidth"))):
            if bw:
                gauge.labels(node_id, bw.get("source", "")).set(float(bw.get("gb_per_s", 0.0)) * 1e9)

    # -- admin calls ----------------------------------------------------------------------------
    def get(self, node_id: str) -> NodeRecord:
        node = self.ctx.store.node(node_id)
        if node is None:
            raise NotFound(f"node_id: no node {node_id!r} is registered")
        return node

    def list(self) -> list[NodeView]:
        with self.ctx.lock:
            by_node = self._jobs_by_node()
            return [self.view(n, by_node.get(n.id, [])) for n in self.ctx.store.nodes()]

    def cordon(self, node_id: str, reason: str) -> NodeView:
        return self._set_admin(node_id, AdminState.CORDONED, reason or "cordoned")

    def resume(self, node_id: str, reason: str) -> NodeView:
        return self._set_admin(node_id, AdminState.READY, reason or "resumed")

    def drain(self, node_id: str, reason: str) -> NodeView:
        ctx = self.ctx
        with ctx.lock:
            view = self._set_admin(node_id, AdminState.DRAINING, reason or "drained")
            why = f"node {node_id} is draining: {reason or 'no reason given'}"
            changes = []
            for job in self._jobs_on(node_id):
                nxt = () if any(p.server_id == node_id for p in job.next_placements) else job.next_placements
                changes.append((job, self.jobs.request_stop(job, why, nxt)))
            if changes:
                ctx.save_jobs(changes)
            return self.view(view.record)

    def _set_admin(self, node_id: str, state: AdminState, reason: str) -> NodeView:
        ctx = self.ctx
        with ctx.lock:
            old = self.get(node_id)
            new = replace(old, admin_state=state, admin_reason=reason)
            if new != old:
                ctx.store.save_nodes([new])
                event(ctx.log, f"node.{state.value}", node=node_id, reason=reason)
            return self.view(new)

    # -- liveness -------------------------------------------------------------------------------
    def check_liveness(self) -> list[str]:
        """Mark nodes silent for longer than the node timeout as lost and requeue their jobs."""
        ctx = self.ctx
        lost: list[str] = []
        with ctx.lock:
            now = ctx.clock.now()
            for node in ctx.store.nodes():
                live = ctx.live.nodes.get(node.id)
                if live is None:  # not heard from since the daemon started: give it a full timeout
                    ctx.live.nodes[node.id] = NodeLive(last_heartbeat=now)
                    continue
                silent = now - live.last_heartbeat
                if live.lost or silent <= ctx.node_timeout(now):
                    continue
                lost.append(node.id)
                event(ctx.log, "node.lost", node=node.id, silent_s=round(silent, 1))
                self._lose(node.id, f"node {node.id} lost: no heartbeat for {silent:.1f} s")
        return lost

    def lose(self, node_id: str, why: str) -> None:
        """A backend says the node is gone (Slurm: down, or a job failed with its node): lost
        now rather than after the node timeout, its jobs requeued. It is back at its next heartbeat."""
        with self.ctx.lock:
            if self.ctx.store.node(node_id) is None:
                return
            event(self.ctx.log, "node.lost", node=node_id, reason=why)
            self._lose(node_id, why)

    def _lose(self, node_id: str, why: str) -> None:
        """The node's observed tasks are unknown from now on: requeue its jobs (caller holds the lock)."""
        ctx = self.ctx
        live = ctx.live.nodes.setdefault(node_id, NodeLive(last_heartbeat=ctx.started_at))
        live.lost, live.tasks = True, {}
        changes = [(j, self.jobs.preempt(j, why)) for j in self._jobs_on(node_id)]
        if changes:
            ctx.save_jobs(changes)

    # -- views ----------------------------------------------------------------------------------
    def state(self, node: NodeRecord) -> tuple[str, str]:
        live = self.ctx.live.nodes.get(node.id)
        if live is not None and live.lost:
            since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(live.last_heartbeat))
            return "lost", f"no heartbeat since {since}"
        admin = self.admin_state(node)
        if live is not None and admin != node.admin_state:
            return admin.value, f"not ready: {live.not_ready}"
        return node.admin_state.value, node.admin_reason

    def admin_state(self, node: NodeRecord) -> AdminState:
        """The admin state the core sees: a node whose agent says it is not ready takes no new
        tasks, as if cordoned (live only: it clears with the agent's next report)."""
        live = self.ctx.live.nodes.get(node.id)
        if live is not None and live.not_ready and node.admin_state == AdminState.READY:
            return AdminState.CORDONED
        return node.admin_state

    def last_heard(self, node_id: str) -> float:
        """When the node last heartbeated (this daemon's start when it has not yet)."""
        live = self.ctx.live.nodes.get(node_id)
        return live.last_heartbeat if live is not None else self.ctx.started_at

    def view(self, node: NodeRecord, jobs: list[JobRecord] | None = None) -> NodeView:
        """The node with its allocation; `jobs` (those placed on it) saves a scan when known."""
        jobs = self._jobs_on(node.id) if jobs is None else jobs
        allocated = Resources()
        for j in jobs:
            allocated = allocated + j.held_on(node.id)  # a packed pair's GPUs once
        state, reason = self.state(node)
        live = self.ctx.live.nodes.get(node.id)
        return NodeView(
            node,
            state,
            reason,
            allocated,
            tuple(j.id for j in jobs),
            live.last_heartbeat if live else 0.0,
            live.telemetry if live else {},
            sum(1 for t in live.tasks.values() if t.throttle) if live else 0,
            tuple(sorted(f"{t.key.job_id}={t.backend_job}" for t in live.tasks.values()
                         if t.backend_job and t.phase != TaskPhase.EXITED)) if live else (),
        )

    def _jobs_on(self, node_id: str) -> list[JobRecord]:
        return self.ctx.store.running_on(node_id)

    def _jobs_by_node(self) -> dict[str, list[JobRecord]]:
        """RUNNING jobs per node they hold a share on, in one pass over the active jobs."""
        out: dict[str, list[JobRecord]] = {}
        for j in self.ctx.store.active_jobs():
            if j.placed:
                for node_id in dict.fromkeys(p.server_id for p in j.placements):
                    out.setdefault(node_id, []).append(j)
        return out
