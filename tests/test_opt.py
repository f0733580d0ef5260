"""Synergy-OPT: feasible, fair, never below TUNE, never above its own upper bound."""
from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from profiles_for_tests import ZOO_LIKE, make_profile
from synergy.scheduler.core import Scheduler
from synergy.scheduler.mechanisms.opt import Opt
from synergy.scheduler.mechanisms.tune import Tune
from synergy.scheduler.model import (
    EPS, Allocation, Cluster, Job, Placement, Resources, RoundInput, RoundOutput, Server,
)
from synergy.scheduler.policies.fifo import Fifo
from synergy.scheduler.profiles.zoo import default_profiles
from synergy.scheduler.registry import build_scheduler
from synergy.scheduler.throughput import proportional_speed, speed
from test_core_properties import assert_not_overcommitted, assert_presentation_free

profiles = st.one_of(
    st.sampled_from(sorted(ZOO_LIKE.values(), key=lambda p: p.model)),
    st.builds(
        make_profile,
        name=st.just("p"),
        cpu_need=st.sampled_from([1.0, 2.0, 6.0, 12.0, 24.0]),
        dataset_gb=st.sampled_from([0.0, 50.0, 200.0, 600.0]),
        fetch=st.sampled_from([0.2, 0.5, 1.0]),
    ),
)


@st.composite
def small_rounds(draw) -> tuple[Cluster, list[Job]]:
    """Up to three servers; several jobs share a profile so classes hold more than one job."""
    gpus = draw(st.sampled_from([4, 8]))
    cluster = Cluster.homogeneous(
        draw(st.integers(1, 3)),
        gpus=gpus,
        cpus=gpus * draw(st.sampled_from([2, 3, 4])),
        mem_gb=gpus * draw(st.sampled_from([31.25, 62.5, 125.0])),
    )
    total = int(cluster.total.gpus)
    pool = draw(st.lists(profiles, min_size=1, max_size=3))
    n = draw(st.integers(1, 2 * total))
    jobs = [
        Job(i, "p", draw(st.sampled_from([g for g in (1, 1, 1, 2, 4, 8) if g <= total])),
            float(i), 1e4, draw(st.sampled_from(pool)))
        for i in range(n)
    ]
    return cluster, jobs


SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def decide(mechanism, cluster: Cluster, jobs: list[Job]) -> RoundOutput:
    return Scheduler(Fifo(), mechanism).schedule(RoundInput(0.0, cluster, jobs))


def total_speedup(out: RoundOutput, jobs: list[Job], cluster: Cluster) -> float:
    by_id = {j.id: j for j in jobs}
    return sum(speed(by_id[jid], a) / proportional_speed(by_id[jid], cluster) for jid, a in out.allocations.items())


def ideal_of(opt: Opt, cluster: Cluster, jobs: list[Job]):
    return opt.ideal_solution(Fifo().order(jobs, 0.0, cluster), RoundInput(0.0, cluster, jobs))


@SETTINGS
@given(small_rounds(), st.sampled_from([0.0, 0.5]))
def test_opt_is_feasible_fair_and_between_tune_and_its_bound(scenario, placement_limit) -> None:
    cluster, jobs = scenario
    opt = Opt(placement_limit=placement_limit)
    out = decide(opt, cluster, jobs)
    tune = decide(Tune(), cluster, jobs)
    by_id = {j.id: j for j in jobs}

    assert_not_overcommitted(cluster, out)
    assert set(out.allocations) | set(out.waiting) == set(by_id)
    assert set(out.allocations).isdisjoint(out.waiting)
    # Same runnable set as TUNE: OPT changes how jobs run, never which jobs run.
    assert set(out.allocations) == set(tune.allocations)
    for jid, alloc in out.allocations.items():
        job = by_id[jid]
        assert alloc.total.gpus == job.gpus
        ratios = {(round(p.cpus / p.gpus, 6), round(p.mem_gb / p.gpus, 6)) for p in alloc.placements}
        assert len(ratios) == 1, f"split job {jid} is not proportional to GPUs: {alloc}"
        assert speed(job, alloc) >= proportional_speed(job, cluster) - 1e-9, (job.id, alloc)

    ideal = ideal_of(opt, cluster, jobs)
    assert total_speedup(out, jobs, cluster) >= total_speedup(tune, jobs, cluster) - 1e-9
    assert ideal.upper_bound >= total_speedup(out, jobs, cluster) - 1e-6
    assert ideal.upper_bound >= ideal.objective - 1e-9


@SETTINGS
@given(small_rounds())
def test_ideal_allocation_fits_the_super_machine_and_is_fair(scenario) -> None:
    cluster, jobs = scenario
    ideal = ideal_of(Opt(), cluster, jobs)
    runnable = [j for j in jobs if j.id in ideal.per_gpu]
    assert sum(j.gpus for j in runnable) <= cluster.total.gpus
    total = cluster.total
    assert sum(j.gpus * ideal.per_gpu[j.id][0] for j in runnable) <= total.cpus + 1e-6  # (2)
    assert sum(j.gpus * ideal.per_gpu[j.id][1] for j in runnable) <= total.mem_gb + 1e-6  # (3)
    ratios = [j.profile.speed(*ideal.per_gpu[j.id]) / proportional_speed(j, cluster) for j in runnable]
    assert all(r >= 1 - 1e-9 for r in ratios)  # (5)
    assert ideal.optimal
    assert ideal.objective == pytest.approx(sum(ratios), abs=1e-6)


@SETTINGS
@given(small_rounds(), st.integers(0, 2**32 - 1))
def test_opt_is_deterministic(scenario, seed) -> None:
    """Arrivals tie in threes, so FIFO's id tie-break orders the queue; the job list, the
    profile objects, `previous` and the server names are presented differently."""
    cluster, jobs = scenario
    jobs = [dataclasses.replace(j, arrival_s=float(j.id // 3)) for j in jobs]
    assert_presentation_free(Opt(), RoundInput(0.0, cluster, jobs), seed)
    memo = Opt()
    assert decide(memo, cluster, jobs) == decide(memo, cluster, jobs) == decide(Opt(), cluster, jobs)


def test_more_placement_time_never_hurts() -> None:
    """Program 2's answer only adds a candidate, so a larger limit cannot do worse."""
    cluster = Cluster.homogeneous(2, gpus=8, cpus=24, mem_gb=500)
    names = sorted(ZOO_LIKE)
    jobs = [Job(i, names[i % 4], (1, 1, 2, 4)[i % 4], float(i), 1e4, ZOO_LIKE[names[i % 4]]) for i in range(10)]
    quick = total_speedup(decide(Opt(placement_limit=0.0), cluster, jobs), jobs, cluster)
    solved = total_speedup(decide(Opt(placement_limit=1.0), cluster, jobs), jobs, cluster)
    assert solved >= quick - 1e-9


def test_heterogeneous_servers() -> None:
    """Servers of different shapes: program units and capacities are per server."""
    cluster = Cluster((
        Server("big", Resources(8, 48, 1000)),
        Server("small", Resources(4, 8, 200)),
        Server("odd", Resources(2, 7, 150)),
    ))
    names = sorted(ZOO_LIKE)
    jobs = [Job(i, names[i % 4], (1, 2, 1, 4)[i % 4], float(i), 1e4, ZOO_LIKE[names[i % 4]]) for i in range(12)]
    out = decide(Opt(placement_limit=0.5), cluster, jobs)
    tune = decide(Tune(), cluster, jobs)
    assert_not_overcommitted(cluster, out)
    # The small server has 2 CPUs per GPU, below the cluster's proportional 4.5: jobs at
    # their proportional share cannot use all of it, for OPT as for TUNE.
    assert len(out.allocations) >= len(tune.allocations)
    assert total_speedup(out, jobs, cluster) >= total_speedup(tune, jobs, cluster) - 1e-9


def test_empty_queue_and_registry() -> None:
    cluster = Cluster.homogeneous(1)
    assert decide(Opt(), cluster, []) == RoundOutput({}, {})
    sched = build_scheduler("fifo", "opt")
    assert sched.mechanism.name == "opt"


# -- the §2.1 example (Tables 1-3) -----------------------------------------------------------
TABLE_1 = {1: "resnet18", 2: "m5", 3: "transformer_xl", 4: "gnmt"}
#: Table 3: (server, CPUs, GB) per job, 4 GPUs each.
TABLE_3 = {1: ("s0", 23, 400), 3: ("s0", 1, 100), 2: ("s1", 12, 450), 4: ("s1", 12, 50)}


@pytest.fixture(scope="module")
def example() -> tuple[Cluster, list[Job]]:
    zoo = default_profiles()
    cluster = Cluster.homogeneous(2, gpus=8, cpus=24, mem_gb=500)
    return cluster, [Job(jid, model, 4, 0.0, 1e5, zoo[model]) for jid, model in TABLE_1.items()]


def test_section_2_1_example_is_at_least_table_3(example) -> None:
    """With the zoo's profiles Table 3 itself is not fair (the Transformer's 1 CPU for 4
    GPUs is below its proportional speed), so the comparison is on the sum of speedups."""
    cluster, jobs = example
    table_3 = RoundOutput({
        jid: Allocation(jid, (Placement(sid, 4, cpus, mem),)) for jid, (sid, cpus, mem) in TABLE_3.items()
    })
    opt = Opt()
    out = decide(opt, cluster, jobs)
    assert_not_overcommitted(cluster, out)
    by_id = {j.id: j for j in jobs}
    gains = {jid: speed(by_id[jid], a) / proportional_speed(by_id[jid], cluster) for jid, a in out.allocations.items()}
    assert set(gains) == set(TABLE_1)
    assert all(g >= 1 - 1e-9 for g in gains.values())
    assert sum(gains.values()) >= total_speedup(table_3, jobs, cluster) - 1e-9
    # Resource-sensitive, as in Table 3: the image and speech jobs run faster on more than
    # their proportional 12 CPUs / 250 GB, which the language jobs give up.
    for jid in (1, 2):
        assert gains[jid] > 1.1, f"{TABLE_1[jid]} should speed up, got {gains[jid]:.2f}x"
        total = out.allocations[jid].total
        assert total.cpus > 12 + EPS or total.mem_gb > 250 + EPS
    for jid in (3, 4):
        total = out.allocations[jid].total
        assert total.cpus < 12 - EPS and total.mem_gb < 250 - EPS
    assert sum(gains.values()) >= total_speedup(decide(Tune(), cluster, jobs), jobs, cluster) - 1e-9
    assert ideal_of(opt, cluster, jobs).upper_bound >= sum(gains.values()) - 1e-6


def test_opt_strictly_beats_tune_where_tune_is_greedy() -> None:
    """OPT >= TUNE holds by construction (TUNE's allocation is one of OPT's candidates), so it
    can never fail; this fixed round is one where the program must find better (issue 15):
    one 16-CPU server, 8 single-GPU jobs, two of each profile (CPU-hungry, memory-hungry,
    both, insensitive). TUNE, greedy in FIFO order, reaches 8.74 times the proportional
    speed-up; OPT's program re-splits the CPUs and memory to 9.71."""
    names = sorted(ZOO_LIKE)
    cluster = Cluster.homogeneous(1, gpus=8, cpus=16, mem_gb=500)
    jobs = [Job(i, names[i % 4], 1, float(i), 1e4, ZOO_LIKE[names[i % 4]]) for i in range(8)]
    opt = total_speedup(decide(Opt(placement_limit=0.0), cluster, jobs), jobs, cluster)
    tune = total_speedup(decide(Tune(), cluster, jobs), jobs, cluster)
    assert opt >= tune * 1.05, (opt, tune)
