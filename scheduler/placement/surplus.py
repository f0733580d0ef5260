"""A training job's surplus: what it holds above its GPU-proportional share (issue 14).

A training job is guaranteed its GPU-proportional speed; what TUNE gives it above the
share (its best case, or leftovers, mechanisms/leftover.py) is a bonus that TUNE's own step
2(a) takes back whenever another job needs the room. Two real demands take it back after
the mechanism too, never below the share and never below the job's proportional speed:

* CODA's CPU array trims CPUs of it for CPU-only jobs (arrays/cpu_array.py);
* a running job that the plan moves although its GPUs where it ran are still free, only
  because co-located jobs' surplus fills that node's CPUs or memory, is put back there and
  those jobs are trimmed (`stay_on_surplus`), when that costs the two nodes no speed once
  leftovers are handed out: the move would then buy nothing the round can name (a plan
  that differs only in which of two co-located jobs TUNE switched back to proportional is
  the same plan), while a restart costs the job its checkpoint and start-up. What the job
  leaves free on the node the plan had chosen is handed out as leftovers. A move that does
  buy speed (the surplus helps its holder more than the leftovers help the other node)
  stays a move: its reason is the share that "does not fit where it ran".
"""
from __future__ import annotations

from typing import Collection, Mapping

from synergy.scheduler.mechanisms.leftover import hand_out
from synergy.scheduler.model import EPS, Allocation, Cluster, Job, Placement

#: Relative slack on "never slower than proportional" (profiles interpolate in floats).
SPEED_TOLERANCE = 1e-9


def share_per_gpu(cluster: Cluster, gpu_type: str = "") -> tuple[float, float]:
    """The GPU-proportional (CPUs, GB) per GPU a job landing on `gpu_type` is guaranteed."""
    return cluster.share_per_gpu(gpu_type if cluster.typed else None)


def keeps_guarantee(job: Job, cluster: Cluster, gpu_type: str, cpus_per_gpu: float, mem_per_gpu: float) -> bool:
    """Whether `job` on `gpu_type` with (CPUs, GB) per GPU is at least as fast as under its
    GPU-proportional share of `cluster` (the share and speed of the type it runs on)."""
    if cluster.typed:
        floor = job.profile.speed_on(gpu_type, *share_per_gpu(cluster, gpu_type))
        now = job.profile.speed_on(gpu_type, cpus_per_gpu, mem_per_gpu)
    else:
        floor = job.profile.speed(*share_per_gpu(cluster))
        now = job.profile.speed(cpus_per_gpu, mem_per_gpu)
    return now >= floor * (1 - SPEED_TOLERANCE) - EPS


def stay_on_surplus(
    plan: Mapping[int, Allocation], previous: Mapping[int, Allocation], cluster: Cluster,
    jobs: Mapping[int, Job], trimmable: Collection[int],
) -> dict[int, Allocation]:
    """`plan` (on `cluster`) with each single-server job it moves off the server it ran on
    put back there, with the plan's CPUs and memory for it, when that server still has its
    GPUs free and only the surplus of co-located jobs of `trimmable` stands in the way.

    Those jobs are trimmed, largest surplus first, by what the returning job needs: never
    below their share, never below their proportional speed (else they are left as they
    are and the job moves). Jobs go back in id order (the oldest first); packed pairs, split
    jobs and jobs whose GPU count or GPU type changed are left moving.
    """
    caps = {s.id: s.capacity for s in cluster.servers}
    hosts = {a.packed_with for a in plan.values() if a.packed_with is not None}
    movers = []  # the cheap test first: most rounds move no such job
    for jid, alloc in plan.items():
        prev = previous.get(jid)
        if prev is None or len(prev.placements) != 1 or len(alloc.placements) != 1:
            continue
        was, now = prev.placements[0], alloc.placements[0]
        if (was.server_id != now.server_id and was.gpus == now.gpus and was.server_id in caps
                and alloc.packed_with is None and prev.packed_with is None and jid not in hosts):
            movers.append(jid)
    if not movers:
        return dict(plan)
    load: dict[str, list[float]] = {sid: [0.0, 0.0, 0.0] for sid in caps}
    on_server: dict[str, list[int]] = {sid: [] for sid in caps}
    for jid in sorted(plan):
        alloc = plan[jid]
        packed = alloc.packed_with is not None
        for p in alloc.placements:  # what `alloc.held` adds, read off the pieces
            acc = load.get(p.server_id)
            if acc is not None:
                acc[0] += 0.0 if packed else p.gpus
                acc[1] += p.cpus
                acc[2] += p.mem_gb
        if len(alloc.placements) == 1 and alloc.packed_with is None and jid not in hosts and jid in trimmable:
            sid = alloc.placements[0].server_id
            if sid in on_server:
                on_server[sid].append(jid)
    out = dict(plan)
    for jid in sorted(movers):
        prev, alloc = previous[jid], out[jid]
        was, now = prev.placements[0], alloc.placements[0]
        home = was.server_id
        if cluster.typed and cluster.gpu_type_of(home) != cluster.gpu_type_of(now.server_id):
            continue
        cap, (g, c, m) = caps[home], load[home]
        if g + now.gpus > cap.gpus + EPS:
            continue  # its GPUs there went to other jobs: a move the round can name
        trims = _trims(out, jobs, cluster, on_server[home], c + now.cpus - cap.cpus, m + now.mem_gb - cap.mem_gb)
        if trims is None:
            continue
        back = Placement(home, now.gpus, now.cpus, now.mem_gb)
        stay = {**{other: out[other].with_placements((new,)) for other, new in trims},
                jid: alloc.with_placements((back,))}
        if trims and not _no_slower(out, stay, (home, now.server_id), jobs, cluster):
            continue
        for other, new in trims:
            old = out[other].placements[0]
            load[home][1] -= old.cpus - new.cpus
            load[home][2] -= old.mem_gb - new.mem_gb
            out[other] = out[other].with_placements((new,))
        load[home][0] += now.gpus
        load[home][1] += now.cpus
        load[home][2] += now.mem_gb
        left = load.get(now.server_id)
        if left is not None:
            left[0] -= now.gpus
            left[1] -= now.cpus
            left[2] -= now.mem_gb
        if jid in on_server.get(now.server_id, ()):
            on_server[now.server_id].remove(jid)
            on_server[home].append(jid)
        out[jid] = prev if prev.placements[0] == back else stay[jid]
    return out


def _no_slower(plan: Mapping[int, Allocation], stay: Mapping[int, Allocation], servers: tuple[str, ...],
               jobs: Mapping[int, Job], cluster: Cluster) -> bool:
    """Whether `plan` with `stay`'s allocations instead is, on `servers` once each hands out
    its leftovers, at least as fast in the sum of its jobs' speedups over their share."""
    sub = Cluster(tuple(s for s in cluster.servers if s.id in servers), share_basis=cluster.basis)
    here = {jid for jid, a in plan.items() if any(p.server_id in servers for p in a.placements)}

    def value(allocs: Mapping[int, Allocation]) -> float:
        handed = hand_out({jid: allocs[jid] for jid in sorted(here)}, jobs, sub)
        return sum(speedup(jobs[jid], a, cluster) for jid, a in handed.items()
                   if jid in jobs and a.packed_with is None and len(a.placements) == 1)

    return value({**plan, **stay}) >= value(plan) * (1 - SPEED_TOLERANCE) - EPS


def speedup(job: Job, alloc: Allocation, cluster: Cluster) -> float:
    """`job`'s speed under a one-server `alloc` over its GPU-proportional speed there."""
    gpu_type = cluster.gpu_type_of(alloc.placements[0].server_id)
    floor = job.profile.speed_on(gpu_type, *share_per_gpu(cluster, gpu_type))
    return job.profile.speed_on(gpu_type, *alloc.per_gpu) / floor if floor > 0 else 0.0


def _trims(
    plan: Mapping[int, Allocation], jobs: Mapping[int, Job], cluster: Cluster, candidates: list[int],
    need_c: float, need_m: float,
) -> list[tuple[int, Placement]] | None:
    """New placements of `candidates` (single-server jobs on one server) freeing `need_c`
    CPUs and `need_m` GB from their surplus, largest surplus first; None when it cannot."""
    if need_c <= EPS and need_m <= EPS:
        return []
    surplus = []
    for jid in candidates:
        job = jobs.get(jid)
        if job is None:
            continue
        p = plan[jid].placements[0]
        gpu_type = cluster.gpu_type_of(p.server_id)
        sc, sm = share_per_gpu(cluster, gpu_type)
        extra_c, extra_m = max(0.0, p.cpus - sc * p.gpus), max(0.0, p.mem_gb - sm * p.gpus)
        if extra_c > EPS or extra_m > EPS:
            weight = (extra_c / sc if sc > 0 else 0.0) + (extra_m / sm if sm > 0 else 0.0)
            surplus.append((-weight, jid, job, p, gpu_type, extra_c, extra_m))
    surplus.sort(key=lambda t: (t[0], t[1]))
    trims: list[tuple[int, Placement]] = []
    for _, jid, job, p, gpu_type, extra_c, extra_m in surplus:
        if need_c <= EPS and need_m <= EPS:
            break
        cut_c, cut_m = min(extra_c, max(0.0, need_c)), min(extra_m, max(0.0, need_m))
        if cut_c <= EPS and cut_m <= EPS:
            continue
        new = Placement(p.server_id, p.gpus, p.cpus - cut_c, p.mem_gb - cut_m)
        if not keeps_guarantee(job, cluster, gpu_type, new.cpus / new.gpus, new.mem_gb / new.gpus):
            continue
        trims.append((jid, new))
        need_c -= cut_c
        need_m -= cut_m
    return trims if need_c <= EPS and need_m <= EPS else None
