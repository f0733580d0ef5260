"""A round with nothing new to place keeps last round's layout (issue 17's stress, issue 14's
"no churn").

The mechanisms plan every round from scratch, and the layout step (relabelling, `stay_put`,
`stay_on_surplus`, placement/migration.py and surplus.py) maps the plan back onto where jobs
ran. That step keeps a job in place only where its share in the new plan fits there, and the
share it ran with is not always the plan's: the last layout may have trimmed it (another job
went back beside it) or topped it up (leftovers). So a round that places exactly the jobs that
run already, with nothing arrived and nothing started, could still swap jobs between nodes
for a share the next layout trims again, round after round: after a burst of arrivals at
10,000 jobs on 40-GPU nodes, 100 to 2,400 restarts a round for 20 rounds
(`benchmarks/daemon_load.py`'s 1 s stress), and 18 of 100 small traces in
tests/test_core_churn.py.

Such a round has nothing to place: last round laid this set of jobs out. `as_before` keeps
every job on the servers and GPUs it runs on with the plan's own share there when those
shares fit (the mechanism decides what each job holds, only where stays), else, with a
mechanism that hands out leftovers, with its last allocation cut to the plan's share (what
`taken_back` does to any layout; leftovers are handed out again after). A job that ended
leaves its room to its neighbours as leftovers; a layout from scratch might have moved a job
there for more, which a restart would pay for. Pure, like the rest of the core.
"""
from __future__ import annotations

from typing import Mapping

from synergy.scheduler.mechanisms.leftover import taken_back
from synergy.scheduler.model import Allocation, Cluster, Job, Placement, Resources
from synergy.scheduler.placement.surplus import keeps_guarantee


def as_before(demands: Mapping[int, Allocation], previous: Mapping[int, Allocation], cluster: Cluster,
              jobs: Mapping[int, Job], leftovers: bool) -> dict[int, Allocation] | None:
    """The plan `demands` (on `cluster`) laid out exactly as `previous`, when it places exactly
    the jobs of `previous` on `cluster` that are still among `jobs`, each on as many GPUs of
    the same type: at the plan's shares when they fit there, else (`leftovers`) at last
    round's allocations cut to them. None when a job is new or left out, a job's GPUs or
    servers changed (a packed pair, a closed server), or neither form fits every server and
    keeps every job at its GPU-proportional speed: the round is then laid out afresh."""
    if not previous or len(demands) > len(previous) or not demands:
        return None
    caps = {s.id: s.capacity for s in cluster.servers}
    for jid, demand in demands.items():
        prev = previous.get(jid)
        if prev is None or prev.packed_with is not None or demand.packed_with is not None or not prev.placements:
            return None
        if any(p.server_id not in caps for p in prev.placements) or prev.total.gpus != demand.total.gpus:
            return None
        if cluster.typed and {cluster.gpu_type_of(p.server_id) for p in prev.placements} != {
                cluster.gpu_type_of(p.server_id) for p in demand.placements}:
            return None
    for jid, prev in previous.items():  # none of last round's jobs here is left out
        if jid not in demands and jid in jobs and any(p.server_id in caps for p in prev.placements):
            return None
    exact = {jid: _at_demand(previous[jid], demand) for jid, demand in demands.items()}
    if _fits(exact, caps) and _guaranteed(exact, jobs, cluster):
        return exact
    if not leftovers:
        return None
    cut = taken_back({jid: previous[jid] for jid in demands}, demands)
    return cut if _fits(cut, caps) and _guaranteed(cut, jobs, cluster) else None


def _at_demand(prev: Allocation, demand: Allocation) -> Allocation:
    """`demand`'s CPUs and memory per GPU on `prev`'s pieces (`prev` itself when the same)."""
    if len(prev.placements) == 1 == len(demand.placements):
        p, d = prev.placements[0], demand.placements[0]
        if p.gpus == d.gpus and (p.cpus, p.mem_gb) == (d.cpus, d.mem_gb):
            return prev
    c, m = demand.per_gpu
    return demand.with_placements(tuple(Placement(p.server_id, p.gpus, c * p.gpus, m * p.gpus)
                                        for p in prev.placements))


def _fits(allocations: Mapping[int, Allocation], caps: Mapping[str, Resources]) -> bool:
    load: dict[str, Resources] = {}
    for alloc in allocations.values():
        for sid, res in alloc.held:
            load[sid] = load[sid] + res if sid in load else res
    return all(res.fits_in(caps[sid]) for sid, res in load.items())


def _guaranteed(allocations: Mapping[int, Allocation], jobs: Mapping[int, Job], cluster: Cluster) -> bool:
    for jid, alloc in allocations.items():
        job = jobs.get(jid)
        gpu_type = cluster.gpu_type_of(alloc.placements[0].server_id) if cluster.typed else ""
        if job is None or not keeps_guarantee(job, cluster, gpu_type, *alloc.per_gpu):
            return False
    return True
