"""CPU-only jobs (CODA's kind) fill what training allocations leave free, and nothing else.

Properties over random clusters (hypothesis): the training allocations are identical with
and without CPU-only jobs present, and no server is over-committed on any resource.
"""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from profiles_for_tests import make_profile
from synergy.scheduler.core import Scheduler
from synergy.scheduler.mechanisms.greedy import Greedy
from synergy.scheduler.mechanisms.proportional import Proportional
from synergy.scheduler.mechanisms.tune import Tune
from synergy.scheduler.model import (EPS, AdminState, Allocation, Cluster, Job, JobKind, Placement, Resources,
                                     RoundInput, Server)
from synergy.scheduler.policies.fifo import Fifo
from synergy.scheduler.policies.las import Las

PROFILE = make_profile("p", cpu_need=3.0, dataset_gb=50.0, fetch=0.5, alpha=0.8)
SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def training(i: int, gpus: int, arrival: float = 0.0) -> Job:
    return Job(id=i, model="p", gpus=gpus, arrival_s=arrival, iterations=1000.0, profile=PROFILE)


def cpu_job(i: int, cpus: float, mem_gb: float, arrival: float = 0.0) -> Job:
    return Job(id=i, model="cpu", gpus=0, arrival_s=arrival, iterations=1000.0, profile=PROFILE,
               kind=JobKind.CPU_ONLY, cpus=cpus, mem_gb=mem_gb)


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


@given(scenarios(), st.sampled_from([Proportional(), Greedy(), Tune()]), st.sampled_from([Fifo(), Las()]))
@SETTINGS
def test_training_allocations_identical_and_no_server_overcommitted(scenario, mechanism, policy) -> None:
    cluster, train, cpu = scenario
    sched = Scheduler(policy, mechanism)
    alone = sched.schedule(RoundInput(0.0, cluster, train))
    mixed = sched.schedule(RoundInput(0.0, cluster, train + cpu))
    assert {k: v for k, v in mixed.allocations.items() if k < 100} == alone.allocations
    used = {s.id: Resources() for s in cluster.servers}
    for alloc in mixed.allocations.values():
        for p in alloc.placements:
            used[p.server_id] = used[p.server_id] + p.resources
    for s in cluster.servers:
        assert used[s.id].fits_in(s.capacity), (s, used[s.id])
    for job in cpu:
        if job.id in mixed.allocations:
            (p,) = mixed.allocations[job.id].placements
            assert (p.gpus, p.cpus, p.mem_gb) == (0, job.cpus, job.mem_gb)
        else:
            assert "waiting for" in mixed.waiting[job.id]


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
