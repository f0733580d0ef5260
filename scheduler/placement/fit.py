"""Filter and bind: find servers for a job's per-GPU demand, consolidated or split.

Allocation requirements (§4.2): a single-GPU job lives on one server; a multi-GPU job is
consolidated on one server when possible, otherwise split over the fewest servers with CPU
and memory proportional to the GPUs on each (ranks run at the speed of the slowest one).
"""
from __future__ import annotations

from synergy.scheduler.model import Placement
from synergy.scheduler.placement.scorers import Scorer
from synergy.scheduler.state import ClusterState


def consolidated(
    state: ClusterState, gpus: int, cpus_per_gpu: float, mem_per_gpu: float, scorer: Scorer
) -> tuple[Placement, ...] | None:
    c, m = cpus_per_gpu * gpus, mem_per_gpu * gpus
    best_on = getattr(scorer, "best_on", None)  # a scorer's own search (scorers.StrandingBestFit)
    if best_on is not None:
        best_i = best_on(state, gpus, c, m)
    else:
        best_key, best_i = None, -1
        for i in state.candidates(gpus):
            if state.fits(i, gpus, c, m):
                key = scorer(state, i, gpus, c, m)
                if best_key is None or key < best_key:
                    best_key, best_i = key, i
    if best_i < 0:
        return None
    return (Placement(state.ids[best_i], gpus, c, m),)


def split(
    state: ClusterState, gpus: int, cpus_per_gpu: float, mem_per_gpu: float
) -> tuple[Placement, ...] | None:
    """Fewest servers: take servers by most free GPUs, each piece proportional to its GPUs."""
    order = list(state.by_free_gpus(1, descending=True))
    pieces: list[Placement] = []
    need = gpus
    for i in order:
        if need <= 0:
            break
        k = int(min(state.free_g[i] + 1e-9, need))
        while k > 0 and not state.fits(i, k, cpus_per_gpu * k, mem_per_gpu * k):
            k -= 1
        if k <= 0:
            continue
        pieces.append(Placement(state.ids[i], k, cpus_per_gpu * k, mem_per_gpu * k))
        need -= k
    return tuple(pieces) if need <= 0 else None


def place(
    state: ClusterState, gpus: int, cpus_per_gpu: float, mem_per_gpu: float, scorer: Scorer
) -> tuple[Placement, ...] | None:
    """Consolidate if any server fits the whole job, else split; None when neither works."""
    found = consolidated(state, gpus, cpus_per_gpu, mem_per_gpu, scorer)
    if found is None and gpus > 1:
        found = split(state, gpus, cpus_per_gpu, mem_per_gpu)
    return found
