"""The store's indexes over a long history: what /metrics, the status call and the dashboard
read on every poll must not walk every job the cluster has ever finished
(benchmarks/daemon_history.py measures it)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path

from hypothesis import given, settings, strategies as st

from synergy.scheduler.daemon.records import JobRecord, JobSpec, JobState, Transition
from synergy.scheduler.daemon.store import MemoryStore, SqliteStore


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
