"""Which loaned servers to return when the inference cluster asks for N of them (Lyra §4).

Reclaiming a server preempts every job with a share on it, wherever else that job runs.
Picking the N servers that preempt the fewest jobs is a knapsack with dependent item
values (NP-hard): two servers that host the same job cost one preemption together, not two.

Lyra's heuristic gives each server a *preemption cost*, the sum over its jobs of the job's
server fraction (1 / the number of servers the job spans), so coupled servers of one job
look cheap together. It then repeatedly picks the cheapest server, preempts its jobs
everywhere and recomputes the costs, until N servers are picked (Table 1, Figure 5).

What `plan_reclaim` guarantees (and the tests check on brute-forced instances):
- where the candidate sets are few (C(servers, N) <= `exact_limit`), the exact optimum:
  fewest preempted jobs, then fewest GPUs vacated beyond the N servers;
- otherwise the better of Lyra's greedy and the independent 0-1 knapsack (the N servers
  with the fewest jobs), so never more preemptions than the sum of the N smallest job
  counts, the optimum for N = 1, and no preemption when N servers are already empty.

Pure: servers and allocations in, a plan out. No clock, no I/O.
"""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from itertools import combinations
from typing import Callable, Mapping, Sequence

from synergy.scheduler.model import Allocation, Server

#: Above this many candidate server sets, the heuristic replaces the exhaustive search.
EXACT_LIMIT = 2000


class Cost(str, enum.Enum):
    """The server preemption costs Table 1 compares; Lyra's is SERVER_FRACTION."""

    #: Number of jobs on the server: the 0-1 knapsack's independent item value.
    JOB_COUNT = "job_count"
    #: Sum of the fractions of each job's GPUs on the server (misses the job count).
    GPU_FRACTION = "gpu_fraction"
    #: Sum of 1 / (servers the job spans) over the server's jobs (Lyra).
    SERVER_FRACTION = "server_fraction"


@dataclass(frozen=True)
class ReclaimPlan:
    """Servers to hand back and the jobs that must be preempted for it."""

    servers: tuple[str, ...]
    preempted: frozenset[int]
    #: GPUs vacated on servers that are not handed back (Lyra §7.3's collateral damage).
    collateral_gpus: int


class _Layout:
    """Who holds how many GPUs where, with preempted jobs removed as a plan grows."""

    def __init__(self, servers: Sequence[Server], allocations: Mapping[int, Allocation]) -> None:
        self.ids = [s.id for s in servers]
        self.jobs_on: dict[str, dict[int, int]] = {sid: {} for sid in self.ids}
        self.spans: dict[int, dict[str, int]] = {}
        for jid in sorted(allocations):
            where: dict[str, int] = {}
            for p in allocations[jid].placements:
                where[p.server_id] = where.get(p.server_id, 0) + int(p.gpus)
            self.spans[jid] = where
            for sid, g in where.items():
                if sid in self.jobs_on:
                    self.jobs_on[sid][jid] = g

    def cost(self, sid: str, kind: Cost, gone: frozenset[int] | set[int]) -> float:
        jobs = [j for j in self.jobs_on[sid] if j not in gone]
        if kind == Cost.JOB_COUNT:
            return float(len(jobs))
        if kind == Cost.GPU_FRACTION:
            return sum(self.jobs_on[sid][j] / max(1, sum(self.spans[j].values())) for j in jobs)
        return sum(1.0 / len(self.spans[j]) for j in jobs)

    def preempted_by(self, picked: Sequence[str]) -> frozenset[int]:
        return frozenset(j for sid in picked for j in self.jobs_on[sid])

    def collateral(self, picked: Sequence[str], preempted: frozenset[int]) -> int:
        chosen = set(picked)
        return sum(g for j in preempted for sid, g in self.spans[j].items() if sid not in chosen)

    def plan(self, picked: Sequence[str]) -> ReclaimPlan:
        preempted = self.preempted_by(picked)
        return ReclaimPlan(tuple(picked), preempted, self.collateral(picked, preempted))


def server_costs(servers: Sequence[Server], allocations: Mapping[int, Allocation], kind: Cost) -> dict[str, float]:
    """Each server's preemption cost under `kind` (one column of Lyra's Table 1)."""
    layout = _Layout(servers, allocations)
    return {sid: layout.cost(sid, kind, frozenset()) for sid in layout.ids}


def greedy_reclaim(
    servers: Sequence[Server], allocations: Mapping[int, Allocation], n: int, kind: Cost = Cost.SERVER_FRACTION
) -> ReclaimPlan:
    """Lyra's heuristic: pick the cheapest server, preempt its jobs everywhere, recompute.

    Ties on cost go to the server whose preemptions vacate the fewest GPUs that will not
    be handed back (Lyra's collateral damage): a server whose job also empties another
    loaned server we still need counts that server as handed back, which is what makes
    Figure 5 pick servers 1 and 2 together. Remaining ties: the servers' given order.
    """
    layout = _Layout(servers, _check(servers, n, allocations))
    picked: list[str] = []
    gone: set[int] = set()
    while len(picked) < n:
        need = n - len(picked)
        best: tuple[float, int, int] | None = None
        best_sid = ""
        for pos, sid in enumerate(layout.ids):
            if sid in picked:
                continue
            key = (round(layout.cost(sid, kind, gone), 9), _waste(layout, sid, picked, gone, need), pos)
            if best is None or key < best:
                best, best_sid = key, sid
        picked.append(best_sid)
        gone |= set(layout.jobs_on[best_sid])
    return layout.plan(picked)


def _waste(layout: _Layout, sid: str, picked: Sequence[str], gone: set[int], need: int) -> int:
    """GPUs that picking `sid` vacates elsewhere and that `need - 1` further picks of the
    loaned servers it empties would not hand back."""
    fresh = [j for j in layout.jobs_on[sid] if j not in gone]
    after = gone | set(fresh)
    freed: dict[str, int] = {}
    for j in fresh:
        for other, g in layout.spans[j].items():
            if other != sid:
                freed[other] = freed.get(other, 0) + g
    emptied = sorted(
        (g for other, g in freed.items()
         if other in layout.jobs_on and other not in picked and all(j in after for j in layout.jobs_on[other])),
        reverse=True,
    )
    return sum(freed.values()) - sum(emptied[: need - 1])


def knapsack_reclaim(servers: Sequence[Server], allocations: Mapping[int, Allocation], n: int) -> ReclaimPlan:
    """The independent 0-1 knapsack: the n servers with the fewest jobs (given order on ties)."""
    layout = _Layout(servers, _check(servers, n, allocations))
    order = sorted(range(len(layout.ids)), key=lambda i: (len(layout.jobs_on[layout.ids[i]]), i))
    return layout.plan([layout.ids[i] for i in order[:n]])


def exact_reclaim(servers: Sequence[Server], allocations: Mapping[int, Allocation], n: int) -> ReclaimPlan:
    """Every n-subset: fewest preemptions, then least collateral, then the first in order."""
    layout = _Layout(servers, _check(servers, n, allocations))
    best: ReclaimPlan | None = None
    for combo in combinations(layout.ids, n):
        plan = layout.plan(combo)
        if best is None or _rank(plan) < _rank(best):
            best = plan
    assert best is not None
    return best


def plan_reclaim(
    servers: Sequence[Server], allocations: Mapping[int, Allocation], n: int, exact_limit: int = EXACT_LIMIT
) -> ReclaimPlan:
    """The servers to return: exact where the search is small, else the better heuristic.

    `servers` are the loaned servers that may be returned, in a deterministic order (ties
    follow it); `allocations` are the running jobs (shares on other servers count towards
    a job's span and the collateral damage).
    """
    _check(servers, n, allocations)
    if math.comb(len(servers), n) <= exact_limit:
        return exact_reclaim(servers, allocations, n)
    candidates: list[Callable[[], ReclaimPlan]] = [
        lambda: greedy_reclaim(servers, allocations, n),
        lambda: knapsack_reclaim(servers, allocations, n),
    ]
    return min((make() for make in candidates), key=_rank)


def _rank(plan: ReclaimPlan) -> tuple[int, int]:
    return (len(plan.preempted), plan.collateral_gpus)


def _check(servers: Sequence[Server], n: int, allocations: Mapping[int, Allocation]) -> Mapping[int, Allocation]:
    if not 0 <= n <= len(servers):
        raise ValueError(f"cannot reclaim {n} of {len(servers)} loaned servers")
    if len({s.id for s in servers}) != len(servers):
        raise ValueError("loaned servers must have distinct ids")
    return allocations
