"""Leftovers are a bonus (issue 14): never taken from a CPU-only job or a packed guest.

On small GPU nodes (4 GPUs, 2 CPUs, 8 GB) TUNE's leftover step used to hand every CPU and
GB of a node to the training job there, inside the mechanism: a CPU-only job found "the
largest free slot is 0 CPUs, 0 GB" and was preempted, and a profitable pair was never
packed. The core now hands leftovers out after packing and takes them back before the CPU
array (mechanisms/leftover.py), and a job's surplus above its share does not push a
co-located job off the node it ran on where the surplus is worth nothing (`make demo`'s
churn; placement/surplus.py).
"""
from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from synergy.scheduler.arrays.cpu_array import CpuArray
from synergy.scheduler.core import Scheduler
from synergy.scheduler.mechanisms.tune import Tune
from synergy.scheduler.model import (EPS, Allocation, Cluster, Job, JobKind, Placement, Resources, RoundInput,
                                     Server)
from synergy.scheduler.placement.migration import count_migrations
from synergy.scheduler.policies.fifo import Fifo
from synergy.scheduler.policies.las import Las
from synergy.scheduler.profiles.format import SensitivityProfile, load_profiles
from synergy.scheduler.profiles.pairs import PairEntry, PairTable
from synergy.scheduler.throughput import proportional_speed, speed
from test_core_cpu_only import SETTINGS, scenarios as cpu_scenarios
from test_core_properties import assert_not_overcommitted

ROOT = Path(__file__).resolve().parents[1]
ROWS = (0.25, 0.5, 1.0, 2.0, 4.0)
COLS = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0)


def small_grid(name: str, cpu_need: float, mem_need: float) -> SensitivityProfile:
    """A profile on a grid small nodes can hold, saturating at (cpu_need, mem_need) per GPU."""
    def raw(c: float, m: float) -> float:
        return min(1.0, c / cpu_need) ** 0.8 * min(1.0, m / mem_need) ** 0.3

    grid = tuple(tuple(round(raw(c, m) / raw(1.0, 2.0), 6) for m in COLS) for c in ROWS)
    return SensitivityProfile(name, "image", ROWS, COLS, grid, (1.0, 2.0), 0.1)


#: Saturates beyond any small node: TUNE falls back to proportional, leftovers fill the rest.
HUNGRY = small_grid("hungry", 4.0, 16.0)
#: Saturates at a quarter CPU and half a GB per GPU.
LIGHT = small_grid("light", 0.25, 0.5)
SMALL = Resources(4, 2, 8)


def training(jid: int, profile: SensitivityProfile, model: str = "m", arrival: float | None = None) -> Job:
    return Job(jid, model, 1, float(jid) if arrival is None else arrival, 1e6, profile)


def cpu_job(jid: int, cpus: float, mem_gb: float, arrival: float = 0.0) -> Job:
    return Job(jid, "cpu", 0, arrival, 1e6, LIGHT, kind=JobKind.CPU_ONLY, cpus=cpus, mem_gb=mem_gb)


# -- a CPU-only job on a small GPU node ------------------------------------------------------------
def test_a_cpu_only_job_runs_beside_training_on_a_small_gpu_node() -> None:
    cluster = Cluster((Server("g", SMALL),))
    hungry, cpu = training(1, HUNGRY), cpu_job(10, 0.5, 1.0)
    out = Scheduler(Fifo(), Tune()).schedule(RoundInput(0.0, cluster, [hungry, cpu]))
    assert_not_overcommitted(cluster, out)
    assert out.allocations[10].placements == (Placement("g", 0, 0.5, 1.0),), out.waiting.get(10)
    # What the CPU-only job leaves is still handed out: the training job holds the rest.
    assert out.allocations[1].total == Resources(1, 1.5, 7.0)
    # Leftovers are no demand of the array's either: untrimmed, the job fits on idle room.
    idle_only = Scheduler(Fifo(), Tune(), cpu_array=CpuArray(trim_training=False))
    assert 10 in idle_only.schedule(RoundInput(0.0, cluster, [hungry, cpu])).allocations


def test_a_running_cpu_only_job_is_not_preempted_by_leftovers() -> None:
    """The CPU-only job ran alone; a training job arrives whose proportional share leaves
    it room: it keeps running, and the training job gets the rest."""
    cluster = Cluster((Server("g", SMALL),))
    cpu = cpu_job(10, 1.0, 2.0)
    sched = Scheduler(Fifo(), Tune())
    first = sched.schedule(RoundInput(0.0, cluster, [cpu]))
    second = sched.schedule(RoundInput(300.0, cluster, [cpu, training(1, HUNGRY, arrival=200.0)], first.allocations))
    assert second.allocations[10] == first.allocations[10], second.waiting.get(10)
    assert second.allocations[1].total == Resources(1, 1.0, 6.0)


# -- a packed guest on a small GPU node ------------------------------------------------------------
def test_a_profitable_pair_is_packed_on_a_small_gpu_node() -> None:
    """2 GPUs, 1 CPU, 8 GB: a light host and a hungry job fill the GPUs; the hungry one falls
    back to its share (0.5 CPUs, 4 GB), and the light guest's 0.25 CPUs and 0.5 GB are free
    beside the light host before leftovers are handed out."""
    cluster = Cluster((Server("g", Resources(2, 1, 8)),))
    pairs = PairTable((PairEntry("a", "x", 0.8, 0.8),))
    jobs = [training(1, LIGHT, "a"), training(2, HUNGRY, "b"), training(3, LIGHT, "x")]
    out = Scheduler(Fifo(), Tune(), pairs=pairs).schedule(RoundInput(0.0, cluster, jobs))
    assert_not_overcommitted(cluster, out)
    assert out.allocations[3].packed_with == 1, out.waiting.get(3)
    assert out.allocations[3].total == Resources(1, 0.25, 0.5)
    # The hungry job gets what the pair leaves: no CPU, 8 - 0.5 - 0.5 GB.
    assert out.allocations[2].total == Resources(1, 0.5, 7.0)


# -- make demo's churn ----------------------------------------------------------------------------
def demo_round(jobs: list[Job], previous: dict[int, Allocation], **kw):
    """examples/local_cluster: two agents of one core and two fake GPUs, TUNE, FIFO."""
    cluster = Cluster(tuple(Server(f"a{i}", Resources(2, 1, 4)) for i in range(2)))
    return cluster, Scheduler(Fifo(), Tune(), **kw).schedule(RoundInput(300.0, cluster, jobs, previous))


def demo_jobs() -> list[Job]:
    zoo = load_profiles(ROOT / "examples" / "local_cluster" / "profiles.json")
    return [Job(jid, model, 1, 0.0, 1e6, zoo[model]) for jid, model in
            ((1, "heavy-loader"), (2, "heavy-loader"), (3, "light-loader"), (4, "light-loader"))]


def test_a_finished_neighbour_does_not_move_the_light_job_on_the_other_node() -> None:
    """Each agent runs a heavy job and a light one. Light job 3 ends: TUNE, from scratch,
    gives heavy job 2 its best case (the whole core of a1) and puts light job 4 beside heavy
    job 1 on a0. Job 4's GPUs on a1 are still free and only job 2's surplus fills the core:
    job 4 stays, job 2 keeps 0.75 of a core and job 1 gets the core of a0 its neighbour left."""
    jobs = demo_jobs()
    cluster, first = demo_round(jobs, {})
    first = first.allocations
    assert {j: first[j].placements[0].server_id for j in first} == {1: "a0", 2: "a1", 3: "a0", 4: "a1"}
    left = [j for j in jobs if j.id != 3]
    previous = {j.id: first[j.id] for j in left}
    _, out = demo_round(left, previous)
    assert_not_overcommitted(cluster, out)
    assert count_migrations(previous, out.allocations) == 0 and out.moves == {}
    by_id = {j.id: j for j in left}
    assert {j: a.total.cpus for j, a in out.allocations.items()} == {1: 1.0, 2: 0.75, 4: 0.25}
    # Laid out afresh without stay-over-surplus, the plan moves job 4 for nothing: the same
    # speeds, a restart. (The default keeps this round's layout as it was: the plan places
    # exactly last round's jobs, placement/steady.py.)
    _, afresh = demo_round(left, previous, stay_as_before=False)
    assert afresh.allocations == out.allocations
    _, moved = demo_round(left, previous, stay_over_surplus=False, stay_as_before=False)
    assert set(moved.moves) == {4} and "does not fit where it ran (a1: 0 CPUs, " in moved.moves[4]
    assert sorted(speed(by_id[j], a) for j, a in moved.allocations.items()) == sorted(
        speed(by_id[j], a) for j, a in out.allocations.items())


# -- properties -----------------------------------------------------------------------------------
@given(cpu_scenarios(), st.sampled_from([Fifo(), Las()]), st.sampled_from([0.25, 1.0]), st.booleans())
@SETTINGS
def test_leftovers_change_only_what_placed_jobs_hold(scenario, policy, fraction, trim) -> None:
    """With and without leftovers the same jobs run on the same GPUs, CPU-only jobs exactly
    as they asked; leftovers only add CPUs and memory, and never over-commit a server."""
    cluster, train, cpu = scenario
    array = CpuArray(borrow_fraction=fraction, trim_training=trim)
    inp = RoundInput(0.0, cluster, train + cpu)
    with_ = Scheduler(policy, Tune(), cpu_array=array).schedule(inp)
    without = Scheduler(policy, Tune(redistribute=False), cpu_array=array).schedule(inp)
    assert_not_overcommitted(cluster, with_)
    assert set(with_.allocations) == set(without.allocations)
    by_id = {j.id: j for j in train}
    for jid, a in with_.allocations.items():
        b = without.allocations[jid]
        assert [(p.server_id, p.gpus) for p in a.placements] == [(p.server_id, p.gpus) for p in b.placements]
        if jid not in by_id:  # CPU-only
            assert a == b
            continue
        assert all(p.cpus >= q.cpus - EPS and p.mem_gb >= q.mem_gb - EPS for p, q in zip(a.placements, b.placements))
        assert speed(by_id[jid], a) >= speed(by_id[jid], b) - 1e-9


@given(cpu_scenarios(), st.integers(0, 2**16))
@SETTINGS
def test_staying_over_surplus_keeps_every_guarantee(scenario, seed) -> None:
    """Round two after a change of jobs: never over-committed, every training job at least
    as fast as its proportional share, and no more migrations than without the step."""
    import random

    cluster, train, cpu = scenario
    rng = random.Random(seed)
    first_jobs = [j for j in train + cpu if rng.random() < 0.7]
    second_jobs = [j for j in train + cpu if j in first_jobs and rng.random() < 0.7 or j not in first_jobs]
    sched = Scheduler(Fifo(), Tune())
    first = sched.schedule(RoundInput(0.0, cluster, first_jobs)).allocations
    inp = RoundInput(300.0, cluster, second_jobs, {j: a for j, a in first.items() if any(
        k.id == j for k in second_jobs)})
    out = sched.schedule(inp)
    assert_not_overcommitted(cluster, out)
    gpu_cluster = Cluster(tuple(s for s in cluster.servers if s.capacity.gpus > 0))
    for job in second_jobs:
        if job.id in out.allocations and job.gpus > 0:
            assert speed(job, out.allocations[job.id]) >= proportional_speed(job, gpu_cluster) - 1e-6
    plain = Scheduler(Fifo(), Tune(), stay_over_surplus=False).schedule(inp)
    train_ids = {j.id for j in train}
    assert set(out.allocations) & train_ids == set(plain.allocations) & train_ids
    assert count_migrations(inp.previous, {j: a for j, a in out.allocations.items() if j in train_ids}) <= \
        count_migrations(inp.previous, {j: a for j, a in plain.allocations.items() if j in train_ids})
