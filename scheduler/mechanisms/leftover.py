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


def top_up(free_c: float, free_m: float, local: list[tuple[int, Job, Placement]]) -> list[tuple[int, Placement]]:
    """What one server's single-server jobs `local` (id order, each with the piece it holds
    there) get from the `free_c` CPUs and `free_m` GB nobody holds there: each job's new piece,
    in the order they were handed out.

    Largest possible gain first (what the job would gain from all that is free here), each
    toward its saturating demand. `redistribute` and `hand_out` both apply it, the one rule."""
    # A job already at its saturating demand on both axes is given nothing below (its new
    # piece equals its old one, as long as what is free never falls below zero, which the
    # top-ups keep from a start at zero or more): it is passed over before its speeds are read.
    settled = free_c >= 0.0 and free_m >= 0.0
    gains = []
    for k, (jid, job, p) in enumerate(local):
        if settled:
            c_sat, m_sat = job.profile.saturating
            if p.cpus >= c_sat * p.gpus and p.mem_gb >= m_sat * p.gpus:
                continue
        now = job.profile.speed(p.cpus / p.gpus, p.mem_gb / p.gpus)
        best = job.profile.speed((p.cpus + free_c) / p.gpus, (p.mem_gb + free_m) / p.gpus)
        if best > now * (1 + 1e-6):
            gains.append((-(best / now if now > 0 else float("inf")), jid, k))
    out: list[tuple[int, Placement]] = []
    for _, jid, k in sorted(gains):
        job, p = local[k][1], local[k][2]
        c_sat, m_sat = job.profile.saturating
        cpus = min(max(p.cpus, c_sat * p.gpus), p.cpus + free_c)
        mem = min(max(p.mem_gb, m_sat * p.gpus), p.mem_gb + free_m)
        if job.profile.speed(cpus / p.gpus, mem / p.gpus) <= job.profile.speed(p.cpus / p.gpus, p.mem_gb / p.gpus):
            continue
        # The arithmetic of releasing the old piece and reserving the new one on a ClusterState,
        # in that order, so that both callers agree to the last bit.
        free_c = free_c + p.cpus - cpus
        free_m = free_m + p.mem_gb - mem
        out.append((jid, Placement(p.server_id, p.gpus, cpus, mem)))
    return out


def redistribute(state: ClusterState, jobs: Mapping[int, Job]) -> set[int]:
    """Top up single-server jobs of `jobs` toward their saturating demand (`top_up`, server by
    server); returns the ids changed. Other holders in `state` (split jobs, jobs not in
    `jobs`) are left alone: a split job's share must stay proportional on every server."""
    changed: set[int] = set()
    for i in range(len(state.ids)):
        if state.free_c[i] <= EPS and state.free_m[i] <= EPS:
            continue
        local = [(jid, jobs[jid], state.held[jid][0]) for jid in sorted(state.on_server[i])
                 if jid in jobs and len(state.held[jid]) == 1]
        for jid, piece in top_up(state.free_c[i], state.free_m[i], local):
            state.release(jid)
            state.reserve(jid, (piece,))
            changed.add(jid)
    return changed


def hand_out(
    allocations: Mapping[int, Allocation], jobs: Mapping[int, Job], cluster: Cluster,
    others: Iterable[Allocation] = (), previous: Mapping[int, Allocation] | None = None,
) -> dict[int, Allocation]:
    """The round's GPU-job `allocations` on `cluster` (its open GPU servers) with what is
    still free there handed out (`top_up`, server by server).

    `others` (CPU-only jobs' allocations) only take room; placements off `cluster` are
    ignored. A packed pair takes room but gets nothing more: its GPUs are time-shared, and
    what more CPU or memory buys it is not what the job's own profile says. On a typed
    cluster each job is sized with its profile on its server's GPU type. A job whose
    allocation ends up equal to its `previous` one gets that very object back (the shells
    compare allocations by identity first).

    The core calls this twice a round, so it keeps only what `top_up` reads: free CPUs and
    memory per server, subtracted in one order (jobs by id, then `others` by id) as a
    ClusterState holding the plan would (the same floats; tests/test_placement_speed.py
    holds it to `redistribute` on such a state), and the eligible jobs per server.
    """
    servers = cluster.servers
    index = {s.id: i for i, s in enumerate(servers)}
    free_c = [float(s.capacity.cpus) for s in servers]
    free_m = [float(s.capacity.mem_gb) for s in servers]
    typed = cluster.typed
    hosts = {a.packed_with for a in allocations.values() if a.packed_with is not None}
    local: dict[int, list[tuple[int, Job, Placement]]] = {}
    for jid in sorted(allocations):  # one summation order, whatever order the plan comes in
        alloc = allocations[jid]
        pieces = alloc.placements
        # Only what lies on `cluster` takes room (one piece, the common case, looked at alone).
        if not (pieces[0].server_id in index if len(pieces) == 1 else all(p.server_id in index for p in pieces)):
            pieces = tuple(p for p in pieces if p.server_id in index)
            if not pieces:
                continue
        for p in pieces:
            i = index[p.server_id]
            free_c[i] -= p.cpus
            free_m[i] -= p.mem_gb
        job = jobs.get(jid)
        if (job is not None and len(pieces) == 1 == len(alloc.placements) and pieces[0].gpus > 0
                and alloc.packed_with is None and jid not in hosts):
            piece = pieces[0]
            seen = on_type(job, cluster.gpu_type_of(piece.server_id)) if typed else job
            local.setdefault(index[piece.server_id], []).append((jid, seen, piece))
    for alloc in sorted(others, key=lambda a: a.job_id):
        if alloc.job_id in allocations:
            continue
        for p in alloc.placements:
            i = index.get(p.server_id)
            if i is not None:
                free_c[i] -= p.cpus
                free_m[i] -= p.mem_gb
    out = dict(allocations)
    for i, here in local.items():  # servers are independent: a job sits on one
        if free_c[i] <= EPS and free_m[i] <= EPS:
            continue
        for jid, piece in top_up(free_c[i], free_m[i], here):
            new = out[jid].with_placements((piece,))
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
