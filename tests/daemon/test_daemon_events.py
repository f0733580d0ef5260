"""Periodic events with bounded work per run: the progress flush goes a slice at a time."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from synergy.scheduler.daemon.app import Logic
from synergy.scheduler.daemon.clock import ManualClock
from synergy.scheduler.daemon.config import DaemonConfig
from synergy.scheduler.daemon.context import DaemonContext
from synergy.scheduler.daemon.events import ProgressFlushEvent
from synergy.scheduler.daemon.leases import LeaseAction, LockBusy
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


def test_a_renewal_that_needs_the_taken_lock_says_so_rather_than_wait() -> None:
    """The gRPC loop renews with wait=False: agreeing a stop step needs the state lock, and a
    loop blocked on it while a periodic event holds it stalled every call (issue 17)."""
    logic = running_logic(1)
    (jid,) = [j.id for j in logic.ctx.store.active_jobs()]
    job = logic.jobs.get(jid)
    logic.ctx.save_jobs([(job, logic.jobs.request_stop(job, "test"))])
    held, release = threading.Event(), threading.Event()

    def holder() -> None:
        with logic.ctx.lock:
            held.set()
            release.wait(10)

    t = threading.Thread(target=holder)
    t.start()
    held.wait(10)
    try:
        with pytest.raises(LockBusy):
            logic.leases.renew(jid, jid, 1, 0, step=200, samples_per_s=10, steps_per_s=1, wait=False)
        assert not logic.jobs.get(jid).stop_at_step  # nothing agreed without the lock
    finally:
        release.set()
        t.join()
    r = logic.leases.renew(jid, jid, 1, 0, step=200, samples_per_s=10, steps_per_s=1, wait=False)
    assert r.action == LeaseAction.STOP and r.stop_at_step == logic.jobs.get(jid).stop_at_step >= 200
