"""Issue 6, defect 7 (part): a state dir or token readable by others was used without a word.

Before: a pre-existing state dir with mode 0755, or an `admin.token` / database readable by
others, was used as it was. Now the daemon tightens them (0700 / 0600) and logs a warning
for each, as ssh does for keys; where a mode cannot be changed it refuses in one line.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path

import pytest
from statedir_helpers import run_synergyd
from synergyd_harness import DaemonProcess


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_loose_modes_are_tightened_with_a_warning(tmp_path: Path) -> None:
    state = tmp_path / "state"
    DaemonProcess(state, "--log-level", "warning").start().terminate()
    os.chmod(state, 0o755)
    os.chmod(state / "admin.token", 0o644)
    os.chmod(state / "synergyd.sqlite", 0o604)
    outcome = run_synergyd(state)
    assert outcome.started and outcome.code == 0, outcome.stderr
    # The dir is 0711 with the Unix socket in it (issue 16): others may reach the socket, not list the dir.
    assert (mode(state), mode(state / "admin.token"), mode(state / "synergyd.sqlite")) == (0o711, 0o600, 0o600)
    assert mode(state / "cluster.token") == 0o600
    warnings = [json.loads(line) for line in outcome.stderr.splitlines() if '"statedir.warning"' in line]
    said = " ".join(w["message"] for w in warnings)
    assert all(w["level"] == "warning" for w in warnings) and len(warnings) == 3, outcome.stderr
    for name, was in ((str(state), "0755"), ("admin.token", "0644"), ("synergyd.sqlite", "0604")):
        assert name in said and f"mode {was}, readable by others" in said


def test_tight_modes_are_left_alone_without_a_word(tmp_path: Path) -> None:
    state = tmp_path / "state"
    DaemonProcess(state, "--log-level", "warning").start().terminate()
    outcome = run_synergyd(state)
    assert outcome.started and "statedir.warning" not in outcome.stderr, outcome.stderr


def test_a_mode_that_cannot_be_tightened_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Not the owner: chmod fails with EPERM. (Tests run as root, who may chmod anything,
    # and a second user cannot run this virtualenv's interpreter here, so it is injected.)
    from synergy.scheduler import statedir
    from synergy.scheduler.statedir import StateDirError, tighten_permissions

    os.chmod(tmp_path, 0o700)
    (tmp_path / "admin.token").write_text("x" * 43)
    os.chmod(tmp_path / "admin.token", 0o644)

    def not_owner(path: object, mode: int) -> None:
        raise PermissionError(errno.EPERM, os.strerror(errno.EPERM))

    monkeypatch.setattr(statedir.os, "chmod", not_owner)
    with pytest.raises(StateDirError) as refused:
        tighten_permissions(tmp_path)
    message = str(refused.value)
    assert "\n" not in message and "admin.token has mode 0644" in message
    assert "cannot be tightened (Operation not permitted)" in message and "chmod 600" in message
