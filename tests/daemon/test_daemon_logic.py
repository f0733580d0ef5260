"""The daemon's logic without gRPC: in-memory store, manual clock, simulated node reports."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from synergy.scheduler.daemon.app import Logic
from synergy.scheduler.daemon.clock import ManualClock
from synergy.scheduler.daemon.config import DaemonConfig
from synergy.scheduler.daemon.context import DaemonContext
from synergy.scheduler.daemon.errors import FailedPrecondition, InvalidArgument, PermissionDenied
from synergy.scheduler.daemon.leases import LeaseAction
from synergy.scheduler.daemon.live import ObservedTask, TaskKey, TaskPhase
from synergy.scheduler.daemon.profiles import ProfileBook
from synergy.scheduler.daemon.reconciler import InstructionKind
from synergy.scheduler.daemon.records import JobSpec, JobState, NodeRecord
from synergy.scheduler.daemon.store import MemoryStore, SqliteStore
from synergy.scheduler.model import Resources


class SimNode:
    """Follows instructions the way an agent does and reports every task back."""

    def __init__(self, logic: Logic, node_id: str, gpus: int = 2, cpus: float = 16, mem_gb: float = 128) -> None:
        self.logic, self.id = logic, node_id
        self.tasks: dict[TaskKey, ObservedTask] = {}
        self.seen: list = []
        reply = logic.nodes.register(NodeRecord(node_id, node_id, Resources(gpus, cpus, mem_gb), Resources()), [])
        self._apply(reply)

    def heartbeat(self):
        reply = self.logic.nodes.heartbeat(self.id, {}, list(self.tasks.values()))
        self._apply(reply)
        return reply

    def exit(self, key: TaskKey, code: int) -> None:
        t = self.tasks[key]
        self.tasks[key] = ObservedTask(key, TaskPhase.EXITED, code, placement=t.placement)

    def running(self) -> list[TaskKey]:
        return [k for k, t in self.tasks.items() if t.phase != TaskPhase.EXITED]

    def _apply(self, reply) -> None:
        self.seen.extend(reply.instructions)
        for key in reply.forget:
            self.tasks.pop(key, None)
        for ins in reply.instructions:
            if ins.kind == InstructionKind.LAUNCH and ins.key not in self.tasks:
                self.tasks[ins.key] = ObservedTask(ins.key, TaskPhase.RUNNING, placement=ins.placement)
            elif ins.kind == InstructionKind.STOP and ins.key in self.tasks:
                self.exit(ins.key, -15)
            elif ins.kind == InstructionKind.RESIZE and ins.key in self.tasks:
                self.tasks[ins.key] = ObservedTask(ins.key, TaskPhase.RUNNING, placement=ins.placement)


@pytest.fixture
def logic() -> Logic:
    config = DaemonConfig(
        state_dir=Path("unused"), round_s=10, lease_grace_s=5, node_timeout_s=6, launch_timeout_s=20, stop_timeout_s=15
    )
    return Logic.build(DaemonContext(config, ManualClock(), MemoryStore(), ProfileBook({})))


def clock(logic: Logic) -> ManualClock:
    return logic.ctx.clock  # type: ignore[return-value]


def round_(logic: Logic) -> None:
    logic.rounds.apply(logic.rounds.plan())


def submit(logic: Logic, name: str, gpus: int = 1, **kw) -> int:
    kw.setdefault("profiler", "none")  # simulated jobs do not profile themselves (tests of profiling say so)
    return logic.jobs.submit(JobSpec(name=name, command=("train",), gpus=gpus, **kw)).id


def state(logic: Logic, job_id: int) -> JobState:
    return logic.jobs.get(job_id).state


def test_ranks_of_a_multi_node_job_stop_at_one_agreed_step(logic: Logic) -> None:
    a, b = SimNode(logic, "a", gpus=1), SimNode(logic, "b", gpus=1)
    job = submit(logic, "wide", gpus=2)
    round_(logic)
    assert len(logic.jobs.get(job).placements) == 2
    a.heartbeat(), b.heartbeat()
    for rank in (0, 1):
        logic.leases.register_process(job, job, 1, rank, 2)
    logic.leases.renew(job, job, 1, 0, step=100, samples_per_s=10, steps_per_s=10)
    logic.leases.renew(job, job, 1, 1, step=98, samples_per_s=10, steps_per_s=10)
    with logic.ctx.lock:
        j = logic.jobs.get(job)
        logic.ctx.save_jobs([(j, logic.jobs.request_stop(j, "test"))])
    first = logic.leases.renew(job, job, 1, 1, step=99, samples_per_s=10, steps_per_s=10)
    second = logic.leases.renew(job, job, 1, 0, step=101, samples_per_s=10, steps_per_s=10)
    assert first.action == second.action == LeaseAction.STOP
    assert first.stop_at_step == second.stop_at_step > 101
    # Both ranks exit after checkpointing: the job goes back to the queue, resuming from there.
    logic.leases.report_checkpoint(job, job, 1, first.stop_at_step, "/ckpt/x")
    a.exit(TaskKey(job, 1, 0), 75)
    a.heartbeat()
    assert state(logic, job) == JobState.RUNNING  # rank 1 still running
    b.exit(TaskKey(job, 1, 1), 75)
    b.heartbeat()
    after = logic.jobs.get(job)
    assert after.state == JobState.QUEUED and after.checkpoint_step == first.stop_at_step
    assert [t.to_state for t in after.history[-2:]] == [JobState.PREEMPTED, JobState.QUEUED]


def test_a_rank_that_stops_renewing_is_lost_and_requeued(logic: Logic) -> None:
    node = SimNode(logic, "n")
    job = submit(logic, "j")
    round_(logic)
    node.heartbeat()
    logic.leases.register_process(job, job, 1, 0, 1)
    clock(logic).advance(4)
    assert logic.leases.expire() == 0
    clock(logic).advance(2)
    assert logic.leases.expire() == 1
    j = logic.jobs.get(job)
    assert j.state == JobState.QUEUED and "lost: rank 0" in j.history[-2].reason
    # The agent is told to stop the stale attempt; a renewal from it is told to terminate.
    assert any(i.kind == InstructionKind.STOP for i in node.heartbeat().instructions)
    assert logic.leases.renew(job, job, 1, 0, 5, 0, 0).action == LeaseAction.TERMINATE


def test_a_launch_nobody_picks_up_times_out(logic: Logic) -> None:
    job = submit(logic, "j")
    SimNode(logic, "n")
    round_(logic)
    clock(logic).advance(21)
    logic.leases.expire()
    assert "did not register within 20 s" in logic.jobs.get(job).history[-2].reason


def test_unchanged_allocation_keeps_the_attempt_and_a_new_job_waits_for_room(logic: Logic) -> None:
    node = SimNode(logic, "n", gpus=2)
    first = submit(logic, "first", gpus=2)
    round_(logic)
    node.heartbeat()
    round_(logic)  # same decision again: no restart
    assert logic.jobs.get(first).attempt == 1 and node.running() == [TaskKey(first, 1, 0)]
    second = submit(logic, "second", gpus=2)
    logic.rounds.set_policy("las", "")
    logic.leases.register_process(first, first, 1, 0, 1)
    with logic.ctx.lock:  # give `first` service so LAS prefers `second`
        j = logic.jobs.get(first)
        logic.ctx.save_jobs([(j, j.__class__(**{**j.__dict__, "attained_gpu_s": 100.0}))])
    round_(logic)
    assert state(logic, second) == JobState.RUNNING and logic.jobs.get(first).stopping
    node.heartbeat()
    assert TaskKey(second, 1, 0) not in node.tasks  # GPUs still held by `first`
    node.exit(TaskKey(first, 1, 0), 75)
    node.heartbeat()  # the exit is recorded ...
    node.heartbeat()  # ... and the room it left is used
    assert node.running() == [TaskKey(second, 1, 0)]
    assert state(logic, first) == JobState.QUEUED


def test_node_lost_requeues_its_jobs_and_comes_back(logic: Logic) -> None:
    node = SimNode(logic, "n")
    job = submit(logic, "j")
    round_(logic)
    node.heartbeat()
    clock(logic).advance(7)
    assert logic.nodes.check_liveness() == ["n"]
    assert state(logic, job) == JobState.QUEUED
    assert "node n lost" in logic.jobs.get(job).history[-2].reason
    assert logic.nodes.list()[0].state == "lost"
    # issue 15 (7): the reason read "no heartbeat since 1795578374"; a person reads a UTC time
    assert re.fullmatch(r"no heartbeat since \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", logic.nodes.list()[0].reason)
    round_(logic)  # nowhere to go
    assert "no schedulable node" in logic.jobs.get(job).waiting_reason
    reply = node.heartbeat()  # back: the stale task is stopped, the node is ready
    assert reply.state == "ready"
    assert [i.kind for i in reply.instructions] == [InstructionKind.STOP]


def test_cordon_keeps_running_jobs_and_drain_moves_them(logic: Logic) -> None:
    n1, n2 = SimNode(logic, "n1", gpus=1), SimNode(logic, "n2", gpus=1)
    a = submit(logic, "a")
    round_(logic)
    home = logic.jobs.get(a).placements[0].server_id
    other = "n2" if home == "n1" else "n1"
    logic.nodes.cordon(home, "maintenance soon")
    logic.nodes.cordon(other, "also")
    b = submit(logic, "b")
    round_(logic)
    assert logic.jobs.get(a).attempt == 1 and not logic.jobs.get(a).stopping
    assert state(logic, b) == JobState.QUEUED
    logic.nodes.resume(other, "ok")
    round_(logic)
    assert logic.jobs.get(b).placements[0].server_id == other
    for n in (n1, n2):
        n.heartbeat()
    view = logic.nodes.drain(home, "disk swap")
    assert view.state == "draining"
    assert "node %s is draining: disk swap" % home in logic.jobs.get(a).stop_reason


def test_cancel_terminates_and_stops_the_task(logic: Logic) -> None:
    node = SimNode(logic, "n")
    job = submit(logic, "j")
    round_(logic)
    node.heartbeat()
    logic.leases.register_process(job, job, 1, 0, 1)
    assert logic.jobs.cancel("j", "user asked").state == JobState.CANCELLED
    assert logic.leases.renew(job, job, 1, 0, 1, 0, 0).action == LeaseAction.TERMINATE
    assert [i.kind for i in node.heartbeat().instructions] == [InstructionKind.STOP]
    with pytest.raises(FailedPrecondition):
        logic.leases.register_process(job, job, 1, 0, 1)


def test_exit_codes_decide_the_outcome(logic: Logic) -> None:
    node = SimNode(logic, "n", gpus=2)
    ok, bad, again = submit(logic, "ok"), submit(logic, "bad"), submit(logic, "again", gpus=0 + 1)
    round_(logic)
    node.heartbeat()
    node.exit(TaskKey(ok, 1, 0), 0)
    node.exit(TaskKey(bad, 1, 0), 3)
    node.heartbeat()
    assert state(logic, ok) == JobState.SUCCEEDED
    failed = logic.jobs.get(bad)
    assert failed.state == JobState.FAILED and "exited with code 3" in failed.reason and failed.exit_code == 3
    round_(logic)
    node.heartbeat()
    node.exit(TaskKey(again, 1, 0), 75)  # "restart me": preempted, not failed
    node.heartbeat()
    assert state(logic, again) == JobState.QUEUED


def test_a_token_acts_only_on_its_own_job(logic: Logic) -> None:
    SimNode(logic, "n", gpus=2)
    a, b = submit(logic, "a"), submit(logic, "b")
    round_(logic)
    with pytest.raises(PermissionDenied):
        logic.leases.renew(a, b, 1, 0, 0, 0, 0)


def test_in_place_resize_sends_resize_not_a_restart(logic: Logic) -> None:
    node = SimNode(logic, "n", gpus=2, cpus=16)
    job = submit(logic, "j")
    round_(logic)
    node.heartbeat()
    with logic.ctx.lock:
        j = logic.jobs.get(job)
        from dataclasses import replace

        p = replace(j.placements[0], cpus=j.placements[0].cpus / 2)
        logic.ctx.save_jobs([(j, replace(j, placements=(p,)))])
    kinds = [i.kind for i in node.heartbeat().instructions]
    assert kinds == [InstructionKind.RESIZE] and logic.jobs.get(job).attempt == 1
    assert node.heartbeat().instructions == []


def _metric(logic: Logic, name: str) -> float:
    value = logic.ctx.metrics.registry.get_sample_value(name)
    return 0.0 if value is None else value


def test_a_round_that_would_only_rename_nodes_restarts_nothing(logic: Logic) -> None:
    """x runs on a, y on b; x ends. Best fit alone would now put y on a (the first of two empty
    nodes): a migration for nothing. Relabelling (Tesserae) keeps y where it runs."""
    a, b = SimNode(logic, "a", gpus=2), SimNode(logic, "b", gpus=2)
    x, y = submit(logic, "x", gpus=2), submit(logic, "y", gpus=2)
    round_(logic)
    assert [p.server_id for p in logic.jobs.get(y).placements] == ["b"]
    a.heartbeat(), b.heartbeat()
    logic.jobs.cancel(x, "done with it")
    a.heartbeat()
    assert state(logic, x) == JobState.CANCELLED
    clock(logic).advance(10)
    a.heartbeat(), b.heartbeat()  # both alive: both take new work
    round_(logic)
    after = logic.jobs.get(y)
    assert after.state == JobState.RUNNING and not after.stopping and after.attempt == 1
    assert [p.server_id for p in after.placements] == ["b"] and after.migrations == 0
    assert [i.kind for i in b.heartbeat().instructions] == []
    assert _metric(logic, "synergyd_migrations_total") == 0 == _metric(logic, "synergyd_round_migrations")


def test_migrations_are_counted_per_round_and_per_job() -> None:
    """The same rounds with relabelling off: y is moved, and /metrics says so."""
    config = DaemonConfig(state_dir=Path("unused"), round_s=10, lease_grace_s=5, node_timeout_s=6,
                          launch_timeout_s=20, stop_timeout_s=15, migration_matching=False)
    logic = Logic.build(DaemonContext(config, ManualClock(), MemoryStore(), ProfileBook({})))
    a, b = SimNode(logic, "a", gpus=2), SimNode(logic, "b", gpus=2)
    x, y = submit(logic, "x", gpus=2), submit(logic, "y", gpus=2)
    round_(logic)
    a.heartbeat(), b.heartbeat()
    logic.jobs.cancel(x, "done with it")
    a.heartbeat()
    clock(logic).advance(10)
    a.heartbeat(), b.heartbeat()
    round_(logic)
    moving = logic.jobs.get(y)
    assert moving.stopping and [p.server_id for p in moving.next_placements] == ["a"] and moving.migrations == 1
    assert _metric(logic, "synergyd_migrations_total") == 1 == _metric(logic, "synergyd_round_migrations")
    b.heartbeat(), b.heartbeat()
    logic.jobs.cancel(y, "enough")
    a.heartbeat(), b.heartbeat()
    assert state(logic, y) == JobState.CANCELLED
    assert _metric(logic, "synergyd_job_migrations_count") == 2  # x (0) and y (1)
    assert _metric(logic, "synergyd_job_migrations_sum") == 1


def test_a_profiling_hold_leaves_the_proportional_share_and_places_nothing_without_cpus(logic: Logic) -> None:
    # Regression (make demo): a profile took a node's only core and all its memory; the next
    # round saw that node with 0 CPUs, took the cluster's proportional share as 0 per GPU, and
    # placed a queued job there with "1 GPU, 0 CPU, 0 GB", which its agent could not launch.
    a, b = SimNode(logic, "a", gpus=2, cpus=1, mem_gb=3), SimNode(logic, "b", gpus=2, cpus=1, mem_gb=3)
    first = submit(logic, "first", model="resnet18")
    round_(logic)
    assert state(logic, first) == JobState.RUNNING
    used = logic.jobs.get(first).placements[0].server_id
    profiled = logic.jobs.submit(JobSpec(name="prof", command=("train",), gpus=1, profiler="synergy",
                                         checkpoint_dir="/tmp/ckpt")).id
    assert logic.profiling.place() == 1
    held = logic.jobs.get(profiled).placements[0]
    assert held.server_id != used and held.cpus == 0.5  # half a core: the share is below one CPU per GPU
    queued = submit(logic, "queued", model="resnet18")
    cluster, _ = logic.rounds.snapshot()
    assert cluster.proportional_share(1) == Resources(1, 0.5, 1.5)
    round_(logic)
    for p in logic.jobs.get(queued).placements:
        assert p.cpus > 0 and p.mem_gb > 0, p
        if p.server_id == held.server_id:  # beside the lease: in what it leaves
            assert p.cpus + held.cpus <= 1 + 1e-9 and p.mem_gb + held.mem_gb <= 3 + 1e-9, (p, held)
    a.heartbeat(), b.heartbeat()


def test_renewals_that_change_nothing_never_write_the_database(tmp_path: Path) -> None:
    """A thousand renewals a second must cost no SQLite write; agreeing a stop step must."""
    config = DaemonConfig(state_dir=tmp_path, round_s=10, lease_grace_s=5, launch_timeout_s=20, stop_timeout_s=15)
    store = SqliteStore(tmp_path / "synergyd.sqlite")
    logic = Logic.build(DaemonContext(config, ManualClock(), store, ProfileBook({})))
    node = SimNode(logic, "n")
    job = submit(logic, "j")
    round_(logic)
    node.heartbeat()
    logic.leases.register_process(job, job, 1, 0, 1)
    before = store._db.total_changes
    for step in range(1, 201):
        clock(logic).advance(0.5)
        assert logic.leases.renew(job, job, 1, 0, step, 320, 10).action == LeaseAction.CONTINUE
    assert store._db.total_changes == before
    with logic.ctx.lock:
        j = logic.jobs.get(job)
        logic.ctx.save_jobs([(j, logic.jobs.request_stop(j, "test"))])
    written = store._db.total_changes
    assert logic.leases.renew(job, job, 1, 0, 201, 320, 10).action == LeaseAction.STOP
    assert store._db.total_changes > written  # the stop step is committed before it is told
    store.close()


def test_a_kept_renewal_answer_is_the_answer_built_afresh(logic: Logic) -> None:
    """JobServicer keeps each rank's last answer and copies it while nothing it was built from
    changed: every answer must equal one built by a servicer that kept nothing, through a moved
    clock, a changed allocation in force, a progress flush, a new round, a due checkpoint, a
    stop and the end of the job. A quiet renewal (a stream's `answer_every`) is left
    unanswered exactly when its answer would repeat the last one sent but for the expiry."""
    from synergy.scheduler.daemon.servicers.job_servicer import JobServicer
    from synergy.v1 import job_pb2

    node = SimNode(logic, "n")
    job = submit(logic, "j", checkpoint_dir="/ckpt", checkpoint_every_s=30)
    round_(logic)
    node.heartbeat()
    logic.leases.register_process(job, job, 1, 0, 1)
    keeping, quiet = JobServicer(logic.ctx, logic.leases), JobServicer(logic.ctx, logic.leases)
    step = 0
    sent: job_pb2.RenewLeaseResponse | None = None  # the quiet servicer's last answer
    unanswered = 0

    def but_expiry(reply: job_pb2.RenewLeaseResponse) -> job_pb2.RenewLeaseResponse:
        out = job_pb2.RenewLeaseResponse()
        out.CopyFrom(reply)
        out.lease.expires_at_unix_s = 0
        return out

    def renew() -> job_pb2.RenewLeaseResponse:
        nonlocal step, sent, unanswered
        step += 10
        request = job_pb2.RenewLeaseRequest(job_id=job, attempt=1, rank=0, step=step, samples_per_s=320,
                                            steps_per_s=10)
        kept = keeping._renew(job, request, wait=True)
        told = quiet._renew(job, request, wait=True, quiet=sent is not None)
        fresh = JobServicer(logic.ctx, logic.leases)._renew(job, request, wait=True)
        assert kept == fresh
        if told is None:
            assert sent is not None and but_expiry(sent) == but_expiry(fresh)
            unanswered += 1
        else:
            assert told == fresh and (sent is None or but_expiry(sent) != but_expiry(fresh))
            sent = told
        return kept

    first = renew()
    clock(logic).advance(1)
    again = renew()
    assert again.lease.expires_at_unix_s == first.lease.expires_at_unix_s + 1  # kept, with the new expiry
    assert not again.in_force.known
    key = TaskKey(job, 1, 0)
    node.tasks[key] = replace(node.tasks[key], cores=(2, 3))
    node.heartbeat()
    assert list(renew().in_force.cores) == [2, 3]
    node.tasks[key] = replace(node.tasks[key], cores=(4, 5))
    node.heartbeat()
    assert list(renew().in_force.cores) == [4, 5]
    with logic.ctx.lock:  # the round resizes the job in place: a new record, the same action
        j = logic.jobs.get(job)
        logic.ctx.save_jobs([(j, replace(j, placements=(replace(j.placements[0], cpus=1.5),)))])
    assert renew().lease.placements[0].cpus == 1.5
    with logic.ctx.lock:  # a progress flush: a new record, the same answer
        j = logic.jobs.get(job)
        logic.ctx.save_jobs([(j, replace(j, steps_done=j.steps_done + 50, attained_gpu_s=j.attained_gpu_s + 5))])
    renew()
    renew()
    with logic.ctx.lock:  # the next round keeps the job where it is: its lease names the new round
        j = logic.jobs.get(job)
        logic.ctx.save_jobs([(j, replace(j, round_index=j.round_index + 1))])
    assert renew().lease.round_index == j.round_index + 1
    clock(logic).advance(31)
    assert renew().checkpoint_at_step > step  # a periodic checkpoint became due
    with logic.ctx.lock:
        j = logic.jobs.get(job)
        logic.ctx.save_jobs([(j, logic.jobs.request_stop(j, "test"))])
    stop = renew()
    assert stop.action == job_pb2.LEASE_ACTION_STOP and stop.stop_at_step > step
    renew()
    logic.jobs.cancel(job, "test")
    assert renew().action == job_pb2.LEASE_ACTION_TERMINATE
    assert unanswered >= 4  # the quiet servicer left the repeats unanswered


def test_a_checkpoint_step_far_past_the_renewals_is_refused(logic: Logic) -> None:
    """Issue 15 (6): ReportCheckpoint accepted step 99999 of a job that had renewed at step 100."""
    node = SimNode(logic, "a", gpus=1)
    job = submit(logic, "honest", gpus=1)
    round_(logic)
    node.heartbeat()
    logic.leases.register_process(job, job, 1, 0, 1)
    logic.leases.renew(job, job, 1, 0, step=100, samples_per_s=10, steps_per_s=10)
    with pytest.raises(InvalidArgument, match="^step: 99999 is past what job"):
        logic.leases.report_checkpoint(job, job, 1, 99999, "/ckpt/forged")
    assert logic.jobs.get(job).checkpoint_step == 0  # nothing changed
    assert logic.leases.report_checkpoint(job, job, 1, 120, "/ckpt/ok") == 120  # a plausible one is kept
