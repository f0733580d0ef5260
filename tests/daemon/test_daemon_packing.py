"""Packed allocations in the daemon (Tesserae, issue 10): a RoundOutput with `packed_with`
becomes a LAUNCH with `TaskSpec.packed_with_job_id`, after its host's, and the pair's GPUs are
counted once; a packed job whose host stops or moves is asked to stop in the same round.

The core's packing pass is not what is tested here: the rounds are decided by hand
(`Hand`, in the decider's place), so the daemon's side is tested on exactly the output given.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from synergy.scheduler.core import Scheduler
from synergy.scheduler.daemon.app import Logic
from synergy.scheduler.daemon.clock import ManualClock
from synergy.scheduler.daemon.config import DaemonConfig
from synergy.scheduler.daemon.context import DaemonContext
from synergy.scheduler.daemon.live import ObservedTask, TaskKey, TaskPhase
from synergy.scheduler.daemon.profiles import ProfileBook
from synergy.scheduler.daemon.reconciler import InstructionKind
from synergy.scheduler.daemon.records import JobSpec, JobState, NodeRecord
from synergy.scheduler.daemon.servicers.convert import instruction_to_msg, job_to_info
from synergy.scheduler.daemon.store import MemoryStore
from synergy.scheduler.model import Allocation, Placement, Resources, RoundInput, RoundOutput


@dataclass
class Hand:
    """A decider that answers every round with the allocations set on it (for the jobs still active)."""

    allocations: dict[int, Allocation] = field(default_factory=dict)
    seen: list[RoundInput] = field(default_factory=list)

    def decide(self, scheduler: Scheduler, inp: RoundInput) -> RoundOutput:
        self.seen.append(inp)
        active = {j.id for j in inp.jobs}
        return RoundOutput({k: a for k, a in self.allocations.items() if k in active})

    def close(self) -> None:
        pass


class Node:
    """Follows instructions the way an agent does (hosts before partners) and reports every task."""

    def __init__(self, logic: Logic, node_id: str, gpus: int = 1) -> None:
        self.logic, self.id = logic, node_id
        self.tasks: dict[TaskKey, ObservedTask] = {}
        self.launches: list = []
        self._apply(logic.nodes.register(NodeRecord(node_id, node_id, Resources(gpus, 8, 32), Resources()), []))

    def heartbeat(self):
        reply = self.logic.nodes.heartbeat(self.id, {}, list(self.tasks.values()))
        self._apply(reply)
        return reply

    def _apply(self, reply) -> None:
        for key in reply.forget:
            self.tasks.pop(key, None)
        for ins in reply.instructions:
            if ins.kind == InstructionKind.LAUNCH and ins.key not in self.tasks:
                self.launches.append(instruction_to_msg(ins).task)
                self.tasks[ins.key] = ObservedTask(ins.key, TaskPhase.RUNNING, placement=ins.placement)
            elif ins.kind == InstructionKind.STOP and ins.key in self.tasks:
                t = self.tasks[ins.key]
                self.tasks[ins.key] = ObservedTask(ins.key, TaskPhase.EXITED, -15, placement=t.placement)


@pytest.fixture
def logic() -> Logic:
    config = DaemonConfig(
        state_dir=Path("unused"), round_s=10, lease_grace_s=5, node_timeout_s=60, launch_timeout_s=600,
        stop_timeout_s=15,
    )
    return Logic.build(DaemonContext(config, ManualClock(), MemoryStore(), ProfileBook({}), decider=Hand()))


def _hand(logic: Logic) -> Hand:
    return logic.ctx.decider  # type: ignore[return-value]


def _round(logic: Logic) -> None:
    logic.rounds.apply(logic.rounds.plan())


def _submit(logic: Logic, name: str, **kw) -> int:
    return logic.jobs.submit(JobSpec(name=name, command=("train",), gpus=1, profiler="none", **kw)).id


def _pair(logic: Logic, node: str = "n") -> tuple[int, int]:
    """Job h on one GPU of `node`, job p packed on that GPU, placed by one hand-made round."""
    h, p = _submit(logic, "h"), _submit(logic, "p")
    _hand(logic).allocations = {
        h: Allocation(h, (Placement(node, 1, 2.0, 4.0),)),
        p: Allocation(p, (Placement(node, 1, 3.0, 6.0),), packed_with=h),
    }
    _round(logic)
    return h, p


def test_a_packed_allocation_launches_after_its_host_on_the_hosts_gpus(logic: Logic) -> None:
    node = Node(logic, "n", gpus=1)
    # the partner's job id is the smaller one: the host still goes first
    p, h = _submit(logic, "p"), _submit(logic, "h")
    _hand(logic).allocations = {
        h: Allocation(h, (Placement("n", 1, 2.0, 4.0),)),
        p: Allocation(p, (Placement("n", 1, 3.0, 6.0),), packed_with=h),
    }
    _round(logic)
    assert logic.jobs.get(p).state == JobState.RUNNING and logic.jobs.get(p).packed_with == h
    assert "sharing the GPUs of job" in logic.jobs.get(p).reason
    node.heartbeat()
    assert [(t.ref.job_id, t.packed_with_job_id) for t in node.launches] == [(h, 0), (p, h)]
    # one GPU, counted once; CPUs and memory of both
    with logic.ctx.lock:
        view = logic.nodes.view(logic.ctx.store.node("n"))
    assert view.allocated == Resources(1, 5.0, 10.0)
    assert job_to_info(logic.jobs.get(p), history=True).packed_with_job_id == h
    assert job_to_info(logic.jobs.get(h), history=True).packed_with_job_id == 0
    # the next round's input says so to the core (previous allocations), and no_share reaches it
    _round(logic)
    inp = _hand(logic).seen[-1]
    assert inp.previous[p].packed_with == h and inp.previous[h].packed_with is None
    assert node.heartbeat().instructions == []


def test_lost_launches_go_out_again_host_first(logic: Logic) -> None:
    node = Node(logic, "n", gpus=1)
    h, p = _pair(logic)
    node.tasks.clear()
    # both LAUNCHes were lost (the agent restarted empty): they go out again, the host first
    node.heartbeat()
    assert [t.ref.job_id for t in node.launches] == [h, p]
    assert [t.packed_with_job_id for t in node.launches] == [0, h]


def test_the_partner_of_a_host_that_stops_or_moves_is_stopped_in_the_same_round(logic: Logic) -> None:
    node = Node(logic, "n", gpus=2)
    h, p = _pair(logic)
    node.heartbeat()
    # the host moves to the other GPU... the hand keeps the partner where it was
    _hand(logic).allocations[h] = Allocation(h, (Placement("n", 2, 2.0, 4.0),))
    _round(logic)
    host, partner = logic.jobs.get(h), logic.jobs.get(p)
    assert host.stopping and partner.stopping
    assert f"job {h}, whose GPUs it shares, is stopping" in partner.stop_reason


def test_the_partner_of_a_cancelled_host_is_stopped_at_the_next_heartbeat(logic: Logic) -> None:
    node = Node(logic, "n", gpus=1)
    h, p = _pair(logic)
    node.heartbeat()
    logic.jobs.cancel(h, "test")
    node.heartbeat()
    partner = logic.jobs.get(p)
    assert partner.stopping and f"job {h}, whose GPUs it shares, is no longer running" in partner.stop_reason


def test_a_running_job_packed_onto_another_is_a_move(logic: Logic) -> None:
    node = Node(logic, "n", gpus=2)
    a, b = _submit(logic, "a"), _submit(logic, "b")
    _hand(logic).allocations = {a: Allocation(a, (Placement("n", 1, 2.0, 4.0),)),
                                b: Allocation(b, (Placement("n", 1, 2.0, 4.0),))}
    _round(logic)
    node.heartbeat()
    _hand(logic).allocations[b] = Allocation(b, (Placement("n", 1, 2.0, 4.0),), packed_with=a)
    _round(logic)
    moving = logic.jobs.get(b)
    assert moving.stopping and moving.next_packed_with == a and moving.migrations == 1
    node.heartbeat()
    clock = logic.ctx.clock
    clock.advance(16)  # past the stop timeout: the agent stops it
    node.heartbeat()
    node.heartbeat()  # its exit reported: relaunched packed on a's GPU
    node.heartbeat()
    relaunched = logic.jobs.get(b)
    assert relaunched.state == JobState.RUNNING and relaunched.attempt == 2 and relaunched.packed_with == a
    assert node.launches[-1].packed_with_job_id == a and node.launches[-1].ref.attempt == 2


def test_no_share_reaches_the_core(logic: Logic) -> None:
    j = _submit(logic, "solo", no_share=True)
    _round(logic)
    (job,) = [x for x in _hand(logic).seen[-1].jobs if x.id == j]
    assert job.no_share
