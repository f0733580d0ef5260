"""A round keeps last round's layout: running jobs stay where they run, arrivals take the room
they leave (issue 17's stress, issue 14's "no churn").

The mechanisms plan every round from scratch, and the layout step (relabelling, `stay_put`,
`stay_on_surplus`, placement/migration.py and surplus.py) maps the plan back onto where jobs
ran. That step keeps a job in place only where its share in the new plan fits there, and the
share it ran with is not always the plan's: the last layout may have trimmed it (another job
went back beside it) or topped it up (leftovers). So a round that places exactly the jobs that
run already, with nothing arrived and nothing started, could still swap jobs between nodes
for a share the next layout trims again, round after round: after a burst of arrivals at
10,000 jobs on 40-GPU nodes, 100 to 2,400 restarts a round for 20 rounds
(`benchmarks/daemon_load.py`'s 1 s stress), and 18 of 100 small traces in
tests/test_core_churn.py. A round with arrivals had the same flaw at a smaller scale: laid
out afresh, it moved 83-392 running jobs a round at a quarter of that size (docs/daemon.md).

Such a round has nothing to move: last round laid its running jobs out. `as_before` keeps
every running job on the servers and GPUs it runs on with the plan's own share there when
those shares fit (the mechanism decides what each job holds, only where stays), else, with a
mechanism that hands out leftovers, with its last allocation cut to the plan's share (what
`taken_back` does to any layout; leftovers are handed out again after). Each job the plan
starts goes where the plan put it when that room is still free beside the kept jobs, else to
the single server of its GPU type that it fills best, at the plan's share. Every job then
holds exactly what the plan gives it (or its last allocation cut to that), so the round
loses no speed the mechanism promised; only where the plan's starts sit differs. When they
do not all fit, or a running job's place changed (left out, resized, packed, its server
closed), the round is laid out afresh. A job that ended leaves its room to its neighbours as
leftovers; a layout from scratch might have moved a job there for more, which a restart
would pay for. Pure, like the rest of the core.
"""
from __future__ import annotations

from typing import Mapping

from synergy.scheduler.mechanisms.leftover import taken_back
from synergy.scheduler.model import EPS, Allocation, Cluster, Job, Placement, Resources
from synergy.scheduler.placement.surplus import keeps_guarantee


def as_before(demands: Mapping[int, Allocation], previous: Mapping[int, Allocation], cluster: Cluster,
              jobs: Mapping[int, Job], leftovers: bool) -> dict[int, Allocation] | None:
    """The plan `demands` (on `cluster`) with every job of `previous` laid out exactly as
    there and every other job in the room they leave, when the plan keeps every job of
    `previous` on `cluster` that is still among `jobs`, each on as many GPUs of the same type:
    running jobs at the plan's shares when they fit there, else (`leftovers`) at last round's
    allocations cut to them; starting ones as `_placed_in` puts them. None when no job runs
    on, a running job is left out, its GPUs or servers changed (a packed pair, a closed
    server), a starting job is packed or finds no room, or a job would run below its
    GPU-proportional speed: the round is then laid out afresh."""
    if not previous or not demands:
        return None
    caps = {s.id: s.capacity for s in cluster.servers}
    typed = cluster.typed
    running: dict[int, Allocation] = {}
    exact: dict[int, Allocation] = {}  # the running jobs at the plan's shares where they run
    starting: dict[int, Allocation] = {}
    for jid, demand in demands.items():
        prev = previous.get(jid)
        if demand.packed_with is not None:
            return None
        if prev is None or not prev.placements:
            starting[jid] = demand
            continue
        if prev.packed_with is not None:
            return None
        pp, dp = prev.placements, demand.placements
        if len(pp) == 1 == len(dp):  # most jobs: the checks below, on one piece
            p, d = pp[0], dp[0]
            if p.gpus != d.gpus or p.server_id not in caps or (
                    typed and cluster.gpu_type_of(p.server_id) != cluster.gpu_type_of(d.server_id)):
                return None
            running[jid] = demand
            exact[jid] = _at_demand(prev, demand)
            continue
        if prev.total.gpus != demand.total.gpus:
            return None
        for p in prev.placements:
            if p.server_id not in caps:
                return None
        if typed and {cluster.gpu_type_of(p.server_id) for p in prev.placements} != {
                cluster.gpu_type_of(p.server_id) for p in demand.placements}:
            return None
        running[jid] = demand
        exact[jid] = _at_demand(prev, demand)
    if not running:
        return None
    if len(previous) > len(running):  # else every job of last round runs on in the plan
        for jid, prev in previous.items():  # none of last round's jobs here is left out
            if jid not in demands and jid in jobs and any(p.server_id in caps for p in prev.placements):
                return None
    laid = _with_starts(exact, starting, caps, cluster, jobs)
    if laid is None and leftovers:
        cut = taken_back({jid: previous[jid] for jid in running}, running)
        laid = _with_starts(cut, starting, caps, cluster, jobs)
    if laid is None:
        return None
    return {jid: laid[jid] for jid in demands}


def _with_starts(kept: dict[int, Allocation], starting: Mapping[int, Allocation], caps: Mapping[str, Resources],
                 cluster: Cluster, jobs: Mapping[int, Job]) -> dict[int, Allocation] | None:
    """`kept` and the `starting` jobs placed in the room it leaves, when all fit and every
    job keeps its GPU-proportional speed; else None."""
    free = _room(kept, caps)
    if free is None or not _guaranteed(kept, jobs, cluster):
        return None
    if not starting:
        return kept
    placed = _placed_in(starting, free, cluster)
    if placed is None or not _guaranteed(placed, jobs, cluster):
        return None
    return {**kept, **placed}


def _placed_in(starting: Mapping[int, Allocation], free: dict[str, Resources],
               cluster: Cluster) -> dict[int, Allocation] | None:
    """Each starting job where the plan put it when that room is still `free` (in the plan's
    order), then each of the others whole on the server of its GPU type it fills best (fewest
    GPUs, then CPUs, left; the cluster's order breaks ties), at the plan's share: None when
    one finds no room. `free` is drawn down."""
    out: dict[int, Allocation] = {}
    homeless: list[tuple[int, Allocation]] = []
    for jid, demand in starting.items():
        if all(p.resources.fits_in(free[p.server_id]) if p.server_id in free else False
               for p in demand.placements) and _distinct(demand):
            for p in demand.placements:
                free[p.server_id] = free[p.server_id] - p.resources
            out[jid] = demand
        else:
            homeless.append((jid, demand))
    order = {s.id: k for k, s in enumerate(cluster.servers)}
    for jid, demand in homeless:
        need = demand.total
        gpu_type = cluster.gpu_type_of(demand.placements[0].server_id) if cluster.typed else ""
        fits = [(room.gpus - need.gpus, room.cpus - need.cpus, order[sid], sid) for sid, room in free.items()
                if need.fits_in(room) and (not cluster.typed or cluster.gpu_type_of(sid) == gpu_type)]
        if not fits:
            return None
        sid = min(fits)[3]
        free[sid] = free[sid] - need
        out[jid] = demand.with_placements((Placement(sid, int(need.gpus), need.cpus, need.mem_gb),))
    return {jid: out[jid] for jid in starting}


def _distinct(demand: Allocation) -> bool:
    """No two pieces on one server (checked piece by piece against what is free)."""
    return len({p.server_id for p in demand.placements}) == len(demand.placements)


def _at_demand(prev: Allocation, demand: Allocation) -> Allocation:
    """`demand`'s CPUs and memory per GPU on `prev`'s pieces (`prev` itself when the same)."""
    if len(prev.placements) == 1 == len(demand.placements):
        p, d = prev.placements[0], demand.placements[0]
        if p.gpus == d.gpus and (p.cpus, p.mem_gb) == (d.cpus, d.mem_gb):
            return prev
    c, m = demand.per_gpu
    return demand.with_placements(tuple(Placement(p.server_id, p.gpus, c * p.gpus, m * p.gpus)
                                        for p in prev.placements))


def _room(allocations: Mapping[int, Allocation], caps: Mapping[str, Resources]) -> dict[str, Resources] | None:
    """What `allocations` leave free per server, or None when they do not fit.

    Summed in plain floats, in the order `Allocation.held`'s `Resources` would add up (the
    same values): a round with arrivals reads every running job's pieces here."""
    load: dict[str, list[float]] = {}
    for alloc in allocations.values():
        own_gpus = alloc.packed_with is None  # a packed guest's GPUs are its host's
        for p in alloc.placements:
            g = p.gpus if own_gpus else 0.0
            at = load.get(p.server_id)
            if at is None:
                load[p.server_id] = [g, p.cpus, p.mem_gb]
            else:
                at[0] += g
                at[1] += p.cpus
                at[2] += p.mem_gb
    for sid, (g, c, m) in load.items():
        cap = caps[sid]
        if g > cap.gpus + EPS or c > cap.cpus + EPS or m > cap.mem_gb + EPS:
            return None
    return {sid: Resources(cap.gpus - load[sid][0], cap.cpus - load[sid][1], cap.mem_gb - load[sid][2])
            if sid in load else cap for sid, cap in caps.items()}


def _guaranteed(allocations: Mapping[int, Allocation], jobs: Mapping[int, Job], cluster: Cluster) -> bool:
    """Every job of `allocations` at least as fast as at its GPU-proportional share.

    The answer depends on the job only through its profile (`keeps_guarantee`), and a round's
    jobs share a few profiles at a few shares: each (profile, GPU type, share) is checked
    once per call (a Fig. 9 round checks about 120 jobs, twice)."""
    typed = cluster.typed
    passed: set[tuple[int, str, float, float]] = set()
    for jid, alloc in allocations.items():
        job = jobs.get(jid)
        if job is None:
            return False
        gpu_type = cluster.gpu_type_of(alloc.placements[0].server_id) if typed else ""
        c, m = alloc.per_gpu
        key = (id(job.profile), gpu_type, c, m)  # the profile outlives the call: its id is stable
        if key in passed:
            continue
        if not keeps_guarantee(job, cluster, gpu_type, c, m):
            return False
        passed.add(key)
    return True
