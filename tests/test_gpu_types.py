"""Heterogeneous GPU types: profiles per type, the core's per-type rounds, OPT's type choice."""
from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from profiles_for_tests import make_profile
from synergy.scheduler.core import Scheduler
from synergy.scheduler.mechanisms.greedy import Greedy
from synergy.scheduler.mechanisms.proportional import Proportional
from synergy.scheduler.mechanisms.tune import Tune
from synergy.scheduler.model import EPS, Allocation, Cluster, Job, Placement, Resources, RoundInput, RoundOutput, Server
from synergy.scheduler.policies.fifo import Fifo
from synergy.scheduler.profiles.format import GpuTypeSpeed, ProfileError, SensitivityProfile
from synergy.scheduler.registry import build_scheduler
from synergy.scheduler.throughput import landed_speed

BASE = make_profile("m", cpu_need=3.0, dataset_gb=50.0, fetch=0.5)


def typed_profile(t4: float = 0.45, grid: bool = False, base: SensitivityProfile = BASE) -> SensitivityProfile:
    """`base` with a T4 speed factor (and, with `grid`, a T4 grid that wants more CPU)."""
    t4_grid = None
    if grid:
        hungry = make_profile("m", cpu_need=8.0, dataset_gb=50.0, fetch=0.5)
        t4_grid = hungry.throughput
    return dataclasses.replace(base, gpu_types=(("T4", GpuTypeSpeed(t4, t4_grid)),))


def server(sid: str, gpu_type: str, gpus: int = 8, cpus: float = 24, mem: float = 500) -> Server:
    return Server(sid, Resources(gpus, cpus, mem), gpu_type=gpu_type)


def job(jid: int, gpus: int = 1, types: tuple[str, ...] = (), profile: SensitivityProfile | None = None,
        arrival: float | None = None) -> Job:
    return Job(jid, "m", gpus, float(jid if arrival is None else arrival), 1000.0,
               profile or typed_profile(), gpu_types=frozenset(types))


def run(cluster: Cluster, jobs: list[Job], mechanism=None, previous=None) -> RoundOutput:
    sched = Scheduler(Fifo(), mechanism or Tune())
    return sched.schedule(RoundInput(0.0, cluster, jobs, previous or {}))


def types_of(cluster: Cluster, alloc: Allocation) -> set[str]:
    return {cluster.gpu_type_of(p.server_id) for p in alloc.placements}


# -- profiles --------------------------------------------------------------------------------
def test_speed_on_scales_by_the_type_and_is_one_on_untyped_or_unknown_types() -> None:
    p = typed_profile(0.45)
    c, m = 3.0, 62.5
    assert p.speed_on("", c, m) == p.speed(c, m)
    assert p.speed_on("A100", c, m) == p.speed(c, m)  # not listed: the reference GPU's speed
    assert p.speed_on("T4", c, m) == pytest.approx(0.45 * p.speed(c, m))
    assert p.on("T4") is p.on("T4")  # one object per type: mechanisms key memos on it
    assert p.on("") is p and p.on("A100") is p


def test_a_type_grid_makes_the_faster_gpu_hungrier_for_cpu() -> None:
    p = typed_profile(1.5, grid=True)
    assert p.on("T4").best_case()[0] > p.best_case()[0]
    assert p.speed_on("T4", 8.0, 500.0) == pytest.approx(1.5 * make_profile("m", 8.0, 50.0, 0.5).speed(8.0, 500.0))


def test_gpu_types_round_trip_through_the_file_format() -> None:
    p = typed_profile(0.45)
    q = dataclasses.replace(p, gpu_types=p.gpu_types + (("V100", GpuTypeSpeed(1.0, BASE.throughput)),))
    back = SensitivityProfile.from_dict("m", q.to_dict())
    assert back == q
    assert "gpu_types" not in BASE.to_dict()  # untyped profiles keep their old shape


@pytest.mark.parametrize("entry, field", [
    ({"T4": {"speed": 0}}, "gpu_types.T4.speed"),
    ({"T4": {"speed": "fast"}}, "gpu_types.T4"),
    ({"T4": {}}, "gpu_types.T4"),
    ({"T4": {"speed": 1, "throughput": [[1.0]]}}, "gpu_types.T4.throughput"),
    ({"T4": {"speed": 1, "sped": 2}}, "gpu_types.T4"),
    (["T4"], "gpu_types"),
])
def test_bad_gpu_types_name_the_model_and_field(entry, field) -> None:
    d = BASE.to_dict()
    d["gpu_types"] = entry
    with pytest.raises(ProfileError, match=rf"profile 'm': field '{field}"):
        SensitivityProfile.from_dict("m", d)


# -- the model -----------------------------------------------------------------------------
def test_proportional_share_is_per_type_on_a_mixed_cluster() -> None:
    cluster = Cluster((server("v0", "V100", 8, 24, 500), server("t0", "T4", 4, 32, 256)))
    assert cluster.proportional_share(2, "V100") == Resources(2, 6, 125)
    assert cluster.proportional_share(2, "T4") == Resources(2, 16, 128)
    assert cluster.proportional_share(2) == Resources(2, 6, 125)  # every GPU can carry it
    untyped = Cluster.homogeneous(2)
    assert untyped.proportional_share(1, "") == untyped.proportional_share(1)
    assert not untyped.typed and cluster.typed


# -- the core ------------------------------------------------------------------------------
@pytest.mark.parametrize("mechanism", [Tune(), Proportional(), Greedy()])
def test_a_t4_only_job_never_lands_on_a_v100(mechanism) -> None:
    cluster = Cluster((server("v0", "V100"), server("t0", "T4", gpus=2)))
    jobs = [job(1, types=("T4",)), job(2, types=("T4",)), job(3, types=("T4",))]
    out = run(cluster, jobs, mechanism)
    assert {jid for jid in out.allocations} == {1, 2}
    assert all(types_of(cluster, a) == {"T4"} for a in out.allocations.values())
    assert "waiting for 1 GPUs of one type: 0 T4 left" in out.waiting[3]


def test_a_job_accepting_a_type_no_node_has_waits_with_a_reason() -> None:
    out = run(Cluster((server("v0", "V100"),)), [job(1, types=("T4",))])
    assert out.allocations == {}
    assert "accepts GPU types T4; no schedulable node has one" in out.waiting[1]


def test_a_job_accepting_both_lands_on_the_faster_type_while_it_is_free() -> None:
    cluster = Cluster((server("t0", "T4", gpus=2), server("v0", "V100", gpus=2)))
    jobs = [job(1), job(2, types=("V100", "T4")), job(3)]
    out = run(cluster, jobs)
    assert types_of(cluster, out.allocations[1]) == {"V100"}
    assert types_of(cluster, out.allocations[2]) == {"V100"}
    assert types_of(cluster, out.allocations[3]) == {"T4"}  # the V100s are taken


def test_the_faster_type_is_the_profile_s_own_not_a_global_ranking() -> None:
    cluster = Cluster((server("t0", "T4", gpus=1), server("v0", "V100", gpus=1)))
    t4_lover = dataclasses.replace(BASE, gpu_types=(("T4", GpuTypeSpeed(1.3)),))
    out = run(cluster, [job(1, profile=t4_lover)])
    assert types_of(cluster, out.allocations[1]) == {"T4"}


def test_a_job_never_mixes_types() -> None:
    # 4 GPUs fit only on the two T4 servers together; V100 + T4 would be 4 too.
    cluster = Cluster((server("v0", "V100", gpus=2), server("t0", "T4", gpus=2), server("t1", "T4", gpus=2)))
    out = run(cluster, [job(1, gpus=4)])
    assert types_of(cluster, out.allocations[1]) == {"T4"}
    # 5 GPUs: no one type has them, so it waits rather than mixing.
    out = run(cluster, [job(1, gpus=5)])
    assert out.allocations == {}


def test_tune_sizes_the_demand_with_the_type_s_grid() -> None:
    cluster = Cluster((server("t0", "T4", gpus=1, cpus=24),))
    p = typed_profile(1.5, grid=True)
    out = run(cluster, [job(1, profile=p, types=("T4",))])
    (pl,) = out.allocations[1].placements
    assert pl.cpus >= p.on("T4").best_case()[0] - EPS > BASE.best_case()[0]


def test_migration_matching_never_swaps_servers_of_different_types() -> None:
    cluster = Cluster((server("v0", "V100"), server("t0", "T4")))
    previous = {1: Allocation(1, (Placement("t0", 1, 3, 62.5),))}
    jobs = [job(1), job(2, types=("T4",))]
    out = Scheduler(Fifo(), Tune()).schedule(RoundInput(0.0, cluster, jobs, previous))
    assert types_of(cluster, out.allocations[2]) == {"T4"}


def test_the_simulator_advances_a_job_at_its_speed_on_the_landed_type() -> None:
    cluster = Cluster((server("v0", "V100"), server("t0", "T4")))
    j = job(1)
    on_t4 = Allocation(1, (Placement("t0", 1, 3, 62.5),))
    on_v100 = Allocation(1, (Placement("v0", 1, 3, 62.5),))
    assert landed_speed(j, on_t4, cluster) == pytest.approx(0.45 * landed_speed(j, on_v100, cluster))


def test_untyped_clusters_and_jobs_take_the_one_call_path() -> None:
    calls = []

    class Counting(Tune):
        def allocate(self, ordered, inp):
            calls.append(inp.cluster)
            return super().allocate(ordered, inp)

    cluster = Cluster.homogeneous(2)
    run(cluster, [job(1, profile=BASE)], Counting())
    assert calls == [cluster]


# -- OPT: the job x type dimension -----------------------------------------------------------
def test_opt_gives_the_faster_type_to_the_job_that_gains_most() -> None:
    pytest.importorskip("ortools")
    cluster = Cluster((server("v0", "V100", gpus=1), server("t0", "T4", gpus=1)))
    indifferent = dataclasses.replace(BASE, gpu_types=(("T4", GpuTypeSpeed(0.95)),))
    jobs = [job(1, profile=indifferent), job(2, profile=typed_profile(0.45))]
    tune = run(cluster, jobs, build_scheduler("fifo", "tune").mechanism)
    assert types_of(cluster, tune.allocations[1]) == {"V100"}  # greedy: policy order decides
    opt = run(cluster, jobs, build_scheduler("fifo", "opt").mechanism)
    assert types_of(cluster, opt.allocations[1]) == {"T4"}
    assert types_of(cluster, opt.allocations[2]) == {"V100"}


# -- properties on mixed clusters ----------------------------------------------------------
TYPES = ("V100", "T4", "")
typed_profiles = st.builds(
    lambda cpu_need, gb, t4, grid: dataclasses.replace(
        make_profile("p", cpu_need, gb, 0.5),
        gpu_types=(("T4", GpuTypeSpeed(t4, make_profile("p", cpu_need * 2, gb, 0.5).throughput if grid else None)),
                   ("V100", GpuTypeSpeed(1.0)))),
    cpu_need=st.sampled_from([1.0, 3.0, 6.0, 12.0]),
    gb=st.sampled_from([0.0, 200.0]),
    t4=st.sampled_from([0.3, 0.45, 1.2]),
    grid=st.booleans(),
)


@st.composite
def mixed(draw) -> tuple[Cluster, list[Job]]:
    servers = []
    for i in range(draw(st.integers(1, 6))):
        gpus = draw(st.sampled_from([1, 2, 4, 8]))
        servers.append(Server(f"s{i}", Resources(gpus, gpus * draw(st.sampled_from([2, 3, 6])),
                                                  gpus * draw(st.sampled_from([31.25, 62.5, 125.0]))),
                              gpu_type=draw(st.sampled_from(TYPES))))
    cluster = Cluster(tuple(servers))
    total = int(cluster.total.gpus)
    jobs = [
        Job(i, "p", draw(st.sampled_from([g for g in (1, 1, 2, 4, 8) if g <= total])), float(draw(st.integers(0, 3))),
            1000.0, draw(typed_profiles),
            gpu_types=frozenset(draw(st.sampled_from([(), ("T4",), ("V100",), ("V100", "T4"), ("",)]))))
        for i in range(draw(st.integers(0, 2 * total)))
    ]
    return cluster, jobs


SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MECHANISMS = [Tune(), Tune(redistribute=False), Proportional(), Greedy()]


def used_by_server(out: RoundOutput) -> dict[str, Resources]:
    used: dict[str, Resources] = {}
    for alloc in out.allocations.values():
        for p in alloc.placements:
            used[p.server_id] = used.get(p.server_id, Resources()) + p.resources
    return used


@SETTINGS
@given(mixed())
def test_mixed_clusters_are_never_overcommitted_and_jobs_keep_to_one_accepted_type(scenario) -> None:
    cluster, jobs = scenario
    by_id = {j.id: j for j in jobs}
    for mech in MECHANISMS:
        out = run(cluster, jobs, mech)
        used = used_by_server(out)
        for s in cluster.servers:
            assert used.get(s.id, Resources()).fits_in(s.capacity), (mech, s.id)
        for jid, alloc in out.allocations.items():
            types = types_of(cluster, alloc)
            assert len(types) == 1, (jid, alloc)
            assert not by_id[jid].gpu_types or types <= by_id[jid].gpu_types
            assert alloc.total.gpus == by_id[jid].gpus
        assert set(out.allocations) | set(out.waiting) == set(by_id)


@SETTINGS
@given(mixed())
def test_tune_never_below_proportional_on_the_type_it_lands_on(scenario) -> None:
    cluster, jobs = scenario
    by_id = {j.id: j for j in jobs}
    for mech in (Tune(), Tune(redistribute=False)):
        out = run(cluster, jobs, mech)
        for jid, alloc in out.allocations.items():
            (t,) = types_of(cluster, alloc)
            share = cluster.proportional_share(1, t)
            p = by_id[jid].profile
            assert landed_speed(by_id[jid], alloc, cluster) >= p.speed_on(t, share.cpus, share.mem_gb) - 1e-9


@SETTINGS
@given(mixed())
def test_no_gpu_of_an_accepted_type_idles_while_a_fitting_job_waits(scenario) -> None:
    cluster, jobs = scenario
    for mech in (Tune(), Proportional()):
        out = run(cluster, jobs, mech)
        used = used_by_server(out)
        free = {t: sum(s.capacity.gpus - used.get(s.id, Resources()).gpus for s in cluster.servers if s.gpu_type == t)
                for t in cluster.gpu_types}
        for j in jobs:
            if j.id in out.waiting:
                for t, left in free.items():
                    if not j.gpu_types or t in j.gpu_types:
                        assert left < j.gpus, (j.id, t, left, out.waiting[j.id])
