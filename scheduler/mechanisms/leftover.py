"""Hand CPU and memory that nobody demanded to the co-located jobs that speed up most.

§4.2's packing gives each job its best-case demand or its proportional share, and can leave
CPU and memory unallocated on a server: a job whose best case does not fit falls back to
proportional even when half of what it wanted is free. §5.3.2 describes the behaviour we
want ("the unallocated CPU and memory is assigned to the jobs that benefit from additional
auxiliary resources"), which is also how the §2.1 example reaches Table 3. This step only
adds resources, so no job slows down and the GPU-proportional guarantee still holds.

Leftovers are a bonus (issue 14): a CPU-only job or a packed guest never finds them taken,
and they keep a running job from staying where it ran only where they speed a job up (a
move the round can name). Handed out
inside the mechanism, they filled small GPU nodes (every CPU and GB to the one training job
there, whose best case the node could not hold), so a CPU-only job found "0 CPUs, 0 GB"
free and was preempted, and a profitable pair was never packed. The mechanism now answers
demands only (`Tune.allocate`), and the core (core.py, `Scheduler._lay_out`):

1. packs guests (placement/packing.py) on what the demands leave;
2. hands leftovers out on that plan (`hand_out`) and decides the layout with them:
   relabelling and `stay_put` keep each job's share with its leftovers, so a move may keep
   leftovers where they speed a job up; a job whose GPUs where it ran are free and that
   only co-located jobs' surplus keeps out goes back when that surplus is worth nothing
   there (placement/surplus.py);
3. takes the leftovers back (`taken_back`) before CODA's CPU array, which places CPU-only
   jobs on what the demands leave (arrays/cpu_array.py);
4. hands them out again (`hand_out`) on the layout the round ends with.

A round decides from scratch, so last round's leftovers are never held when the next one
decides. Handing them out on the final layout (step 4) rather than carrying step 2's also
gives each node's leftovers to the jobs that sit there at the end: the Fig. 9 runs finish
2-3% sooner than with leftovers decided inside the mechanism (docs/reproducing.md).
"""
from __future__ import annotations

from typing import Iterable, Mapping

from synergy.scheduler.model import EPS, Allocation, Cluster, Job, Placement
from synergy.scheduler.placement.gpu_types import on_type
from synergy.scheduler.state import ClusterState


def redistribute(state: ClusterState, jobs: Mapping[int, Job]) -> set[int]:
    """Top up single-server jobs of `jobs` toward their saturating demand; returns the ids
    changed. Other holders in `state` (split jobs, jobs not in `jobs`) are left alone: a
    split job's share must stay proportional on every server."""
    changed: set[int] = set()
    for i in range(len(state.ids)):
        if state.free_c[i] <= EPS and state.free_m[i] <= EPS:
            continue
        local = [jid for jid in sorted(state.on_server[i]) if jid in jobs and len(state.held[jid]) == 1]
        # Largest possible gain first: what the job would gain from all that is free here.
        gains = []
        for jid in local:
            job, p = jobs[jid], state.held[jid][0]
            now = job.profile.speed(p.cpus / p.gpus, p.mem_gb / p.gpus)
            best = job.profile.speed((p.cpus + state.free_c[i]) / p.gpus, (p.mem_gb + state.free_m[i]) / p.gpus)
            if best > now * (1 + 1e-6):
                gains.append((-(best / now if now > 0 else float("inf")), jid))
        for _, jid in sorted(gains):
            job, p = jobs[jid], state.held[jid][0]
            c_sat, m_sat = job.profile.best_case()
            cpus = min(max(p.cpus, c_sat * p.gpus), p.cpus + state.free_c[i])
            mem = min(max(p.mem_gb, m_sat * p.gpus), p.mem_gb + state.free_m[i])
            if job.profile.speed(cpus / p.gpus, mem / p.gpus) <= job.profile.speed(p.cpus / p.gpus, p.mem_gb / p.gpus):
                continue
            state.release(jid)
            state.reserve(jid, (Placement(p.server_id, p.gpus, cpus, mem),))
            changed.add(jid)
    return changed


def hand_out(
    allocations: Mapping[int, Allocation], jobs: Mapping[int, Job], cluster: Cluster,
    others: Iterable[Allocation] = (), previous: Mapping[int, Allocation] | None = None,
) -> dict[int, Allocation]:
    """The round's GPU-job `allocations` on `cluster` (its open GPU servers) with what is
    still free there handed out by `redistribute`.

    `others` (CPU-only jobs' allocations) only take room; placements off `cluster` are
    ignored. A packed pair takes room but gets nothing more: its GPUs are time-shared, and
    what more CPU or memory buys it is not what the job's own profile says. On a typed
    cluster each job is sized with its profile on its server's GPU type. A job whose
    allocation ends up equal to its `previous` one gets that very object back (the shells
    compare allocations by identity first).
    """
    state = ClusterState(cluster)
    index, typed = state.index, cluster.typed
    hosts = {a.packed_with for a in allocations.values() if a.packed_with is not None}
    eligible: dict[int, Job] = {}
    plan: list[tuple[int, tuple[Placement, ...]]] = []
    for jid in sorted(allocations):  # one summation order, whatever order the plan comes in
        alloc = allocations[jid]
        pieces = alloc.placements
        if alloc.packed_with is not None or not all(p.server_id in index for p in pieces):
            # GPUs counted once (a guest's are its host's); only what lies on `cluster`.
            pieces = tuple(Placement(p.server_id, 0 if alloc.packed_with is not None else p.gpus, p.cpus, p.mem_gb)
                           for p in pieces if p.server_id in index)
            if not pieces:
                continue
        plan.append((jid, pieces))
        job = jobs.get(jid)
        if (job is not None and len(pieces) == 1 == len(alloc.placements) and pieces[0].gpus > 0
                and alloc.packed_with is None and jid not in hosts):
            eligible[jid] = on_type(job, cluster.gpu_type_of(pieces[0].server_id)) if typed else job
    for alloc in sorted(others, key=lambda a: a.job_id):
        pieces = tuple(p for p in alloc.placements if p.server_id in index)
        if pieces and alloc.job_id not in allocations:
            plan.append((alloc.job_id, pieces))
    state.hold(plan)
    changed = redistribute(state, eligible)
    if not changed:
        return dict(allocations)
    out = dict(allocations)
    for jid in changed:
        new = out[jid].with_placements(state.held[jid])
        prev = previous.get(jid) if previous else None
        out[jid] = prev if prev is not None and prev == new else new
    return out


def taken_back(allocations: Mapping[int, Allocation], demands: Mapping[int, Allocation]) -> dict[int, Allocation]:
    """`allocations` (a laid-out plan whose leftovers were handed out) with every job cut back
    to its `demands` (the mechanism's allocation), piece by piece on its GPUs there, never
    raised: what the layout step trimmed stays trimmed. Jobs without a demand are kept."""
    out: dict[int, Allocation] = {}
    for jid, alloc in allocations.items():
        demand = demands.get(jid)
        if demand is None or alloc is demand or not demand.placements:
            out[jid] = alloc
            continue
        if len(demand.placements) == 1 == len(alloc.placements):
            d, p = demand.placements[0], alloc.placements[0]
            cpus, mem = min(p.cpus, d.cpus), min(p.mem_gb, d.mem_gb)
        else:  # split jobs get no leftovers: this only renames, per GPU as demanded
            c, m = demand.per_gpu
            cut = tuple(Placement(p.server_id, p.gpus, min(p.cpus, c * p.gpus), min(p.mem_gb, m * p.gpus))
                        for p in alloc.placements)
            out[jid] = alloc if all(p.cpus >= q.cpus - EPS and p.mem_gb >= q.mem_gb - EPS
                                    for p, q in zip(cut, alloc.placements)) else alloc.with_placements(cut)
            continue
        out[jid] = alloc if (cpus, mem) == (p.cpus, p.mem_gb) else alloc.with_placements(
            (Placement(p.server_id, p.gpus, cpus, mem),))
    return out
