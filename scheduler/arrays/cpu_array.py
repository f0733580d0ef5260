"""The CPU array (CODA §V-C): CPU-only jobs on CPU servers and on CPUs borrowed from GPU servers.

CODA divides the cluster into a GPU array and a CPU array and schedules each with DRF; CPU
jobs may borrow cores the GPU array is not using and give them back when a GPU job needs
them. Here, each round, after the training mechanism has decided:

* the array is every open CPU server (`ServerPool.CPU_ONLY`, or any server without GPUs),
  all of it, plus on each open GPU server at most `CpuArray.borrow_fraction` of its CPUs;
* what a CPU-only job may borrow on a GPU server is what training left idle there and,
  with `trim_training`, what TUNE gave a training job above its GPU-proportional share
  (its best case: placement/surplus.py): such a job is trimmed, never below proportional
  CPUs per GPU and never below its GPU-proportional speed (checked on its profile), so
  training keeps Synergy's guarantee. The core hands leftovers out after the array
  (mechanisms/leftover.py), so what nobody demanded is idle here, memory included;
* a CPU-only job that ran last round keeps its server if it still fits (no churn), then the
  rest go by DRF progressive filling (`arrays/drf.py`) onto the first server that fits:
  CPU servers first, then idle CPUs of GPU servers, then trimmed ones;
* borrowed CPUs return at the next round: training is decided first, on the whole cluster,
  so a borrowed job whose CPUs training now needs simply finds no room and is preempted
  (it keeps its place in its user's queue and runs again when room comes back).

Memory is never trimmed: a CPU-only job takes only memory nobody holds.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Collection, Mapping, Sequence

from synergy.scheduler.arrays.drf import progressive_fill, user_of
from synergy.scheduler.model import EPS, Allocation, Cluster, Job, Placement, Resources, Server, ServerPool
from synergy.scheduler.placement.surplus import keeps_guarantee, share_per_gpu
from synergy.scheduler.throughput import proportional_per_gpu

@dataclass(frozen=True)
class CpuArray:
    """The CPU array's settings (a core setting: the daemon and the simulator share it)."""

    #: Fraction of each GPU server's CPUs that CPU-only jobs may hold at once (CODA's
    #: reserve for the GPU array is the rest). 1.0: anything training does not use.
    borrow_fraction: float = 1.0
    #: Whether CPU-only jobs may take CPUs a training job holds above its GPU-proportional
    #: share (TUNE's best case; leftovers are handed out after the array). False: idle
    #: CPUs only.
    trim_training: bool = True

    def __post_init__(self) -> None:
        if not 0.0 <= self.borrow_fraction <= 1.0:
            raise ValueError(f"borrow_fraction must be within [0, 1], got {self.borrow_fraction}")


def is_cpu_server(server: Server) -> bool:
    """A server of the CPU array itself (as opposed to a GPU server it borrows from)."""
    return server.pool == ServerPool.CPU_ONLY or server.capacity.gpus <= 0


@dataclass
class ArrayDecision:
    #: The trimmable training allocations after trimming (same keys as given).
    training: dict[int, Allocation]
    #: CPU-only jobs' allocations (one placement, no GPU, exactly what they asked for).
    allocations: dict[int, Allocation] = field(default_factory=dict)
    waiting: dict[int, str] = field(default_factory=dict)


def schedule_cpu_array(
    config: CpuArray,
    cpu_jobs: Sequence[Job],
    cluster: Cluster,
    share_cluster: Cluster,
    training: Mapping[int, Allocation],
    training_jobs: Mapping[int, Job],
    fixed: Mapping[int, Allocation],
    previous: Mapping[int, Allocation],
    open_ids: Collection[str],
    held_ids: Collection[str] = (),
) -> ArrayDecision:
    """One round of the CPU array.

    `cluster` holds every server at full capacity; `training` the mechanism's allocations
    (trimmable, proportional share taken on `share_cluster`, the cluster they were decided
    on); `fixed` allocations nobody touches (jobs kept on cordoned servers); `open_ids` the
    servers taking new work, `held_ids` those where running work may stay.
    """
    rnd = _ArrayRound(config, cluster, share_cluster, training, training_jobs, fixed, open_ids)
    jobs = sorted(cpu_jobs, key=lambda j: (j.arrival_s, j.id))
    stay = set(open_ids) | set(held_ids)
    for job in jobs:  # running ones first: they keep their place while it fits
        prev = previous.get(job.id)
        if prev is not None and len(prev.placements) == 1:
            sid = prev.placements[0].server_id
            if sid in stay and sid in rnd.free and rnd.fits(job, sid, config.trim_training):
                rnd.take(job, sid)
    queues: dict[str, list[Job]] = {}
    for job in jobs:  # a preempted job goes back to the head of its user's queue (CODA)
        if job.id not in rnd.out:
            queues.setdefault(user_of(job), []).append(job)
    for q in queues.values():
        q.sort(key=lambda j: (j.id not in previous, j.arrival_s, j.id))
    used: dict[str, Resources] = {}
    for job in jobs:
        if job.id in rnd.out:
            used[user_of(job)] = used.get(user_of(job), Resources()) + Resources(0, job.cpus, job.mem_gb)
    progressive_fill(queues, rnd.capacity(), used, rnd.place_new)
    for job in jobs:
        if job.id not in rnd.out:
            rnd.waiting[job.id] = rnd.reason(job)
    return ArrayDecision(rnd.training, rnd.out, rnd.waiting)


class _ArrayRound:
    """What is free, borrowed and trimmable on each server during one array decision."""

    def __init__(self, config: CpuArray, cluster: Cluster, share_cluster: Cluster,
                 training: Mapping[int, Allocation], training_jobs: Mapping[int, Job],
                 fixed: Mapping[int, Allocation], open_ids: Collection[str]) -> None:
        self.config = config
        self.servers = {s.id: s for s in cluster.servers}
        self.order = [s.id for s in cluster.servers if s.id in open_ids]
        self.free = {s.id: s.capacity for s in cluster.servers}
        for alloc in [*training.values(), *fixed.values()]:
            for sid, res in alloc.held:  # a packed pair's GPUs count once
                if sid in self.free:
                    self.free[sid] = self.free[sid] - res
        self.borrowed = {sid: 0.0 for sid in self.free}
        self.training = dict(training)
        self.jobs = training_jobs
        self.share_cluster = share_cluster
        self.prop_c = proportional_per_gpu(share_cluster)[0] if share_cluster.servers else 0.0
        #: The GPU type of each of the array's servers ("" untyped): on a cluster mixing types,
        #: a training job's guarantee is its landed type's proportional share.
        self.types = {s.id: s.gpu_type for s in cluster.servers}
        self.on_server: dict[str, list[int]] = {}
        for jid, alloc in sorted(training.items()):
            for p in alloc.placements:
                self.on_server.setdefault(p.server_id, []).append(jid)
        self.out: dict[int, Allocation] = {}
        self.waiting: dict[int, str] = {}

    def capacity(self) -> Resources:
        """The array's size, the denominator of every dominant share."""
        total = Resources()
        for sid in self.order:
            cap = self.servers[sid].capacity
            k = 1.0 if is_cpu_server(self.servers[sid]) else self.config.borrow_fraction
            total = total + Resources(0, cap.cpus * k, cap.mem_gb * k)
        return total

    # -- placing -----------------------------------------------------------------------------
    def place_new(self, job: Job) -> bool:
        """First fit: CPU servers, then idle CPUs of GPU servers, then trimmed ones."""
        cpu = [s for s in self.order if is_cpu_server(self.servers[s])]
        gpu = [s for s in self.order if not is_cpu_server(self.servers[s])]
        tiers = [(cpu, False), (gpu, False)] + ([(gpu, True)] if self.config.trim_training else [])
        for sids, trim in tiers:
            for sid in sids:
                if self.fits(job, sid, trim):
                    self.take(job, sid)
                    return True
        return False

    def fits(self, job: Job, sid: str, trim: bool) -> bool:
        free = self.free[sid]
        if job.mem_gb > free.mem_gb + EPS:
            return False
        if is_cpu_server(self.servers[sid]):
            return job.cpus <= free.cpus + EPS
        if job.cpus > self._limit_left(sid) + EPS:
            return False
        deficit = job.cpus - max(0.0, free.cpus)
        return deficit <= EPS or (trim and self._plan_trims(sid, deficit) is not None)

    def take(self, job: Job, sid: str) -> None:
        deficit = job.cpus - max(0.0, self.free[sid].cpus)
        if deficit > EPS and not is_cpu_server(self.servers[sid]):
            for jid, new in self._plan_trims(sid, deficit) or ():
                old = self.training[jid]
                self.free[sid] = self.free[sid] + (old.total - new.total)
                self.training[jid] = new
        p = Placement(sid, 0, job.cpus, job.mem_gb)
        self.free[sid] = self.free[sid] - p.resources
        if not is_cpu_server(self.servers[sid]):
            self.borrowed[sid] += job.cpus
        self.out[job.id] = Allocation(job.id, (p,))

    # -- borrowing ---------------------------------------------------------------------------
    def _limit_left(self, sid: str) -> float:
        return self.config.borrow_fraction * self.servers[sid].capacity.cpus - self.borrowed[sid]

    def _plan_trims(self, sid: str, deficit: float) -> list[tuple[int, Allocation]] | None:
        """Training allocations trimmed on `sid` to free `deficit` CPUs, largest surplus
        first; None when their surplus cannot cover it."""
        surplus = sorted(((self._surplus(jid, sid), jid) for jid in self.on_server.get(sid, ())),
                         key=lambda t: (-t[0], t[1]))
        plan: list[tuple[int, Allocation]] = []
        for extra, jid in surplus:
            if deficit <= EPS:
                break
            if extra <= EPS:
                continue
            cut = min(extra, deficit)
            trimmed = self._trimmed(jid, sid, cut)
            if trimmed is None:
                continue
            plan.append((jid, trimmed))
            deficit -= cut
        return plan if deficit <= EPS else None

    def _surplus(self, jid: int, sid: str) -> float:
        """CPUs job `jid` holds on `sid` above proportional CPUs for its GPUs there."""
        p = next(p for p in self.training[jid].placements if p.server_id == sid)
        prop_c = self.prop_c
        if self.share_cluster.typed:
            prop_c = share_per_gpu(self.share_cluster, self.types.get(sid, ""))[0]
        return max(0.0, p.cpus - prop_c * p.gpus)

    def _trimmed(self, jid: int, sid: str, cut: float) -> Allocation | None:
        """Job `jid`'s allocation with `cut` fewer CPUs on `sid`, if it is still at least as
        fast as under its GPU-proportional share (else None: it is not trimmed)."""
        old = self.training[jid]
        new = replace(old, placements=tuple(
            replace(p, cpus=p.cpus - cut) if p.server_id == sid else p for p in old.placements))
        job = self.jobs.get(jid)
        if job is None:
            return None
        # Its guarantee on the type it runs on (placement/surplus.py).
        return new if keeps_guarantee(job, self.share_cluster, self.types.get(sid, ""), *new.per_gpu) else None

    def reason(self, job: Job) -> str:
        """Why `job` waits, with the largest slot any open server could give it now."""
        def slot(sid: str) -> tuple[float, float]:
            free = self.free[sid]
            cpus = free.cpus if is_cpu_server(self.servers[sid]) else min(free.cpus, self._limit_left(sid))
            return max(0.0, cpus), max(0.0, free.mem_gb)

        best = max((slot(s) for s in self.order), default=None)
        room = f"the largest free slot is {best[0]:g} CPUs, {best[1]:g} GB" if best else "no schedulable node"
        return f"waiting for {job.cpus:g} CPUs and {job.mem_gb:g} GB free on one node: {room}"
