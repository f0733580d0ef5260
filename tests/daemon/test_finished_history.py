"""A long history of ended jobs: what /metrics, the status call and the dashboard read on
every poll must not walk every job the cluster has ever ended, and the records kept in
memory are bounded (--finished-jobs-in-memory); benchmarks/daemon_history.py measures it."""

from __future__ import annotations

import json
import tempfile
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest
from cli_runner import run_cli
from hypothesis import given, settings, strategies as st

from synergy.scheduler.daemon.app import Logic
from synergy.scheduler.daemon.clock import ManualClock
from synergy.scheduler.daemon.config import ConfigError, DaemonConfig, load_config
from synergy.scheduler.daemon.context import DaemonContext
from synergy.scheduler.daemon.profiles import ProfileBook, load_zoo
from synergy.scheduler.daemon.records import JobRecord, JobSpec, JobState, NodeRecord, Transition
from synergy.scheduler.daemon.store import MemoryStore, SqliteStore
from synergy.scheduler.dashboard import views
from synergy.scheduler.dashboard.history import History
from synergy.scheduler.model import Resources
from synergy.v1 import admin_pb2


def record(job_id: int, state: JobState, user: str = "u", finished_at: float = 0.0) -> JobRecord:
    spec = JobSpec(name=f"j{job_id}", command=("x",), gpus=1, user=user)
    return JobRecord(job_id, spec, f"token-{job_id}", float(job_id), state, (Transition(None, JobState.SUBMITTED, "s", 0.0),),
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


# -- ended jobs left on disk (SqliteStore(finished_in_memory=k)) ---------------------------------

ops = st.lists(st.one_of(
    st.tuples(st.just("submit"), st.sampled_from(["a", "b", "c"]), st.sampled_from(["ann", "bob"])),
    st.tuples(st.just("end"), st.integers(0, 99), st.sampled_from(list(s for s in JobState if s.terminal))),
    st.tuples(st.just("resave"), st.integers(0, 99), st.integers(1, 99)),  # a late progress or checkpoint save
    st.tuples(st.just("reopen"), st.integers(0, 4), st.just(0)),
    st.tuples(st.just("revive"), st.integers(0, 99), st.just(0)),  # not a legal transition; the store allows it
), min_size=10, max_size=45)


def same_view(store, ref: MemoryStore) -> None:
    top = ref.next_job_id()
    assert [store.job(i) for i in range(top + 1)] == [ref.job(i) for i in range(top + 1)]
    for name in ("a", "b", "c"):
        assert store.jobs_named(name) == ref.jobs_named(name)
        assert store.active_named(name) == [j for j in ref.jobs_named(name) if not j.state.terminal]
    for after in (0, top // 2):
        for descending in (False, True):
            assert list(store.scan_jobs(after, descending)) == list(ref.scan_jobs(after, descending))
            for states in ({JobState.QUEUED}, {JobState.SUCCEEDED, JobState.QUEUED}, {JobState.FAILED}):
                assert list(store.scan_jobs(after, descending, states)) == [
                    j for j in ref.scan_jobs(after, descending) if j.state in states]
    assert list(store.finished_newest_first()) == list(ref.finished_newest_first())
    assert store.state_counts() == ref.state_counts()
    assert [store.finished_count(u) for u in ("ann", "bob", None)] == [ref.finished_count(u) for u in ("ann", "bob", None)]
    assert store.active_jobs() == ref.active_jobs() and store.renewing_ranks() == ref.renewing_ranks()
    assert sorted(store.job_tokens()) == sorted(ref.job_tokens())
    assert sorted(store.profiled_jobs(), key=lambda j: j.id) == list(ref.profiled_jobs())


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 4), ops)
def test_a_store_that_leaves_ended_jobs_on_disk_answers_as_one_that_keeps_them_all(
    keep: int, steps: list[tuple]
) -> None:
    """Whatever is saved, ended, saved again after it ended or reopened, a store keeping at
    most `keep` ended records in memory answers every read as the in-memory reference does,
    and holds no more than `keep` of them."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "state.sqlite"
        store, ref = SqliteStore(path, finished_in_memory=keep), MemoryStore()
        clock = 0.0
        for op, a, b in steps:
            clock += 1.0
            if op == "submit":
                job = record(ref.next_job_id(), JobState.QUEUED, user=b)
                job = replace(job, spec=replace(job.spec, name=a), profiled=b == "bob")
            elif op == "end" and ref.active_jobs():  # the a-th active job ends
                active = ref.active_jobs()
                job = replace(active[a % len(active)], state=b, finished_at=clock)
            elif op == "resave" and ref.finished_count():  # the a-th ended job, saved again
                ended = list(ref.finished_newest_first())
                job = replace(ended[a % len(ended)], checkpoint_step=b)
            elif op == "revive" and ref.finished_count():
                ended = list(ref.finished_newest_first())
                job = replace(ended[a % len(ended)], state=JobState.QUEUED, finished_at=0.0)
            elif op == "reopen":
                store.close()
                store, keep = SqliteStore(path, finished_in_memory=a), a
                same_view(store, ref)
                continue
            else:
                continue
            if op == "resave" and b % 2:  # the progress flush: its own table, applied over the body
                job = ref.job(job.id).with_progress(b, 1.5, 2.5)  # only the counters may change
                store.save_progress([job])
                ref.save_progress([job])
            else:
                store.save_jobs([job])
                ref.save_jobs([job])
            assert len(store._finished) <= keep  # the bound itself: records of ended jobs in memory
            same_view(store, ref)
        store.close()


def test_listing_reads_as_far_as_it_needs_and_answers_as_a_walk_of_every_job(tmp_path: Path) -> None:
    """JobBook.list's limit / after / count, on a store with most ended jobs on disk, against a
    filter of every job: what ListJobs pages through."""
    config = DaemonConfig(state_dir=tmp_path, round_s=10)
    logic = Logic.build(DaemonContext(config, ManualClock(), SqliteStore(tmp_path / "db", finished_in_memory=2),
                                      ProfileBook(load_zoo(None))))
    for i in range(12):
        job = logic.jobs.submit(JobSpec(name=f"j{i}", command=("x",), gpus=1, user="ann" if i % 3 else "bob",
                                        profiler="none"))
        if i % 4 != 1:
            logic.jobs.cancel(job.id, "test")
    every = logic.ctx.store.jobs()
    assert len(logic.ctx.store._finished) == 2 and len(every) == 12

    def walked(states, limit, user, after, count):
        found = [j for j in every if (not states or j.state in states) and (user is None or j.spec.user == user)]
        found = [j for j in (found[-limit:] if limit else found) if j.id > after]
        return found[:count] if count else found

    for states in ((), (JobState.CANCELLED,), (JobState.QUEUED,), (JobState.QUEUED, JobState.CANCELLED)):
        for limit in (0, 1, 5, 20):
            for user in (None, "ann", "bob"):
                for after in (0, 4, 11):
                    for count in (0, 1, 3):
                        assert logic.jobs.list(states, limit, user, after, count) == walked(
                            states, limit, user, after, count), (states, limit, user, after, count)


def test_synergyd_lists_describes_and_reuses_the_names_of_ended_jobs_it_keeps_on_disk(start_daemon, capsys) -> None:
    """`--finished-jobs-in-memory 1`: three of four jobs end; every one is still listed and
    described, before and after a restart, and an ended job's name can be used again."""
    daemon = start_daemon("--finished-jobs-in-memory", "1")
    admin = daemon.admin()
    for name in ("a", "b", "c", "d"):
        admin.submit(name)
    for name in ("a", "b", "c"):
        admin.CancelJob(admin_pb2.CancelJobRequest(job=name, reason="done"))
    admin.close()

    def cli(*args: str) -> str:
        run = run_cli(capsys, "--state-dir", str(daemon.state_dir), *args)
        assert run.code == 0, run.err
        return run.out

    for run in (1, 2):
        listed = json.loads(cli("jobs", "--json"))["jobs"]
        assert [(j["name"], j["state"]) for j in listed] == [
            ("a", "cancelled"), ("b", "cancelled"), ("c", "cancelled"), ("d", "queued")], run
        described = json.loads(cli("describe", "a", "--json"))
        assert described["state"] == "cancelled" and "cancelled" in described["history"][-1]["reason"], run
        daemon.terminate()
        daemon.start()
    admin = daemon.admin()
    again = admin.submit("a")
    assert admin.state(again.id) != "cancelled" and admin.state("a") != "cancelled"
    admin.close()


def test_a_job_that_ends_leaves_the_live_state() -> None:
    """Live entries are for jobs that run: every progress flush walks them, and kept after
    the end they grew with every job the cluster ever ran (and read its record each time)."""
    logic = Logic.build(DaemonContext(DaemonConfig(state_dir=Path("unused"), round_s=10), ManualClock(),
                                      MemoryStore(), ProfileBook(load_zoo(None))))
    logic.nodes.register(NodeRecord("n", "n", Resources(2, 8, 64), Resources()), [])
    jobs = [logic.jobs.submit(JobSpec(name=f"j{i}", command=("x",), gpus=1, model="resnet18", profiler="none"))
            for i in range(2)]
    logic.rounds.apply(logic.rounds.plan())
    assert set(logic.ctx.live.jobs) == {j.id for j in jobs}  # placed: launched, so live
    logic.jobs.cancel(jobs[0].id, "test")
    assert set(logic.ctx.live.jobs) == {jobs[1].id}


def test_a_job_that_ends_leaves_no_parsed_profile_behind() -> None:
    """Parsed profiles are cached per job for the rounds; one that ended by any way (not only
    a cancel) must not keep its entry: profiled jobs are most jobs."""
    logic = Logic.build(DaemonContext(DaemonConfig(state_dir=Path("unused"), round_s=10), ManualClock(),
                                      MemoryStore(), ProfileBook(load_zoo(None))))
    logic.nodes.register(NodeRecord("n", "n", Resources(2, 8, 64), Resources()), [])
    profile = {"task": "image", "cpus_per_gpu": [1, 2], "mem_gb_per_gpu": [1, 2], "throughput": [[1, 1], [2, 2]],
               "reference": {"cpus_per_gpu": 1, "mem_gb_per_gpu": 1}, "iter_time_s": 0.1}
    ended = []
    for i in range(3):
        job = logic.jobs.submit(JobSpec(name=f"j{i}", command=("x",), gpus=1, profile=profile))
        ended.append(job.id)
    logic.rounds.apply(logic.rounds.plan())
    parsed = logic.ctx.profiles._parsed
    assert {job_id for job_id, _ in parsed} == set(ended)  # the rounds parsed each job's profile
    ctx = logic.ctx
    with ctx.lock:
        for job_id, state in zip(ended, (JobState.SUCCEEDED, JobState.FAILED)):
            job = ctx.store.job(job_id)
            ctx.save_jobs([(job, job.to(state, "test", ctx.clock.now()))])
    assert {job_id for job_id, _ in parsed} == {ended[2]}


def test_finished_jobs_in_memory_from_flag_or_toml_and_its_range(tmp_path: Path) -> None:
    assert load_config(["--state-dir", str(tmp_path)]).finished_jobs_in_memory == 10_000
    toml = tmp_path / "d.toml"
    toml.write_text("finished-jobs-in-memory = 500\n")
    assert load_config(["--config", str(toml), "--state-dir", str(tmp_path)]).finished_jobs_in_memory == 500
    for bad in ("-1", "10000001"):
        with pytest.raises(ConfigError, match=r"^--finished-jobs-in-memory must be from 0 to 10000000, got"):
            load_config(["--state-dir", str(tmp_path), "--finished-jobs-in-memory", bad])
