"""Issue 6, defect 2 (the remedy): `synergy admin backup` online and `synergy admin restore` offline.

A damaged database is refused at start (test_damaged_database.py); these commands are the
way back: a consistent snapshot taken while the daemon serves, and an offline restore that
keeps the tokens, refuses a running daemon and a bad file, and changes nothing when refused.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
from cli_runner import run_cli
from statedir_helpers import assert_refused, run_synergyd

from synergy.scheduler.statedir import check_database


def synergy(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    r = run_cli(capsys, *args)
    return r.code, r.out, r.err


def test_backup_while_serving_then_restore(start_daemon, capsys, tmp_path: Path) -> None:
    daemon = start_daemon("--log-level", "warning")
    state = daemon.state_dir
    admin = daemon.admin()
    for i in range(50):
        admin.submit(f"before{i}")
    stop = threading.Event()
    submitted_during: list[int] = []

    def keep_submitting() -> None:  # the daemon keeps serving (and committing) during the backup
        i = 0
        while not stop.is_set():
            admin.submit(f"during{i}")
            i += 1
        submitted_during.append(i)

    writer = threading.Thread(target=keep_submitting)
    writer.start()
    backup = tmp_path / "backups" / "synergyd-backup.sqlite"
    backup.parent.mkdir()
    try:
        code, out, err = synergy(capsys, "--state-dir", str(state), "--json", "admin", "backup", str(backup))
    finally:
        stop.set()
        writer.join(timeout=60)
    assert code == 0, err
    report = json.loads(out)
    assert report["path"] == str(backup) and report["bytes"] == backup.stat().st_size
    assert 50 <= report["jobs"] <= 50 + submitted_during[0]
    assert check_database(backup, full=True).jobs == report["jobs"]
    assert backup.stat().st_mode & 0o777 == 0o600  # it holds every job's token
    assert [p.name for p in backup.parent.iterdir()] == [backup.name]  # no temp file left
    assert not list(state.glob(".tmp-*"))  # nor in the state dir

    # Offline only: a running daemon holds the lock, and nothing changes.
    before = (state / "synergyd.sqlite").stat().st_ino
    code, _, err = synergy(capsys, "admin", "restore", str(backup), "--state-dir", str(state))
    assert code == 1 and "another synergyd" in err and "stop it before restoring" in err
    assert err.count("\n") == 1 and (state / "synergyd.sqlite").stat().st_ino == before
    admin.close()
    assert daemon.terminate() == 0

    tokens = {n: (state / n).read_text() for n in ("admin.token", "cluster.token")}
    (state / "synergyd.sqlite").write_bytes(b"")  # the damage
    assert_refused(run_synergyd(state), 3, "empty database")

    garbage = tmp_path / "not-a-backup.sqlite"
    garbage.write_bytes(os.urandom(8192))
    code, _, err = synergy(capsys, "admin", "restore", str(garbage), "--state-dir", str(state))
    assert code == 2 and "not a database" in err and "nothing was changed" in err and err.count("\n") == 1
    assert (state / "synergyd.sqlite").stat().st_size == 0

    code, out, err = synergy(capsys, "admin", "restore", str(backup), "--state-dir", str(state))
    assert code == 0, err
    assert out.startswith(f"restored {state / 'synergyd.sqlite'}") and f"{report['jobs']} jobs" in out
    assert {n: (state / n).read_text() for n in tokens} == tokens
    assert (state / "synergyd.sqlite").stat().st_mode & 0o777 == 0o600
    assert (state / "synergyd.sqlite.before-restore").stat().st_size == 0  # the replaced file is kept

    again = start_daemon(state_dir=state)
    code, out, err = synergy(capsys, "--state-dir", str(state), "jobs", "--all", "--json")
    assert code == 0, err  # the same admin token still works (--all: every user's jobs)
    assert len(json.loads(out)["jobs"]) == report["jobs"]
    assert again.alive()


def test_backup_needs_the_admin_token_and_leaves_nothing_when_refused(start_daemon, capsys, tmp_path: Path) -> None:
    daemon = start_daemon()
    wrong = tmp_path / "wrong.token"
    wrong.write_text("not-the-admin-token-at-all")
    backup = tmp_path / "b.sqlite"
    code, _, err = synergy(capsys, "--address", daemon.address, "--token-file", str(wrong),
                           "admin", "backup", str(backup))
    assert code == 1 and "does not know who you are" in err and err.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.endswith((".sqlite", ".tmp"))) == []


def test_backup_and_restore_check_their_paths(capsys, tmp_path: Path) -> None:
    code, _, err = synergy(capsys, "--state-dir", str(tmp_path), "admin", "backup", str(tmp_path / "no" / "b.sqlite"))
    assert code == 2 and "does not exist" in err
    code, _, err = synergy(capsys, "admin", "restore", str(tmp_path / "missing.sqlite"), "--state-dir", str(tmp_path))
    assert code == 2 and "no such file" in err
    (tmp_path / "b.sqlite").write_bytes(b"")
    code, _, err = synergy(capsys, "admin", "restore", str(tmp_path / "b.sqlite"), "--state-dir",
                           str(tmp_path / "nowhere"))
    assert code == 2 and "no such directory" in err
