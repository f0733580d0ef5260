"""Issue 16: the user rules without a server (users.py): ownership, the built-in admin's token
following admin.token, and the per-user figures of `synergy status` and /metrics."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from synergy.scheduler.daemon.app import Logic
from synergy.scheduler.daemon.clock import ManualClock
from synergy.scheduler.daemon.config import DaemonConfig
from synergy.scheduler.daemon.context import DaemonContext
from synergy.scheduler.daemon.errors import AlreadyExists, InvalidArgument, PermissionDenied
from synergy.scheduler.daemon.profiles import ProfileBook
from synergy.scheduler.daemon.records import JobRecord, JobSpec, JobState, Transition
from synergy.scheduler.daemon.store import MemoryStore, SqliteStore
from synergy.scheduler.daemon.users import Caller, UserBook, job_owner, usage_by_user
from synergy.scheduler.model import Placement, Resources

ALICE = Caller("alice", "user", "token")
ROOT = Caller("root", "admin", "unix socket (uid 0)")


def test_the_owner_is_the_caller_unless_an_admin_names_someone() -> None:
    assert job_owner("", ALICE) == job_owner("alice", ALICE) == "alice"
    with pytest.raises(PermissionDenied, match=r"^spec.user: alice may not submit as 'bob'"):
        job_owner("bob", ALICE)
    assert job_owner("bob", ROOT) == "bob" and job_owner("", ROOT) == "root"


def test_the_builtin_admin_follows_admin_token_and_users_persist(tmp_path: Path) -> None:
    clock = ManualClock()
    store = SqliteStore(tmp_path / "db.sqlite")
    book = UserBook(store, clock)
    assert "created" in book.ensure_builtin_admin("first-token-0123456789")
    assert book.by_token("first-token-0123456789").name == "admin"
    assert book.ensure_builtin_admin("first-token-0123456789") == ""
    assert "changed" in book.ensure_builtin_admin("second-token-0123456789")  # the file was replaced
    assert book.by_token("first-token-0123456789") is None and book.by_token("second-token-0123456789")
    user, token = book.add("dora", "user", by="admin")
    with pytest.raises(AlreadyExists):
        book.add("dora", "admin", by="admin")
    with pytest.raises(InvalidArgument, match="^role: "):
        book.add("eve", "root", by="admin")
    with pytest.raises(InvalidArgument, match="^name: "):
        book.add("two words", "user", by="admin")
    book.revoke("dora", by="admin")
    store.close()
    again = UserBook(SqliteStore(tmp_path / "db.sqlite"), clock)
    assert again.get("dora").revoked_by == "admin" and again.by_token(token) is None
    assert token not in (tmp_path / "db.sqlite").read_bytes().decode(errors="replace")


def _job(job_id: int, user: str, state: JobState, placements: tuple[Placement, ...] = (), packed: int = 0) -> JobRecord:
    spec = JobSpec(name=f"j{job_id}", command=("x",), gpus=1, user=user)
    return JobRecord(job_id, spec, "t", 0.0, state, (Transition(None, JobState.SUBMITTED, "s", 0.0),),
                     placements=placements, packed_with=packed)


def test_per_user_figures_count_live_jobs_and_a_packed_gpu_once() -> None:
    host = _job(1, "alice", JobState.RUNNING, (Placement("n", 1, 4.0, 8.0),))
    guest = _job(2, "bob", JobState.RUNNING, (Placement("n", 1, 2.0, 4.0),), packed=1)
    waiting = _job(3, "bob", JobState.QUEUED)
    done = _job(4, "alice", JobState.SUCCEEDED)
    usage = usage_by_user([host, guest, waiting, done])
    assert list(usage) == ["alice", "bob"]
    assert (usage["alice"].running, usage["alice"].waiting, usage["alice"].allocated) == (1, 0, Resources(1, 4, 8))
    assert (usage["bob"].running, usage["bob"].waiting, usage["bob"].allocated) == (1, 1, Resources(0, 2, 4))
    assert MemoryStore().users() == []


def test_a_job_name_means_the_callers_own_job_when_they_have_one() -> None:
    """Names are reused once a job ends: bob's `cancel train` is his ended job of that name,
    not alice's live one (which he may not touch); with none of his own, the most recent."""
    config = DaemonConfig(state_dir=Path("unused"), round_s=10)
    logic = Logic.build(DaemonContext(config, ManualClock(), MemoryStore(), ProfileBook({})))
    spec = JobSpec(name="train", command=("x",), gpus=1, profiler="none")
    bobs = logic.jobs.submit(replace(spec, user="bob"))
    logic.jobs.cancel(bobs, "done")
    alices = logic.jobs.submit(replace(spec, user="alice"))
    assert logic.jobs.find("train", user="bob").id == bobs.id
    assert logic.jobs.find("train", user="carol").id == logic.jobs.find("train").id == alices.id
