"""Free resources per server while one round's decision is being made.

A ClusterState lives only for the duration of one call into the core: mechanisms reserve
and release on it, and the final reservations become the round's allocations.
"""
from __future__ import annotations

from synergy.scheduler.model import EPS, Allocation, Cluster, Placement, Resources


class ClusterState:
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.ids = [s.id for s in cluster.servers]
        self.index = {sid: i for i, sid in enumerate(self.ids)}
        self.cap_g = [float(s.capacity.gpus) for s in cluster.servers]
        self.cap_c = [float(s.capacity.cpus) for s in cluster.servers]
        self.cap_m = [float(s.capacity.mem_gb) for s in cluster.servers]
        self.free_g = list(self.cap_g)
        self.free_c = list(self.cap_c)
        self.free_m = list(self.cap_m)
        #: job id -> its placements, in reservation order.
        self.held: dict[int, tuple[Placement, ...]] = {}
        #: server index -> ids of the jobs holding something there.
        self.on_server: list[set[int]] = [set() for _ in self.ids]

    @property
    def free_gpus(self) -> float:
        return sum(self.free_g)

    def fits(self, i: int, gpus: float, cpus: float, mem_gb: float) -> bool:
        return (
            gpus <= self.free_g[i] + EPS
            and cpus <= self.free_c[i] + EPS
            and mem_gb <= self.free_m[i] + EPS
        )

    def free(self, i: int) -> Resources:
        return Resources(self.free_g[i], self.free_c[i], self.free_m[i])

    def reserve(self, job_id: int, placements: tuple[Placement, ...]) -> None:
        if job_id in self.held:
            raise ValueError(f"job {job_id} already holds resources this round")
        for p in placements:
            i = self.index[p.server_id]
            if not self.fits(i, p.gpus, p.cpus, p.mem_gb):
                raise ValueError(f"job {job_id} does not fit on server {p.server_id}")
        for p in placements:
            i = self.index[p.server_id]
            self.free_g[i] -= p.gpus
            self.free_c[i] -= p.cpus
            self.free_m[i] -= p.mem_gb
            self.on_server[i].add(job_id)
        self.held[job_id] = placements

    def release(self, job_id: int) -> tuple[Placement, ...]:
        placements = self.held.pop(job_id)
        for p in placements:
            i = self.index[p.server_id]
            self.free_g[i] += p.gpus
            self.free_c[i] += p.cpus
            self.free_m[i] += p.mem_gb
            self.on_server[i].discard(job_id)
        return placements

    def allocations(self) -> dict[int, Allocation]:
        return {jid: Allocation(jid, pl) for jid, pl in self.held.items()}
