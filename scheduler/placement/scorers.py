"""Score plug-ins: rank the servers that passed the fit filter (lower key wins).

Kubernetes' scheduler framework separates filtering from scoring; we do the same so a new
placement idea (migration-minimising placement from Tesserae, say) is one more scorer.
"""
from __future__ import annotations

from typing import Callable

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


SCORERS: dict[str, Scorer] = {"best_fit": best_fit, "first_fit": first_fit, "alignment": alignment}
