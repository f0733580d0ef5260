"""CODA's CPU array: CPU-only jobs on CPU servers and on CPUs borrowed from GPU servers.

Properties over random clusters (hypothesis) and the array's rules one by one: the borrow
limit, trimming training never below proportional, borrowed CPUs returned at the next
round, DRF between users, the CPU_ONLY pool.
"""
from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from profiles_for_tests import make_profile
from synergy.scheduler.arrays.cpu_array import CpuArray
from synergy.scheduler.core import Scheduler
from synergy.scheduler.mechanisms.greedy import Greedy
from synergy.scheduler.mechanisms.proportional import Proportional
from synergy.scheduler.mechanisms.tune import Tune
from synergy.scheduler.model import (EPS, AdminState, Allocation, Cluster, Job, JobKind, Placement, Resources,
                                     RoundInput, Server, ServerPool)
from synergy.scheduler.policies.fifo import Fifo
from synergy.scheduler.policies.las import Las
from synergy.scheduler.throughput import proportional_speed, speed

PROFILE = make_profile("p", cpu_need=3.0, dataset_gb=50.0, fetch=0.5, alpha=0.8)
SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def training(i: int, gpus: int, arrival: float = 0.0) -> Job:
    return Job(id=i, model="p", gpus=gpus, arrival_s=arrival, iterations=1000.0, profile=PROFILE)


def cpu_job(i: int, cpus: float, mem_gb: float, arrival: float = 0.0, user: str = "") -> Job:
    return Job(id=i, model="cpu", gpus=0, arrival_s=arrival, iterations=1000.0, profile=PROFILE,
               kind=JobKind.CPU_ONLY, cpus=cpus, mem_gb=mem_gb, user=user)


@st.composite
def scenarios(draw) -> tuple[Cluster, list[Job], list[Job]]:
    servers = []
    for i in range(draw(st.integers(1, 5))):
        gpus = draw(st.sampled_from([0, 1, 2, 4, 8]))
        cpus = draw(st.sampled_from([4, 8, 16, 24, 48]))
        servers.append(Server(f"s{i}", Resources(gpus, cpus, draw(st.sampled_from([32.0, 64.0, 250.0, 500.0])))))
    cluster = Cluster(tuple(servers))
    total = int(cluster.total.gpus)
    train = [training(i, draw(st.sampled_from([g for g in (1, 1, 2, 4, 8) if g <= total])), float(draw(st.integers(0, 5))))
             for i in range(draw(st.integers(0, 2 * total)) if total else 0)]
    cpu = [cpu_job(100 + i, draw(st.sampled_from([0.5, 1.0, 2.0, 4.0, 12.0])), draw(st.sampled_from([1.0, 8.0, 64.0])),
                   float(draw(st.integers(0, 5))))
           for i in range(draw(st.integers(0, 12)))]
    return cluster, train, cpu


@given(scenarios(), st.sampled_from([Proportional(), Greedy(), Tune()]), st.sampled_from([Fifo(), Las()]),
       st.sampled_from([0.0, 0.25, 0.5, 1.0]), st.booleans())
@SETTINGS
def test_cpu_array_properties(scenario, mechanism, policy, fraction, trim) -> None:
    """No over-commit; the borrow limit holds; training runs where it would alone, only ever
    trimmed of CPUs and never below its GPU-proportional speed; no CPU-only job waits while
    a CPU server has room for it; a placed one gets exactly what it asked for.

    "Alone" is the mechanism's demands: TUNE's leftovers are handed out after the array
    (mechanisms/leftover.py), so they are no demand a CPU-only job must respect; they only
    ever add to what the array left a training job."""
    cluster, train, cpu = scenario
    array = CpuArray(borrow_fraction=fraction, trim_training=trim)
    sched = Scheduler(policy, mechanism, cpu_array=array)
    leftovers = getattr(mechanism, "redistribute", False)
    demands = Scheduler(policy, replace(mechanism, redistribute=False), cpu_array=array) if leftovers else sched
    alone = demands.schedule(RoundInput(0.0, cluster, train))
    mixed = sched.schedule(RoundInput(0.0, cluster, train + cpu))
    gpu_cluster = Cluster(tuple(s for s in cluster.servers if s.capacity.gpus > 0))
    assert {k for k in mixed.allocations if k < 100} == set(alone.allocations)
    for job in train:
        if job.id not in alone.allocations:
            continue
        before, after = alone.allocations[job.id], mixed.allocations[job.id]
        assert [(p.server_id, p.gpus) for p in after.placements] == [(p.server_id, p.gpus) for p in before.placements]
        if leftovers:
            assert all(a.mem_gb >= b.mem_gb - EPS for a, b in zip(after.placements, before.placements))
            if not trim:
                assert all(a.cpus >= b.cpus - EPS for a, b in zip(after.placements, before.placements))
        else:
            assert [p.mem_gb for p in after.placements] == [p.mem_gb for p in before.placements]
            assert all(a.cpus <= b.cpus + EPS for a, b in zip(after.placements, before.placements))
            if not trim:
                assert after == before
        assert speed(job, after) >= min(speed(job, before), proportional_speed(job, gpu_cluster)) - 1e-6
    used = {s.id: Resources() for s in cluster.servers}
    borrowed = {s.id: 0.0 for s in cluster.servers}
    for jid, alloc in mixed.allocations.items():
        for p in alloc.placements:
            used[p.server_id] = used[p.server_id] + p.resources
            if jid >= 100:
                borrowed[p.server_id] += p.cpus
    for s in cluster.servers:
        assert used[s.id].fits_in(s.capacity), (s, used[s.id])
        if s.capacity.gpus > 0:
            assert borrowed[s.id] <= fraction * s.capacity.cpus + EPS
    for job in cpu:
        if job.id in mixed.allocations:
            (p,) = mixed.allocations[job.id].placements
            assert (p.gpus, p.cpus, p.mem_gb) == (0, job.cpus, job.mem_gb)
        else:
            assert "waiting for" in mixed.waiting[job.id]
            for s in cluster.servers:
                if s.capacity.gpus == 0:
                    left = s.capacity - used[s.id]
                    assert job.cpus > left.cpus + EPS or job.mem_gb > left.mem_gb + EPS, (job, s, left)


def test_cpu_jobs_go_first_fit_in_arrival_order_onto_what_training_leaves() -> None:
    cluster = Cluster((Server("gpu", Resources(2, 8, 64)), Server("cpu", Resources(0, 4, 16))))
    jobs = [training(1, 2), cpu_job(10, 2.0, 8.0, arrival=1.0), cpu_job(11, 4.0, 8.0, arrival=2.0),
            cpu_job(12, 8.0, 8.0, arrival=3.0)]
    out = Scheduler(Fifo(), Proportional()).schedule(RoundInput(0.0, cluster, jobs))
    assert out.allocations[1].total == Resources(2, 8, 64)  # proportional: the whole server
    assert out.allocations[10].placements == (Placement("cpu", 0, 2.0, 8.0),)
    assert 11 not in out.allocations and "largest free slot is 2 CPUs, 8 GB" in out.waiting[11]
    assert 12 not in out.allocations


def test_a_running_cpu_job_keeps_its_server_and_a_cordon_keeps_it_too() -> None:
    cluster = Cluster((Server("a", Resources(0, 8, 32)), Server("b", Resources(0, 8, 32), admin=AdminState.CORDONED)))
    prev = {5: Allocation(5, (Placement("b", 0, 2.0, 4.0),))}
    out = Scheduler(Fifo(), Proportional()).schedule(
        RoundInput(0.0, cluster, [cpu_job(5, 2.0, 4.0), cpu_job(6, 2.0, 4.0)], prev))
    assert out.allocations[5].placements[0].server_id == "b"
    assert out.allocations[6].placements[0].server_id == "a"
    assert not any(j in out.waiting for j in (5, 6))


def test_borrowing_from_a_gpu_server_stops_at_the_limit() -> None:
    cluster = Cluster((Server("gpu", Resources(2, 16, 64)),))
    sched = Scheduler(Fifo(), Proportional(), cpu_array=CpuArray(borrow_fraction=0.25))
    out = sched.schedule(RoundInput(0.0, cluster, [cpu_job(10, 3.0, 4.0), cpu_job(11, 2.0, 4.0)]))
    assert out.allocations[10].placements == (Placement("gpu", 0, 3.0, 4.0),)
    assert 11 not in out.allocations  # 3 + 2 > 0.25 * 16
    assert "largest free slot is 1 CPUs" in out.waiting[11]


def test_cpu_only_pool_servers_run_cpu_jobs_and_never_training() -> None:
    cluster = Cluster((Server("g", Resources(1, 4, 32)), Server("c", Resources(0, 32, 64), pool=ServerPool.CPU_ONLY)))
    out = Scheduler(Fifo(), Proportional()).schedule(
        RoundInput(0.0, cluster, [training(1, 1), training(2, 1), cpu_job(10, 16.0, 8.0)]))
    assert out.allocations[10].placements == (Placement("c", 0, 16.0, 8.0),)
    assert [p.server_id for p in out.allocations[1].placements] == ["g"] and 2 not in out.allocations


def test_tune_surplus_is_trimmed_to_proportional_for_a_cpu_job_and_only_when_allowed() -> None:
    # Proportional is the smaller shape's 6 CPUs per GPU: the job TUNE puts on the 12-CPU
    # server holds up to 6 CPUs above it, which a CPU-only job may take, and nothing more.
    hungry = make_profile("h", cpu_need=12.0, dataset_gb=0.0, fetch=0.5, alpha=0.8)
    train = [Job(id=i, model="h", gpus=1, arrival_s=0.0, iterations=1000.0, profile=hungry) for i in (1, 2)]
    both = Cluster((Server("g", Resources(1, 12, 100)), Server("h", Resources(1, 6, 100))))
    jobs = [*train, cpu_job(10, 4.0, 4.0), cpu_job(11, 4.0, 4.0)]
    alone = Scheduler(Fifo(), Tune()).schedule(RoundInput(0.0, both, train))
    assert sorted(a.total.cpus for a in alone.allocations.values()) == [6.0, 12.0]
    out = Scheduler(Fifo(), Tune()).schedule(RoundInput(0.0, both, jobs))
    assert out.allocations[10].placements == (Placement("g", 0, 4.0, 4.0),)
    assert 11 not in out.allocations  # only 2 CPUs of surplus left
    assert sorted(a.total.cpus for j, a in out.allocations.items() if j < 10) == [6.0, 8.0]
    for job in train:
        assert speed(job, out.allocations[job.id]) >= proportional_speed(job, both) - 1e-9
    untrimmed = Scheduler(Fifo(), Tune(), cpu_array=CpuArray(trim_training=False)).schedule(
        RoundInput(0.0, both, jobs))
    assert 10 not in untrimmed.allocations and untrimmed.allocations == alone.allocations


def test_borrowed_cpus_go_back_to_training_at_the_next_round() -> None:
    cluster = Cluster((Server("g", Resources(2, 8, 64)),))
    sched = Scheduler(Fifo(), Proportional())
    first = sched.schedule(RoundInput(0.0, cluster, [cpu_job(10, 6.0, 8.0)]))
    assert first.allocations[10].placements == (Placement("g", 0, 6.0, 8.0),)
    second = sched.schedule(RoundInput(300.0, cluster, [cpu_job(10, 6.0, 8.0), training(1, 2, arrival=200.0)],
                                       first.allocations))
    assert second.allocations[1].total == Resources(2, 8, 64)
    assert 10 not in second.allocations and "waiting for 6 CPUs" in second.waiting[10]


def test_drf_between_users_lets_a_light_user_in_before_a_heavy_one() -> None:
    cluster = Cluster((Server("c", Resources(0, 8, 64)),))
    jobs = [cpu_job(10 + i, 2.0, 1.0, arrival=float(i), user="heavy") for i in range(4)]
    jobs.append(cpu_job(20, 2.0, 1.0, arrival=9.0, user="light"))
    out = Scheduler(Fifo(), Proportional()).schedule(RoundInput(0.0, cluster, jobs))
    assert 20 in out.allocations
    assert sorted(j for j in out.allocations if j < 20) == [10, 11, 12]


def test_borrow_fraction_out_of_range_is_refused() -> None:
    import pytest
    with pytest.raises(ValueError, match="borrow_fraction"):
        CpuArray(borrow_fraction=1.5)


def test_training_facing_only_gpu_less_nodes_is_told_so() -> None:
    """Not "none registered": the GPU-less servers are there, running CPU-only jobs."""
    cluster = Cluster((Server("c0", Resources(0, 8, 32.0)), Server("c1", Resources(0, 8, 32.0))))
    out = Scheduler(Fifo(), Tune()).schedule(RoundInput(0.0, cluster, [training(1, 1), cpu_job(2, 2.0, 4.0)]))
    assert out.waiting[1] == "no schedulable node: only GPU-less nodes (2), which run CPU-only jobs"
    assert [p.server_id for p in out.allocations[2].placements] == ["c0"]


def test_trimming_keeps_the_proportional_share_of_the_gpu_type_the_job_runs_on() -> None:
    """V100 nodes have 2 CPUs per GPU, T4 nodes 6: a T4-only job holding 6 CPUs on its T4 is
    at its type's proportional share and is not trimmed for a CPU-only job (with the whole
    cluster's 2 CPUs per GPU as the floor, it would be cut to 2)."""
    sensitive = make_profile("p", cpu_need=6.0, dataset_gb=1.0, fetch=0.5, alpha=0.8)
    cluster = Cluster((Server("v", Resources(1, 2, 64), gpu_type="V100"), Server("t", Resources(1, 6, 64), gpu_type="T4")))
    job = Job(id=1, model="p", gpus=1, arrival_s=0.0, iterations=1000.0, profile=sensitive,
              gpu_types=frozenset({"T4"}))
    out = Scheduler(Fifo(), Tune(), cpu_array=CpuArray(1.0, True)).schedule(
        RoundInput(0.0, cluster, [job, cpu_job(2, 4.0, 1.0)]))
    (p,) = out.allocations[1].placements
    assert p.server_id == "t" and p.cpus >= 6 - EPS
    assert 2 not in out.allocations
