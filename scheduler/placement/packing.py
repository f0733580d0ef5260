"""Packing (Tesserae §4.2, Algorithm 4): pending jobs share the GPUs of placed ones.

After the mechanism has placed what it can without sharing (Listing 1, lines 5-12), each job
still pending may run on the very GPUs of one placed job, when a pairwise profile
(`profiles/pairs.py`) says the pair's combined normalised throughput beats running the placed
job alone (sum > 1). Which pending job joins which placed one is a maximum-weight bipartite
matching, placed x pending, solved with the Hungarian method
(`scipy.optimize.linear_sum_assignment`). An edge (h, g) exists only when
  * both need the same number of GPUs (Tesserae: g runs on exactly h's GPUs),
  * both are fixed-size training jobs (not elastic, not CPU-only) and neither is `no_share`,
  * h is not already packed (at most two jobs per GPU: `synergy.common.tasks.MAX_JOBS_PER_GPU`,
    the limit the agent enforces too), and
  * the pair is profiled with a combined normalised throughput above 1 (the edge's weight).

The guest runs on the host's servers with the host's GPU counts, and needs CPUs and memory of
its own there: its TUNE demand per GPU (best case, never slower than its GPU-proportional
share) when that is free on every one of the host's servers, else its GPU-proportional share
when that is free, else the edge does not exist (the job stays pending). Nothing placed is
moved or shrunk: packing only adds allocations. Edges are filtered against what is free
before the matching; since two guests may want CPUs of the same server, matched pairs are
committed in the policy order of their hosts, re-checked, and the hosts and guests a conflict
left out are matched again against what is left, until a matching commits nothing.

Scale: the weights of a guest depend only on (GPUs, model, profile), so guests of one such
class are interchangeable; each class keeps at most as many columns as there are hosts of its
GPU count (the first ones in policy order, which are also the ones it gets). The matrix is
solved per GPU count, the edges never crossing counts.

Pure and deterministic: the same jobs in the same policy order give the same plan.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Mapping, Sequence

import numpy as np

from synergy.scheduler.model import EPS, Allocation, Cluster, Job, JobKind, Placement, Resources
from synergy.scheduler.placement.gpu_types import accepts, is_typed, on_type
from synergy.scheduler.profiles.pairs import PairTable
from synergy.scheduler.throughput import best_case_per_gpu, proportional_per_gpu

#: A pair is worth packing only when together the two do more than one job alone.
MIN_COMBINED = 1.0


def can_share(job: Job) -> bool:
    """May the job take part in packing at all (as host or guest)?"""
    return job.kind == JobKind.TRAINING and not job.no_share and job.gpus > 0


def pair_weight(pairs: PairTable, host: Job, guest: Job) -> float:
    """The edge weight of (host, guest): their combined normalised throughput when it is
    above MIN_COMBINED and their GPU counts are equal; 0 (no edge) otherwise."""
    return _gain(pairs, host.model, guest.model) if host.gpus == guest.gpus else 0.0


def _gain(pairs: PairTable, a: str, b: str) -> float:
    """The combined normalised throughput of models a and b when above MIN_COMBINED, else 0."""
    w = pairs.combined(a, b)
    return w if w > MIN_COMBINED + EPS else 0.0


def max_weight_pairs(weights: np.ndarray) -> list[tuple[int, int]]:
    """Algorithm 4's matching: (row, column) pairs of a maximum-weight matching over the
    positive entries of `weights` (0 = no edge), each row and column used at most once."""
    if weights.size == 0 or not (weights > 0).any():
        return []
    # imported here, not at the top: the CLI loads the core's registry and must not load scipy
    from scipy.optimize import linear_sum_assignment

    rows, cols = linear_sum_assignment(weights, maximize=True)
    return [(int(r), int(c)) for r, c in zip(rows, cols) if weights[r, c] > 0]


def pack(
    allocations: Mapping[int, Allocation], ordered: Sequence[Job], cluster: Cluster, pairs: PairTable
) -> dict[int, Allocation]:
    """`allocations` (the mechanism's, on `cluster`) plus the packed allocations of jobs of
    `ordered` (the policy's order) that it left pending."""
    out = dict(allocations)
    server_ids = {s.id for s in cluster.servers}
    free = _free(cluster, allocations)
    demand = _Demand(cluster)
    hosts = [j for j in ordered if j.id in allocations and can_share(j)
             and allocations[j.id].packed_with is None
             and all(p.server_id in server_ids for p in allocations[j.id].placements)]
    guests = [j for j in ordered if j.id not in allocations and can_share(j)]
    while hosts and guests:
        matched = _match(hosts, guests, allocations, free, demand, pairs)
        committed: set[int] = set()
        for host, guest in matched:  # hosts' policy order
            alloc = _fit(guest, allocations[host.id], free, demand)
            if alloc is None:
                continue
            for sid, res in alloc.held:
                free[sid] = free[sid] - res
            out[guest.id] = alloc
            committed.update((host.id, guest.id))
        if not committed or len(committed) == 2 * len(matched):
            break
        hosts = [j for j in hosts if j.id not in committed]
        guests = [j for j in guests if j.id not in committed]
    return out


def pack_per_type(
    allocations: Mapping[int, Allocation], ordered: Sequence[Job], cluster: Cluster, pairs: PairTable
) -> dict[int, Allocation]:
    """`pack` on a cluster that may mix GPU types: a guest shares only the GPUs of a type it
    accepts, and its CPUs and memory are sized as on that type (its profile on the type and
    the type's GPU-proportional share), so packing is run once per type, types in name order.
    An untyped cluster with untyped jobs is one `pack`."""
    if not is_typed(cluster, ordered):
        return pack(allocations, ordered, cluster, pairs)
    out = dict(allocations)
    for gpu_type in cluster.gpu_types:
        sub = cluster.of_type(gpu_type)
        ids = {s.id for s in sub.servers}
        here = {jid: a for jid, a in out.items() if a.placements and all(p.server_id in ids for p in a.placements)}
        jobs = [on_type(j, gpu_type) for j in ordered
                if accepts(j, gpu_type) and (j.id in here or j.id not in out)]
        out.update(pack(here, jobs, sub, pairs))
    return out


# -- helpers ---------------------------------------------------------------------------------------


class _Demand:
    """A guest's candidate CPUs and GB per GPU, best first, cached per profile for one pass."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.proportional = proportional_per_gpu(cluster)
        self._cache: dict[int, tuple[tuple[float, float], ...]] = {}

    def of(self, job: Job) -> tuple[tuple[float, float], ...]:
        key = id(job.profile)
        hit = self._cache.get(key)
        if hit is None:
            best = best_case_per_gpu(job, self.cluster)
            hit = (best,) if best == self.proportional else (best, self.proportional)
            self._cache[key] = hit
        return hit


def _free(cluster: Cluster, allocations: Mapping[int, Allocation]) -> dict[str, Resources]:
    free = {s.id: s.capacity for s in cluster.servers}
    for alloc in allocations.values():
        for sid, res in alloc.held:
            if sid in free:
                free[sid] = free[sid] - res
    return free


def _per_gpu_fits(host: Allocation, per_gpu: tuple[float, float], free: Mapping[str, Resources]) -> bool:
    c, m = per_gpu
    need: dict[str, tuple[float, float]] = defaultdict(lambda: (0.0, 0.0))
    for p in host.placements:
        nc, nm = need[p.server_id]
        need[p.server_id] = (nc + c * p.gpus, nm + m * p.gpus)
    return all(nc <= free[sid].cpus + EPS and nm <= free[sid].mem_gb + EPS for sid, (nc, nm) in need.items())


def _fit(guest: Job, host: Allocation, free: Mapping[str, Resources], demand: _Demand) -> Allocation | None:
    """The guest's allocation on the host's GPUs at its first demand that is free, or None."""
    for c, m in demand.of(guest):
        if _per_gpu_fits(host, (c, m), free):
            return Allocation(guest.id, tuple(Placement(p.server_id, p.gpus, c * p.gpus, m * p.gpus)
                                              for p in host.placements), packed_with=host.job_id)
    return None


def _room(host: Allocation, free: Mapping[str, Resources]) -> tuple[float, float]:
    """The most CPUs and GB per GPU a guest of `host` can get: a guest wanting (c, m) per
    GPU fits iff c and m are within it on every one of the host's servers."""
    gpus: dict[str, int] = defaultdict(int)
    for p in host.placements:
        gpus[p.server_id] += p.gpus
    return (min(free[sid].cpus / g for sid, g in gpus.items()), min(free[sid].mem_gb / g for sid, g in gpus.items()))


def _match(
    hosts: Sequence[Job], guests: Sequence[Job], allocations: Mapping[int, Allocation],
    free: Mapping[str, Resources], demand: _Demand, pairs: PairTable,
) -> list[tuple[Job, Job]]:
    """One maximum-weight matching against `free`, per GPU count; (host, guest) pairs in the
    hosts' order."""
    host_rank = {h.id: k for k, h in enumerate(hosts)}
    classes: dict[tuple[int, str, int], list[Job]] = {}
    for g in guests:  # policy order within each class
        classes.setdefault((g.gpus, g.model, id(g.profile)), []).append(g)
    rows_by_gpus: dict[int, list[Job]] = defaultdict(list)
    for h in hosts:
        rows_by_gpus[h.gpus].append(h)
    pairs_out: list[tuple[Job, Job]] = []
    for gpus in sorted(rows_by_gpus):
        rows = rows_by_gpus[gpus]
        class_keys = [k for k in classes if k[0] == gpus]
        if not class_keys:
            continue
        rooms = np.array([_room(allocations[h.id], free) for h in rows]).reshape(len(rows), 2)
        models = sorted({h.model for h in rows})
        row_model = np.array([models.index(h.model) for h in rows])
        cols: list[tuple[int, Job]] = []  # (class index, guest)
        weights_by_class: list[np.ndarray] = []
        for ci, key in enumerate(class_keys):
            members = classes[key]
            sample = members[0]
            by_model = np.array([_gain(pairs, m, sample.model) for m in models])
            w = by_model[row_model]
            fits = np.zeros(len(rows), dtype=bool)
            for c, m in demand.of(sample):
                fits |= (rooms[:, 0] >= c - EPS) & (rooms[:, 1] >= m - EPS)
            w = np.where(fits, w, 0.0)
            weights_by_class.append(w)
            k = int((w > 0).sum())
            cols.extend((ci, g) for g in members[:k])
        if not cols:
            continue
        per_class = np.stack(weights_by_class, axis=1)  # rows x classes
        matrix = per_class[:, [ci for ci, _ in cols]]
        matched = max_weight_pairs(matrix)
        # Guests of one class are interchangeable: the class's best-ranked guests go to its
        # best-ranked hosts, whichever columns the solver happened to pick.
        by_class: dict[int, list[Job]] = defaultdict(list)
        for r, c in matched:
            by_class[cols[c][0]].append(rows[r])
        for ci, hs in by_class.items():
            hs.sort(key=lambda h: host_rank[h.id])
            pairs_out.extend(zip(hs, classes[class_keys[ci]]))
    pairs_out.sort(key=lambda hg: host_rank[hg[0].id])
    return pairs_out
