"""Issue 6, defect 2: a damaged database was used silently or failed with a traceback.

Before: a 0-byte `synergyd.sqlite` next to the tokens started cleanly with 0 jobs; garbage
over a page started a daemon whose every write answered UNAVAILABLE forever (or failed with
a traceback). Now the start checks the database (quick_check and the schema) and refuses in
one line with exit code 3, and a database found damaged while running stops the daemon
(health NOT_SERVING, a critical log line, exit code 3).
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path

import grpc
import pytest
from statedir_helpers import assert_refused, corrupt_page, root_pages, run_synergyd
from synergyd_harness import DaemonProcess, wait_for

from synergy.v1 import admin_pb2

JOBS = 300
DAMAGED = 3


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A stopped daemon's state dir: tokens and a database with 300 jobs."""
    state = tmp_path_factory.mktemp("pristine") / "state"
    daemon = DaemonProcess(state, "--log-level", "warning", round_s=5).start()
    admin = daemon.admin()
    try:
        for i in range(JOBS):
            admin.submit(f"job{i}")
    finally:
        admin.close()
        assert daemon.terminate() == 0
    return state


@pytest.fixture
def state(pristine: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "state"
    shutil.copytree(pristine, copy)
    return copy


def test_truncated_database_next_to_tokens_is_refused(state: Path) -> None:
    (state / "synergyd.sqlite").write_bytes(b"")
    line = assert_refused(run_synergyd(state), DAMAGED, "has tokens but an empty database", "synergy admin restore")
    assert "start with a new state dir" in line
    assert (state / "synergyd.sqlite").stat().st_size == 0  # nothing was created over it


def test_missing_database_next_to_tokens_is_refused(state: Path) -> None:
    (state / "synergyd.sqlite").unlink()
    assert_refused(run_synergyd(state), DAMAGED, "has tokens but no database")
    assert not (state / "synergyd.sqlite").exists()


def test_garbage_over_a_table_page_is_refused(state: Path) -> None:
    db = state / "synergyd.sqlite"
    corrupt_page(db, root_pages(db)["jobs"])
    assert_refused(run_synergyd(state), DAMAGED, str(db), "damaged")


def test_garbage_over_an_index_page_is_refused(state: Path) -> None:
    # The load reads the jobs table, not this index: before, the start succeeded and every
    # later submit answered UNAVAILABLE "database disk image is malformed".
    db = state / "synergyd.sqlite"
    corrupt_page(db, root_pages(db)["jobs_by_name"])
    assert_refused(run_synergyd(state), DAMAGED, "damaged")


def test_garbage_over_the_header_is_refused(state: Path) -> None:
    corrupt_page(state / "synergyd.sqlite", 1)
    assert_refused(run_synergyd(state), DAMAGED, "not a database")


def test_a_database_damaged_while_running_stops_the_daemon(state: Path, start_daemon) -> None:
    daemon = start_daemon("--log-level", "warning", state_dir=state)
    admin = daemon.admin()
    db = state / "synergyd.sqlite"
    corrupt_page(db, root_pages(db)["jobs"])
    # The daemon reads from its page cache; another connection's commit (to an intact
    # table) makes it read the damaged page from disk, as a cold cache would.
    poke = sqlite3.connect(db, isolation_level=None)
    poke.execute("PRAGMA busy_timeout=10000")
    poke.execute("INSERT OR REPLACE INTO settings VALUES ('poke', '1')")
    poke.close()
    with pytest.raises(grpc.RpcError) as failed:
        admin.submit("after-damage")
    assert failed.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "malformed" in failed.value.details()
    admin.close()
    code = wait_for(lambda: daemon.proc.poll() if daemon.proc.poll() is not None else None, timeout=60,
                    what="synergyd to exit after finding its database damaged")
    assert code == DAMAGED
    log = daemon.log_text()
    assert '"level":"critical","event":"store.damaged"' in log
    assert log.strip().splitlines()[-1].startswith(f"synergyd: database {db} is damaged")
    assert_refused(run_synergyd(state), DAMAGED, "damaged")  # and the next start says why


def test_health_is_not_serving_once_the_database_is_damaged(state: Path) -> None:
    """In-process: the damage callback flips health and asks main to stop."""
    from synergy.scheduler.daemon.app import App
    from synergy.scheduler.daemon.config import load_config
    from synergy.scheduler.daemon.main import EVENTS

    app = App(load_config(["--state-dir", str(state), "--port", "0", "--round-s", "5"]))
    app.start(EVENTS)
    try:
        assert app.healthy() and not app.stopping.is_set()
        db = state / "synergyd.sqlite"
        corrupt_page(db, root_pages(db)["jobs"])
        poke = sqlite3.connect(db, isolation_level=None)
        poke.execute("INSERT OR REPLACE INTO settings VALUES ('poke', '1')")
        poke.close()
        with pytest.raises(sqlite3.DatabaseError):
            app.store.save_setting("policy", "fifo")  # settings is intact, but the commit ...
            app.store.save_jobs([app.store.job(1)])  # ... to the damaged jobs table fails
        assert app.stopping.is_set() and not app.healthy()
        assert app.damaged is not None and "malformed" in app.damaged
    finally:
        app.stop(grace_s=0)


def test_a_healthy_database_still_starts_with_its_jobs(state: Path, start_daemon) -> None:
    daemon = start_daemon(state_dir=state)
    admin = daemon.admin()
    try:
        assert len(admin.ListJobs(admin_pb2.ListJobsRequest(page_size=1000)).jobs) == JOBS
    finally:
        admin.close()
    assert os.stat(state / "synergyd.sqlite").st_size > 0
