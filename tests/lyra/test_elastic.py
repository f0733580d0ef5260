"""Lyra §5: elastic jobs, two-phase allocation and the MCKP (Tables 2-4, Figure 6)."""
from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from profiles_for_tests import make_profile
from synergy.scheduler.core import Scheduler
from synergy.scheduler.elastic import mckp
from synergy.scheduler.elastic.scaling import flexible_items, remaining_s
from synergy.scheduler.elastic.two_phase import decide_sizes
from synergy.scheduler.mechanisms.tune import Tune
from synergy.scheduler.model import Cluster, Job, JobKind, Resources, RoundInput, Server
from synergy.scheduler.policies.fifo import Fifo
from synergy.scheduler.policies.srtf import Srtf
from synergy.scheduler.throughput import iterations_per_s, proportional_speed, speed

PROFILE = make_profile("p", 3.0, 0.0, 1.0)


def one_server(gpus: int) -> Cluster:
    return Cluster((Server("s0", Resources(gpus, 3 * gpus, 62.5 * gpus)),))


def elastic(jid: int, min_w: int, max_w: int, min_running_s: float, cluster: Cluster, per_worker: int = 1) -> Job:
    """A job that finishes in `min_running_s` at its maximum of `max_w` workers."""
    job = Job(jid, "p", max_w * per_worker, 0.0, 1.0, PROFILE, kind=JobKind.ELASTIC,
              min_gpus=min_w * per_worker, max_gpus=max_w * per_worker, gpus_per_worker=per_worker)
    rate = iterations_per_s(job, proportional_speed(job, cluster))
    return replace(job, iterations=min_running_s * rate)


def jcts(jobs: list[Job], gpus: dict[int, int], capacity: int, cluster: Cluster) -> dict[int, float]:
    """Table 3's rule: run at the initial sizes; when a job finishes, the other grows to
    as many workers as fit (up to its maximum). Linear scaling, as Lyra assumes."""
    left = {j.id: 1.0 for j in jobs}  # fraction of the work still to do
    by_id = {j.id: j for j in jobs}
    now, done = 0.0, {}
    sizes = dict(gpus)
    while left:
        finish = {jid: left[jid] * remaining_s(by_id[jid], sizes[jid], cluster) for jid in left}
        first = min(finish, key=lambda jid: (finish[jid], jid))
        dt = finish[first]
        now += dt
        for jid in left:
            left[jid] -= dt / remaining_s(by_id[jid], sizes[jid], cluster)
        done[first] = now
        del left[first]
        for jid in left:  # the survivor takes what fits
            job = by_id[jid]
            free = capacity - sum(sizes[o] for o in left if o != jid)
            sizes[jid] = max(g for g in range(job.min_gpus, job.max_gpus + 1, job.gpus_per_worker) if g <= free)
    return done


# -- Table 2 / Table 3 --------------------------------------------------------------------
T2 = one_server(8)
A2, B2 = elastic(1, 2, 6, 50.0, T2), elastic(2, 2, 6, 20.0, T2)


@pytest.mark.parametrize("a, b, jct_a, jct_b, avg", [
    (6, 2, 50.0, 53.33, 51.67),   # solution 1: favour A
    (2, 6, 63.33, 20.0, 41.67),   # solution 2: favour B
    (4, 4, 60.0, 30.0, 45.0),     # solution 3: equal shares
])
def test_table_3(a, b, jct_a, jct_b, avg) -> None:
    done = jcts([A2, B2], {1: a, 2: b}, 8, T2)
    assert (round(done[1], 2), round(done[2], 2)) == (jct_a, jct_b)
    assert round((done[1] + done[2]) / 2, 2) == avg


def test_table_2_mckp_maximises_running_time_saved_not_average_jct() -> None:
    """What the paper's MCKP value picks on Table 2: A 5, B 3 workers, average JCT 48.33 s,
    better than favouring A (51.67) but not Table 3's best (41.67, favouring B). We checked
    whether our value function is wrong; it is not, the paper's numbers are consistent and
    its knapsack is a heuristic that does not reach Table 3's best here:

    * §5.2 defines an item's value as "its JCT reduction over the job's maximum running
      time", the maximum running time being the time at w_min. A's work is 6 x 50 = 300
      worker-seconds, B's 6 x 20 = 120. At base (2 + 2 workers) 4 are left; A at g workers
      saves 300/2 - 300/g = 50, 75, 90, 100 s (g = 3..6), B 60 - 120/g = 20, 30, 36, 40 s.
    * The same rule gives Figure 6's values exactly (A: 50; B: 20, 30, 36, 40 on Table 4),
      so it is the paper's value, not a misreading (`test_figure_6_items`).
    * With 4 workers: A+3 and B+1 = 90 + 20 = 110 s is the maximum (A+4 = 100, A+2 and
      B+2 = 105, A+1 and B+3 = 86, B+4 = 40). Table 3's best (A 2, B 6) is B+4, worth 40.
    * "Elastic jobs here include those already running" (and the available GPUs include
      those of running flexible workers) only adds running jobs' flexible demand to the
      knapsack; both jobs are new here, so it changes nothing.
    * The JCT: B at 3 workers ends at 40 s; A has done 5 x 40 = 200 of 300, grows to 6 and
      ends at 40 + 100/6 = 56.67 s; the average is 48.33 s. Valuing the survivor's growth
      after the other ends (what makes solution 2 best) would couple the groups' values,
      which a multiple-choice knapsack cannot express; the paper says as much ("our quest
      ... is to find a good heuristic", §5.1) and never claims the MCKP reaches 41.67.
    """
    def rounded(job):
        return [(it.weight, round(it.value, 6)) for it in flexible_items(job, T2)]
    assert rounded(A2) == [(1, 50.0), (2, 75.0), (3, 90.0), (4, 100.0)]
    assert rounded(B2) == [(1, 20.0), (2, 30.0), (3, 36.0), (4, 40.0)]
    sizes = decide_sizes([A2, B2], T2, 8)
    assert sizes == {1: 5, 2: 3}
    done = jcts([A2, B2], sizes, 8, T2)
    assert (round(done[1], 2), round(done[2], 2)) == (56.67, 40.0)
    assert round((done[1] + done[2]) / 2, 2) == 48.33


# -- Table 4 / Figure 6 -------------------------------------------------------------------
#: A: 2..3 workers of 2 GPUs, 100 s at 3; B: 2..6 workers of 1 GPU, 20 s at 6. Favouring A
#: runs A at 3 workers and B at 5, so the cluster has 6 + 5 = 11 GPUs.
T4 = one_server(11)
A4, B4 = elastic(1, 2, 3, 100.0, T4, per_worker=2), elastic(2, 2, 6, 20.0, T4)


def test_figure_6_items() -> None:
    def rounded(items):
        return [(it.weight, round(it.value, 6)) for it in items]
    assert rounded(flexible_items(A4, T4)) == [(2, 50.0)]
    assert rounded(flexible_items(B4, T4)) == [(1, 20.0), (2, 30.0), (3, 36.0), (4, 40.0)]


def test_table_4_jcts_and_mckp_favours_a() -> None:
    favour_a = jcts([A4, B4], {1: 6, 2: 5}, 11, T4)
    favour_b = jcts([A4, B4], {1: 4, 2: 6}, 11, T4)
    assert (round(favour_a[1], 2), round(favour_a[2], 2)) == (100.0, 24.0)
    assert (round(favour_b[1], 2), round(favour_b[2], 2)) == (106.67, 20.0)
    assert round((favour_a[1] + favour_a[2]) / 2, 2) == 62.0
    assert round((favour_b[1] + favour_b[2]) / 2, 2) == 63.33
    # SJF on the minimum running time would favour B; the knapsack favours A.
    assert decide_sizes([B4, A4], T4, 11) == {1: 6, 2: 5}


@pytest.mark.parametrize("policy", [Fifo(), Srtf()])
def test_table_4_through_the_core_with_tune(policy) -> None:
    """The whole round: both phases, then TUNE places A at 6 GPUs and B at 5 and gives
    every worker CPU and memory at least at its proportional speed."""
    out = Scheduler(policy, Tune()).schedule(RoundInput(0.0, T4, [A4, B4]))
    assert {jid: a.total.gpus for jid, a in out.allocations.items()} == {1: 6, 2: 5}
    for job in (A4, B4):
        assert speed(job, out.allocations[job.id]) >= proportional_speed(job, T4) - 1e-9


def test_base_demand_comes_first() -> None:
    """Phase one: a fixed job that fits at everyone's base demand is not pushed out by an
    elastic job's flexible demand, whatever the order."""
    cluster = one_server(8)
    big = elastic(1, 2, 8, 10.0, cluster)
    fixed = Job(2, "p", 6, 1.0, 100.0, PROFILE)
    out = Scheduler(Fifo(), Tune()).schedule(RoundInput(0.0, cluster, [big, fixed]))
    assert {jid: a.total.gpus for jid, a in out.allocations.items()} == {1: 2, 2: 6}
    alone = Scheduler(Fifo(), Tune()).schedule(RoundInput(0.0, cluster, [big]))
    assert alone.allocations[1].total.gpus == 8


def test_elastic_job_waits_when_its_minimum_does_not_fit() -> None:
    cluster = one_server(4)
    job = elastic(1, 6, 8, 10.0, cluster)
    out = Scheduler(Fifo(), Tune()).schedule(RoundInput(0.0, cluster, [job]))
    assert not out.allocations and "needs 6 GPUs" in out.waiting[1]


# -- the knapsack itself --------------------------------------------------------------------
groups_st = st.lists(
    st.lists(st.tuples(st.integers(1, 6), st.integers(0, 50)), min_size=0, max_size=4),
    min_size=0, max_size=4,
)


def as_groups(raw) -> list[list[mckp.Item]]:
    return [sorted((mckp.Item(w, float(v)) for w, v in g), key=lambda it: it.weight) for g in raw]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(groups_st, st.integers(0, 16))
def test_dp_is_exact(raw, capacity) -> None:
    groups = as_groups(raw)
    picks = mckp.solve(groups, capacity)
    weight = sum(groups[g][k].weight for g, k in enumerate(picks) if k >= 0)
    value = sum(groups[g][k].value for g, k in enumerate(picks) if k >= 0)
    assert weight <= capacity
    best = 0.0
    for combo in itertools.product(*[[None, *g] for g in groups]):
        chosen = [it for it in combo if it is not None]
        if sum(it.weight for it in chosen) <= capacity:
            best = max(best, sum(it.value for it in chosen))
    assert value == pytest.approx(best)


@settings(max_examples=100, deadline=None)
@given(groups_st, st.integers(0, 16))
def test_greedy_fallback_respects_capacity(raw, capacity) -> None:
    groups = as_groups(raw)
    picks = mckp.solve(groups, capacity, max_cells=0)
    assert sum(groups[g][k].weight for g, k in enumerate(picks) if k >= 0) <= capacity


def test_dp_works_in_worker_units() -> None:
    """8-GPU workers on 4096 GPUs: 512 units, so the table stays small (and exact)."""
    groups = [[mckp.Item(8 * k, 100.0 * (1 - 1 / (k + 1))) for k in range(1, 9)] for _ in range(600)]
    picks = mckp.solve(groups, 4096, max_cells=600 * 8 * 512)
    assert sum(groups[g][k].weight for g, k in enumerate(picks) if k >= 0) <= 4096
    assert sum(1 for k in picks if k >= 0) >= 4096 // 64


def test_a_running_job_keeps_its_size_unless_rescaling_pays() -> None:
    """Table 4 with B already running at 6 GPUs and A at its base: favouring A saves 46 s
    of running time (86 - 40), less than the two relaunches cost (2 x 63 s), so nothing
    moves; with rescales free, the knapsack moves to favouring A."""
    running = {1: 4, 2: 6}
    assert decide_sizes([A4, B4], T4, 11, current=running) == {1: 4, 2: 6}
    assert decide_sizes([A4, B4], T4, 11, current=running, rescale_cost_s=0) == {1: 6, 2: 5}
    # A job that is not running yet pays nothing to start at any size.
    assert decide_sizes([A4, B4], T4, 11, current={2: 6}) == {1: 4, 2: 6}
    assert decide_sizes([A4, B4], T4, 11, current={2: 5}) == {1: 6, 2: 5}
