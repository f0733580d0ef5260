"""CPU-only jobs (CODA's kind) on the CPUs and memory that training allocations leave free.

A deliberately small pass that runs after the training mechanism has decided: it never
touches a training allocation, it only fills what is left. CODA's full multi-array
scheduling (a CPU array, adaptive CPU shares for training) is its own issue later.

Rules, in order:
* a CPU-only job that ran last round keeps its server while what it holds there still fits
  (no churn: its process is not restarted every round);
* then every other CPU-only job, in the order given (the policy's), goes first-fit onto the
  first open server (in cluster order) with enough free CPUs and memory, GPU servers and
  0-GPU servers alike;
* a job that fits nowhere waits, with the largest free slot in its reason.
"""
from __future__ import annotations

from typing import Collection, Mapping, Sequence

from synergy.scheduler.model import EPS, Allocation, Cluster, Job, Placement, Resources


def place_cpu_only(
    ordered: Sequence[Job],
    cluster: Cluster,
    taken: Mapping[int, Allocation],
    previous: Mapping[int, Allocation],
    open_ids: Collection[str],
    held_ids: Collection[str] = (),
) -> tuple[dict[int, Allocation], dict[int, str]]:
    """Allocations and waiting reasons for `ordered` CPU-only jobs.

    `cluster` holds every server at full capacity; `taken` the round's training allocations
    (never changed here); `open_ids` the servers that take new work, `held_ids` those where
    running work may stay (a cordon) but nothing new goes.
    """
    free = {s.id: s.capacity for s in cluster.servers}
    for alloc in taken.values():
        for p in alloc.placements:
            if p.server_id in free:
                free[p.server_id] = free[p.server_id] - p.resources
    out: dict[int, Allocation] = {}
    waiting: dict[int, str] = {}

    def take(job: Job, server_id: str) -> None:
        p = Placement(server_id, 0, job.cpus, job.mem_gb)
        free[server_id] = free[server_id] - p.resources
        out[job.id] = Allocation(job.id, (p,))

    def fits(job: Job, server_id: str) -> bool:
        left = free[server_id]
        return job.cpus <= left.cpus + EPS and job.mem_gb <= left.mem_gb + EPS

    stay = set(open_ids) | set(held_ids)
    for job in ordered:  # running ones first: they keep their place
        prev = previous.get(job.id)
        if prev is None or len(prev.placements) != 1:
            continue
        server = prev.placements[0].server_id
        if server in stay and server in free and fits(job, server):
            take(job, server)
    for job in ordered:
        if job.id in out:
            continue
        server = next((s.id for s in cluster.servers if s.id in open_ids and fits(job, s.id)), None)
        if server is not None:
            take(job, server)
            continue
        best = max((free[s] for s in free if s in open_ids), key=lambda r: (r.cpus, r.mem_gb), default=None)
        room = f"the largest free slot is {max(0.0, best.cpus):g} CPUs, {max(0.0, best.mem_gb):g} GB" if best else (
            "no schedulable node")
        waiting[job.id] = f"waiting for {job.cpus:g} CPUs and {job.mem_gb:g} GB free on one node: {room}"
    return out, waiting
