"""Where profiling leases go (Synergy §3.1): a pure decision the daemon and the simulator share.

A job that arrives without a profile is run briefly while it measures its throughput at the
CPU counts its search picks. Synergy profiles "prior to the job's initial addition to the
scheduling queue"; on a real cluster that room is taken from somewhere, and two ways of
taking it cost the cluster its work (issue 14): a lease that takes CPUs placed or running
jobs hold (they are taken back, or run slower than their share), and leases that each take a
whole node one after another (many arrivals queue behind one node while GPUs idle).

The rule here, chosen over a per-round profiling budget or profiling at the proportional
share (which measures nothing above it):

* a lease takes only what is free: the caller passes what placed, running and relaunching
  jobs and the round already decided hold (`held`), and the leases placed before; and it
  leaves room for the jobs already queued (profiled, waiting for a round) at their
  GPU-proportional share, so profiling later arrivals does not hold up the queue;
* the asks are spread: each goes (in the order given: arrival) to the node where it would
  get the most CPUs, with its GPUs free and of a type it accepts, and a node's free CPUs are
  split between the leases placed on it in the same pass, so that two asks on a two-CPU node
  profile side by side instead of one after the other;
* a lease holds at least `min_cpus` (whole CPUs: a point is a CPU count) and at most
  `max_cpus`; the points above what it holds are left to the model (profiles/format.py
  extrapolates the curve), which is the price of never taking CPUs from work;
* where the GPU-proportional share is below one CPU per GPU (`sub_core`), a lease holds
  half a core (`SUB_CORE_LEASE_CPUS`, the share of one GPU on four GPUs and two cores), never
  more: it measures half a core and a quarter (the model and the job's online refinement
  take it above), and four arrivals on such a node profile side by side at once instead of
  two and then two (the others waited, slower than their share because of someone else's
  profiling: the paper's promise broken);
* memory: the node's free memory, split like the CPUs, in 3-decimal GB steps (what an
  agent can hold); where `sub_core`, at most the GPU-proportional share.

Deterministic: nodes in cluster order, ties to the first.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

from synergy.scheduler.model import EPS, Cluster, Placement, Resources

#: The most CPUs one lease holds (the paper profiles up to 24 CPUs per job).
MAX_PROFILE_CPUS = 24
#: The fewest: a lease measures at least one point besides its start.
MIN_PROFILE_CPUS = 1
#: The points below one CPU a lease may measure (CFS quota on the shared pool), highest
#: first, where the GPU-proportional share is below one CPU per GPU (`sub_core`).
SUB_CORE_POINTS = (0.5, 0.25)
#: The least a lease holds where `sub_core`: the highest point below one CPU, so that it
#: measures itself and the one below.
SUB_CORE_LEASE_CPUS = SUB_CORE_POINTS[0]


def sub_core(cluster: Cluster) -> bool:
    """Whether profiling on `cluster` measures points below one CPU: where its GPU-proportional
    share is below one CPU per GPU, demands finer than a core are what tells a loading-light
    job from a heavy one (throughput.whole_cpu_demand keeps whole CPUs elsewhere)."""
    return cluster.proportional_share(1).cpus < 1.0 - 1e-9


@dataclass(frozen=True)
class ProfilingAsk:
    """A job waiting to be profiled: its GPUs and the GPU types it accepts (empty = any)."""

    job_id: int
    gpus: int
    gpu_types: frozenset[str] = frozenset()


def place_leases(
    asks: Sequence[ProfilingAsk],
    cluster: Cluster,
    held: Mapping[str, Resources],
    max_cpus: int = MAX_PROFILE_CPUS,
    min_cpus: int = MIN_PROFILE_CPUS,
    queued: Sequence[Resources] = (),
    sub_core: bool = False,
) -> dict[int, Placement]:
    """Job id -> its lease, for the asks that fit in what `cluster`'s servers (those that take
    new work) have free beyond `held` (server id -> what work and earlier leases hold there)
    and beyond what `queued` jobs (each its GPU-proportional share, in queue order) would take
    if placed first, each on the first server it fits: jobs that arrived before and are
    profiled already are not kept waiting by later arrivals' leases. An ask left out waits
    for the next pass. `sub_core`: a lease may hold `SUB_CORE_LEASE_CPUS` when a whole CPU
    does not fit (module docstring)."""
    least = min(min_cpus, SUB_CORE_LEASE_CPUS) if sub_core else min_cpus
    free = {s.id: s.capacity - held.get(s.id, Resources()) for s in cluster.servers}
    for share in queued:
        home = next((sid for sid, room in free.items() if share.fits_in(room)), None)
        if home is not None:
            free[home] = free[home] - share
    types = {s.id: s.gpu_type for s in cluster.servers}
    on_node: dict[str, list[ProfilingAsk]] = {}
    for ask in asks:
        best, best_score = None, (0, 0.0)
        for sid, room in free.items():
            if ask.gpu_types and types[sid] not in ask.gpu_types:
                continue
            mine = on_node.get(sid, [])
            gpus_left = room.gpus - sum(a.gpus for a in mine)
            if gpus_left + EPS < ask.gpus:
                continue
            cpus = _share(room.cpus, len(mine) + 1, max_cpus, sub_core)
            # The most whole CPUs per lease wins, ties to the first node. Where leases are
            # half a core whatever the room (`sub_core`), a node still offering a whole CPU
            # per lease is chosen exactly as the whole-CPU rule would (spreading by the room
            # per lease there left a 2-GPU ask without a node whose GPUs a 1-GPU ask had
            # split, where whole CPUs placed both), and among nodes with less, the room per
            # lease spreads the asks: a sub-core pass places every ask a whole-CPU one does.
            whole = _share(room.cpus, len(mine) + 1, max_cpus)
            score = (whole, 0.0 if whole else room.cpus / (len(mine) + 1)) if sub_core else (cpus, 0.0)
            if cpus >= least - EPS and score > best_score and room.mem_gb > EPS:
                best, best_score = sid, score
        if best is not None:
            on_node.setdefault(best, []).append(ask)
    leases: dict[int, Placement] = {}
    for sid, mine in on_node.items():
        room = free[sid]
        cpus = _share(room.cpus, len(mine), max_cpus, sub_core)
        mem = math.floor(room.mem_gb / len(mine) * 1000) / 1000
        for ask in mine:
            # Where `sub_core`, no more memory than the share either: a lease's 1.7 GB of a
            # 4 GB node left a job profiled a moment before no room to run on (the profile's
            # memory axis comes from the cache model, not from memory held under the lease).
            own = min(mem, math.floor(cluster.proportional_share(ask.gpus).mem_gb * 1000) / 1000) if sub_core else mem
            leases[ask.job_id] = Placement(sid, ask.gpus, float(cpus), own)
    return leases


def place_after_round(
    asks: Sequence[ProfilingAsk],
    granted: frozenset[int],
    cluster: Cluster,
    held: Mapping[str, Resources],
    queued: Sequence[Resources] = (),
    sub_core: bool = False,
) -> dict[int, Placement]:
    """`place_leases` for `asks` (arrival order) once a round has decided: the asks whose
    stand-ins the round placed (`granted`, `RoundInput.last`) first, in what `held` leaves,
    ahead of `queued` (the round ranked them above the queued jobs it left waiting); then the
    others, behind `queued` and the shares of granted asks that found no room yet, so that
    neither a queued job nor a granted arrival is kept waiting by a later ask. Without
    `granted`, exactly `place_leases(asks, cluster, held, queued=queued, ...)`. The daemon
    (daemon/profiling.py) and the simulator (simulator/profiling.py) both place through it."""
    first = [a for a in asks if a.job_id in granted]
    if not first:
        return place_leases(asks, cluster, held, queued=queued, sub_core=sub_core)
    leases = place_leases(first, cluster, held, sub_core=sub_core)
    after = dict(held)
    for p in leases.values():
        after[p.server_id] = after.get(p.server_id, Resources()) + p.resources
    waiting = [cluster.proportional_share(a.gpus) for a in first if a.job_id not in leases]
    rest = [a for a in asks if a.job_id not in granted]
    if rest:
        leases.update(place_leases(rest, cluster, after, queued=[*waiting, *queued], sub_core=sub_core))
    return leases


def _share(free_cpus: float, n: int, max_cpus: int, sub_core: bool = False) -> float:
    """Whole CPUs each of `n` leases gets of `free_cpus`, at most `max_cpus`; where
    `sub_core`, `SUB_CORE_LEASE_CPUS` if that fits (else 0), never more: there a whole CPU is
    two GPUs' share, and an arrival a moment later found the node's CPUs held by two
    whole-CPU leases and waited for their profiling with GPUs free (the physical run's
    static trace: the first pass saw two asks of eight and gave each a core)."""
    if sub_core:
        return SUB_CORE_LEASE_CPUS if free_cpus / n + 1e-9 >= SUB_CORE_LEASE_CPUS else 0
    return min(max_cpus, math.floor(free_cpus / n + 1e-9))
