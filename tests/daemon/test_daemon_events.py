"""Periodic events with bounded work per run: the progress flush goes a slice at a time."""

from __future__ import annotations

from pathlib import Path

from synergy.scheduler.daemon.app import Logic
from synergy.scheduler.daemon.clock import ManualClock
from synergy.scheduler.daemon.config import DaemonConfig
from synergy.scheduler.daemon.context import DaemonContext
from synergy.scheduler.daemon.events import ProgressFlushEvent
from synergy.scheduler.daemon.profiles import ProfileBook
from synergy.scheduler.daemon.records import JobSpec, JobState, NodeRecord
from synergy.scheduler.daemon.store import MemoryStore
from synergy.scheduler.model import Resources


def running_logic(n_jobs: int) -> Logic:
    config = DaemonConfig(state_dir=Path("unused"), round_s=10, lease_grace_s=5, node_timeout_s=6,
                          launch_timeout_s=20, stop_timeout_s=15)
    logic = Logic.build(DaemonContext(config, ManualClock(), MemoryStore(), ProfileBook({})))
    logic.nodes.register(NodeRecord("n", "n", Resources(n_jobs, 4 * n_jobs, 64 * n_jobs), Resources()), [])
    ids = [logic.jobs.submit(JobSpec(name=f"j{i}", command=("train",), gpus=1, profiler="none")).id for i in range(n_jobs)]
    logic.rounds.apply(logic.rounds.plan())
    for jid in ids:
        assert logic.jobs.get(jid).state == JobState.RUNNING
        logic.leases.register_process(jid, jid, 1, 0, 1)
        logic.leases.renew(jid, jid, 1, 0, step=100 + jid, samples_per_s=10, steps_per_s=1)
    return logic


def stored_steps(logic: Logic) -> dict[int, int]:
    return {j.id: j.steps_done for j in logic.ctx.store.active_jobs()}


def test_progress_is_flushed_a_slice_per_run_and_every_job_once_per_interval() -> None:
    logic = running_logic(25)
    flush = ProgressFlushEvent(logic)
    assert flush.interval_s == 1.0  # a tenth of min(60, round)
    assert set(stored_steps(logic).values()) == {0}
    flushed_by_run = []
    for _ in range(ProgressFlushEvent.SLICES):
        before = stored_steps(logic)
        flush.run()
        after = stored_steps(logic)
        flushed_by_run.append({jid for jid in after if after[jid] != before[jid]})
    # Disjoint slices that together cover every job: each flushed once per interval.
    assert all(len(s) <= 3 for s in flushed_by_run)
    assert sorted(jid for s in flushed_by_run for jid in s) == sorted(stored_steps(logic))
    assert stored_steps(logic) == {jid: 100 + jid for jid in stored_steps(logic)}


def test_flush_all_flushes_every_job_at_once() -> None:
    logic = running_logic(12)
    ProgressFlushEvent(logic).flush_all()
    assert stored_steps(logic) == {jid: 100 + jid for jid in stored_steps(logic)}
