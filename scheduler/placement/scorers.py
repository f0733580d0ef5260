"""Score plug-ins: rank the servers that passed the fit filter (lower key wins).

Kubernetes' scheduler framework separates filtering from scoring; we do the same so a new
placement idea (migration-minimising placement from Tesserae, say) is one more scorer.
"""
from __future__ import annotations

from dataclasses import dataclass
from heapq import heappop, heappush
from typing import Callable, Iterable

from synergy.scheduler.model import EPS
from synergy.scheduler.state import ClusterState

#: (state, server index, gpus, cpus, mem_gb) -> sort key; the smallest key is chosen.
Scorer = Callable[[ClusterState, int, float, float, float], tuple]


def best_fit(state: ClusterState, i: int, g: float, c: float, m: float) -> tuple:
    """Least free resources left after placing (normalised per dimension): TUNE's choice,
    which keeps large holes open for later jobs and limits fragmentation."""
    left = (
        (state.free_g[i] - g) / state.cap_g[i] if state.cap_g[i] else 0.0,
        (state.free_c[i] - c) / state.cap_c[i] if state.cap_c[i] else 0.0,
        (state.free_m[i] - m) / state.cap_m[i] if state.cap_m[i] else 0.0,
    )
    return (left[0], left[0] + left[1] + left[2], i)


def first_fit(state: ClusterState, i: int, g: float, c: float, m: float) -> tuple:
    """The lowest-numbered server that fits: the classic first-fit of Synergy-GREEDY."""
    return (i,)


def alignment(state: ClusterState, i: int, g: float, c: float, m: float) -> tuple:
    """Tetris: prefer the server whose free vector is most aligned with the demand."""
    dot = 0.0
    for demand, free, cap in ((g, state.free_g[i], state.cap_g[i]),
                              (c, state.free_c[i], state.cap_c[i]),
                              (m, state.free_m[i], state.cap_m[i])):
        if cap:
            dot += (demand / cap) * (free / cap)
    return (-dot, i)


def avoid_stranding(base: Scorer, cpus_per_gpu: float, mem_per_gpu: float) -> Scorer:
    """`base`, except that servers this placement would leave with free GPUs but too little
    CPU or memory to run even the least demanding job of the round (`cpus_per_gpu`,
    `mem_per_gpu` per GPU) come last.

    Plain best fit on GPUs stacks CPU-hungry jobs together: two 12-CPU jobs fill a 24-CPU
    server's cores and strand its six other GPUs, which TUNE then has to win back by
    reverting them to proportional. Keeping every server able to host the smallest demand is
    the "minimising fragmentation" of §4.2 along all three dimensions.
    """

    def score(state: ClusterState, i: int, g: float, c: float, m: float) -> tuple:
        left_g = state.free_g[i] - g
        short_c = cpus_per_gpu * left_g - (state.free_c[i] - c)
        short_m = mem_per_gpu * left_g - (state.free_m[i] - m)
        return (short_c > 1e-9 or short_m > 1e-9, *base(state, i, g, c, m))

    return StrandingBestFit(cpus_per_gpu, mem_per_gpu) if base is best_fit else score


@dataclass(frozen=True)
class StrandingBestFit:
    """`avoid_stranding(best_fit, ...)`, TUNE's default scorer, as one object: the same key
    from the same expressions in the same order (bit-identical; tests/test_placement_speed.py
    checks it against the composition), plus `best_on`, a whole placement search in one
    call, remembered between calls. TUNE scores millions of servers per
    simulation; the two calls and the tuple unpacking per server were a fifth of the Fig. 9
    run, and the scan itself a tenth after that (docs/simulator.md, "Speed")."""

    cpus_per_gpu: float
    mem_per_gpu: float

    def __call__(self, state: ClusterState, i: int, g: float, c: float, m: float) -> tuple:
        fg, fc, fm = state.free_g[i], state.free_c[i], state.free_m[i]
        cg, cc, cm = state.cap_g[i], state.cap_c[i], state.cap_m[i]
        left_g = fg - g
        short_c = self.cpus_per_gpu * left_g - (fc - c)
        short_m = self.mem_per_gpu * left_g - (fm - m)
        l0 = left_g / cg if cg else 0.0
        l1 = (fc - c) / cc if cc else 0.0
        l2 = (fm - m) / cm if cm else 0.0
        return (short_c > 1e-9 or short_m > 1e-9, l0, l0 + l1 + l2, i)

    def best_on(self, state: ClusterState, g: float, c: float, m: float) -> int:
        """The server of `state` that fits (`ClusterState.fits`) with the smallest key; -1
        if none: what scoring every server gives, remembered between calls.

        TUNE packs jobs largest demand first, so runs of jobs with the same demand follow
        each other, and each placement changes one server. The keys of one demand are kept
        in a heap (in `state.searches`, for the state's lifetime), updated for the servers
        `state.changed` names since the last call; an entry whose server has a newer key is
        dropped when it comes to the top. The scan is inlined: keep it in step with
        `__call__` and `ClusterState.fits` (tests/test_placement_speed.py checks both)."""
        tag = (self.cpus_per_gpu, self.mem_per_gpu, g, c, m)
        memo = state.searches.get(tag)
        changed = state.changed
        if memo is None or len(changed) - memo[0] > len(state.ids):  # first look, or a long absence
            keys: list[tuple | None] = [None] * len(state.ids)
            heap: list[tuple] = []
            memo = state.searches[tag] = [len(changed), keys, heap]
            servers: Iterable[int] = range(len(state.ids))
        else:
            seen, keys, heap = memo
            servers = changed[seen:]
            memo[0] = len(changed)
        free_g, free_c, free_m = state.free_g, state.free_c, state.free_m
        cap_g, cap_c, cap_m = state.cap_g, state.cap_c, state.cap_m
        per_c, per_m = self.cpus_per_gpu, self.mem_per_gpu
        for i in servers:
            fg, fc, fm = free_g[i], free_c[i], free_m[i]
            if not (g <= fg + EPS and c <= fc + EPS and m <= fm + EPS):
                keys[i] = None
                continue
            cg, cc, cm = cap_g[i], cap_c[i], cap_m[i]
            left_g = fg - g
            short_c = per_c * left_g - (fc - c)
            short_m = per_m * left_g - (fm - m)
            l0 = left_g / cg if cg else 0.0
            l1 = (fc - c) / cc if cc else 0.0
            l2 = (fm - m) / cm if cm else 0.0
            keys[i] = key = (short_c > 1e-9 or short_m > 1e-9, l0, l0 + l1 + l2, i)
            heappush(heap, key)
        while heap:
            top = heap[0]
            if keys[top[3]] is top:
                return top[3]
            heappop(heap)  # its server changed since
        return -1


SCORERS: dict[str, Scorer] = {"best_fit": best_fit, "first_fit": first_fit, "alignment": alignment}
