"""The store's indexes over a long history: what /metrics, the status call and the dashboard
read on every poll must not walk every job the cluster has ever finished
(benchmarks/daemon_history.py measures it)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path

from hypothesis import given, settings, strategies as st

from synergy.scheduler.daemon.app import Logic
from synergy.scheduler.daemon.clock import ManualClock
from synergy.scheduler.daemon.config import DaemonConfig
from synergy.scheduler.daemon.context import DaemonContext
from synergy.scheduler.daemon.profiles import ProfileBook, load_zoo
from synergy.scheduler.daemon.records import JobRecord, JobSpec, JobState, Transition
from synergy.scheduler.daemon.store import MemoryStore, SqliteStore
from synergy.scheduler.dashboard import views
from synergy.scheduler.dashboard.history import History


def record(job_id: int, state: JobState, user: str = "u", finished_at: float = 0.0) -> JobRecord:
    spec = JobSpec(name=f"j{job_id}", command=("x",), gpus=1, user=user)
    return JobRecord(job_id, spec, "t", float(job_id), state, (Transition(None, JobState.SUBMITTED, "s", 0.0),),
                     finished_at=finished_at)


def walked_counts(store) -> dict[JobState, int]:
    counts = Counter(j.state for j in store.jobs())
    return {s: counts.get(s, 0) for s in JobState}


saves = st.lists(st.tuples(st.integers(1, 12), st.sampled_from(list(JobState))), max_size=40)


@settings(max_examples=60, deadline=None)
@given(saves)
def test_state_counts_follow_every_save_and_replacement(steps: list[tuple[int, JobState]]) -> None:
    """A job saved again in another state moves from one count to the other (a counter that
    only added would count a job once per state it passed through)."""
    store = MemoryStore()
    for job_id, state in steps:
        store.save_jobs([record(job_id, state)])
        assert store.state_counts() == walked_counts(store)


def test_state_counts_survive_a_reload(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "state.sqlite")
    store.save_jobs([record(i, JobState.QUEUED) for i in range(1, 6)])
    store.save_jobs([replace(record(i, JobState.QUEUED), state=JobState.SUCCEEDED) for i in (1, 2)])
    store.save_progress([replace(store.job(3), steps_done=7)])  # a progress row is applied at load
    store.close()
    again = SqliteStore(tmp_path / "state.sqlite")
    assert again.state_counts() == walked_counts(again)
    assert again.state_counts()[JobState.SUCCEEDED] == 2 and again.state_counts()[JobState.QUEUED] == 3
    again.close()


ends = st.lists(st.tuples(st.integers(1, 12), st.booleans(), st.sampled_from(["ann", "bob"])), max_size=40)


@settings(max_examples=60, deadline=None)
@given(ends)
def test_ended_jobs_are_listed_last_ended_first_and_counted_per_user(steps: list[tuple[int, bool, str]]) -> None:
    """Each step saves a job as running or as ended at a later time. The index must match a
    walk of every job, ordered by when each first ended (a job saved again after it ended,
    its progress flushed, keeps its place), with per-user counts."""
    store = MemoryStore()
    first_end: dict[int, float] = {}
    for t, (job_id, ended, user) in enumerate(steps, start=1):
        old = store.job(job_id)
        user = old.spec.user if old is not None else user
        if ended:
            at = first_end.setdefault(job_id, float(t))
            store.save_jobs([record(job_id, JobState.SUCCEEDED, user, finished_at=at)])
        else:
            first_end.pop(job_id, None)
            store.save_jobs([record(job_id, JobState.RUNNING, user)])
        walked = sorted((j for j in store.jobs() if j.state.terminal), key=lambda j: first_end[j.id], reverse=True)
        assert [j.id for j in store.finished_newest_first()] == [j.id for j in walked]
        for who in ("ann", "bob", None):
            assert store.finished_count(who) == sum(1 for j in walked if who is None or j.spec.user == who)


def test_ended_jobs_keep_the_order_they_ended_in_across_a_reload(tmp_path: Path) -> None:
    """Jobs load in id order; the index orders them by when they ended, as before the restart."""
    store = SqliteStore(tmp_path / "state.sqlite")
    store.save_jobs([record(i, JobState.RUNNING) for i in range(1, 5)])
    for job_id, at in ((3, 10.0), (1, 20.0), (4, 30.0)):
        store.save_jobs([record(job_id, JobState.FAILED, finished_at=at)])
    before = [j.id for j in store.finished_newest_first()]
    store.close()
    again = SqliteStore(tmp_path / "state.sqlite")
    assert before == [j.id for j in again.finished_newest_first()] == [4, 1, 3]
    assert again.finished_count() == 3 and again.finished_count("nobody") == 0
    again.close()


def test_the_dashboard_lists_the_jobs_that_ended_last_and_counts_the_rest(monkeypatch) -> None:
    """Per user: active jobs, then the ended ones that ended last (not the highest ids), and
    how many are left out; the history view's JCTs are those of jobs ended in its window."""
    monkeypatch.setattr(views, "FINISHED_LISTED", 2)
    clock = ManualClock()
    logic = Logic.build(DaemonContext(DaemonConfig(state_dir=Path("unused"), round_s=10), clock, MemoryStore(),
                                      ProfileBook(load_zoo(None))))
    ids = {}
    for name, user in (("a1", "ann"), ("a2", "ann"), ("a3", "ann"), ("a4", "ann"), ("b1", "bob"), ("a5", "ann")):
        ids[name] = logic.jobs.submit(JobSpec(name=name, command=("x",), gpus=1, user=user, profiler="none")).id
    for name in ("a4", "a1", "b1", "a3"):  # ended in this order; a2 and a5 stay queued
        clock.advance(10.0)
        logic.jobs.cancel(ids[name], "test")
    ann = views.jobs(logic, "ann")
    assert [j["id"] for j in ann["jobs"]] == sorted(ids[n] for n in ("a2", "a5", "a1", "a3"))
    assert ann["finished_not_listed"] == 1  # a4 ended first
    every = views.jobs(logic)
    assert {j["id"] for j in every["jobs"]} == {ids[n] for n in ("a2", "a5", "b1", "a3")}
    assert every["finished_not_listed"] == 2
    store = logic.ctx.store
    for name, took in (("a2", 5.0), ("a5", 7.0)):  # two succeed, 10 s apart
        clock.advance(10.0)
        job = store.job(ids[name])
        store.save_jobs([replace(job, state=JobState.SUCCEEDED, submitted_at=clock.now() - took,
                                 finished_at=clock.now())])
    assert views.history(logic, History(), 5.0)["jcts"] == [7.0]
    assert views.history(logic, History(), 0.0)["jcts"] == [5.0, 7.0]
