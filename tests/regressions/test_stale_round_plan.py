"""Defect: a round decided before a node was lost placed a job on that lost node.

A round is planned `plan_lead` seconds before its boundary from a snapshot of the nodes and
applied at the boundary. A node declared lost in between (its jobs requeued) was still in
the plan, so the apply launched the requeued job straight back onto it. Losing a node
requeues only the jobs on it at that moment, so the job then sat RUNNING on a dead node
until the launch timeout (120 s by default). This is what made
tests/daemon/test_daemon_ops.py::test_drain_moves_jobs_and_lost_node_requeues flaky under
load: its 1 s node timeout lost a node spuriously between a plan and its apply. Placements
are now checked against the nodes as they are at the apply; a job whose planned node left
keeps waiting and is considered again next round.
"""

from __future__ import annotations

from pathlib import Path

from synergy.scheduler.daemon.app import Logic
from synergy.scheduler.daemon.clock import ManualClock
from synergy.scheduler.daemon.config import DaemonConfig
from synergy.scheduler.daemon.context import DaemonContext
from synergy.scheduler.daemon.profiles import ProfileBook
from synergy.scheduler.daemon.records import JobSpec, JobState, NodeRecord
from synergy.scheduler.daemon.store import MemoryStore
from synergy.scheduler.model import Resources


def test_a_plan_made_before_a_node_was_lost_does_not_place_on_it() -> None:
    # a node timeout as short as the heartbeat window (as in that test): silent 1.9 s is
    # schedulable, silent 2.1 s is lost
    config = DaemonConfig(state_dir=Path("unused"), round_s=10, lease_grace_s=5, node_timeout_s=2,
                          launch_timeout_s=20, stop_timeout_s=15)
    clock = ManualClock()
    logic = Logic.build(DaemonContext(config, clock, MemoryStore(), ProfileBook({})))
    logic.nodes.register(NodeRecord("n1", "n1", Resources(2, 16, 128), Resources()), [])
    job = logic.jobs.submit(JobSpec(name="j", command=("train",), gpus=1)).id

    clock.advance(1.9)  # the plan still sees n1 within its heartbeat window
    plan = logic.rounds.plan()
    assert plan.allocations.get(job), "the plan places the job on n1"
    clock.advance(0.2)  # then n1 is declared lost, before the boundary
    assert logic.nodes.check_liveness() == ["n1"]
    logic.rounds.apply(plan)

    after = logic.jobs.get(job)
    assert after.state == JobState.QUEUED, f"placed on a lost node: {after.placements}"
    assert "n1" in after.waiting_reason
