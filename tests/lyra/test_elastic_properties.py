"""The core's invariants hold with elastic jobs in the mix (the scenarios of
test_core_properties.py, with some jobs turned elastic)."""
from __future__ import annotations

import dataclasses

from hypothesis import given
from hypothesis import strategies as st

from synergy.scheduler.elastic.scaling import sizes
from synergy.scheduler.mechanisms.tune import Tune
from synergy.scheduler.model import EPS, Cluster, Job, JobKind, RoundInput
from synergy.scheduler.throughput import proportional_speed, speed
from test_core_properties import (
    MECHANISMS, SETTINGS, assert_not_overcommitted, assert_presentation_free, run, scenarios,
)


@st.composite
def mixed(draw) -> tuple[Cluster, list[Job]]:
    cluster, jobs = draw(scenarios())
    total = int(cluster.total.gpus)
    out = []
    for job in jobs:
        if draw(st.booleans()):
            step = draw(st.sampled_from([1, 1, 2]))
            lo = step * draw(st.integers(1, 2))
            hi = lo + step * draw(st.integers(0, 4))
            if hi <= max(total, lo):
                job = dataclasses.replace(job, kind=JobKind.ELASTIC, gpus=hi, min_gpus=lo, max_gpus=hi,
                                          gpus_per_worker=step, done_iterations=float(draw(st.integers(0, 900))))
        out.append(job)
    return cluster, out


@SETTINGS
@given(mixed())
def test_elastic_mix_keeps_the_invariants(scenario) -> None:
    cluster, jobs = scenario
    by_id = {j.id: j for j in jobs}
    for mech in MECHANISMS:
        out = run(mech, cluster, jobs)
        assert_not_overcommitted(cluster, out)
        assert set(out.allocations) | set(out.waiting) == set(by_id)
        assert set(out.allocations).isdisjoint(out.waiting)
        for jid, alloc in out.allocations.items():
            assert int(alloc.total.gpus) in sizes(by_id[jid]), (by_id[jid], alloc)
            ratios = {(round(p.cpus / p.gpus, 6), round(p.mem_gb / p.gpus, 6)) for p in alloc.placements}
            assert len(ratios) == 1, f"split job {jid} is not proportional to GPUs: {alloc}"
            if isinstance(mech, Tune):
                assert speed(by_id[jid], alloc) >= proportional_speed(by_id[jid], cluster) - 1e-9


@SETTINGS
@given(mixed())
def test_elastic_jobs_take_free_gpus(scenario) -> None:
    """No elastic job stays below its maximum while a whole worker's GPUs idle, unless the
    round fell back to base sizes (then every elastic job runs at its minimum)."""
    cluster, jobs = scenario
    out = run(Tune(), cluster, jobs)
    free = cluster.total.gpus - sum(a.total.gpus for a in out.allocations.values())
    placed = [j for j in jobs if j.id in out.allocations and j.kind == JobKind.ELASTIC]
    fell_back = all(out.allocations[j.id].total.gpus == j.min_gpus for j in placed)
    for j in placed:
        if out.allocations[j.id].total.gpus < j.max_gpus and not fell_back:
            assert free + EPS < j.gpus_per_worker, (j, out.allocations[j.id], free)


@SETTINGS
@given(mixed(), st.integers(0, 2**32 - 1))
def test_elastic_mix_is_deterministic(scenario, seed) -> None:
    cluster, jobs = scenario
    for mech in MECHANISMS:
        assert_presentation_free(mech, RoundInput(0.0, cluster, jobs), seed)
