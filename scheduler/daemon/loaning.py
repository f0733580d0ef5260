"""Lyra's capacity loaning in the daemon: `synergy nodes loan` and `synergy nodes reclaim`.

The inference cluster's operator (or its scheduler, through the admin API) loans idle
inference nodes to training and reclaims a number of them when its load rises. A loaned
node is a LOANED server to the core, which gives it to loanable jobs only. A reclaim picks
the nodes with `plan_reclaim` (fewest preempted jobs), moves them to the INFERENCE pool at
once (no new work), and asks their jobs to stop through the normal lease path (STOP,
checkpoint, exit 75). A preempted job is requeued; an elastic job the plan scales in takes
the rescale path instead: it is relaunched at once at its new size on the nodes it keeps
(`shrunk_allocation`), as a round's rescale would. A job still on a returned node at the
deadline is preempted (and a scaled-in one relaunched all the same). The pool and the
deadline are persisted, so a daemon restart finishes a reclaim under way.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Callable, Mapping, Sequence

from synergy.scheduler.daemon.context import DaemonContext
from synergy.scheduler.daemon.errors import InvalidArgument, NotFound
from synergy.scheduler.daemon.jobs import JobBook, fmt_placements
from synergy.scheduler.daemon.logs import event
from synergy.scheduler.daemon.records import JobRecord, NodeRecord
from synergy.scheduler.loaning.reclaim import plan_reclaim, shrunk_allocation
from synergy.scheduler.model import Allocation, Job, Server, ServerPool

#: The round loop's JobRecord -> core Job (`RoundLoop.core_jobs`): what tells a reclaim
#: which jobs are elastic and their ranges, exactly as the rounds size them.
CoreJobs = Callable[[Sequence[JobRecord]], Mapping[int, Job]]


@dataclass(frozen=True)
class Reclaimed:
    nodes: tuple[NodeRecord, ...]
    preempted: tuple[int, ...]
    #: Elastic jobs scaled in instead: job id -> the GPUs it relaunches at.
    shrunk: Mapping[int, int] = field(default_factory=dict)


class LoanBook:
    def __init__(self, ctx: DaemonContext, jobs: JobBook, core_jobs: CoreJobs | None = None) -> None:
        self.ctx = ctx
        self.jobs = jobs
        #: None: no job is taken for elastic, every job on a returned node is preempted.
        self.core_jobs = core_jobs

    def loan(self, node_ids: Sequence[str]) -> list[NodeRecord]:
        """Put the nodes in the LOANED pool (all or nothing; loaning a loaned node is a no-op)."""
        if not node_ids:
            raise InvalidArgument("node_ids", "name at least one node to loan")
        seen: set[str] = set()
        for i, nid in enumerate(node_ids):
            if nid in seen:
                raise InvalidArgument(f"node_ids[{i}]", f"node {nid!r} is named twice")
            seen.add(nid)
        ctx = self.ctx
        with ctx.lock:
            old = []
            for i, nid in enumerate(node_ids):
                node = ctx.store.node(nid)
                if node is None:
                    raise NotFound(f"node_ids[{i}]: no node {nid!r} is registered")
                old.append(node)
            new = [replace(n, pool=ServerPool.LOANED, reclaim_deadline=0.0) for n in old]
            changed = [n for n, o in zip(new, old) if n != o]
            if changed:
                ctx.store.save_nodes(changed)
                for n in changed:
                    event(ctx.log, "node.loaned", node=n.id)
            return new

    def reclaim(self, count: int, deadline_s: float, reason: str) -> Reclaimed:
        """Hand `count` loaned nodes back, preempting the fewest jobs (Lyra §4) and scaling
        in the elastic ones that keep their minimum on other nodes."""
        if not math.isfinite(deadline_s) or deadline_s < 0:
            raise InvalidArgument("deadline_s", f"must be a number of seconds >= 0, got {deadline_s}")
        ctx = self.ctx
        with ctx.lock:
            loaned = [n for n in ctx.store.nodes() if n.pool == ServerPool.LOANED]
            if not 1 <= count <= len(loaned):
                raise InvalidArgument("count", f"must be 1 to the {len(loaned)} node(s) on loan, got {count}")
            now = ctx.clock.now()
            placed = [j for j in ctx.store.active_jobs() if j.placed]
            allocations = {
                j.id: Allocation(j.id, tuple(j.placements), packed_with=j.packed_with or None) for j in placed
            }
            servers = [Server(n.id, n.allocatable, pool=ServerPool.LOANED) for n in loaned]
            core = self.core_jobs(placed) if self.core_jobs is not None else None
            plan = plan_reclaim(servers, allocations, count, jobs=core)
            back = set(plan.servers)
            deadline = now + (deadline_s or ctx.config.stop_timeout)
            nodes = [replace(n, pool=ServerPool.INFERENCE, reclaim_deadline=deadline) for n in loaned if n.id in back]
            ctx.store.save_nodes(nodes)
            why = f"node reclaimed by inference: {reason or 'no reason given'}"
            changes = []
            for job in placed:
                if job.id in plan.shrunk:
                    # The rescale path of a round (rounds.py): a migration to the kept nodes.
                    kept = shrunk_allocation(allocations[job.id], back, plan.shrunk[job.id]).placements
                    moving = replace(job, migrations=job.migrations + 1)
                    note = f"{why}; scaling in to {plan.shrunk[job.id]} GPUs on {fmt_placements(kept)}"
                    changes.append((job, self.jobs.request_stop(moving, note, kept)))
                elif job.id in plan.preempted:
                    nxt = () if any(p.server_id in back for p in job.next_placements) else job.next_placements
                    changes.append((job, self.jobs.request_stop(job, why, nxt)))
            if changes:
                ctx.save_jobs(changes)
            event(ctx.log, "nodes.reclaimed", nodes=sorted(back), preempted=sorted(plan.preempted),
                  shrunk={str(j): g for j, g in sorted(plan.shrunk.items())}, deadline_s=round(deadline - now, 1))
            return Reclaimed(tuple(nodes), tuple(sorted(plan.preempted)), dict(sorted(plan.shrunk.items())))

    def enforce(self) -> int:
        """Preempt jobs still on a reclaimed node past its deadline; close finished reclaims."""
        ctx = self.ctx
        with ctx.lock:
            now = ctx.clock.now()
            pending = [n for n in ctx.store.nodes() if n.pool == ServerPool.INFERENCE and n.reclaim_deadline > 0]
            changes, done = [], []
            for node in pending:
                on = ctx.store.running_on(node.id)
                if not on:
                    done.append(replace(node, reclaim_deadline=0.0))
                    event(ctx.log, "node.reclaim_done", node=node.id)
                elif now > node.reclaim_deadline:
                    why = f"node {node.id} reclaimed by inference: did not stop within the reclaim deadline"
                    changes.extend((j, self.jobs.preempt(j, why)) for j in on)
            if changes:
                ctx.save_jobs(changes)
            if done:
                ctx.store.save_nodes(done)
            return len(changes)

