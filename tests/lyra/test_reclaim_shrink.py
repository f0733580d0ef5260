"""Lyra §2.2/§5.3: a reclaim scales elastic jobs in instead of preempting them."""
from __future__ import annotations

import itertools
from typing import Mapping, Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from profiles_for_tests import make_profile
from synergy.scheduler.loaning.reclaim import (
    Cost, exact_reclaim, greedy_reclaim, plan_reclaim, server_costs, shrunk_allocation,
)
from synergy.scheduler.model import Allocation, Job, JobKind, Placement
from test_reclaim import FIGURE_5, SERVERS, A, alloc, draw_shares, jobs_on, loaned

PROFILE = make_profile("p", 3.0, 0.0, 1.0)


def elastic(jid: int, lo: int, hi: int, step: int = 1) -> Job:
    return Job(jid, "p", hi, 0.0, 100.0, PROFILE, kind=JobKind.ELASTIC, min_gpus=lo, max_gpus=hi,
               gpus_per_worker=step)


def fixed(jid: int, gpus: int) -> Job:
    return Job(jid, "p", gpus, 0.0, 100.0, PROFILE)


def test_an_elastic_job_keeping_its_minimum_elsewhere_scales_in() -> None:
    """Job 1 holds 4 GPUs on l0 and 4 on l1 (2..8 GPUs), fixed job 2 fills l2. Returning
    l0 leaves job 1 its 4 GPUs on l1, so it scales in to 4 and nobody is preempted (l0 and
    l1 tie; the first goes). Without the jobs' ranges (Lyra §4 alone), or with a minimum
    of 6, every choice preempts one job, and l2 vacates no GPUs elsewhere."""
    allocations = {1: alloc(1, l0=4, l1=4), 2: alloc(2, l2=8)}
    servers = loaned(["l0", "l1", "l2"])
    plan = plan_reclaim(servers, allocations, 1, jobs={1: elastic(1, 2, 8), 2: fixed(2, 8)})
    assert plan.servers == ("l0",) and plan.preempted == frozenset() and plan.shrunk == {1: 4}
    assert plan.collateral_gpus == 0
    plan = plan_reclaim(servers, allocations, 1, jobs={1: elastic(1, 6, 8), 2: fixed(2, 8)})
    assert plan.servers == ("l2",) and plan.preempted == {2} and plan.shrunk == {}
    assert plan_reclaim(servers, allocations, 1).preempted == {2}


def test_scale_in_stops_at_whole_workers() -> None:
    """Workers of 2 GPUs from 2 to 8, 3 GPUs on l0 and 5 on l1: returning l0 leaves 5 GPUs,
    so it runs at 4 and one GPU on l1 is trimmed (collateral 1); returning l1 would leave 3,
    run at 2 and trim one too, and l0 comes first. Returning both preempts it."""
    allocations = {1: alloc(1, l0=3, l1=5)}
    plan = plan_reclaim(loaned(["l0", "l1"]), allocations, 1, jobs={1: elastic(1, 2, 8, step=2)})
    assert plan.servers == ("l0",) and plan.shrunk == {1: 4} and plan.collateral_gpus == 1
    plan = exact_reclaim(loaned(["l1", "l0"]), {1: alloc(1, l0=3, l1=5)}, 2, jobs={1: elastic(1, 2, 8, step=2)})
    assert plan.preempted == {1} and plan.shrunk == {}


def test_figure_5_still_returns_servers_1_and_2_when_a_is_elastic() -> None:
    """Job a may scale in to 4 GPUs, but returning both its servers still preempts it, and
    any other pair preempts another job: one preemption either way, and 1 + 2 scale nothing in."""
    jobs = {A: elastic(A, 4, 8)}
    for order in itertools.permutations(SERVERS):
        plan = plan_reclaim(loaned(order), FIGURE_5, 2, jobs=jobs)
        assert sorted(plan.servers) == ["s1", "s2"] and plan.preempted == {A} and not plan.shrunk, order
        assert sorted(greedy_reclaim(loaned(order), FIGURE_5, 2, jobs=jobs).servers) == ["s1", "s2"], order


def test_the_cost_counts_a_scale_in_as_no_preemption() -> None:
    """Table 1's Lyra column with a elastic: servers 1 and 2 alone cost nothing (a scales in
    to the other one's 4 GPUs); every other column entry is the paper's."""
    costs = server_costs(loaned(SERVERS), FIGURE_5, Cost.SERVER_FRACTION, jobs={A: elastic(A, 4, 8)})
    assert costs == pytest.approx({"s1": 0, "s2": 0, "s3": 1, "s4": 0.5, "s5": 1, "s6": 0.5})
    one = plan_reclaim(loaned(SERVERS), FIGURE_5, 1, jobs={A: elastic(A, 4, 8)})
    assert one.servers == ("s1",) and one.preempted == frozenset() and one.shrunk == {A: 4}


def test_shrunk_allocation_drops_the_returned_shares_and_trims_the_last() -> None:
    a = Allocation(7, (Placement("l0", 3, 9.0, 90.0), Placement("l1", 2, 6.0, 60.0), Placement("t0", 2, 4.0, 8.0)))
    assert shrunk_allocation(a, {"l1"}, 5).placements == a.placements[::2]
    out = shrunk_allocation(a, {"l1"}, 4).placements
    assert out == (Placement("l0", 3, 9.0, 90.0), Placement("t0", 1, 2.0, 4.0))
    assert shrunk_allocation(a, {"l1"}, 3).placements == (Placement("l0", 3, 9.0, 90.0),)
    with pytest.raises(ValueError, match="job 7"):
        shrunk_allocation(a, {"l0", "l1"}, 3)


# -- small brute-forced instances -------------------------------------------------------
@st.composite
def instances(draw) -> tuple[list, dict[int, Allocation], dict[int, Job], int]:
    """2-5 loaned 4-GPU servers and a training one, jobs of 1-3 servers, some elastic
    (minimum 1..their size, workers of 1 or 2 GPUs), and a reclaim count."""
    n = draw(st.integers(2, 5))
    ids = [f"l{i}" for i in range(n)]
    allocations: dict[int, Allocation] = {}
    jobs: dict[int, Job] = {}
    for jid, share in draw_shares(draw, ids, 7).items():
        allocations[jid] = alloc(jid, **share)
        total = sum(share.values())
        if draw(st.booleans()):
            step = draw(st.sampled_from([1, 2]))
            lo = draw(st.integers(1, total))
            jobs[jid] = elastic(jid, lo, total + draw(st.integers(0, 4)), step)
        else:
            jobs[jid] = fixed(jid, total)
    return loaned(ids, gpus=4), allocations, jobs, draw(st.integers(1, n))


def brute_force(servers, allocations: Mapping[int, Allocation], jobs: Mapping[int, Job], n: int) -> int:
    """Fewest preemptions over every n-subset, scale-in written out from the job's range."""
    best = None
    for combo in itertools.combinations([s.id for s in servers], n):
        count = 0
        for jid in jobs_on(allocations, combo):
            left = sum(p.gpus for p in allocations[jid].placements if p.server_id not in combo)
            job = jobs[jid]
            ok = job.kind == JobKind.ELASTIC and any(
                g <= left for g in range(job.min_gpus, job.max_gpus + 1, job.gpus_per_worker))
            count += not ok
        best = count if best is None else min(best, count)
    return best


def check_plan(plan, servers, allocations, jobs, n: int) -> None:
    assert len(set(plan.servers)) == n
    touched = jobs_on(allocations, plan.servers)
    assert plan.preempted | set(plan.shrunk) == touched and not plan.preempted & set(plan.shrunk)
    for jid, keep in plan.shrunk.items():
        job = jobs[jid]
        assert job.kind == JobKind.ELASTIC and job.min_gpus <= keep, "never below the minimum"
        assert (keep - job.min_gpus) % job.gpus_per_worker == 0
        after = shrunk_allocation(allocations[jid], plan.servers, keep)
        assert after.total.gpus == keep
        assert not {p.server_id for p in after.placements} & set(plan.servers), "no returned server keeps a job"


SMALL = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SMALL
@given(instances())
def test_exact_plan_is_optimal_and_never_preempts_more_than_without_scale_in(inst) -> None:
    servers, allocations, jobs, n = inst
    plan = plan_reclaim(servers, allocations, n, jobs=jobs)
    check_plan(plan, servers, allocations, jobs, n)
    assert len(plan.preempted) == brute_force(servers, allocations, jobs, n)
    assert len(plan.preempted) <= len(plan_reclaim(servers, allocations, n).preempted)


@SMALL
@given(instances())
def test_heuristic_never_preempts_more_than_without_scale_in(inst) -> None:
    servers, allocations, jobs, n = inst
    plan = plan_reclaim(servers, allocations, n, exact_limit=0, jobs=jobs)
    check_plan(plan, servers, allocations, jobs, n)
    assert len(plan.preempted) <= len(plan_reclaim(servers, allocations, n, exact_limit=0).preempted)
    counts = sorted(len(jobs_on(allocations, [s.id])) for s in servers)
    assert len(plan.preempted) <= sum(counts[:n])
    if n == 1:
        assert len(plan.preempted) == brute_force(servers, allocations, jobs, 1)
