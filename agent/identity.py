"""Who this agent is, across its own restarts: the instance id the daemon knows it by.

The daemon refuses a node id that is live under another instance (two agents must never run
one node's tasks), so the id must outlive the process: a restarted agent re-adopts the
tasks its previous process left running and is, to the daemon, the same instance. The id
therefore lives with those tasks' records, in the work dir, and the work dir is locked for
as long as the agent runs, so two agents can never share it (and with it an identity). A
second agent for the same node id on another host or work dir has another id and is refused.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from synergy.common.files import LockError, acquire_lock, write_atomically

INSTANCE_FILE = "instance.id"
LOCK_FILE = "agent.lock"


class IdentityError(RuntimeError):
    """The work dir is in use by another agent, or its identity cannot be read or written."""


@dataclass
class Identity:
    instance_id: str
    lock_fd: int

    def release(self) -> None:
        os.close(self.lock_fd)


def claim(work_dir: Path) -> Identity:
    """Lock `work_dir` and return its instance id, created on first use (0600, written atomically)."""
    work_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        fd = acquire_lock(work_dir, LOCK_FILE, owner="synergy-agent", flag="--work-dir")
    except LockError as exc:
        raise IdentityError(str(exc)) from None
    path = work_dir / INSTANCE_FILE
    try:
        value = path.read_text().strip() if path.exists() else ""
        if len(value) < 16 or not all(c in "0123456789abcdef" for c in value):
            value = secrets.token_hex(16)
            write_atomically(path, (value + "\n").encode())
    except OSError as exc:
        os.close(fd)
        raise IdentityError(f"--work-dir {work_dir}: cannot keep {INSTANCE_FILE} ({exc.strerror or exc})") from None
    return Identity(value, fd)
