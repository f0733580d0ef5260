"""Which loaned servers to return when the inference cluster asks for N of them (Lyra §4).

Reclaiming a server takes every job share on it. A job that cannot do without those shares
is preempted, wherever else it runs. Picking the N servers that preempt the fewest jobs is
a knapsack with dependent item values (NP-hard): two servers that host the same job cost
one preemption together, not two.

Lyra's heuristic gives each server a *preemption cost*, the sum over its jobs of the job's
server fraction (1 / the number of servers the job spans), so coupled servers of one job
look cheap together. It then repeatedly picks the cheapest server, preempts its jobs
everywhere and recomputes the costs, until N servers are picked (Table 1, Figure 5).

Scaling in (Lyra §1, §2.2, §5.3: "we first kill the elastic workers running on on-loan
servers since stopping them does not lead to any job-level preemption"): an elastic job
(`scaling.is_elastic`) that still has at least `min_gpus` on the servers kept, in whole
workers, drops its workers on the reclaimed ones and runs on at the largest of its sizes
(`scaling.sizes`) that fits there; the plan says so (`ReclaimPlan.shrunk`). How the costs
treat it: a job that would scale in contributes nothing to a server's preemption cost (it
is not a preemption), and among servers of equal cost the one causing fewer scale-ins goes
first; a job that scaled in at an earlier pick and would drop below its minimum at the
next one counts again, at its server fraction (over all the servers it spanned). Without
elastic jobs every cost is exactly Table 1's. A packed job (`Allocation.packed_with`) is
never scaled in: its GPUs are another job's.

What `plan_reclaim` guarantees (and the tests check on brute-forced instances):
- where the candidate sets are few (C(servers, N) <= `exact_limit`), the exact optimum:
  fewest preempted jobs, then fewest scale-ins, then fewest GPUs vacated beyond the N
  servers;
- otherwise the best of Lyra's greedy and the independent 0-1 knapsack, each with and
  without scale-in in its costs, so: never more preemptions than without scale-in, never
  more than the sum of the N smallest job counts, the optimum for N = 1, and no
  preemption when N servers are already empty;
- a scaled-in job keeps at least its `min_gpus`, and no returned server keeps a job.

Pure: servers, allocations and the jobs' elastic ranges in, a plan out. No clock, no I/O.
"""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field, replace
from itertools import combinations
from typing import Callable, Collection, Mapping, Sequence

from synergy.scheduler.elastic.scaling import is_elastic, sizes
from synergy.scheduler.model import Allocation, Job, Placement, Server

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
    """Servers to hand back and, per job with a share on them: preempt, or shrink to N GPUs."""

    servers: tuple[str, ...]
    preempted: frozenset[int]
    #: GPUs vacated on servers that are not handed back (Lyra §7.3's collateral damage):
    #: all of a preempted job's there, and what a scaled-in job trims to whole workers.
    collateral_gpus: int
    #: Elastic jobs scaled in instead of preempted: job id -> the GPUs it keeps, all on
    #: servers not handed back (`shrunk_allocation` says which).
    shrunk: Mapping[int, int] = field(default_factory=dict)


class _Layout:
    """Who holds how many GPUs where, and what each job does when a set of servers goes."""

    def __init__(self, servers: Sequence[Server], allocations: Mapping[int, Allocation],
                 jobs: Mapping[int, Job] | None = None) -> None:
        self.ids = [s.id for s in servers]
        self.jobs_on: dict[str, dict[int, int]] = {sid: {} for sid in self.ids}
        self.spans: dict[int, dict[str, int]] = {}
        #: The GPU counts each job that may scale in can run at, ascending.
        self.sizes: dict[int, tuple[int, ...]] = {}
        jobs = jobs or {}
        for jid in sorted(allocations):
            alloc = allocations[jid]
            where: dict[str, int] = {}
            for p in alloc.placements:
                where[p.server_id] = where.get(p.server_id, 0) + int(p.gpus)
            self.spans[jid] = where
            for sid, g in where.items():
                if sid in self.jobs_on:
                    self.jobs_on[sid][jid] = g
            job = jobs.get(jid)
            if job is not None and is_elastic(job) and alloc.packed_with is None:
                self.sizes[jid] = tuple(sizes(job))

    def keeps(self, jid: int, gone: Collection[str]) -> int | None:
        """GPUs job `jid` runs on when the servers in `gone` are taken; None: preempted."""
        fits = [g for g in self.sizes.get(jid, ()) if g <= self.left(jid, gone)]
        return fits[-1] if fits else None

    def left(self, jid: int, gone: Collection[str]) -> int:
        return sum(g for sid, g in self.spans[jid].items() if sid not in gone)

    def outcome(self, picked: Collection[str]) -> tuple[frozenset[int], dict[int, int]]:
        """(preempted jobs, scaled-in job -> GPUs kept) when the servers in `picked` go."""
        chosen = set(picked)
        preempted: set[int] = set()
        shrunk: dict[int, int] = {}
        for jid in sorted({j for sid in chosen for j in self.jobs_on[sid]}):
            keep = self.keeps(jid, chosen)
            if keep is None:
                preempted.add(jid)
            else:
                shrunk[jid] = keep
        return frozenset(preempted), shrunk

    def cost(self, sid: str, kind: Cost, picked: Sequence[str]) -> tuple[float, int]:
        """(`sid`'s preemption cost once `picked` are gone, the scale-ins picking it adds)."""
        gone = set(picked)
        before, was_shrunk = self.outcome(gone)
        after = gone | {sid}
        cost, shrinks = 0.0, 0
        for j in self.jobs_on[sid]:
            if j in before:
                continue
            if self.keeps(j, after) is not None:
                shrinks += j not in was_shrunk
                continue
            if kind == Cost.JOB_COUNT:
                cost += 1.0
            elif kind == Cost.GPU_FRACTION:
                cost += self.jobs_on[sid][j] / max(1, sum(self.spans[j].values()))
            else:
                cost += 1.0 / len(self.spans[j])
        return cost, shrinks

    def plan(self, picked: Sequence[str]) -> ReclaimPlan:
        preempted, shrunk = self.outcome(picked)
        chosen = set(picked)
        collateral = sum(self.left(j, chosen) for j in preempted)
        collateral += sum(self.left(j, chosen) - keep for j, keep in shrunk.items())
        return ReclaimPlan(tuple(picked), preempted, collateral, shrunk)


def server_costs(servers: Sequence[Server], allocations: Mapping[int, Allocation], kind: Cost,
                 jobs: Mapping[int, Job] | None = None) -> dict[str, float]:
    """Each server's preemption cost under `kind` (one column of Lyra's Table 1); a job
    that would scale in costs nothing."""
    layout = _Layout(servers, allocations, jobs)
    return {sid: layout.cost(sid, kind, ())[0] for sid in layout.ids}


def greedy_reclaim(
    servers: Sequence[Server], allocations: Mapping[int, Allocation], n: int, kind: Cost = Cost.SERVER_FRACTION,
    jobs: Mapping[int, Job] | None = None,
) -> ReclaimPlan:
    """Lyra's heuristic: pick the cheapest server, preempt its jobs everywhere, recompute.

    Ties on cost go to the server adding the fewest scale-ins, then to the one whose
    preemptions vacate the fewest GPUs that will not be handed back (Lyra's collateral
    damage): a server whose job also empties another loaned server we still need counts
    that server as handed back, which is what makes Figure 5 pick servers 1 and 2
    together. Remaining ties: the servers' given order.
    """
    layout = _Layout(servers, _check(servers, n, allocations), jobs)
    picked: list[str] = []
    while len(picked) < n:
        need = n - len(picked)
        best: tuple[float, int, int, int] | None = None
        best_sid = ""
        for pos, sid in enumerate(layout.ids):
            if sid in picked:
                continue
            cost, shrinks = layout.cost(sid, kind, picked)
            key = (round(cost, 9), shrinks, _waste(layout, sid, picked, need), pos)
            if best is None or key < best:
                best, best_sid = key, sid
        picked.append(best_sid)
    return layout.plan(picked)


def _waste(layout: _Layout, sid: str, picked: Sequence[str], need: int) -> int:
    """GPUs that picking `sid` vacates elsewhere and that `need - 1` further picks of the
    loaned servers it empties would not hand back."""
    gone = set(picked)
    before = layout.plan(picked)
    after_picked = gone | {sid}
    after = layout.plan([*picked, sid])
    fresh = after.preempted - before.preempted
    freed: dict[str, int] = {}
    for j in fresh:
        for other, g in layout.spans[j].items():
            if other not in after_picked:
                freed[other] = freed.get(other, 0) + g
    emptied = sorted(
        (g for other, g in freed.items()
         if other in layout.jobs_on and all(j in after.preempted for j in layout.jobs_on[other])),
        reverse=True,
    )
    trimmed = sum(
        max(0, layout.left(j, after_picked) - keep - (layout.left(j, gone) - before.shrunk.get(j, layout.left(j, gone))))
        for j, keep in after.shrunk.items()
    )
    return sum(freed.values()) - sum(emptied[: need - 1]) + trimmed


def knapsack_reclaim(servers: Sequence[Server], allocations: Mapping[int, Allocation], n: int,
                     jobs: Mapping[int, Job] | None = None) -> ReclaimPlan:
    """The independent 0-1 knapsack: the n servers that alone preempt the fewest jobs
    (without elastic jobs: the fewest jobs), then the fewest jobs, then the given order."""
    layout = _Layout(servers, _check(servers, n, allocations), jobs)
    order = sorted(range(len(layout.ids)), key=lambda i: (
        layout.cost(layout.ids[i], Cost.JOB_COUNT, ())[0], len(layout.jobs_on[layout.ids[i]]), i))
    return layout.plan([layout.ids[i] for i in order[:n]])


def exact_reclaim(servers: Sequence[Server], allocations: Mapping[int, Allocation], n: int,
                  jobs: Mapping[int, Job] | None = None) -> ReclaimPlan:
    """Every n-subset: fewest preemptions, then scale-ins, then least collateral, then the
    first in order."""
    layout = _Layout(servers, _check(servers, n, allocations), jobs)
    best: ReclaimPlan | None = None
    for combo in combinations(layout.ids, n):
        plan = layout.plan(combo)
        if best is None or _rank(plan) < _rank(best):
            best = plan
    assert best is not None
    return best


def plan_reclaim(
    servers: Sequence[Server], allocations: Mapping[int, Allocation], n: int, exact_limit: int = EXACT_LIMIT,
    jobs: Mapping[int, Job] | None = None,
) -> ReclaimPlan:
    """The servers to return: exact where the search is small, else the best heuristic.

    `servers` are the loaned servers that may be returned, in a deterministic order (ties
    follow it); `allocations` are the running jobs (shares on other servers count towards
    a job's span and the collateral damage); `jobs` (by id) say which of them are elastic
    and may scale in instead (None: every job is preempted, as in Lyra §4).
    """
    _check(servers, n, allocations)
    if math.comb(len(servers), n) <= exact_limit:
        return exact_reclaim(servers, allocations, n, jobs)
    layout = _Layout(servers, allocations, jobs)
    candidates: list[Callable[[], ReclaimPlan]] = [
        lambda: greedy_reclaim(servers, allocations, n, jobs=jobs),
        lambda: knapsack_reclaim(servers, allocations, n, jobs),
        # Without scale-in in the costs: what the plan was before, so never more preemptions.
        lambda: greedy_reclaim(servers, allocations, n),
        lambda: knapsack_reclaim(servers, allocations, n),
    ]
    return min((layout.plan(make().servers) for make in candidates), key=_rank)


def shrunk_allocation(alloc: Allocation, returned: Collection[str], gpus: int) -> Allocation:
    """`alloc` without its shares on the `returned` servers, trimmed to `gpus` GPUs.

    What a scale-in leaves a job (`ReclaimPlan.shrunk`): every share on a kept server, less
    the GPUs beyond `gpus` taken from the last shares first (the plan trims only to whole
    workers); a trimmed share keeps its CPUs and memory per GPU. The one definition the
    simulator and the daemon apply.
    """
    gone = set(returned)
    kept = [p for p in alloc.placements if p.server_id not in gone]
    extra = sum(p.gpus for p in kept) - gpus
    if extra < 0 or gpus <= 0:
        raise ValueError(f"job {alloc.job_id} keeps {gpus + max(0, extra)} GPUs off the returned servers, "
                         f"cannot run at {gpus}")
    out: list[Placement] = []
    for p in reversed(kept):
        cut = min(extra, p.gpus)
        extra -= cut
        if cut == p.gpus and cut:
            continue
        frac = (p.gpus - cut) / p.gpus if p.gpus else 1.0
        out.append(replace(p, gpus=p.gpus - cut, cpus=p.cpus * frac, mem_gb=p.mem_gb * frac) if cut else p)
    return replace(alloc, placements=tuple(reversed(out)))


def _rank(plan: ReclaimPlan) -> tuple[int, int, int]:
    return (len(plan.preempted), len(plan.shrunk), plan.collateral_gpus)


def _check(servers: Sequence[Server], n: int, allocations: Mapping[int, Allocation]) -> Mapping[int, Allocation]:
    if not 0 <= n <= len(servers):
        raise ValueError(f"cannot reclaim {n} of {len(servers)} loaned servers")
    if len({s.id for s in servers}) != len(servers):
        raise ValueError("loaned servers must have distinct ids")
    return allocations
