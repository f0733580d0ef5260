"""The profile store (issue 14, docs/profiles.md): a profile measured live on one job answers
for later jobs of the same workload, which queue without a profiling lease."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from synergy.scheduler.daemon.app import Logic
from synergy.scheduler.daemon.clock import ManualClock
from synergy.scheduler.daemon.config import DaemonConfig
from synergy.scheduler.daemon.context import DaemonContext
from synergy.scheduler.daemon.profile_store import ProfileStore, workload_key
from synergy.scheduler.daemon.profiles import ProfileBook
from synergy.scheduler.daemon.records import JobSpec, JobState
from synergy.scheduler.daemon.store import MemoryStore
from test_daemon_churn import _profile_doc
from test_daemon_logic import SimNode, clock, round_

SWEEP = ("python", "train.py", "--data", "/data/imagenet")


def _logic(store: MemoryStore | None = None, clock_: ManualClock | None = None) -> Logic:
    config = DaemonConfig(state_dir=Path("unused"), round_s=10, lease_grace_s=5, node_timeout_s=6,
                          launch_timeout_s=20, stop_timeout_s=15)
    return Logic.build(DaemonContext(config, clock_ or ManualClock(), store or MemoryStore(), ProfileBook({})))


def _submit(logic: Logic, name: str, command: tuple[str, ...] = SWEEP, profiler: str = "synergy") -> int:
    return logic.jobs.submit(JobSpec(name=name, command=command, gpus=1, profiler=profiler,
                                     checkpoint_dir=f"/tmp/ckpt-{name}")).id


names = st.text("abcdefgh", min_size=1, max_size=6)


@given(names, names, st.integers(0, 10**6), st.integers(0, 10**6), st.text("xyz", max_size=3))
def test_the_key_ignores_what_differs_between_runs_of_one_workload(a, b, it_a, it_b, user) -> None:
    """Names, checkpoint dirs, iteration counts and users do not make another workload; any
    other argument does (the store errs towards measuring)."""
    one = JobSpec(name=a, command=SWEEP, gpus=1, checkpoint_dir=f"/c/{a}", iterations=it_a)
    two = JobSpec(name=b, command=SWEEP, gpus=1, checkpoint_dir=f"/c/{b}", iterations=it_b, user=user)
    assert workload_key(one) == workload_key(two)
    assert workload_key(replace(two, command=SWEEP + ("--batch-size", "64"))) != workload_key(one)
    assert workload_key(replace(two, gpus=2)) != workload_key(one)
    assert workload_key(replace(two, profiler="coda")) != workload_key(one)


def test_the_newest_profile_of_a_workload_answers_and_never_for_its_own_job() -> None:
    store, spec = ProfileStore(), JobSpec(name="a", command=SWEEP, gpus=1)
    assert not store.learn(1, spec, False, {"x": 1})  # reported, not profiled under a lease
    assert store.learn(3, spec, True, {"v": 3}) and not store.learn(2, spec, True, {"v": 2})
    assert store.lookup(spec).job_id == 3 and store.lookup(spec, excluding=3) is None
    assert not store.learn(4, JobSpec(name="c", command=(), gpus=0, kind="cpu", cpus_hint=1), True, {})


def test_a_job_of_a_profiled_workload_queues_with_the_stored_profile_instead_of_profiling() -> None:
    """One CPU, two jobs of one sweep and one of another: the first profiles; when it reports,
    its twin (waiting for a node to profile on) queues with the stored profile and is placed
    with it; the other workload still waits to be profiled; a job of the sweep
    submitted later never profiles, and neither after a daemon restart."""
    logic = _logic()
    node = SimNode(logic, "n", gpus=4, cpus=3, mem_gb=8)
    first, twin = _submit(logic, "a"), _submit(logic, "b")
    assert logic.profiling.place() == 2  # one CPU each... then take the twin back to waiting:
    twin_lease = logic.jobs.get(twin)
    with logic.ctx.lock:  # (its lease is lost before it registers: back to waiting, as a node loss does)
        logic.ctx.save_jobs([(twin_lease, logic.jobs.preempt(twin_lease, "lost"))])
    other = _submit(logic, "c", command=("python", "other.py"))
    node.heartbeat()
    logic.leases.register_process(first, first, 1, 0, 1)
    logic.leases.report_profile(first, first, _profile_doc([(1, 10.0), (2, 20.0), (3, 20.0)]))
    logic.profiling.place()
    b = logic.jobs.get(twin)
    assert b.state == JobState.QUEUED and b.profile_source.startswith(f"stored:{first} "), (
        b.state, b.profile_source, [t.reason for t in b.history])
    assert logic.jobs.get(other).state == JobState.PROFILING
    clock(logic).advance(10)
    node.heartbeat()
    round_(logic)
    b = logic.jobs.get(twin)
    assert b.state == JobState.RUNNING
    with logic.ctx.lock:  # scheduled with the stored profile, not a stand-in
        assert logic.ctx.profiles.profile(b, logic.rounds.cluster()).cpus_per_gpu == (1.0, 2.0, 3.0)
    later = _submit(logic, "d")
    assert logic.jobs.get(later).state == JobState.QUEUED
    assert logic.jobs.get(later).profile_source.startswith(f"stored:{first} ")
    # Restart: the store is rebuilt from the job records.
    restarted = _logic(logic.ctx.store, logic.ctx.clock)
    restarted.recover()
    again = _submit(restarted, "e")
    assert restarted.jobs.get(again).state == JobState.QUEUED
    assert restarted.jobs.get(again).profile_source.startswith(f"stored:{first} ")
    # `profiler: none` keeps what it asked for (no stored profile).
    plain = _submit(restarted, "f", profiler="none")
    assert not restarted.jobs.get(plain).profile_source.startswith("stored:")
