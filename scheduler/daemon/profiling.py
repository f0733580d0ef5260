"""Profiling leases: where a job with no known profile measures its own sensitivity.

Synergy §3.1: a job arriving without a profile is run briefly on one node at full memory
while the iterator measures its throughput at the CPU counts its search chooses. Here:

* a PROFILING job without a placement (`ProfileBook.needs_profiling` kept it out of the queue)
  is placed by `place()` (a periodic event, every second, so ahead of the policy's queue and
  without waiting for a round) on the first node the core's filters admit that has its GPUs
  free, with as many of that node's free CPUs as the search may ask for (all of them, up to
  `MAX_PROFILE_CPUS`) and all of its free memory;
* the job stays in state PROFILING with that placement: a real placed task, which the
  reconciler launches, RESIZEs and stops, lease expiry and node loss requeue (into PROFILING
  again: `JobBook.preempt`), like a RUNNING one;
* each point is asked for on a renewal (`LeaseBook.renew`, `profile_cpus`): the placement's
  CPUs change, the reconciler RESIZEs the task's cpuset, and the reply's `in_force` says when
  the agent has applied it;
* `ReportProfile` ends it (`LeaseBook.report_profile`): the profile is stored as "profiled" and
  the job stops through the ordinary lease path, then queues with its best-case demand.

Rounds do not see profiling jobs as jobs; `held_by_profiling` takes their shares out of the
nodes the core is given, so the core never hands those CPUs to someone else. A round decided
(`plan_lead` ahead) before a profiling placement may still ask for the same room: the
reconciler then defers that launch until the room is free (`job.launch_deferred`).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Callable, Iterable, Mapping

from synergy.scheduler.daemon.context import DaemonContext
from synergy.scheduler.daemon.jobs import JobBook, fmt_placements
from synergy.scheduler.daemon.logs import event
from synergy.scheduler.daemon.records import JobRecord, JobState, held
from synergy.scheduler.model import Cluster, Placement, Resources, RoundInput
from synergy.scheduler.placement.filters import DEFAULT_FILTERS, Admit, run_filters

#: The most CPUs a profiling placement holds (the paper profiles up to 24 CPUs per job).
MAX_PROFILE_CPUS = 24


def held_by_profiling(jobs: Iterable[JobRecord]) -> dict[str, Resources]:
    """Node id -> resources held by profiling leases among `jobs`."""
    out: dict[str, Resources] = {}
    for j in jobs:
        if j.profiling_lease:
            for p in j.placements:
                out[p.server_id] = out.get(p.server_id, Resources()) + p.resources
    return out


class ProfilingBook:
    def __init__(self, ctx: DaemonContext, jobs: JobBook, cluster: Callable[[], Cluster]) -> None:
        self.ctx = ctx
        self.jobs = jobs
        #: The nodes as the round's core would see them now (RoundLoop.snapshot's cluster),
        #: profiling shares already taken out. Called with the lock held.
        self.cluster = cluster

    def place(self) -> int:
        """Place waiting PROFILING jobs where they fit now; returns how many were placed."""
        ctx = self.ctx
        with ctx.lock:
            waiting = [j for j in ctx.store.active_jobs() if j.state == JobState.PROFILING and not j.placements]
            if not waiting:
                return 0
            cluster = self.cluster()
            now = ctx.clock.now()
            inp = RoundInput(now, cluster, [], {}, ctx.config.round_s, ctx.config.heartbeat_window)
            free = self._free(cluster, inp)
            types = {s.id: s.gpu_type for s in cluster.servers}
            changes = []
            for job in waiting:
                placement = self._choose(job, free, types)
                if placement is None:
                    continue
                free[placement.server_id] = free[placement.server_id] - placement.resources
                new = self.jobs.launch(
                    job,
                    (placement,),
                    job.round_index,
                    f"profiling lease ({job.spec.profile_search} search) on {fmt_placements((placement,))}",
                    state=JobState.PROFILING,
                    profile_max_cpus=placement.cpus,
                )
                event(ctx.log, "job.profiling", job=job.id, placement=fmt_placements((placement,)))
                changes.append((job, new))
            if changes:
                ctx.save_jobs(changes)
            return len(changes)

    def _free(self, cluster: Cluster, inp: RoundInput) -> dict[str, Resources]:
        """Free resources per node the filters admit new work on (running and relaunching
        jobs' shares taken out; profiling shares already are, by `cluster`)."""
        used: dict[str, Resources] = {}
        for j in self.ctx.store.active_jobs():
            if j.state != JobState.RUNNING:
                continue
            for placements, packed in ((j.placements, j.packed_with), (j.next_placements, j.next_packed_with)):
                for node_id in {p.server_id for p in placements}:
                    used[node_id] = used.get(node_id, Resources()) + held(placements, packed, node_id)
        return {
            s.id: s.capacity - used.get(s.id, Resources())
            for s in cluster.servers
            if run_filters(DEFAULT_FILTERS, s, inp).admit == Admit.ANY
        }

    @staticmethod
    def _choose(job: JobRecord, free: dict[str, Resources], types: Mapping[str, str]) -> Placement | None:
        """The node with the most free CPUs among those with the job's GPUs free, of a GPU
        type the job accepts (a profile measured on another GPU would mislead the rounds)."""
        best: Placement | None = None
        accepted = job.spec.gpu_types
        for node_id in sorted(free):
            if accepted and types.get(node_id, "") not in accepted:
                continue
            room = free[node_id]
            cpus = min(MAX_PROFILE_CPUS, math.floor(room.cpus + 1e-9))
            if room.gpus + 1e-9 < job.spec.gpus or cpus < 1 or room.mem_gb <= 0:
                continue
            if best is None or cpus > best.cpus:
                # GB in 3-decimal steps, rounded down (what the agent can hold: RegisterNode's unit)
                best = Placement(node_id, job.spec.gpus, float(cpus), math.floor(room.mem_gb * 1000) / 1000)
        return best


def with_point(job: JobRecord, cpus: int) -> JobRecord:
    """The profiling job with its (single) placement's CPUs set to `cpus`."""
    (p,) = job.placements
    return replace(job, placements=(replace(p, cpus=float(cpus)),))
