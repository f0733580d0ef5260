"""Tesserae's migration-minimising placement (placement/migration.py; paper §4.1).

Figure 6 of the paper is not in its text; the layout below is rebuilt from what the text
says of it (4-GPU nodes as on Perlmutter): giving round r+1's node 1 the label of round r's
node 0 costs 1.5, "as jobs 1 and 4 must be moved out and job 6 must be moved in", and the
optimal plan migrates 3 jobs.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import linear_sum_assignment

from profiles_for_tests import make_profile
from synergy.scheduler.core import Scheduler
from synergy.scheduler.mechanisms.tune import Tune
from synergy.scheduler.model import Allocation, Cluster, Job, Placement, Resources, RoundInput, Server, ServerPool
from synergy.scheduler.placement.migration import (
    MOVE_COST,
    count_migrations,
    migrated,
    node_cost,
    plan_cost,
    relabel_to_previous,
    relabelled,
    stay_put,
    why_moved,
)
from synergy.scheduler.policies.fifo import Fifo

CAP = Resources(4, 12, 100)


def plan(nodes: dict[str, list[tuple[int, int]]]) -> dict[int, Allocation]:
    """{server: [(job, GPUs there), ...]} -> allocations, 3 CPUs and 25 GB per GPU."""
    pieces: dict[int, list[Placement]] = {}
    for server, jobs in nodes.items():
        for job, gpus in jobs:
            pieces.setdefault(job, []).append(Placement(server, gpus, 3.0 * gpus, 25.0 * gpus))
    return {j: Allocation(j, tuple(ps)) for j, ps in pieces.items()}


def cluster(n: int, cap: Resources = CAP) -> Cluster:
    return Cluster(tuple(Server(f"n{i}", cap) for i in range(n)))


# Round r: node 0 runs jobs 1-4, node 1 jobs 5-8. Round r+1: job 8 is gone; the mechanism
# put jobs 1, 4, 5, 7 on node 0 and 2, 3, 6 on node 1.
FIG6_OLD = plan({"n0": [(1, 1), (2, 1), (3, 1), (4, 1)], "n1": [(5, 1), (6, 1), (7, 1), (8, 1)]})
FIG6_NEW = plan({"n0": [(1, 1), (4, 1), (5, 1), (7, 1)], "n1": [(2, 1), (3, 1), (6, 1)]})


def on(allocs: dict[int, Allocation], server: str) -> dict[int, int]:
    return {j: p.gpus for j, a in allocs.items() for p in a.placements if p.server_id == server}


def gpu_level_node_cost(old: dict[int, int], new: dict[int, int], gpus: dict[int, int], n_gpus: int) -> float:
    """Algorithm 3 as written: a Hungarian assignment between the two nodes' GPUs, each pair
    costing 0.5 / GPUs per job found on one GPU and not the other."""
    def slots(node: dict[int, int]) -> list[int | None]:
        out: list[int | None] = [j for j, g in sorted(node.items()) for _ in range(g)]
        return out + [None] * (n_gpus - len(out))

    a, b = slots(old), slots(new)
    cost = np.zeros((n_gpus, n_gpus))
    for i, x in enumerate(a):
        for k, y in enumerate(b):
            if x != y:
                cost[i, k] = sum(MOVE_COST / gpus[j] for j in (x, y) if j is not None and j in gpus)
    r, c = linear_sum_assignment(cost)
    return float(cost[r, c].sum())


def test_figure6_node_pair_cost_and_total():
    common = {j: 1 for j in range(1, 8)}  # job 8 left: Algorithm 2, line 2 drops it
    assert node_cost(on(FIG6_OLD, "n0"), on(FIG6_NEW, "n1"), common) == 1.5
    assert gpu_level_node_cost(on(FIG6_OLD, "n0"), on(FIG6_NEW, "n1"), common, 4) == 1.5
    assert plan_cost(FIG6_OLD, FIG6_NEW) == 4.0  # keeping the labels: 4 jobs move
    out = relabelled(FIG6_NEW, FIG6_OLD, cluster(2))
    assert plan_cost(FIG6_OLD, out) == 3.0
    # Beyond Tesserae: relabelling moves a node's content whole; job 5 and 7 can go back to
    # n1 and jobs 2 and 3 to n0 (the plan's room allows it), so nobody moves at all.
    assert count_migrations(FIG6_OLD, relabel_to_previous(FIG6_NEW, FIG6_OLD, cluster(2))) == 0
    assert count_migrations(FIG6_OLD, out) == 3
    assert {j for j in out if migrated(FIG6_OLD[j].placements, out[j].placements)} == {1, 4, 6}
    assert on(out, "n0") == {2: 1, 3: 1, 6: 1} and on(out, "n1") == {1: 1, 4: 1, 5: 1, 7: 1}


def test_a_multi_gpu_job_moving_costs_half_out_and_half_in():
    old, new = {9: 4}, {}
    assert node_cost(old, new, {9: 4}) == 0.5 == gpu_level_node_cost(old, new, {9: 4}, 4)
    assert node_cost({9: 2}, {9: 4}, {9: 4}) == 0.25 == gpu_level_node_cost({9: 2}, {9: 4}, {9: 4}, 4)


@settings(max_examples=150, deadline=None)
@given(
    st.dictionaries(st.integers(0, 5), st.integers(1, 3), max_size=3),
    st.dictionaries(st.integers(0, 5), st.integers(1, 3), max_size=3),
    st.dictionaries(st.integers(0, 5), st.sampled_from([1, 2, 4, 8]), min_size=6, max_size=6),
)
def test_closed_form_is_algorithm_3s_gpu_assignment(old, new, gpus):
    """Jobs never share a GPU here, so the GPU-level Hungarian equals the closed form."""
    gpus = {j: max(g, old.get(j, 0), new.get(j, 0)) for j, g in gpus.items()}
    n = max(sum(old.values()), sum(new.values()), 1)
    assert abs(node_cost(old, new, gpus) - gpu_level_node_cost(old, new, gpus, n)) < 1e-9


def test_no_previous_or_nothing_common_changes_nothing():
    assert relabel_to_previous(FIG6_NEW, {}, cluster(2)) == FIG6_NEW
    gone = plan({"n1": [(42, 1)]})
    assert relabel_to_previous(FIG6_NEW, gone, cluster(2)) == FIG6_NEW


def test_only_interchangeable_servers_swap():
    """A bigger server, or one of another pool, keeps its label even when swapping it would
    spare a migration: the new plan's content might not fit there."""
    old = plan({"n0": [(1, 1)]})
    new = plan({"n1": [(1, 1)]})
    big = Cluster((Server("n0", Resources(8, 24, 200)), Server("n1", CAP)))
    loaned = Cluster((Server("n0", CAP, pool=ServerPool.LOANED), Server("n1", CAP)))
    assert relabelled(new, old, big) == new
    assert relabelled(new, old, loaned) == new
    assert relabelled(new, old, cluster(2)) == old
    # Where the job's own old GPUs are free it goes back there all the same (stay_put).
    assert relabel_to_previous(new, old, big) == old


def test_servers_keep_their_labels_when_nothing_is_gained():
    """A new job on an empty server is not moved to another empty one."""
    old = plan({"n0": [(1, 2)]})
    new = plan({"n0": [(1, 2)], "n2": [(7, 1)]})
    assert relabel_to_previous(new, old, cluster(4)) == new


# -- brute force over every relabelling of small instances ----------------------------------------


@st.composite
def instances(draw):
    """Two rounds' plans on up to 5 servers in up to two capacity classes; jobs consolidated
    or split, some only in one round."""
    n = draw(st.integers(2, 5))
    caps = [draw(st.sampled_from([Resources(4, 12, 100), Resources(2, 6, 50)])) for _ in range(n)]
    servers = tuple(Server(f"n{i}", c) for i, c in enumerate(caps))
    split_ok = draw(st.booleans())
    size = draw(st.lists(st.sampled_from([1, 1, 2, 4]), min_size=8, max_size=8))  # a job's GPUs, fixed

    def one_plan(ids):
        free = [int(c.gpus) for c in caps]
        nodes: dict[str, list[tuple[int, int]]] = {}
        for j in ids:
            g = size[j]
            homes = [i for i in range(n) if free[i] >= g]
            if homes:
                i = draw(st.sampled_from(homes))
                free[i] -= g
                nodes.setdefault(f"n{i}", []).append((j, g))
            elif split_ok and sum(free) >= g:
                left = g
                for i in range(n):
                    k = min(free[i], left)
                    if k:
                        free[i] -= k
                        left -= k
                        nodes.setdefault(f"n{i}", []).append((j, k))
        return plan(nodes)

    old = one_plan(draw(st.lists(st.integers(0, 7), unique=True, max_size=6)))
    new = one_plan(draw(st.lists(st.integers(0, 7), unique=True, max_size=6)))
    return Cluster(servers), old, new


def relabellings(c: Cluster):
    """Every bijection of the servers that maps each one to one of the same capacity."""
    ids = [s.id for s in c.servers]
    cap = {s.id: s.capacity for s in c.servers}
    for perm in itertools.permutations(ids):
        if all(cap[a] == cap[b] for a, b in zip(ids, perm)):
            yield dict(zip(ids, perm))


def renamed(allocs, mapping):
    return {
        j: Allocation(j, tuple(Placement(mapping[p.server_id], p.gpus, p.cpus, p.mem_gb) for p in a.placements))
        for j, a in allocs.items()
    }


def load(allocs) -> dict[str, Resources]:
    out: dict[str, Resources] = {}
    for a in allocs.values():
        for p in a.placements:
            out[p.server_id] = out.get(p.server_id, Resources()) + p.resources
    return out


@settings(max_examples=200, deadline=None)
@given(instances())
def test_no_relabelling_does_better(inst):
    c, old, new = inst
    out = relabel_to_previous(new, old, c)
    # It is a relabelling: same jobs, same GPUs, CPUs and memory per piece, within capacity.
    assert out.keys() == new.keys()
    cap = {s.id: s.capacity for s in c.servers}
    for server, used in load(out).items():
        assert used.fits_in(cap[server])
    for j in new:
        assert sorted((p.gpus, p.cpus, p.mem_gb) for p in out[j].placements) == sorted(
            (p.gpus, p.cpus, p.mem_gb) for p in new[j].placements
        )
        assert len({p.server_id for p in out[j].placements}) == len(new[j].placements)
    best_cost = plan_cost(old, out)
    consolidated = all(len(a.placements) == 1 for a in (*old.values(), *new.values()))
    for mapping in relabellings(c):
        other = renamed(new, mapping)
        assert best_cost <= plan_cost(old, other) + 1e-9
        if consolidated:  # there Algorithm 2's cost is the number of migrated jobs
            assert count_migrations(old, out) <= count_migrations(old, other)


# -- in the core ---------------------------------------------------------------------------------


def test_core_relabels_a_plan_that_would_only_rename_servers():
    """Job 1 ran on s1; best fit now puts it on s0 (the tie goes to the first server). With
    the plug-in on it stays on s1; off, it moves."""
    prof = make_profile("p", cpu_need=3.0, dataset_gb=0.0, fetch=1.0)
    c = Cluster.homogeneous(2, gpus=4, cpus=12, mem_gb=250)
    jobs = [Job(1, "p", 2, 0.0, 1000.0, prof)]
    first = Scheduler(Fifo(), Tune()).schedule(RoundInput(0.0, c, jobs)).allocations
    assert first[1].placements[0].server_id == "s0"
    p = first[1].placements[0]
    previous = {1: Allocation(1, (Placement("s1", p.gpus, p.cpus, p.mem_gb),))}
    on_ = Scheduler(Fifo(), Tune()).schedule(RoundInput(300.0, c, jobs, previous)).allocations
    off = Scheduler(Fifo(), Tune(), relabel=None).schedule(RoundInput(300.0, c, jobs, previous)).allocations
    assert count_migrations(previous, on_) == 0
    assert count_migrations(previous, off) == 1


# -- the core's invariants still hold with the plug-in on ------------------------------------------
from test_core_properties import MECHANISMS, SETTINGS, assert_not_overcommitted, scenarios  # noqa: E402
from synergy.scheduler.throughput import proportional_speed, speed  # noqa: E402


@SETTINGS
@given(scenarios(), st.integers(0, 2**16))
def test_invariants_hold_when_relabelling(scenario, seed):
    """Round 1 places a random part of the jobs; round 2 all of them, relabelled against
    round 1 with its servers shuffled (so relabelling has work to do)."""
    import random

    cluster, jobs = scenario
    rng = random.Random(seed)
    ids = [s.id for s in cluster.servers]
    shuffled = dict(zip(ids, rng.sample(ids, len(ids))))
    by_id = {j.id: j for j in jobs}
    for mech in MECHANISMS:
        first = Scheduler(Fifo(), mech).schedule(RoundInput(0.0, cluster, [j for j in jobs if rng.random() < 0.6]))
        previous = renamed(first.allocations, shuffled)
        inp = RoundInput(300.0, cluster, jobs, previous)
        out = Scheduler(Fifo(), mech).schedule(inp)
        off = Scheduler(Fifo(), mech, relabel=None).schedule(inp)
        assert_not_overcommitted(cluster, out)
        assert plan_cost(previous, out.allocations) <= plan_cost(previous, off.allocations) + 1e-9
        for jid, alloc in out.allocations.items():
            assert alloc.total.gpus == by_id[jid].gpus
            if mech.name == "tune":
                assert speed(by_id[jid], alloc) >= proportional_speed(by_id[jid], cluster) - 1e-9


# -- in the simulator --------------------------------------------------------------------------------
from synergy.scheduler.simulator.experiment import RunSpec, prepare, simulate  # noqa: E402

TESSERAE_MIX = ((1, 0.6), (2, 0.3), (4, 0.09), (8, 0.01))


def test_simulator_counts_migrations_and_matching_cuts_them():
    """LAS reorders the queue every round, so plain best fit moves jobs between servers that
    relabelling keeps them on; with a restart cost the saved migrations shorten JCTs."""
    spec = RunSpec(servers=4, policy="las", load=80.0, jobs=60, gpu_mix=TESSERAE_MIX, measure=(0, 60),
                   migration_cost_s=120.0)
    prep = prepare(spec)
    on = simulate(prep).metrics
    off = simulate(prepare(RunSpec(**{**spec.__dict__, "migration_matching": False}))).metrics
    assert off["migrations"] > on["migrations"] > 0
    assert off["migrations_per_job"] > on["migrations_per_job"]
    assert on["migrations_per_round"] == on["migrations"] / on["rounds"]
    assert on["avg_jct_h"] < off["avg_jct_h"]
    # Free migrations: relabelling changes who sits where, and how fast anyone runs only by
    # TUNE's leftovers, handed out on the layout it keeps (mechanisms/leftover.py) and by
    # a job kept where it ran over a neighbour's surplus (placement/surplus.py): 0.2% here.
    free = simulate(prepare(RunSpec(**{**spec.__dict__, "migration_cost_s": 0.0}))).metrics
    free_off = simulate(prepare(RunSpec(**{**spec.__dict__, "migration_cost_s": 0.0, "migration_matching": False})))
    assert free["avg_jct_h"] == pytest.approx(free_off.metrics["avg_jct_h"], rel=0.01)
    assert free["avg_jct_h"] < on["avg_jct_h"]
    assert free["migrations"] < free_off.metrics["migrations"]


def test_memoised_runs_count_the_same_migrations():
    prep = prepare(RunSpec(servers=4, policy="fifo", load=60.0, jobs=60, gpu_mix=TESSERAE_MIX, measure=(0, 60),
                           migration_cost_s=60.0))
    a, b = simulate(prep).result, simulate(prep, memoise=False).result
    assert a.migrations == b.migrations
    assert {j: r.migrations for j, r in a.records.items()} == {j: r.migrations for j, r in b.records.items()}
