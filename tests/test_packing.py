"""Tesserae's packing (placement/packing.py; paper §4.2, Algorithm 4) through the real core.

Figure 7 of the paper is not in its text (its numbers are lost); the worked example below is
built the way the text describes Figure 7: placed jobs x pending jobs, an edge when both need
the same GPUs, weighted by the pair's combined normalised throughput, where the Hungarian
matching beats taking the heaviest edge first.
"""
from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from profiles_for_tests import ZOO_LIKE, make_profile
from synergy.scheduler.core import Scheduler
from synergy.scheduler.mechanisms.tune import Tune
from synergy.scheduler.model import (
    EPS, AdminState, Allocation, Cluster, Job, JobKind, Placement, Resources, RoundInput, Server,
)
from synergy.scheduler.placement.migration import relabel_to_previous
from synergy.scheduler.placement.packing import can_share, max_weight_pairs, pair_weight
from synergy.scheduler.policies.fifo import Fifo
from synergy.scheduler.profiles.pairs import PairEntry, PairTable
from synergy.scheduler.registry import build_scheduler

from test_core_properties import SETTINGS, assert_not_overcommitted, scenarios

FLAT = ZOO_LIKE["insensitive"]  # saturates at 1 CPU per GPU: leftover CPUs stay free


def job(jid: int, model: str, gpus: int = 1, **kw) -> Job:
    return Job(jid, model, gpus, float(jid), 1000.0, kw.pop("profile", FLAT), **kw)


def table(*entries: tuple[str, str, float, float]) -> PairTable:
    return PairTable(tuple(PairEntry(*e) for e in entries))


def packed(pairs: PairTable, cluster: Cluster, jobs: list[Job], **inp) -> dict[int, Allocation]:
    return Scheduler(Fifo(), Tune(), pairs=pairs).schedule(RoundInput(0.0, cluster, jobs, **inp)).allocations


def one_server(gpus: int = 2, cpus: float = 24, mem: float = 500) -> Cluster:
    return Cluster((Server("s0", Resources(gpus, cpus, mem)),))


def guests_of(allocs: dict[int, Allocation]) -> dict[int, int]:
    """guest -> host."""
    return {jid: a.packed_with for jid, a in allocs.items() if a.packed_with is not None}


# -- Algorithm 4: the worked example ---------------------------------------------------------------
# Placed A (1) and B (2), pending X (3) and Y (4), all one GPU. The heaviest edge is A-X (1.5);
# taking it first leaves B-Y (1.05): 2.55. The matching pairs A-Y and B-X: 1.4 + 1.4 = 2.8.
FIG7 = table(("a", "x", 0.8, 0.7), ("a", "y", 0.7, 0.7), ("b", "x", 0.7, 0.7), ("b", "y", 0.55, 0.5))


def test_worked_example_max_weight_beats_greedy() -> None:
    jobs = [job(1, "a"), job(2, "b"), job(3, "x"), job(4, "y")]
    allocs = packed(FIG7, one_server(), jobs)
    assert guests_of(allocs) == {4: 1, 3: 2}
    total = sum(FIG7.combined(jobs[h - 1].model, jobs[g - 1].model) for g, h in guests_of(allocs).items())
    assert total == pytest.approx(2.8)
    # The guest shares the host's very GPUs and brings its own CPUs and memory.
    host, guest = allocs[1], allocs[4]
    assert [(p.server_id, p.gpus) for p in guest.placements] == [(p.server_id, p.gpus) for p in host.placements]
    assert guest.total.cpus > 0 and guest.total.mem_gb > 0


def test_max_weight_pairs_is_the_hungarian_optimum() -> None:
    w = np.array([[1.5, 1.4], [1.4, 1.05]])
    assert sorted(max_weight_pairs(w)) == [(0, 1), (1, 0)]
    assert max_weight_pairs(np.zeros((2, 3))) == []


# -- who never pairs -------------------------------------------------------------------------------
def test_no_share_never_paired_as_guest_or_host() -> None:
    pairs = table(("a", "x", 0.8, 0.8))
    assert guests_of(packed(pairs, one_server(1), [job(1, "a"), job(2, "x", no_share=True)])) == {}
    assert guests_of(packed(pairs, one_server(1), [job(1, "a", no_share=True), job(2, "x")])) == {}
    assert guests_of(packed(pairs, one_server(1), [job(1, "a"), job(2, "x")])) == {2: 1}


def test_unequal_gpu_counts_never_paired() -> None:
    pairs = table(("a", "x", 0.8, 0.8))
    allocs = packed(pairs, one_server(2), [job(1, "a", gpus=2), job(2, "x", gpus=1)])
    assert guests_of(allocs) == {}
    allocs = packed(pairs, one_server(2), [job(1, "a", gpus=2), job(2, "x", gpus=2)])
    assert guests_of(allocs) == {2: 1}


@pytest.mark.parametrize("tputs", [(0.5, 0.5), (0.4, 0.5), (0.0, 0.3)])
def test_pair_sum_at_most_one_never_paired(tputs) -> None:
    pairs = table(("a", "x", *tputs))
    assert guests_of(packed(pairs, one_server(1), [job(1, "a"), job(2, "x")])) == {}


def test_unprofiled_pair_never_paired_and_packing_off_by_default() -> None:
    assert guests_of(packed(table(("a", "y", 0.9, 0.9)), one_server(1), [job(1, "a"), job(2, "x")])) == {}
    out = build_scheduler("fifo", "tune").schedule(RoundInput(0.0, one_server(1), [job(1, "a"), job(2, "x")]))
    assert set(out.allocations) == {1} and build_scheduler("fifo", "tune").pairs is None


def test_elastic_jobs_never_paired() -> None:
    pairs = table(("a", "x", 0.8, 0.8))
    elastic = job(2, "x", kind=JobKind.ELASTIC, min_gpus=1, max_gpus=1)
    assert guests_of(packed(pairs, one_server(1), [job(1, "a"), elastic])) == {}


def test_guest_needs_its_cpus_free_on_the_hosts_server() -> None:
    pairs = table(("a", "x", 0.8, 0.8))
    hungry = make_profile("h", 12.0, 0.0, 1.0)  # TUNE hands the host every CPU it can use
    # The host takes all 12 CPUs (its best case): nothing is left for the guest's share.
    allocs = packed(pairs, one_server(1, cpus=12), [job(1, "a", profile=hungry), job(2, "x", profile=hungry)])
    assert guests_of(allocs) == {}
    # With room, the guest gets its own best-case CPUs beside the host's.
    allocs = packed(pairs, one_server(1, cpus=24), [job(1, "a", profile=hungry), job(2, "x", profile=hungry)])
    assert guests_of(allocs) == {2: 1}
    assert allocs[1].total.cpus + allocs[2].total.cpus <= 24 + 1e-9


def test_a_round_with_packing_is_not_over_committed_on_gpus() -> None:
    """The guest's GPUs are its host's: counted once (Allocation.held), as every checker does."""
    allocs = packed(table(("a", "x", 0.8, 0.8)), one_server(1), [job(1, "a"), job(2, "x")])
    out_gpus = sum(res.gpus for a in allocs.values() for _, res in a.held)
    assert out_gpus == 1
    assert sum(a.total.gpus for a in allocs.values()) == 2  # each job still runs on one GPU


# -- migration relabelling and cordoned servers keep pairs together --------------------------------
def test_relabelling_moves_a_pair_together() -> None:
    cap = Resources(1, 12, 100)
    cluster = Cluster((Server("s0", cap), Server("s1", cap)))
    host = Allocation(1, (Placement("s0", 1, 1, 20),))
    guest = Allocation(2, (Placement("s0", 1, 1, 20),), packed_with=1)
    previous = {1: Allocation(1, (Placement("s1", 1, 1, 20),)),
                2: Allocation(2, (Placement("s1", 1, 1, 20),), packed_with=1)}
    out = relabel_to_previous({1: host, 2: guest}, previous, cluster)
    assert out[1].placements[0].server_id == out[2].placements[0].server_id == "s1"
    assert out[2].packed_with == 1


def test_cordoned_pair_is_kept_and_a_lone_guest_owns_its_gpus() -> None:
    pairs = table(("a", "x", 0.8, 0.8))
    cluster = Cluster((Server("s0", Resources(1, 24, 500), admin=AdminState.CORDONED),
                       Server("s1", Resources(1, 24, 500))))
    previous = {1: Allocation(1, (Placement("s0", 1, 1, 20),)),
                2: Allocation(2, (Placement("s0", 1, 1, 20),), packed_with=1)}
    jobs = [job(1, "a"), job(2, "x"), job(3, "a")]
    allocs = packed(pairs, cluster, jobs, previous=previous)
    assert allocs[1] == previous[1] and allocs[2] == previous[2]
    assert allocs[3].placements[0].server_id == "s1"
    # The host finished: its guest stays where it is and now holds the GPU as its own.
    allocs = packed(pairs, cluster, [job(2, "x"), job(3, "a"), job(4, "a")], previous=previous)
    assert allocs[2].packed_with is None and allocs[2].placements == previous[2].placements
    assert_not_overcommitted(cluster, Scheduler(Fifo(), Tune(), pairs=pairs).schedule(
        RoundInput(0.0, cluster, [job(2, "x"), job(3, "a"), job(4, "a")], previous)))


# -- properties --------------------------------------------------------------------------------------
MODELS = ("m0", "m1", "m2")


@st.composite
def packing_scenarios(draw, roomy: bool = False):
    cluster, jobs = draw(scenarios())
    if roomy or draw(st.booleans()):  # every guest's CPUs and memory fit: only the matching decides
        cluster = Cluster(tuple(replace(s, capacity=Resources(s.capacity.gpus, 48 * s.capacity.gpus,
                                                              1000 * s.capacity.gpus)) for s in cluster.servers))
    jobs = [replace(j, model=draw(st.sampled_from(MODELS)), no_share=draw(st.booleans()) and draw(st.booleans()))
            for j in jobs]
    tput = st.sampled_from([0.3, 0.5, 0.55, 0.6, 0.7, 0.9])
    entries = []
    for a, b in itertools.combinations_with_replacement(MODELS, 2):
        if draw(st.booleans()):
            x = draw(tput)
            entries.append(PairEntry(a, b, x, x if a == b else draw(tput)))
    return cluster, jobs, PairTable(tuple(entries))


def _run(cluster: Cluster, jobs: list[Job], pairs: PairTable | None, leftovers: bool = True):
    return Scheduler(Fifo(), Tune(redistribute=leftovers), pairs=pairs).schedule(RoundInput(0.0, cluster, jobs))


@SETTINGS
@given(packing_scenarios())
def test_packing_invariants(scenario) -> None:
    cluster, jobs, pairs = scenario
    by_id = {j.id: j for j in jobs}
    alone = _run(cluster, jobs, None)
    out = _run(cluster, jobs, pairs)
    # Never over-committed, a packed pair's GPUs counted once.
    assert_not_overcommitted(cluster, out)
    # At most two jobs per GPU: a guest sits on a host that is not itself packed, on exactly
    # the host's GPUs, and a host has one guest at most.
    hosts = [a.packed_with for a in out.allocations.values() if a.packed_with is not None]
    assert len(hosts) == len(set(hosts))
    for jid, a in out.allocations.items():
        if a.packed_with is None:
            continue
        host = out.allocations[a.packed_with]
        assert host.packed_with is None
        assert [(p.server_id, p.gpus) for p in a.placements] == [(p.server_id, p.gpus) for p in host.placements]
        g, h = by_id[jid], by_id[a.packed_with]
        assert can_share(g) and can_share(h) and jid not in alone.allocations
        assert pair_weight(pairs, h, g) > 1.0
    # Packing never removes, moves or shrinks what was placed without it: TUNE's demands stay
    # exactly as they were; only leftovers, handed out after packing, may go to a guest.
    bare, bare_packed = _run(cluster, jobs, None, False), _run(cluster, jobs, pairs, False)
    for jid, a in alone.allocations.items():
        assert bare_packed.allocations[jid] == bare.allocations[jid]
        assert [(p.server_id, p.gpus) for p in out.allocations[jid].placements] == [
            (p.server_id, p.gpus) for p in a.placements]
        assert all(p.cpus >= q.cpus - EPS and p.mem_gb >= q.mem_gb - EPS
                   for p, q in zip(out.allocations[jid].placements, bare.allocations[jid].placements))
    assert set(out.allocations) - set(alone.allocations) == {j for j, a in out.allocations.items()
                                                              if a.packed_with is not None}


def _brute_force(hosts: list[Job], guests: list[Job], pairs: PairTable) -> float:
    best = 0.0
    for k in range(min(len(hosts), len(guests)) + 1):
        for hs in itertools.combinations(hosts, k):
            for gs in itertools.permutations(guests, k):
                w = [pair_weight(pairs, h, g) for h, g in zip(hs, gs)]
                if all(x > 0 for x in w):
                    best = max(best, sum(w))
    return best


@SETTINGS
@given(packing_scenarios(roomy=True))
def test_matching_weight_equals_brute_force(scenario) -> None:
    cluster, jobs, pairs = scenario
    jobs = jobs[:9]  # small enough to enumerate every matching
    alone = _run(cluster, jobs, None)
    out = _run(cluster, jobs, pairs)
    hosts = [j for j in jobs if j.id in alone.allocations and can_share(j)]
    guests = [j for j in jobs if j.id not in alone.allocations and can_share(j)]
    by_id = {j.id: j for j in jobs}
    got = sum(pair_weight(pairs, by_id[a.packed_with], by_id[jid])
              for jid, a in out.allocations.items() if a.packed_with is not None)
    assert got == pytest.approx(_brute_force(hosts, guests, pairs), abs=1e-9)


# -- the pair table --------------------------------------------------------------------------------
def test_pair_table_lookups_in_either_order() -> None:
    t = table(("a", "x", 0.8, 0.7))
    assert t.get("x", "a") == (0.7, 0.8) and t.throughput("a", "x") == 0.8 and t.combined("x", "a") == 1.5
    assert t.get("a", "y") is None and t.combined("a", "y") == 0.0


@pytest.mark.parametrize("items, needle", [
    ({"models": ["a"], "throughput": [0.5, 0.5]}, "pairs[0]: field 'models' must be two model names"),
    ({"models": ["a", "b"], "throughput": [0.5, 1.2]}, "pairs[0] ('a', 'b'): field 'throughput' must be two numbers in [0, 1]"),
    ({"models": ["a", "b"], "throughput": [0.5, "x"]}, "field 'throughput'"),
    ({"models": ["a", "a"], "throughput": [0.5, 0.6]}, "pairs[0] ('a', 'a'): a model paired with itself"),
    ("nope", "pairs[0]: expected an object"),
])
def test_bad_pair_entries_name_the_entry(items, needle) -> None:
    from synergy.scheduler.profiles.format import ProfileError
    from synergy.scheduler.profiles.pairs import parse_pairs

    with pytest.raises(ProfileError) as err:
        parse_pairs([items], origin="p.json")
    assert str(err.value).startswith("p.json: ") and needle in str(err.value)


def test_duplicate_pair_in_reverse_order_is_an_error() -> None:
    from synergy.scheduler.profiles.format import ProfileError
    from synergy.scheduler.profiles.pairs import parse_pairs

    with pytest.raises(ProfileError, match=r"pairs\[1\] \('b', 'a'\): the pair is already listed at pairs\[0\]"):
        parse_pairs([{"models": ["a", "b"], "throughput": [0.6, 0.6]},
                     {"models": ["b", "a"], "throughput": [0.6, 0.6]}], origin="p.json")


def test_pairs_load_from_the_profile_file_and_round_trip(tmp_path) -> None:
    import json

    from synergy.scheduler.profiles.pairs import load_pairs, parse_pairs

    t = table(("a", "x", 0.8, 0.7), ("a", "a", 0.55, 0.55))
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"format": "synergy-profile/v1", "models": {}, "pairs": t.to_list()}))
    assert load_pairs(path) == t == parse_pairs(t.to_list())


def test_class_rule_covers_every_model_pair_by_task() -> None:
    from synergy.scheduler.profiles.pairs import DEFAULT_CLASS_RULE, from_class_rule

    t = from_class_rule(ZOO_LIKE)  # three image models, one language one
    assert len(t) == 4 * 5 // 2
    assert t.get("both", "insensitive") == DEFAULT_CLASS_RULE[("image", "language")]
    assert t.get("insensitive", "both") == DEFAULT_CLASS_RULE[("image", "language")][::-1]
    assert t.get("insensitive", "insensitive") == DEFAULT_CLASS_RULE[("language", "language")]


# -- the simulator: a packed job runs at its speed times its normalised throughput ----------------
def test_simulator_runs_a_packed_pair_at_its_pair_throughputs() -> None:
    from synergy.scheduler.simulator.engine import EngineConfig, Simulation

    pairs = table(("a", "x", 0.8, 0.7))
    cluster = one_server(1)
    sched = Scheduler(Fifo(), Tune(), pairs=pairs)
    first = sched.schedule(RoundInput(0.0, cluster, [job(1, "a"), job(2, "x")])).allocations
    assert guests_of(first) == {2: 1}
    result = Simulation(sched, cluster, [replace(job(1, "a"), arrival_s=0.0), replace(job(2, "x"), arrival_s=0.0)],
                        EngineConfig(round_s=600.0)).run()
    for jid, tput in ((1, 0.8), (2, 0.7)):
        alone_rate = FLAT.speed(*first[jid].per_gpu) / FLAT.iter_time_s
        assert result.records[jid].completion_s == pytest.approx(1000.0 / (alone_rate * tput))
    assert max(row[1] for row in result.timeline) == 1  # one GPU held, by the pair
    assert result.packed_jobs == 1 and result.packed_job_rounds == 1


@pytest.mark.parametrize("policy", ["fifo", "las", "srtf"])
def test_simulator_with_packing_is_the_same_with_and_without_memoisation(policy) -> None:
    """Packing depends on the policy's order and the jobs' static fields only, so skipping
    provably identical rounds must not change a packed run."""
    from synergy.scheduler.simulator.engine import EngineConfig, Simulation

    profiles = [ZOO_LIKE["cpu_hungry"], FLAT, ZOO_LIKE["both"]]
    models = ["a", "x", "y"]
    pairs = table(("a", "x", 0.8, 0.7), ("x", "y", 0.6, 0.6), ("a", "a", 0.55, 0.55))

    def jobs() -> list[Job]:
        return [Job(i, models[i % 3], (1, 2, 1, 4)[i % 4], 30.0 * i, 20000.0 + 5000.0 * (i % 5), profiles[i % 3],
                    no_share=(i % 7 == 0)) for i in range(24)]

    cluster = Cluster.homogeneous(2, gpus=4, cpus=48, mem_gb=1000)  # room for guests' CPUs
    sched = build_scheduler(policy, "tune", pairs=pairs)
    results = [Simulation(sched, cluster, jobs(), EngineConfig(memoise=memo)).run() for memo in (True, False)]
    assert results[0].packed_jobs > 0
    a, b = ([x for r in sorted(res.records.values(), key=lambda r: r.id) for x in (r.first_start_s, r.completion_s)]
            for res in results)
    assert a == pytest.approx(b)
    assert results[0].packed_jobs == results[1].packed_jobs


# -- GPU types (heterogeneous clusters) -----------------------------------------------------------
def test_a_guest_shares_only_gpus_of_a_type_it_accepts() -> None:
    """A V100 host with a free pair slot; the guest accepts T4 only, and the T4 server is full.
    Packed on type-blind code, it would share the V100 (a type it refused)."""
    pairs = table(("a", "x", 0.8, 0.7))
    cluster = Cluster((Server("v", Resources(1, 24, 500), gpu_type="V100"),
                       Server("t", Resources(1, 24, 500), gpu_type="T4")))
    host = job(1, "a", gpu_types=frozenset({"V100"}))
    blocker = job(2, "b", gpu_types=frozenset({"T4"}))  # fills the T4, pairs with nobody
    guest = job(3, "x", gpu_types=frozenset({"T4"}))
    allocs = packed(pairs, cluster, [host, blocker, guest])
    assert 3 not in allocs
    # Accepting V100 too, it shares the host's V100.
    allocs = packed(pairs, cluster, [host, blocker, job(3, "x", gpu_types=frozenset({"T4", "V100"}))])
    assert guests_of(allocs) == {3: 1}
    assert [p.server_id for p in allocs[3].placements] == ["v"]
