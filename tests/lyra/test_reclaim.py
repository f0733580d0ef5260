"""Lyra §4: reclaiming loaned servers with the fewest preemptions (Table 1, Figure 5)."""
from __future__ import annotations

import itertools
from typing import Mapping, Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from synergy.scheduler.loaning.reclaim import (
    Cost, exact_reclaim, greedy_reclaim, knapsack_reclaim, plan_reclaim, server_costs,
)
from synergy.scheduler.model import Allocation, Placement, Resources, Server, ServerPool


def loaned(ids: Sequence[str], gpus: int = 8) -> list[Server]:
    return [Server(sid, Resources(gpus, 24, 500), pool=ServerPool.LOANED) for sid in ids]


def alloc(jid: int, **gpus_on: int) -> Allocation:
    return Allocation(jid, tuple(Placement(sid, g, 0.0, 0.0) for sid, g in gpus_on.items()))


#: Figure 5 (six 8-GPU servers): job a spans servers 1-2 evenly, b fills server 3,
#: c holds 80% of its GPUs on server 4 and 20% on 5, d 20% on 5 and 80% on 6.
A, B, C, D = 1, 2, 3, 4
FIGURE_5 = {
    A: alloc(A, s1=4, s2=4),
    B: alloc(B, s3=8),
    C: alloc(C, s4=4, s5=1),
    D: alloc(D, s5=1, s6=4),
}
SERVERS = [f"s{i}" for i in range(1, 7)]


def test_table_1_costs() -> None:
    servers = loaned(SERVERS)
    assert server_costs(servers, FIGURE_5, Cost.JOB_COUNT) == {
        "s1": 1, "s2": 1, "s3": 1, "s4": 1, "s5": 2, "s6": 1}
    gpu = server_costs(servers, FIGURE_5, Cost.GPU_FRACTION)
    assert gpu == pytest.approx({"s1": 0.5, "s2": 0.5, "s3": 1, "s4": 0.8, "s5": 0.4, "s6": 0.8})
    assert server_costs(servers, FIGURE_5, Cost.SERVER_FRACTION) == pytest.approx(
        {"s1": 0.5, "s2": 0.5, "s3": 1, "s4": 0.5, "s5": 1, "s6": 0.5})


def test_figure_5_lyra_returns_servers_1_and_2_with_one_preemption() -> None:
    """Whatever order the servers come in, Lyra's cost returns 1 and 2 and preempts only a."""
    for order in itertools.permutations(SERVERS):
        plan = greedy_reclaim(loaned(order), FIGURE_5, 2)
        assert sorted(plan.servers) == ["s1", "s2"], order
        assert plan.preempted == {A} and plan.collateral_gpus == 0, order
        assert plan_reclaim(loaned(order), FIGURE_5, 2) == exact_reclaim(loaned(order), FIGURE_5, 2)
        assert sorted(plan_reclaim(loaned(order), FIGURE_5, 2, exact_limit=0).servers) == ["s1", "s2"]


def test_figure_5_gpu_fraction_and_knapsack_preempt_two() -> None:
    """The alternatives of Table 1: the GPU-fraction cost starts with server 5 (cheapest
    at 0.4) and preempts c and d; the knapsack sees five 1-job servers alike and, with
    servers 3 and 4 first, preempts b and c."""
    gpu = greedy_reclaim(loaned(SERVERS), FIGURE_5, 2, kind=Cost.GPU_FRACTION)
    assert gpu.servers[0] == "s5" and gpu.preempted == {C, D}
    knap = knapsack_reclaim(loaned(["s3", "s4", "s5", "s6", "s1", "s2"]), FIGURE_5, 2)
    assert knap.servers == ("s3", "s4") and knap.preempted == {B, C}


def test_one_server_tie_prefers_least_collateral() -> None:
    """Reclaiming one server: 1, 2, 4 and 6 all cost 0.5 and one preemption; 4 (or 6)
    vacates one GPU elsewhere, 1 (or 2) four, so the heuristic takes 4."""
    plan = greedy_reclaim(loaned(SERVERS), FIGURE_5, 1)
    assert plan.servers == ("s4",) and plan.collateral_gpus == 1


def test_bad_count_is_refused() -> None:
    with pytest.raises(ValueError, match="cannot reclaim 7 of 6"):
        plan_reclaim(loaned(SERVERS), FIGURE_5, 7)


# -- small brute-forced instances -------------------------------------------------------
@st.composite
def instances(draw) -> tuple[list[Server], dict[int, Allocation], int]:
    """2-6 loaned 4-GPU servers (plus a training server jobs may also span), jobs of 1-3
    servers each, and a reclaim count."""
    n = draw(st.integers(2, 6))
    ids = [f"l{i}" for i in range(n)]
    allocations = {jid: alloc(jid, **share) for jid, share in draw_shares(draw, ids, 8).items()}
    return loaned(ids, gpus=4), allocations, draw(st.integers(1, n))


def draw_shares(draw, ids: list[str], max_jobs: int) -> dict[int, dict[str, int]]:
    """Up to `max_jobs` jobs, each on 1-3 of `ids` plus a training server "t0" (4 GPUs
    each): job id -> its GPUs per server."""
    free = {sid: 4 for sid in ids + ["t0"]}
    shares: dict[int, dict[str, int]] = {}
    for jid in range(draw(st.integers(0, max_jobs))):
        span = draw(st.lists(st.sampled_from(ids + ["t0"]), min_size=1, max_size=3, unique=True))
        share = {}
        for sid in span:
            if free[sid] > 0:
                g = draw(st.integers(1, free[sid]))
                free[sid] -= g
                share[sid] = g
        if share:
            shares[jid] = share
    return shares


def brute_force_min(servers: Sequence[Server], allocations: Mapping[int, Allocation], n: int) -> int:
    on = {s.id: {j for j, a in allocations.items() for p in a.placements if p.server_id == s.id} for s in servers}
    return min(len(set().union(*(on[sid] for sid in combo))) for combo in itertools.combinations(on, n))


def jobs_on(allocations: Mapping[int, Allocation], sids: Sequence[str]) -> set[int]:
    return {j for j, a in allocations.items() for p in a.placements if p.server_id in sids}


SMALL = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SMALL
@given(instances())
def test_reclaim_never_preempts_more_jobs_than_needed(inst) -> None:
    servers, allocations, n = inst
    plan = plan_reclaim(servers, allocations, n)
    assert len(set(plan.servers)) == n
    assert plan.preempted == jobs_on(allocations, plan.servers)
    assert len(plan.preempted) == brute_force_min(servers, allocations, n)


@SMALL
@given(instances())
def test_heuristic_bound(inst) -> None:
    """Without the exhaustive search: never worse than the independent knapsack (so at most
    the n smallest job counts), optimal for one server, free when n servers are empty."""
    servers, allocations, n = inst
    plan = plan_reclaim(servers, allocations, n, exact_limit=0)
    assert len(set(plan.servers)) == n and plan.preempted == jobs_on(allocations, plan.servers)
    counts = sorted(len(jobs_on(allocations, [s.id])) for s in servers)
    assert len(plan.preempted) <= len(knapsack_reclaim(servers, allocations, n).preempted) <= sum(counts[:n])
    if n == 1:
        assert len(plan.preempted) == brute_force_min(servers, allocations, 1)
    if counts[:n] == [0] * n:
        assert not plan.preempted
