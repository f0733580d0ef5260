"""No churn through the daemon (issue 14): the core's decisions as the job history tells them."""

from __future__ import annotations

from pathlib import Path

import pytest

from synergy.scheduler.daemon.app import Logic
from synergy.scheduler.daemon.clock import ManualClock
from synergy.scheduler.daemon.config import DaemonConfig
from synergy.scheduler.daemon.context import DaemonContext
from synergy.scheduler.daemon.profiles import ProfileBook
from synergy.scheduler.daemon.records import JobSpec, JobState
from synergy.scheduler.daemon.store import MemoryStore
from test_daemon_logic import SimNode, clock, round_, state, submit


def _logic(**kw) -> Logic:
    config = DaemonConfig(state_dir=Path("unused"), round_s=10, lease_grace_s=5, node_timeout_s=6,
                          launch_timeout_s=20, stop_timeout_s=15, **kw)
    return Logic.build(DaemonContext(config, ManualClock(), MemoryStore(), ProfileBook({})))


def _nodes(logic: Logic, job: int) -> list[str]:
    return [p.server_id for p in logic.jobs.get(job).placements]


def test_cancelling_a_neighbour_leaves_the_job_on_the_other_node_running() -> None:
    """Two identical 2-GPU nodes: A and B on a, C on b. Cancel A: C keeps running where it is
    (before: C was stopped and moved beside B with nothing queued)."""
    logic = _logic()
    a, b = SimNode(logic, "a", gpus=2), SimNode(logic, "b", gpus=2)
    ja, jb, jc = (submit(logic, n) for n in "ABC")
    round_(logic)
    assert (_nodes(logic, ja), _nodes(logic, jb), _nodes(logic, jc)) == (["a"], ["a"], ["b"])
    a.heartbeat(), b.heartbeat()
    logic.jobs.cancel(ja, "done with it")
    a.heartbeat()
    for _ in range(3):
        clock(logic).advance(10)
        a.heartbeat(), b.heartbeat()
        round_(logic)
    c = logic.jobs.get(jc)
    assert c.state == JobState.RUNNING and not c.stopping and c.attempt == 1 and c.migrations == 0
    assert _nodes(logic, jc) == ["b"] and _nodes(logic, jb) == ["a"]


def test_a_relaunch_names_the_round_that_decided_the_move() -> None:
    """Relabelling off, so y moves: its stop says what the move buys, and the relaunch names
    the round that decided it, not the round y was first placed in."""
    logic = _logic(migration_matching=False)
    a, b = SimNode(logic, "a", gpus=2), SimNode(logic, "b", gpus=2)
    x, y = submit(logic, "x", gpus=2), submit(logic, "y", gpus=2)
    round_(logic)  # round 1
    a.heartbeat(), b.heartbeat()
    for _ in range(2):  # rounds 2 and 3: nothing changes
        clock(logic).advance(10)
        a.heartbeat(), b.heartbeat()
        round_(logic)
    logic.jobs.cancel(x, "done with it")
    a.heartbeat()
    clock(logic).advance(10)
    a.heartbeat(), b.heartbeat()
    round_(logic)  # round 4 moves y to a
    moving = logic.jobs.get(y)
    assert moving.stopping and moving.stop_reason == (
        "round 4: moving to a: 2 GPU, 16 CPU, 128 GB; placed afresh on another node (no relabelling this round)"
    ), moving.stop_reason
    clock(logic).advance(16)  # past stop_timeout_s: the daemon tells the node to stop the task
    b.heartbeat(), b.heartbeat()  # the SimNode stops it; its exit relaunches y
    after = logic.jobs.get(y)
    assert state(logic, y) == JobState.RUNNING and _nodes(logic, y) == ["a"]
    assert after.history[-1].reason == "relaunched with round 4's allocation", after.history[-1].reason
    assert after.round_index == 4 and after.next_round_index == 0


def test_a_profiling_lease_takes_no_room_the_pending_round_gave_and_preempts_nothing() -> None:
    """Issue 14's round 15/16: a round placed jobs, a profiling lease placed before they
    started took the node's CPUs, and the next round took them all back "before it started".
    Now a lease takes only what neither running jobs nor the decided round hold, and two
    arrivals profile side by side when the free CPUs allow."""
    logic = _logic()
    node = SimNode(logic, "n", gpus=4, cpus=2, mem_gb=8)
    placed = [submit(logic, f"q{i}") for i in range(2)]
    logic.rounds.pending = logic.rounds.plan()  # decided plan_lead ahead of the boundary
    planned = logic.rounds.pending.allocations
    assert sorted(planned) == placed
    profiled = [logic.jobs.submit(JobSpec(name=f"p{i}", command=("train",), gpus=1, profiler="synergy",
                                          checkpoint_dir="/tmp/ckpt")).id for i in range(2)]
    logic.profiling.place()
    leases = [logic.jobs.get(j).placements for j in profiled]
    used_cpus = sum(p.cpus for ps in planned.values() for p in ps) + sum(p.cpus for ps in leases for p in ps)
    used_mem = sum(p.mem_gb for ps in planned.values() for p in ps) + sum(p.mem_gb for ps in leases for p in ps)
    assert used_cpus <= 2 + 1e-9 and used_mem <= 8 + 1e-9, (planned, leases)
    assert any(leases), "the free CPU still profiles one job"
    logic.rounds.apply(logic.rounds.pending)
    logic.rounds.pending = None
    for _ in range(3):
        node.heartbeat()
        clock(logic).advance(10)
        node.heartbeat()
        round_(logic)
    for j in placed:
        job = logic.jobs.get(j)
        assert job.state == JobState.RUNNING and not job.stopping and job.attempt == 1 and job.preemptions == 0, (
            [t.reason for t in job.history])


def test_an_arrival_the_round_ranks_above_a_queued_job_gets_its_lease() -> None:
    """SRTF, one GPU free, a long job queued and a short arrival waiting for a profiling lease.
    Between rounds the lease leaves the queued job's share alone; the round ranks the arrival
    above it (behind the running jobs) and leaves it the GPU, and its lease goes there. Before,
    the arrival was ranked after every job and waited for the whole queue (issue 14: up to
    487 s in a loaded physical run), while the running jobs are never touched either way."""
    logic = _logic(policy="srtf")
    node = SimNode(logic, "n", gpus=4, cpus=2, mem_gb=8)
    running = [submit(logic, f"r{i}", iterations=10**6) for i in range(3)]
    round_(logic)
    node.heartbeat()
    assert all(state(logic, j) == JobState.RUNNING for j in running)
    queued = submit(logic, "q", iterations=10**6)
    short = logic.jobs.submit(JobSpec(name="s", command=("train",), gpus=1, profiler="synergy", iterations=100,
                                      checkpoint_dir="/tmp/ckpt")).id
    assert logic.profiling.place() == 0  # the one free GPU is the queued job's until a round says otherwise
    clock(logic).advance(10)
    node.heartbeat()
    round_(logic)
    assert logic.rounds.granted == frozenset({short})
    assert logic.profiling.place() == 1
    lease = logic.jobs.get(short)
    assert lease.state == JobState.PROFILING and lease.placements[0].server_id == "n"
    assert state(logic, queued) == JobState.QUEUED
    for j in running:
        job = logic.jobs.get(j)
        assert job.state == JobState.RUNNING and not job.stopping and job.preemptions == 0, [t.reason for t in job.history]


def test_arrivals_profile_side_by_side_on_a_two_cpu_node() -> None:
    """Before, each lease took the whole node and the next job's waited for it; then whole-CPU
    leases profiled two and kept the third waiting. The share is half a core per GPU here:
    three arrivals profile at once at half a core each (`sub_core` lease, max_cpus 0)."""
    logic = _logic()
    SimNode(logic, "n", gpus=4, cpus=2, mem_gb=8)
    jobs = [logic.jobs.submit(JobSpec(name=f"p{i}", command=("train",), gpus=1, profiler="synergy",
                                      checkpoint_dir="/tmp/ckpt")).id for i in range(3)]
    assert logic.profiling.place() == 3
    placed = [logic.jobs.get(j) for j in jobs]
    assert [j.placements[0].cpus for j in placed] == [0.5, 0.5, 0.5]
    assert all(j.profile_sub_core and j.profile_max_cpus == 0.5 for j in placed)
    # The lease's own point and the one below are accepted; a whole CPU is not its to ask.
    from synergy.scheduler.daemon.errors import InvalidArgument

    logic.leases.register_process(jobs[0], jobs[0], 1, 0, 1)
    logic.leases.renew(jobs[0], jobs[0], 1, 0, step=1, samples_per_s=1, steps_per_s=1, profile_cpus=0.25)
    assert logic.jobs.get(jobs[0]).placements[0].cpus == 0.25
    try:
        logic.leases.renew(jobs[0], jobs[0], 1, 0, step=2, samples_per_s=1, steps_per_s=1, profile_cpus=1)
    except InvalidArgument as exc:
        assert exc.field == "profile_cpus"
    else:
        raise AssertionError("a whole CPU accepted on a half-core lease")


def test_a_profiling_lease_measures_below_one_cpu_where_the_share_is_below_one() -> None:
    """Four GPUs on two cores (half a CPU per GPU): the lease says `sub_core` and holds half
    a core even alone on the node (a whole one is two GPUs' share), a point of a quarter core
    is accepted and set on the placement, and a whole CPU or a fraction that is not a sub-core
    point is refused naming the field."""
    from synergy.scheduler.daemon.errors import InvalidArgument

    logic = _logic()
    node = SimNode(logic, "n", gpus=4, cpus=2, mem_gb=8)
    job = logic.jobs.submit(JobSpec(name="p", command=("train",), gpus=1, profiler="synergy",
                                    checkpoint_dir="/tmp/ckpt")).id
    assert logic.profiling.place() == 1
    node.heartbeat()
    lease = logic.jobs.get(job)
    assert lease.profile_sub_core and lease.profile_max_cpus == 0.5 and lease.placements[0].cpus == 0.5
    logic.leases.renew(job, job, 1, 0, step=1, samples_per_s=1, steps_per_s=1, profile_cpus=0.25)
    assert logic.jobs.get(job).placements[0].cpus == 0.25
    logic.leases.renew(job, job, 1, 0, step=2, samples_per_s=1, steps_per_s=1, profile_cpus=0.5)
    assert logic.jobs.get(job).placements[0].cpus == 0.5
    for bad, field in ((0.3, "profile_sub_cpus"), (1, "profile_cpus"), (2, "profile_cpus")):
        try:
            logic.leases.renew(job, job, 1, 0, step=3, samples_per_s=1, steps_per_s=1, profile_cpus=bad)
        except InvalidArgument as exc:
            assert exc.field == field, exc
        else:
            raise AssertionError(f"{bad} accepted")


def test_no_sub_core_points_where_every_gpu_has_a_whole_cpu() -> None:
    from synergy.scheduler.daemon.errors import InvalidArgument

    logic = _logic()
    SimNode(logic, "n", gpus=2, cpus=8, mem_gb=8)
    job = logic.jobs.submit(JobSpec(name="p", command=("train",), gpus=1, profiler="synergy",
                                    checkpoint_dir="/tmp/ckpt")).id
    logic.profiling.place()
    assert not logic.jobs.get(job).profile_sub_core
    try:
        logic.leases.renew(job, job, 1, 0, step=1, samples_per_s=1, steps_per_s=1, profile_cpus=0.5)
    except InvalidArgument as exc:
        assert exc.field == "profile_sub_cpus" and "none" in str(exc)
    else:
        raise AssertionError("a sub-core point accepted on a whole-core lease")


def test_a_placement_the_node_cannot_hold_requeues_the_job_instead_of_failing_it() -> None:
    """Found by benchmarks/physical.py: the agent could not fit a 0.75-CPU share on one shared
    core ("impossible placement") and the job ended FAILED. The daemon's placement was at
    fault, not the job: it goes back to the queue and runs in a later round."""
    from synergy.scheduler.daemon.live import ObservedTask
    from synergy.scheduler.tasks import LAUNCH_FAILED, TaskPhase

    logic = _logic()
    node = SimNode(logic, "n", gpus=2)
    job = submit(logic, "j")
    round_(logic)
    node.heartbeat()
    (key,) = node.running()
    node.tasks[key] = ObservedTask(key, TaskPhase.EXITED, LAUNCH_FAILED, placement=node.tasks[key].placement,
                                   message="launch failed: impossible placement: needs 0.75 of a shared core")
    node.heartbeat()
    j = logic.jobs.get(job)
    assert j.state == JobState.QUEUED, [t.reason for t in j.history]
    assert "could not be launched" in j.history[-2].reason and "; requeued" in j.history[-2].reason
    clock(logic).advance(10)
    node.heartbeat()
    round_(logic)
    assert state(logic, job) == JobState.RUNNING and logic.jobs.get(job).attempt == 2
    # A launch failure of the job's own making (a missing command) still fails it.
    other = submit(logic, "k")
    round_(logic)
    node.heartbeat()
    key = next(k for k in node.running() if k.job_id == other)
    node.tasks[key] = ObservedTask(key, TaskPhase.EXITED, LAUNCH_FAILED, placement=node.tasks[key].placement,
                                   message="launch failed: command not found: 'train'")
    node.heartbeat()
    assert state(logic, other) == JobState.FAILED


def _profile_doc(points: list[tuple[float, float]]) -> dict:
    """A profile as the iterator reports it (complete_profile of measured points)."""
    from synergy.profiler.fill import complete_profile

    return complete_profile(points, gpus=1, dataset_bytes=10**6, sample_bytes=1e3, storage_bytes_per_s=1e15,
                            process_mem_gb=0.5, max_mem_gb=4.0, model="p", task="image")


def _profiled_on_its_lease(logic: Logic, node: SimNode, points: list[tuple[float, float]]) -> tuple[int, tuple]:
    """A job submitted for live profiling, placed on its lease, its process registered and its
    profile (`points`) reported: (its id, the lease's placements)."""
    job = logic.jobs.submit(JobSpec(name="p", command=("train",), gpus=1, profiler="synergy",
                                    checkpoint_dir="/tmp/ckpt")).id
    assert logic.profiling.place() == 1
    node.heartbeat()
    logic.leases.register_process(job, job, 1, 0, 1)
    lease = logic.jobs.get(job).placements
    assert logic.leases.report_profile(job, job, _profile_doc(points)) == "profiled"
    return job, lease


def test_a_profiled_job_runs_on_where_it_was_profiled_without_a_restart() -> None:
    """Issue 14 (physical run): ending a profiling lease with a stop and a relaunch cost each
    job seconds of process start-up. Now the reported profile makes the job RUNNING on its
    lease's placement, same attempt, and the next round's allocation reaches it as a RESIZE."""
    from synergy.scheduler.daemon.reconciler import InstructionKind

    logic = _logic(mechanism="tune")
    node = SimNode(logic, "n", gpus=4, cpus=4, mem_gb=8)
    job, lease = _profiled_on_its_lease(logic, node, [(1, 10.0), (2, 20.0), (3, 20.0)])
    j = logic.jobs.get(job)
    assert j.state == JobState.RUNNING and j.attempt == 1 and not j.stopping and j.placements == lease
    assert not j.profiling_lease and j.profile_max_cpus == 0 and j.history[-1].reason.startswith("profiled on n:")
    seen = len(node.seen)
    for _ in range(2):
        clock(logic).advance(10)
        node.heartbeat()
        logic.leases.renew(job, job, 1, 0, step=5, samples_per_s=20, steps_per_s=5)
        round_(logic)
        node.heartbeat()
    j = logic.jobs.get(job)
    assert j.state == JobState.RUNNING and j.attempt == 1 and not j.stopping and j.preemptions == 0, (
        [t.reason for t in j.history])
    assert j.placements[0].cpus == 2.0  # the profile's best case, in place
    kinds = [ins.kind for ins in node.seen[seen:]]
    assert InstructionKind.RESIZE in kinds and InstructionKind.STOP not in kinds and InstructionKind.LAUNCH not in kinds


def test_a_lease_holds_its_whole_room_while_it_measures_a_lower_point() -> None:
    """A half-core lease measuring a quarter core still holds half a core for the round: the
    quarter it leaves idle is not handed to a running job and then wanted back when the half
    core is measured again (re-check) or a higher point follows."""
    from synergy.scheduler.daemon.profiling import held_by_profiling

    logic = _logic()
    SimNode(logic, "n", gpus=4, cpus=2, mem_gb=8)
    job = logic.jobs.submit(JobSpec(name="p", command=("train",), gpus=1, profiler="synergy",
                                    checkpoint_dir="/tmp/ckpt")).id
    others = [logic.jobs.submit(JobSpec(name=f"o{i}", command=("train",), gpus=1, profiler="synergy",
                                        checkpoint_dir="/tmp/ckpt")).id for i in range(3)]
    assert logic.profiling.place() == 4
    logic.leases.register_process(job, job, 1, 0, 1)
    logic.leases.renew(job, job, 1, 0, step=1, samples_per_s=1, steps_per_s=1, profile_cpus=0.25)
    with logic.ctx.lock:
        held = held_by_profiling(logic.ctx.store.active_jobs())
    assert held["n"].cpus == 2.0, (held, others)


def test_a_running_job_leaves_an_arrival_room_for_its_profiling_lease() -> None:
    """Issue 14's dynamic trace: the first job, profiled and alone, got its best case (both
    of the node's CPUs) and four arrivals waited 21 s for it to end with three GPUs free: the
    round did not see jobs waiting for a lease. Now it sees them at their share, the running
    job is resized down in place (not preempted), and the arrival's lease fits."""
    logic = _logic(mechanism="tune")
    node = SimNode(logic, "n", gpus=4, cpus=2, mem_gb=8)
    first, _ = _profiled_on_its_lease(logic, node, [(0.5, 5.0), (1, 10.0), (2, 20.0)])
    clock(logic).advance(10)
    node.heartbeat()
    round_(logic)
    node.heartbeat()
    assert logic.jobs.get(first).placements[0].cpus == 2.0  # alone: its best case, the whole node
    arrival = logic.jobs.submit(JobSpec(name="q", command=("train", "--other"), gpus=1, profiler="synergy",
                                        checkpoint_dir="/tmp/ckpt")).id  # not the profile store's to answer
    assert logic.profiling.place() == 0  # no room now: the running job holds every CPU
    clock(logic).advance(10)
    node.heartbeat()
    round_(logic)
    node.heartbeat()
    assert logic.profiling.place() == 1, [t.reason for t in logic.jobs.get(arrival).history]
    j = logic.jobs.get(first)
    assert j.state == JobState.RUNNING and not j.stopping and j.attempt == 1 and j.preemptions == 0
    lease = logic.jobs.get(arrival).placements
    assert lease and j.placements[0].cpus + lease[0].cpus <= 2 + 1e-9, (j.placements, lease)


def test_a_job_still_starting_is_seen_at_its_share_then_at_its_profile() -> None:
    """Issue 14's physical run: a light job placed at its quarter core started (interpreter,
    imports, workers) under a quarter core's CPU weight beside the heavy jobs, 10-12 s against
    5 s at its share, and the last jobs of the queue set the makespan. While its agent reports
    the task in its start-up phase (`starting_up`) the round sees the job at its proportional share;
    once its training loop runs, at its profile."""
    from dataclasses import replace

    from synergy.scheduler.tasks import TaskKey

    logic = _logic(mechanism="tune")
    node = SimNode(logic, "n", gpus=4, cpus=2, mem_gb=8)
    _profiled_on_its_lease(logic, node, [(0.25, 90.0), (0.5, 90.0)])  # light: a quarter core will do
    twin = logic.jobs.submit(JobSpec(name="p2", command=("train",), gpus=1, profiler="synergy",
                                     checkpoint_dir="/tmp/ckpt")).id  # the profile store answers
    assert logic.jobs.get(twin).profile_source.startswith("stored"), logic.jobs.get(twin).profile_source
    clock(logic).advance(10)
    node.heartbeat()
    round_(logic)
    assert logic.jobs.get(twin).placements[0].cpus == 0.25  # placed at its demand
    node.heartbeat()  # the launch goes out; the agent reports the task in its start-up phase
    key = TaskKey(twin, 1, 0)
    node.tasks[key] = replace(node.tasks[key], starting_up=True)
    clock(logic).advance(10)
    node.heartbeat()
    round_(logic)
    j = logic.jobs.get(twin)
    assert j.placements[0].cpus == 0.5 and j.attempt == 1 and not j.stopping  # its share, resized in place
    node.heartbeat()
    node.tasks[key] = replace(node.tasks[key], starting_up=False)  # its training loop runs
    clock(logic).advance(10)
    node.heartbeat()
    round_(logic)
    j = logic.jobs.get(twin)
    assert j.placements[0].cpus == 0.25 and j.attempt == 1 and not j.stopping



def test_a_starting_job_is_allocated_its_share_and_ordered_at_its_own_pace() -> None:
    """The dynamic physical run: seen with the bare proportional profile (its pace unknown), a
    relaunched heavy job looked twice as short to SRTF as it was; SRTF preempted a job placed
    a round before for it, then the reverse ("before it started"). The stand-in keeps the
    job's own remaining time at its share and asks for exactly the share."""
    from synergy.scheduler.daemon.profiles import proportional_profile, starting_profile
    from synergy.scheduler.model import Cluster, Job
    from synergy.scheduler.profiles.format import SensitivityProfile
    from synergy.scheduler.throughput import best_case_per_gpu, proportional_remaining_s

    cluster = Cluster.homogeneous(1, gpus=4, cpus=2, mem_gb=8)  # a share of half a core
    record = _logic().jobs.submit(JobSpec(name="h", command=("train",), gpus=1, profiler="none"))
    for points in ([(0.25, 23.0), (0.5, 46.0), (1, 90.0)], [(0.25, 90.0), (0.5, 90.0)]):  # heavy, light
        own = SensitivityProfile.from_dict("p", _profile_doc(points))
        stand_in = starting_profile(record, own, cluster)
        job = Job(1, "p", 1, 0.0, 1000.0, own)
        starting = Job(1, "p", 1, 0.0, 1000.0, stand_in)
        assert proportional_remaining_s(starting, cluster) == pytest.approx(proportional_remaining_s(job, cluster))
        assert best_case_per_gpu(starting, cluster)[0] == pytest.approx(0.5)
        bare = Job(1, "p", 1, 0.0, 1000.0, proportional_profile(record, cluster))
        assert proportional_remaining_s(bare, cluster) != pytest.approx(proportional_remaining_s(job, cluster))


def test_under_slurm_a_starting_job_keeps_its_allocation() -> None:
    """Slurm cannot resize a running job: the share while it starts and its own allocation
    after would be two stops and two new Slurm jobs. There a starting job is seen as it is."""
    from dataclasses import replace

    from synergy.scheduler.tasks import TaskKey

    for backend, starting in (("agent", True), ("slurm", False)):
        logic = _logic(backend=backend, slurm_partition="syn")
        node = SimNode(logic, "n", gpus=4, cpus=2, mem_gb=8)
        job = submit(logic, "j")
        round_(logic)
        node.heartbeat()
        key = TaskKey(job, 1, 0)
        node.tasks[key] = replace(node.tasks[key], starting_up=True)
        node.heartbeat()
        with logic.ctx.lock:
            assert logic.rounds._starting(logic.jobs.get(job)) is starting, backend


def test_a_starting_job_costs_no_running_job_a_restart() -> None:
    """`make demo` under TUNE: two 1-core nodes with two fake GPUs, a heavy and a light job on
    each. While every job started the round saw each at its share; once all but one light job
    had reached their training loop, the round gave the heavy job beside it three quarters
    of the core and, to keep the starting one's half core, swapped the two light jobs between
    the nodes: two restarts (about 10 s each) for a state that lasts a second or two. A
    starting job's share is for its start-up; it must not move running jobs."""
    from dataclasses import replace

    from synergy.scheduler.tasks import TaskKey

    logic = _logic(mechanism="tune")
    nodes = [SimNode(logic, n, gpus=2, cpus=1, mem_gb=3) for n in ("a0", "a1")]
    heavy, light = _profile_doc([(0.25, 11.0), (0.5, 22.0), (1.0, 40.0)]), _profile_doc([(0.25, 40.0), (0.5, 40.0)])
    jobs = [submit(logic, name, profile=doc) for name, doc in
            (("heavy-a", heavy), ("heavy-b", heavy), ("light-a", light), ("light-b", light))]
    round_(logic)
    first = {j: _nodes(logic, j) for j in jobs}

    def step(starting: set[int]) -> None:
        for n in nodes:
            n.heartbeat()
        for n in nodes:
            for key in list(n.tasks):
                n.tasks[key] = replace(n.tasks[key], starting_up=key.job_id in starting)
        clock(logic).advance(10)
        for n in nodes:
            n.heartbeat()
        round_(logic)

    step(set(jobs))  # every process starting: each at its share
    step({jobs[3]})  # all but light-b in their training loop
    step(set())
    for j in jobs:
        record = logic.jobs.get(j)
        assert record.attempt == 1 and not record.stopping and record.migrations == 0, \
            (record.name, [t.reason for t in record.history])
        assert _nodes(logic, j) == first[j]
