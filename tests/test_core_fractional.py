"""Demands and allocations finer than one CPU (issue 14), where the node's share calls for it.

Profiles measured below one CPU (rows under 1) let TUNE and GREEDY place fractions of a core
(the agent enforces them as CFS quota on a shared core); where every GPU has a whole CPU or
more, demands stay whole. The core's invariants hold with such profiles too.
"""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from synergy.scheduler.core import Scheduler
from synergy.scheduler.mechanisms.greedy import Greedy
from synergy.scheduler.mechanisms.proportional import Proportional
from synergy.scheduler.mechanisms.tune import Tune
from synergy.scheduler.model import EPS, Cluster, Job, Resources, RoundInput, Server
from synergy.scheduler.policies.fifo import Fifo
from synergy.scheduler.profiles.format import SensitivityProfile
from synergy.scheduler.throughput import best_case_per_gpu, proportional_speed, speed
from test_core_properties import MECHANISMS, SETTINGS, assert_not_overcommitted

ROWS = (0.25, 0.5, 1.0, 2.0, 3.0, 4.0)
MEM = (1.0, 2.0, 4.0)


def profile(name: str, need: float) -> SensitivityProfile:
    """Saturates at `need` CPUs per GPU, memory-insensitive; reference cell (1 CPU, 1 GB)."""
    ref = min(1.0, 1.0 / need)
    grid = tuple(tuple(round(min(1.0, c / need) / ref, 6) for _ in MEM) for c in ROWS)
    return SensitivityProfile(name, "image", ROWS, MEM, grid, (1.0, 1.0), 0.1)


HEAVY, LIGHT = profile("heavy", 2.0), profile("light", 0.25)
#: The issue's node: four GPUs on two cores, a 0.5-CPU share per GPU.
SMALL = Cluster((Server("n", Resources(4, 2, 8)),))


def jobs(*profiles: SensitivityProfile) -> list[Job]:
    return [Job(i, p.model, 1, float(i), 1e6, p) for i, p in enumerate(profiles)]


def test_tune_gives_light_jobs_a_fraction_and_the_rest_to_heavy_ones():
    mix = jobs(HEAVY, LIGHT, HEAVY, LIGHT)
    out = Scheduler(Fifo(), Tune()).schedule(RoundInput(0.0, SMALL, mix))
    cpus = {j: a.total.cpus for j, a in out.allocations.items()}
    assert cpus[1] == cpus[3] == 0.25  # below one CPU, and below the 0.5 share
    assert cpus[0] + cpus[2] == 1.5 and max(cpus[0], cpus[2]) > 0.5
    for job in mix:
        assert speed(job, out.allocations[job.id]) >= proportional_speed(job, SMALL) - 1e-9
    gained = sum(speed(j, out.allocations[j.id]) for j in mix)
    assert gained > sum(proportional_speed(j, SMALL) for j in mix) + 0.2


def test_greedy_places_a_sub_cpu_demand():
    out = Scheduler(Fifo(), Greedy()).schedule(RoundInput(0.0, SMALL, jobs(LIGHT, LIGHT, LIGHT)))
    assert {a.total.cpus for a in out.allocations.values()} == {0.25} and len(out.allocations) == 3


def test_demands_stay_whole_where_the_share_gives_whole_cores():
    big = Cluster((Server("n", Resources(4, 12, 16)),))
    (light,) = jobs(LIGHT)
    assert best_case_per_gpu(light, SMALL)[0] == 0.25
    assert best_case_per_gpu(light, big)[0] == 1.0
    out = Scheduler(Fifo(), Greedy()).schedule(RoundInput(0.0, big, [light]))
    assert out.allocations[0].total.cpus == 1.0


@st.composite
def fractional_scenarios(draw) -> tuple[Cluster, list[Job]]:
    n = draw(st.integers(1, 4))
    servers = []
    for i in range(n):
        gpus = draw(st.sampled_from([1, 2, 4, 8]))
        per = draw(st.sampled_from([0.25, 0.5, 0.75, 1.0, 2.0]))
        servers.append(Server(f"s{i}", Resources(gpus, gpus * per, gpus * draw(st.sampled_from([1.0, 2.0, 4.0])))))
    cluster = Cluster(tuple(servers))
    total = int(cluster.total.gpus)
    needs = st.sampled_from([0.25, 0.5, 0.75, 1.0, 2.0, 4.0])
    out = [Job(i, "p", draw(st.sampled_from([g for g in (1, 1, 2, 4) if g <= total])), float(draw(st.integers(0, 3))),
               1000.0, profile(f"p{i}", draw(needs))) for i in range(draw(st.integers(0, 2 * total)))]
    return cluster, out


@SETTINGS
@given(fractional_scenarios())
def test_invariants_hold_with_sub_cpu_profiles(scenario):
    cluster, js = scenario
    by_id = {j.id: j for j in js}
    for mech in MECHANISMS:
        out = Scheduler(Fifo(), mech).schedule(RoundInput(0.0, cluster, js))
        assert_not_overcommitted(cluster, out)
        for jid, alloc in out.allocations.items():
            assert alloc.total.gpus == by_id[jid].gpus
            if mech.name == "tune":
                assert speed(by_id[jid], alloc) >= proportional_speed(by_id[jid], cluster) - 1e-9
        if mech.name in ("tune", "proportional"):
            free = cluster.total.gpus - sum(a.total.gpus for a in out.allocations.values())
            assert all(by_id[j].gpus > free + EPS for j in out.waiting), (mech.name, out.waiting, free)
        if mech.name == "greedy" and cluster.proportional_share(1).cpus >= 1.0:
            assert all(a.per_gpu[0] >= 1.0 - 1e-9 for a in out.allocations.values())


def test_proportional_is_unchanged_by_sub_cpu_rows():
    out = Scheduler(Fifo(), Proportional()).schedule(RoundInput(0.0, SMALL, jobs(LIGHT, HEAVY)))
    assert {a.total.cpus for a in out.allocations.values()} == {0.5}
