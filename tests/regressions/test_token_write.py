"""Issue 6, defect 3: a full disk at first start blocked every later start.

Before: with 4-8 KB free, the first start left an empty `cluster.token` (created, then the
write failed), and every later start failed with "token file ... holds fewer than 16
characters", even with space again. Now tokens are written atomically (temp file, fsync,
rename, fsync dir), the database is opened before them, a start that cannot write either
fails with one line, and the next start works once there is space. The full disk is real
(a small tmpfs) where this machine lets us mount one, and injected otherwise.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from pathlib import Path
from typing import Callable, Iterator

import pytest
from statedir_helpers import Outcome, run_synergyd
from synergyd_harness import DaemonProcess

TOKENS = ("admin.token", "cluster.token")


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Callable[[int], Path]]:
    """mount(kib): a fresh tmpfs of that size (skips where mounting is not allowed)."""
    mounts: list[Path] = []

    def mount(kib: int) -> Path:
        point = tmp_path / f"disk{len(mounts)}"
        point.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={kib}k,mode=700", "tmpfs", str(point)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs to fill up for real (needs root / CAP_SYS_ADMIN): {done.stderr.strip()}")
        mounts.append(point)
        return point

    yield mount
    for point in mounts:
        subprocess.run(["umount", "-l", str(point)], capture_output=True)


def fill(disk: Path, leave_kib: int) -> Path:
    """Leave `leave_kib` KiB free on `disk`; returns the filler to delete for space."""
    st = os.statvfs(disk)
    filler = disk / "filler"
    filler.write_bytes(b"\0" * (st.f_bavail * st.f_frsize - leave_kib * 1024))
    return filler


def assert_clean_failure(outcome: Outcome) -> str:
    assert not outcome.started, outcome.stderr
    assert "Traceback" not in outcome.stderr, outcome.stderr
    lines = outcome.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("synergyd: "), outcome.stderr
    assert outcome.code == 1, (outcome.code, outcome.stderr)
    return lines[0]


def assert_no_partial_tokens(state: Path) -> None:
    for name in TOKENS:
        path = state / name
        assert not path.exists() or len(path.read_text().strip()) >= 16, f"{name} left partial"
    assert not list(state.glob(".tmp-*")), "temp files left behind"


def assert_starts(state: Path) -> None:
    outcome = run_synergyd(state)
    assert outcome.started, f"the next start failed:\n{outcome.stderr}"
    assert outcome.code == 0, outcome.stderr


@pytest.mark.parametrize("leave_kib", [4, 8])
def test_first_start_on_a_full_disk_leaves_a_dir_that_starts_later(small_disk, leave_kib: int) -> None:
    disk = small_disk(256)
    filler = fill(disk, leave_kib)
    state = disk / "state"
    line = assert_clean_failure(run_synergyd(state))
    assert "disk is full" in line or "No space left" in line
    assert_no_partial_tokens(state)
    filler.unlink()
    assert_starts(state)


@pytest.fixture(scope="module")
def database_without_tokens(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A healthy database from a first start, its tokens removed: what a start that died between them leaves."""
    state = tmp_path_factory.mktemp("fresh") / "state"
    DaemonProcess(state, "--log-level", "warning").start().terminate()
    for name in TOKENS:
        (state / name).unlink()
    return state / "synergyd.sqlite"


@pytest.mark.parametrize("leave_kib", [36, 40])
def test_tokens_that_do_not_fit_leave_nothing_partial(small_disk, database_without_tokens: Path,
                                                      leave_kib: int) -> None:
    # SQLite's WAL index takes 32 KiB when the database opens; what is left is too little
    # for both tokens (36: neither, 40: the admin token only).
    disk = small_disk(256)
    state = disk / "state"
    state.mkdir(mode=0o700)
    shutil.copy(database_without_tokens, state / "synergyd.sqlite")
    filler = fill(disk, leave_kib)
    line = assert_clean_failure(run_synergyd(state))
    assert "cannot write token file" in line and "No space left on device" in line
    assert_no_partial_tokens(state)
    filler.unlink()
    assert_starts(state)


def test_an_injected_write_failure_leaves_no_token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from synergy.scheduler import statedir
    from synergy.scheduler.statedir import StateDirError, ensure_token

    path = tmp_path / "admin.token"

    def full_disk(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(statedir.os, "fsync", full_disk)
    with pytest.raises(StateDirError, match=r"cannot write token file .*admin.token \(No space left on device\)"):
        ensure_token(path, warn=pytest.fail)
    assert list(tmp_path.iterdir()) == []  # neither the token nor its temp file
    monkeypatch.undo()
    token = ensure_token(path, warn=pytest.fail)
    assert len(token) >= 16 and path.read_text().strip() == token
    assert path.stat().st_mode & 0o777 == 0o600


def test_an_empty_token_left_by_an_older_synergyd_is_replaced(tmp_path: Path) -> None:
    state = tmp_path / "state"
    DaemonProcess(state, "--log-level", "warning").start().terminate()
    (state / "cluster.token").write_text("")
    admin = (state / "admin.token").read_text()
    outcome = run_synergyd(state)
    assert outcome.started and outcome.code == 0, outcome.stderr
    assert "was empty" in outcome.stderr and '"level":"warning"' in outcome.stderr
    assert len((state / "cluster.token").read_text().strip()) >= 16
    assert (state / "admin.token").read_text() == admin  # a good token is never replaced


def test_a_disk_that_fills_while_running_heals_without_a_restart(small_disk, start_daemon) -> None:
    """Guard for the documented behaviour (docs/daemon.md): writes answer UNAVAILABLE, nothing is lost."""
    import grpc

    disk = small_disk(2048)
    daemon = start_daemon("--log-level", "warning", state_dir=disk / "state")
    admin = daemon.admin()
    for i in range(5):
        admin.submit(f"before{i}")
    filler = fill(disk, 0)
    with pytest.raises(grpc.RpcError) as full:
        admin.submit("while-full")
    assert full.value.code() == grpc.StatusCode.UNAVAILABLE and "disk is full" in full.value.details()
    filler.unlink()
    admin.submit("after")
    assert [j.name for j in admin.jobs()] == [*(f"before{i}" for i in range(5)), "after"]
    admin.close()
    assert daemon.alive()
