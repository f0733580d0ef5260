"""Profiling leases: where a job with no known profile measures its own sensitivity.

Synergy §3.1: a job arriving without a profile is run briefly on one node at full memory
while the iterator measures its throughput at the CPU counts its search chooses. Here:

* a PROFILING job without a placement (`ProfileBook.needs_profiling` kept it out of the queue)
  is placed by `place()` (a periodic event, every second, so ahead of the policy's queue and
  without waiting for a round) where the core's `placement/profiling.place_leases` says:
  only in room no work holds (running jobs, moves under way, and the round decided but not
  yet applied are taken out first), spread over the nodes, a node's free CPUs split between
  the leases placed on it together; whole CPUs, up to `MAX_PROFILE_CPUS`. The room of the
  jobs queued for a round is kept for them, except from a job whose stand-in the latest
  round placed (`RoundLoop.granted`: the policy ranked it above those queued jobs;
  `place_after_round`);
* the job stays in state PROFILING with that placement: a real placed task, which the
  reconciler launches, RESIZEs and stops, lease expiry and node loss requeue (into PROFILING
  again: `JobBook.preempt`), like a RUNNING one;
* each point is asked for on a renewal (`LeaseBook.renew`, `profile_cpus`): the placement's
  CPUs change, the reconciler RESIZEs the task's cpuset, and the reply's `in_force` says when
  the agent has applied it;
* `ReportProfile` ends it (`LeaseBook.report_profile`): the profile is stored as "profiled"
  (and kept in the profile store for later jobs of the same workload) and the job runs on,
  RUNNING on the same placement, without a restart; the next round sets its allocation;
* a waiting job whose workload was profiled meanwhile (the profile store) queues with that
  profile instead of taking a lease.

Rounds do not see profiling jobs as jobs; `held_by_profiling` takes their shares out of the
nodes the core is given, so the core never hands those CPUs to someone else; and a lease
never takes room the round decided `plan_lead` ahead gave a job. Should both still ask for
the same room (a node shrank), the reconciler defers that launch until the room is free
(`job.launch_deferred`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Iterable, Mapping

from synergy.scheduler.daemon.context import DaemonContext
from synergy.scheduler.daemon.jobs import JobBook, fmt_placements
from synergy.scheduler.daemon.logs import event
from synergy.scheduler.daemon.records import JobRecord, JobState, held
from synergy.scheduler.model import Cluster, Placement, Resources, RoundInput
from synergy.scheduler.placement.filters import DEFAULT_FILTERS, Admit, run_filters
from synergy.scheduler.placement.profiling import ProfilingAsk, place_after_round, sub_core


def held_by_profiling(jobs: Iterable[JobRecord]) -> dict[str, Resources]:
    """Node id -> resources held by profiling leases among `jobs`: each lease's whole room
    (`profile_max_cpus`), not only its current point, so that the CPUs a lower point leaves
    idle are not handed out and then wanted back by a later, higher point (a re-checked
    half core, or the optimistic search's upper half)."""
    out: dict[str, Resources] = {}
    for j in jobs:
        if j.profiling_lease:
            for p in j.placements:
                r = p.resources
                out[p.server_id] = out.get(p.server_id, Resources()) + Resources(
                    r.gpus, max(r.cpus, j.profile_max_cpus), r.mem_gb)
    return out


def waits_for_lease(job: JobRecord) -> bool:
    """A job in PROFILING that holds no lease yet (the round sees it at its share, rounds.py)."""
    return job.state == JobState.PROFILING and not job.placements and not job.spec.cpu_only


class ProfilingBook:
    def __init__(
        self,
        ctx: DaemonContext,
        jobs: JobBook,
        cluster: Callable[[], Cluster],
        planned: Callable[[], Mapping[int, tuple[Placement, ...]]] = dict,
        granted: Callable[[], frozenset[int]] = frozenset,
    ) -> None:
        self.ctx = ctx
        self.jobs = jobs
        #: The nodes as the round's core would see them now (RoundLoop.snapshot's cluster),
        #: profiling shares already taken out. Called with the lock held.
        self.cluster = cluster
        #: The allocations of the round decided and not applied yet (RoundLoop.pending):
        #: a lease must not take the room a job was just placed in.
        self.planned = planned
        #: The jobs waiting for a lease whose stand-ins the latest round placed
        #: (RoundLoop.granted): their leases go ahead of the queued jobs' shares.
        self.granted = granted

    def place(self) -> int:
        """Place waiting PROFILING jobs where they fit now (the core's `place_after_round`);
        returns how many were placed."""
        ctx = self.ctx
        with ctx.lock:
            waiting = sorted((j for j in ctx.store.active_jobs() if waits_for_lease(j)),
                             key=lambda j: (j.submitted_at, j.id))
            if not waiting:
                return 0
            now = ctx.clock.now()
            waiting = self._answered_by_store(waiting, now)
            if not waiting:
                return 0
            cluster = self.cluster()
            inp = RoundInput(now, cluster, [], {}, ctx.config.round_s, ctx.heartbeat_window(now))
            open_nodes = Cluster(tuple(s for s in cluster.servers if run_filters(DEFAULT_FILTERS, s, inp).admit == Admit.ANY))
            asks = [ProfilingAsk(j.id, j.spec.gpus, frozenset(j.spec.gpu_types)) for j in waiting]
            # Profiled jobs waiting for a round keep their proportional share (in the pending
            # plan's jobs it is counted in `_held` already).
            planned = self.planned()
            queued = [cluster.proportional_share(j.spec.gpus)
                      for j in sorted(ctx.store.active_jobs(), key=lambda j: (j.submitted_at, j.id))
                      if j.state == JobState.QUEUED and not j.spec.cpu_only and j.id not in planned]
            fine = sub_core(cluster)  # the share is the whole cluster's (`share_basis`)
            granted = self.granted()
            leases = place_after_round(asks, granted, open_nodes, self._held(), queued=queued, sub_core=fine)
            changes = []
            for job in waiting:
                placement = leases.get(job.id)
                if placement is None:
                    continue
                new = self.jobs.launch(
                    job,
                    (placement,),
                    job.round_index,
                    f"profiling lease ({job.spec.profile_search} search) on {fmt_placements((placement,))}",
                    state=JobState.PROFILING,
                    profile_max_cpus=placement.cpus,
                    profile_sub_core=fine,
                )
                # granted: the round ranked it above queued jobs and left it this room.
                event(ctx.log, "job.profiling", job=job.id, placement=fmt_placements((placement,)),
                      granted=job.id in granted)
                changes.append((job, new))
            if changes:
                ctx.save_jobs(changes)
            return len(changes)

    def _answered_by_store(self, waiting: list[JobRecord], now: float) -> list[JobRecord]:
        """Queue the waiting jobs whose workload another job has been profiled for meanwhile
        (the profile store, profile_store.py: two jobs of one sweep submitted together profile
        once); returns the others, still to profile."""
        ctx = self.ctx
        changes, rest = [], []
        for job in waiting:
            stored = ctx.profiles.stored(job)
            if stored is None:
                rest.append(job)
                continue
            new = job.to(JobState.QUEUED, f"profile: {stored.source}; waiting for the next round", now,
                         profile_source=stored.source)
            event(ctx.log, "job.profile_stored", job=job.id, profiled_with=stored.job_id)
            changes.append((job, new))
        if changes:
            ctx.save_jobs(changes)
        return rest

    def _held(self) -> dict[str, Resources]:
        """Per node, what work holds or is about to hold there: running jobs' placements, the
        allocation a moving one relaunches with, and the pending round's allocations (each
        job counted at the most of these per node). Profiling shares are already out of
        `self.cluster()`."""
        planned = self.planned()
        used: dict[str, Resources] = {}
        for j in self.ctx.store.active_jobs():
            if j.profiling_lease:
                continue
            shares = [(j.placements, j.packed_with), (j.next_placements, j.next_packed_with)]
            if j.id in planned:
                shares.append((planned[j.id], 0))
            for node_id in {p.server_id for placements, _ in shares for p in placements}:
                most = Resources()
                for placements, packed in shares:
                    r = held(placements, packed, node_id)
                    most = Resources(max(most.gpus, r.gpus), max(most.cpus, r.cpus), max(most.mem_gb, r.mem_gb))
                used[node_id] = used.get(node_id, Resources()) + most
        return used


def with_point(job: JobRecord, cpus: float) -> JobRecord:
    """The profiling job with its (single) placement's CPUs set to `cpus`."""
    (p,) = job.placements
    return replace(job, placements=(replace(p, cpus=float(cpus)),))
