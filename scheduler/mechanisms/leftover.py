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

from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

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
        local = [(jid, state.held[jid][0]) for jid in sorted(state.on_server[i])
                 if jid in jobs and len(state.held[jid]) == 1]
        for jid, cpus, mem in _top_up(state.free_c[i], state.free_m[i], local, jobs):
            p = state.release(jid)[0]
            state.reserve(jid, (Placement(p.server_id, p.gpus, cpus, mem),))
            changed.add(jid)
    return changed


def _top_up(free_c: float, free_m: float, local: Sequence[tuple[int, Placement]],
            jobs: Mapping[int, Job]) -> list[tuple[int, float, float]]:
    """One server's hand-out: `local`, the single-server jobs there in id order, topped up
    from `free_c` CPUs and `free_m` GB, largest possible gain first. Returns (job, CPUs, GB)
    for each job raised, in the order raised (each one's raise comes out of what the ones
    before it left): `redistribute` and `hand_out` apply it with the same arithmetic."""
    # Largest possible gain first: what the job would gain from all that is free here.
    gains = []
    for jid, p in local:
        profile = jobs[jid].profile
        now = profile.speed(p.cpus / p.gpus, p.mem_gb / p.gpus)
        best = profile.speed((p.cpus + free_c) / p.gpus, (p.mem_gb + free_m) / p.gpus)
        if best > now * (1 + 1e-6):
            gains.append((-(best / now if now > 0 else float("inf")), jid, p))
    raised: list[tuple[int, float, float]] = []
    for _, jid, p in sorted(gains, key=lambda g: g[:2]):
        profile = jobs[jid].profile
        c_sat, m_sat = profile.best_case()
        cpus = min(max(p.cpus, c_sat * p.gpus), p.cpus + free_c)
        mem = min(max(p.mem_gb, m_sat * p.gpus), p.mem_gb + free_m)
        if profile.speed(cpus / p.gpus, mem / p.gpus) <= profile.speed(p.cpus / p.gpus, p.mem_gb / p.gpus):
            continue
        # What ClusterState's release then reserve do to the server's free resources.
        free_c = free_c + p.cpus - cpus
        free_m = free_m + p.mem_gb - mem
        raised.append((jid, cpus, mem))
    return raised


#: One server's content as `hand_out` sees it: (CPUs, GB) of capacity, then per piece in
#: the order held: (job, GPUs, CPUs, GB, whether the job may be topped up).
_ServerKey = tuple[float, float, tuple[tuple[int, int, float, float, bool], ...]]


@dataclass
class HandOutCache:
    """`_top_up`'s answers per server content, across calls (a Fig. 9 round changes a few
    of 16 servers, and the core hands out twice per round). An answer is reused only for
    the same capacity, the same pieces in the same order and the very same profile objects
    (held here, so they cannot be collected and their ids reused): the answer is then the
    one `_top_up` would give, float for float. Bounded: emptied when it grows past `limit`."""

    limit: int = 4096
    answers: dict[_ServerKey, tuple[tuple[object, ...], tuple[tuple[int, float, float], ...]]] = field(
        default_factory=dict)

    def top_up(self, key: _ServerKey, local: list[tuple[int, Placement]],
               jobs: Mapping[int, Job]) -> tuple[tuple[int, float, float], ...]:
        profiles = tuple(jobs[jid].profile for jid, _ in local)
        hit = self.answers.get(key)
        if hit is not None and len(hit[0]) == len(profiles) and all(a is b for a, b in zip(hit[0], profiles)):
            return hit[1]
        free_c, free_m = key[0], key[1]
        for _, _, c, m, _ in key[2]:
            free_c -= c
            free_m -= m
        raised = tuple(_top_up(free_c, free_m, local, jobs)) if free_c > EPS or free_m > EPS else ()
        if len(self.answers) >= self.limit:
            self.answers.clear()
        self.answers[key] = (profiles, raised)
        return raised


def hand_out(
    allocations: Mapping[int, Allocation], jobs: Mapping[int, Job], cluster: Cluster,
    others: Iterable[Allocation] = (), previous: Mapping[int, Allocation] | None = None,
    cache: HandOutCache | None = None,
) -> dict[int, Allocation]:
    """The round's GPU-job `allocations` on `cluster` (its open GPU servers) with what is
    still free there handed out, server by server (`_top_up`).

    `others` (CPU-only jobs' allocations) only take room; placements off `cluster` are
    ignored. A packed pair takes room but gets nothing more: its GPUs are time-shared, and
    what more CPU or memory buys it is not what the job's own profile says. On a typed
    cluster each job is sized with its profile on its server's GPU type. A job whose
    allocation ends up equal to its `previous` one gets that very object back (the shells
    compare allocations by identity first). `cache` remembers answers per server content
    (`HandOutCache`); without one each server is worked out afresh.
    """
    typed = cluster.typed
    caps = {s.id: s.capacity for s in cluster.servers}
    hosts = {a.packed_with for a in allocations.values() if a.packed_with is not None}
    eligible: dict[int, Job] = {}
    #: Server -> the pieces held there, in the order `redistribute`'s state would hold them.
    content: dict[str, list[tuple[int, int, float, float, bool]]] = {}
    for jid in sorted(allocations):  # one summation order, whatever order the plan comes in
        alloc = allocations[jid]
        pieces = alloc.placements
        packed = alloc.packed_with is not None
        job = jobs.get(jid)
        one = (job is not None and len(pieces) == 1 and pieces[0].gpus > 0 and not packed and jid not in hosts
               and pieces[0].server_id in caps)
        if one:
            eligible[jid] = on_type(job, cluster.gpu_type_of(pieces[0].server_id)) if typed else job
        for p in pieces:
            if p.server_id in caps:  # GPUs are not counted here: a guest's are its host's
                content.setdefault(p.server_id, []).append((jid, p.gpus, p.cpus, p.mem_gb, one))
    for alloc in sorted(others, key=lambda a: a.job_id):
        if alloc.job_id not in allocations:
            for p in alloc.placements:
                if p.server_id in caps:
                    content.setdefault(p.server_id, []).append((alloc.job_id, p.gpus, p.cpus, p.mem_gb, False))
    out: dict[int, Allocation] | None = None
    for sid, held in content.items():
        cap = caps[sid]
        local = [(t[0], allocations[t[0]].placements[0]) for t in held if t[4]]
        if not local:
            continue
        key = (float(cap.cpus), float(cap.mem_gb), tuple(held))
        if cache is not None:
            raised = cache.top_up(key, local, eligible)
        else:
            free_c, free_m = key[0], key[1]
            for _, _, c, m, _ in held:
                free_c -= c
                free_m -= m
            raised = tuple(_top_up(free_c, free_m, local, eligible)) if free_c > EPS or free_m > EPS else ()
        for jid, cpus, mem in raised:
            if out is None:
                out = dict(allocations)
            p = allocations[jid].placements[0]
            new = out[jid].with_placements((Placement(sid, p.gpus, cpus, mem),))
            prev = previous.get(jid) if previous else None
            out[jid] = prev if prev is not None and prev == new else new
    return dict(allocations) if out is None else out


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
