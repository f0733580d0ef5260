"""The profiling phase replayed in the simulator (simulator/profiling.py, issue 14): leases
placed by the daemon's own core rule (`place_leases`), then the job runs on."""
from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from synergy.scheduler.model import EPS, Cluster, Job, Resources, RoundInput, Server
from synergy.scheduler.profiles.format import SensitivityProfile
from synergy.scheduler.registry import build_scheduler
from synergy.scheduler.simulator.engine import EngineConfig, Simulation
from synergy.scheduler.simulator.profiling import Leases, ProfilingReplay, profiling_round


def curve(name: str, need: float) -> SensitivityProfile:
    """Speed 1 from `need` CPUs per GPU up, linear to 0 below (rows below one CPU)."""
    rows = (0.25, 0.5, 1.0, 2.0)
    return SensitivityProfile(name, "image", rows, (1.0, 2.0),
                              tuple((min(1.0, c / need),) * 2 for c in rows), (2.0, 2.0), 0.1)


HEAVY, LIGHT = curve("heavy", 1.0), curve("light", 0.1)
NODE = Cluster((Server("n0", Resources(4, 2, 4)),))


def jobs(n: int = 4, iterations: float = 200) -> list[Job]:
    return [Job(i, "heavy" if i % 2 == 0 else "light", 1, 0.0, iterations, HEAVY if i % 2 == 0 else LIGHT)
            for i in range(n)]


def run(replay: ProfilingReplay | None, n: int = 4) -> dict[int, float]:
    sim = Simulation(build_scheduler("fifo", "tune"), NODE, jobs(n), EngineConfig(round_s=2.0, profiling=replay))
    result = sim.run()
    assert result.stopped == "completed"
    return {i: r.jct_s for i, r in result.records.items()}


def test_four_arrivals_profile_at_once_at_half_a_core_and_then_run_on() -> None:
    """Four GPUs on two cores: every arrival gets a half-core lease at once (none waits behind
    another's profiling), and each costs at most the time it profiled at half a core."""
    replay = ProfilingReplay(frozenset(range(4)), profile_s=4.0)
    out, leases = profiling_round(RoundInput(0.0, NODE, jobs(), {}, 2.0), replay, Leases({}),
                                  build_scheduler("fifo", "tune").schedule)
    assert sorted(leases.under) == [0, 1, 2, 3]
    assert all(a.placements[0].cpus == 0.5 for a in out.allocations.values())
    known, replayed = run(None), run(replay)
    for i in range(4):
        assert known[i] - EPS <= replayed[i] <= known[i] + 4.0 + 2.0, (i, known[i], replayed[i])


def test_the_replay_is_deterministic_and_waits_for_gpus_in_arrival_order() -> None:
    replay = ProfilingReplay(frozenset(range(6)), profile_s=4.0)
    first, second = run(replay, 6), run(replay, 6)
    assert first == second
    # Six arrivals, four GPUs: the last two profile once GPUs are free, after the first ends.
    assert min(first[4], first[5]) > min(first[i] for i in range(4))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 4), st.sampled_from([1, 2, 3, 4, 8])), min_size=1, max_size=3),
    st.lists(st.tuples(st.integers(1, 2), st.booleans(), st.booleans()), min_size=1, max_size=8),
    st.integers(0, 4),
)
# TUNE's revert-everywhere assumed every job's share fits its server; with leases holding
# part of s0 it did not, and the core raised "job 4 does not fit on server s0".
@example(servers=[(3, 2), (4, 1)], specs=[(1, False, False), (2, False, True), (1, False, True), (1, False, True),
                                          (1, True, False)], profiled_before=0)
def test_a_round_with_leases_never_overcommits_a_server(servers, specs, profiled_before) -> None:
    """What the core allocates plus what leases hold fits every server, round after round,
    and a job is never both under a lease and given an allocation by the core."""
    cluster = Cluster(tuple(Server(f"s{i}", Resources(g, c, 8)) for i, (g, c) in enumerate(servers)))
    js = [Job(i, "m", g, float(i), 1e6, HEAVY if heavy else LIGHT) for i, (g, heavy, _) in enumerate(specs)]
    replay = ProfilingReplay(frozenset(i for i, (_, _, p) in enumerate(specs) if p), profile_s=4.0)
    leases, previous = Leases({}), {}
    decide = build_scheduler("fifo", "tune").schedule
    for k in range(profiled_before + 3):
        out, leases = profiling_round(RoundInput(2.0 * k, cluster, js, previous, 2.0), replay, leases, decide)
        used: dict[str, Resources] = {}
        for alloc in out.allocations.values():
            for sid, r in alloc.held:
                used[sid] = used.get(sid, Resources()) + r
        for s in cluster.servers:
            assert used.get(s.id, Resources()).fits_in(s.capacity), (k, s, used)
        assert set(leases.under) <= replay.jobs and not set(leases.under) & leases.done
        previous = out.allocations


def test_a_running_job_leaves_a_later_arrival_room_to_profile_in() -> None:
    """Issue 14's dynamic trace: a lone profiled job whose best case is the whole node got all
    its CPUs, and four arrivals waited for it to end (21 s) with three GPUs free. The round
    sees a job waiting for a lease at its proportional share, so the lease fits at once."""
    greedy = curve("greedy", 2.0)  # saturates at 2 CPUs per GPU: the whole 2-core node
    first = Job(0, "greedy", 1, 0.0, 1e6, greedy)
    arrivals = [Job(i, "light", 1, 1.0, 1e6, LIGHT) for i in (1, 2, 3)]
    replay = ProfilingReplay(frozenset({1, 2, 3}), profile_s=4.0)
    decide = build_scheduler("fifo", "tune").schedule
    out, leases = profiling_round(RoundInput(0.0, NODE, [first], {}, 2.0), replay, Leases({}), decide)
    assert out.allocations[0].placements[0].cpus == 2.0  # alone, it gets its best case
    previous = {0: out.allocations[0]}
    out, leases = profiling_round(RoundInput(2.0, NODE, [first, *arrivals], previous, 2.0), replay, leases, decide)
    assert sorted(leases.under) == [1, 2, 3], out.waiting
    assert out.allocations[0].placements[0].cpus == 0.5  # back to its share, not preempted
    assert sorted(out.allocations) == [0, 1, 2, 3] and not out.waiting


def test_an_arrival_waiting_to_be_profiled_preempts_nobody() -> None:
    """The round sees a job waiting for a lease (at its share) after every other job: under
    SRTF a short arrival ranked first and preempted a running job to be profiled (the physical
    run's dynamic trace: light3 stopped "no placement ... even at the proportional share")."""
    running = [Job(i, "light", 1, 0.0, 1e6, LIGHT) for i in range(4)]  # long: SRTF ranks them last
    short = Job(9, "light", 1, 1.0, 10.0, LIGHT)
    decide = build_scheduler("srtf", "tune").schedule
    first = decide(RoundInput(0.0, NODE, running, {}, 2.0))
    previous = dict(first.allocations)
    replay = ProfilingReplay(frozenset({9}), profile_s=4.0)
    out, leases = profiling_round(RoundInput(2.0, NODE, [*running, short], previous, 2.0), replay, Leases({}), decide)
    assert sorted(out.allocations) == [0, 1, 2, 3] and not leases.under
    assert out.waiting == {9: "waiting for room to profile in"}


def test_an_arrival_waiting_for_a_lease_keeps_its_rank_among_the_queued_jobs() -> None:
    """SRTF, one GPU free, a long queued job and a short arrival to profile: the arrival's
    stand-in ranks above the queued job (behind the running ones, which keep their GPUs), so
    the round leaves it the GPU and its lease is placed. Ranked after every job, as before,
    it waited for the whole queue: up to 487 s in a loaded physical run (issue 14)."""
    running = [Job(i, "light", 1, 0.0, 1e6, LIGHT) for i in range(3)]
    decide = build_scheduler("srtf", "tune").schedule
    previous = dict(decide(RoundInput(0.0, NODE, running, {}, 2.0)).allocations)
    queued = Job(5, "light", 1, 1.0, 1e6, LIGHT)
    short = Job(9, "light", 1, 1.0, 10.0, LIGHT)
    replay = ProfilingReplay(frozenset({9}), profile_s=4.0)
    out, leases = profiling_round(RoundInput(2.0, NODE, [*running, queued, short], previous, 2.0), replay,
                                  Leases({}), decide)
    assert sorted(leases.under) == [9] and 5 in out.waiting, (out.waiting, leases)
    assert all(out.allocations[i].placements[0].server_id == "n0" for i in range(3))
    assert sorted(out.allocations) == [0, 1, 2, 9]


def test_a_stand_in_is_packed_after_the_jobs_it_waits_behind() -> None:
    """The physical run's dynamic trace: a job profiled a moment before ("light1") lost its
    place to the stand-in of a later arrival, which TUNE packed first for its larger demand
    (share 0.5 CPU, 1 GB against the light job's quarter core), and was preempted. Stand-ins
    (`RoundInput.last`) are packed last whatever their demand."""
    from synergy.scheduler.profiles.knee import knee_profile

    whole = (Server("n0", Resources(4, 2, 4)),)
    seen = Cluster((Server("n0", Resources(3, 1.5, 2.3)),), share_basis=whole)  # a lease holds the rest
    heavy, light = Job(1, "heavy", 1, 0.0, 1e6, HEAVY), Job(2, "light", 1, 5.0, 1e6, LIGHT)
    stand_in = Job(4, "light", 1, 15.0, 1e6, knee_profile("light", "image", 0.5, 1.0))
    out = build_scheduler("srtf", "tune").schedule(RoundInput(20.0, seen, [heavy, light, stand_in], {}, 2.0,
                                                              last=frozenset({4})))
    assert sorted(out.allocations) == [1, 2] and 4 in out.waiting, out.waiting


def test_jobs_never_profiled_are_ordered_as_the_daemon_sees_them_and_run_at_their_speed() -> None:
    """`EngineConfig.unprofiled` (a live run with `profiler: none`): the core sees the job at
    its share with the unknown pace, so SRTF orders by remaining iterations, while the job
    progresses at its own speed. One GPU: a slow job of 100 iterations (2 s each) and a quick
    one of 150 (0.1 s each). Knowing their speeds, SRTF runs the quick one first (15 s left
    against 200); not knowing them, the one with fewer iterations."""
    def pace(name: str, iter_s: float) -> SensitivityProfile:
        return SensitivityProfile(name, "image", (0.5, 1.0), (1.0, 2.0), ((1.0, 1.0), (1.0, 1.0)), (1.0, 2.0), iter_s)
    one = Cluster((Server("n0", Resources(1, 1, 2)),))

    def ends(unprofiled: frozenset[int]) -> dict[int, float]:
        work = [Job(0, "slow", 1, 0.0, 100, pace("slow", 2.0)), Job(1, "quick", 1, 0.0, 150, pace("quick", 0.1))]
        result = Simulation(build_scheduler("srtf", "proportional"), one, work,
                            EngineConfig(round_s=1.0, unprofiled=unprofiled)).run()
        assert result.stopped == "completed"
        return {i: r.completion_s for i, r in result.records.items()}

    known, blind = ends(frozenset()), ends(frozenset({0, 1}))
    assert abs(known[1] - 15.0) < 1.0 and abs(known[0] - 215.0) < 1.0, known
    assert abs(blind[0] - 200.0) < 1.0 and abs(blind[1] - 215.0) < 1.0, blind
